"""Strategy arguments: both API styles of the seed document and every alias pair, in one place.

Each strategy takes either the trigger/target style
(``TruncationStrategy(trigger=tokens_exceed(32_000), minimum_preserved=10)``) or the keyword
style (``TruncationStrategy(max_n=32_000, compact_to=16_000, tokenizer=...)``).  Mixing the two
in one call is rejected, because the result would be ambiguous; so is giving both spellings of
one setting (``minimum_preserved`` and ``minimum_preserved_turns``, ``client`` and
``chat_client``...).  The functions here turn what a caller gave into what a strategy runs
with, or raise :class:`ConfigurationError` saying what to change; the strategies' own modules
hold only behaviour.
"""

from __future__ import annotations

from typing import TypeVar, cast

from contextledger.compaction._triggers import Not, Threshold, Trigger, always, messages_exceed, tokens_exceed
from contextledger.exceptions import ConfigurationError
from contextledger.tokenizers import Tokenizer

__all__ = [
    "UNSET",
    "Unset",
    "count",
    "fraction",
    "one_of",
    "summarization_style",
    "tool_style",
    "trigger",
    "truncation_style",
    "window_style",
]

T = TypeVar("T")


class Unset:
    """The type of a keyword argument left out (to tell it from an explicit None)."""


UNSET = Unset()


def count(value: object, what: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{what} must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigurationError(f"{what} must be {minimum} or more, got {value}")
    return value


def fraction(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise ConfigurationError(f"{what} must be a fraction in (0.0, 1.0], got {value!r}")
    return float(value)


def trigger(value: object, what: str) -> Trigger:
    if not callable(value):
        raise ConfigurationError(f"{what} must be a trigger (a callable on a MessageIndex), got {value!r}")
    return cast(Trigger, value)


def one_of(owner: str, first: tuple[str, T | None], second: tuple[str, T | None]) -> T | None:
    """The value of a setting with two spellings (name, value each); giving both is an error."""
    if first[1] is not None and second[1] is not None:
        raise ConfigurationError(f"{owner}: {first[0]} and {second[0]} are the same setting; give one")
    return first[1] if first[1] is not None else second[1]


def truncation_style(
    trigger_: Trigger | None,
    target: Trigger | None,
    minimum_preserved: int | None,
    max_n: int | None,
    compact_to: int | None,
    tokenizer: Tokenizer | None,
) -> tuple[Trigger, Trigger | None, int, int | None, int | None]:
    """(trigger, target, floor, max_n, compact_to) of a :class:`TruncationStrategy`."""
    owner = "TruncationStrategy"
    if max_n is not None or compact_to is not None:
        if trigger_ is not None or target is not None:
            raise ConfigurationError(f"{owner} takes either trigger=/target= or max_n=/compact_to=, not both")
        if max_n is None:
            raise ConfigurationError(f"{owner}: compact_to needs max_n (the trigger threshold)")
        max_n = count(max_n, f"{owner} max_n", minimum=1)
        compact_to = max_n if compact_to is None else count(compact_to, f"{owner} compact_to", minimum=1)
        if compact_to > max_n:
            raise ConfigurationError(f"{owner} compact_to ({compact_to}) must not exceed max_n ({max_n})")
        exceed = tokens_exceed if tokenizer is not None else messages_exceed  # tokens with a tokenizer
        trigger_, target, default_floor = exceed(max_n), Not(exceed(compact_to)), 1  # the seed's only floor
    else:
        if trigger_ is None:
            raise ConfigurationError(
                f"{owner} needs a trigger (e.g. trigger=tokens_exceed(32_000)) "
                "or max_n= (e.g. max_n=32_000, compact_to=16_000)"
            )
        default_floor = 32
    floor = default_floor if minimum_preserved is None else count(minimum_preserved, f"{owner} minimum_preserved")
    return trigger_, target, floor, max_n, compact_to


def window_style(
    trigger_: Trigger | None,
    target: Trigger | None,
    minimum_preserved: int | None,
    minimum_preserved_turns: int | None,
    keep_last_groups: int | None,
    preserve_system: bool,
) -> tuple[Trigger, Trigger | None, int | None, int]:
    """(trigger, target, keep_last_groups, floor) of a :class:`SlidingWindowStrategy`."""
    owner = "SlidingWindowStrategy"
    if not preserve_system:
        raise ConfigurationError(
            f"{owner} always keeps system messages; use TruncationStrategy(preserve_system=False) to drop them"
        )
    floor = one_of(
        owner, ("minimum_preserved", minimum_preserved), ("minimum_preserved_turns", minimum_preserved_turns)
    )
    if keep_last_groups is not None:
        if trigger_ is not None or target is not None or floor is not None:
            raise ConfigurationError(f"{owner} takes either keep_last_groups= or trigger=/minimum_preserved=, not both")
        keep = count(keep_last_groups, f"{owner} keep_last_groups", minimum=1)
        return always(), None, keep, keep
    if trigger_ is None:
        raise ConfigurationError(f"{owner} needs a trigger (e.g. trigger=turns_exceed(4)) or keep_last_groups=")
    return trigger_, target, None, 1 if floor is None else count(floor, f"{owner} minimum_preserved")


def tool_style(
    owner: str,
    trigger_: Trigger | None,
    target: Trigger | None,
    minimum_preserved: int | None,
    keep_last_tool_call_groups: int | None,
) -> tuple[Trigger, Trigger | None, int | None, int]:
    """(trigger, target, keep_last_tool_call_groups, floor) of the two tool-group strategies:
    a floor counted in tool groups (keyword style, default 1) or in any groups (trigger style,
    default 2)."""
    if keep_last_tool_call_groups is not None:
        if minimum_preserved is not None:
            raise ConfigurationError(
                f"{owner}: keep_last_tool_call_groups= and minimum_preserved= are two floors; give one"
            )
        floor = count(keep_last_tool_call_groups, f"{owner} keep_last_tool_call_groups")
        if trigger_ is None:
            if target is not None:
                raise ConfigurationError(f"{owner}: target= needs a trigger=")
            return always(), None, floor, floor
        return trigger_, target, floor, floor
    if trigger_ is None:
        if target is not None or minimum_preserved is not None:
            raise ConfigurationError(f"{owner}: target= and minimum_preserved= need a trigger=")
        return always(), None, 1, 1
    floor = 2 if minimum_preserved is None else count(minimum_preserved, f"{owner} minimum_preserved")
    return trigger_, target, None, floor


def summarization_style(
    trigger_: Trigger | None,
    target: Trigger | None,
    minimum_preserved: int | None,
    target_count: int | None,
    threshold: int | None,
    max_input_tokens: int | Unset | None,
    max_summary_input_tokens: int | Unset | None,
) -> tuple[Trigger, Trigger | None, int, int | None, int | None, int | None]:
    """(trigger, target, floor, target_count, threshold, input budget) of a
    :class:`SummarizationStrategy`."""
    owner = "SummarizationStrategy"
    if trigger_ is not None:
        if target_count is not None or threshold is not None:
            raise ConfigurationError(
                f"{owner} takes either trigger=/minimum_preserved= or target_count=/threshold=, not both"
            )
        floor = 4 if minimum_preserved is None else count(minimum_preserved, f"{owner} minimum_preserved")
    else:
        if target is not None or minimum_preserved is not None:
            raise ConfigurationError(f"{owner}: target= and minimum_preserved= need a trigger=")
        target_count = 4 if target_count is None else count(target_count, "target_count", minimum=1)
        threshold = 2 if threshold is None else count(threshold, "threshold")
        trigger_ = Threshold("included_non_system_messages", target_count + threshold, "non_system_messages_exceed")
        floor = 1
    if not isinstance(max_input_tokens, Unset) and not isinstance(max_summary_input_tokens, Unset):
        raise ConfigurationError(
            f"{owner}: max_input_tokens and max_summary_input_tokens are the same setting; give one"
        )
    budget = max_input_tokens if not isinstance(max_input_tokens, Unset) else max_summary_input_tokens
    if isinstance(budget, Unset):
        budget = 16_000
    budget = None if budget is None else count(budget, "max_input_tokens", minimum=1)
    return trigger_, target, floor, target_count, threshold, budget
