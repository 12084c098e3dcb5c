"""Where a compacted conversation may start, for APIs whose conversations open with the user.

Anthropic's Messages API refuses a conversation whose first message is the assistant's.  A strategy
that cuts by tokens or by groups can leave exactly that: the newest turn's user message was the
one too large to keep (a pasted document), and what follows it is the assistant's reply and its
tool calls.  Rewriting the role would put the assistant's words in the user's mouth, so the start
changes instead, keeping as much as it can of what the strategy chose to send:

1. back to the user message that opened the turn the cut fell in, when it is small beside what
   is kept (at most a quarter of it, or :data:`SMALL_OPENING_TOKENS`): the model reads the request
   its kept replies answer;
2. else forward to the next user message of the projection that can open a conversation (one
   that is not the rest of a message of tool results), when what lies before it is at most a
   quarter of what is kept: the stale end of an older turn goes;
3. otherwise a short user notice, ``[N earlier messages set aside]``, marked as ours with
   :data:`SET_ASIDE_PROPERTY`, opens the conversation, so the model knows something came before
   and everything the strategy kept is sent.

A summary a strategy wrote may open the conversation as it is: the writer sends it as user text,
and its own marker (``[Summary]``, ``[Tool results: ...]``) says what it is.  System messages are
never dropped by a move.  Every choice depends only on the projection and the conversation, so a
prefix-stable strategy's requests stay prefix-stable through it.
"""

from __future__ import annotations

from collections.abc import Sequence

from contextledger.messages import Message
from contextledger.tokenizers import Tokenizer

__all__ = [
    "SET_ASIDE_PROPERTY",
    "SMALL_OPENING_TOKENS",
    "opened_by_user",
    "set_aside_notice",
]

SET_ASIDE_PROPERTY = "_set_aside"
"""``additional_properties`` key of the notice that opens a conversation whose start was set
aside; its value is how many messages were."""

SMALL_OPENING_TOKENS = 256
"""A turn's opening user message this small is always brought back rather than replaced by a notice."""


def _opens(messages: Sequence[Message], position: int) -> bool:
    """Whether ``messages[position]`` can be the first message: a user message that does not join
    tool results before it (on the wire, results and the text after them are one user message)."""
    return messages[position].role == "user" and (position == 0 or messages[position - 1].role != "tool")


def opened_by_user(
    projection: Sequence[Message], conversation: Sequence[Message], *, tokenizer: Tokenizer
) -> list[Message] | None:
    """``projection`` (what a strategy kept of ``conversation``) made to open with the user, or
    ``None`` when it already does (a summary first counts as opening it).

    The conversation itself is expected to open with the user; only what compaction left is moved.
    """
    first = next((at for at, message in enumerate(projection) if message.role != "system"), None)
    if first is None:
        return None
    head = projection[first]
    if head.role == "user" or head.is_summary:
        return None
    leading, rest = list(projection[:first]), list(projection[first:])
    kept = sum(tokenizer.count_messages(rest))
    # 1. The user message that opened the turn the cut fell in, brought back when small.
    where = next((at for at, message in enumerate(conversation) if message is head), None)
    if where is None:  # not the conversation's own message: compare by value
        where = next((at for at, message in enumerate(conversation) if message == head), len(conversation))
    opener = next((at for at in range(where - 1, -1, -1) if _opens(conversation, at)), None)
    if head.is_provider_compaction:
        # A provider's compaction item is never moved past: the user message before it comes
        # back whatever its size, and one the conversation itself opens with is sent as it came.
        return None if opener is None else [*leading, conversation[opener], *rest]
    if opener is not None and sum(tokenizer.count_messages([conversation[opener]])) <= max(
        SMALL_OPENING_TOKENS, kept // 4
    ):
        return [*leading, conversation[opener], *rest]
    # 2. A later user message that can open, when little lies before it; its system messages stay.
    later = next((at for at in range(first + 1, len(projection)) if _opens(projection, at)), None)
    if later is not None and sum(tokenizer.count_messages(projection[first:later])) <= kept // 4:
        kept_systems = [message for message in projection[first:later] if message.role == "system"]
        return [*leading, *kept_systems, *projection[later:]]
    # 3. A notice of what was set aside.
    aside = sum(1 for message in conversation[:where] if message.role != "system")
    return [*leading, set_aside_notice(aside), *rest]


def set_aside_notice(count: int, *, ref: str | None = None) -> Message:
    """The user notice that stands where ``count`` messages were set aside, marked
    :data:`SET_ASIDE_PROPERTY`: ``[3 earlier messages set aside]``; with ``ref`` (a host that offers
    the model ``recall_context``), ``[3 earlier messages set aside; ref="..."]``."""
    text = f"[{count} earlier message{'s' if count != 1 else ''} set aside]"
    if ref is not None:
        text = f'{text[:-1]}; ref="{ref}"]'
    return Message.user(text, additional_properties={SET_ASIDE_PROPERTY: count})
