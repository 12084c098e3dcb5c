"""Who is asking: the tenant a request belongs to, and the session it names.

A tenant is a hash of the client's bearer key, so the proxy never keeps the key itself and two
clients with different keys can never reach each other's sessions, even knowing an id.  A tenant
header is honoured only when the operator says a gateway in front has already authenticated the
caller (``--trust-tenant-header``); otherwise anyone could claim any tenant.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Mapping

from contextledger.exceptions import ProxyError

__all__ = ["SESSION_HEADER", "TENANT_HEADER", "bearer_key", "session_id_of", "tenant_of"]

SESSION_HEADER = "x-contextledger-session"
TENANT_HEADER = "x-contextledger-tenant"
_MAX_ID = 256


def bearer_key(headers: Mapping[str, str]) -> str | None:
    """The key in ``Authorization: Bearer KEY``, or ``None``."""
    scheme, _, key = headers.get("authorization", "").strip().partition(" ")
    key = key.strip()
    return key if scheme.lower() == "bearer" and key else None


def _digest(kind: str, value: str) -> str:
    return kind + hashlib.sha256(value.encode("utf-8")).hexdigest()[:32]


def tenant_of(headers: Mapping[str, str], *, trust_tenant_header: bool) -> str:
    """The tenant id for a session request, or :class:`ProxyError` 401 when there is none.

    Key tenants start with ``k``, header tenants with ``h``: a header can never name a key's tenant.
    """
    if trust_tenant_header:
        claimed = headers.get(TENANT_HEADER, "").strip()
        if claimed:
            return _digest("h", claimed)
    key = bearer_key(headers)
    if key is None:
        header = f" or an {TENANT_HEADER} header (trusted with --trust-tenant-header)" if trust_tenant_header else ""
        raise ProxyError(
            f"session requests need the client's own key (Authorization: Bearer KEY){header}: the key names the "
            "tenant whose sessions this request may read and write",
            status=401,
            error_type="authentication_error",
            code="missing_api_key",
        )
    return _digest("k", key)


def session_id_of(value: str) -> str:
    """A session id as given in a header or a URL, checked: printable text of 1 to 256 characters."""
    session = value.strip()
    if not session or len(session) > _MAX_ID or any(unicodedata.category(c).startswith("C") for c in session):
        raise ProxyError(
            f"session id {value[:80]!r} is not valid: use 1 to {_MAX_ID} printable characters",
            status=400,
            code="invalid_session_id",
        )
    return session
