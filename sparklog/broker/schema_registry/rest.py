"""The Schema Registry's REST API (Confluent's), served by the broker with ``aiohttp``.

``--schema-registry [http[s]://]HOST:PORT`` (or ``schema_registry`` in the TOML) starts
it. Requests and answers are JSON, content type ``application/vnd.schemaregistry.v1+json``
(plain ``application/json`` is accepted too); errors are ``{"error_code", "message"}``
with the registry's codes (40401 subject not found, 40402 version not found, 40403 schema
not found, 409 incompatible, 42201 invalid schema, ...). Unknown request fields
(``metadata``, ``ruleSet``, ...) are accepted and ignored. Changes that reach a broker not
leading ``_schemas`` are forwarded to the one that does
(``sparklog.broker.schema_registry.service``).

With ``schema_registry_auth = "basic"`` every request needs HTTP basic credentials of a
broker user (the SCRAM users of docs/security.md, checked as SASL/PLAIN checks them); with
the authorizer on, a change also needs WRITE on the subject's topic (``<topic>-key`` or
``<topic>-value``, Kafka's TopicNameStrategy) or ALTER on the cluster.
docs/schemas.md lists every endpoint.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import ClientError, ClientSession, ClientTimeout, web

from sparklog.broker.schema_registry.service import SchemaRegistryService
from sparklog.errors import (
    InvalidSchemaError,
    RegistryForbiddenError,
    RegistryUnauthorizedError,
    RegistryUnavailableError,
    SchemaNotFoundError,
    SchemaRegistryError,
    SparkLogError,
)
from sparklog.schemas.model import SCHEMA_TYPES, SubjectVersion
from sparklog.schemas.registry import RegistryState
from sparklog.security.acls import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from sparklog.security.service import SecurityService

log = logging.getLogger(__name__)
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _answer(body: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(body).encode(), content_type=CONTENT_TYPE.split(";")[0]
    )


def _error(status: int, code: int, message: str) -> web.Response:
    return _answer({"error_code": code, "message": message}, status)


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").strip().lower() == "true"


#: the header of a change forwarded to the leader (its value: the forwarding broker's id)
FORWARDED = "X-Sparklog-Forwarded-By"


class RegistryApi:
    """The routes; ``app()`` is the aiohttp application."""

    def __init__(
        self,
        service: SchemaRegistryService,
        *,
        security: SecurityService | None = None,
        auth: str = "none",
        scheme: str = "http",
        client_ssl: ssl.SSLContext | None = None,
    ) -> None:
        self.service = service
        self.security = security
        self.auth = auth
        self.scheme = scheme
        self.client_ssl = client_ssl
        self._session: ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=16 * 1024 * 1024)
        r = app.router
        r.add_get("/", self.root)
        r.add_get("/subjects", self.subjects)
        r.add_post("/subjects/{subject}/versions", self.register)
        r.add_post("/subjects/{subject}", self.lookup)
        r.add_get("/subjects/{subject}/versions", self.versions)
        r.add_get("/subjects/{subject}/versions/{version}", self.version)
        r.add_get("/subjects/{subject}/versions/{version}/schema", self.version_schema)
        r.add_get("/subjects/{subject}/versions/{version}/referencedby", self.referenced_by)
        r.add_delete("/subjects/{subject}", self.delete_subject)
        r.add_delete("/subjects/{subject}/versions/{version}", self.delete_version)
        r.add_get("/schemas", self.schemas)
        r.add_get("/schemas/types", self.types)
        r.add_get("/schemas/ids/{id}", self.by_id)
        r.add_get("/schemas/ids/{id}/schema", self.by_id_schema)
        r.add_get("/schemas/ids/{id}/subjects", self.id_subjects)
        r.add_get("/schemas/ids/{id}/versions", self.id_versions)
        r.add_get("/schemas/guids/{guid}", self.by_guid)
        r.add_post("/compatibility/subjects/{subject}/versions", self.compatible_all)
        r.add_post("/compatibility/subjects/{subject}/versions/{version}", self.compatible)
        r.add_get("/config", self.get_config)
        r.add_put("/config", self.put_config)
        r.add_delete("/config", self.delete_config)
        r.add_get("/config/{subject}", self.get_config)
        r.add_put("/config/{subject}", self.put_config)
        r.add_delete("/config/{subject}", self.delete_config)
        r.add_get("/mode", self.get_mode)
        r.add_put("/mode", self.put_mode)
        r.add_get("/mode/{subject}", self.get_mode)
        r.add_put("/mode/{subject}", self.put_mode)
        r.add_delete("/mode/{subject}", self.delete_mode)
        r.add_get("/contexts", self.contexts)
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, _app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    # ------------------------------------------------------------------ plumbing

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            if self.auth == "basic":
                self._authenticate(request)
            return await handler(request)
        except SchemaRegistryError as e:
            return _error(e.status, e.code, str(e))
        except web.HTTPException as e:
            if e.status == 404:
                return _error(404, 404, f"HTTP 404 Not Found: {request.method} {request.path}")
            if e.status == 405:
                return _error(405, 405, f"HTTP 405 Method Not Allowed: {request.method}")
            raise
        except RegistryUnauthorizedError as e:
            return web.Response(
                status=401,
                body=json.dumps({"error_code": 401, "message": str(e)}).encode(),
                content_type=CONTENT_TYPE,
                headers={"WWW-Authenticate": 'Basic realm="sparklog"'},
            )
        except RegistryForbiddenError as e:
            return _error(403, 40301, str(e))
        except (ValueError, TypeError, KeyError) as e:
            return _error(422, 42201, f"Invalid request: {e}")
        except SparkLogError as e:
            log.warning("registry request %s %s failed: %s", request.method, request.path, e)
            return _error(500, 50001, f"Error in the backend data store: {e}")

    def _authenticate(self, request: web.Request) -> None:
        header = request.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            raise RegistryUnauthorizedError(
                "Unauthorized: this registry needs HTTP basic authentication"
            )
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise RegistryUnauthorizedError("Unauthorized: malformed basic credentials") from None
        if self.security is None or not self.security.check_password(user, password):
            raise RegistryUnauthorizedError("Unauthorized: wrong user name or password")
        request["principal"] = f"User:{user}"

    def _may_change(self, request: web.Request, subject: str | None) -> None:
        """With the authorizer on: WRITE on the subject's topic or ALTER on the cluster."""
        sec = self.security
        principal = request.get("principal")
        if sec is None or not sec.enabled or principal is None:
            return
        host = request.remote or ""
        if sec.allowed(principal, host, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
            return
        for suffix in ("-value", "-key"):
            if subject and subject.endswith(suffix):
                topic = subject.removesuffix(suffix)
                if sec.allowed(principal, host, AclOperation.WRITE, ResourceType.TOPIC, topic):
                    return
        raise RegistryForbiddenError(f"{principal} may not change subject {subject or '(global)'}")

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise SchemaRegistryError(
                "Unrecognized request body (not JSON)", status=400, code=400
            ) from None

    async def _change(
        self, request: web.Request, compute: Callable[[RegistryState], Any]
    ) -> web.StreamResponse:
        """A change: here if this broker leads ``_schemas``, else forwarded to the leader."""
        self._may_change(request, request.match_info.get("subject"))
        if self.service.leads() or await self.service.becoming_leader():
            return _answer(await self.service.change(compute))
        if self.service.failed_here():
            raise RegistryUnavailableError(
                "an append to _schemas failed on this broker (its log says why): it takes no "
                "more changes until it leads _schemas at a newer epoch or is restarted"
            )
        if FORWARDED in request.headers or self.service.named_leader():
            # one hop only: two brokers whose views of the leader differ (leadership is
            # moving) must not pass a change back and forth
            raise RegistryUnavailableError(
                "this broker cannot write _schemas now (leadership is moving); retry"
            )
        return await self._forward(request)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        leader = self.service.leader_url()
        if leader is None:
            raise RegistryUnavailableError("no broker leads _schemas now; retry")
        if self._session is None:
            self._session = ClientSession(timeout=ClientTimeout(total=30))
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() in ("authorization", "content-type", "accept")
        }
        headers[FORWARDED] = str(self.service.node_id)
        url = f"{self.scheme}://{leader}{request.rel_url}"
        try:
            async with self._session.request(
                request.method,
                url,
                data=await request.read(),
                headers=headers,
                ssl=self.client_ssl if self.client_ssl is not None else True,
            ) as resp:
                body = await resp.read()
                return web.Response(status=resp.status, body=body, content_type=CONTENT_TYPE)
        except (ClientError, TimeoutError) as e:
            raise RegistryUnavailableError(f"forwarding to the leader at {leader}: {e}") from None

    # ------------------------------------------------------------------ subjects

    async def root(self, request: web.Request) -> web.StreamResponse:
        return _answer({})

    async def subjects(self, request: web.Request) -> web.StreamResponse:
        prefix = request.query.get("subjectPrefix", "")
        names = self.service.read(lambda s: s.subject_names(deleted=_flag(request, "deleted")))
        return _answer([n for n in names if n.startswith(prefix)])

    async def register(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info["subject"]
        body = await self._body(request)
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
            raise InvalidSchemaError("the request needs a 'schema' string")

        def compute(state: RegistryState) -> tuple[Any, Any]:
            parsed = state.parse_request(
                body["schema"], body.get("schemaType"), body.get("references")
            )
            sid = body.get("id")
            ver = body.get("version")
            sv, records = state.register(
                subject,
                parsed,
                schema_id=int(sid) if sid not in (None, -1, 0) else None,
                version=int(ver) if ver not in (None, -1, 0) else None,
            )
            return _registered(sv), records

        return await self._change(request, compute)

    async def lookup(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info["subject"]
        body = await self._body(request)
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
            raise InvalidSchemaError("the request needs a 'schema' string")

        def query(state: RegistryState) -> Any:
            state.versions(subject, deleted=True)  # 40401 first, as Confluent's
            parsed = state.parse_request(
                body["schema"], body.get("schemaType"), body.get("references")
            )
            return _registered(state.lookup(subject, parsed, deleted=_flag(request, "deleted")))

        return _answer(self.service.read(query))

    async def versions(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info["subject"]
        return _answer(
            self.service.read(lambda s: s.versions(subject, deleted=_flag(request, "deleted")))
        )

    def _version(self, request: web.Request) -> SubjectVersion:
        subject, version = request.match_info["subject"], request.match_info["version"]
        return self.service.read(
            lambda s: s.version(subject, version, deleted=_flag(request, "deleted"))
        )

    async def version(self, request: web.Request) -> web.StreamResponse:
        return _answer(_registered(self._version(request)))

    async def version_schema(self, request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=self._version(request).schema.schema.encode(), content_type=CONTENT_TYPE
        )

    async def referenced_by(self, request: web.Request) -> web.StreamResponse:
        subject, version = request.match_info["subject"], request.match_info["version"]
        return _answer(self.service.read(lambda s: s.referenced_by(subject, version)))

    async def delete_subject(self, request: web.Request) -> web.StreamResponse:
        subject, permanent = request.match_info["subject"], _flag(request, "permanent")
        return await self._change(request, lambda s: s.delete_subject(subject, permanent=permanent))

    async def delete_version(self, request: web.Request) -> web.StreamResponse:
        subject, version = request.match_info["subject"], request.match_info["version"]
        permanent = _flag(request, "permanent")
        return await self._change(
            request, lambda s: s.delete_version(subject, version, permanent=permanent)
        )

    # ------------------------------------------------------------------ schemas

    async def types(self, request: web.Request) -> web.StreamResponse:
        return _answer(list(SCHEMA_TYPES))

    def _id(self, request: web.Request) -> int:
        try:
            return int(request.match_info["id"])
        except ValueError:
            raise SchemaNotFoundError(f"Schema {request.match_info['id']} not found") from None

    async def by_id(self, request: web.Request) -> web.StreamResponse:
        sid = self._id(request)
        schema = self.service.read(lambda s: s.by_id(sid))
        return _answer({"id": sid, **schema.to_json()})

    async def by_id_schema(self, request: web.Request) -> web.StreamResponse:
        sid = self._id(request)
        schema = self.service.read(lambda s: s.by_id(sid))
        return web.Response(body=schema.schema.encode(), content_type=CONTENT_TYPE)

    async def by_guid(self, request: web.Request) -> web.StreamResponse:
        guid = request.match_info["guid"]
        schema = self.service.read(lambda s: s.by_guid(guid))
        return _answer({"id": schema.id, **schema.to_json()})

    async def id_subjects(self, request: web.Request) -> web.StreamResponse:
        sid, deleted = self._id(request), _flag(request, "deleted")
        pairs = self.service.read(lambda s: s.subjects_of(sid, deleted=deleted))
        return _answer(sorted({s for s, _ in pairs}))

    async def id_versions(self, request: web.Request) -> web.StreamResponse:
        sid, deleted = self._id(request), _flag(request, "deleted")
        pairs = self.service.read(lambda s: s.subjects_of(sid, deleted=deleted))
        return _answer([{"subject": s, "version": v} for s, v in pairs])

    async def schemas(self, request: web.Request) -> web.StreamResponse:
        prefix = request.query.get("subjectPrefix", "")
        deleted, latest_only = _flag(request, "deleted"), _flag(request, "latestOnly")

        def query(state: RegistryState) -> list[Any]:
            out = []
            for subject in state.subject_names(deleted=deleted):
                if not subject.startswith(prefix):
                    continue
                numbers = state.versions(subject, deleted=deleted)
                for n in numbers[-1:] if latest_only else numbers:
                    out.append(_registered(state.version(subject, n, deleted=deleted)))
            return out

        return _answer(self.service.read(query))

    # ------------------------------------------------------------------ compatibility

    async def compatible(self, request: web.Request) -> web.StreamResponse:
        return await self._compatibility(request, request.match_info["version"])

    async def compatible_all(self, request: web.Request) -> web.StreamResponse:
        return await self._compatibility(request, None)

    async def _compatibility(self, request: web.Request, version: str | None) -> web.Response:
        subject = request.match_info["subject"]
        body = await self._body(request)
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
            raise InvalidSchemaError("the request needs a 'schema' string")

        def query(state: RegistryState) -> list[str]:
            parsed = state.parse_request(
                body["schema"], body.get("schemaType"), body.get("references")
            )
            if version is not None and subject not in state.subjects:
                return []  # a missing subject is compatible with anything
            return state.check(subject, parsed, version)

        problems = self.service.read(query)
        out: dict[str, Any] = {"is_compatible": not problems}
        if _flag(request, "verbose"):
            out["messages"] = problems
        return _answer(out)

    # ------------------------------------------------------------------ config, mode

    async def get_config(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info.get("subject")
        fallback = subject is None or _flag(request, "defaultToGlobal")
        level = self.service.read(lambda s: s.compatibility(subject, fallback=fallback))
        return _answer({"compatibilityLevel": level})

    async def put_config(self, request: web.Request) -> web.StreamResponse:
        subject, body = request.match_info.get("subject"), await self._body(request)
        return await self._change(request, lambda s: s.set_config(subject, body))

    async def delete_config(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info.get("subject")
        return await self._change(request, lambda s: s.delete_config(subject))

    async def get_mode(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info.get("subject")
        fallback = subject is None or _flag(request, "defaultToGlobal")
        return _answer({"mode": self.service.read(lambda s: s.mode(subject, fallback=fallback))})

    async def put_mode(self, request: web.Request) -> web.StreamResponse:
        subject, body = request.match_info.get("subject"), await self._body(request)
        force = _flag(request, "force")
        return await self._change(request, lambda s: s.set_mode(subject, body, force=force))

    async def delete_mode(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info["subject"]
        return await self._change(request, lambda s: s.delete_mode(subject))

    async def contexts(self, request: web.Request) -> web.StreamResponse:
        return _answer(["."])


def _registered(sv: SubjectVersion) -> dict[str, Any]:
    out = sv.to_json()
    if sv.deleted:
        out["deleted"] = True
    return out
