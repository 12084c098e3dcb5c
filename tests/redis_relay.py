"""A TCP relay in front of a real redis-server that can lose the reply to one command.

The failure that makes a retried command run twice: the command reaches the server and runs,
then the connection breaks before the reply reaches the client.  The relay forwards every byte
both ways until it is told which command's reply to lose; then the next time a client sends
that command, the relay forwards it, waits for the server's reply and cuts the client's
connection instead of passing the reply on.  It also counts how often each command was sent,
so a test sees whether the client sent it again.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType

__all__ = ["ReplyLosingRelay"]


def _marker(command: str) -> bytes:
    """How a command's name travels in the protocol redis-py speaks (RESP): ``$4\\r\\nEXEC\\r\\n``."""
    name = command.upper().encode()
    return b"$%d\r\n%s\r\n" % (len(name), name)


class ReplyLosingRelay:
    """Listens on 127.0.0.1 (:attr:`url`) and relays each connection to ``target_port``."""

    def __init__(self, target_port: int) -> None:
        self._target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._traffic: list[bytes] = []  # what clients sent, chunk by chunk
        self._lose: bytes | None = None
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._start(self._accept)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def lose_reply_to(self, command: str) -> None:
        """Lose the reply to the next ``command`` any client sends (once)."""
        with self._lock:
            self._lose = _marker(command)

    def sent(self, command: str) -> int:
        """How many times clients sent ``command`` through the relay."""
        with self._lock:
            return sum(chunk.count(_marker(command)) for chunk in self._traffic)

    def close(self) -> None:
        with self._lock:
            sockets = [self._listener, *self._sockets]
        for connection in sockets:
            # A shutdown wakes the thread blocked reading it, which a close alone may not.
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> ReplyLosingRelay:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def _start(self, target: object, *arguments: object) -> None:
        thread = threading.Thread(target=target, args=arguments, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # the listener was closed
            server = socket.create_connection(("127.0.0.1", self._target_port))
            with self._lock:
                self._sockets += [client, server]
            cut = threading.Event()  # set once this connection's next reply is to be lost
            self._start(self._client_to_server, client, server, cut)
            self._start(self._server_to_client, server, client, cut)

    def _client_to_server(self, client: socket.socket, server: socket.socket, cut: threading.Event) -> None:
        while True:
            try:
                data = client.recv(65536)
            except OSError:
                return
            if not data:
                return  # the server side stays open until close(): what was sent still runs
            with self._lock:
                self._traffic.append(data)
                if self._lose is not None and self._lose in data:
                    self._lose = None
                    cut.set()
            try:
                server.sendall(data)
            except OSError:
                return

    def _server_to_client(self, server: socket.socket, client: socket.socket, cut: threading.Event) -> None:
        while True:
            try:
                data = server.recv(65536)
            except OSError:
                return
            if not data:
                client.close()
                return
            if cut.is_set():
                # The command ran (this is its reply); the client never hears of it.
                client.shutdown(socket.SHUT_RDWR)
                client.close()
                return  # the server side stays open until close(), as on the other side
            try:
                client.sendall(data)
            except OSError:
                return
