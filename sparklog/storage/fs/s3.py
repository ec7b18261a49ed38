"""S3 backend (AWS S3 and S3-compatible stores: SeaweedFS, MinIO, Ceph) on ``obstore``.

A root ``s3://bucket/prefix`` is opened by ``S3FileSystem.from_uri``. Paths are
``<bucket>/<key>`` (what ``pyarrow.fs`` uses for S3 too), so the root path of
``s3://b/data`` is ``b/data`` and its topics live under the keys ``data/topics/...``.
Endpoint and credentials come as every S3 tool takes them: ``AWS_ENDPOINT_URL_S3`` or
``AWS_ENDPOINT_URL`` (an on-premises server; ``http://`` is allowed when given explicitly),
``AWS_REGION`` or ``AWS_DEFAULT_REGION`` (``us-east-1`` when an endpoint is given without
one), ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN`` (else the
instance's role). Calls are ``obstore``'s synchronous ones (its Rust runtime does the I/O).

Layout and guarantees in the bucket:

- A file is one object whose key is its path; it appears whole or not at all (a PUT, or a
  multipart upload completed at ``close`` of ``open_output``). A completed PUT is durable,
  so ``sync_file`` and ``sync_dir`` do nothing.
- **``create_exclusive`` is a conditional PUT** (``If-None-Match: *``, obstore's
  ``mode="create"``): of writers racing for one key, on any number of hosts, exactly one
  succeeds and the others get 412, which is ``False`` here. This is atomic only where the
  store implements conditional writes (AWS S3 since 2024, SeaweedFS since 4.18; for
  others see their documentation); a store that ignores the header lets the second writer
  overwrite. One
  ambiguity is inherent to HTTP: a PUT whose answer is lost (a timeout, a reset) may have
  landed, and its retry then gets 412. ``create_exclusive`` retries the PUT itself and,
  told the object exists after an attempt that failed, reads it back: ``True`` if it
  holds exactly the bytes written (``_create``).
- S3 has no directories. ``makedirs(d)`` creates an empty marker object ``d/.sparklog-dir``
  (a hidden name, so Spark and Hive skip it) so that an empty directory exists and lists as
  on a disk; a directory exists while its marker or any object lies below it. ``listdir``
  never shows markers. Stores with real folders (SeaweedFS's filer) may keep an emptied
  folder; ``delete_tree`` removes those entries too, with a DELETE of the folder's own
  key, which is a no-op on AWS.
- **No rename**: S3 has none, and this backend offers none (the seam has no rename).
  ``write_atomic`` replaces an object with one PUT, which readers see whole (old or new),
  never torn; ``overwrite_small`` is the same PUT. Nothing is built by write-then-rename,
  so no temporary objects are left behind.
- No appends (``supports_append = False``): an object cannot grow. Such a root holds what
  is written whole: sealed segments, manifests, checkpoints, topic metadata.
- ``redundant = True``: the store keeps the copies (S3's durability across zones; an
  on-premises store as its operators configure it).
- Reads: ``read_buffer`` is one GET; ``open_input`` one HEAD (the size), then ranges (GET
  with Range, at least 1 MiB each, buffered) for Parquet footers and row groups.
  ``listdir`` is one LIST with delimiter (more pages past 1,000 entries); ``exists`` and
  ``is_dir`` a HEAD and at most one LIST.

Requests are counted (``RequestCounts``) by kind - GET, ranged GET, HEAD, PUT, conditional
PUT, LIST, DELETE - per instance (``S3FileSystem.requests()``) and in this process
(``total_requests()``), for benchmarks and for tests that hold a path to a request budget
(no LIST on the hot paths). A count is one call the backend makes: the retries obstore
makes inside it are not counted, a multipart upload counts as one PUT, and a bulk DELETE or
a listing counts one request per 1,000 keys.

Errors: a missing object raises ``FileNotFoundError`` as on a disk; an unreachable
endpoint, a missing bucket and refused or missing credentials raise ``ObjectStoreError``
naming the bucket, the endpoint and what to set. Every request has timeouts and bounded
retries (``sparklog.storage.fs.s3client``, ``SPARKLOG_S3_*``): a store answering 5xx,
resetting connections or stalling makes a call fail with ``ObjectStoreError`` saying the
operation, the key, the endpoint and why, within seconds: no call hangs.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import posixpath
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import obstore
import pyarrow as pa
from obstore import exceptions as obx
from obstore.store import S3Store

from sparklog.errors import ObjectStoreError
from sparklog.storage.fs import AppendFile, FileSystem
from sparklog.storage.fs.s3client import S3ClientSettings, explain

if TYPE_CHECKING:
    from obstore import WritableFile

SCHEME = "s3://"
#: the empty object that makes a directory exist (see the module docstring)
DIR_MARKER = ".sparklog-dir"
_DEFAULT_REGION = "us-east-1"
_CONFLICT_RETRIES = 5


#: what ``RequestCounts`` counts (see the module docstring)
REQUEST_KINDS = ("GET", "RANGED_GET", "HEAD", "PUT", "CONDITIONAL_PUT", "LIST", "DELETE")
#: the least a ranged GET reads (what Parquet's small reads of one column chunk share)
READ_BUFFER_BYTES = 1024 * 1024
_PAGE_KEYS = 1000


class RequestCounts:
    """Requests made to a store, by kind (``REQUEST_KINDS``). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(REQUEST_KINDS, 0)

    def add(self, kind: str, n: int = 1) -> None:
        if kind not in self._counts:
            raise ValueError(f"unknown request kind {kind!r}: one of {', '.join(REQUEST_KINDS)}")
        with self._lock:
            self._counts[kind] += n

    def snapshot(self) -> dict[str, int]:
        """Every kind's count so far (a copy)."""
        with self._lock:
            return dict(self._counts)


_TOTAL = RequestCounts()


def total_requests() -> dict[str, int]:
    """The requests every ``S3FileSystem`` of this process has made so far, by kind."""
    return _TOTAL.snapshot()


def _pages(keys: int) -> int:
    """Requests a listing or a bulk DELETE of ``keys`` keys takes (1,000 keys each)."""
    return max(1, math.ceil(keys / _PAGE_KEYS))


def parse_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` -> ``(bucket, prefix)`` (prefix without slashes at its ends)."""
    if not uri.startswith(SCHEME):
        raise ValueError(f"{uri}: not an S3 URI (s3://bucket/prefix)")
    bucket, _, prefix = uri[len(SCHEME) :].partition("/")
    if not bucket:
        raise ValueError(f"{uri}: an S3 URI names a bucket (s3://bucket/prefix)")
    return bucket, prefix.strip("/")


def settings_from_env(environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """The endpoint and region the standard ``AWS_*`` variables give (None: AWS's default)."""
    env = os.environ if environ is None else environ
    endpoint = (
        env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or env.get("AWS_ENDPOINT")
    )
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region is None and endpoint:
        region = _DEFAULT_REGION
    return {"endpoint": endpoint or None, "region": region}


class _Writer(io.RawIOBase):
    """What ``pa.PythonFile`` wants around obstore's writer: ``closed`` is a property."""

    def __init__(
        self,
        inner: WritableFile,
        on_close: Callable[[], None],
        errors: Callable[[], contextlib.AbstractContextManager[None]],
    ) -> None:
        super().__init__()
        self._inner = inner
        self._on_close = on_close
        self._errors = errors  # the backend's error translation (parts upload as written)

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        # pyarrow hands over its buffers as views obstore does not take as bytes
        view = memoryview(data).cast("B")
        with self._errors():
            return int(self._inner.write(view))

    def close(self) -> None:
        if not self.closed:
            try:
                with self._errors():
                    self._inner.close()
                self._on_close()
            finally:
                super().close()


class _Reader(io.RawIOBase):
    """Random access to one object for ``pa.PythonFile``: each read the buffer does not
    hold is one ranged GET of at least ``READ_BUFFER_BYTES`` (counted)."""

    def __init__(self, fs: S3FileSystem, key: str, size: int) -> None:
        super().__init__()
        self._fs = fs
        self._key = key
        self.size = size
        self._pos = 0
        self._buf_start = 0
        self._buf = b""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        end = self.size if size is None or size < 0 else min(self.size, self._pos + size)
        if self._pos >= end:
            return b""
        buf_end = self._buf_start + len(self._buf)
        if not (self._buf_start <= self._pos and end <= buf_end):
            stop = min(self.size, max(end, self._pos + READ_BUFFER_BYTES))
            self._buf = self._fs._get_range(self._key, self._pos, stop)
            self._buf_start = self._pos
        lo = self._pos - self._buf_start
        data = self._buf[lo : lo + end - self._pos]
        self._pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class S3FileSystem(FileSystem):
    """One bucket of an S3 store; paths are ``<bucket>/<key>`` (see the module docstring)."""

    supports_append = False
    redundant = True

    def __init__(
        self,
        bucket: str,
        *,
        endpoint: str | None = None,
        region: str | None = None,
        environ: Mapping[str, str] | None = None,
        client: S3ClientSettings | None = None,
    ) -> None:
        """``endpoint`` and ``region`` override what the ``AWS_*`` variables say; those and
        the credentials are read from ``environ`` (default: the process's environment).
        obstore itself still falls back to the process's environment for anything neither
        gives (an instance role, for one). ``client``: the timeouts and retries, else the
        ``SPARKLOG_S3_*`` variables of ``environ`` (``sparklog.storage.fs.s3client``)."""
        found = settings_from_env(environ)
        self.bucket = bucket
        self.endpoint = endpoint or found["endpoint"]
        self.region = region or found["region"] or (_DEFAULT_REGION if self.endpoint else None)
        config: dict[str, Any] = {}
        if self.endpoint:
            config["endpoint"] = self.endpoint
        if self.region:
            config["region"] = self.region
        env = os.environ if environ is None else environ
        for key, name in (
            ("access_key_id", "AWS_ACCESS_KEY_ID"),
            ("secret_access_key", "AWS_SECRET_ACCESS_KEY"),
            ("session_token", "AWS_SESSION_TOKEN"),
        ):
            if env.get(name):
                config[key] = env[name]
        self.client = client or S3ClientSettings.from_env(env)
        # plain http only to an endpoint the user named with http:// (an on-premises store)
        options = self.client.client_options(
            allow_http=bool(self.endpoint and self.endpoint.startswith("http://"))
        )
        self.store = S3Store(
            bucket,
            config=config,  # type: ignore[arg-type]
            client_options=options,  # type: ignore[arg-type]
            retry_config=self.client.retry_config(),  # type: ignore[arg-type]
        )
        # conditional PUTs: obstore would retry one after a 5xx and could turn a lost
        # answer into "already exists"; create_exclusive retries them itself (_create)
        self._once = S3Store(
            bucket,
            config=config,  # type: ignore[arg-type]
            client_options=options,  # type: ignore[arg-type]
            retry_config=self.client.retry_config(retries=0),  # type: ignore[arg-type]
        )
        self._requests = RequestCounts()

    @classmethod
    def from_uri(
        cls,
        uri: str,
        environ: Mapping[str, str] | None = None,
        client: S3ClientSettings | None = None,
    ) -> tuple[S3FileSystem, str]:
        """The backend for ``s3://bucket/prefix`` and the root path in it (``bucket/prefix``)."""
        bucket, prefix = parse_uri(uri)
        fs = cls(bucket, environ=environ, client=client)
        return fs, posixpath.join(bucket, prefix) if prefix else bucket

    # ------------------------------------------------------------------------ requests

    def requests(self) -> dict[str, int]:
        """The requests this instance has made so far, by kind (``REQUEST_KINDS``)."""
        return self._requests.snapshot()

    def _count(self, kind: str, n: int = 1) -> None:
        self._requests.add(kind, n)
        _TOTAL.add(kind, n)

    def _get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object at ``key`` (one ranged GET)."""
        self._count("RANGED_GET")
        with self._errors("GET", key):
            return bytes(obstore.get_range(self.store, key, start=start, end=end))

    # ------------------------------------------------------------------------ paths, errors

    def _key(self, path: str) -> str:
        """The object key of ``path`` (``""`` for the bucket itself)."""
        bucket, _, key = path.strip("/").partition("/")
        if bucket != self.bucket:
            raise ValueError(f"{path}: not a path in bucket {self.bucket!r} (<bucket>/<key>)")
        return key.strip("/")

    def _where(self) -> str:
        return self.endpoint or f"AWS S3 ({self.region or 'default region'})"

    @contextlib.contextmanager
    def _errors(self, op: str, key: str, tries: int | None = None) -> Iterator[None]:
        """Turns obstore's errors into ``FileNotFoundError`` (a missing object) or
        ``ObjectStoreError`` saying what failed, where, and what to check (``tries``: how
        often the request was sent, when the backend retried it rather than obstore)."""
        try:
            yield
        except (obx.AlreadyExistsError, obx.PreconditionError):
            raise
        except (OSError, obx.BaseError) as e:  # obstore's writer raises plain OSErrors
            text = str(e)
            where = f"{SCHEME}{self.bucket}: {op} {key or '/'}"
            if "NoSuchBucket" in text:
                raise ObjectStoreError(
                    f"{where}: the bucket does not exist at {self._where()}; create it, or "
                    "name an existing bucket in the storage root"
                ) from None
            if isinstance(e, FileNotFoundError | obx.NotFoundError):
                raise FileNotFoundError(f"{SCHEME}{self.bucket}/{key}") from None
            what = explain(e, self.client, self._where(), tries).reason
            raise ObjectStoreError(f"{where} failed: {what}") from None

    def _head(self, key: str) -> Mapping[str, Any] | None:
        """The object's metadata, or None if there is no object at ``key``."""
        if not key:
            return None
        self._count("HEAD")
        try:
            with self._errors("HEAD", key):
                return obstore.head(self.store, key)
        except FileNotFoundError:
            return None

    def _marker(self, key: str) -> str:
        return posixpath.join(key, DIR_MARKER) if key else DIR_MARKER

    # ------------------------------------------------------------------------ metadata

    def exists(self, path: str) -> bool:
        key = self._key(path)
        return self._head(key) is not None or self.is_dir(path)

    def is_dir(self, path: str) -> bool:
        key = self._key(path)
        self._count("LIST")
        with self._errors("LIST", key):
            # listing the bucket answers even when it is empty, and fails when it is missing
            first = next(iter(obstore.list(self.store, key or None, chunk_size=1)), [])
        return not key or len(first) > 0

    def size(self, path: str) -> int:
        meta = self._head(self._key(path))
        if meta is None:
            raise FileNotFoundError(path)
        return int(meta["size"])

    def mtime_ms(self, path: str) -> int:
        key = self._key(path)
        meta = self._head(key) or self._head(self._marker(key))
        if meta is None:
            raise FileNotFoundError(path)
        return int(meta["last_modified"].timestamp() * 1000)

    def listdir(self, path: str) -> list[str]:
        key = self._key(path)
        with self._errors("LIST", key):
            listing = obstore.list_with_delimiter(self.store, key or None)
        self._count("LIST", _pages(len(listing["objects"]) + len(listing["common_prefixes"])))
        names = {posixpath.basename(p) for p in listing["common_prefixes"]}
        # a folder-backed store lists an emptied folder as an object named like the prefix
        names |= {posixpath.basename(o["path"]) for o in listing["objects"] if o["path"] != key}
        names.discard(DIR_MARKER)
        return sorted(names)

    def makedirs(self, path: str) -> None:
        key = self._key(path)
        if not key:
            return
        self._create(self._marker(key), b"")

    # ------------------------------------------------------------------------ deletion

    def delete(self, path: str) -> None:
        key = self._key(path)
        self._count("DELETE")
        with self._errors("DELETE", key):
            obstore.delete(self.store, key)

    def delete_tree(self, path: str) -> None:
        """Deletes every object below ``path`` (bulk DELETEs, one LIST per directory), then
        the folder entries a folder-backed store keeps, deepest first."""
        key = self._key(path)
        if not key:
            raise ValueError(f"{path}: refusing to delete a whole bucket")
        self._delete_below(key)

    def _delete_below(self, key: str) -> None:
        with self._errors("LIST", key):
            listing = obstore.list_with_delimiter(self.store, key)
        self._count("LIST", _pages(len(listing["objects"]) + len(listing["common_prefixes"])))
        objects = [o["path"] for o in listing["objects"] if o["path"] != key]
        for sub in listing["common_prefixes"]:
            self._delete_below(sub)
        with self._errors("DELETE", key):
            if objects:
                self._count("DELETE", _pages(len(objects)))
                obstore.delete(self.store, objects)
            self._count("DELETE")
            obstore.delete(self.store, key)

    # ------------------------------------------------------------------------ whole files

    def read_buffer(self, path: str) -> pa.Buffer:
        key = self._key(path)
        self._count("GET")
        with self._errors("GET", key):
            data = obstore.get(self.store, key).bytes()
        return pa.py_buffer(data)

    def open_input(self, path: str) -> pa.NativeFile:
        """One HEAD (the object's size), then ranged GETs as the file is read."""
        meta = self._head(self._key(path))
        if meta is None:
            raise FileNotFoundError(f"{SCHEME}{path}")
        return pa.PythonFile(_Reader(self, self._key(path), int(meta["size"])), mode="r")

    def open_output(self, path: str) -> pa.NativeFile:
        """A writer whose object appears, whole, when it is closed (one PUT up to 10 MiB,
        a multipart upload past that)."""
        key = self._key(path)
        with self._errors("PUT", key):
            writer = obstore.open_writer(self.store, key)
        return pa.PythonFile(
            _Writer(writer, lambda: self._count("PUT"), lambda: self._errors("PUT", key)),
            mode="w",
        )

    def sync_file(self, path: str) -> None:
        return None

    def sync_dir(self, path: str) -> None:
        return None

    def write_atomic(self, path: str, data: bytes) -> None:
        key = self._key(path)
        self._count("PUT")
        with self._errors("PUT", key):
            obstore.put(self.store, key, data)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """One conditional PUT; True if the file now holds ``data`` written by this call,
        False if it held something already (see ``_create`` for a lost answer)."""
        return self._create(self._key(path), data)

    def _create(self, key: str, data: bytes) -> bool:
        """The conditional PUT, retried here on 5xx answers, timeouts and lost connections
        (``self.client``'s budget). An attempt that failed may still have landed, so if a
        later one is told the object exists, the object is read back: holding exactly
        ``data`` means this call created it (True). A writer whose bytes are its own (they
        name it, its epoch) so learns the truth; two writers racing with identical bytes
        could both be told True after a fault, which leaves the object as both wanted."""
        started, attempt, conflicts, unsure = time.monotonic(), 0, 0, False
        budget_s = self.client.retry_timeout_ms / 1000
        while True:
            self._count("CONDITIONAL_PUT")
            try:
                obstore.put(self._once, key, data, mode="create")
                return True
            except obx.AlreadyExistsError:
                return unsure and self._holds(key, data)
            except obx.PreconditionError as e:
                # AWS answers 409 ConditionalRequestConflict while another conditional
                # write of the key is in flight: its outcome decides ours, so ask again
                conflicts += 1
                if conflicts > _CONFLICT_RETRIES:
                    raise ObjectStoreError(
                        f"{SCHEME}{self.bucket}/{key}: a conditional PUT kept conflicting "
                        f"with other writers ({_first_line(e)}); retry later"
                    ) from None
                time.sleep(0.05 * conflicts)
            except (FileNotFoundError, obx.BaseError) as e:
                spent = time.monotonic() - started
                last = attempt >= self.client.retries or spent > budget_s
                if last or not explain(e, self.client, self._where()).transient:
                    with self._errors("PUT", key, tries=attempt + 1):
                        raise
                unsure = True
                time.sleep(self.client.backoff_s(attempt))
                attempt += 1

    def _holds(self, key: str, data: bytes) -> bool:
        """Whether the object at ``key`` holds exactly ``data`` (one GET)."""
        self._count("GET")
        try:
            with self._errors("GET", key):
                return bytes(obstore.get(self.store, key).bytes()) == data
        except FileNotFoundError:
            return False

    def read_ranges(self, path: str, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Ranged GETs of one object (obstore coalesces nearby ranges into one request)."""
        if not ranges:
            return []
        key = self._key(path)
        self._count("RANGED_GET", len(ranges))
        with self._errors("GET", key):
            got = obstore.get_ranges(
                self.store, key, starts=[s for s, _ in ranges], ends=[e for _, e in ranges]
            )
        return [bytes(b) for b in got]

    def open_append(self, path: str) -> AppendFile:
        raise io.UnsupportedOperation(
            f"{path}: S3 objects cannot be appended to (supports_append is False); an S3 "
            "root holds whole files only"
        )


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
