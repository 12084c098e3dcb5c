"""What the LangChain and OpenAI Agents SDK adapters share: ``forget`` across a framework's stored
histories, and turning contextledger's frozen metadata back into the plain data frameworks keep.

For ``forget``, each adapter loads its framework's stored messages (a LangGraph state, an Agents
SDK session), hands them here as contextledger messages, and writes back what comes out; the
rules are :func:`contextledger.facts.scrub_history`'s, so every framework forgets the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contextledger.exceptions import FactsError
from contextledger.facts import ALLOWED_KEYS, FactMemory, Forgotten, parse_assertions, scrub_history
from contextledger.messages import Message

__all__ = ["forget_in_histories", "plain"]


def plain(value: Any) -> Any:
    """A mutable deep copy of frozen JSON-like data (read-only mappings and tuples become dicts and
    lists), as a framework's own messages hold it."""
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def forget_in_histories(
    store: FactMemory, key: str | None, histories: Sequence[list[Message]]
) -> tuple[Forgotten, list[list[Message] | None]]:
    """Forget ``key`` (or every fact) in ``store``, then scrub each history.

    Returns what the store forgot and, per history, its scrubbed messages or None when nothing in
    it changed.  The store is forgotten first (it also refuses a bad key before anything else
    changes), so no extraction in flight can bring a fact back even if writing a history fails.
    A value declared in any of the histories is scrubbed from all of them.
    """
    name = key.strip().lower() if isinstance(key, str) else None
    keys = ALLOWED_KEYS if name is None else frozenset({name})
    forgotten = store.forget(key)
    values = {fact.value for fact in forgotten}
    for messages in histories:
        values |= _declared_values(messages, keys)
    rewritten: list[list[Message] | None] = []
    for messages in histories:
        scrubbed = scrub_history(messages, keys, values)
        changed = len(scrubbed) != len(messages) or any(a is not b for a, b in zip(scrubbed, messages))
        rewritten.append(scrubbed if changed else None)
    return forgotten, rewritten


def _declared_values(messages: Sequence[Message], keys: frozenset[str]) -> set[str]:
    """Every value a user message declared for one of ``keys``."""
    values: set[str] = set()
    for message in messages:
        if message.role != "user":
            continue
        try:
            declared = parse_assertions(message.text)
        except FactsError:
            continue  # a message whose declarations were refused declared nothing
        values |= {candidate.value for candidate in declared if candidate.key in keys}
    return values
