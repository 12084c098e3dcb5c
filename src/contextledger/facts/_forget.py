"""Forgetting that leaves nothing: the store, and every history the model reads, in one implementation.

A fact removed from the store but still stated in a history is still in front of the model at
the next call, so ``forget`` rewrites the histories too (SPEC §11).  Every forgetting in the
library (the chat desk, :class:`FactsProvider` users, Agent Framework's provider) goes through
:func:`forget_facts` and :func:`scrub_history`:

- in a user message, each declaration of a forgotten key (valid or not, admitted or not, after
  prose or not) is replaced by :data:`FORGOTTEN_MARKER`, and so is every other whole-word
  occurrence of a forgotten value; the rest of the message stays word for word;
- any other message (an assistant reply, a summary, a tool call or result, a system message)
  that contains a forgotten value as a whole word (case-sensitive), or a declaration of a
  forgotten key, is replaced whole by :data:`REMOVED_MARKER`: it was written with the value in
  view, and a partial redaction could leave what was built on it.  Tool calls and results keep
  their ids, so no result is left without its call;
- a value shorter than three characters (``P1``) is removed only inside declarations: as a
  bare word it would take unrelated text with it.

The values forgotten are the store's and every value the histories ever declared for the key,
so ``forget module`` removes ``module=Reporting`` as well as the later ``module=Billing``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from contextledger.facts._parse import read_message
from contextledger.facts._records import Forgotten
from contextledger.facts._schema import DEFAULT_SCHEMA, FactSchema
from contextledger.facts._store import FactMemory, check_forget_key
from contextledger.messages import (
    Content,
    FunctionCallContent,
    FunctionResultContent,
    Message,
    TextContent,
)

__all__ = [
    "FORGOTTEN_MARKER",
    "REMOVED_MARKER",
    "ForgetReport",
    "HistoryTarget",
    "declared_values",
    "forget_facts",
    "scrub_history",
]

FORGOTTEN_MARKER = "[forgotten]"
"""What a forgotten declaration (or value) in a user message becomes."""
REMOVED_MARKER = "[removed: this message held a forgotten fact]"
"""What a reply, summary or tool message holding a forgotten value becomes."""
SHORT_VALUE = 3


def _value_pattern(values: Iterable[str]) -> re.Pattern[str] | None:
    """Whole-word, case-sensitive occurrences of the values long enough to look for alone."""
    usable = sorted({value for value in values if len(value) >= SHORT_VALUE}, key=len, reverse=True)
    if not usable:
        return None
    return re.compile(r"(?<!\w)(?:" + "|".join(re.escape(value) for value in usable) + r")(?!\w)")


def declared_values(messages: Iterable[Message], keys: frozenset[str], schema: FactSchema = DEFAULT_SCHEMA) -> set[str]:
    """Every non-empty value a user message in ``messages`` declared for one of ``keys``, admitted or not."""
    values: set[str] = set()
    for message in messages:
        if message.role != "user":
            continue
        for text in message.payload_texts():
            for sign in read_message(text, schema).signs:
                if sign.kind != "prose" and sign.key in keys and sign.value:
                    values.add(sign.value)
    return values


def _declares(text: str, keys: frozenset[str], schema: FactSchema) -> bool:
    return any(sign.kind != "prose" and sign.key in keys for sign in read_message(text, schema).signs)


def _scrub_user_text(text: str, keys: frozenset[str], pattern: re.Pattern[str] | None, schema: FactSchema) -> str:
    spans = [
        (sign.start, sign.start + len(sign.evidence))
        for sign in read_message(text, schema).signs
        if sign.kind != "prose" and sign.key in keys and sign.evidence is not None and sign.start >= 0
    ]
    pieces: list[str] = []
    position = 0
    for start, end in sorted(spans):
        pieces.append(text[position:start])
        pieces.append(FORGOTTEN_MARKER)
        position = end
    pieces.append(text[position:])
    rewritten = "".join(pieces)
    return rewritten if pattern is None else pattern.sub(FORGOTTEN_MARKER, rewritten)


def _replace_whole(message: Message) -> Message:
    contents: list[Content] = []
    for content in message.contents:
        if isinstance(content, FunctionCallContent):
            contents.append(dataclasses.replace(content, arguments="{}"))
        elif isinstance(content, FunctionResultContent):
            contents.append(FunctionResultContent(content.call_id, REMOVED_MARKER))
    if message.role != "tool" and not any(isinstance(content, FunctionCallContent) for content in contents):
        contents.insert(0, TextContent(REMOVED_MARKER))
    return dataclasses.replace(message, contents=tuple(contents))


def _holds(message: Message, keys: frozenset[str], pattern: re.Pattern[str] | None, schema: FactSchema) -> bool:
    for text in message.payload_texts():
        if pattern is not None and pattern.search(text):
            return True
        if "=" in text and _declares(text, keys, schema):
            return True
    return False


def scrub_history(
    messages: Sequence[Message], keys: frozenset[str], values: Iterable[str], schema: FactSchema = DEFAULT_SCHEMA
) -> list[Message]:
    """``messages`` with every declaration of ``keys`` and every trace of ``values`` removed, by
    the rules in the module docstring.  A message that needs no change is returned as it was
    (the same object), so callers can tell what changed."""
    everything = set(values) | declared_values(messages, keys, schema)
    pattern = _value_pattern(everything)
    result: list[Message] = []
    for message in messages:
        if message.role == "user":
            contents: list[Content] = []
            changed = False
            for content in message.contents:
                if isinstance(content, TextContent):
                    text = _scrub_user_text(content.text, keys, pattern, schema)
                    changed = changed or text != content.text
                    contents.append(TextContent(text) if text != content.text else content)
                else:
                    contents.append(content)
            result.append(dataclasses.replace(message, contents=tuple(contents)) if changed else message)
        elif _holds(message, keys, pattern, schema):
            result.append(_replace_whole(message))
        else:
            result.append(message)
    return result


@dataclass(frozen=True, slots=True)
class HistoryTarget:
    """A history that ``forget`` must rewrite: a name to report it by, and how to read and replace it."""

    name: str
    load: Callable[[], Awaitable[list[Message]]]
    replace: Callable[[list[Message]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ForgetReport:
    """What a ``forget`` did: the facts removed from the store (with the new epoch), and how many
    messages of each history were rewritten."""

    forgotten: Forgotten
    key: str | None
    changed_messages: dict[str, int]

    def describe(self) -> str:
        if self.key is None:
            what = f"Forgot all {len(self.forgotten)} fact(s)" if self.forgotten else "No facts to forget"
        elif self.forgotten:
            what = f"Forgot {self.forgotten[0].key}"
        else:
            what = f"No fact {self.key!r} was held"
        histories = ", ".join(f"{name}: {count} message(s) rewritten" for name, count in self.changed_messages.items())
        where = f" Histories: {histories}." if histories else ""
        return (
            f"{what}.{where} Its declarations and values are gone from the store, the trail and the histories; "
            "a new epoch began, so no earlier extraction can bring it back."
        )


async def forget_facts(
    store: FactMemory, key: str | None = None, *, histories: Sequence[HistoryTarget] = ()
) -> ForgetReport:
    """Forget ``key`` (any case) or, with ``None``, every fact: in the store and in each history.

    A key outside the store's schema raises :class:`FactsError` before anything changes.  The
    histories are read first, then the store forgets (a new epoch, so no extraction in flight
    can write the fact back even if a history then fails to be rewritten), then each history
    whose messages changed is replaced.
    """
    schema = store.schema
    name = None if key is None else check_forget_key(key, schema)
    keys = schema.keys if name is None else frozenset({name})
    loaded = [(target, await target.load()) for target in histories]
    forgotten = store.forget(name)
    values = {fact.value for fact in forgotten}
    for _, messages in loaded:
        values |= declared_values(messages, keys, schema)
    changed: dict[str, int] = {}
    for target, messages in loaded:
        scrubbed = scrub_history(messages, keys, values, schema)
        count = sum(1 for new, old in zip(scrubbed, messages) if new is not old)
        if count:
            await target.replace(scrubbed)
        changed[target.name] = changed.get(target.name, 0) + count
    return ForgetReport(forgotten, name, changed)
