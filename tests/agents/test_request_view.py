"""The request view's bookkeeping never changes what is sent.

Moving excluded leading turns out of the view's index, rebuilding it after the stored history was
reduced, and restoring a session from JSON in a new process are all ways of keeping the cost of
a call in proportion to what is sent; none of them may change a single request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextledger import to_openai, validate
from contextledger.agents import Agent, CompactionProvider, Session, _compaction
from contextledger.clients import ScriptedChatClient
from contextledger.compaction import (
    CompactionStrategy,
    SelectiveToolCallCompactionStrategy,
    SlidingWindowStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
    apply_compaction,
    messages_exceed,
    turns_exceed,
)
from contextledger.history import InMemoryHistoryProvider
from contextledger.messages import FunctionCallContent, Message
from tests.sizes import examples

BEFORE: dict[str, Callable[[], CompactionStrategy]] = {
    "window-groups": lambda: SlidingWindowStrategy(keep_last_groups=5),
    "window-turns": lambda: SlidingWindowStrategy(turns_exceed(3), minimum_preserved_turns=2),
    "truncation": lambda: TruncationStrategy(messages_exceed(12), minimum_preserved=2),
    "selective": lambda: SelectiveToolCallCompactionStrategy(keep_last_tool_call_groups=1),
}
AFTER: dict[str, Callable[[], CompactionStrategy] | None] = {
    "none": None,
    "collapse": lambda: ToolResultCompactionStrategy(keep_last_tool_call_groups=1),
}


def stock(item: str) -> str:
    """Stock of an item."""
    return f"{item}: 3 left"


def _replier() -> Callable[[Sequence[Message]], Message | str]:
    """A model that calls the tool for "check X" questions, with call ids unique in the session."""
    calls = 0

    def reply(messages: Sequence[Message]) -> Message | str:
        nonlocal calls
        last = messages[-1]
        if last.role == "user" and last.text.startswith("check"):
            calls += 1
            word = last.text.split()[-1]
            return Message.assistant(calls=[FunctionCallContent(f"c{calls}", "stock", f'{{"item": "{word}"}}')])
        return f"answer {len(messages)}"

    return reply


def _requests(
    turns: list[str], before: str, after: str, freeze_at: int | None, restore_every: int
) -> list[list[dict[str, Any]]]:
    async def scenario() -> list[list[dict[str, Any]]]:
        history = InMemoryHistoryProvider()
        make_after = AFTER[after]
        compaction = CompactionProvider(
            BEFORE[before](), make_after() if make_after else None, history_source_id=history.source_id
        )
        client = ScriptedChatClient([_replier()])
        agent = Agent(client, name="a", instructions="be brief", tools=[stock], context_providers=[history, compaction])
        session = Session("s")
        for number, text in enumerate(turns, start=1):
            await agent.run(text, session=session)
            if restore_every and number % restore_every == 0:
                session = Session.from_json(session.to_json())  # as if a new process picked it up
        sent = [to_openai(request) for request in client.requests]
        for request in client.requests:
            assert validate(request) == []
        return sent

    # freeze_at=None never freezes: neither as the prefix grows nor when the view is built again.
    old = _compaction._FREEZE_AT, _compaction._FREEZE_ON_REBUILD
    _compaction._FREEZE_AT = 10**9 if freeze_at is None else freeze_at
    _compaction._FREEZE_ON_REBUILD = freeze_at is not None
    try:
        return asyncio.run(scenario())
    finally:
        _compaction._FREEZE_AT, _compaction._FREEZE_ON_REBUILD = old


turn_texts = st.lists(
    st.sampled_from(["check apples", "check pears", "hello", "version=v2", "what now?"]), min_size=1, max_size=30
)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns=turn_texts, before=st.sampled_from(sorted(BEFORE)), after=st.sampled_from(sorted(AFTER)))
def test_freezing_the_excluded_prefix_sends_the_same_requests(turns: list[str], before: str, after: str) -> None:
    reference = _requests(turns, before, after, freeze_at=None, restore_every=0)
    assert _requests(turns, before, after, freeze_at=1, restore_every=0) == reference


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns=turn_texts, before=st.sampled_from(sorted(BEFORE)), restore_every=st.integers(1, 5))
def test_a_session_restored_from_json_sends_the_same_requests(
    turns: list[str], before: str, restore_every: int
) -> None:
    reference = _requests(turns, before, "none", freeze_at=None, restore_every=0)
    assert _requests(turns, before, "none", freeze_at=1, restore_every=restore_every) == reference


def test_exclusions_persist_between_calls() -> None:
    """A group excluded on one call stays excluded on the next even when the trigger no longer fires."""

    async def scenario() -> None:
        history = InMemoryHistoryProvider()
        # Counted in messages; the seed's exact rule (down to compact_to), so the request view's own
        # memory is what keeps the next call small.
        strategy = TruncationStrategy(max_n=6, compact_to=3, prefix_stable=False)
        compaction = CompactionProvider(strategy, history_source_id=history.source_id)
        client = ScriptedChatClient(["ok"])
        agent = Agent(client, name="a", context_providers=[history, compaction])
        session = Session("s")
        for i in range(4):
            await agent.run(f"turn {i}", session=session)
        # The fourth call held 7 messages (> 6): truncated down to 3 or fewer.
        assert len(client.requests[3]) <= 3
        await agent.run("turn 4", session=session)
        # The source now holds 9 messages, over max_n: compacting it afresh would send 3 again.
        # The view instead keeps what it sent last time and adds the reply and the new turn:
        # 5 messages, under max_n, so the trigger does not fire and nothing old comes back.
        assert client.requests[4] == [*client.requests[3], Message.assistant("ok"), Message.user("turn 4")]
        fresh = await apply_compaction(await history.load("s") + [Message.user("turn 4")], strategy=strategy)
        assert len(fresh) <= 3

    asyncio.run(scenario())
