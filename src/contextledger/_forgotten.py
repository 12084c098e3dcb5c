"""What a forgotten fact leaves behind in a stored message, and how a retry of such a turn is known.

``forget`` (design.md#forgetting, :mod:`contextledger.facts`) rewrites the turn records a history keeps for
exactly-once turns, so after it a retried turn's input no longer equals the stored one: the
record holds :data:`FORGOTTEN_MARKER` where the caller's text held the forgotten value.  The agent
runtime and the proxy both still have to recognise the retry as the same turn (and replay its
scrubbed reply) rather than refuse it as a reused turn id, so the rule lives here, below both:
this module needs nothing but :mod:`contextledger.messages`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from contextledger.messages import Content, FunctionCallContent, FunctionResultContent, Message, TextContent

__all__ = ["FORGOTTEN_MARKER", "REMOVED_MARKER", "removed_form", "same_contents", "same_input"]

FORGOTTEN_MARKER = "[forgotten]"
"""What a forgotten declaration (or value) in a user message becomes."""
REMOVED_MARKER = "[removed: this message held a forgotten fact]"
"""What a reply, summary or tool message holding a forgotten value becomes."""


def removed_form(message: Message) -> Message:
    """``message`` replaced whole by :data:`REMOVED_MARKER`; tool calls and results keep their ids
    (with no arguments or output), so no result is left without its call."""
    contents: list[Content] = []
    for content in message.contents:
        if isinstance(content, FunctionCallContent):
            contents.append(dataclasses.replace(content, arguments="{}"))
        elif isinstance(content, FunctionResultContent):
            contents.append(FunctionResultContent(content.call_id, REMOVED_MARKER))
    if message.role != "tool" and not any(isinstance(content, FunctionCallContent) for content in contents):
        contents.insert(0, TextContent(REMOVED_MARKER))
    return dataclasses.replace(message, contents=tuple(contents))


def _scrubbed_text(stored: str, given: str) -> bool:
    """Whether ``stored`` is ``given`` with some spans replaced by :data:`FORGOTTEN_MARKER`."""
    if FORGOTTEN_MARKER not in stored:
        return False
    pattern = ".+?".join(re.escape(piece) for piece in stored.split(FORGOTTEN_MARKER))
    return re.fullmatch(pattern, given, re.DOTALL) is not None


def _scrubbed_content(stored: Content, given: Content) -> bool:
    if stored == given:
        return True
    if isinstance(stored, TextContent) and isinstance(given, TextContent):
        return _scrubbed_text(stored.text, given.text)
    return False


def _same_message(stored: Message, given: Message) -> bool:
    if stored == given:
        return True
    if stored.role != "user":
        return stored == removed_form(given)
    return (
        len(stored.contents) == len(given.contents)
        and dataclasses.replace(stored, contents=given.contents) == given
        and all(map(_scrubbed_content, stored.contents, given.contents))
    )


def same_input(stored: Sequence[Message], given: Sequence[Message]) -> bool:
    """Whether ``given`` is the input a stored turn answered: equal, or equal but for what a
    ``forget`` since took out of the stored copy (a marker in a user message, a message replaced
    whole).  Anything else is another turn, and reusing its turn id is refused."""
    return len(stored) == len(given) and all(map(_same_message, stored, given))


def same_contents(stored: Message, given: Message) -> bool:
    """Whether ``given`` says what ``stored`` says: the same role and contents, or those of which a
    ``forget`` since rewrote the stored copy.  Only role and contents count (ids and names travel
    differently in a reply than in a request): this is how a client that resends its conversation
    is recognised after a forget, rather than have the value it still holds stored again."""
    if stored.role != given.role:
        return False
    if stored.contents == given.contents:
        return True
    if stored.role != "user":
        return stored.contents == removed_form(given).contents
    return len(stored.contents) == len(given.contents) and all(map(_scrubbed_content, stored.contents, given.contents))
