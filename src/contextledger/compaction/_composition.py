"""Composition: strategies run in order, under a token budget, or sized from a context window.

A composition inherits the guarantees of the strategies it runs: groups and units are
excluded whole, system messages stay, the newest group is always sent, and nothing the
caller handed in is modified.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from contextledger.compaction._arguments import count, fraction
from contextledger.compaction._base import SYSTEM, CompactionStrategy, newest_non_system
from contextledger.compaction._index import MessageIndex
from contextledger.compaction._tool_results import ToolResultCompactionStrategy
from contextledger.compaction._triggers import always, tokens_below, tokens_exceed
from contextledger.compaction._truncation import TruncationStrategy
from contextledger.exceptions import ConfigurationError
from contextledger.tokenizers import CharacterEstimatorTokenizer, Tokenizer

__all__ = ["ContextWindowCompactionStrategy", "PipelineStrategy", "TokenBudgetComposedStrategy"]


def _strategies(values: Sequence[Any], owner: str) -> list[CompactionStrategy]:
    out: list[CompactionStrategy] = []
    for value in values:
        if not isinstance(value, CompactionStrategy):
            raise ConfigurationError(f"{owner} takes compaction strategies, got {value!r}")
        out.append(value)
    return out


class PipelineStrategy(CompactionStrategy):
    """Run strategies in order, gentlest first; each decides with its own trigger.

    The pipeline's own trigger is :func:`always`.
    """

    name = "pipeline"

    def __init__(self, *strategies: CompactionStrategy | Sequence[CompactionStrategy]) -> None:
        flat: list[Any] = []
        for item in strategies:
            if isinstance(item, (list, tuple)):
                flat.extend(item)
            else:
                flat.append(item)
        self.strategies = _strategies(flat, "PipelineStrategy")
        super().__init__(always())
        self.calls_model = any(s.calls_model for s in self.strategies)  # type: ignore[misc]

    @property
    def tokenizers(self) -> Iterator[Tokenizer]:
        for strategy in self.strategies:
            yield from strategy.tokenizers

    async def _run(self, index: MessageIndex) -> bool:
        changed = False
        for strategy in self.strategies:
            changed = await strategy.compact(index) or changed
        return changed

    def __repr__(self) -> str:
        return f"PipelineStrategy({', '.join(map(repr, self.strategies))})"


class TokenBudgetComposedStrategy(CompactionStrategy):
    """Run strategies in order until included tokens fit ``token_budget``, then fall back.

    With ``early_stop`` (default) it stops as soon as the budget is met.  If the
    strategies cannot reach it, the oldest non-system groups are excluded until
    they do; the newest group is always kept, so the result may stay above the
    budget when that group alone exceeds it.  System messages are never dropped.

    With ``prefix_stable`` (the default) the fallback cuts as a truncation with its trigger at
    the budget and its target at half of it does: in steps of half the budget on a fixed grid, so
    a request sent afresh each time keeps its start until the conversation has grown by another
    half budget (design.md#prefix-stability).  ``prefix_stable=False`` cuts just below the budget every time.
    """

    name = "token_budget"
    hard_ceiling = True

    def __init__(
        self,
        *,
        token_budget: int,
        tokenizer: Tokenizer | None = None,
        strategies: Sequence[CompactionStrategy] = (),
        early_stop: bool = True,
        prefix_stable: bool = True,
    ) -> None:
        self.token_budget = count(token_budget, "TokenBudgetComposedStrategy token_budget", minimum=1)
        # The fallback's target: what a prefix-stable cut aims for, a whole step below the budget.
        target = tokens_below(self.token_budget - self.token_budget // 2 + 1) if prefix_stable else None
        super().__init__(tokens_exceed(self.token_budget), target, prefix_stable=prefix_stable)
        self.tokenizer = tokenizer
        self.strategies = _strategies(list(strategies), "TokenBudgetComposedStrategy")
        self.calls_model = any(s.calls_model for s in self.strategies)  # type: ignore[misc]
        self.early_stop = bool(early_stop)

    @property
    def tokenizers(self) -> Iterator[Tokenizer]:
        if self.tokenizer is not None:
            yield self.tokenizer
        for strategy in self.strategies:
            yield from strategy.tokenizers

    def _within(self, index: MessageIndex) -> bool:
        return index.included_tokens <= self.token_budget

    async def _run(self, index: MessageIndex) -> bool:
        changed = False
        for strategy in self.strategies:
            changed = await strategy.compact(index) or changed
            if self.early_stop and self._within(index):
                return changed
        if self._within(index):
            return changed
        last = newest_non_system(index)
        kind_of = index.columns.kind
        candidates = [g for g in index.live_ids() if kind_of[g] is not SYSTEM and g != last]
        return self._exclude_oldest(index, candidates, "token_budget_fallback") or changed

    def __repr__(self) -> str:
        return (
            f"TokenBudgetComposedStrategy(token_budget={self.token_budget}, "
            f"strategies=[{', '.join(map(repr, self.strategies))}])"
        )


class ContextWindowCompactionStrategy(PipelineStrategy):
    """Keep a request inside a model's context window, gentlest step first.

    The input budget is ``max_context_window_tokens - max_output_tokens``.  Two phases run in
    order, each only when its own threshold is crossed:

    1. *tool eviction*: above ``tool_eviction_threshold`` of the budget (default 0.5), older
       tool-call groups are collapsed into one-line summaries, keeping the newest
       ``keep_last_tool_call_groups`` (default 4) verbatim;
    2. *truncation*: above ``truncation_threshold`` of the budget (default 0.8), the oldest
       groups are excluded until the request is back under the tool-eviction level.

    Each phase is a :class:`TokenBudgetComposedStrategy`, so if its strategy cannot reach its
    level the oldest groups are excluded until it does (never the newest group, never system
    messages).  The two sizes may be given by position or by name
    (``ContextWindowCompactionStrategy(128_000, 16_384)``, as the .NET API takes them).
    """

    name = "context_window"

    DEFAULT_TOOL_EVICTION_THRESHOLD = 0.5
    DEFAULT_TRUNCATION_THRESHOLD = 0.8

    def __init__(
        self,
        max_context_window_tokens: int,
        max_output_tokens: int,
        *,
        tokenizer: Tokenizer | None = None,
        tool_eviction_threshold: float = DEFAULT_TOOL_EVICTION_THRESHOLD,
        truncation_threshold: float = DEFAULT_TRUNCATION_THRESHOLD,
        keep_last_tool_call_groups: int = 4,
        prefix_stable: bool = True,
    ) -> None:
        window = count(max_context_window_tokens, "max_context_window_tokens", minimum=1)
        output = count(max_output_tokens, "max_output_tokens", minimum=0)
        if output >= window:
            raise ConfigurationError(
                f"max_output_tokens ({output}) must be less than max_context_window_tokens ({window}): "
                "the request needs room of its own"
            )
        eviction = fraction(tool_eviction_threshold, "tool_eviction_threshold")
        truncation = fraction(truncation_threshold, "truncation_threshold")
        if truncation < eviction:
            raise ConfigurationError(
                f"truncation_threshold ({truncation}) must be at least tool_eviction_threshold ({eviction}): "
                "truncation is the later, harsher step"
            )
        keep = count(keep_last_tool_call_groups, "keep_last_tool_call_groups", minimum=0)
        counter = tokenizer if tokenizer is not None else CharacterEstimatorTokenizer()
        self.max_context_window_tokens = window
        self.max_output_tokens = output
        self.input_budget_tokens = window - output
        self.tool_eviction_threshold = eviction
        self.truncation_threshold = truncation
        self.keep_last_tool_call_groups = keep
        self.tokenizer = counter
        eviction_tokens = max(int(self.input_budget_tokens * eviction), 1)
        truncation_tokens = max(int(self.input_budget_tokens * truncation), 1)
        super().__init__(
            TokenBudgetComposedStrategy(
                token_budget=eviction_tokens,
                tokenizer=counter,
                strategies=[ToolResultCompactionStrategy(keep_last_tool_call_groups=keep, prefix_stable=prefix_stable)],
                prefix_stable=prefix_stable,
            ),
            TokenBudgetComposedStrategy(
                token_budget=truncation_tokens,
                tokenizer=counter,
                prefix_stable=prefix_stable,
                strategies=[
                    TruncationStrategy(
                        max_n=truncation_tokens,
                        compact_to=eviction_tokens,
                        tokenizer=counter,
                        prefix_stable=prefix_stable,
                    )
                ],
            ),
        )

    def __repr__(self) -> str:
        return (
            f"ContextWindowCompactionStrategy(max_context_window_tokens={self.max_context_window_tokens}, "
            f"max_output_tokens={self.max_output_tokens}, tool_eviction_threshold={self.tool_eviction_threshold}, "
            f"truncation_threshold={self.truncation_threshold}, "
            f"keep_last_tool_call_groups={self.keep_last_tool_call_groups})"
        )
