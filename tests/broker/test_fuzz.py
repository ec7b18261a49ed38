"""A live broker fed garbage frames (random bytes, random-bodied and mutated requests)
keeps running and keeps answering ApiVersions on a new connection."""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from sparklog_testkit.processes import BrokerProcess
from tests.kafka.strategies import MUTATED_REQUESTS, RANDOM_BODY_REQUESTS

from . import raw_frames as rf

NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = Path(tmp_path_factory.mktemp("fuzz-broker")) / "data"
    b = BrokerProcess(str(data)).start()
    try:
        yield b
    finally:
        b.stop()
        b.kill()


GARBAGE_FRAMES = st.one_of(
    st.binary(max_size=512),
    RANDOM_BODY_REQUESTS,
    MUTATED_REQUESTS,
)


@settings(max_examples=50, deadline=None, phases=NO_SHRINK)
@given(GARBAGE_FRAMES)
def test_live_broker_survives_garbage_frames(fuzz_broker: BrokerProcess, payload: bytes) -> None:
    if not fuzz_broker.alive:  # an earlier example killed it: start afresh for this one
        fuzz_broker.restart()
    with rf.RawConnection(fuzz_broker.port) as conn:
        conn.send(rf.sized(payload))
        with contextlib.suppress(TimeoutError, OSError):
            conn.recv_frame(timeout=1.0)  # a response, a close, or (acks=0) silence
    assert fuzz_broker.alive, "broker died:\n" + "\n".join(fuzz_broker.lines[-5:])
    rf.check_api_versions(fuzz_broker.port)


def test_gzip_helper_streams_a_valid_gzip_member() -> None:
    """The bomb helper's gzip output is one complete gzip member (so a refusal is the
    broker's limit, not a corrupt stream)."""
    data = rf.bomb_records(1, 3 << 20)
    d = zlib.decompressobj(wbits=47)
    assert len(d.decompress(data)) > 3 << 20
    assert d.eof
