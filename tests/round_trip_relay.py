"""A TCP relay that counts round trips: how often a client had to wait for a server's answer.

Put between a client and a real server on 127.0.0.1, it forwards every byte both ways and counts,
per connection, the times the client waited.  The sum over every connection is what a store
operation cost in waiting on the network.

How a wait is seen depends on the protocol.  A Redis client that pipelines writes its whole
pipeline before it reads, so a wait is the client speaking after the server has (or speaking
first), however many packets carry it.  A Postgres client in pipeline mode sends each statement as
soon as it is queued and reads answers only when it needs one, so the server may well answer the
first statements before the next ones leave: counted that way, one pipeline would cost one, two or
three "round trips" by the timing of the machine.  For Postgres the relay therefore reads the
client's messages and counts those the client waits on after sending them: a simple query
(``Q``), a sync (``S``), a flush (``H``) unless it follows one of those two, a password or SASL
answer (``p``), and the untyped messages that open a connection (an encryption request, the
startup packet).  The connections must be plain
text (``sslmode=disable`` or a server without TLS), since an encrypted stream cannot be read.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Literal

__all__ = ["PostgresWaits", "RoundTripRelay"]

# After these frontend messages a Postgres client reads the server's answer before it goes on.
_WAITED = frozenset(b"QSHpF")
_FLUSH = ord("H")
_ANSWERED = frozenset(b"SH")


class PostgresWaits:
    """The waits in one connection's stream of Postgres frontend messages, fed as it arrives.

    A connection opens with untyped messages (``int32`` length, then a code: an encryption request
    or the startup packet, each answered before the client goes on); after the startup packet every
    message is a type byte and an ``int32`` length that counts itself but not the type byte.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._started = False
        self._previous = 0

    def feed(self, data: bytes) -> int:
        """The waits the messages completed by ``data`` end in."""
        self._buffer += data
        waits = 0
        while True:
            if not self._started:
                if len(self._buffer) < 8:
                    return waits
                (length,) = struct.unpack_from("!i", self._buffer)
                if len(self._buffer) < length:
                    return waits
                (code,) = struct.unpack_from("!i", self._buffer, 4)
                # Protocol 3.x (196608 and up) is the startup packet; codes 1234/56xx are requests
                # (SSL, GSS encryption, cancel) that come before it.
                self._started = code >> 16 == 3
                waits += 1
                del self._buffer[:length]
                continue
            if len(self._buffer) < 5:
                return waits
            (length,) = struct.unpack_from("!i", self._buffer, 1)
            if len(self._buffer) < 1 + length:
                return waits
            kind = self._buffer[0]
            # A flush right after a sync or a flush asks for nothing new (psycopg ends a pipeline
            # with both): the client waits once for the two.
            if kind in _WAITED and not (kind == _FLUSH and self._previous in _ANSWERED):
                waits += 1
            self._previous = kind
            del self._buffer[: 1 + length]


class _Alternation:
    """Waits seen as the client speaking after the server has (or speaking first)."""

    def __init__(self) -> None:
        self._last = "server"

    def client(self, _data: bytes) -> int:
        waited = self._last == "server"
        self._last = "client"
        return int(waited)

    def server(self, _data: bytes) -> int:
        self._last = "server"
        return 0


def _counters(protocol: str) -> tuple[Callable[[bytes], int], Callable[[bytes], int]]:
    """What counts a new connection's waits, on the client's side and on the server's."""
    if protocol == "postgres":
        return PostgresWaits().feed, lambda _data: 0
    alternation = _Alternation()
    return alternation.client, alternation.server


class RoundTripRelay:
    """Listens on 127.0.0.1 (:attr:`port`) and relays each connection to ``target_port``;
    ``protocol`` says how a wait is seen (see the module docstring)."""

    def __init__(self, target_port: int, *, protocol: Literal["postgres", "pipelined"] = "pipelined") -> None:
        self._target_port = target_port
        self._protocol = protocol
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._round_trips = 0
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def round_trips(self) -> int:
        with self._lock:
            return self._round_trips

    def reset(self) -> None:
        with self._lock:
            self._round_trips = 0

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self._target_port))
            for connection in (client, server):
                connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, server]
            client_side, server_side = _counters(self._protocol)
            threading.Thread(target=self._pump, args=(client, server, client_side), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, server_side), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, count: Callable[[bytes], int]) -> None:
        """Forward ``source`` to ``target``, adding what ``count`` reads in each chunk (under the
        lock, before the chunk goes on, so a count is never late for the answer it caused)."""
        try:
            while data := source.recv(65536):
                with self._lock:
                    self._round_trips += count(data)
                target.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                target.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        with self._lock:
            sockets = [self._listener, *self._sockets]
        for connection in sockets:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def __enter__(self) -> RoundTripRelay:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
