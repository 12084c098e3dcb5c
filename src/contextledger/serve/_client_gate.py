"""The door every API request passes when the proxy spends its own upstream key.

An ASGI middleware in front of every route but the operator's (``/healthz``, ``/readyz``,
``/metrics``, which has its own token): a request without a key the client keys file holds is
answered 401, one past its key's limits 429 with ``Retry-After``, both before its body is read and
in the caller's protocol (Anthropic's error shape under ``/v1/messages``, OpenAI's elsewhere).  An
admitted request carries its key's tenant in its scope (``_tenants.ADMITTED_TENANT``) and counts as
under way until its answer is sent, a stream's to its last event.  Refusals are counted on
``/metrics`` by reason only: no key, tenant or digest ever becomes a label, and no key is logged.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from contextledger.serve._client_keys import ClientKeys, presented_key
from contextledger.serve._client_limits import ClientLimits, Limited
from contextledger.serve._errors import anthropic_path
from contextledger.serve._metrics import Metrics
from contextledger.serve._tenants import ADMITTED_TENANT
from contextledger.serve._upstream import anthropic_error, error_body

__all__ = ["ClientGate", "Doorkeeper"]

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
"""The operator's endpoints: probes must answer without a client key, and ``/metrics`` has its token."""


class Doorkeeper:
    """The keys, the limits and their counters, shared by the gate and the reload that changes them."""

    def __init__(self, keys: ClientKeys, limits: ClientLimits, metrics: Metrics) -> None:
        self.keys = keys
        self.limits = limits
        self.metrics = metrics
        self.refused = metrics.counter(
            "contextledger_client_refused_total",
            "Requests answered 401 for want of a known client key, by reason (missing_key, unknown_key).",
            ("reason",),
        )
        self.limited = metrics.counter(
            "contextledger_client_limited_total",
            "Requests answered 429 past their client key's limit, by limit (rate, concurrency).",
            ("limit",),
        )

    def reload(self) -> None:
        """Read the keys file again (``SIGHUP``); a revoked key's limits are forgotten with it."""
        if self.keys.reload():
            self.limits.keep_only(self.keys.digests)


class ClientGate:
    """ASGI middleware admitting only the clients a :class:`Doorkeeper` knows (see the module)."""

    def __init__(self, app: ASGIApp, doorkeeper: Doorkeeper) -> None:
        self.app = app
        self.doorkeeper = doorkeeper

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        door = self.doorkeeper
        presented = presented_key(Headers(scope=scope))
        client = door.keys.admit(presented)
        if client is None:
            reason = "missing_key" if presented is None else "unknown_key"
            door.metrics.count(door.refused, reason)
            await _unknown_client(scope["path"], reason)(scope, receive, send)
            return
        limited = door.limits.admit(client.digest)
        if limited is not None:
            door.metrics.count(door.limited, limited.limit)
            await _too_many(scope["path"], limited, door.limits)(scope, receive, send)
            return
        try:
            await self.app({**scope, ADMITTED_TENANT: client.tenant}, receive, send)
        finally:
            door.limits.release(client.digest)


def _refusal(path: str, status: int, message: str, error_type: str, code: str, headers: dict[str, str]) -> JSONResponse:
    body = anthropic_error(message, status, error_type, code) if anthropic_path(path) else None
    return JSONResponse(body or error_body(message, error_type, code), status_code=status, headers=headers)


def _unknown_client(path: str, reason: str) -> JSONResponse:
    if reason == "missing_key":
        message = (
            "this proxy answers only clients with a key it knows: send yours as Authorization: Bearer KEY or "
            "x-api-key: KEY (the operator lists client keys in --client-keys FILE)"
        )
        code = "missing_api_key"
    else:
        message = (
            "the key sent is not one this proxy knows (or it was revoked); ask the operator for a key from its "
            "client keys file"
        )
        code = "invalid_api_key"
    headers = {"www-authenticate": 'Bearer realm="contextledger"'}
    return _refusal(path, 401, message, "authentication_error", code, headers)


def _too_many(path: str, limited: Limited, limits: ClientLimits) -> JSONResponse:
    if limited.limit == "rate":
        message = (
            f"this client key may send {limits.per_minute} requests a minute; retry after the seconds in Retry-After"
        )
        code = "rate_limit_exceeded"
    else:
        message = (
            f"this client key may have {limits.at_once} requests under way at once; retry when one has ended "
            "(Retry-After)"
        )
        code = "too_many_concurrent_requests"
    return _refusal(path, 429, message, "rate_limit_error", code, {"retry-after": str(limited.retry_after)})
