"""Storage benchmark: durable appends and sealed-segment reads of one ``PartitionLog``.

Append phase, for each batch size (1,000 and 10,000 records by default):

* ``raw``       the same key+value bytes, one ``os.write`` + ``os.fdatasync`` per batch, to
                one plain ``O_APPEND`` file: the floor of what a durable append can cost.
* ``sparklog``  ``PartitionLog.append(batch)`` (durable: group commit, one fsync per append
                from a single writer) with ``auto_seal=True``: segments roll at
                ``segment.bytes`` and each rolled segment is sealed into Parquet on the
                background sealer thread, competing for the same 2 cores. Timed to the
                last append's return (what a producer sees); the time until the sealer
                has finished too is reported as the sustained, sealing-bound rate.
* ``no-seal``   the same with ``auto_seal=False``: rolls happen, sealing does not; the time
                ``seal_pending()`` then takes is reported separately.

Every append reuses one pre-built RecordBatch per batch size (key 16 B, value 100 B,
timestamp); the log assigns new offsets each time, so the loop measures the log, not data
generation. Payload MB = key + value bytes (116 B per record), 1 MB = 10^6 bytes.

Read phase: a log is filled until its first segment is sealed; that Parquet segment is read
whole and from its middle offset to its end with ``SealedSegment.read`` and
``PartitionLog.batches``, against ``pyarrow.parquet.read_table`` of the same file (with an
``offset >=`` filter for the mid range). Page cache warm (one untimed read first).

Each measurement runs ``--repeat`` times (interleaved) and the median is reported. Targets:
sparklog/raw >= 0.5 at 10,000-record batches; sealed read / read_table >= 0.9. The exit
status is 0 whether or not the targets are met.

    .venv/bin/python bench/storage.py --quick       # 1M records, 1 repeat, 32 MiB segments
    .venv/bin/python bench/storage.py               # 10M records, 3 repeats, 256 MiB segments
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from sparklog.storage.config import TopicConfig
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.log import PartitionLog
from sparklog.storage.records import TIMESTAMP_TYPE
from sparklog.storage.sealed import SealedSegment

KEY_SIZE = 16
VALUE_SIZE = 100
RECORD_PAYLOAD = KEY_SIZE + VALUE_SIZE
MIB = 1024 * 1024
MB = 1_000_000
TOPIC = "bench"
APPEND_TARGET = 0.5  # sparklog/raw at the largest batch size
READ_TARGET = 0.9  # sealed read / read_table
READ_SAMPLES = 5  # reads take ~0.1 s: take 5 samples per repeat


# ---------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Workload:
    batch_size: int
    batch: pa.RecordBatch  # key, value, timestamp: what PartitionLog.append takes
    payload: bytes  # the same key+value bytes, for the raw baseline


def _binary_array(data: bytes, width: int, n: int) -> pa.Array:
    """``n`` binary values of ``width`` bytes each, laid over ``data`` without a copy."""
    offsets = array("i", range(0, width * n + 1, width))
    if sys.byteorder != "little":
        offsets.byteswap()
    return pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data)]
    )


def make_workload(batch_size: int, seed: int = 42) -> Workload:
    """One batch of ``batch_size`` records, built once: distinct 16-byte decimal keys,
    100 random (incompressible) value bytes, one timestamp."""
    keys = b"".join(b"%016d" % i for i in range(batch_size))
    values = random.Random(seed).randbytes(batch_size * VALUE_SIZE)
    now_ms = int(time.time() * 1000)
    timestamps = pa.array([now_ms] * batch_size, pa.int64()).cast(TIMESTAMP_TYPE)
    batch = pa.RecordBatch.from_arrays(
        [
            _binary_array(keys, KEY_SIZE, batch_size),
            _binary_array(values, VALUE_SIZE, batch_size),
            timestamps,
        ],
        names=["key", "value", "timestamp"],
    )
    return Workload(batch_size, batch, keys + values)


# ---------------------------------------------------------------------------- append


@dataclass
class AppendRun:
    kind: str  # raw | sparklog | no-seal
    batch_size: int
    records: int
    seconds: float
    fsyncs: int = 0
    rolls: int = 0
    sealed: int = 0
    seal_seconds: float | None = None  # no-seal: seal_pending() afterwards
    drained_seconds: float | None = None  # sparklog: until the background seals are done
    log_bytes: int = 0  # bytes written to .arrow segment files
    latencies: list[float] = field(default_factory=list)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.records * RECORD_PAYLOAD / MB / self.seconds


def _fresh_dir(data_dir: str, prefix: str) -> str:
    os.sync()  # start each timed run with no dirty pages left over from the previous one
    return tempfile.mkdtemp(prefix=prefix, dir=data_dir)


def run_raw(data_dir: str, work: Workload, n_batches: int) -> AppendRun:
    d = _fresh_dir(data_dir, "raw-")
    path = os.path.join(d, "raw.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    payload = memoryview(work.payload)
    size = len(payload)
    try:
        t0 = time.perf_counter()
        for _ in range(n_batches):
            written = os.write(fd, payload)
            while written < size:
                written += os.write(fd, payload[written:])
            os.fdatasync(fd)
        seconds = time.perf_counter() - t0
    finally:
        os.close(fd)
        shutil.rmtree(d)
    return AppendRun(
        "raw",
        work.batch_size,
        n_batches * work.batch_size,
        seconds,
        fsyncs=n_batches,
        log_bytes=n_batches * size,
    )


def _arrow_bytes(partition: str) -> int:
    """Bytes of every .arrow segment file still on disk (sealed ones wait out the delete
    delay, so this is everything the run wrote to active segments)."""
    return sum(
        os.path.getsize(os.path.join(partition, n))
        for n in os.listdir(partition)
        if n.endswith(".arrow")
    )


def run_sparklog(
    data_dir: str, work: Workload, n_batches: int, config: TopicConfig, *, auto_seal: bool
) -> AppendRun:
    root = _fresh_dir(data_dir, "log-")
    fs = LocalFileSystem()
    log = PartitionLog.open(fs, root, TOPIC, 0, config, auto_seal=auto_seal)
    batch = work.batch
    latencies = [0.0] * n_batches
    clock = time.perf_counter
    try:
        t0 = last = clock()
        for i in range(n_batches):
            log.append(batch)
            now = clock()
            latencies[i] = now - last
            last = now
        seconds = last - t0
        log.wait_sealed()
        drained = clock() - t0
        expected = n_batches * work.batch_size
        if log.high_watermark != expected or log.log_end_offset != expected:
            raise AssertionError(
                f"high watermark {log.high_watermark}, log end {log.log_end_offset}, "
                f"expected {expected}"
            )
        segments = log.manifest.segments
        run = AppendRun(
            "sparklog" if auto_seal else "no-seal",
            work.batch_size,
            expected,
            seconds,
            fsyncs=log.fsync_count,
            rolls=sum(1 for s in segments if not s.active),
            sealed=sum(1 for s in segments if s.sealed),
            log_bytes=_arrow_bytes(log.path),
            latencies=latencies,
            drained_seconds=drained if auto_seal else None,
        )
        if not auto_seal:
            t1 = clock()
            run.sealed = len(log.seal_pending())
            run.seal_seconds = clock() - t1
        return run
    finally:
        log.close()
        shutil.rmtree(root)


# ---------------------------------------------------------------------------- read


@dataclass
class ReadRun:
    range_name: str  # whole | mid
    reader: str
    rows: int
    seconds: float

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds


def _count(batches: Iterable[pa.RecordBatch]) -> int:
    return sum(b.num_rows for b in batches)


def build_sealed_segment(
    data_dir: str, work: Workload, config: TopicConfig
) -> tuple[PartitionLog, str]:
    """A log appended to until its first segment is rolled and sealed; returns the open log
    and the directory to delete afterwards."""
    root = _fresh_dir(data_dir, "read-")
    log = PartitionLog.open(LocalFileSystem(), root, TOPIC, 0, config, auto_seal=True)
    limit = config.segment_bytes // (work.batch_size * RECORD_PAYLOAD) + 10
    for _ in range(limit):
        log.wait_sealed()
        if any(s.sealed for s in log.manifest.segments):
            break
        log.append(work.batch, durable=False)
    else:
        raise AssertionError("no segment was sealed")
    log.sync()
    return log, root


def read_benchmarks(
    log: PartitionLog, repeat: int
) -> tuple[dict[tuple[str, str], ReadRun], dict[str, object]]:
    info = next(s for s in log.manifest.segments if s.sealed)
    assert info.next_offset is not None
    fs, partition = log.fs, log.path
    path = fs.join(partition, info.name)
    start, end = info.base_offset, info.next_offset
    mid = start + (end - start) // 2

    def sealed_read(lo: int, verify: bool = True) -> Callable[[], int]:
        def run() -> int:
            # open + footer + indexes are timed too
            seg = SealedSegment(fs, partition, info.name, verify_checksums=verify)
            try:
                return _count(seg.read(lo, end))
            finally:
                seg.close()

        return run

    def log_batches(lo: int) -> Callable[[], int]:
        return lambda: _count(log.batches(lo, end))

    def read_table(lo: int, **kwargs: object) -> Callable[[], int]:
        filters = None if lo == start else [("offset", ">=", lo)]
        return lambda: int(pq.read_table(path, filters=filters, **kwargs).num_rows)

    cases: list[tuple[str, str, Callable[[], int], int]] = []
    for range_name, lo in (("whole", start), ("mid", mid)):
        cases += [
            (range_name, "SealedSegment.read", sealed_read(lo), end - lo),
            (range_name, "SealedSegment.read-nocrc", sealed_read(lo, False), end - lo),
            (range_name, "PartitionLog.batches", log_batches(lo), end - lo),
            (range_name, "pq.read_table", read_table(lo), end - lo),
            (
                range_name,
                "pq.read_table+crc",
                read_table(lo, page_checksum_verification=True),
                end - lo,
            ),
        ]
    for range_name, reader, fn, rows in cases:  # warm the page cache and the sealed cache
        got = fn()
        if got != rows:
            raise AssertionError(f"{reader} read {got} rows of [{range_name}], expected {rows}")
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(repeat * READ_SAMPLES):
        for range_name, reader, fn, _rows in cases:
            t0 = time.perf_counter()
            fn()
            samples.setdefault((range_name, reader), []).append(time.perf_counter() - t0)
    results = {
        (r, name): ReadRun(r, name, rows, statistics.median(samples[(r, name)]))
        for r, name, _fn, rows in cases
    }
    md = pq.ParquetFile(path).metadata
    facts: dict[str, object] = {
        "segment": info.name,
        "rows": end - start,
        "offsets": f"[{start}, {end})",
        "mid": mid,
        "file_mb": fs.size(path) / MB,
        "row_groups": md.num_row_groups,
    }
    return results, facts


# ---------------------------------------------------------------------------- report


def _median_run(runs: list[AppendRun]) -> AppendRun:
    return sorted(runs, key=lambda r: r.seconds)[len(runs) // 2]


def _fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)), line]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--records", type=int, default=None, help="records per run (10,000,000)")
    p.add_argument("--repeat", type=int, default=None, help="runs per measurement (3)")
    p.add_argument(
        "--data-dir",
        default=None,
        help="where to write (a fresh temp dir inside it is deleted at the end; "
        "default: under /tmp)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="1M records, 1 repeat, 32 MiB segments (unless given explicitly)",
    )
    p.add_argument("--batch-sizes", default="1000,10000")
    p.add_argument("--segment-mib", type=int, default=None, help="segment.bytes in MiB (256)")
    p.add_argument("--no-noseal", action="store_true", help="skip the auto_seal=False variant")
    p.add_argument("--skip-read", action="store_true")
    p.add_argument("--skip-append", action="store_true")
    args = p.parse_args(argv)
    records = args.records or (1_000_000 if args.quick else 10_000_000)
    repeat = args.repeat or (1 if args.quick else 3)
    segment_mib = args.segment_mib or (32 if args.quick else 256)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    # a 10,000-record batch (1.28 MB of keys, values and their offsets) exceeds Kafka's
    # default max.message.bytes (1 MiB), which a Kafka producer of such batches also raises
    max_message = max(16 * MIB, 2 * max(batch_sizes) * (RECORD_PAYLOAD + 8))
    config = TopicConfig.from_mapping(
        {"segment.bytes": str(segment_mib * MIB), "max.message.bytes": str(max_message)}
    )
    base = args.data_dir or "/tmp"
    os.makedirs(base, exist_ok=True)
    data_dir = tempfile.mkdtemp(prefix="sparklog-bench-", dir=base)
    started = time.perf_counter()

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"sparklog storage benchmark (load average at start {load})")
    print(
        f"  python {platform.python_version()}, pyarrow {pa.__version__}, "
        f"{os.cpu_count()} CPUs, data dir {data_dir}"
    )
    print(
        f"  records/run {records:,}, batch sizes {batch_sizes}, repeat {repeat} (median), "
        f"segment.bytes {segment_mib} MiB, max.message.bytes {max_message / MIB:g} MiB, "
        f"key {KEY_SIZE} B + value {VALUE_SIZE} B"
    )
    print(
        "  payload MB = key+value bytes, 10^6 B; 'sparklog' includes background sealing "
        "(auto_seal=True); 'no-seal' is auto_seal=False",
        flush=True,
    )
    append: dict[tuple[str, int], AppendRun] = {}
    reads: dict[tuple[str, str], ReadRun] = {}
    read_facts: dict[str, object] = {}
    try:
        if not args.skip_append:
            kinds = ["raw", "sparklog"] + ([] if args.no_noseal else ["no-seal"])
            works = {b: make_workload(b) for b in batch_sizes}
            runs: dict[tuple[str, int], list[AppendRun]] = {}
            for r in range(repeat):
                for b in batch_sizes:
                    n_batches = records // b
                    if n_batches == 0:
                        raise SystemExit(f"--records {records} is below the batch size {b}")
                    for kind in kinds:
                        if kind == "raw":
                            run = run_raw(data_dir, works[b], n_batches)
                        else:
                            run = run_sparklog(
                                data_dir, works[b], n_batches, config, auto_seal=kind == "sparklog"
                            )
                        runs.setdefault((kind, b), []).append(run)
                        extra = ""
                        if kind != "raw":
                            extra = (
                                f"  rolls {run.rolls} sealed {run.sealed} "
                                f"fsyncs {run.fsyncs} max append "
                                f"{max(run.latencies) * 1e3:.0f} ms"
                            )
                        if run.seal_seconds is not None:
                            extra += f"  seal_pending {run.seal_seconds:.2f} s"
                        if run.drained_seconds is not None:
                            extra += (
                                f"  sealed all by {run.drained_seconds:.2f} s "
                                f"({_fmt_rate(run.records / run.drained_seconds)} rec/s)"
                            )
                        print(
                            f"  [{r + 1}/{repeat}] {kind:>8} batch {b:>6,}: "
                            f"{run.seconds:7.2f} s {_fmt_rate(run.records_per_s):>11} rec/s "
                            f"{run.mb_per_s:8.1f} MB/s{extra}",
                            flush=True,
                        )
            append = {k: _median_run(v) for k, v in runs.items()}

        if not args.skip_read:
            print("  read phase: filling one segment ...", flush=True)
            work = make_workload(max(batch_sizes))
            log, root = build_sealed_segment(data_dir, work, config)
            try:
                reads, read_facts = read_benchmarks(log, repeat)
            finally:
                log.close()
                shutil.rmtree(root)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    elapsed = time.perf_counter() - started

    key_ratios: list[str] = []
    if append:
        print("\nAPPEND (durable; median of", repeat, "runs; time to the last append's return)")
        rows = []
        for b in batch_sizes:
            raw = append[("raw", b)]
            for kind in ("raw", "sparklog", "no-seal"):
                run = append.get((kind, b))
                if run is None:
                    continue
                lat = run.latencies
                rows.append(
                    [
                        f"{b:,}",
                        kind,
                        f"{run.seconds:.2f}",
                        _fmt_rate(run.records_per_s),
                        f"{run.mb_per_s:.1f}",
                        f"{run.records_per_s / raw.records_per_s:.3f}",
                        f"{run.log_bytes / run.records:.1f}",
                        f"{_pct(lat, 0.5) * 1e3:.2f}" if lat else "-",
                        f"{_pct(lat, 0.99) * 1e3:.2f}" if lat else "-",
                        f"{max(lat) * 1e3:.0f}" if lat else "-",
                        f"{run.rolls}/{run.sealed}" if kind != "raw" else "-",
                        f"{run.seal_seconds:.2f}" if run.seal_seconds is not None else "-",
                        _fmt_rate(run.records / run.drained_seconds)
                        if run.drained_seconds
                        else "-",
                    ]
                )
        print(
            _table(
                [
                    "batch",
                    "variant",
                    "sec",
                    "records/s",
                    "MB/s",
                    "x raw",
                    "B/rec",
                    "p50 ms",
                    "p99 ms",
                    "max ms",
                    "rolls/sealed",
                    "seal s",
                    "sealed rec/s",
                ],
                rows,
            )
        )
        print(
            "  x raw = records/s / raw records/s; B/rec = bytes written to the data file "
            "per record (raw: key+value; sparklog: .arrow frames);\n  rolls/sealed = "
            "segments rolled / sealed during the run (no-seal: sealed by seal_pending "
            "afterwards, 'seal s', not in 'sec');\n  sealed rec/s = records / time until "
            "the background sealer has also turned every rolled segment into Parquet"
        )
        for b in batch_sizes:
            ratio = append[("sparklog", b)].records_per_s / append[("raw", b)].records_per_s
            target = f" (target >= {APPEND_TARGET})" if b == max(batch_sizes) else ""
            verdict = "" if not target else " MET" if ratio >= APPEND_TARGET else " NOT MET"
            key_ratios.append(f"append sparklog/raw @ {b:,}: {ratio:.3f}{target}{verdict}")
            sp = append[("sparklog", b)]
            if sp.drained_seconds:
                sustained = sp.records / sp.drained_seconds / append[("raw", b)].records_per_s
                key_ratios.append(
                    f"append+seal sustained/raw @ {b:,}: {sustained:.3f} (sealing-bound, "
                    "informative)"
                )
            if ("no-seal", b) in append:
                ratio = append[("no-seal", b)].records_per_s / append[("raw", b)].records_per_s
                key_ratios.append(
                    f"append no-seal/raw  @ {b:,}: {ratio:.3f} (auto_seal=False, informative)"
                )
    if reads:
        f = read_facts
        print(
            f"\nREAD sealed segment {f['segment']}: {f['rows']:,} rows, offsets "
            f"{f['offsets']}, {f['file_mb']:.1f} MB, {f['row_groups']} row groups; "
            f"mid range from offset {f['mid']:,} "
            f"(median of {repeat * READ_SAMPLES}, page cache warm)"
        )
        rows = []
        for range_name in ("whole", "mid"):
            baseline = reads[(range_name, "pq.read_table")]
            for reader in (
                "SealedSegment.read",
                "SealedSegment.read-nocrc",
                "PartitionLog.batches",
                "pq.read_table",
                "pq.read_table+crc",
            ):
                rr = reads[(range_name, reader)]
                rows.append(
                    [
                        range_name,
                        reader,
                        f"{rr.rows:,}",
                        f"{rr.seconds * 1e3:.1f}",
                        _fmt_rate(rr.rows_per_s),
                        f"{rr.rows_per_s / baseline.rows_per_s:.3f}",
                    ]
                )
        print(_table(["range", "reader", "rows", "ms", "rows/s", "x read_table"], rows))
        print(
            "  pq.read_table: defaults (no page CRC check; mid range with filter "
            "offset >= mid); +crc: page_checksum_verification=True, as SealedSegment "
            "opens files"
        )
        for range_name in ("whole", "mid"):
            base_rate = reads[(range_name, "pq.read_table")].rows_per_s
            for reader in (
                "SealedSegment.read",
                "SealedSegment.read-nocrc",
                "PartitionLog.batches",
            ):
                ratio = reads[(range_name, reader)].rows_per_s / base_rate
                verdict = "MET" if ratio >= READ_TARGET else "NOT MET"
                key_ratios.append(
                    f"read {range_name:>5} {reader}/read_table: {ratio:.3f} "
                    f"(target >= {READ_TARGET}) {verdict}"
                )
            crc_rate = reads[(range_name, "pq.read_table+crc")].rows_per_s
            ratio = reads[(range_name, "SealedSegment.read")].rows_per_s / crc_rate
            key_ratios.append(
                f"read {range_name:>5} SealedSegment.read/read_table+crc: "
                f"{ratio:.3f} (same page-CRC checks, informative)"
            )
    print("\nKEY RATIOS")
    for line in key_ratios:
        print("  " + line)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"\ntotal run time {elapsed:.1f} s; load average at the end {load} "
        "(other processes' CPU and I/O move the raw baseline most)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
