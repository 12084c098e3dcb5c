"""Regression tests for the layouts real agent traffic has (design.md#units): results apart from their
call (approval and resume flows), hosted calls, reasoning items."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest

from contextledger import (
    ApprovalRequestContent,
    ApprovalResponseContent,
    CharacterEstimatorTokenizer,
    ConfigurationError,
    FunctionCallContent,
    HostedCallContent,
    HostedResultContent,
    Message,
    ReasoningContent,
    TextContent,
    validate,
)
from contextledger.clients import ScriptedChatClient
from contextledger.compaction import (
    ContextWindowCompactionStrategy,
    MessageIndex,
    SlidingWindowStrategy,
    SummarizationStrategy,
    ToolResultCompactionStrategy,
    apply_compaction_sync,
)


def test_a_result_after_an_approval_note_keeps_its_call() -> None:
    """Was: keep_last_groups=2 sent [tool c1, assistant], a result with no call."""
    call = Message.assistant(calls=[FunctionCallContent("c1", "pay")])
    result = Message.tool("c1", "paid")
    messages = [Message.user("pay"), call, Message.assistant("approval completed"), result, Message.assistant("done")]
    sent = apply_compaction_sync(messages, strategy=SlidingWindowStrategy(keep_last_groups=2, stable_step=1))
    assert sent == [call, result, messages[-1]]


def test_a_reasoning_item_goes_with_the_hosted_call_it_precedes() -> None:
    """Was: keep_last_groups=3 sent the MCP call without its reasoning item."""
    reasoning = Message("assistant", (ReasoningContent("look it up"),))
    mcp = Message("assistant", (HostedCallContent("mcp_1", "mcp", "search", "{}"),))
    messages = [Message.system("s"), Message.user("q"), reasoning, mcp, Message.assistant("a"), Message.user("next")]
    sent = apply_compaction_sync(messages, strategy=SlidingWindowStrategy(keep_last_groups=3, stable_step=1))
    assert sent == [messages[0], reasoning, mcp, messages[4], messages[5]]


@pytest.mark.parametrize(
    "reply",
    [
        Message("assistant", (TextContent("answer"),)),
        # As the Agents SDK adapter builds every message: the item's own fields ride along.
        Message("assistant", (TextContent("answer"),), additional_properties={"openai_agents_item": {"id": "msg_1"}}),
        Message("assistant", (TextContent("answer"), TextContent("more"))),
        Message("assistant", ()),
    ],
    ids=["plain", "with-properties", "two-parts", "empty"],
)
def test_a_reasoning_item_goes_with_the_text_reply_it_precedes(reply: Message) -> None:
    """Was: a reply with additional_properties (or more than one part) left its reasoning behind, so
    a window kept msg_N and dropped rs_N."""
    reasoning = Message("assistant", (ReasoningContent("think"),))
    messages = [Message.user("q"), reasoning, reply, Message.user("next")]
    sent = apply_compaction_sync(messages, strategy=SlidingWindowStrategy(keep_last_groups=2, stable_step=1))
    assert sent == [reasoning, reply, messages[3]]


def test_summarisation_leaves_a_group_too_large_alone_and_summarises_the_rest() -> None:
    """Was: a 77,000-character first message made every call return False, with no request."""
    client = ScriptedChatClient(["the gist"])
    messages = [Message.user("x" * 77_000)] + [
        Message.user(f"q{i}") if i % 2 else Message.assistant(f"a{i}") for i in range(13)
    ]
    strategy = SummarizationStrategy(client, target_count=4, threshold=2)
    sent = apply_compaction_sync(messages, strategy=strategy)
    assert len(client.requests) == 1
    assert "x" * 100 not in client.requests[0][1].text
    assert sent[0] is messages[0]
    assert sent[1].is_summary
    assert sent[1].text == "[Summary] the gist"
    # On the prefix-stable grid (design.md#prefix-stability): 14 non-system messages, trigger 6, steps of 2, so down
    # to 6, the large one among them.
    assert sent[2:] == messages[-5:]


def test_summarisation_takes_maf_spellings() -> None:
    tokenizer = CharacterEstimatorTokenizer()
    strategy = SummarizationStrategy(ScriptedChatClient(["-"]), max_summary_input_tokens=500, tokenizer=tokenizer)
    assert strategy.max_input_tokens == 500
    assert list(strategy.tokenizers) == [tokenizer]
    with pytest.raises(ConfigurationError, match="same setting"):
        SummarizationStrategy(ScriptedChatClient(["-"]), max_input_tokens=1, max_summary_input_tokens=1)


def test_repeated_summariser_failures_log_one_error(caplog: Any) -> None:
    client = ScriptedChatClient([RuntimeError("down")] * 5)
    strategy = SummarizationStrategy(client, target_count=1, threshold=0)
    messages = [Message.user("a"), Message.assistant("b"), Message.user("c")]
    with caplog.at_level(logging.WARNING, logger="contextledger.compaction"):
        for _ in range(5):
            assert apply_compaction_sync(messages, strategy=strategy) == messages
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "3 times in a row" in errors[0].getMessage()
    assert len(client.requests) == 5


# ContextWindowCompactionStrategy (MAF-Python's harness default) --------------------------------


def tool_turns(count: int, result_chars: int = 400) -> list[Message]:
    """``count`` turns of: user question, assistant call, tool result, assistant answer."""
    out: list[Message] = []
    for i in range(count):
        out += [
            Message.user(f"question {i}"),
            Message.assistant(calls=[FunctionCallContent(f"c{i}", "search", "{}")]),
            Message.tool(f"c{i}", "r" * result_chars),
            Message.assistant(f"answer {i}"),
        ]
    return out


def test_context_window_does_nothing_under_its_tool_eviction_level() -> None:
    messages = [Message.system("s"), *tool_turns(3)]
    strategy = ContextWindowCompactionStrategy(max_context_window_tokens=10_000, max_output_tokens=1_000)
    assert apply_compaction_sync(messages, strategy=strategy) == messages


def test_context_window_collapses_old_tool_results_first_and_keeps_the_newest_verbatim() -> None:
    messages = [Message.system("s"), *tool_turns(10)]  # about 1,200 tokens, mostly tool results
    # Levels 1,000 / 1,600; the exact floor (prefix_stable=False) keeps exactly the four newest verbatim.
    strategy = ContextWindowCompactionStrategy(2_400, 400, keep_last_tool_call_groups=4, prefix_stable=False)
    sent = apply_compaction_sync(messages, strategy=strategy)
    assert validate(sent) == []
    verbatim = [m for m in sent if m.role == "tool"]
    assert verbatim == [m for m in messages if m.role == "tool"][-4:]
    assert any(m.is_summary and m.text.startswith("[Tool results: ") for m in sent)
    assert all(m in sent for m in messages if m.role == "user")  # truncation was not needed
    assert sum(CharacterEstimatorTokenizer().count_messages(sent)) <= 1_000


def test_context_window_truncates_to_its_tool_eviction_level_when_collapsing_is_not_enough() -> None:
    messages = [Message.system("s"), *(Message.user("u" * 400) for _ in range(30))]  # ~3,000 tokens
    strategy = ContextWindowCompactionStrategy(max_context_window_tokens=2_000, max_output_tokens=0)
    sent = apply_compaction_sync(messages, strategy=strategy)
    assert sent[0] is messages[0]
    assert sent[-1] is messages[-1]
    assert sent == [messages[0], *messages[len(messages) - len(sent) + 1 :]]  # the newest kept, in order
    assert sum(CharacterEstimatorTokenizer().count_messages(sent)) <= 1_000


def test_context_window_never_splits_a_call_from_a_result_that_sits_apart() -> None:
    call = Message.assistant(calls=[FunctionCallContent("c1", "pay")])
    result = Message.tool("c1", "paid")
    messages = [
        Message.system("s"),
        *(Message.user("u" * 400) for _ in range(10)),
        call,
        Message.user("approve " + "u" * 400),
        result,
        Message.assistant("done"),
    ]
    sent = apply_compaction_sync(messages, strategy=ContextWindowCompactionStrategy(1_200, 200))
    assert (call in sent) == (result in sent)
    assert sent[-1] is messages[-1]


@pytest.mark.parametrize(
    ("arguments", "shown"),
    [
        ({"max_context_window_tokens": 0, "max_output_tokens": 0}, "max_context_window_tokens must be"),
        ({"max_context_window_tokens": 100, "max_output_tokens": 100}, "must be less than"),
        ({"max_context_window_tokens": 100, "max_output_tokens": -1}, "max_output_tokens must be"),
        ({"max_context_window_tokens": 100, "max_output_tokens": 0, "tool_eviction_threshold": 0}, "(0.0, 1.0]"),
        ({"max_context_window_tokens": 100, "max_output_tokens": 0, "truncation_threshold": 1.5}, "(0.0, 1.0]"),
        (
            {
                "max_context_window_tokens": 100,
                "max_output_tokens": 0,
                "tool_eviction_threshold": 0.9,
                "truncation_threshold": 0.5,
            },
            "must be at least tool_eviction_threshold",
        ),
        ({"max_context_window_tokens": 100, "max_output_tokens": 0, "keep_last_tool_call_groups": -1}, "keep_last"),
    ],
)
def test_context_window_rejects_bad_settings(arguments: dict[str, Any], shown: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(shown)):
        ContextWindowCompactionStrategy(**arguments)


def test_context_window_takes_its_sizes_by_position_or_by_name() -> None:
    messages = [Message.system("s"), *tool_turns(12)]
    by_name = ContextWindowCompactionStrategy(max_context_window_tokens=2_000, max_output_tokens=500)
    by_position = ContextWindowCompactionStrategy(2_000, 500)
    assert by_name.input_budget_tokens == by_position.input_budget_tokens == 1_500
    assert apply_compaction_sync(messages, strategy=by_name) == apply_compaction_sync(messages, strategy=by_position)


def test_a_collapsed_hosted_call_shows_its_name_and_output() -> None:
    mcp = Message(
        "assistant",
        (HostedCallContent("mcp_1", "mcp", "search", "{}"), HostedResultContent("mcp_1", "mcp", "found 10 cats")),
    )
    messages = [
        Message.user("hello"),
        mcp,
        Message.assistant("I found cats."),
        Message.assistant(calls=[FunctionCallContent("c1", "f")]),
        Message.tool("c1", "new result"),
    ]
    sent = apply_compaction_sync(
        messages, strategy=ToolResultCompactionStrategy(keep_last_tool_call_groups=1, stable_step=1)
    )
    assert [m.text for m in sent[:3]] == ["hello", "[Tool results: search: found 10 cats]", "I found cats."]
    assert sent[3:] == messages[3:]


def test_an_approval_request_sharing_its_calls_id_is_answered_not_ambiguous() -> None:
    """A Responses ``mcp_approval_request`` is read as an approval holding a call under the same id:
    that is one id, opened once, so the request and the user's response stay one unit and a window
    never sends the response alone (an answer to nothing)."""
    request = Message(
        "assistant",
        (
            ApprovalRequestContent(
                "call_1", HostedCallContent(call_id="call_1", tool="mcp", name="pay", arguments="{}")
            ),
        ),
    )
    response = Message("user", (ApprovalResponseContent("call_1", approved=False),))
    messages = [Message.user("pay the bill"), request, response, *(Message.user(f"and {n}") for n in range(3))]
    index = MessageIndex(messages)
    request_group = index.groups[1]
    assert len(request_group.unit) == 2
    kept = apply_compaction_sync(messages, strategy=SlidingWindowStrategy(keep_last_groups=4))
    assert validate(kept) == []
    assert request in kept
    assert response in kept
