"""Who is asking: the tenant a request belongs to, and the session it names (one id grammar for
the body, the header and the URL).

A tenant is a hash of the client's bearer key, so the proxy never keeps the key itself and two
clients with different keys can never reach each other's sessions, even knowing an id.  A tenant
header is honoured only when the operator says a gateway in front has already authenticated the
caller (``--trust-tenant-header``); otherwise anyone could claim any tenant.  A client admitted
by a client key (``_client_keys.py``) is in the tenant its key names, carried in the request's
scope under :data:`ADMITTED_TENANT`.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Mapping
from typing import Any, Protocol

from contextledger.exceptions import ProxyError

__all__ = [
    "ADMITTED_TENANT",
    "MAX_SESSION_ID",
    "SESSION_HEADER",
    "TENANT_HEADER",
    "admitted_tenant",
    "bearer_key",
    "earlier_session_id",
    "key_hash_tenant",
    "named_tenant",
    "request_tenant",
    "session_id_of",
    "tenant_of",
]

SESSION_HEADER = "x-contextledger-session"
TENANT_HEADER = "x-contextledger-tenant"
MAX_SESSION_ID = 128
_SESSION_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_SESSION_ID - 1}}}")
_EARLIER_MAX_ID = 256
ADMITTED_TENANT = "contextledger.tenant"
"""The request scope's entry for the tenant of the client key that admitted the request."""


def bearer_key(headers: Mapping[str, str]) -> str | None:
    """The key in ``Authorization: Bearer KEY``, or ``None``."""
    scheme, _, key = headers.get("authorization", "").strip().partition(" ")
    key = key.strip()
    return key if scheme.lower() == "bearer" and key else None


def _digest(kind: str, value: str) -> str:
    return kind + hashlib.sha256(value.encode("utf-8")).hexdigest()[:32]


def key_hash_tenant(sha256_hex: str) -> str:
    """The tenant of a key known only by its SHA-256 (hexadecimal): the one the key itself names."""
    return "k" + sha256_hex[:32]


def named_tenant(name: str) -> str:
    """The tenant a client keys file names: ``n`` before its hash, so no key and no header can name it."""
    return _digest("n", name)


def admitted_tenant(scope: Mapping[str, Any]) -> str | None:
    """The tenant of the client key that admitted a request, or ``None`` when no client keys are kept."""
    tenant = scope.get(ADMITTED_TENANT)
    return tenant if isinstance(tenant, str) else None


def tenant_of(
    headers: Mapping[str, str], *, trust_tenant_header: bool, x_api_key: bool = False, admitted: str | None = None
) -> str:
    """The tenant id for a session request, or :class:`ProxyError` 401 when there is none.

    Key tenants start with ``k``, header tenants with ``h``, named client keys' with ``n``: a
    header can never name a key's tenant.  With ``x_api_key`` (Anthropic's clients send their key
    so) an ``x-api-key`` header names the tenant too; one key is one tenant whichever header
    carries it.  ``admitted`` is the tenant of the client key that admitted the request; a trusted
    tenant header still wins over it (the gateway in front speaks for its callers).
    """
    if trust_tenant_header:
        claimed = headers.get(TENANT_HEADER, "").strip()
        if claimed:
            return _digest("h", claimed)
    if admitted is not None:
        return admitted
    key = bearer_key(headers)
    if key is None and x_api_key:
        key = headers.get("x-api-key", "").strip() or None
    if key is None:
        header = f" or an {TENANT_HEADER} header (trusted with --trust-tenant-header)" if trust_tenant_header else ""
        raise ProxyError(
            f"session requests need the client's own key (Authorization: Bearer KEY"
            f"{', or x-api-key: KEY' if x_api_key else ''}){header}: the key names the "
            "tenant whose sessions this request may read and write",
            status=401,
            error_type="authentication_error",
            code="missing_api_key",
        )
    return _digest("k", key)


class _Asking(Protocol):
    """What a tenant is read from: a request's headers and its ASGI scope."""

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def scope(self) -> Mapping[str, Any]: ...


def request_tenant(request: _Asking, *, trust_tenant_header: bool, x_api_key: bool = False) -> str:
    """:func:`tenant_of` a request, with the tenant its client key named when one admitted it."""
    return tenant_of(
        request.headers,
        trust_tenant_header=trust_tenant_header,
        x_api_key=x_api_key,
        admitted=admitted_tenant(request.scope),
    )


def session_id_of(value: object) -> str:
    """A session id as given in the body, the header or the URL, checked against the one grammar.

    1 to 128 ASCII letters, digits, ``.``, ``_`` and ``-``, the first a letter or a digit.  Every
    such id travels unchanged in a JSON body, an HTTP header (read as Latin-1, so nothing beyond
    ASCII survives it) and one URL path segment (no ``/``, no ``%``, never ``.`` or ``..``), so a
    session that can be created can also be used, read, forgotten and deleted.  Nothing is
    trimmed or decoded: the id is compared as it came.
    """
    if not isinstance(value, str) or _SESSION_ID.fullmatch(value) is None:
        shown = repr(value[:80]) + ("..." if len(value) > 80 else "") if isinstance(value, str) else repr(value)
        raise ProxyError(
            f"session id {shown} is not valid: use 1 to {MAX_SESSION_ID} characters from A-Z, a-z, 0-9, '.', '_' "
            "and '-', the first a letter or a digit (the same id goes in the body, the X-Contextledger-Session "
            "header and the URL)",
            status=400,
            code="invalid_session_id",
        )
    return value


def earlier_session_id(value: str) -> str | None:
    """The id as earlier versions accepted it (trimmed, 1 to 256 printable characters), or ``None``.

    Sessions created under such ids before the grammar above existed stay reachable wherever their
    id can travel; no new one can be created.
    """
    session = value.strip()
    if not session or len(session) > _EARLIER_MAX_ID or any(unicodedata.category(c).startswith("C") for c in session):
        return None
    return session
