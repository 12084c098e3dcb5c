"""What the provider pipeline costs per turn on a long session.

    python benchmarks/agent_turns.py            # 1,000 turns of in-memory history, 200 measured turns
    python benchmarks/agent_turns.py --quick    # a smoke run

A session is first filled with 1,000 turns (a question, a tool call with a
1-2 KB result, an answer).  Then each measured turn runs the agent with the
history provider and a compaction provider (a sliding window on the request
view before the call, tool-result collapse on the retained history after it)
against a client that answers instantly.  The baseline, in the same process,
is the same agent with no history and no compaction: what is left is the
pipeline's own cost (history load, compaction before, storing, compaction
after).  Medians are reported; the budget is 2 ms per turn.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from contextledger.agents import Agent, CompactionProvider
from contextledger.clients import ChatResponse
from contextledger.compaction import SlidingWindowStrategy, ToolResultCompactionStrategy
from contextledger.history import InMemoryHistoryProvider
from contextledger.messages import FunctionCallContent, Message

BUDGET_MS = 2.0


class InstantClient:
    """Answers at once, so what is timed is the agent and its providers, not a model.

    A question starting with "Check" gets a tool call first, like a real model would make.
    """

    def __init__(self) -> None:
        self.reply = ChatResponse("ok", (Message.assistant("ok"),), None)
        self.calls = 0

    async def get_response(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None, **options: Any
    ) -> ChatResponse:
        last = messages[-1]
        if tools and last.role == "user" and last.text.startswith("Check"):
            self.calls += 1
            call = FunctionCallContent(f"live_{self.calls}", "lookup_stock", '{"item": "item"}')
            return ChatResponse("", (Message.assistant(calls=[call]),), None)
        return self.reply


def lookup_stock(item: str) -> str:
    """The stock of an item, with a long warehouse report."""
    return f"{item}: 12 in stock. " + "Warehouse report line. " * 60


def _turn(i: int) -> list[Message]:
    call = FunctionCallContent(f"call_{i}", "lookup_stock", f'{{"item": "item{i}"}}')
    result = f"item{i}: {i % 97} in stock. " + "Warehouse report line. " * (45 + i % 45)
    return [
        Message.user(f"How many of item{i} are in stock?"),
        Message.assistant(calls=[call]),
        Message.tool(call.call_id, result),
        Message.assistant(f"There are {i % 97} of item{i}."),
    ]


async def _measure(turns: int, measured: int, *, tool_turns: bool) -> tuple[list[float], list[float]]:
    history = InMemoryHistoryProvider()
    compaction = CompactionProvider(
        before_strategy=SlidingWindowStrategy(keep_last_groups=20),
        after_strategy=ToolResultCompactionStrategy(keep_last_tool_call_groups=1),
        history_source_id=history.source_id,
    )
    agent = Agent(InstantClient(), name="bench", tools=[lookup_stock], context_providers=[history, compaction])
    bare = Agent(InstantClient(), name="bare", tools=[lookup_stock])
    session = agent.create_session()
    await history.append(session.session_id, [m for i in range(turns) for m in _turn(i)])
    await agent.run("warm up", session=session)  # first run indexes the whole history once
    with_pipeline: list[float] = []
    baseline: list[float] = []
    gc.collect()
    for i in range(measured):
        question = f"Check item{turns + i}" if tool_turns else f"Anything new about item{turns + i}?"
        start = time.perf_counter()
        await agent.run(question, session=session)
        with_pipeline.append(time.perf_counter() - start)
        start = time.perf_counter()
        await bare.run(question)
        baseline.append(time.perf_counter() - start)
    return with_pipeline, baseline


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100 turns of history, 20 measured")
    parser.add_argument("--check", action="store_true", help="exit 1 if the budget is missed")
    args = parser.parse_args(argv)
    turns, measured = (100, 20) if args.quick else (1_000, 200)
    print(f"history: {turns:,} turns ({turns * 4:,} messages), {measured} measured turns, medians (ms/turn)")
    print(f"  {'turns measured':<34} {'with providers':>14} {'baseline':>9} {'added':>7} {'first->last quarter':>22}")
    ok = True
    for label, tool_turns in (("plain questions", False), ("each with a tool call + result", True)):
        pipeline, baseline = asyncio.run(_measure(turns, measured, tool_turns=tool_turns))
        with_ms = statistics.median(pipeline) * 1000
        base_ms = statistics.median(baseline) * 1000
        added = with_ms - base_ms
        quarter = measured // 4
        first, last = statistics.median(pipeline[:quarter]) * 1000, statistics.median(pipeline[-quarter:]) * 1000
        print(f"  {label:<34} {with_ms:14.3f} {base_ms:9.3f} {added:7.3f} {first:10.3f} -> {last:.3f}")
        ok = ok and added <= BUDGET_MS
    print(f"  budget: {BUDGET_MS} ms added per turn: " + ("held" if ok else "MISSED"))
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
