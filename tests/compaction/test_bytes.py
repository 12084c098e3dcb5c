"""Byte counts are UTF-8 bytes of what the model reads, reported for the whole history and what is sent."""

from __future__ import annotations

from contextledger import FunctionCallContent, Message
from contextledger.compaction import MessageIndex


def test_byte_counts_are_utf8_payload_and_follow_exclusions() -> None:
    messages = [
        Message.system("sys"),  # 3 bytes
        Message.user("héllo"),  # 6 bytes: é is two
        Message.assistant(calls=[FunctionCallContent("c1", "f", '{"a":1}')]),  # 1 + 7
        Message.tool("c1", "東京"),  # 6 bytes
    ]
    index = MessageIndex(messages)
    assert [g.byte_count for g in index.groups] == [3, 6, 14]
    assert index.total_bytes == 23
    assert index.included_bytes == 23
    index.exclude(index.groups[1], "test")
    assert index.included_bytes == 17
    assert index.total_bytes == 23
