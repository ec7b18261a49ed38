"""Where readers and writers get schemas: a registry's REST API, or the log itself.

``open_source(url, storage_root)`` is what Spark's reader, writer and the export use:

- with a URL, ``HttpSchemaSource`` speaks Confluent's REST API (to sparklog's broker, or
  to any Confluent-compatible registry), with HTTP basic auth (``user:password@`` in the URL
  or ``basic_auth``) and a CA file for ``https``;
- without one, ``StorageSchemaSource`` replays the storage root's ``_schemas`` topic from
  its files, as any reader of the log does (no broker needed). It reads the topic again
  from where it stopped when asked for an id or subject it does not know yet.

Both are plain data (a URL, a path) with lazy caches, so Spark can ship them to executors;
a schema id, once known, never changes, so the caches never go stale for ids.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any, Protocol

from sparklog import errors
from sparklog.errors import RegistryUnavailableError, SchemaRegistryError
from sparklog.schemas.model import AVRO, Reference, RegisteredSchema, SubjectVersion

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_ERRORS: dict[int, type[SchemaRegistryError]] = {
    cls.code: cls
    for cls in (
        errors.SubjectNotFoundError,
        errors.VersionNotFoundError,
        errors.SchemaNotFoundError,
        errors.SubjectNotSoftDeletedError,
        errors.VersionNotSoftDeletedError,
        errors.SubjectConfigNotFoundError,
        errors.SubjectModeNotFoundError,
        errors.IncompatibleSchemaError,
        errors.InvalidSchemaError,
        errors.InvalidVersionError,
        errors.InvalidCompatibilityLevelError,
        errors.InvalidModeError,
        errors.OperationNotPermittedError,
        errors.SchemaReferencedError,
    )
}


class SchemaSource(Protocol):
    def by_id(self, schema_id: int) -> RegisteredSchema: ...
    def by_guid(self, guid: str) -> RegisteredSchema: ...
    def latest(self, subject: str) -> SubjectVersion: ...
    def version(self, subject: str, version: int) -> SubjectVersion: ...
    def referenced(self, schema: RegisteredSchema) -> list[RegisteredSchema]: ...
    def register(
        self,
        subject: str,
        schema: str,
        schema_type: str = AVRO,
        references: Sequence[Reference] = (),
    ) -> int: ...


def open_source(url: str | None, storage_root: str | None, **http: Any) -> SchemaSource:
    """The registry at ``url``, or (None) the ``_schemas`` topic of ``storage_root``."""
    if url:
        return HttpSchemaSource(url, **http)
    if not storage_root:
        raise errors.OptionError("schemas need a registry URL or a storage root")
    return StorageSchemaSource(storage_root)


class _Referencing:
    def version(self, subject: str, version: int) -> SubjectVersion:
        raise NotImplementedError

    def referenced(self, schema: RegisteredSchema) -> list[RegisteredSchema]:
        """``schema``'s references, transitively, dependencies first."""
        out: list[RegisteredSchema] = []
        seen: set[int] = set()

        def visit(s: RegisteredSchema, depth: int) -> None:
            if depth > 64:
                raise errors.InvalidSchemaError(f"schema {schema.id}: references nest too deep")
            for ref in s.references:
                dep = self.version(ref.subject, ref.version).schema
                visit(dep, depth + 1)
                if dep.id not in seen:
                    seen.add(dep.id)
                    out.append(dep)

        visit(schema, 0)
        return out


class HttpSchemaSource(_Referencing):
    """Confluent's REST API at ``url`` (``http`` or ``https``)."""

    def __init__(
        self,
        url: str,
        *,
        basic_auth: str | None = None,
        ssl_cafile: str | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
        if parts.username is not None:
            basic_auth = basic_auth or urllib.parse.unquote(
                f"{parts.username}:{parts.password or ''}"
            )
            host = str(parts.hostname)
            parts = parts._replace(netloc=f"{host}:{parts.port}" if parts.port else host)
        self.url = urllib.parse.urlunsplit(parts).rstrip("/")
        self.basic_auth = basic_auth
        self.ssl_cafile = ssl_cafile
        self.timeout_s = timeout_s
        self._ids: dict[int, RegisteredSchema] = {}
        self._guids: dict[str, RegisteredSchema] = {}  # a GUID, like an id, never changes

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_ids": {}, "_guids": {}}

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One call of the REST API; a registry error raises its ``SchemaRegistryError``."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.url}/{path.lstrip('/')}", data=data, method=method)
        req.add_header("Accept", CONTENT_TYPE)
        if data is not None:
            req.add_header("Content-Type", CONTENT_TYPE)
        if self.basic_auth:
            req.add_header(
                "Authorization", "Basic " + base64.b64encode(self.basic_auth.encode()).decode()
            )
        ctx = (
            ssl.create_default_context(cafile=self.ssl_cafile)
            if self.url.startswith("https")
            else None
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=ctx) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            try:
                err = json.loads(e.read())
                code, message = int(err.get("error_code", e.code)), str(err.get("message", ""))
            except (ValueError, AttributeError):
                code, message = e.code, str(e.reason)
            cls = _ERRORS.get(code, SchemaRegistryError)
            raise cls(f"{self.url}: {message} (error {code})", status=e.code, code=code) from None
        except (OSError, ValueError) as e:
            raise RegistryUnavailableError(f"schema registry {self.url}: {e}") from None

    def by_id(self, schema_id: int) -> RegisteredSchema:
        cached = self._ids.get(schema_id)
        if cached is None:
            cached = _schema(schema_id, self.request("GET", f"schemas/ids/{schema_id}"))
            self._ids[schema_id] = cached
        return cached

    def by_guid(self, guid: str) -> RegisteredSchema:
        cached = self._guids.get(guid)
        if cached is None:
            d = self.request("GET", f"schemas/guids/{urllib.parse.quote(guid)}")
            cached = self._guids[guid] = _schema(int(d.get("id", -1)), d)
        return cached

    def latest(self, subject: str) -> SubjectVersion:
        return self.version(subject, -1)

    def version(self, subject: str, version: int) -> SubjectVersion:
        v = "latest" if version == -1 else str(version)
        d = self.request("GET", f"subjects/{urllib.parse.quote(subject, safe='')}/versions/{v}")
        return SubjectVersion(str(d["subject"]), int(d["version"]), _schema(int(d["id"]), d))

    def register(
        self,
        subject: str,
        schema: str,
        schema_type: str = AVRO,
        references: Sequence[Reference] = (),
    ) -> int:
        body: dict[str, Any] = {"schema": schema, "schemaType": schema_type}
        if references:
            body["references"] = [r.to_json() for r in references]
        d = self.request("POST", f"subjects/{urllib.parse.quote(subject, safe='')}/versions", body)
        return int(d["id"])


def _schema(schema_id: int, d: Any) -> RegisteredSchema:
    refs = tuple(Reference.from_json(r) for r in d.get("references") or ())
    return RegisteredSchema(
        schema_id,
        str(d.get("schemaType") or AVRO),
        str(d["schema"]),
        refs,
        str(d.get("guid") or ""),
    )


class StorageSchemaSource(_Referencing):
    """The ``_schemas`` topic of the storage root ``root``, replayed from its files."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._state: Any = None
        self._next = 0
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["root"])  # type: ignore[misc]

    def _read(self) -> Any:
        """Apply the records written since the last read; the state."""
        from sparklog.schemas.registry import SCHEMAS_TOPIC, RegistryState
        from sparklog.storage import Storage
        from sparklog.storage.reader import PartitionReader

        with self._lock:
            if self._state is None:
                self._state = RegistryState()
            storage = Storage(self.root)
            try:
                storage.topics.check_partition(SCHEMAS_TOPIC, 0)
            except errors.SparkLogError:
                return self._state  # no schema was ever registered here
            view = PartitionReader(storage.fs, storage.root, SCHEMAS_TOPIC, 0).view()
            start = max(self._next, view.log_start_offset)
            if start < view.high_watermark:
                for batch in view.batches(start, columns=["offset", "key", "value"]):
                    self._state.apply_all(
                        zip(
                            batch.column("key").to_pylist(),
                            batch.column("value").to_pylist(),
                            strict=True,
                        )
                    )
                self._next = view.high_watermark
            return self._state

    def _ask(self, what: Any) -> Any:
        state = self._state if self._state is not None else self._read()
        try:
            return what(state)
        except (
            errors.SchemaNotFoundError,
            errors.SubjectNotFoundError,
            errors.VersionNotFoundError,
        ):
            return what(self._read())

    def by_id(self, schema_id: int) -> RegisteredSchema:
        return self._ask(lambda s: s.by_id(schema_id))  # type: ignore[no-any-return]

    def by_guid(self, guid: str) -> RegisteredSchema:
        return self._ask(lambda s: s.by_guid(guid))  # type: ignore[no-any-return]

    def latest(self, subject: str) -> SubjectVersion:
        self._read()  # "latest" may have moved on
        return self._ask(lambda s: s.latest(subject))  # type: ignore[no-any-return]

    def version(self, subject: str, version: int) -> SubjectVersion:
        return self._ask(lambda s: s.version(subject, version))  # type: ignore[no-any-return]

    def register(
        self,
        subject: str,
        schema: str,
        schema_type: str = AVRO,
        references: Sequence[Reference] = (),
    ) -> int:
        raise errors.OptionError(
            "registering a schema needs the registry's URL (schemaRegistryUrl): the "
            "storage root's _schemas topic is written by the broker only"
        )
