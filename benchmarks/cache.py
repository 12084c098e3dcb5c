"""What each context policy costs once the provider's prompt cache is counted (design.md#cost).

Replays conversations request by request, as an agent sends them (the request that asks for a tool
call, then the one carrying its result), through every built-in compaction policy, and prices each
request with :class:`contextledger.cost.PrefixCacheSimulator` under the ``openai`` and ``anthropic``
profiles.  Each policy runs two ways:

- stateless: the whole history compacted afresh for every request, as ``contextledger serve`` does
  without a session and as a LangChain runnable does;
- retained: the history kept compacted between turns (session mode), each request the retained
  history plus the turn so far.

Reported per policy: tokens sent and cost as a share of sending the full history, and the share of
input read from the cache.  Costs are estimates of the providers' rules (see the cost module); the
Anthropic client marks a cache breakpoint after its tools and system prompt and one at the end of
each request.  Everything is deterministic, so one run is the figure.  The bounds of design.md#prefix-stability are
checked at the end: no policy above the full history's cost, and truncation at trigger = 2 x target
at most 0.6 of its cost and 0.5 of its tokens on the tool session.  The summarising policy's model
is the built-in offline one, counted: applied statelessly it must be called once per step of its
cut (a summary of a given run is written once, design.md#stable-summaries), and the calls and steps are printed.

    python benchmarks/cache.py                  # the three workloads, both profiles
    python benchmarks/cache.py --turns 400      # a longer tool session
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads
from contextledger import Message, from_openai
from contextledger.agents import ReducedHistoryProvider
from contextledger.clients import OfflineModel, ScriptedChatClient
from contextledger.compaction import (
    CompactionStrategy,
    ContextWindowCompactionStrategy,
    SelectiveToolCallCompactionStrategy,
    SlidingWindowStrategy,
    SummarizationStrategy,
    TokenBudgetComposedStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
    compact_with_report,
    strategy_from_spec,
    tokens_below,
    tokens_exceed,
)
from contextledger.cost import BlockMemo, CostTotals, PrefixCacheSimulator, request_blocks
from contextledger.history import InMemoryHistoryProvider
from contextledger.serve import DEFAULT_STRATEGY
from contextledger.tokenizers import CharacterEstimatorTokenizer

PROFILES = ("openai", "anthropic")
TOKENIZER = CharacterEstimatorTokenizer()


@dataclass(frozen=True)
class Workload:
    """A conversation as the turns an agent sends, and the tools its requests carry."""

    name: str
    system: list[Message]
    turns: list[list[Message]]  # user, call, result, answer
    tools: list[dict[str, Any]]


def tool_session(turns: int) -> Workload:
    messages = from_openai(workloads.messages(1 + 4 * turns))
    return Workload(
        f"tool session, {turns} turns",
        messages[:1],
        [messages[1 + 4 * n : 5 + 4 * n] for n in range(turns)],
        [],
    )


def big_prompt(turns: int) -> Workload:
    """A 10,000-token system prompt and tool list in front of the same kind of session."""
    base = tool_session(turns)
    rules = "\n".join(
        f"Rule {n}: " + "answer precisely, cite the tool you used, never guess prices. " * 6 for n in range(100)
    )
    tools = [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"{name}: " + "looks the item up in the shop's catalogue and returns rows. " * 20,
                "parameters": {"type": "object", "properties": {"item": {"type": "integer"}}},
            },
        }
        for name in workloads.TOOLS
    ]
    return Workload(f"10k-token prompt and tools, {turns} turns", [Message.system(rules)], base.turns, tools)


Policy = Callable[[], CompactionStrategy | None]

POLICIES: dict[str, Policy] = {
    "full history": lambda: None,
    "truncation 20k->10k": lambda: TruncationStrategy(trigger=tokens_exceed(20_000), target=tokens_below(10_000)),
    "sliding window 20 groups": lambda: SlidingWindowStrategy(keep_last_groups=20),
    "tool-result collapse, keep 2": lambda: ToolResultCompactionStrategy(keep_last_tool_call_groups=2),
    "selective removal, keep 2": lambda: SelectiveToolCallCompactionStrategy(keep_last_tool_call_groups=2),
    "token budget 20k (collapse, window)": lambda: TokenBudgetComposedStrategy(
        token_budget=20_000,
        tokenizer=TOKENIZER,
        strategies=[
            ToolResultCompactionStrategy(keep_last_tool_call_groups=2),
            SlidingWindowStrategy(keep_last_groups=20),
        ],
    ),
    # The summariser is the offline model, counted (see summariser_calls); the whole run is sent
    # to it however long, as to a model with room for it.
    "summarisation 20k->10k": lambda: SummarizationStrategy(
        ScriptedChatClient([OfflineModel(tokenizer=TOKENIZER)]),
        trigger=tokens_exceed(20_000),
        target=tokens_below(10_000),
        tokenizer=TOKENIZER,
        max_input_tokens=None,
    ),
    "context window 40k": lambda: ContextWindowCompactionStrategy(40_000, 4_000, tokenizer=TOKENIZER),
    # What `contextledger serve` compacts with when given no strategy, counted with this benchmark's tokenizer.
    "serve's default (truncation 32k->16k)": lambda: strategy_from_spec(
        DEFAULT_STRATEGY.name, DEFAULT_STRATEGY.params, tokenizer=TOKENIZER
    ),
}


# The exact cuts a caller can ask for (the seed's and MAF's rules: a target met exactly, a floor
# kept exactly), shown for what they cost and outside the bound: they are opt-outs, not defaults.
EXACT: dict[str, Policy] = {
    "truncation 20k->10k, exact": lambda: TruncationStrategy(
        trigger=tokens_exceed(20_000), target=tokens_below(10_000), prefix_stable=False
    ),
    "sliding window 20 groups, exact": lambda: SlidingWindowStrategy(keep_last_groups=20, prefix_stable=False),
    "tool-result collapse, keep 2, exact": lambda: ToolResultCompactionStrategy(
        keep_last_tool_call_groups=2, prefix_stable=False
    ),
}


@dataclass
class Replay:
    """What one policy cost, and for a summarising one, its model calls and the steps of its cut
    (the requests whose summary stands for other messages than the previous request's)."""

    totals: dict[str, CostTotals]
    summariser_calls: int | None = None
    cut_steps: int = 0


def summarised_run(groups: Sequence[Any]) -> tuple[int, ...]:
    """The identities of the messages a request's summary replaced (empty: no summary).  The
    workload reuses its message objects from request to request, so equal runs are equal tuples."""
    return tuple(id(m) for g in groups if g.replaces for r in g.replaces for m in r.messages)


Placement = Callable[[int, int], list[int]]
"""Where a request's cache breakpoints go, as block counts: given the blocks of its tools and
system prompt, and all its blocks."""


def proxy_marks(static: int, count: int) -> list[int]:
    """What ``contextledger serve`` marks on ``/v1/messages`` when the client marks nothing (and
    what an Anthropic client is advised to mark): the end of the tools and system prompt, and the
    end of the request."""
    return sorted({mark for mark in (static, count) if mark})


PLACEMENTS: dict[str, Placement] = {
    "the proxy's: end of tools and system, end of request": proxy_marks,
    "end of request only": lambda static, count: [count],
    "end of tools and system, and one message before the end": lambda static, count: sorted(
        {mark for mark in (static, count - 1) if mark}
    ),
    "end of tools and system only": lambda static, count: [static] if static else [],
    "none": lambda static, count: [],
}


def replay(workload: Workload, make: Policy, retained: bool, marks_of: Placement = proxy_marks) -> Replay:
    caches = {profile: PrefixCacheSimulator(profile) for profile in PROFILES}
    memo: BlockMemo = {}
    strategy = make()
    runs: list[tuple[int, ...]] = []
    kept: list[Message] = list(workload.system)
    reducer = (
        ReducedHistoryProvider(InMemoryHistoryProvider(), strategy, tokenizer=TOKENIZER)
        if retained and strategy is not None
        else None
    )

    def send(request: Sequence[Message], output: Message) -> None:
        sent = request
        if strategy is not None and not retained:
            result = asyncio.run(compact_with_report(request, strategy=strategy))
            sent = result.messages
            runs.append(summarised_run(result.index.groups))
        blocks = request_blocks(sent, tokenizer=TOKENIZER, tools=workload.tools, memo=memo)
        produced = TOKENIZER.count_message(output)
        # An Anthropic client marks the end of its tools and system prompt and the end of the
        # request (what the provider's documentation advises, and what the proxy marks for a
        # client that marks nothing); OpenAI caches every prefix itself.
        static = (1 if workload.tools else 0) + len(workload.system)
        marks = marks_of(static, len(blocks))
        for profile, cache in caches.items():
            cache.send(blocks, output_tokens=produced, breakpoints=marks if profile == "anthropic" else None)

    for user, call, result, answer in workload.turns:
        send([*kept, user], call)  # the model asks for the tool
        send([*kept, user, call, result], answer)  # and answers with its result
        kept = [*kept, user, call, result, answer]
        if reducer is not None:
            # The retained history as a session keeps it: reduced after the turn, never left
            # starting in the middle of one.
            kept = asyncio.run(reducer.reduce(kept))
    calls = None
    if isinstance(strategy, SummarizationStrategy) and isinstance(strategy.client, ScriptedChatClient):
        calls = strategy.client.calls
    steps = sum(1 for n, run in enumerate(runs) if run and (n == 0 or run != runs[n - 1]))
    return Replay({profile: cache.totals() for profile, cache in caches.items()}, calls, steps)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=200, help="turns of the tool session (default 200)")
    args = parser.parse_args(argv)
    failures: list[str] = []
    for workload in (tool_session(args.turns), big_prompt(args.turns // 2)):
        print(f"\n## {workload.name}\n")
        print("| policy | mode | sent | cost, openai | cost, anthropic | cached, openai | cached, anthropic |")
        print("|---|---|---:|---:|---:|---:|---:|")
        baseline = replay(workload, POLICIES["full history"], retained=False).totals
        summaries: list[str] = []
        for name, make in {**POLICIES, **EXACT}.items():
            for retained in (False, True) if name != "full history" else (False,):
                outcome = replay(workload, make, retained)
                totals = outcome.totals
                sent = totals["openai"].sent / baseline["openai"].sent
                costs = {p: totals[p].cost / baseline[p].cost for p in PROFILES}
                mode = "retained" if retained else "stateless"
                if outcome.summariser_calls is not None:
                    requests = 2 * len(workload.turns)
                    steps = f", {outcome.cut_steps} steps of its cut" if not retained else ""
                    calls = outcome.summariser_calls
                    summaries.append(f"{name} ({mode}): {calls} summariser calls{steps}, {requests} requests")
                    if not retained and outcome.summariser_calls != outcome.cut_steps:
                        failures.append(
                            f"{workload.name}: {name} (stateless) called its summariser {outcome.summariser_calls} "
                            f"times for {outcome.cut_steps} steps of its cut (a summary must be written once per step)"
                        )
                print(
                    f"| {name} | {mode} | {sent:.2f} | {costs['openai']:.2f} | {costs['anthropic']:.2f} | "
                    f"{totals['openai'].hit_rate:.0%} | {totals['anthropic'].hit_rate:.0%} |"
                )
                for profile, ratio in costs.items():
                    if ratio > 1.0 and name in POLICIES:
                        failures.append(
                            f"{workload.name}: {name} ({mode}) costs {ratio:.2f}x the full history ({profile})"
                        )
                if name == "truncation 20k->10k" and not workload.tools:
                    for profile, ratio in costs.items():
                        if ratio > 0.6 or sent > 0.5:
                            failures.append(
                                f"{workload.name}: truncation at trigger = 2 x target ({mode}, {profile}) costs "
                                f"{ratio:.2f} and sends {sent:.2f} of the full history (bounds: 0.6 and 0.5)"
                            )
        for line in summaries:
            print(f"\n{line}")
    print("\n## Where the Messages API's cache breakpoints go (anthropic profile, stateless)\n")
    print("Cost as a share of the full history with the proxy's breakpoints.\n")
    policies = ("full history", "serve's default (truncation 32k->16k)")
    for workload in (tool_session(args.turns), big_prompt(args.turns // 2)):
        print(f"| {workload.name}: placement | " + " | ".join(policies) + " |")
        print("|---|" + "---:|" * len(policies))
        base = replay(workload, POLICIES["full history"], retained=False).totals["anthropic"].cost
        placed: dict[str, list[float]] = {}
        for placement, marks_of in PLACEMENTS.items():
            placed[placement] = [
                replay(workload, POLICIES[name], False, marks_of).totals["anthropic"].cost / base for name in policies
            ]
            print(f"| {placement} | " + " | ".join(f"{cost:.2f}" for cost in placed[placement]) + " |")
        print()
        chosen = placed[next(iter(PLACEMENTS))]
        for placement, row in placed.items():
            for name, cost, ours in zip(policies, row, chosen, strict=True):
                if cost < ours - 1e-9:
                    failures.append(
                        f"{workload.name}: breakpoints at {placement!r} cost {cost:.2f} with {name}, "
                        f"less than the proxy's placement ({ours:.2f})"
                    )
    print("\nCosts are shares of sending the full history, with the cache counted (estimates, design.md#cost).")
    print("The exact policies (prefix_stable=False) are opt-outs, outside the bound.")
    if failures:
        print("\nOver the bounds:")
        for failure in failures:
            print(f"- {failure}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
