"""The one HTTP client from the proxy to the upstream, and how its failures reach the caller.

An upstream error (any status of 400 or more) is passed through with its status and, when it
is already in OpenAI's error shape, its body; a timeout becomes 504 and an unreachable upstream
502, both in that shape.  None of them is ever stored.  Only a few headers travel upstream: the
key, the content type, and the ``OpenAI-*`` headers a client may rely on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import aiohttp

from contextledger.exceptions import ProxyError

__all__ = [
    "Answer",
    "StreamBroken",
    "Streamed",
    "Upstream",
    "anthropic_error",
    "error_body",
    "passed_back",
    "upstream_error",
    "upstream_failure",
]

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


class Answer:
    """A whole answer from the upstream: its status, headers (looked up in any case) and body."""

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status_code: int, headers: Mapping[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content

    def json(self) -> Any:
        return json.loads(self.content)


class StreamBroken(Exception):
    """The upstream's stream stopped before its end; ``timed_out`` when it went quiet for longer
    than the timeout rather than failing."""

    def __init__(self, reason: str, *, timed_out: bool) -> None:
        super().__init__(reason)
        self.timed_out = timed_out


class Streamed:
    """An answer whose body is still arriving: its status and headers now, its body chunk by chunk."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status_code = response.status
        self.headers: Mapping[str, str] = response.headers

    async def aread(self) -> bytes:
        """The whole body (an error's, which is short)."""
        try:
            return await self._response.read()
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
            return b""

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives; :class:`StreamBroken` if it stops before its end."""
        try:
            async for data in self._response.content.iter_any():
                yield data
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
            raise StreamBroken("timed out", timed_out=True) from None
        except (aiohttp.ClientError, OSError) as error:
            raise StreamBroken(type(error).__name__, timed_out=False) from None

    async def aclose(self) -> None:
        """Give the connection back when the body was read to its end; drop it otherwise (the rest
        of a stream the client walked away from must not be read as the next answer)."""
        if self._response.content.is_eof():
            self._response.release()
        else:
            self._response.close()


class Upstream:
    """A pooled ``aiohttp`` client for one upstream base URL.

    ``aiohttp`` rather than ``httpx``: its parser is compiled, and a call with a 200-message body
    costs the proxy a third of the CPU time (measured on docs/benchmarks.md, the proxy), which is
    most of what the proxy adds to a request.  The session is made on first use, in the event loop
    that serves requests, and made again if that loop is not the one it was made in.
    """

    def __init__(self, base_url: str, *, timeout: float, upstream_key: str | None, anthropic: bool = False) -> None:
        self.base_url = base_url.rstrip("/")
        self._upstream_key = upstream_key
        self._anthropic = anthropic
        # A call may wait this long for a connection (pool and connect) and then between any two
        # reads of the answer: a stream that keeps sending is never cut, one that goes quiet is.
        self._timeout = aiohttp.ClientTimeout(total=None, connect=timeout, sock_read=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._proxy = _environment_proxy(self.base_url)

    @property
    def provider(self) -> str:
        """The GenAI provider the upstream's API belongs to, as traces name it."""
        return "anthropic" if self._anthropic else "openai"

    def _client(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            # TCP_NODELAY is aiohttp's default: without it a body waits for the upstream to
            # acknowledge the headers (Nagle against delayed ACKs), several ms a call.
            connector = aiohttp.TCPConnector(limit=256, limit_per_host=0, keepalive_timeout=30)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
            self._loop = loop
        return self._session

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

    async def send(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None) -> Answer:
        """The upstream's whole answer; :class:`ProxyError` if there is none."""
        with self._reaching():
            async with await self._request(method, path, headers, body) as response:
                return Answer(response.status, response.headers, await response.read())

    async def open_stream(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None) -> Streamed:
        """The upstream's answer as its status and headers arrive, its body still to be read."""
        with self._reaching():
            response = await self._request(method, path, headers, body)
        return Streamed(response)

    async def _request(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes | None
    ) -> aiohttp.ClientResponse:
        """The upstream's answer as its status arrives.  A connection the upstream closes as the
        request goes out on it, before any answer, is tried once more: a pooled connection the
        upstream let go when its keep-alive ran out (five seconds for uvicorn, so for vLLM and
        most Python servers, against the pool's thirty) while the request was on its way, which
        it never read.  The official SDKs retry a connection error the same way; an answer that
        started and broke is never sent twice."""
        url = self.base_url + path
        try:
            return await self._client().request(method, url, headers=headers, data=body, proxy=self._proxy)
        except aiohttp.ClientConnectorError:
            raise  # no connection was made: nothing to try again on
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            return await self._client().request(method, url, headers=headers, data=body, proxy=self._proxy)

    @contextlib.contextmanager
    def _reaching(self) -> Iterator[None]:
        """A call's failure to get an answer as the client's error: 504 for a timeout, else 502."""
        try:
            yield
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
            raise timeout_error() from None
        except (aiohttp.ClientError, OSError) as error:
            raise ProxyError(
                f"the upstream at {self.base_url} could not be reached ({type(error).__name__}); nothing was stored",
                status=502,
                error_type="upstream_error",
                code="upstream_unreachable",
            ) from None

    async def status_of(self, path: str, headers: Mapping[str, str], timeout: float) -> int:
        """The status a ``GET`` of ``path`` answers with (``/readyz``); ``ConnectionError`` if none."""
        try:
            limit = aiohttp.ClientTimeout(total=timeout)
            url = self.base_url + path
            async with self._client().get(url, headers=headers, timeout=limit, proxy=self._proxy) as response:
                return response.status
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as error:
            raise ConnectionError(f"{self.base_url}{path} did not answer ({type(error).__name__})") from None

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()


def _environment_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTPS_PROXY``, ``NO_PROXY`` and the like),
    read once: as most HTTP clients do, the proxy honours them, but asking for every request
    (aiohttp's ``trust_env``) reads the environment in a thread each time."""
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


def timeout_error() -> ProxyError:
    return ProxyError(
        "the upstream did not answer in time; nothing was stored, so the request can be retried",
        status=504,
        error_type="upstream_error",
        code="upstream_timeout",
    )
