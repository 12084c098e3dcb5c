"""Strategies written as text (``strategy_from_spec``): what the command line and the proxy accept."""

from __future__ import annotations

import subprocess
import sys

import pytest

from contextledger.compaction import (
    SPEC_STRATEGIES,
    SlidingWindowStrategy,
    TokenBudgetComposedStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
    apply_compaction_sync,
    strategy_from_spec,
)
from contextledger.exceptions import ConfigurationError
from contextledger.messages import Message
from contextledger.tokenizers import CharacterEstimatorTokenizer


def conversation(turns: int) -> list[Message]:
    messages = [Message.system("be brief")]
    for n in range(turns):
        messages += [Message.user(f"question {n} " + "word " * 50), Message.assistant(f"answer {n}")]
    return messages


def test_the_readme_examples_build_the_strategies_they_name() -> None:
    window = strategy_from_spec("sliding-window", ["keep_last_groups=20"])
    assert isinstance(window, SlidingWindowStrategy)
    triggered = strategy_from_spec("sliding-window", ["trigger=all_of(has_tool_calls(), tokens_exceed(2000))"])
    assert isinstance(triggered, SlidingWindowStrategy)
    truncation = strategy_from_spec("truncation", ["max_n=8_000"])
    assert isinstance(truncation, TruncationStrategy)
    assert set(SPEC_STRATEGIES) == {"truncation", "sliding-window", "tool-result-collapse", "selective-tool-call"}


def test_a_spec_compacts_as_the_same_strategy_built_in_python() -> None:
    messages = conversation(12)
    from_text = apply_compaction_sync(messages, strategy=strategy_from_spec("sliding-window", ["keep_last_groups=4"]))
    in_python = apply_compaction_sync(messages, strategy=SlidingWindowStrategy(keep_last_groups=4))
    assert from_text == in_python
    assert len(from_text) < len(messages)


def test_a_budget_alone_collapses_tool_results_and_a_budget_wraps_a_named_strategy() -> None:
    alone = strategy_from_spec(None, budget=2000, tokenizer=CharacterEstimatorTokenizer())
    assert isinstance(alone, TokenBudgetComposedStrategy)
    assert isinstance(alone.strategies[0], ToolResultCompactionStrategy)
    wrapped = strategy_from_spec("sliding-window", ["keep_last_groups=3"], budget=500)
    assert isinstance(wrapped, TokenBudgetComposedStrategy)
    assert isinstance(wrapped.strategies[0], SlidingWindowStrategy)
    assert len(apply_compaction_sync(conversation(12), strategy=wrapped)) < 25


@pytest.mark.parametrize(
    ("name", "params", "budget", "fragment"),
    [
        ("bogus", [], None, "unknown strategy 'bogus'; choose one of truncation"),
        ("truncation", ["max_n=-1"], None, "max_n must be 1 or more, got -1"),
        ("truncation", ["nonsense=1"], None, "truncation has no parameter 'nonsense'"),
        ("sliding-window", ["trigger=explode(1)"], None, "cannot read trigger 'explode(1)'"),
        ("sliding-window", ["trigger=__import__('os').system('x')"], None, "cannot read trigger"),
        ("sliding-window", ["trigger=tokens_exceed("], None, "cannot read trigger 'tokens_exceed('"),
        ("sliding-window", ["keep_last_groups"], None, "'keep_last_groups' is not KEY=VALUE"),
        ("summarization", [], None, "summarization needs a chat model"),
        (None, [], None, "give a strategy name or a token budget"),
        (None, ["max_n=3"], None, "parameters need a strategy name"),
        (None, [], 0, "budget must be a positive whole number of tokens, got 0"),
        ("truncation", "max_n=3", None, "a list of KEY=VALUE strings"),
        ("truncation", ["tokenizer=bogus", "max_n=5"], None, "unknown tokenizer 'bogus'"),
    ],
)
def test_a_bad_spec_is_a_configuration_error_naming_the_bad_part(
    name: str | None, params: list[str], budget: int | None, fragment: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        strategy_from_spec(name, params, budget=budget)
    assert fragment in str(caught.value)


def test_building_a_spec_does_not_load_the_command_line() -> None:
    code = (
        "import sys\n"
        "from contextledger.serve import StrategySpec\n"
        "StrategySpec('sliding-window', ('keep_last_groups=3',)).build()\n"
        "print('contextledger.cli' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "False"
