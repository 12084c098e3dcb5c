"""The bounds ``benchmarks/cache.py`` prints, held by tests: under every price profile (the GPT-5.6
family's included) no default or prefix-stable policy costs more than sending the full history,
stateless and in sessions; the proxy's OpenAI breakpoint is the cheapest placement of those priced;
and the summariser that rides the conversation's cache reads most of its input from it where
today's form reads none.  The workloads are smaller than the benchmark's (a test runs in seconds),
except the summariser's figure, taken on the benchmark's 200-turn session."""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

from contextledger.cost import CostTotals


def _benchmark() -> ModuleType:
    folder = str(Path(__file__).resolve().parents[1] / "benchmarks")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import cache as module  # noqa: PLC0415  (benchmarks/cache.py)

    return module


bench = _benchmark()
WORKLOADS = {"tool session": lambda: bench.tool_session(100), "10k-token prompt": lambda: bench.big_prompt(50)}


@cache
def workload(name: str) -> object:
    return WORKLOADS[name]()


@cache
def baseline(name: str) -> dict[str, CostTotals]:
    totals: dict[str, CostTotals] = bench.replay(workload(name), bench.POLICIES["full history"], False).totals
    return totals


@pytest.mark.parametrize("retained", [False, True], ids=["stateless", "in sessions"])
@pytest.mark.parametrize("policy", [name for name in bench.POLICIES if name != "full history"])
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_no_default_or_prefix_stable_policy_costs_more_than_the_full_history(
    name: str, policy: str, retained: bool
) -> None:
    totals = bench.replay(workload(name), bench.POLICIES[policy], retained).totals
    for profile in bench.PROFILES:
        ratio = totals[profile].cost / baseline(name)[profile].cost
        assert ratio <= 1.0, f"{policy} costs {ratio:.2f}x the full history under {profile}"
    assert "gpt-5.6" in bench.PROFILES


def test_the_exact_opt_outs_are_priced_apart_and_may_cost_more() -> None:
    ratio = (
        bench.replay(workload("tool session"), bench.EXACT["truncation 20k->10k, exact"], False).totals["gpt-5.6"].cost
        / baseline("tool session")["gpt-5.6"].cost
    )
    assert ratio > 1.0  # why they are opt-outs: a cut that moves on every request pays the writes again
    assert set(bench.EXACT).isdisjoint(bench.POLICIES)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_the_proxys_openai_breakpoint_is_the_cheapest_placement_priced(name: str) -> None:
    _, failures, placed = bench.placement_rows(workload(name), "gpt-5.6", bench.OPENAI_PLACEMENTS)
    assert failures == []
    ours = placed["the proxy's: end of tools and instructions"]
    provider_only = placed["none (the provider's own breakpoint only)"]
    assert ours[1] <= provider_only[1]  # serve's default: the mark is read when the cut has moved


def test_the_summariser_riding_the_cache_reads_most_of_its_input_from_it() -> None:
    session = bench.tool_session(200)  # the benchmark's workload
    today = bench.replay(session, bench.POLICIES["summarisation 20k->10k"], True).summariser
    riding = bench.replay(session, bench.POLICIES["summarisation 20k->10k, riding the cache"], True).summariser
    assert today is not None
    assert riding is not None
    assert today["openai"].calls == riding["openai"].calls == 7
    for profile in bench.PROFILES:
        assert today[profile].hit_rate == 0.0  # a prefix no request has cached
    assert riding["openai"].hit_rate >= 0.85  # in sessions, warm: the conversation's own start
    # Under the GPT-5.6 rules an entry is read only where a breakpoint stands: the conversation
    # marks where the next cut falls (SummarizationStrategy.next_cut), the summary ends there.
    assert riding["gpt-5.6"].hit_rate >= 0.85
    stateless = bench.replay(session, bench.POLICIES["summarisation 20k->10k, riding the cache"], False).summariser
    assert stateless is not None
    assert stateless["gpt-5.6"].hit_rate >= 0.8  # each summary reads the run the one before it marked
