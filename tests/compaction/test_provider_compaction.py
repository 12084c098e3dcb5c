"""The providers' own compaction items are boundaries: recognised in the message model, kept
byte for byte by every strategy whenever anything after them is sent."""

from __future__ import annotations

from contextledger.messages import (
    Message,
    OpaqueContent,
    TextContent,
    from_anthropic,
    from_responses,
    is_provider_compaction_content,
    newest_provider_compaction,
    to_anthropic,
    to_responses,
)

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
