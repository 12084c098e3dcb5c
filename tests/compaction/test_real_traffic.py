"""Regression tests for the layouts real agent traffic has (SPEC §11): results apart from their
call (approval and resume flows), hosted calls, reasoning items."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from contextledger import (
    CharacterEstimatorTokenizer,
    ConfigurationError,
    FunctionCallContent,
    HostedCallContent,
    Message,
    ReasoningContent,
    TextContent,
)
from contextledger.clients import ScriptedChatClient
from contextledger.compaction import SlidingWindowStrategy, SummarizationStrategy, apply_compaction_sync


def test_a_result_after_an_approval_note_keeps_its_call() -> None:
    """Was: keep_last_groups=2 sent [tool c1, assistant], a result with no call."""
    call = Message.assistant(calls=[FunctionCallContent("c1", "pay")])
    result = Message.tool("c1", "paid")
    messages = [Message.user("pay"), call, Message.assistant("approval completed"), result, Message.assistant("done")]
    sent = apply_compaction_sync(messages, strategy=SlidingWindowStrategy(keep_last_groups=2))
    assert sent == [call, result, messages[-1]]


def test_a_reasoning_item_goes_with_the_hosted_call_it_precedes() -> None:
    """Was: keep_last_groups=3 sent the MCP call without its reasoning item."""
    reasoning = Message("assistant", (ReasoningContent("look it up"),))
    mcp = Message("assistant", (HostedCallContent("mcp_1", "mcp", "search", "{}"),))
    messages = [Message.system("s"), Message.user("q"), reasoning, mcp, Message.assistant("a"), Message.user("next")]
    sent = apply_compaction_sync(messages, strategy=SlidingWindowStrategy(keep_last_groups=3))
    assert sent == [messages[0], reasoning, mcp, messages[4], messages[5]]


def test_a_reasoning_item_goes_with_the_text_reply_it_precedes() -> None:
    reasoning = Message("assistant", (ReasoningContent("think"),))
    reply = Message("assistant", (TextContent("answer"),))
    messages = [Message.user("q"), reasoning, reply, Message.user("next")]
    sent = apply_compaction_sync(messages, strategy=SlidingWindowStrategy(keep_last_groups=2))
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
    assert sent[2:] == messages[-4:]


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
