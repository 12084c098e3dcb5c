"""Helpers shared by the history tests: a way to run a scenario against any backend, messages
that exercise every field a store must keep, and child processes that append concurrently."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from contextledger.history import HistoryProvider
from contextledger.messages import (
    SUMMARY_PROPERTY,
    FunctionCallContent,
    FunctionResultContent,
    Message,
    OpaqueContent,
    TextContent,
)
from contextledger.messages._message import SUMMARY_SOURCE_PROPERTY
from contextledger.messages._openai import message_from_openai

__all__ = [
    "APPENDER",
    "Backend",
    "RedisServer",
    "append_together",
    "appender_command",
    "assert_each_turn_once",
    "free_port",
    "kill_mid_burst",
    "rich_messages",
    "run_to_the_end",
    "running",
    "turn_number",
]

T = TypeVar("T")

APPENDER = Path(__file__).with_name("appender.py")
"""The child-process script the multi-process tests run."""

SOURCE_ROOT = Path(__file__).resolve().parents[2] / "src"


@dataclass(frozen=True)
class RedisServer:
    """A redis-server the tests started for themselves on 127.0.0.1."""

    port: int

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


@dataclass
class Backend:
    """One history store under test; each :meth:`run` opens a provider on the same storage."""

    name: str
    make_provider: Callable[[], HistoryProvider]

    def run(self, scenario: Callable[[HistoryProvider], Awaitable[T]]) -> T:
        """Run ``scenario`` in a fresh event loop and close the provider afterwards.

        Each run makes its own provider because a Redis client's connections belong to the
        event loop that opened them.
        """

        async def main() -> T:
            history = self.make_provider()
            try:
                return await scenario(history)
            finally:
                await history.close()

        return asyncio.run(main())


def free_port() -> int:
    """A TCP port nothing listens on right now (another process could still take it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def rich_messages(tag: str) -> list[Message]:
    """A short conversation touching every field a store must keep: ids, additional properties,
    extra OpenAI keys, author names, reasoning, several tool calls, list-of-parts results,
    opaque parts, a summary, a reasoning-only message, the developer role and non-ASCII text."""
    calls = (
        FunctionCallContent(f"{tag}-call-1", "lookup_price", '{"sku": "A-1"}', extra={"index": 0}),
        FunctionCallContent(f"{tag}-call-2", "lookup_stock", "{}", function_extra={"strict": True}),
    )
    return [
        Message.system("You are a careful assistant.", message_id=f"{tag}-system"),
        message_from_openai({"role": "developer", "content": "Answer in English."}),
        Message.user(
            f"{tag}: how much is A-1? Привет, café ☕",
            author_name="ada",
            message_id=f"{tag}-user-1",
            additional_properties={"source": "external", "scores": [1, 2.5, None], "nested": {"ok": True}},
        ),
        Message.assistant(reasoning="Look both up.", calls=calls, message_id=f"{tag}-assistant-1"),
        Message.tool(f"{tag}-call-1", '{"price": 12.5}', message_id=f"{tag}-tool-1"),
        message_from_openai(
            {
                "role": "tool",
                "tool_call_id": f"{tag}-call-2",
                "content": [{"type": "text", "text": "in stock"}, {"type": "text", "text": ": 4"}],
            }
        ),
        Message.assistant(reasoning="Thinking it over."),
        Message(
            "user",
            (TextContent("what is in this picture?"), OpaqueContent({"type": "image_url", "image_url": {"url": "x"}})),
        ),
        Message.assistant(
            "Earlier: the user asked about A-1.",
            additional_properties={SUMMARY_PROPERTY: True, SUMMARY_SOURCE_PROPERTY: "summarization"},
        ),
        Message("assistant", (TextContent(""),), extra={"refusal": None, "audio": {"id": "a1"}}),
        Message("tool", (FunctionResultContent(f"{tag}-call-2", ""),)),
        Message.assistant(f"{tag}: A-1 costs 12.5 and 4 are in stock."),
    ]


def turn_number(message: Message) -> tuple[str, int]:
    """The (writer tag, counter) an appender child wrote into a message's text."""
    tag, number, _ = message.text.split(" ")
    return tag, int(number)


def appender_command(
    backend: str,
    target: str,
    session: str,
    tag: str,
    *,
    turns: int,
    turn_size: int = 1,
    namespace: str = "contextledger",
    wait_for_go: bool = False,
    turn_ids: bool = False,
    start: int = 0,
    retry_for: float = 0.0,
    socket_timeout: float = 5.0,
    writer: str = "history",
    window: int = 3,
) -> list[str]:
    """The command line of a child process that appends ``turns`` turns and acknowledges each."""
    command = [
        sys.executable,
        str(APPENDER),
        backend,
        target,
        session,
        tag,
        "--turns",
        str(turns),
        "--turn-size",
        str(turn_size),
        "--namespace",
        namespace,
    ]
    if wait_for_go:
        command.append("--wait-for-go")
    if turn_ids:
        command += ["--turn-ids", "--start", str(start), "--retry-for", str(retry_for)]
        command += ["--socket-timeout", str(socket_timeout), "--writer", writer, "--window", str(window)]
    return command


@contextmanager
def running(commands: Sequence[list[str]], *, timeout: float = 60.0) -> Iterator[list[subprocess.Popen[str]]]:
    """Start child processes with piped text stdio; kill any still running on exit or after ``timeout``."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SOURCE_ROOT), environment.get("PYTHONPATH")]))
    processes = [
        subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
        )
        for command in commands
    ]

    def kill_all() -> None:
        for process in processes:
            if process.poll() is None:
                process.kill()

    watchdog = threading.Timer(timeout, kill_all)
    watchdog.start()
    try:
        yield processes
    finally:
        watchdog.cancel()
        kill_all()
        for process in processes:
            process.wait()
            for stream in (process.stdin, process.stdout, process.stderr):
                if stream is not None:
                    stream.close()


def append_together(commands: Sequence[list[str]], *, turns: int) -> None:
    """Run appender children that were started with ``--wait-for-go``, releasing them at the same
    moment so their appends interleave; fail unless each acknowledged all ``turns`` turns."""
    with running(commands, timeout=60) as children:
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n", child.stderr.read() if child.stderr else ""
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            assert child.stdout is not None
            assert child.stderr is not None
            acknowledged = child.stdout.read().split()
            errors = child.stderr.read()
            assert child.wait() == 0, errors
            assert acknowledged == [str(number) for number in range(turns)]


def kill_mid_burst(command: list[str], kill_after: int) -> list[int]:
    """Run an appender child, SIGKILL it after ``kill_after`` acknowledged turns, and return every
    turn number it acknowledged (those already in the pipe when the kill landed included)."""
    with running([command], timeout=60) as (child,):
        assert child.stdout is not None
        assert child.stderr is not None
        acknowledged: list[int] = []
        while len(acknowledged) < kill_after:
            line = child.stdout.readline()
            if not line:
                raise AssertionError(f"the appender stopped before the kill:\n{child.stderr.read()}")
            acknowledged.append(int(line))
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        acknowledged += [int(line) for line in child.stdout.read().split()]
    assert child.returncode == -signal.SIGKILL
    return acknowledged


def run_to_the_end(command: list[str]) -> list[int]:
    """Run an appender child to its end and return the turn numbers it acknowledged."""
    with running([command], timeout=120) as (child,):
        assert child.stdout is not None
        assert child.stderr is not None
        acknowledged = [int(line) for line in child.stdout.read().split()]
        errors = child.stderr.read()
        assert child.wait() == 0, errors
    return acknowledged


def assert_each_turn_once(stored: Sequence[Message], tag: str, turns: int, turn_size: int) -> None:
    """``stored`` holds turns 0 to ``turns - 1`` of writer ``tag``, each whole, once, in order."""
    ids = [message.message_id for message in stored]
    expected = [f"{tag}-{number}-{index}" for number in range(turns) for index in range(turn_size)]
    assert len(ids) == len(set(ids)), "a turn was stored twice"
    assert ids == expected
