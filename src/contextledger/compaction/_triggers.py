"""Triggers: predicates on a :class:`MessageIndex` that decide whether to compact, or when to stop.

Every trigger reads the index's running *included* metrics, so it costs O(1)
however long the history is.  Comparisons are strict (``tokens_exceed(100)``
fires at 101, not at 100).  ``groups_exceed`` counts system groups; a turn
counts while any of its groups is included; ``all_of()`` of nothing is true and
``any_of()`` of nothing is false.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from contextledger.exceptions import ConfigurationError

if TYPE_CHECKING:
    from contextledger.compaction._index import MessageIndex

__all__ = [
    "Not",
    "Threshold",
    "Trigger",
    "all_of",
    "always",
    "any_of",
    "groups_exceed",
    "has_tool_calls",
    "messages_exceed",
    "never",
    "tokens_below",
    "tokens_exceed",
    "turns_exceed",
]

Trigger: TypeAlias = Callable[["MessageIndex"], bool]
"""Any callable from an index to a bool is a trigger; the factories below cover the common ones."""


def _threshold(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{what} needs an integer threshold, got {value!r}")
    if value < 0:
        raise ConfigurationError(f"{what} threshold must be 0 or more, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class _Always:
    def __call__(self, index: MessageIndex) -> bool:
        return True

    def __repr__(self) -> str:
        return "always()"


@dataclass(frozen=True, slots=True)
class _Never:
    def __call__(self, index: MessageIndex) -> bool:
        return False

    def __repr__(self) -> str:
        return "never()"


@dataclass(frozen=True, slots=True)
class Threshold:
    """A trigger that compares one included metric of the index with a limit, strictly:
    ``metric > limit``, or ``metric < limit`` with ``below``.  Every count trigger is one of
    these, so a strategy can read the limit back and find its stopping point with arithmetic.

    ``metric`` names a :class:`MessageIndex` attribute (``"included_tokens"``...); ``name`` is
    the factory that made it, for its repr.
    """

    metric: str
    limit: int
    name: str
    below: bool = False

    def __call__(self, index: MessageIndex) -> bool:
        value: int = getattr(index, self.metric)
        return value < self.limit if self.below else value > self.limit

    def __repr__(self) -> str:
        return f"{self.name}({self.limit})"


@dataclass(frozen=True, slots=True)
class _HasToolCalls:
    def __call__(self, index: MessageIndex) -> bool:
        return index.included_tool_call_groups > 0

    def __repr__(self) -> str:
        return "has_tool_calls()"


@dataclass(frozen=True, slots=True)
class _Combined:
    """``all_of`` (``every``) or ``any_of`` of several triggers."""

    triggers: tuple[Trigger, ...]
    every: bool

    def __call__(self, index: MessageIndex) -> bool:
        return (all if self.every else any)(t(index) for t in self.triggers)

    def __repr__(self) -> str:
        return f"{'all_of' if self.every else 'any_of'}({', '.join(map(repr, self.triggers))})"


@dataclass(frozen=True, slots=True)
class Not:
    """The opposite of a trigger: how a keyword-style strategy says "stop once under the limit"."""

    trigger: Trigger

    def __call__(self, index: MessageIndex) -> bool:
        return not self.trigger(index)

    def __repr__(self) -> str:
        return f"not {self.trigger!r}"


def always() -> Trigger:
    """Fires every time; with it, only a strategy's preserved floor stops compaction."""
    return _Always()


def never() -> Trigger:
    """Never fires: disables a strategy without removing it."""
    return _Never()


def tokens_exceed(limit: int) -> Trigger:
    """Included tokens > ``limit``."""
    return Threshold("included_tokens", _threshold(limit, "tokens_exceed"), "tokens_exceed")


def tokens_below(limit: int) -> Trigger:
    """Included tokens < ``limit`` (useful as a target: stop once under it)."""
    return Threshold("included_tokens", _threshold(limit, "tokens_below"), "tokens_below", below=True)


def messages_exceed(limit: int) -> Trigger:
    """Included messages > ``limit``."""
    return Threshold("included_messages", _threshold(limit, "messages_exceed"), "messages_exceed")


def turns_exceed(limit: int) -> Trigger:
    """User turns with at least one included group > ``limit``."""
    return Threshold("included_turns", _threshold(limit, "turns_exceed"), "turns_exceed")


def groups_exceed(limit: int) -> Trigger:
    """Included groups, system groups counted, > ``limit``."""
    return Threshold("included_groups", _threshold(limit, "groups_exceed"), "groups_exceed")


def has_tool_calls() -> Trigger:
    """At least one tool-call group is still included."""
    return _HasToolCalls()


def _check(triggers: tuple[Trigger, ...], what: str) -> tuple[Trigger, ...]:
    for t in triggers:
        if not callable(t):
            raise ConfigurationError(f"{what} takes triggers (callables on an index), got {t!r}")
    return triggers


def all_of(*triggers: Trigger) -> Trigger:
    """Fires when every trigger fires (true for none)."""
    return _Combined(_check(triggers, "all_of"), every=True)


def any_of(*triggers: Trigger) -> Trigger:
    """Fires when any trigger fires (false for none)."""
    return _Combined(_check(triggers, "any_of"), every=False)
