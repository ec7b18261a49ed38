"""One client connection of the broker (``sparklog.broker.connection``): what it knows of
the client, as the broker's log lines about the connection show it."""

from __future__ import annotations

from pathlib import Path

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


def test_requests_past_the_inflight_byte_budget_wait_and_are_all_answered_in_order(
    tmp_path: Path,
) -> None:
    """``max_inflight_bytes`` below one frame: pipelined produce requests are taken one at a
    time (a frame over the budget is still served alone), and every one is answered, in
    request order, with its records stored in that order."""
    conf = tmp_path / "broker.toml"
    conf.write_text("[broker]\nmax_inflight_bytes = 1024\n")
    broker = BrokerProcess(str(tmp_path / "data"), extra=("--config", str(conf))).start()
    try:
        with rf.RawConnection(broker.port) as conn:
            frames = [
                rf.request(rf.PRODUCE, 9, rf.produce_body("budget", 0, rf.record_batch(
                    [bytes([65 + i]) * 3000])), correlation_id=100 + i)
                for i in range(12)
            ]  # fmt: skip
            conn.send(b"".join(frames))  # all pipelined at once
            answers = []
            for _ in frames:
                frame = conn.recv_frame()
                assert frame is not None
                corr, resp = rf.parse_response(rf.PRODUCE, 9, frame)
                part = resp.responses[0].partition_responses[0]
                answers.append((corr, part.error_code, part.base_offset))
        assert answers == [(100 + i, 0, i) for i in range(12)]
    finally:
        broker.stop()
