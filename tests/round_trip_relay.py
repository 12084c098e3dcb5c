"""A TCP relay that counts round trips: how often a client had to wait for a server's answer.

Put between a client and a real server on 127.0.0.1, it forwards every byte both ways and, per
connection, counts each time the client speaks after the server has (or speaks first): one
round trip, however many statements a pipeline packs into it or however many packets carry it.
The sum over every connection is what a store operation cost in waiting on the network.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType

__all__ = ["RoundTripRelay"]


class RoundTripRelay:
    """Listens on 127.0.0.1 (:attr:`port`) and relays each connection to ``target_port``."""

    def __init__(self, target_port: int) -> None:
        self._target_port = target_port
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
            last = ["server"]  # who spoke last on this connection; the client speaking first is a round trip
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, "client", last), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, "server", last), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, side: str, last: list[str]) -> None:
        try:
            while data := source.recv(65536):
                with self._lock:
                    if side == "client" and last[0] == "server":
                        self._round_trips += 1
                    last[0] = side
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
