"""Property tests of the sparse offset and time indexes (sparklog.storage.index).

Lookups are checked against brute-force models over random sorted entry lists; the time
index's guarantee ("no record before the returned offset has a timestamp >= the target")
is checked on indexes built by ``build_indexes`` from random frames and on the index files
of a real log written with non-monotonic timestamps.
"""

from __future__ import annotations

import itertools
import shutil
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.storage import names
from sparklog.storage.active import FILE_HEADER_SIZE, FrameHeader, build_indexes
from sparklog.storage.config import TopicConfig
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.index import ENTRY_SIZE, OffsetIndex, SparseIndex, TimeIndex
from sparklog.storage.log import PartitionLog
from sparklog.storage.records import make_records

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
FAST = settings(max_examples=150, deadline=None)
SLOW = settings(max_examples=25, deadline=None)

Entry = tuple[int, int]


# ---------------------------------------------------------------------------- strategies


@st.composite
def sorted_entries(draw: st.DrawFn, *, wide: bool = False) -> list[Entry]:
    """Entries with keys and values nondecreasing; narrow ranges give many duplicates."""
    n = draw(st.integers(min_value=0, max_value=40))
    if wide:
        keys = sorted(draw(st.lists(INT64, min_size=n, max_size=n)))
        values = sorted(draw(st.lists(INT64, min_size=n, max_size=n)))
        return list(zip(keys, values, strict=True))
    k = draw(st.integers(min_value=-1000, max_value=1000))
    v = draw(st.integers(min_value=0, max_value=1000))
    out = []
    for _ in range(n):
        k += draw(st.integers(min_value=0, max_value=3))
        v += draw(st.integers(min_value=0, max_value=3))
        out.append((k, v))
    return out


def build(cls: type[SparseIndex], entries: list[Entry]) -> SparseIndex:
    idx = cls()
    for k, v in entries:
        idx.append(k, v)
    return idx


def probe_keys(entries: list[Entry], extra: list[int]) -> list[int]:
    """Every key, its neighbours, and points below the first and above the last."""
    keys = {k for k, _ in entries}
    probes = set(extra) | keys | {k - 1 for k in keys} | {k + 1 for k in keys}
    if entries:
        probes |= {entries[0][0] - 100, entries[-1][0] + 100}
    return sorted(probes)


PROBES = st.lists(st.integers(min_value=-1200, max_value=1300), max_size=10)


def model_floor(entries: list[Entry], key: int) -> Entry | None:
    below = [e for e in entries if e[0] <= key]
    return below[-1] if below else None


def model_last_below(entries: list[Entry], key: int) -> Entry | None:
    below = [e for e in entries if e[0] < key]
    return below[-1] if below else None


def pack(entries: list[Entry]) -> bytes:
    return b"".join(struct.pack("<qq", k, v) for k, v in entries)


# ---------------------------------------------------------------------------- lookups vs model


@FAST
@given(sorted_entries(), PROBES)
def test_floor_agrees_with_brute_force(entries: list[Entry], extra: list[int]) -> None:
    idx = build(SparseIndex, entries)
    for key in probe_keys(entries, extra):
        assert idx.floor(key) == model_floor(entries, key), key


@FAST
@given(sorted_entries(), PROBES)
def test_last_below_agrees_with_brute_force(entries: list[Entry], extra: list[int]) -> None:
    idx = build(SparseIndex, entries)
    for key in probe_keys(entries, extra):
        assert idx.last_below(key) == model_last_below(entries, key), key


@FAST
@given(sorted_entries(), PROBES)
def test_offset_index_lookup_is_floor(entries: list[Entry], extra: list[int]) -> None:
    idx = build(OffsetIndex, entries)
    assert isinstance(idx, OffsetIndex)
    for key in probe_keys(entries, extra):
        assert idx.lookup(key) == model_floor(entries, key), key


@FAST
@given(sorted_entries(), PROBES)
def test_time_index_lookup_is_value_of_last_entry_below(
    entries: list[Entry], extra: list[int]
) -> None:
    idx = build(TimeIndex, entries)
    assert isinstance(idx, TimeIndex)
    for ts in probe_keys(entries, extra):
        e = model_last_below(entries, ts)
        assert idx.lookup(ts) == (e[1] if e else None), ts


@FAST
@given(sorted_entries(), st.integers(min_value=-1100, max_value=1200))
def test_truncate_keys_to_drops_entries_at_or_above_limit(entries: list[Entry], limit: int) -> None:
    idx = build(SparseIndex, entries)
    idx.truncate_keys_to(limit)
    assert list(zip(idx.keys, idx.values, strict=True)) == [e for e in entries if e[0] < limit]


@FAST
@given(sorted_entries(), st.integers(min_value=-10, max_value=1200))
def test_truncate_values_to_drops_entries_at_or_above_limit(
    entries: list[Entry], limit: int
) -> None:
    idx = build(SparseIndex, entries)
    idx.truncate_values_to(limit)
    assert list(zip(idx.keys, idx.values, strict=True)) == [e for e in entries if e[1] < limit]


@FAST
@given(sorted_entries(), st.data())
def test_append_rejects_an_entry_below_the_last(entries: list[Entry], data: st.DataObject) -> None:
    if not entries:
        return
    idx = build(SparseIndex, entries)
    last_k, last_v = entries[-1]
    lower_key = data.draw(st.booleans())
    key = last_k - data.draw(st.integers(1, 5)) if lower_key else last_k
    value = last_v if lower_key else last_v - data.draw(st.integers(1, 5))
    with pytest.raises(ValueError):
        idx.append(key, value)
    assert list(zip(idx.keys, idx.values, strict=True)) == entries


# ---------------------------------------------------------------------------- serialisation


@FAST
@given(sorted_entries(wide=True))
def test_append_returns_the_little_endian_entry_bytes(entries: list[Entry]) -> None:
    idx = SparseIndex()
    for k, v in entries:
        assert idx.append(k, v) == struct.pack("<qq", k, v)


@FAST
@given(sorted_entries(wide=True))
def test_to_bytes_is_the_documented_file_format(entries: list[Entry]) -> None:
    assert build(SparseIndex, entries).to_bytes() == pack(entries)


@FAST
@given(sorted_entries(wide=True), st.sampled_from([SparseIndex, OffsetIndex, TimeIndex]))
def test_to_bytes_from_bytes_round_trip(entries: list[Entry], cls: type[SparseIndex]) -> None:
    idx = build(cls, entries)
    back = cls.from_bytes(idx.to_bytes())
    assert back == idx
    assert type(back) is cls
    assert list(zip(back.keys, back.values, strict=True)) == entries


@FAST
@given(st.binary(max_size=200).filter(lambda b: len(b) % ENTRY_SIZE != 0))
def test_from_bytes_rejects_sizes_not_a_multiple_of_16(data: bytes) -> None:
    assert SparseIndex.from_bytes(data) is None


@FAST
@given(sorted_entries(), st.data())
def test_from_bytes_rejects_a_truncated_entry(entries: list[Entry], data: st.DataObject) -> None:
    raw = pack(entries) + pack([(0, 0)])
    cut = data.draw(st.integers(min_value=1, max_value=ENTRY_SIZE - 1))
    assert OffsetIndex.from_bytes(raw[:-cut]) is None


@st.composite
def non_monotonic(draw: st.DrawFn) -> list[Entry]:
    """A sorted list with one entry whose key or value drops below its predecessor's."""
    entries = draw(sorted_entries().filter(lambda e: len(e) >= 2))
    i = draw(st.integers(min_value=1, max_value=len(entries) - 1))
    drop = draw(st.integers(min_value=1, max_value=50))
    k, v = entries[i]
    pk, pv = entries[i - 1]
    if draw(st.booleans()):
        entries[i] = (pk - drop, v)
    else:
        entries[i] = (k, pv - drop)
    return entries


@FAST
@given(non_monotonic())
def test_from_bytes_rejects_non_monotonic_content(entries: list[Entry]) -> None:
    assert SparseIndex.from_bytes(pack(entries)) is None
    assert TimeIndex.from_bytes(pack(entries)) is None


def test_from_bytes_of_nothing_is_an_empty_index() -> None:
    idx = OffsetIndex.from_bytes(b"")
    assert idx is not None
    assert len(idx) == 0


def test_load_of_a_missing_file_is_none(tmp_path: Path) -> None:
    assert OffsetIndex.load(LocalFileSystem(), f"{tmp_path}/missing.index") is None


def test_load_reads_what_to_bytes_wrote(tmp_path: Path) -> None:
    fs = LocalFileSystem()
    idx = build(TimeIndex, [(5, 0), (9, 3), (9, 7)])
    path = f"{tmp_path}/x.timeindex"
    fs.write_new(path, idx.to_bytes())
    assert TimeIndex.load(fs, path) == idx


# ---------------------------------------------------------------------------- edge cases


@pytest.mark.parametrize("key", [-(2**63), -1, 0, 1, 2**63 - 1])
def test_empty_index_finds_nothing(key: int) -> None:
    assert OffsetIndex().lookup(key) is None
    assert OffsetIndex().last_below(key) is None
    assert TimeIndex().lookup(key) is None


EDGE = [(10, 100), (20, 200), (20, 250), (30, 300)]


def test_key_below_first_entry_finds_nothing() -> None:
    assert build(OffsetIndex, EDGE).lookup(9) is None
    assert build(TimeIndex, EDGE).lookup(10) is None


def test_offset_lookup_of_an_entry_key_returns_that_entry() -> None:
    idx = build(OffsetIndex, EDGE)
    assert idx.lookup(10) == (10, 100)
    assert idx.lookup(30) == (30, 300)


def test_offset_lookup_of_a_duplicated_key_returns_the_last_of_them() -> None:
    assert build(OffsetIndex, EDGE).lookup(20) == (20, 250)


def test_time_lookup_of_an_entry_key_returns_the_entry_before_it() -> None:
    idx = build(TimeIndex, EDGE)
    assert idx.lookup(20) == 100
    assert idx.lookup(21) == 250


def test_key_above_last_entry_finds_the_last() -> None:
    assert build(OffsetIndex, EDGE).lookup(10**12) == (30, 300)
    assert build(TimeIndex, EDGE).lookup(10**12) == 300


# ---------------------------------------------------------------------------- build_indexes


@st.composite
def frame_lists(draw: st.DrawFn) -> tuple[list[FrameHeader], list[int], int]:
    """Frames of an active segment: (headers, timestamp of each offset, base offset)."""
    base = draw(st.integers(min_value=0, max_value=10**6))
    n_frames = draw(st.integers(min_value=0, max_value=25))
    frames, stamps = [], []
    pos, offset = FILE_HEADER_SIZE, base
    for _ in range(n_frames):
        ts = draw(st.lists(st.integers(min_value=0, max_value=200), min_size=1, max_size=6))
        plen = draw(st.integers(min_value=1, max_value=600))
        h = FrameHeader(pos, plen, len(ts), offset, max(ts), 0)
        frames.append(h)
        stamps.extend(ts)
        pos, offset = h.end, h.next_offset
    return frames, stamps, base


def targets(stamps: list[int], extra: list[int]) -> list[int]:
    return sorted(set(stamps) | {t + 1 for t in stamps} | {-1, 0, 10**9} | set(extra))


def assert_time_index_sound(
    tidx: TimeIndex, stamps: list[int], base: int, target: int, where: str = ""
) -> None:
    """No record with an offset below ``tidx.lookup(target)`` has a timestamp >= target."""
    hint = tidx.lookup(target)
    if hint is None:
        return
    assert base <= hint <= base + len(stamps), (where, target, hint)
    before = stamps[: hint - base]
    assert all(t < target for t in before), (where, target, hint, before)


@FAST
@given(frame_lists(), st.integers(min_value=0, max_value=2000), st.lists(st.integers(-5, 210)))
def test_built_time_index_never_skips_a_match(
    frames_: tuple[list[FrameHeader], list[int], int], interval: int, extra: list[int]
) -> None:
    frames, stamps, base = frames_
    _, tidx = build_indexes(frames, interval)
    for t in targets(stamps, extra):
        assert_time_index_sound(tidx, stamps, base, t)


@FAST
@given(frame_lists(), st.integers(min_value=0, max_value=2000))
def test_built_time_index_points_at_frame_starts(
    frames_: tuple[list[FrameHeader], list[int], int], interval: int
) -> None:
    frames, _, _ = frames_
    _, tidx = build_indexes(frames, interval)
    starts = {h.base_offset for h in frames}
    assert set(tidx.values) <= starts


@FAST
@given(frame_lists(), st.lists(st.integers(-5, 210)))
def test_time_index_of_every_frame_finds_the_frame_of_the_first_match(
    frames_: tuple[list[FrameHeader], list[int], int], extra: list[int]
) -> None:
    """With interval 0 every frame is indexed, so the hint is the tightest frame start."""
    frames, stamps, base = frames_
    _, tidx = build_indexes(frames, 0)
    for t in targets(stamps, extra):
        first = next((base + i for i, ts in enumerate(stamps) if ts >= t), None)
        if first is None:
            want = frames[-1].base_offset if frames else None
        else:
            want = max(h.base_offset for h in frames if h.base_offset <= first)
        if want == base:
            want = None  # the first frame has no entry: nothing lies before it
        assert tidx.lookup(t) == want, t


@FAST
@given(frame_lists(), st.integers(min_value=0, max_value=2000))
def test_built_offset_index_gives_a_frame_start_at_or_below_every_offset(
    frames_: tuple[list[FrameHeader], list[int], int], interval: int
) -> None:
    frames, stamps, base = frames_
    oidx, _ = build_indexes(frames, interval)
    at = {h.base_offset: h.position for h in frames}
    if frames:
        assert oidx.lookup(base) == (base, FILE_HEADER_SIZE)
    for o in range(base, base + len(stamps)):
        entry = oidx.lookup(o)
        assert entry is not None
        assert entry[0] <= o
        assert at[entry[0]] == entry[1]


@FAST
@given(frame_lists(), st.integers(min_value=0, max_value=2000))
def test_built_offset_index_entries_are_spaced_by_the_interval(
    frames_: tuple[list[FrameHeader], list[int], int], interval: int
) -> None:
    """A frame is indexed once ``interval`` bytes of frames were written since the last entry."""
    frames, _, _ = frames_
    oidx, _ = build_indexes(frames, interval)
    positions = list(oidx.values)
    for a, b in itertools.pairwise(positions):
        assert b - a >= interval
        # no frame between the two entries had qualified yet
        assert all(h.position - a < interval for h in frames if a < h.position < b)


# ---------------------------------------------------------------------------- a real log


@contextmanager
def temp_root() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="sparklog-index-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


BATCHES = st.lists(
    st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=30),
    min_size=1,
    max_size=12,
)


def write_log(root: str, batches: list[list[int]], interval: int, roll_every: int) -> PartitionLog:
    cfg = TopicConfig.from_mapping({"segment.bytes": "4096", "index.interval.bytes": interval})
    log = PartitionLog.open(LocalFileSystem(), root, "t", 0, cfg, row_group_rows=4)
    for i, ts in enumerate(batches):
        log.append(make_records([b"v"] * len(ts), timestamps=ts))
        if roll_every and i % roll_every == roll_every - 1:
            log.roll()
    return log


def segment_stamps(log: PartitionLog, base: int, end: int) -> list[int]:
    out: list[int] = []
    for b in log.batches(base, end):
        out.extend(b.column("timestamp").cast(pa.int64()).to_pylist())
    return out


@SLOW
@given(
    BATCHES,
    st.sampled_from([0, 200, 1000, 4096]),
    st.integers(min_value=0, max_value=4),
    st.lists(st.integers(-5, 10_005), max_size=5),
)
def test_time_index_files_of_a_real_log_never_skip_a_match(
    batches: list[list[int]], interval: int, roll_every: int, extra: list[int]
) -> None:
    with temp_root() as root:
        log = write_log(root, batches, interval, roll_every)
        try:
            fs = log.fs
            for info in log.manifest.segments:
                end = info.next_offset if info.next_offset is not None else log.high_watermark
                stamps = segment_stamps(log, info.base_offset, end)
                assert len(stamps) == end - info.base_offset
                path = fs.join(log.path, names.time_index_name(info.name))
                tidx = TimeIndex.load(fs, path)
                assert tidx is not None, path
                for t in targets(stamps, extra):
                    assert_time_index_sound(tidx, stamps, info.base_offset, t, info.name)
        finally:
            log.close()


@SLOW
@given(BATCHES, st.sampled_from([0, 200, 4096]), st.lists(st.integers(-5, 10_005), max_size=5))
def test_time_index_files_stay_sound_after_reopen(
    batches: list[list[int]], interval: int, extra: list[int]
) -> None:
    """Reopening rebuilds the active segment's indexes; they keep the guarantee."""
    with temp_root() as root:
        write_log(root, batches, interval, 0).close()
        log = PartitionLog.open(
            LocalFileSystem(),
            root,
            "t",
            0,
            TopicConfig.from_mapping({"segment.bytes": "4096", "index.interval.bytes": interval}),
        )
        try:
            active = log.manifest.active
            stamps = segment_stamps(log, active.base_offset, log.high_watermark)
            raw = log.fs.read_bytes(log.fs.join(log.path, names.time_index_name(active.name)))
            tidx = TimeIndex.from_bytes(raw)
            assert tidx is not None
            for t in targets(stamps, extra):
                assert_time_index_sound(tidx, stamps, active.base_offset, t)
        finally:
            log.close()


@pytest.mark.parametrize("ts", [253_402_300_800_000, 2**63 - 1], ids=["year-10000", "int64-max"])
def test_sealed_time_index_accepts_timestamps_past_year_9999(ts: int, tmp_path: Path) -> None:
    """Record timestamps are any int64 of milliseconds (Kafka's are longs). Sealing builds
    the time index from the Parquet footer; that must not go through Python datetimes,
    which end at year 9999, or the rolled segment can never be sealed (nor the log
    reopened, since open redoes the seal)."""
    fs = LocalFileSystem()
    log = PartitionLog.open(fs, str(tmp_path), "t", 0, row_group_rows=1)
    try:
        log.append(make_records([b"a", b"b"], timestamps=[ts, 7]))
        log.roll()
        first = log.manifest.segments[0]
        assert first.sealed
        tidx = TimeIndex.load(fs, fs.join(log.path, names.time_index_name(first.name)))
        assert tidx == build(TimeIndex, [(ts, 1)])
    finally:
        log.close()
