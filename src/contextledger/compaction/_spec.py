"""A strategy written as text: a name and ``KEY=VALUE`` parameters, and/or a token budget.

The command line (``contextledger compact``), the proxy (``contextledger serve`` and its config
file) and anything else that takes a strategy from a person read it here, so a spec that works in
one works in all of them, with the same messages when it does not::

    strategy_from_spec("sliding-window", ["keep_last_groups=20"])
    strategy_from_spec("sliding-window", ["trigger=all_of(has_tool_calls(), tokens_exceed(2000))"])
    strategy_from_spec("truncation", ["max_n=8000"], tokenizer="o200k_base")   # tokens with a tokenizer
    strategy_from_spec(None, budget=2000)       # collapse old tool results, then drop the oldest groups

A value is a whole number (``8_000`` too), ``true``/``false``, or text; ``trigger`` and ``target``
are trigger expressions built only from the trigger functions and whole numbers (the text is
parsed, never evaluated).  Every mistake is a :class:`ConfigurationError` naming the bad part.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from contextledger.compaction._base import CompactionStrategy
from contextledger.compaction._composition import TokenBudgetComposedStrategy
from contextledger.compaction._tool_results import SelectiveToolCallCompactionStrategy, ToolResultCompactionStrategy
from contextledger.compaction._triggers import (
    all_of,
    always,
    any_of,
    groups_exceed,
    has_tool_calls,
    messages_exceed,
    never,
    tokens_below,
    tokens_exceed,
    turns_exceed,
)
from contextledger.compaction._truncation import TruncationStrategy
from contextledger.compaction._window import SlidingWindowStrategy
from contextledger.exceptions import ConfigurationError
from contextledger.tokenizers import Tokenizer, get_tokenizer

__all__ = ["SPEC_STRATEGIES", "strategy_from_spec"]

SPEC_STRATEGIES: dict[str, type[CompactionStrategy]] = {
    "truncation": TruncationStrategy,
    "sliding-window": SlidingWindowStrategy,
    "tool-result-collapse": ToolResultCompactionStrategy,
    "selective-tool-call": SelectiveToolCallCompactionStrategy,
}
"""The strategies a spec can name; the others need Python objects (a chat model, child strategies)."""

_TRIGGERS: dict[str, Callable[..., Any]] = {
    trigger.__name__: trigger
    for trigger in (
        all_of,
        always,
        any_of,
        groups_exceed,
        has_tool_calls,
        messages_exceed,
        never,
        tokens_below,
        tokens_exceed,
        turns_exceed,
    )
}


def _trigger(node: ast.expr, text: str) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, int)
    ):
        return -node.operand.value  # refused by the trigger itself, with its own message
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _TRIGGERS
        and not node.keywords
    ):
        return _TRIGGERS[node.func.id](*(_trigger(argument, text) for argument in node.args))
    raise ConfigurationError(
        f"cannot read trigger {text!r}; write e.g. tokens_exceed(2000) or all_of(has_tool_calls(), turns_exceed(4)) "
        f"using {', '.join(sorted(_TRIGGERS))}"
    )


def _value(key: str, raw: str) -> Any:
    if key in ("trigger", "target"):
        try:
            tree = ast.parse(raw.strip(), mode="eval")
        except SyntaxError:
            raise ConfigurationError(f"cannot read {key} {raw!r}; write e.g. tokens_exceed(2000)") from None
        return _trigger(tree.body, raw)
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(raw.replace("_", ""))
    except ValueError:
        return raw


def _keywords(params: Sequence[str]) -> dict[str, Any]:
    if isinstance(params, str):
        raise ConfigurationError(f"params must be a list of KEY=VALUE strings, got the single string {params!r}")
    keywords: dict[str, Any] = {}
    for item in params:
        if not isinstance(item, str):
            raise ConfigurationError(f"a strategy parameter is a KEY=VALUE string, got {item!r}")
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ConfigurationError(f"parameter {item!r} is not KEY=VALUE; write e.g. keep_last_groups=20")
        keywords[key] = _value(key, raw)
    return keywords


def strategy_from_spec(
    name: str | None,
    params: Sequence[str] = (),
    *,
    budget: int | None = None,
    tokenizer: Tokenizer | str = "estimate",
) -> CompactionStrategy:
    """The strategy ``name`` with ``params`` (``KEY=VALUE`` strings), fitted into ``budget`` tokens if given.

    ``name`` is one of :data:`SPEC_STRATEGIES` (``truncation``, ``sliding-window``,
    ``tool-result-collapse``, ``selective-tool-call``); a parameter is any keyword the
    strategy's class takes.  With ``budget``, the strategy runs inside a
    :class:`TokenBudgetComposedStrategy`; with a budget and no name, old tool results are
    collapsed to one line each and then the oldest groups dropped.  ``tokenizer`` (a name or a
    :class:`Tokenizer`) counts the budget and any token bound (``max_n``, ``compact_to``).

    Raises :class:`ConfigurationError` for an unknown name or parameter, a value the strategy
    refuses, an unreadable trigger, or neither a name nor a budget.
    """
    counter = get_tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
        raise ConfigurationError(f"budget must be a positive whole number of tokens, got {budget!r}")
    keywords = _keywords(params)
    if name is None:
        if keywords:
            raise ConfigurationError("parameters need a strategy name; give one of " + ", ".join(SPEC_STRATEGIES))
        if budget is None:
            raise ConfigurationError("give a strategy name or a token budget")
        return TokenBudgetComposedStrategy(
            token_budget=budget,
            tokenizer=counter,
            strategies=[ToolResultCompactionStrategy(keep_last_tool_call_groups=1)],
        )
    if name == "summarization":
        raise ConfigurationError("summarization needs a chat model; build SummarizationStrategy in Python")
    cls = SPEC_STRATEGIES.get(name)
    if cls is None:
        raise ConfigurationError(f"unknown strategy {name!r}; choose one of {', '.join(SPEC_STRATEGIES)}")
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "formatter")]
    for key in keywords:
        if key not in accepted:
            raise ConfigurationError(f"{name} has no parameter {key!r}; it accepts {', '.join(accepted)}")
    if "tokenizer" in keywords:
        keywords["tokenizer"] = get_tokenizer(str(keywords["tokenizer"]))
    elif "tokenizer" in accepted and ("max_n" in keywords or "compact_to" in keywords):
        keywords["tokenizer"] = counter
    strategy = cls(**keywords)
    if budget is not None:
        return TokenBudgetComposedStrategy(token_budget=budget, tokenizer=counter, strategies=[strategy])
    return strategy
