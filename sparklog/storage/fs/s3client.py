"""The S3 backend's HTTP client settings - how long a request may go unanswered, how often
a failed one is retried - and what a failed request means.

Settings (``S3ClientSettings``; ``from_env`` reads the variables, constructor arguments of
``S3FileSystem`` override them):

- ``SPARKLOG_S3_TIMEOUT_MS`` (2000): how long one request may go unanswered - connecting;
  then from its start, its body included, to the first byte of the answer; then between
  bytes of the answer. A request carries at most 10 MiB (bigger writes go as a multipart
  upload, part by part), so this bounds a stall, not a large transfer.
- ``SPARKLOG_S3_REQUEST_TIMEOUT_MS`` (60000): one whole request, a large GET's body included.
- ``SPARKLOG_S3_RETRIES`` (3): retries of one request after a 5xx answer, a reset or closed
  connection, a failed connect, or a timeout.
- ``SPARKLOG_S3_RETRY_TIMEOUT_MS`` (5000): no retry starts this long after the first try.

So one call on a store that stalls fails after at most about ``retry_timeout_ms +
timeout_ms`` (7 s by default), and on a store that answers 503 forever after the retries'
backoff (from 100 ms, doubling, at most 1 s, jittered): about a second. obstore retries
every request but the conditional PUT: ``S3FileSystem.create_exclusive`` sends that through
a client that never retries and retries it itself, because an attempt that failed may have
taken effect, and resolves that ambiguity (see ``S3FileSystem._create``). Being one
request, a conditional PUT must send all its bytes within ``timeout_ms``.

``explain`` turns one of obstore's errors into the reason an ``ObjectStoreError`` gives and
whether the failure is transient (worth retrying): obstore reports every failure of the
HTTP client as a ``GenericError`` whose text carries the kind (``Connect``, ``Timeout``,
``Interrupted``) or the status and the store's S3 error code.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any

#: ``S3ClientSettings`` field -> the environment variable that sets it
ENV_VARS = {
    "timeout_ms": "SPARKLOG_S3_TIMEOUT_MS",
    "request_timeout_ms": "SPARKLOG_S3_REQUEST_TIMEOUT_MS",
    "retries": "SPARKLOG_S3_RETRIES",
    "retry_timeout_ms": "SPARKLOG_S3_RETRY_TIMEOUT_MS",
}


@dataclass(frozen=True)
class S3ClientSettings:
    """Timeouts and retries of the S3 backend's requests (the module docstring's table)."""

    timeout_ms: int = 2000
    request_timeout_ms: int = 60_000
    retries: int = 3
    retry_timeout_ms: int = 5000
    backoff_ms: int = 100
    max_backoff_ms: int = 1000

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or value < (0 if f.name == "retries" else 1):
                least = "0" if f.name == "retries" else "1"
                name = ENV_VARS.get(f.name, f.name)
                raise ValueError(f"{name}={value!r}: an integer, at least {least}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **overrides: int | None) -> S3ClientSettings:
        """The defaults, then the ``SPARKLOG_S3_*`` variables of ``environ``, then the
        ``overrides`` that are not None."""
        values: dict[str, int] = {}
        for name, var in ENV_VARS.items():
            raw = environ.get(var)
            if raw:
                try:
                    values[name] = int(raw)
                except ValueError:
                    raise ValueError(
                        f"{var}={raw!r}: an integer number of milliseconds or retries"
                    ) from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def client_options(self, *, allow_http: bool) -> dict[str, Any]:
        """obstore's ``client_options``."""
        options: dict[str, Any] = {
            "connect_timeout": timedelta(milliseconds=self.timeout_ms),
            "read_timeout": timedelta(milliseconds=self.timeout_ms),
            "timeout": timedelta(milliseconds=self.request_timeout_ms),
        }
        if allow_http:
            options["allow_http"] = True
        return options

    def retry_config(self, *, retries: int | None = None) -> dict[str, Any]:
        """obstore's ``retry_config`` (``retries=0``: a client that never retries)."""
        return {
            "max_retries": self.retries if retries is None else retries,
            "retry_timeout": timedelta(milliseconds=self.retry_timeout_ms),
            "backoff": {
                "init_backoff": timedelta(milliseconds=self.backoff_ms),
                "max_backoff": timedelta(milliseconds=self.max_backoff_ms),
            },
        }

    def backoff_s(self, attempt: int) -> float:
        """Seconds to wait before retry ``attempt`` (0 first): doubling, capped, jittered."""
        cap = min(self.max_backoff_ms, self.backoff_ms * 2**attempt)
        return float(random.uniform(0.5, 1.0) * cap / 1000)


@dataclass(frozen=True)
class Failure:
    """Why a request failed, in words for an ``ObjectStoreError``, and whether trying again
    may succeed (5xx answers, timeouts, lost connections) or cannot (refused credentials,
    other 4xx answers)."""

    reason: str
    transient: bool


_KIND = re.compile(r"HttpError \{\s*kind: (\w+)")
_STATUS = re.compile(r"status code: (\d{3})")
_CODE = re.compile(r"<Code>(\w+)</Code>")
_RETRIES = re.compile(r"retries: (\d+),|after (\d+) retries")


def explain(
    e: BaseException, settings: S3ClientSettings, where: str, tries: int | None = None
) -> Failure:
    """What obstore's error ``e`` from a request to ``where`` (the endpoint) means;
    ``tries``: how often the request was sent, if not by obstore's retries alone."""
    text = str(e)
    if tries is None and (found := _RETRIES.search(text)):
        tries = int(found.group(1) or found.group(2)) + 1
    tried = f" (tried {tries} times)" if tries and tries > 1 else ""
    kind = found.group(1) if (found := _KIND.search(text)) else None
    status = int(found.group(1)) if (found := _STATUS.search(text)) else None
    if type(e).__name__ in ("PermissionDeniedError", "UnauthenticatedError"):
        return Failure(
            f"{where} refused the credentials ({first_line(e)}); set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY to a key that may read and write this bucket",
            transient=False,
        )
    if "169.254.169.254" in text or "credential" in text.lower():
        return Failure(
            "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or run where an "
            "instance role provides them)",
            transient=False,
        )
    if kind == "Timeout":
        return Failure(
            f"{where} did not answer in time{tried}: no answer within "
            f"{settings.timeout_ms} ms ({ENV_VARS['timeout_ms']}) or the whole request took "
            f"over {settings.request_timeout_ms} ms ({ENV_VARS['request_timeout_ms']}); the "
            "store is stalled or overloaded",
            transient=True,
        )
    if kind == "Connect":
        return Failure(
            f"cannot reach {where}{tried}: check AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3) "
            "and that the store is running",
            transient=True,
        )
    if kind is not None:
        return Failure(
            f"the connection to {where} was reset or closed before the answer came{tried}",
            transient=True,
        )
    if "HTTP error" in text:  # the kind is not always in the text (obstore's writer)
        return Failure(
            f"the request to {where} failed before an answer came{tried}: it timed out "
            f"({ENV_VARS['timeout_ms']}={settings.timeout_ms}) or its connection was reset",
            transient=True,
        )
    if status is not None and status >= 500:
        code = found.group(1) if (found := _CODE.search(text)) else "no S3 error code"
        return Failure(f"{where} answered {status} {code}{tried}", transient=True)
    return Failure(f"{first_line(e)} ({where})", transient=False)


def first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
