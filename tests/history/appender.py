"""Child process for the multi-process history tests: appends numbered turns to one session.

After each ``append`` returns it prints the turn's number and flushes, so every line the parent
reads is an acknowledged write.  With ``--wait-for-go`` it prints ``ready`` and waits for a line
on stdin first, so several children start appending at the same moment.

Each message's text is ``"{tag} {turn} {index}"``; ids are ``"{tag}-{turn}-{index}"``.

With ``--turn-ids`` each turn is stored under the turn id ``"{tag}-{turn}"`` through the one turn
writer (:func:`~contextledger.history.write_turn`), as a host that retries safely does;
``--start`` resends from that turn on (a restarted writer), and ``--retry-for`` retries a turn
whose store failed or whose outcome is unknown.  ``--writer`` picks the host that writes: the
writer called directly (``history``, the default), an agent run (``agent``, whose model answers
with the turn's reply), :class:`ReducedHistoryProvider` (``reduced``, a window of ``--window``
groups) or the Agent Framework adapter (``maf``, with the same window).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from contextledger.agents import Agent, ReducedHistoryProvider, Session
from contextledger.clients import ChatResponse
from contextledger.compaction import SlidingWindowStrategy
from contextledger.exceptions import HistoryError, TurnOutcomeUnknownError
from contextledger.history import (
    HistoryProvider,
    PostgresHistoryProvider,
    RedisHistoryProvider,
    SQLiteHistoryProvider,
    Turn,
    write_turn,
)
from contextledger.history._turns import TurnTarget
from contextledger.messages import Message, TextContent

Store = Callable[[str, str, list[Message]], Awaitable[None]]


def turn(tag: str, number: int, size: int) -> list[Message]:
    """One turn: a user message followed by ``size - 1`` assistant messages."""
    return [
        Message(
            "user" if index == 0 else "assistant",
            (TextContent(f"{tag} {number} {index}"),),
            message_id=f"{tag}-{number}-{index}",
            additional_properties={"writer": tag, "turn": number},
        )
        for index in range(size)
    ]


def open_history(backend: str, target: str, namespace: str, socket_timeout: float) -> HistoryProvider:
    if backend == "sqlite":
        return SQLiteHistoryProvider(target, busy_timeout=30.0)
    if backend == "postgres":
        return PostgresHistoryProvider(target, namespace=namespace)
    return RedisHistoryProvider(target, namespace=namespace, socket_timeout=socket_timeout)


class ReplyModel:
    """Answers each run with the reply its turn was given (the messages after the input)."""

    def __init__(self) -> None:
        self.reply: list[Message] = []

    async def get_response(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None, **options: Any
    ) -> ChatResponse:
        return ChatResponse(self.reply[-1].text if self.reply else "", tuple(self.reply))


def writer_for(history: HistoryProvider, arguments: argparse.Namespace) -> Store:
    """How the chosen host stores one turn (session, turn id, the turn's messages)."""
    if arguments.writer == "agent":
        model = ReplyModel()
        agent = Agent(model, history=history)
        sessions: dict[str, Session] = {}

        async def run(session: str, turn_id: str, messages: list[Message]) -> None:
            model.reply = messages[1:]
            await agent.run(messages[0], session=sessions.setdefault(session, Session(session)), turn_id=turn_id)

        return run
    if arguments.writer == "reduced":
        reduced = ReducedHistoryProvider(
            history, SlidingWindowStrategy(keep_last_groups=arguments.window, stable_step=1)
        )

        async def append(session: str, turn_id: str, messages: list[Message]) -> None:
            await reduced.append_turn(session, turn_id, messages[:1], messages[1:])

        return append
    if arguments.writer == "maf":
        from contextledger.integrations.maf import ContextLedgerHistoryProvider  # noqa: PLC0415

        adapter = ContextLedgerHistoryProvider(
            history, reducer=SlidingWindowStrategy(keep_last_groups=arguments.window, stable_step=1)
        )

        async def save(session: str, turn_id: str, messages: list[Message]) -> None:
            await adapter.save_turn(session, turn_id, messages[:1], messages[1:])

        return save

    async def write(session: str, turn_id: str, messages: list[Message]) -> None:
        await write_turn(Turn(session, turn_id, tuple(messages[:1]), tuple(messages[1:])), [TurnTarget(history)])

    return write


async def store(history: HistoryProvider, writer: Store, arguments: argparse.Namespace, number: int) -> None:
    messages = turn(arguments.tag, number, arguments.turn_size)
    if not arguments.turn_ids:
        await history.append(arguments.session, messages)
        return
    deadline = time.monotonic() + arguments.retry_for
    while True:
        try:
            await writer(arguments.session, f"{arguments.tag}-{number}", messages)
            return
        except (HistoryError, TurnOutcomeUnknownError) as error:
            if time.monotonic() >= deadline:
                raise
            print(f"retrying turn {number} after {type(error).__name__}", file=sys.stderr, flush=True)
            await asyncio.sleep(0.05)


async def main(arguments: argparse.Namespace) -> None:
    history = open_history(arguments.backend, arguments.target, arguments.namespace, arguments.socket_timeout)
    writer = writer_for(history, arguments)
    try:
        if arguments.wait_for_go:
            print("ready", flush=True)
            await asyncio.to_thread(sys.stdin.readline)
        for number in range(arguments.start, arguments.start + arguments.turns):
            await store(history, writer, arguments, number)
            print(number, flush=True)
    finally:
        await history.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("backend", choices=["sqlite", "redis", "postgres"])
    parser.add_argument("target", help="the SQLite file or the Redis URL")
    parser.add_argument("session")
    parser.add_argument("tag")
    parser.add_argument("--turns", type=int, required=True)
    parser.add_argument("--turn-size", type=int, default=1)
    parser.add_argument("--namespace", default="contextledger")
    parser.add_argument("--wait-for-go", action="store_true")
    parser.add_argument("--turn-ids", action="store_true")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--retry-for", type=float, default=0.0)
    parser.add_argument("--socket-timeout", type=float, default=5.0)
    parser.add_argument("--writer", choices=["history", "agent", "reduced", "maf"], default="history")
    parser.add_argument("--window", type=int, default=3, help="the reduced and maf writers' window, in groups")
    asyncio.run(main(parser.parse_args()))
