"""What the proxy tells the machines that run it: whether it can serve, and who may read its metrics.

``/healthz`` is liveness: the process answers HTTP, whatever its dependencies do, so a supervisor
restarts only a proxy that is stuck, never one whose Redis is down (a restart would not bring
Redis back).  ``/readyz`` is readiness: it asks the session store (a Redis ``PING``, a read of the
SQLite file through a connection of its own) and, when configured, the upstream (a ``GET`` on its
``/models``), each within a short timeout, and answers 503 naming what is down, so a load
balancer sends requests elsewhere until it is back.  ``/metrics`` asks for a bearer token when
one is configured.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Mapping

from contextledger._extras import require_extra

require_extra("starlette", extra="serve", feature="contextledger serve")
require_extra("aiohttp", extra="serve", feature="contextledger serve")

from starlette.responses import JSONResponse  # noqa: E402

from contextledger.exceptions import ContextLedgerError  # noqa: E402
from contextledger.serve._config import METRICS_TOKEN_VARIABLE  # noqa: E402
from contextledger.serve._sessions import Sessions  # noqa: E402
from contextledger.serve._upstream import Upstream, error_body  # noqa: E402

__all__ = ["Readiness", "metrics_refusal"]

READY_TIMEOUT = 2.0
"""How long each readiness check may take: well under a load balancer's usual probe timeout."""


class Readiness:
    """The checks behind ``/readyz`` (see the module docstring)."""

    def __init__(self, sessions: Sessions, upstream: Upstream, *, check_upstream: bool) -> None:
        self._sessions = sessions
        self._upstream = upstream
        self._check_upstream = check_upstream

    async def answer(self) -> JSONResponse:
        """200 with every check ``ok``, or 503 listing what is down and why."""
        checks = {"store": await _checked(self._sessions.ready())}
        if self._check_upstream:
            checks["upstream"] = await _checked(self._ask_upstream())
        down = [name for name, result in checks.items() if result != "ok"]
        body = {"status": "unavailable" if down else "ready", "down": down, "checks": checks}
        return JSONResponse(body, status_code=503 if down else 200)

    async def _ask_upstream(self) -> None:
        """Any answer below 500 is an upstream that serves (a 401 too: keys are the clients')."""
        status = await self._upstream.status_of("/models", self._upstream.headers({}), READY_TIMEOUT)
        if status >= 500:
            raise ConnectionError(f"{self._upstream.base_url}/models answered HTTP {status}")


async def _checked(check: Awaitable[None]) -> str:
    """``ok``, or what went wrong: the check's error, or that it took longer than the timeout."""
    try:
        await asyncio.wait_for(check, READY_TIMEOUT)
    except asyncio.TimeoutError:
        return f"no answer within {READY_TIMEOUT:g}s"
    except (ContextLedgerError, OSError) as error:
        return str(error)
    return "ok"


def metrics_refusal(headers: Mapping[str, str], token: str | None) -> JSONResponse | None:
    """The 401 for a ``/metrics`` request without the configured bearer token; ``None`` to serve it."""
    if token is None:
        return None
    scheme, _, given = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
        return None
    message = f"GET /metrics needs the header Authorization: Bearer <the token set in ${METRICS_TOKEN_VARIABLE}>"
    return JSONResponse(
        error_body(message, "authentication_error", "invalid_metrics_token"),
        status_code=401,
        headers={"www-authenticate": 'Bearer realm="metrics"'},
    )
