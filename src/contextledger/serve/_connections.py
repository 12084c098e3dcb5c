"""How long a client may take to send a request, and how many connections it may hold.

uvicorn closes a connection idle between requests, but not one that is slowly sending a
request: a client trickling its headers a byte at a time, or a body it never finishes, holds a
connection (and a file descriptor) for as long as it likes, and a few thousand such clients
stop the proxy.  :func:`guarded_protocol` wraps uvicorn's own HTTP protocol with two bounds:

- **headers**: from a connection's first byte of a request to the end of its headers, at most
  ``read_timeout`` seconds, or the proxy answers 408 and closes the connection;
- **connections**: past ``max_connections`` open at once, a new one is answered 503 and closed
  at once, so the ones already open keep being served.

The body is bounded by the application (``Proxy._read_body``), which can answer in the API's
own shape.  Both answers here are written on the socket directly, in OpenAI's error shape with
``Connection: close``, since no request (and so no application) exists yet.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

__all__ = ["guarded_protocol", "raw_error"]


def raw_error(status: int, reason: str, message: str, code: str) -> bytes:
    """A whole HTTP/1.1 answer carrying an OpenAI-shaped error, closing the connection."""
    body = json.dumps(
        {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def guarded_protocol(read_timeout: float, max_connections: int) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class (httptools or h11, as uvicorn would choose) with the bounds above."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol  # noqa: PLC0415  (the serve extra)

    base: Any = AutoHTTPProtocol

    class GuardedProtocol(base):  # type: ignore[misc]
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                self._refuse(
                    raw_error(
                        503,
                        "Service Unavailable",
                        f"the proxy holds its limit of {max_connections} connections; retry shortly",
                        "too_many_connections",
                    )
                )
                return
            self._arm()

        def data_received(self, data: bytes) -> None:
            cycle = self.cycle
            if self._deadline is None and (cycle is None or cycle.response_complete):
                self._arm()  # the first bytes of the next request on a kept-alive connection
            super().data_received(data)
            if self.cycle is not cycle:  # its headers are in: a request exists, the app bounds the rest
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(read_timeout, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:
                return  # a request is being served after all
            self._refuse(
                raw_error(
                    408,
                    "Request Timeout",
                    f"the request's headers did not arrive within {read_timeout:g} seconds; the connection is closed",
                    "request_timeout",
                )
            )

        def _refuse(self, answer: bytes) -> None:
            if not self.transport.is_closing():
                self.transport.write(answer)
                self.transport.close()

    return GuardedProtocol
