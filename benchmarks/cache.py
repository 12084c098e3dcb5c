"""What each context policy costs once the provider's prompt cache is counted (design.md#cost).

Replays conversations request by request, as an agent sends them (the request that asks for a tool
call, then the one carrying its result), through every built-in compaction policy, and prices each
request with :class:`contextledger.cost.PrefixCacheSimulator` under the ``openai`` (models before
GPT-5.6), ``gpt-5.6`` and ``anthropic`` profiles.  Each policy runs two ways:

- stateless: the whole history compacted afresh for every request, as ``contextledger serve`` does
  without a session and as a LangChain runnable does;
- retained: the history kept compacted between turns (session mode), each request the retained
  history plus the turn so far.

Reported per policy: tokens sent and cost as a share of sending the full history, and the share of
input read from the cache.  Costs are estimates of the providers' rules (see the cost module); the
Anthropic client marks a cache breakpoint after its tools and system prompt and one at the end of
each request; a GPT-5.6 request carries the proxy's ``prompt_cache_breakpoint`` at the end of its
tools and instructions, and the provider's own at its end.  Everything is deterministic, so one run
is the figure.  The bounds of design.md#prefix-stability are checked at the end: no default or
prefix-stable policy above the full history's cost under any profile (the exact opt-outs are
printed apart), and truncation at trigger = 2 x target at most 0.6 of its cost and 0.5 of its tokens
on the tool session.  The summarising policy's model is the built-in offline one, counted: applied
statelessly it must be called once per step of its cut (a summary of a given run is written once,
design.md#stable-summaries), and the calls and steps are printed.

Two tables choose where the proxy's breakpoints go, by cost: Anthropic's ``cache_control`` and
OpenAI's ``prompt_cache_breakpoint`` (the proxy's placement must be the cheapest priced).  The last
table prices the summariser's own requests in the conversation's cache: today's form (its prompt,
then a transcript: a prefix nobody cached) beside the form that rides the cache (the conversation
up to the cut, then one instruction); the riding form must read at least 0.85 of its input from the
cache in sessions (``openai`` and ``gpt-5.6`` profiles; under the second the conversation marks where
the summariser's next cut falls, ``SummarizationStrategy.next_cut``).  ``tests/test_cache_benchmark.py``
holds the same bounds.

    python benchmarks/cache.py                  # the two workloads, every profile
    python benchmarks/cache.py --turns 400      # a longer tool session
"""

from __future__ import annotations

import argparse
import asyncio
import json
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
from contextledger.cost import CallCost, CostTotals, PrefixCacheSimulator, request_blocks
from contextledger.cost._simulator import BlockMemo
from contextledger.history import InMemoryHistoryProvider
from contextledger.serve import DEFAULT_STRATEGY
from contextledger.tokenizers import CharacterEstimatorTokenizer

PROFILES = ("openai", "gpt-5.6", "anthropic")
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
    # The same, its summariser sent the conversation's own start up to the cut, then one instruction
    # (the tools are the workload's: replay() hands them over).
    "summarisation 20k->10k, riding the cache": lambda: SummarizationStrategy(
        ScriptedChatClient([OfflineModel(tokenizer=TOKENIZER)]),
        trigger=tokens_exceed(20_000),
        target=tokens_below(10_000),
        tokenizer=TOKENIZER,
        max_input_tokens=None,
        form="conversation",
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
    """What one policy cost, and for a summarising one, its model calls, the steps of its cut
    (the requests whose summary stands for other messages than the previous request's) and what
    its own requests cost, priced in the same cache as the conversation's (``summariser``)."""

    totals: dict[str, CostTotals]
    summariser_calls: int | None = None
    cut_steps: int = 0
    summariser: dict[str, CostTotals] | None = None


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


def openai_marks(static: int, count: int) -> list[int]:
    """What ``contextledger serve`` marks with ``prompt_cache_breakpoint`` on a request to a model
    that takes them: the end of the tools and instructions (the provider adds its own breakpoint at
    the end of the request)."""
    return [static] if static else []


OPENAI_PLACEMENTS: dict[str, Placement] = {
    "the proxy's: end of tools and instructions": openai_marks,
    "none (the provider's own breakpoint only)": lambda static, count: [],
    "end of tools and instructions, and the user or tool message before the newest": lambda static, count: sorted(
        {mark for mark in (static, count - 2) if mark > 0}
    ),
    "the user or tool message before the newest": lambda static, count: [count - 2] if count > 2 else [],
}


PLACEMENTS: dict[str, Placement] = {
    "the proxy's: end of tools and system, end of request": proxy_marks,
    "end of request only": lambda static, count: [count],
    "end of tools and system, and one message before the end": lambda static, count: sorted(
        {mark for mark in (static, count - 1) if mark}
    ),
    "end of tools and system only": lambda static, count: [static] if static else [],
    "none": lambda static, count: [],
}


def replay(
    workload: Workload,
    make: Policy,
    retained: bool,
    marks_of: Placement = proxy_marks,
    openai_marks_of: Placement = openai_marks,
) -> Replay:
    caches = {profile: PrefixCacheSimulator(profile) for profile in PROFILES}
    memo: BlockMemo = {}
    strategy = make()
    summariser = strategy.client if isinstance(strategy, SummarizationStrategy) else None
    if isinstance(strategy, SummarizationStrategy) and strategy.form == "conversation":
        strategy.tools = list(workload.tools) or None  # the conversation's own tools, as it declares them
    priced: dict[str, list[CallCost]] = {profile: [] for profile in PROFILES}

    def price_summariser() -> None:
        """The summariser's requests since the last look, priced in the conversation's cache: the
        breakpoints it asks its client for (``cache_breakpoints``, the riding form's last markable
        message) where the profile takes breakpoints, besides its end."""
        if not isinstance(summariser, ScriptedChatClient):
            return
        done = len(priced[PROFILES[0]])
        asked = zip(summariser.requests[done:], summariser.tools[done:], summariser.options[done:], strict=True)
        for request, tools, options in asked:
            blocks = request_blocks(request, tokenizer=TOKENIZER, tools=tools or None, memo=memo)
            offset = 1 if tools else 0
            named = [offset + position + 1 for position in options.get("cache_breakpoints", ())]
            marks = {"anthropic": sorted({*named, len(blocks)}), "gpt-5.6": named}
            for profile, cache in caches.items():
                priced[profile].append(cache.send(blocks, output_tokens=200, breakpoints=marks.get(profile)))

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
            price_summariser()  # its calls came before the request they compacted
        blocks = request_blocks(sent, tokenizer=TOKENIZER, tools=workload.tools, memo=memo)
        produced = TOKENIZER.count_message(output)
        # An Anthropic client marks the end of its tools and system prompt and the end of the
        # request (what the provider's documentation advises, and what the proxy marks for a
        # client that marks nothing); OpenAI caches every prefix itself.
        # The proxy marks the end of the instructions of a GPT-5.6 request (prompt_cache_breakpoint);
        # the provider adds its own breakpoint at the end.
        static = (1 if workload.tools else 0) + len(workload.system)
        marks = {"anthropic": marks_of(static, len(blocks)), "gpt-5.6": openai_marks_of(static, len(blocks))}
        if next_cut is not None:
            # An agent whose summariser rides the cache marks where its next cut falls, so the
            # summariser's request ends on an entry the provider keeps (see next_cut).
            at = (1 if workload.tools else 0) + next_cut + 1
            marks = {profile: sorted({*placed, at}) for profile, placed in marks.items()}
        for profile, cache in caches.items():
            cache.send(blocks, output_tokens=produced, breakpoints=marks.get(profile))

    def marked_cut() -> int | None:
        """The last message a breakpoint can mark at or before where the riding summariser's next
        cut of the retained history falls (sessions only: statelessly it summarises the raw history)."""
        if not (retained and isinstance(strategy, SummarizationStrategy) and strategy.form == "conversation"):
            return None
        at = strategy.next_cut(kept)
        while at is not None and at >= 0 and kept[at].role not in ("system", "user", "tool"):
            at -= 1
        return at if at is not None and at >= len(workload.system) else None

    next_cut = marked_cut()
    for user, call, result, answer in workload.turns:
        send([*kept, user], call)  # the model asks for the tool
        send([*kept, user, call, result], answer)  # and answers with its result
        kept = [*kept, user, call, result, answer]
        if reducer is not None:
            # The retained history as a session keeps it: reduced after the turn, never left
            # starting in the middle of one.
            kept = asyncio.run(reducer.reduce(kept))
            price_summariser()
            next_cut = marked_cut()
    calls = None
    if isinstance(summariser, ScriptedChatClient):
        calls = summariser.calls
    steps = sum(1 for n, run in enumerate(runs) if run and (n == 0 or run != runs[n - 1]))
    # The conversation's own requests (the summariser's are apart, in ``summariser``).
    own = {
        p: CostTotals.of(c for c in cache.calls if not any(c is x for x in priced[p])) for p, cache in caches.items()
    }
    summarised = {p: CostTotals.of(calls_made) for p, calls_made in priced.items()} if summariser else None
    return Replay(own, calls, steps, summarised)


def policy_rows(
    workload: Workload, entries: list[dict[str, Any]] | None = None
) -> tuple[list[str], list[str], list[str]]:
    """Every policy's row of the cost table, the summariser lines, and what is over the bounds:
    no default or prefix-stable policy above the full history's cost under any profile (the exact
    opt-outs are shown, not bound), truncation at trigger = 2 x target at most 0.6 of its cost and
    0.5 of its tokens on the tool session, and a stateless summariser called once per step.
    ``entries``, when given, receives each row as data (what ``--json`` writes)."""
    rows: list[str] = []
    summaries: list[str] = []
    failures: list[str] = []
    baseline = replay(workload, POLICIES["full history"], retained=False).totals
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
            if entries is not None:
                entries.append(
                    {
                        "policy": name,
                        "mode": mode,
                        "exact": name in EXACT,
                        "sent": sent,
                        "cost": costs,
                        "cached": {p: totals[p].hit_rate for p in PROFILES},
                    }
                )
            rows.append(
                f"| {name} | {mode} | {sent:.2f} | "
                + " | ".join(f"{costs[p]:.2f}" for p in PROFILES)
                + " | "
                + " | ".join(f"{totals[p].hit_rate:.0%}" for p in PROFILES)
                + " |"
            )
            for profile, ratio in costs.items():
                if ratio > 1.0 and name in POLICIES:
                    failures.append(f"{workload.name}: {name} ({mode}) costs {ratio:.2f}x the full history ({profile})")
            if name == "truncation 20k->10k" and not workload.tools:
                for profile, ratio in costs.items():
                    if ratio > 0.6 or sent > 0.5:
                        failures.append(
                            f"{workload.name}: truncation at trigger = 2 x target ({mode}, {profile}) costs "
                            f"{ratio:.2f} and sends {sent:.2f} of the full history (bounds: 0.6 and 0.5)"
                        )
    return rows, summaries, failures


def placement_rows(
    workload: Workload, profile: str, placements: dict[str, Placement]
) -> tuple[list[str], list[str], dict[str, list[float]]]:
    """Each placement's cost (a share of the full history with the proxy's placement, the first
    of ``placements``) under ``profile``, stateless, for the full history and serve's default; and
    where a placement costs less than the proxy's (a failure: the proxy's must be the cheapest)."""
    policies = ("full history", "serve's default (truncation 32k->16k)")

    def cost(name: str, marks_of: Placement) -> float:
        if profile == "anthropic":
            return replay(workload, POLICIES[name], False, marks_of=marks_of).totals[profile].cost
        return replay(workload, POLICIES[name], False, openai_marks_of=marks_of).totals[profile].cost

    base = cost("full history", next(iter(placements.values())))
    placed = {
        placement: [cost(name, marks_of) / base for name in policies] for placement, marks_of in placements.items()
    }
    rows = [f"| {workload.name}: placement | " + " | ".join(policies) + " |", "|---|" + "---:|" * len(policies)]
    rows += [f"| {placement} | " + " | ".join(f"{c:.2f}" for c in row) + " |" for placement, row in placed.items()]
    chosen = next(iter(placed.values()))
    failures = [
        f"{workload.name}: {profile} breakpoints at {placement!r} cost {c:.2f} with {name}, less than the proxy's "
        f"placement ({ours:.2f})"
        for placement, row in placed.items()
        for name, c, ours in zip(policies, row, chosen, strict=True)
        if c < ours - 1e-9
    ]
    return rows, failures, placed


SUMMARISERS = {
    "today's form (its prompt, then a transcript)": "summarisation 20k->10k",
    "riding the cache (the conversation to the cut, one instruction)": "summarisation 20k->10k, riding the cache",
}


def summariser_shares(workload: Workload) -> dict[tuple[str, str], dict[str, CostTotals]]:
    """The summariser's own requests, priced in the conversation's cache (warm: every summary is
    asked for after the conversation's requests before it), by form and mode."""
    shares: dict[tuple[str, str], dict[str, CostTotals]] = {}
    for form, policy in SUMMARISERS.items():
        for retained in (False, True):
            outcome = replay(workload, POLICIES[policy], retained)
            assert outcome.summariser is not None
            shares[form, "retained" if retained else "stateless"] = outcome.summariser
    return shares


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=200, help="turns of the tool session (default 200)")
    parser.add_argument("--json", dest="json_path", help="also write each policy's figures as JSON")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"turns": args.turns, "profiles": list(PROFILES), "workloads": []}
    failures: list[str] = []
    workloads_run = (tool_session(args.turns), big_prompt(args.turns // 2))
    for workload in workloads_run:
        print(f"\n## {workload.name}\n")
        print(
            "| policy | mode | sent | "
            + " | ".join(f"cost, {p}" for p in PROFILES)
            + " | "
            + " | ".join(f"cached, {p}" for p in PROFILES)
            + " |"
        )
        print("|---|---|---:|" + "---:|" * (2 * len(PROFILES)))
        entries: list[dict[str, Any]] = []
        rows, summaries, over = policy_rows(workload, entries)
        report["workloads"].append({"name": workload.name, "policies": entries})
        print("\n".join(rows))
        for line in summaries:
            print(f"\n{line}")
        failures += over
    print("\n## Where the Messages API's cache breakpoints go (anthropic profile, stateless)\n")
    print("Cost as a share of the full history with the proxy's breakpoints.\n")
    for workload in workloads_run:
        rows, over, _ = placement_rows(workload, "anthropic", PLACEMENTS)
        print("\n".join(rows) + "\n")
        failures += over
    print("\n## Where OpenAI's prompt_cache_breakpoint marks go (gpt-5.6 profile, stateless)\n")
    print("Cost as a share of the full history with the proxy's mark; the provider adds its own at the end.\n")
    for workload in workloads_run:
        rows, over, _ = placement_rows(workload, "gpt-5.6", OPENAI_PLACEMENTS)
        print("\n".join(rows) + "\n")
        failures += over
    print("\n## The summariser's input read from the cache (summarisation 20k->10k)\n")
    print("Its requests priced in the conversation's own cache, after the conversation's requests (warm).\n")
    print("| workload | form | mode | calls | input | " + " | ".join(f"cached, {p}" for p in PROFILES) + " |")
    print("|---|---|---|---:|---:|" + "---:|" * len(PROFILES))
    for workload in workloads_run:
        for (form, mode), totals in summariser_shares(workload).items():
            first = totals[PROFILES[0]]
            print(
                f"| {workload.name} | {form} | {mode} | {first.calls} | {first.sent} | "
                + " | ".join(f"{totals[p].hit_rate:.2f}" for p in PROFILES)
                + " |"
            )
            riding = form.startswith("riding")
            for profile in ("openai", "gpt-5.6"):
                if riding and mode == "retained" and totals[profile].hit_rate < 0.85:
                    share = totals[profile].hit_rate
                    failures.append(f"{workload.name}: the riding summariser read {share:.2f} under {profile} (< 0.85)")
            if not riding and any(totals[p].hit_rate > 0 for p in PROFILES):
                failures.append(f"{workload.name}: today's summariser read from a cache no request wrote")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report, indent=2), encoding="utf-8")
    print("\nCosts are shares of sending the full history, with the cache counted (estimates, design.md#cost).")
    print("The exact policies (prefix_stable=False) are opt-outs, outside the bound.")
    if failures:
        print("\nOver the bounds:")
        for failure in failures:
            print(f"- {failure}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
