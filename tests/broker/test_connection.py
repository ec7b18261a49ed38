"""One client connection of the broker (``sparklog.broker.connection``): what it knows of
the client, as the broker's log lines about the connection show it."""

from __future__ import annotations

from sparklog_testkit.processes import BrokerProcess

from . import raw_frames as rf


def test_a_closed_connection_is_logged_with_its_peer_and_client_software(
    broker: BrokerProcess,
) -> None:
    with rf.RawConnection(broker.port) as conn:
        conn.roundtrip(rf.API_VERSIONS, 3, rf.api_versions_body(3))  # names "raw-frames 1.0"
        port = conn.sock.getsockname()[1]
        conn.send(rf.sized(b"\x00\x12\x00\x03\x00\x00\x00\x01", declared=2**31 - 1))
        assert conn.closed_by_peer(timeout=5.0)
    line = broker.wait_for_line(lambda ln: "closing" in ln and f":{port}" in ln)
    assert line is not None and f"127.0.0.1:{port} (raw-frames 1.0)" in line, broker.lines[-5:]
