"""Agent turns side by side with Microsoft Agent Framework 1.23 (``agent-framework-core``, the
``bench`` extra), run by ``python benchmarks/agent_turns.py --compare-maf``.

Both sides grow one session turn by turn with plain questions, an instant model, an in-memory
history, and a compaction provider with a sliding window (the last 20 groups) before each call;
MAF is also run with no compaction at all.  Each side's turn time is taken as an application
sees it (``agent.run`` from call to return), medians over the first and the last 250 turns, and
the ratio at the last window is MAF's time over ours.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from contextledger.agents import Agent, CompactionProvider
from contextledger.clients import ChatResponse
from contextledger.compaction import SlidingWindowStrategy
from contextledger.messages import Message

WINDOW = 250


class _Instant:
    async def get_response(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None, **options: Any
    ) -> ChatResponse:
        return ChatResponse("ok", (Message.assistant("ok"),))


async def _ours(turns: int) -> list[float]:
    compaction = CompactionProvider(before_strategy=SlidingWindowStrategy(keep_last_groups=20))
    agent = Agent(_Instant(), context_providers=[compaction])
    return await _timed(agent, turns)


async def _timed(agent: Any, turns: int) -> list[float]:
    """Milliseconds of each of ``turns`` runs of ``agent`` in one session (either framework's)."""
    session = agent.create_session()
    times = []
    for number in range(turns):
        start = time.perf_counter()
        await agent.run(f"Anything new about item{number}?", session=session)
        times.append((time.perf_counter() - start) * 1000)
    return times


async def _maf(turns: int, *, compaction: bool) -> list[float]:
    import agent_framework as maf  # noqa: PLC0415

    class InstantClient(maf.BaseChatClient):
        async def _inner_get_response(self, *, messages: Any, stream: bool, options: Any, **kwargs: Any) -> Any:
            return maf.ChatResponse(messages=[maf.Message(role="assistant", contents=["ok"])])

    providers: list[Any] = [maf.InMemoryHistoryProvider()]
    if compaction:
        providers.append(maf.CompactionProvider(before_strategy=maf.SlidingWindowStrategy(keep_last_groups=20)))
    agent = maf.Agent(InstantClient(), context_providers=providers)
    return await _timed(agent, turns)


def main(turns: int) -> int:
    try:
        import agent_framework  # noqa: F401, PLC0415
    except ImportError:
        raise SystemExit("--compare-maf needs agent-framework-core 1.23: pip install -e '.[bench]'") from None
    rows = []
    sides: list[tuple[str, Callable[[], Coroutine[Any, Any, list[float]]]]] = [
        ("contextledger, sliding window", lambda: _ours(turns)),
        ("Agent Framework 1.23, sliding window", lambda: _maf(turns, compaction=True)),
        ("Agent Framework 1.23, no compaction", lambda: _maf(turns, compaction=False)),
    ]
    for label, side in sides:
        gc.collect()
        times = asyncio.run(side())
        rows.append((label, statistics.median(times[:WINDOW]), statistics.median(times[-WINDOW:])))
    ours = rows[0][2]
    print(f"{turns:,} plain turns in one session, in-memory history; median ms per whole turn (agent.run)")
    print(f"  {'':<38} {'1-250':>8} {f'{turns - WINDOW + 1:,}-{turns:,}':>13} {'x ours at the end':>18}")
    for label, first, last in rows:
        print(f"  {label:<38} {first:8.3f} {last:13.3f} {last / ours:17.1f}x")
    return 0
