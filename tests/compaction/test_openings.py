"""A compacted Anthropic conversation opens with the user, and never with an assistant's words
relabelled as the user's: the cut moves to a user message, brings back the turn's small opening
message, or opens with a notice of what was set aside."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger.compaction import (
    SlidingWindowStrategy,
    TruncationStrategy,
    apply_compaction_sync,
    opened_by_user,
    strategy_from_spec,
    tokens_below,
    tokens_exceed,
)
from contextledger.compaction._openings import SET_ASIDE_PROPERTY
from contextledger.messages import Message, from_anthropic, to_anthropic
from contextledger.tokenizers import CharacterEstimatorTokenizer
from tests.sizes import examples

TOKENS = CharacterEstimatorTokenizer()
DEFAULT = strategy_from_spec("truncation", ("max_n=32000", "compact_to=16000"))  # the proxy's default


def tool_use(call_id: str, text: str = "Let me look.") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [
            {"type": "text", "text": text},
            {"type": "tool_use", "id": call_id, "name": "lookup", "input": {"q": call_id}},
        ],
    }


def tool_result(call_id: str, then: str | None = None) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "tool_result", "tool_use_id": call_id, "content": f"result {call_id}"}]
    if then is not None:
        blocks.append({"type": "text", "text": then})
    return {"role": "user", "content": blocks}


def sent(messages: list[Message]) -> list[dict[str, Any]]:
    return to_anthropic(messages)[1]


def assistant_texts(conversation: list[dict[str, Any]]) -> set[str]:
    return {
        block["text"]
        for message in conversation
        if message["role"] == "assistant" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "text" and block["text"]
    }


def user_texts(wire: list[dict[str, Any]]) -> list[str]:
    texts = []
    for message in wire:
        if message["role"] != "user":
            continue
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        texts += [block["text"] for block in blocks if block.get("type") == "text"]
    return texts


def test_the_pasted_document_case_opens_with_a_notice_under_the_default_strategy() -> None:
    """A 140,000-character paste, a tool call and its result: the default truncation drops the
    paste and would leave the assistant first; a notice opens instead, and the exchange is whole."""
    conversation = [
        {"role": "user", "content": "Summarise this:\n" + "lorem ipsum dolor sit amet " * 5_200},
        tool_use("toolu_1"),
        tool_result("toolu_1", then="thanks"),
    ]
    messages = from_anthropic(conversation)
    projection = apply_compaction_sync(messages, strategy=DEFAULT)
    assert projection[0].role == "assistant", "the cut this guards against"
    opened = opened_by_user(projection, messages, tokenizer=TOKENS)
    assert opened is not None
    wire = sent(opened)
    assert wire[0] == {"role": "user", "content": [{"type": "text", "text": "[1 earlier message set aside]"}]}
    assert opened[0].additional_properties[SET_ASIDE_PROPERTY] == 1
    assert wire[1:] == conversation[1:]  # the exchange as the client sent it, byte for byte
    assert not set(user_texts(wire)) & assistant_texts(conversation)


def long_turns(turns: int, words: int) -> list[dict[str, Any]]:
    conversation: list[dict[str, Any]] = []
    for turn in range(turns):
        conversation.append({"role": "user", "content": f"question {turn} " + "word " * words})
        conversation.append(tool_use(f"toolu_{turn}", text=f"looking {turn} " + "word " * words))
        conversation.append(tool_result(f"toolu_{turn}"))
        conversation.append({"role": "assistant", "content": [{"type": "text", "text": f"answer {turn}"}]})
    return conversation


def test_a_cut_past_an_older_turns_large_question_moves_to_the_next_user_message() -> None:
    """The stale end of an older turn (its question too large to bring back, the tail small
    beside what is kept) goes: the next user message opens."""
    conversation = [
        {"role": "user", "content": "Review this log:\n" + "line " * 9_000},
        {"role": "assistant", "content": [{"type": "text", "text": "The log shows a timeout."}]},
        *long_turns(6, 200),
    ]
    messages = from_anthropic(conversation)
    projection = messages[1:]  # the cut a strategy makes when the log alone is over its target
    opened = opened_by_user(projection, messages, tokenizer=TOKENS)
    assert opened == messages[2:]
    assert sent(opened) == conversation[2:]


def test_a_cut_inside_a_turn_whose_question_is_large_opens_with_a_notice_and_keeps_the_rest() -> None:
    """Moving forward would drop most of what the strategy kept: a notice opens instead."""
    conversation = [
        {"role": "user", "content": "Review this log:\n" + "line " * 9_000},
        tool_use("toolu_a", text="Reading it. " + "word " * 300),
        tool_result("toolu_a"),
        {"role": "assistant", "content": [{"type": "text", "text": "The log shows a timeout."}]},
        {"role": "user", "content": "and then?"},
    ]
    messages = from_anthropic(conversation)
    opened = opened_by_user(messages[1:], messages, tokenizer=TOKENS)
    assert opened is not None
    assert opened[0].text == "[1 earlier message set aside]"
    assert opened[1:] == messages[1:]


def test_a_strategy_cut_inside_an_older_turn_opens_with_the_user() -> None:
    messages = from_anthropic(long_turns(12, 200))
    strategy = TruncationStrategy(trigger=tokens_exceed(2_000), target=tokens_below(1_500), prefix_stable=False)
    projection = apply_compaction_sync(messages, strategy=strategy)
    assert projection[0].role == "assistant", "the cut this guards against"
    opened = opened_by_user(projection, messages, tokenizer=TOKENS)
    assert opened is not None
    assert opened[0].role == "user"
    assert opened[0].text.startswith("question ")


def test_the_newest_turns_small_opening_message_is_brought_back() -> None:
    """A cut inside the newest turn, whose user message is short: that message opens again."""
    conversation: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing build."}]
    for call in range(30):
        conversation.append(tool_use(f"toolu_{call}", text="step " + "word " * 150))
        conversation.append(tool_result(f"toolu_{call}"))
    messages = from_anthropic(conversation)
    strategy = TruncationStrategy(
        trigger=tokens_exceed(4_000), target=tokens_below(3_000), minimum_preserved=4, prefix_stable=False
    )
    projection = apply_compaction_sync(messages, strategy=strategy)
    assert projection[0].role == "assistant"
    opened = opened_by_user(projection, messages, tokenizer=TOKENS)
    assert opened is not None
    assert opened[0] is messages[0]
    assert opened[1:] == projection
    assert sent(opened)[0] == conversation[0]


def test_system_messages_stay_through_a_move() -> None:
    messages = [Message.system("rules"), *from_anthropic(long_turns(6, 200))]
    projection = [messages[0], *messages[2:]]  # a cut right after the first turn's question
    assert projection[1].role == "assistant"
    opened = opened_by_user(projection, messages, tokenizer=TOKENS)
    assert opened is not None
    assert opened[0] == messages[0]
    assert opened[1].role == "user"


def test_a_summary_first_is_sent_as_user_text_any_other_assistant_message_keeps_its_role() -> None:
    summary = Message.assistant("[Summary] the user asked for the build to be fixed", additional_properties={})
    marked = Message(
        "assistant", summary.contents, additional_properties={"_is_summary": True, "_summary_source": "summarization"}
    )
    assert opened_by_user([marked, Message.user("go on")], [], tokenizer=TOKENS) is None
    assert sent([marked])[0]["role"] == "user"
    assert sent([summary])[0]["role"] == "assistant", "an assistant's words are never relabelled as the user's"


# Conversations as agents send them: turns of user text, tool exchanges (parallel calls too) and
# replies, now and then a message far larger than the rest.
@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    call = 0
    for turn in range(draw(st.integers(1, 12))):
        size = draw(st.sampled_from([5, 40, 400, 9_000]))
        out.append({"role": "user", "content": f"user {turn} " + "word " * size})
        for _ in range(draw(st.integers(0, 3))):
            ids = [f"toolu_{call + n}" for n in range(draw(st.integers(1, 3)))]
            call += len(ids)
            blocks: list[dict[str, Any]] = [{"type": "text", "text": f"assistant {turn} " + "word " * size}]
            blocks += [{"type": "tool_use", "id": i, "name": "lookup", "input": {}} for i in ids]
            out.append({"role": "assistant", "content": blocks})
            out.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": i} for i in ids]})
        if draw(st.booleans()):
            out.append({"role": "assistant", "content": [{"type": "text", "text": f"reply {turn}"}]})
    return out


STRATEGIES = [
    DEFAULT,
    TruncationStrategy(trigger=tokens_exceed(3_000), target=tokens_below(1_000)),
    TruncationStrategy(trigger=tokens_exceed(3_000), target=tokens_below(1_000), prefix_stable=False),
    SlidingWindowStrategy(keep_last_groups=3),
    strategy_from_spec("tool-result-collapse", ("keep_last_tool_call_groups=1",)),
    strategy_from_spec(None, (), budget=2_000),
]


@settings(max_examples=examples(300), deadline=None)
@given(conversations(), st.sampled_from(STRATEGIES))
def test_every_strategy_leaves_a_conversation_the_user_opens_without_the_assistants_words_as_the_users(
    conversation: list[dict[str, Any]], strategy: Any
) -> None:
    messages = from_anthropic(conversation)
    before = json.dumps(conversation)
    projection = apply_compaction_sync(messages, strategy=strategy)
    opened = opened_by_user(projection, messages, tokenizer=TOKENS)
    final = projection if opened is None else opened
    wire = sent(final)
    assert wire[0]["role"] == "user"
    first = wire[0]["content"]
    first_blocks = [{"type": "text", "text": first}] if isinstance(first, str) else first
    assert first_blocks[0].get("type") != "tool_result"
    spoken = assistant_texts(conversation)
    assert not [text for text in user_texts(wire) if text in spoken]
    assert json.dumps(conversation) == before  # the input is never modified
