"""A worker for the concurrency tests: random turns and forgets on one shared fact store.

Run as a child process against Redis or SQLite (``python -m tests.facts.fact_worker URL|PATH OWNER TAG
--turns N --seed S``)
it prints ``ready``, waits for a line on stdin so that every child starts together, runs, and
prints one JSON line per recorded operation.  The thread and asyncio tests call :func:`run` and
:func:`run_async` directly on an in-memory store.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time

from contextledger.facts import (
    ALLOWED_KEYS,
    PostgresFactStore,
    RedisFactStore,
    RuleWriter,
    SQLiteFactStore,
    parse_assertions,
)
from contextledger.facts._store import FactMemory
from tests.facts.history_check import Recorder

KEYS = sorted(ALLOWED_KEYS)
FORGET_ONE = 0.04
FORGET_ALL = 0.01


def message(tag: str, number: int, rng: random.Random) -> str:
    """Zero to three declarations with values unique to this worker and turn, sometimes a key
    declared twice (the last wins), sometimes plain prose."""
    if rng.random() < 0.1:
        return f"{tag} asks: where can I find logs?"
    keys = rng.sample(KEYS, rng.randint(1, 3))
    parts = [f"{key}={tag}-{number}-{index}" for index, key in enumerate(keys)]
    if rng.random() < 0.1:
        parts.insert(0, f"{keys[-1].upper()}=superseded {tag}-{number}")
    return rng.choice(["; ", "\n"]).join(parts)


def _maybe_forget(recorder: Recorder, store: FactMemory, rng: random.Random) -> None:
    chance = rng.random()
    if chance < FORGET_ONE:
        recorder.forget(store, rng.choice(KEYS))
    elif chance < FORGET_ONE + FORGET_ALL:
        recorder.forget(store, None)


def run(store: FactMemory, tag: str, turns: int, seed: int) -> Recorder:
    """A thread's or process's worker: ``turns`` turns, yielding now and then between a turn's
    begin and its apply so that other workers get in between."""
    rng = random.Random(seed)
    recorder = Recorder(tag)
    for number in range(turns):
        _maybe_forget(recorder, store, rng)
        text = message(tag, number, rng)
        ticket = recorder.begin(store, text)
        if rng.random() < 0.3:
            time.sleep(0)
        recorder.apply(store, ticket, parse_assertions(text))
    return recorder


async def run_async(store: FactMemory, tag: str, turns: int, seed: int) -> Recorder:
    """An asyncio task's worker: extraction through :func:`extract` with the rule writer,
    sometimes yielding to the other tasks while the extraction is in flight."""
    rng = random.Random(seed)
    recorder = Recorder(tag)
    writer = RuleWriter()
    for number in range(turns):
        _maybe_forget(recorder, store, rng)
        text = message(tag, number, rng)
        ticket = recorder.begin(store, text)
        if rng.random() < 0.3:
            await asyncio.sleep(0)
        await recorder.extract(store, writer, ticket, parse_assertions(text))
    return recorder


def open_store(location: str, owner: str) -> RedisFactStore | SQLiteFactStore | PostgresFactStore:
    """The persistent store at ``location``: a redis://, redis+cluster:// or postgresql:// URL or a SQLite file path."""
    if location.startswith(("redis://", "redis+cluster://")):
        return RedisFactStore(location, owner=owner)
    if location.startswith("postgresql://"):
        return PostgresFactStore(location, owner=owner)
    return SQLiteFactStore(location, owner=owner)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("owner")
    parser.add_argument("tag")
    parser.add_argument("--turns", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    arguments = parser.parse_args()
    with open_store(arguments.url, arguments.owner) as store:
        print("ready", flush=True)
        sys.stdin.readline()
        recorder = run(store, arguments.tag, arguments.turns, arguments.seed)
    for operation in recorder.operations:
        print(json.dumps(operation.to_json()))


if __name__ == "__main__":
    main()
