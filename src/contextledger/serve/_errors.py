"""Answers the proxy gives when no handler could: unexpected failures, unknown paths, wrong methods.

Every one is in OpenAI's error shape (``{"error": {"message", "type", "param", "code"}}``), or in
Anthropic's (``{"type": "error", "error": {"type", "message"}}``) under ``/v1/messages``, as SDK
clients parse it, never a text page.  A 404 lists every endpoint, so a client that missed them all
learns where to go.  An unexpected failure is logged with its traceback and
answered 500 without raising it further: raised, it would make the server close the connection
after the answer, and a client reusing that keep-alive connection for its next request would get
a reset instead of an answer.
"""

from __future__ import annotations

import logging
import re

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from contextledger.exceptions import ProxyError
from contextledger.serve._upstream import anthropic_error, error_body

__all__ = ["UnexpectedErrors", "anthropic_path", "http_error", "store_failure"]

_log = logging.getLogger("uvicorn.error")  # the server's own error log, where tracebacks always went


class UnexpectedErrors:
    """ASGI middleware: an exception before the response started is logged and answered 500 in
    OpenAI's shape, leaving the connection usable; one after it started (a stream under way) is
    raised, since only closing the connection can tell the client its answer is cut."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            if started:
                raise
            _log.exception("the proxy failed answering %s %s", scope.get("method"), scope.get("path"))
            said = (
                "the proxy failed unexpectedly (its log has the details); a session turn retried with the same "
                "Idempotency-Key is stored at most once"
            )
            if anthropic_path(scope.get("path", "")):
                body = anthropic_error(said, 500)
            else:
                body = error_body(said, "server_error")
            await JSONResponse(body, status_code=500)(scope, receive, send)


def store_failure(error: BaseException, said: str, *, error_type: str = "server_error") -> ProxyError:
    """The 503 for a session store that failed, ``said`` in the client's terms.

    The store's own message names the database's address and the session's key inside the store
    (its tenant's hash): the operator's to read, in the proxy's log, not a client's."""
    _log.warning("%s: %s", said, error)
    return ProxyError(
        f"{said}: the session store is unavailable or failed (the proxy's log says why); retry shortly",
        status=503,
        error_type=error_type,
        code="store_unavailable",
    )


def anthropic_path(path: str) -> bool:
    """Whether a path is Anthropic's API, whose clients read errors in Anthropic's shape."""
    return path == "/v1/messages" or path.startswith("/v1/messages/")


async def http_error(request: Request, error: Exception) -> Response:
    """Starlette's own refusals (an unknown path, a method the path does not take) in the shape the
    caller's SDK parses: Anthropic's under ``/v1/messages`` (also when a doubled ``/v1`` hides it), else
    OpenAI's."""
    assert isinstance(error, HTTPException)
    path = request.url.path
    if error.status_code == 404:
        message = f"no such endpoint: {request.method} {path}; {_doubled_prefix_fix(path)}the proxy serves " + (
            _served(request)
        )
        code = "unknown_url"
    elif error.status_code == 405:
        allowed = (error.headers or {}).get("Allow", "")
        message = f"{request.method} is not allowed on {request.url.path}; use {allowed or 'another method'}"
        code = "method_not_allowed"
    else:
        message, code = str(error.detail), None
    if anthropic_path(_without_doubled_prefix(path)):
        return JSONResponse(
            anthropic_error(message, error.status_code), status_code=error.status_code, headers=error.headers
        )
    body = error_body(message, "invalid_request_error", code)
    return JSONResponse(body, status_code=error.status_code, headers=error.headers)


_DOUBLED_PREFIX = "/v1/v1/"


def _without_doubled_prefix(path: str) -> str:
    return path.replace(_DOUBLED_PREFIX, "/v1/", 1) if path.startswith(_DOUBLED_PREFIX) else path


def _doubled_prefix_fix(path: str) -> str:
    """A doubled ``/v1`` is the usual reason a client misses: its base URL already ends in ``/v1``
    and the SDK adds another (Anthropic's SDKs add ``/v1`` themselves, OpenAI's do not)."""
    if not path.startswith(_DOUBLED_PREFIX):
        return ""
    fixed = _without_doubled_prefix(path)
    if anthropic_path(fixed):
        advice = "give Anthropic's SDK the proxy's base URL without /v1 (e.g. http://HOST:PORT)"
    else:
        advice = "drop one /v1 from the client's base URL"
    return f"the path has /v1 twice, so {advice}, and it will call {fixed}; "


def _served(request: Request) -> str:
    """Every endpoint of the app answering, read from its routes so the list cannot fall out of step."""
    methods: dict[str, list[str]] = {}
    for route in getattr(request.app, "routes", ()):
        path = getattr(route, "path", None)
        if isinstance(path, str):
            shown = re.sub(r"\{(\w+)(:[^}]*)?\}", r"{\1}", path)
            served = methods.setdefault(shown, [])
            served.extend(sorted(set(getattr(route, "methods", None) or ()) - {"HEAD"} - set(served)))
    return ", ".join(f"{' '.join(verbs)} {path}" for path, verbs in methods.items())
