"""A compaction policy sized from a model's context window (MAF-Python's harness default).

It is a composition of the library's own strategies, so it inherits their guarantees: groups and
units are excluded whole, system messages stay, the newest group is always sent, and nothing the
caller handed in is modified.
"""

from __future__ import annotations

from contextledger.compaction._strategies import (
    PipelineStrategy,
    TokenBudgetComposedStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
)
from contextledger.exceptions import ConfigurationError
from contextledger.tokenizers import CharacterEstimatorTokenizer, Tokenizer

__all__ = ["ContextWindowCompactionStrategy"]


def _fraction(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise ConfigurationError(f"{what} must be a fraction in (0.0, 1.0], got {value!r}")
    return float(value)


def _positive(value: object, what: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(f"{what} must be an integer of {minimum} or more, got {value!r}")
    return value


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
    ) -> None:
        window = _positive(max_context_window_tokens, "max_context_window_tokens", minimum=1)
        output = _positive(max_output_tokens, "max_output_tokens", minimum=0)
        if output >= window:
            raise ConfigurationError(
                f"max_output_tokens ({output}) must be less than max_context_window_tokens ({window}): "
                "the request needs room of its own"
            )
        eviction = _fraction(tool_eviction_threshold, "tool_eviction_threshold")
        truncation = _fraction(truncation_threshold, "truncation_threshold")
        if truncation < eviction:
            raise ConfigurationError(
                f"truncation_threshold ({truncation}) must be at least tool_eviction_threshold ({eviction}): "
                "truncation is the later, harsher step"
            )
        keep = _positive(keep_last_tool_call_groups, "keep_last_tool_call_groups", minimum=0)
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
                strategies=[ToolResultCompactionStrategy(keep_last_tool_call_groups=keep)],
            ),
            TokenBudgetComposedStrategy(
                token_budget=truncation_tokens,
                tokenizer=counter,
                strategies=[TruncationStrategy(max_n=truncation_tokens, compact_to=eviction_tokens, tokenizer=counter)],
            ),
        )

    def __repr__(self) -> str:
        return (
            f"ContextWindowCompactionStrategy(max_context_window_tokens={self.max_context_window_tokens}, "
            f"max_output_tokens={self.max_output_tokens}, tool_eviction_threshold={self.tool_eviction_threshold}, "
            f"truncation_threshold={self.truncation_threshold}, "
            f"keep_last_tool_call_groups={self.keep_last_tool_call_groups})"
        )
