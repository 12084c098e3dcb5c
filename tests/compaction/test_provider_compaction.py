"""The providers' own compaction items are boundaries: recognised in the message model, kept
byte for byte by every strategy whenever anything after them is sent."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from contextledger.clients import ScriptedChatClient
from contextledger.compaction import (
    SlidingWindowStrategy,
    SummarizationStrategy,
    TruncationStrategy,
    apply_compaction,
    compact_with_report,
    opened_by_user,
    strategy_from_spec,
    turns_exceed,
)
from contextledger.exceptions import SummarizationError
from contextledger.messages import (
    Message,
    OpaqueContent,
    TextContent,
    anthropic_problems,
    from_anthropic,
    from_responses,
    newest_provider_compaction,
    responses_problems,
    to_anthropic,
    to_responses,
)
from contextledger.messages._message import is_provider_compaction_content
from contextledger.tokenizers import CharacterEstimatorTokenizer, Tokenizer
from tests.compaction.test_properties import DEFAULT, assert_index_consistent
from tests.conversations import conversations, strategy_specs, tokenizers

OPENAI_ITEM = {"id": "cmp_1", "type": "compaction", "encrypted_content": "gAAAAB-opaque"}
ANTHROPIC_BLOCK = {"type": "compaction", "content": "Summary: the user builds a scraper."}


def test_a_responses_compaction_item_is_recognised_and_comes_back_as_it_came() -> None:
    items = [
        {"role": "user", "content": "hi"},
        OPENAI_ITEM,
        {"role": "user", "content": "go on"},
        {"type": "compaction", "id": "cmp_2", "encrypted_content": "newer"},
        {"role": "user", "content": "and?"},
    ]
    messages = from_responses(items)
    assert [m.is_provider_compaction for m in messages] == [False, True, False, True, False]
    assert newest_provider_compaction(messages) == 3
    assert to_responses(messages) == items


def test_an_anthropic_compaction_block_makes_its_assistant_message_a_boundary() -> None:
    body = [
        {"role": "user", "content": "Help me build a website"},
        {"role": "assistant", "content": [ANTHROPIC_BLOCK, {"type": "text", "text": "Based on that..."}]},
        {"role": "user", "content": "Now add error handling"},
    ]
    messages = from_anthropic(body)
    assert [m.is_provider_compaction for m in messages] == [False, True, False]
    assert newest_provider_compaction(messages) == 1
    assert to_anthropic(messages) == (None, body)


def test_what_is_not_a_covering_compaction_item_is_no_boundary() -> None:
    failed = OpaqueContent({"type": "compaction", "content": None})  # Anthropic: a failed compaction, a no-op
    assert not is_provider_compaction_content(failed)
    assert not is_provider_compaction_content(OpaqueContent({"type": "image", "content": "x"}))
    assert not is_provider_compaction_content(TextContent("compaction"))
    assert not Message("user", (OpaqueContent(OPENAI_ITEM),)).is_provider_compaction  # only the assistant's
    assert Message("assistant", (OpaqueContent(OPENAI_ITEM),)).is_provider_compaction
    assert newest_provider_compaction([Message.user("a"), Message.assistant("b")]) is None
    assert newest_provider_compaction([]) is None


# Every strategy keeps the boundary ---------------------------------------------------------------

ANTHROPIC_TEXT_AFTER = {"type": "text", "text": "Based on that summary, here is the next step."}


def compaction_message(flavour: str) -> Message:
    """A provider compaction message as each API's reader makes it."""
    if flavour == "responses":
        return from_responses([dict(OPENAI_ITEM)])[0]
    return from_anthropic([{"role": "assistant", "content": [dict(ANTHROPIC_BLOCK), dict(ANTHROPIC_TEXT_AFTER)]}])[0]


@st.composite
def bounded_conversations(draw: st.DrawFn) -> tuple[list[Message], int]:
    """A valid conversation with a provider compaction message put before one of its user messages
    (where no call waits for results), and that message's position."""
    base = list(draw(conversations(max_blocks=14)))
    users = [at for at, message in enumerate(base) if message.role == "user" and at > 0]
    at = draw(st.sampled_from(users)) if users else len(base)
    # Sometimes a second, older item, which stops being the boundary once the newer one comes.
    two = draw(st.booleans())
    if users and two:
        older = draw(st.sampled_from([u for u in users if u <= at]))
        base.insert(older, compaction_message("responses"))
        at += 1
    base.insert(at, compaction_message(draw(st.sampled_from(["responses", "anthropic"]))))
    return base, at


def opener_of(messages: Sequence[Message], at: int) -> Message | None:
    """The user message that opened the turn ``messages[at]`` is in (the one a strategy keeps)."""
    return next((m for m in reversed(messages[:at]) if m.role == "user" and not m.is_summary), None)


def assert_boundary_kept(messages: Sequence[Message], at: int, projection: Sequence[Message]) -> None:
    boundary = messages[at]
    sent = {id(message) for message in projection}
    after = [m for m in messages[at + 1 :] if id(m) in sent]
    written = [m for m in projection if not any(m is original for original in messages)]
    if after or written:
        assert id(boundary) in sent, "a message after the provider's compaction item was sent without it"
        opener = opener_of(messages, at)
        if opener is not None:
            assert id(opener) in sent, "the user message before the compaction item was dropped"
            assert [m for m in projection if m is opener or m is boundary] == [opener, boundary]
    # Nothing the library wrote stands before the item: what precedes it is the provider's.
    if id(boundary) in sent:
        position = next(p for p, m in enumerate(projection) if m is boundary)
        assert not any(m in written for m in projection[:position] if m.role != "system")


@DEFAULT
@given(case=bounded_conversations(), tokenizer=tokenizers(), data=st.data())
def test_no_strategy_sends_what_follows_a_provider_compaction_item_without_it(
    case: tuple[list[Message], int], tokenizer: Tokenizer, data: st.DataObject
) -> None:
    messages, at = case
    spec = data.draw(strategy_specs(tokenizer))
    try:
        result = asyncio.run(compact_with_report(messages, strategy=spec.build(), tokenizer=tokenizer))
    except SummarizationError:
        return  # a summariser that fails closed sends nothing
    assert_boundary_kept(messages, at, result.messages)
    assert_index_consistent(result.index)


@DEFAULT
@given(case=bounded_conversations(), tokenizer=tokenizers())
def test_the_default_and_the_spec_strategies_keep_the_item_too(
    case: tuple[list[Message], int], tokenizer: Tokenizer
) -> None:
    messages, at = case
    small = tokenizer.count_messages(messages)
    budget = max(sum(small) // 3, 1)
    for name, params in [
        ("truncation", ("max_n=32000", "compact_to=16000")),  # the proxy's default, as it is
        ("truncation", (f"max_n={budget}", f"compact_to={max(budget // 2, 1)}")),  # the default, scaled down
        ("sliding-window", ("keep_last_groups=2",)),
        ("tool-result-collapse", ()),
        ("selective-tool-call", ("keep_last_tool_call_groups=0",)),
    ]:
        strategy = strategy_from_spec(name, params, tokenizer=tokenizer)
        result = asyncio.run(compact_with_report(messages, strategy=strategy, tokenizer=tokenizer))
        assert_boundary_kept(messages, at, result.messages)
    budgeted = strategy_from_spec(None, (), budget=budget, tokenizer=tokenizer)
    assert_boundary_kept(messages, at, asyncio.run(compact_with_report(messages, strategy=budgeted)).messages)


def _turns(count: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        item
        for n in range(start, start + count)
        for item in (
            {"role": "user", "content": f"question {n} " + "x" * 80},
            {"role": "assistant", "content": f"answer {n} " + "y" * 80},
        )
    ]


def test_what_the_item_covers_goes_first_and_the_window_counts_from_it() -> None:
    items = [{"role": "system", "content": "be brief"}, *_turns(5), OPENAI_ITEM, *_turns(3, 5)]
    messages = from_responses(items)
    strategy = SlidingWindowStrategy(keep_last_groups=4, stable_step=1)
    result = asyncio.run(compact_with_report(messages, strategy=strategy))
    sent = to_responses(result.messages)
    # The system prompt, the user message before the item, the item as it came, and the window.
    assert sent[:3] == [items[0], items[9], OPENAI_ITEM]
    assert sent[3:] == items[-4:]
    assert [event.strategy for event in result.events] == ["provider_compaction", "sliding_window"]


def test_when_dropping_what_the_item_covers_is_enough_nothing_after_it_goes() -> None:
    items = [*_turns(8), OPENAI_ITEM, *_turns(2, 8)]
    messages = from_responses(items)
    strategy = TruncationStrategy(max_n=12, compact_to=8)
    sent = to_responses(asyncio.run(apply_compaction(messages, strategy=strategy)))
    assert sent == [items[14], OPENAI_ITEM, *items[-4:]]


def test_a_call_before_the_item_whose_output_comes_after_it_stays_with_its_output() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c1", "output": "found"}
    items = [*_turns(4), {"role": "user", "content": "look it up"}, call, OPENAI_ITEM, output, *_turns(3, 4)]
    messages = from_responses(items)
    sent = to_responses(asyncio.run(apply_compaction(messages, strategy=TruncationStrategy(max_n=8, compact_to=6))))
    assert OPENAI_ITEM in sent
    assert (call in sent) == (output in sent)
    assert responses_problems({"input": sent}) == []


def test_an_anthropic_item_stays_behind_its_user_message_and_the_body_stays_valid() -> None:
    body: list[dict[str, Any]] = [
        *[
            m
            for n in range(6)
            for m in ({"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": f"a{n}"})
        ],
        {"role": "user", "content": "continue"},
        {"role": "assistant", "content": [ANTHROPIC_BLOCK, ANTHROPIC_TEXT_AFTER]},
        *[
            m
            for n in range(6, 9)
            for m in ({"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": f"a{n}"})
        ],
    ]
    messages = from_anthropic(body)
    for strategy in (
        SlidingWindowStrategy(keep_last_groups=1),
        TruncationStrategy(max_n=3, compact_to=2),
        SlidingWindowStrategy(turns_exceed(2), minimum_preserved=1),
    ):
        _system, sent = to_anthropic(asyncio.run(apply_compaction(messages, strategy=strategy)))
        assert sent[0] == {"role": "user", "content": "continue"}
        # The item's message as it came (a window that keeps only a later reply joins it to it).
        assert sent[1]["role"] == "assistant"
        assert sent[1]["content"][:2] == body[13]["content"]
        assert anthropic_problems({"messages": sent}) == []


def test_a_summariser_never_reads_or_replaces_the_item() -> None:
    items = [*_turns(3), OPENAI_ITEM, *_turns(6, 3)]
    messages = from_responses(items)
    client = ScriptedChatClient(["the summary"])
    strategy = SummarizationStrategy(client, target_count=2, threshold=1)
    result = asyncio.run(compact_with_report(messages, strategy=strategy))
    sent = result.messages
    assert any(m is messages[6] for m in sent)  # the item, as it came
    assert to_responses(sent)[1] == OPENAI_ITEM
    assert client.calls >= 1
    assert all("gAAAAB" not in m.text for request in client.requests for m in request)


def test_an_opening_never_moves_past_the_item() -> None:
    messages = from_responses([{"role": "user", "content": "x" * 4000}, OPENAI_ITEM, *_turns(2)])
    projection = messages[1:]  # a cut that left the item first
    assert opened_by_user(projection, messages, tokenizer=CharacterEstimatorTokenizer()) == messages
    client_opened = messages[1:]  # the client itself sent the item first: as it came
    assert opened_by_user(client_opened, client_opened, tokenizer=CharacterEstimatorTokenizer()) is None


def test_an_item_whose_message_opens_a_call_is_never_collapsed_and_keeps_its_result() -> None:
    use = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "x"}}
    body: list[dict[str, Any]] = [
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "go on"},
        {"role": "assistant", "content": [ANTHROPIC_BLOCK, use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "found " * 50}]},
        *[
            m
            for n in range(4)
            for m in ({"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": f"a{n}"})
        ],
    ]
    messages = from_anthropic(body)
    for spec in (
        ("tool-result-collapse", ("keep_last_tool_call_groups=0",)),
        ("sliding-window", ("keep_last_groups=2",)),
    ):
        strategy = strategy_from_spec(*spec)
        _system, sent = to_anthropic(asyncio.run(apply_compaction(messages, strategy=strategy)))
        assert sent[:2] == body[2:4], spec  # the user message before it, and the item's message whole
        assert sent[2]["content"][0] == body[4]["content"][0]  # its result (the next user text joins it)
        assert anthropic_problems({"messages": sent}) == []
