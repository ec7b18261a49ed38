"""Rebuild a broker's cache files from the committed tail, before a partition opens.

A broker on object storage keeps each unsealed segment file in its local cache
(``sparklog.storage.fs.tiered``); what makes its bytes durable is the committed tail: the
``TailEntry`` chunks the broker's committer recorded. Before ``PartitionLog.open`` recovers
a partition, ``materialize`` makes every unsealed segment file the manifest names hold
exactly its committed bytes:

- the committed end of a segment is where the chain of its chunks, from the file header
  on, stops (chunks may overlap: a round taken again after a failed one; overlapping bytes
  are the same bytes, since one leader epoch's writer writes each position of its own
  segment file once);
- a cache file at least that long (this broker wrote it) is truncated to it: whatever lies
  past it was never committed, so never acknowledged;
- a shorter or missing one (a new machine, a wiped cache, another broker's segment) is
  written anew: the file header, then the chunks' bytes, read by ranged GETs, one request
  per object however many chunks it holds, several objects at once - together with the
  other take-overs running on the broker at the same time, whose slices lie in the same
  round objects (``fetch.SharedFetch``).

Recovery then walks the frames as for any active segment (CRC, offsets), so a corrupt
chunk is found there.

Segments past the manifest's active one (``past_active``) are rolls the writer kept for
its next commit (``sparklog.storage.rolls``) and never committed: their chunks are in the
tail, so they are rebuilt too, and ``recovery.open_partition`` commits the rolls.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable

from sparklog.storage import names
from sparklog.storage.active import FILE_HEADER, FILE_HEADER_SIZE
from sparklog.storage.fs import FileSystem
from sparklog.storage.manifest import Manifest
from sparklog.storage.tail.fetch import Participant, SharedFetch
from sparklog.storage.tail.objects import TailEntry

log = logging.getLogger(__name__)


def chain(entries: Iterable[TailEntry]) -> list[tuple[TailEntry, int]]:
    """The chunks of one segment that make its committed bytes, in file order, each with
    the first position it contributes (overlaps skipped); stops at a gap."""
    out: list[tuple[TailEntry, int]] = []
    at = FILE_HEADER_SIZE
    for e in sorted(entries, key=lambda e: (e.start, -e.end)):
        if e.end <= at:
            continue
        if e.start > at:
            log.warning(
                "%s: committed tail has a gap at %d (next chunk %d)", e.segment, at, e.start
            )
            break
        out.append((e, at))
        at = e.end
    return out


def committed_end(entries: Iterable[TailEntry]) -> tuple[int, int]:
    """(file size, next offset) of a segment's committed bytes (the header alone: base)."""
    links = chain(entries)
    if not links:
        return FILE_HEADER_SIZE, -1
    last = links[-1][0]
    return last.end, last.next


def past_active(manifest: Manifest | None, entries: Iterable[TailEntry]) -> list[str]:
    """The segments with committed chunks that start past the manifest's active segment,
    in offset order: rolls made after the last manifest commit."""
    if manifest is None:
        return []
    active_base = manifest.active.base_offset
    later = {}
    for e in entries:
        parsed = names.parse_segment_name(e.segment)
        if parsed is not None and parsed.base_offset > active_base:
            later[e.segment] = parsed.base_offset
    return sorted(later, key=later.__getitem__)


def materialize(
    fs: FileSystem,
    root: str,
    partition_path: str,
    manifest: Manifest | None,
    entries: list[TailEntry],
    also: Iterable[str] = (),
    participant: Participant | None = None,
) -> int:
    """Make the cache's unsealed segment files of one partition (and the segments ``also``
    names: ``past_active``'s) hold exactly their committed bytes (module docstring).
    ``fs`` is the broker's tiered filesystem, ``root`` the storage root the entries'
    objects are relative to; ``participant``: this take-over's place in its broker's
    ``SharedFetch`` (left here, fetched or not). Returns the bytes fetched."""
    part = participant if participant is not None else SharedFetch().join()
    try:
        return _materialize(fs, root, partition_path, manifest, entries, also, part)
    finally:
        part.leave()


def _materialize(
    fs: FileSystem,
    root: str,
    partition_path: str,
    manifest: Manifest | None,
    entries: list[TailEntry],
    also: Iterable[str],
    part: Participant,
) -> int:
    by_segment: dict[str, list[TailEntry]] = defaultdict(list)
    for e in entries:
        by_segment[e.segment].append(e)
    unsealed = [] if manifest is None else [s.name for s in manifest.segments if not s.sealed]
    unsealed += list(also)
    fetch: list[tuple[str, str, list[tuple[TailEntry, int]]]] = []
    for name in unsealed:
        links = chain(by_segment.get(name, []))
        end = links[-1][0].end if links else FILE_HEADER_SIZE
        path = fs.join(partition_path, name)
        have = fs.size(path) if fs.exists(path) else 0
        if have >= end and have >= FILE_HEADER_SIZE:
            if have > end:
                f = fs.open_append(path)
                try:
                    f.truncate(end)
                finally:
                    f.close()
            continue
        fetch.append((name, path, links))
    if not fetch:
        return 0
    wanted: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for _name, _path, links in fetch:
        for e, first in links:
            wanted[fs.join(root, e.object)].append((e.at + first - e.start, e.at + e.end - e.start))
    got = part.fetch(fs, wanted)
    fetched = 0
    for name, path, links in fetch:
        f = fs.open_append(path)
        try:
            f.truncate(0)
            f.write(FILE_HEADER)
            for e, first in links:
                at = e.at + first - e.start
                data = got[fs.join(root, e.object)][(at, e.at + e.end - e.start)]
                f.write(data)
                fetched += len(data)
            f.sync()
        finally:
            f.close()
        for index in names.segment_files(name)[1:]:  # rebuilt from the frames on open
            fs.delete(fs.join(partition_path, index))
    log.info(
        "%s: rebuilt %d cache file(s) from the tail (%d bytes)", partition_path, len(fetch), fetched
    )
    return fetched
