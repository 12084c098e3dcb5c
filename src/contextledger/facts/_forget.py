"""Forgetting that leaves nothing: the store, and every history the model reads, in one implementation.

A fact removed from the store but still stated in a history is still in front of the model at
the next call, so ``forget`` rewrites the histories too (design.md#forgetting).  Every forgetting in the
library (the chat desk, :class:`FactsProvider` users, Agent Framework's provider, the proxy) goes through
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

A history also keeps a record of each exactly-once turn (its inputs and reply, apart from the
message list, so a retry is answered without the model).  Left alone, a retry of an old turn id
would hand a forgotten value back, so ``forget`` reads those records too (a value a reduction
dropped from the messages may survive only there) and rewrites them by the same rules, keeping
their turn ids: a retry is still recognised (:func:`contextledger._forgotten.same_input`) and
answered with the scrubbed reply.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field

from contextledger._forgotten import FORGOTTEN_MARKER, REMOVED_MARKER, removed_form
from contextledger.exceptions import ConfigurationError
from contextledger.facts._parse import read_message
from contextledger.facts._records import Forgotten
from contextledger.facts._schema import DEFAULT_SCHEMA, FactSchema
from contextledger.facts._store import FactMemory, check_forget_key
from contextledger.history import HistoryProvider, StoredTurn
from contextledger.messages import Content, Message, TextContent

__all__ = [
    "FORGOTTEN_MARKER",
    "REMOVED_MARKER",
    "ForgetReport",
    "HistoryTarget",
    "declared_values",
    "forget_facts",
    "history_target",
    "scrub_history",
]

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
            result.append(removed_form(message))
        else:
            result.append(message)
    return result


@dataclass(frozen=True, slots=True)
class HistoryTarget:
    """A history that ``forget`` must rewrite: a name to report it by, how to read and replace its
    messages and, for a history that keeps turn records (every :class:`HistoryProvider` does), how
    to read and rewrite those, so a retried turn cannot hand a forgotten value back.

    Build one from a history provider with :func:`history_target`; ``load_turns`` and
    ``rewrite_turns`` come together or not at all.
    """

    name: str
    load: Callable[[], Awaitable[list[Message]]]
    replace: Callable[[list[Message]], Awaitable[None]]
    load_turns: Callable[[], Awaitable[list[StoredTurn]]] | None = None
    rewrite_turns: Callable[[list[StoredTurn]], Awaitable[None]] | None = None

    def __post_init__(self) -> None:
        if (self.load_turns is None) != (self.rewrite_turns is None):
            raise ConfigurationError(
                f"history target {self.name!r} has only one of load_turns and rewrite_turns; give both (what "
                "forget reads it must be able to rewrite) or neither"
            )


def history_target(history: HistoryProvider, session_id: str, name: str | None = None) -> HistoryTarget:
    """The complete :class:`HistoryTarget` for one session of ``history``: its messages and its
    turn records.  ``name`` (what the report calls it) defaults to ``source_id:session_id``."""

    async def load() -> list[Message]:
        return await history.load(session_id)

    async def replace(messages: list[Message]) -> None:
        await history.replace(session_id, messages)

    async def load_turns() -> list[StoredTurn]:
        return await history.load_turns(session_id)

    async def rewrite_turns(turns: list[StoredTurn]) -> None:
        await history.rewrite_turns(session_id, turns)

    label = f"{history.source_id}:{session_id}" if name is None else name
    return HistoryTarget(label, load, replace, load_turns, rewrite_turns)


@dataclass(frozen=True, slots=True)
class ForgetReport:
    """What a ``forget`` did: the facts removed from the store (with the new epoch), how many
    messages of each history were rewritten, and how many of its turn records."""

    forgotten: Forgotten
    key: str | None
    changed_messages: dict[str, int]
    changed_turns: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        if self.key is None:
            what = f"Forgot all {len(self.forgotten)} fact(s)" if self.forgotten else "No facts to forget"
        elif self.forgotten:
            what = f"Forgot {self.forgotten[0].key}"
        else:
            what = f"No fact {self.key!r} was held"
        histories = ", ".join(
            f"{name}: {count} message(s)"
            + (f" and {self.changed_turns[name]} turn record(s)" if self.changed_turns.get(name) else "")
            + " rewritten"
            for name, count in self.changed_messages.items()
        )
        where = f" Histories: {histories}." if histories else ""
        return (
            f"{what}.{where} Its declarations and values are gone from the store, the trail and the histories; "
            "a new epoch began, so no earlier extraction can bring it back."
        )


def _turn_messages(turns: Iterable[StoredTurn]) -> list[Message]:
    return [message for turn in turns for message in (*turn.inputs, *turn.reply)]


def _scrub_turns(
    turns: Sequence[StoredTurn], keys: frozenset[str], values: set[str], schema: FactSchema
) -> list[StoredTurn]:
    """The turns that held a forgotten key or value, scrubbed by :func:`scrub_history` (inputs
    and reply read together, as they were one stretch of the history); the others are left out."""
    changed: list[StoredTurn] = []
    for turn in turns:
        messages = [*turn.inputs, *turn.reply]
        scrubbed = scrub_history(messages, keys, values, schema)
        if any(new is not old for new, old in zip(scrubbed, messages)):
            size = len(turn.inputs)
            changed.append(StoredTurn(turn.turn_id, tuple(scrubbed[:size]), tuple(scrubbed[size:])))
    return changed


async def forget_facts(
    store: FactMemory,
    key: str | None = None,
    *,
    histories: Sequence[HistoryTarget] = (),
    run: Callable[[Callable[[], Forgotten]], Awaitable[Forgotten]] | None = None,
) -> ForgetReport:
    """Forget ``key`` (any case) or, with ``None``, every fact: in the store and in each history,
    its messages and its turn records.

    A key outside the store's schema raises :class:`FactsError` before anything changes.  The
    histories (messages and turn records) are read first, then the store forgets (a new epoch,
    so no extraction in flight can write the fact back even if a history then fails to be
    rewritten), then each history whose messages changed is replaced and each turn record that
    changed is rewritten.  A value that survives only in a turn record (a reduction dropped its
    messages) is found there and removed everywhere.

    ``run``, if given, is how the store's ``forget`` is called (the proxy passes one that runs a
    store doing network I/O off the event loop); by default it is called directly.
    """
    schema = store.schema
    name = None if key is None else check_forget_key(key, schema)
    keys = schema.keys if name is None else frozenset({name})
    loaded: list[tuple[HistoryTarget, list[Message], list[StoredTurn]]] = []
    for target in histories:
        turns = [] if target.load_turns is None else await target.load_turns()
        loaded.append((target, await target.load(), turns))
    forgotten = store.forget(name) if run is None else await run(lambda: store.forget(name))
    values = {fact.value for fact in forgotten}
    for _, messages, turns in loaded:
        values |= declared_values([*messages, *_turn_messages(turns)], keys, schema)
    changed: dict[str, int] = {}
    changed_turns: dict[str, int] = {}
    for target, messages, turns in loaded:
        scrubbed = scrub_history(messages, keys, values, schema)
        count = sum(1 for new, old in zip(scrubbed, messages) if new is not old)
        if count:
            await target.replace(scrubbed)
        changed[target.name] = changed.get(target.name, 0) + count
        rewritten = _scrub_turns(turns, keys, values, schema)
        if rewritten and target.rewrite_turns is not None:
            await target.rewrite_turns(rewritten)
        changed_turns[target.name] = changed_turns.get(target.name, 0) + len(rewritten)
    return ForgetReport(forgotten, name, changed, changed_turns)
