"""Regression tests for the layouts real agent traffic has (SPEC §11): results apart from their
call (approval and resume flows), hosted calls, reasoning items."""

from __future__ import annotations

from contextledger import FunctionCallContent, HostedCallContent, Message, ReasoningContent, TextContent
from contextledger.compaction import SlidingWindowStrategy, apply_compaction_sync


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
