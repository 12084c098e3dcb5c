"""The Agents SDK session stores a provider's ``compaction`` item and hands it back as it came;
a compacting session (its request view and its per-call filter) keeps it as the boundary."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("agents", reason="the 'openai-agents' extra")

from agents.run_config import ModelInputData

from contextledger.compaction import SlidingWindowStrategy, TruncationStrategy
from contextledger.history import HistoryProvider, InMemoryHistoryProvider, SQLiteHistoryProvider
from contextledger.integrations.openai_agents import CompactingSession, ContextLedgerSession
from contextledger.messages import responses_problems

ITEM = {"id": "cmp_7", "type": "compaction", "encrypted_content": "gAAAAB-opaque=="}


def turns(count: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        item
        for n in range(start, start + count)
        for item in (
            {"role": "user", "content": f"question {n}"},
            {
                "id": f"msg_{n}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": f"answer {n}", "annotations": []}],
            },
        )
    ]


@pytest.fixture(params=["memory", "sqlite"])
def history(request: pytest.FixtureRequest, tmp_path: Path) -> HistoryProvider:
    if request.param == "memory":
        return InMemoryHistoryProvider()
    return SQLiteHistoryProvider(tmp_path / "history.db")


def test_the_session_stores_the_item_and_returns_it_as_it_came(history: HistoryProvider) -> None:
    session = ContextLedgerSession(history, "s1")
    items = [*turns(3), ITEM, *turns(2, 3)]
    asyncio.run(session.add_items(items))
    assert asyncio.run(session.get_items()) == items
    assert asyncio.run(session.get_items(limit=3)) == items[-3:]


def test_a_compacting_session_sends_the_item_and_what_follows_it(history: HistoryProvider) -> None:
    items = [*turns(6), ITEM, *turns(4, 6)]
    for strategy in (SlidingWindowStrategy(keep_last_groups=3), TruncationStrategy(max_n=6, compact_to=4)):
        session = CompactingSession(history, f"s-{strategy.name}", strategy)
        asyncio.run(session.add_items(items))
        sent = asyncio.run(session.get_items())
        assert ITEM in sent
        assert sent.index(ITEM) == 1  # behind the user message that opened its turn
        assert sent[0] == items[10]
        assert responses_problems({"input": sent}) == []
        assert asyncio.run(session.all_items()) == items  # the store keeps every item


def test_the_per_call_filter_keeps_the_very_item_the_sdk_gave() -> None:
    session = CompactingSession(InMemoryHistoryProvider(), "s", TruncationStrategy(max_n=6, compact_to=4))
    given = [*turns(6), dict(ITEM), *turns(4, 6)]
    data = SimpleNamespace(model_data=ModelInputData(input=given, instructions=None))  # type: ignore[arg-type]
    filtered = asyncio.run(session.input_filter(data)).input
    assert any(item is given[12] for item in filtered)  # the SDK tracks items by identity
    assert filtered[0] is given[10]
    assert all(any(item is original for original in given) for item in filtered)
