"""The one HTTP client from the proxy to the upstream, and how its failures reach the caller.

An upstream error (any status of 400 or more) is passed through with its status and, when it
is already in OpenAI's error shape, its body; a timeout becomes 504 and an unreachable upstream
502, both in that shape.  None of them is ever stored.  Only a few headers travel upstream: the
key, the content type, and the ``OpenAI-*`` headers a client may rely on.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from typing import Any

import httpx

from contextledger.exceptions import ProxyError

__all__ = ["Upstream", "anthropic_error", "error_body", "passed_back", "upstream_error", "upstream_failure"]

_FORWARDED_PREFIXES = ("openai-",)

# What a client needs from the upstream's answer headers: when to retry and how much it may still
# send (SDK clients back off by them), and the request id that support asks for.
_PASSED_BACK = ("retry-after", "retry-after-ms", "x-request-id", "request-id")
_PASSED_BACK_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-", "openai-")


def passed_back(headers: Mapping[str, str]) -> dict[str, str]:
    """The upstream's answer headers that reach the client (see ``_PASSED_BACK``)."""
    return {
        name: value
        for name, value in headers.items()
        if name.lower() in _PASSED_BACK or name.lower().startswith(_PASSED_BACK_PREFIXES)
    }


def upstream_error(status: int, content: bytes, headers: Mapping[str, str]) -> ProxyError:
    """The error to answer with when the upstream answered ``status`` (400 or more), its
    retry and rate-limit headers with it."""
    status, failure = upstream_failure(status, content)
    return ProxyError(
        failure["error"].get("message") or "upstream error",
        status=status,
        error_type=failure["error"].get("type") or "upstream_error",
        code=failure["error"].get("code"),
        headers=passed_back(headers),
    )


def error_body(message: str, error_type: str, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


# Anthropic's error types by status, for the proxy's own refusals.
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    409: "invalid_request_error",
    413: "request_too_large",
    422: "invalid_request_error",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_BY_STATUS = frozenset({401, 403, 404, 408, 413, 429, 504, 529})
_KNOWN_TYPES = frozenset({*_TYPES.values(), "api_error", "billing_error"})


def anthropic_error(
    message: str, status: int, error_type: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """Anthropic's error shape, ``{"type": "error", "error": {"type", "message"}}``; the proxy's
    own code, where it has one, rides beside them."""
    kind = error_type if error_type in _KNOWN_TYPES else _TYPES.get(status, "api_error")
    if status in _BY_STATUS:  # the status says more than the proxy's generic type
        kind = _TYPES[status]
    error: dict[str, Any] = {"type": kind, "message": message}
    if code is not None:
        error["code"] = code
    return {"type": "error", "error": error}


def upstream_failure(status: int, content: bytes) -> tuple[int, dict[str, Any]]:
    """The status and OpenAI-shaped body to answer with when the upstream answered ``status``."""
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return status, body
    excerpt = content[:300].decode("utf-8", "replace")
    return status, error_body(
        f"the upstream answered HTTP {status}: {excerpt!r}; nothing was stored", "upstream_error", "upstream_error"
    )


class Upstream:
    """A pooled ``httpx`` client for one upstream base URL."""

    def __init__(self, base_url: str, *, timeout: float, upstream_key: str | None, anthropic: bool = False) -> None:
        self.base_url = base_url.rstrip("/")
        self._upstream_key = upstream_key
        self._anthropic = anthropic
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
        # TCP_NODELAY: the request goes out as headers then body, and without it the body waits for
        # the upstream to acknowledge the headers (Nagle against delayed ACKs), several ms a call.
        nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
        transport = httpx.AsyncHTTPTransport(limits=limits, socket_options=nodelay)
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(timeout), transport=transport)

    def headers(self, incoming: Mapping[str, str]) -> dict[str, str]:
        """What the upstream gets: the configured key or the client's own, and ``OpenAI-*`` headers."""
        headers = {"content-type": "application/json", "accept": incoming.get("accept", "application/json")}
        if self._anthropic:
            return self._anthropic_headers(incoming, headers)
        if self._upstream_key is not None:
            headers["authorization"] = f"Bearer {self._upstream_key}"
        elif "authorization" in incoming:
            headers["authorization"] = incoming["authorization"]
        for name, value in incoming.items():
            if name.lower().startswith(_FORWARDED_PREFIXES):
                headers[name] = value
        return headers

    def _anthropic_headers(self, incoming: Mapping[str, str], headers: dict[str, str]) -> dict[str, str]:
        """An Anthropic upstream's: the configured key as ``x-api-key``, or the client's own key as
        the client sent it (``x-api-key`` or a bearer token), and the ``anthropic-*`` headers
        (``anthropic-version``, ``anthropic-beta``) as they came."""
        if self._upstream_key is not None:
            headers["x-api-key"] = self._upstream_key
        else:
            for name in ("x-api-key", "authorization"):
                if name in incoming:
                    headers[name] = incoming[name]
        for name, value in incoming.items():
            if name.lower().startswith("anthropic-"):
                headers[name] = value
        return headers

    async def send(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes | None, *, stream: bool
    ) -> httpx.Response:
        """The upstream's response (headers only when ``stream``); :class:`ProxyError` if there is none."""
        request = self.client.build_request(method, self.base_url + path, headers=dict(headers), content=body)
        try:
            return await self.client.send(request, stream=stream)
        except httpx.TimeoutException:
            raise timeout_error() from None
        except httpx.HTTPError as error:
            raise ProxyError(
                f"the upstream at {self.base_url} could not be reached ({type(error).__name__}); nothing was stored",
                status=502,
                error_type="upstream_error",
                code="upstream_unreachable",
            ) from None

    async def close(self) -> None:
        await self.client.aclose()


def timeout_error() -> ProxyError:
    return ProxyError(
        "the upstream did not answer in time; nothing was stored, so the request can be retried",
        status=504,
        error_type="upstream_error",
        code="upstream_timeout",
    )
