"""Child process for the multi-process history tests: appends numbered turns to one session.

After each ``append`` returns it prints the turn's number and flushes, so every line the parent
reads is an acknowledged write.  With ``--wait-for-go`` it prints ``ready`` and waits for a line
on stdin first, so several children start appending at the same moment.

Each message's text is ``"{tag} {turn} {index}"``; ids are ``"{tag}-{turn}-{index}"``.

With ``--turn-ids`` each turn is stored with ``append_turn`` under the turn id ``"{tag}-{turn}"``,
as a writer that retries safely would; ``--start`` resends from that turn on (a restarted
writer), and ``--retry-for`` retries a turn whose store failed or whose outcome is unknown.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from contextledger.exceptions import HistoryError, TurnOutcomeUnknownError
from contextledger.history import HistoryProvider, RedisHistoryProvider, SQLiteHistoryProvider
from contextledger.messages import Message, TextContent


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
    return RedisHistoryProvider(target, namespace=namespace, socket_timeout=socket_timeout)


async def store(history: HistoryProvider, arguments: argparse.Namespace, number: int) -> None:
    messages = turn(arguments.tag, number, arguments.turn_size)
    if not arguments.turn_ids:
        await history.append(arguments.session, messages)
        return
    deadline = time.monotonic() + arguments.retry_for
    while True:
        try:
            await history.append_turn(arguments.session, f"{arguments.tag}-{number}", messages[:1], messages[1:])
            return
        except (HistoryError, TurnOutcomeUnknownError) as error:
            if time.monotonic() >= deadline:
                raise
            print(f"retrying turn {number} after {type(error).__name__}", file=sys.stderr, flush=True)
            await asyncio.sleep(0.05)


async def main(arguments: argparse.Namespace) -> None:
    history = open_history(arguments.backend, arguments.target, arguments.namespace, arguments.socket_timeout)
    try:
        if arguments.wait_for_go:
            print("ready", flush=True)
            await asyncio.to_thread(sys.stdin.readline)
        for number in range(arguments.start, arguments.start + arguments.turns):
            await store(history, arguments, number)
            print(number, flush=True)
    finally:
        await history.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("backend", choices=["sqlite", "redis"])
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
    asyncio.run(main(parser.parse_args()))
