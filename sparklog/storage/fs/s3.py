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
  ambiguity is inherent to HTTP: a PUT whose answer is lost (a timeout) is retried by the
  client, and if the first attempt did land, the retry gets 412 and this call returns
  ``False`` for a file it wrote.
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
- Reads: ``read_buffer`` is one GET; ``open_input`` reads ranges (GET with Range, buffered
  by 1 MiB) for Parquet footers and row groups. ``listdir`` is one LIST with delimiter
  (more pages past 1,000 entries); ``exists`` and ``is_dir`` a HEAD and at most one LIST.

Errors: a missing object raises ``FileNotFoundError`` as on a disk; an unreachable
endpoint, a missing bucket and refused or missing credentials raise ``ObjectStoreError``
naming the bucket, the endpoint and what to set.
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import time
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import obstore
import pyarrow as pa
from obstore import exceptions as obx
from obstore.store import S3Store

from sparklog.errors import ObjectStoreError
from sparklog.storage.fs import AppendFile, FileSystem

if TYPE_CHECKING:
    from obstore import ReadableFile, WritableFile

SCHEME = "s3://"
#: the empty object that makes a directory exist (see the module docstring)
DIR_MARKER = ".sparklog-dir"
_DEFAULT_REGION = "us-east-1"
_CONFLICT_RETRIES = 5
# A wrong endpoint should fail in seconds, not after obstore's default three minutes of
# retries; a busy store still gets five tries over about three seconds, each up to a minute.
_RETRY = {
    "max_retries": 5,
    "retry_timeout": timedelta(seconds=30),
    "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=2)},
}


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

    def __init__(self, inner: WritableFile) -> None:
        super().__init__()
        self._inner = inner

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        # pyarrow hands over its buffers as views obstore does not take as bytes
        view = memoryview(data).cast("B")
        return int(self._inner.write(view))

    def close(self) -> None:
        if not self.closed:
            try:
                self._inner.close()
            finally:
                super().close()


class _Reader(io.RawIOBase):
    """Random access over obstore's buffered ranged reader, for ``pa.PythonFile``."""

    def __init__(self, inner: ReadableFile) -> None:
        super().__init__()
        self._inner = inner

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return int(self._inner.seek(offset, whence))

    def tell(self) -> int:
        return int(self._inner.tell())

    def read(self, size: int = -1) -> bytes:
        if self.tell() >= self._inner.size:
            return b""
        return bytes(self._inner.read(None if size is None or size < 0 else size))

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
    ) -> None:
        """``endpoint`` and ``region`` override what the ``AWS_*`` variables say; those and
        the credentials are read from ``environ`` (default: the process's environment).
        obstore itself still falls back to the process's environment for anything neither
        gives (an instance role, for one)."""
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
        client: dict[str, Any] = {"connect_timeout": "5s", "timeout": "60s"}
        # plain http only to an endpoint the user named with http:// (an on-premises store)
        if self.endpoint and self.endpoint.startswith("http://"):
            client["allow_http"] = True
        self.store = S3Store(
            bucket,
            config=config,  # type: ignore[arg-type]
            client_options=client,  # type: ignore[arg-type]
            retry_config=_RETRY,  # type: ignore[arg-type]
        )

    @classmethod
    def from_uri(
        cls, uri: str, environ: Mapping[str, str] | None = None
    ) -> tuple[S3FileSystem, str]:
        """The backend for ``s3://bucket/prefix`` and the root path in it (``bucket/prefix``)."""
        bucket, prefix = parse_uri(uri)
        fs = cls(bucket, environ=environ)
        return fs, posixpath.join(bucket, prefix) if prefix else bucket

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
    def _errors(self, op: str, key: str) -> Iterator[None]:
        """Turns obstore's errors into ``FileNotFoundError`` (a missing object) or
        ``ObjectStoreError`` saying what failed, where, and what to check."""
        try:
            yield
        except (obx.AlreadyExistsError, obx.PreconditionError):
            raise
        except (FileNotFoundError, obx.BaseError) as e:
            text = str(e)
            where = f"{SCHEME}{self.bucket}: {op} {key or '/'}"
            if "NoSuchBucket" in text:
                raise ObjectStoreError(
                    f"{where}: the bucket does not exist at {self._where()}; create it, or "
                    "name an existing bucket in the storage root"
                ) from None
            if isinstance(e, FileNotFoundError | obx.NotFoundError):
                raise FileNotFoundError(f"{SCHEME}{self.bucket}/{key}") from None
            if isinstance(e, obx.PermissionDeniedError | obx.UnauthenticatedError):
                what = (
                    f"{self._where()} refused the credentials ({_first_line(e)}); set "
                    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY to a key that may read and "
                    "write this bucket"
                )
            elif "169.254.169.254" in text or "credential" in text.lower():
                what = (
                    "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                    "(or run where an instance role provides them)"
                )
            elif "error sending request" in text or "connect" in text.lower():
                what = (
                    f"cannot reach {self._where()}: check AWS_ENDPOINT_URL (or "
                    "AWS_ENDPOINT_URL_S3) and that the store is running"
                )
            else:
                what = _first_line(e)
            raise ObjectStoreError(f"{where} failed: {what}") from None

    def _head(self, key: str) -> Mapping[str, Any] | None:
        """The object's metadata, or None if there is no object at ``key``."""
        if not key:
            return None
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
        names = {posixpath.basename(p) for p in listing["common_prefixes"]}
        # a folder-backed store lists an emptied folder as an object named like the prefix
        names |= {posixpath.basename(o["path"]) for o in listing["objects"] if o["path"] != key}
        names.discard(DIR_MARKER)
        return sorted(names)

    def makedirs(self, path: str) -> None:
        key = self._key(path)
        if not key:
            return
        with contextlib.suppress(obx.AlreadyExistsError), self._errors("PUT", key):
            obstore.put(self.store, self._marker(key), b"", mode="create")

    # ------------------------------------------------------------------------ deletion

    def delete(self, path: str) -> None:
        key = self._key(path)
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
        objects = [o["path"] for o in listing["objects"] if o["path"] != key]
        for sub in listing["common_prefixes"]:
            self._delete_below(sub)
        with self._errors("DELETE", key):
            if objects:
                obstore.delete(self.store, objects)
            obstore.delete(self.store, key)

    # ------------------------------------------------------------------------ whole files

    def read_buffer(self, path: str) -> pa.Buffer:
        key = self._key(path)
        with self._errors("GET", key):
            data = obstore.get(self.store, key).bytes()
        return pa.py_buffer(data)

    def open_input(self, path: str) -> pa.NativeFile:
        key = self._key(path)
        with self._errors("HEAD", key):
            reader = obstore.open_reader(self.store, key)
        return pa.PythonFile(_Reader(reader), mode="r")

    def open_output(self, path: str) -> pa.NativeFile:
        """A writer whose object appears, whole, when it is closed (one PUT up to 10 MiB,
        a multipart upload past that)."""
        key = self._key(path)
        with self._errors("PUT", key):
            writer = obstore.open_writer(self.store, key)
        return pa.PythonFile(_Writer(writer), mode="w")

    def sync_file(self, path: str) -> None:
        return None

    def sync_dir(self, path: str) -> None:
        return None

    def write_atomic(self, path: str, data: bytes) -> None:
        key = self._key(path)
        with self._errors("PUT", key):
            obstore.put(self.store, key, data)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        key = self._key(path)
        for attempt in range(_CONFLICT_RETRIES + 1):
            try:
                with self._errors("PUT", key):
                    obstore.put(self.store, key, data, mode="create")
            except obx.AlreadyExistsError:
                return False
            except obx.PreconditionError as e:
                # AWS answers 409 ConditionalRequestConflict while another conditional
                # write of the key is in flight: its outcome decides ours, so ask again
                if attempt == _CONFLICT_RETRIES:
                    raise ObjectStoreError(
                        f"{SCHEME}{self.bucket}/{key}: a conditional PUT kept conflicting "
                        f"with other writers ({_first_line(e)}); retry later"
                    ) from None
                time.sleep(0.05 * (attempt + 1))
            else:
                return True
        raise AssertionError("unreachable")

    def open_append(self, path: str) -> AppendFile:
        raise io.UnsupportedOperation(
            f"{path}: S3 objects cannot be appended to (supports_append is False); an S3 "
            "root holds whole files only"
        )


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
