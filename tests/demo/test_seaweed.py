"""The S3 server launcher (sparklog/demo/seaweed.py): what it does when ``weed mini`` cannot
start. The ``s3_server`` fixture stands for the prerequisites (weed, obstore): these tests
start servers of their own beside it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from sparklog.demo import seaweed
from sparklog.errors import DemoSetupError

from ..support.s3 import SeaweedS3


def _hold(port: int) -> socket.socket:
    held = socket.socket()
    held.bind(("127.0.0.1", port))
    held.listen()
    return held


def test_a_port_taken_before_weed_binds_it_is_given_up_for_fresh_ports(
    s3_server: SeaweedS3, tmp_path: Path
) -> None:
    server = SeaweedS3(str(tmp_path))
    first = server.ports["s3"]
    with _hold(first):
        server.start()
        try:
            assert server.ports["s3"] != first
            assert "Port allocation failed" in (tmp_path / "weed.1.log").read_text()
        finally:
            server.stop()


def test_a_server_that_never_starts_is_reported_with_the_end_of_its_log(
    s3_server: SeaweedS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(seaweed, "START_ATTEMPTS", 1)
    server = SeaweedS3(str(tmp_path))
    with _hold(server.ports["s3"]), pytest.raises(DemoSetupError) as raised:
        server.start()
    assert "before serving S3 (attempts: 1)" in str(raised.value)
    assert "Port allocation failed" in str(raised.value)
    assert server.proc is None


def test_ports_are_drawn_below_the_ephemeral_range() -> None:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_low = int(f.read().split()[0])
    low, high = seaweed._port_range()
    if ephemeral_low < 10000 + seaweed._GRPC_OFFSET + 2000:
        pytest.skip(f"the ephemeral range starts at {ephemeral_low}: no room below it")
    assert 10000 <= low < high and high + seaweed._GRPC_OFFSET < ephemeral_low
