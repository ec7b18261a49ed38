"""TLS for the SSL and SASL_SSL listeners, through Python's ``ssl`` module from PEM files.

The server context offers TLS 1.2 and newer. With ``ssl_cafile`` the broker asks for client
certificates signed by that CA (``ssl_client_auth = "requested"``: a client without one
connects as ``User:ANONYMOUS``; ``"required"``: it cannot connect), and the principal of
an SSL connection is ``User:<CN>``, the common name of the certificate's subject (Kafka's
``ssl.principal.mapping.rules`` reduced to its most used rule). On SASL_SSL the SASL
principal wins.
"""

from __future__ import annotations

import ssl
from typing import Any

from sparklog.security.config import SecurityConfig


def server_context(config: SecurityConfig) -> ssl.SSLContext:
    """The context every TLS listener of the broker uses (ValueError on unreadable files)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(config.ssl_certfile), str(config.ssl_keyfile))
        if config.ssl_cafile and config.ssl_client_auth != "none":
            ctx.load_verify_locations(cafile=config.ssl_cafile)
            ctx.verify_mode = (
                ssl.CERT_REQUIRED if config.ssl_client_auth == "required" else ssl.CERT_OPTIONAL
            )
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"[security] cannot load the TLS certificate or key: {e}") from e
    return ctx


def certificate_principal(peercert: Any) -> str | None:
    """``User:<CN>`` of a verified client certificate (``getpeercert()``), or None."""
    if not peercert:
        return None
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return f"User:{value}"
    return None
