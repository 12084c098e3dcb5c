"""Compaction benchmarks: cold runs on long histories, a long session, and a side-by-side mode.

    python benchmarks/run.py                 # ours: 10,001 and 100,001 messages, 2,000-turn session
    python benchmarks/run.py --compare-maf   # also Microsoft Agent Framework, same workloads, same process
    python benchmarks/run.py --quick         # small sizes, for a smoke run

Every figure is a median of several runs.  A *cold* run starts from freshly built
messages, so indexing and token counting are inside the timed region.  The
baseline in the same process is either MAF (``--compare-maf``, needs the
``bench`` extra) or, without it, the cost of indexing and projecting with no
strategy at all.  The budgets the project holds itself to are checked and
printed; ``--check`` makes a missed budget exit non-zero.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from operator import truediv
from pathlib import Path
from types import MappingProxyType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads
from contextledger import Message, from_openai, validate
from contextledger.compaction import (
    CharacterEstimatorTokenizer,
    CompactionStrategy,
    MessageIndex,
    PipelineStrategy,
    SelectiveToolCallCompactionStrategy,
    SlidingWindowStrategy,
    TokenBudgetComposedStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
    never,
    tokens_exceed,
    turns_exceed,
)
from contextledger.messages import SUMMARY_PROPERTY
from contextledger.messages._message import SUMMARY_SOURCE_PROPERTY, assistant_text_message

TOKENIZER = CharacterEstimatorTokenizer()
_SUMMARY_PROPERTIES = MappingProxyType({SUMMARY_PROPERTY: True, SUMMARY_SOURCE_PROPERTY: "tool_results"})
# MAF's context-window strategy for a 128k model with 16k output, spelled with our parts.
_INPUT_BUDGET = 128_000 - 16_384
_EVICT_AT, _TRUNCATE_AT = int(_INPUT_BUDGET * 0.5), int(_INPUT_BUDGET * 0.8)

STRATEGIES: dict[str, Callable[[], CompactionStrategy]] = {
    "truncation_tokens": lambda: TruncationStrategy(max_n=32_000, compact_to=16_000, tokenizer=TOKENIZER),
    "truncation_messages": lambda: TruncationStrategy(max_n=1_000, compact_to=500),
    "sliding_window": lambda: SlidingWindowStrategy(keep_last_groups=20),
    "sliding_window_turns": lambda: SlidingWindowStrategy(trigger=turns_exceed(4)),
    "tool_result_collapse": lambda: ToolResultCompactionStrategy(keep_last_tool_call_groups=1),
    "selective_tool_call": lambda: SelectiveToolCallCompactionStrategy(keep_last_tool_call_groups=1),
    "token_budget": lambda: TokenBudgetComposedStrategy(
        token_budget=16_000,
        tokenizer=TOKENIZER,
        strategies=[
            ToolResultCompactionStrategy(keep_last_tool_call_groups=1),
            SlidingWindowStrategy(keep_last_groups=20),
        ],
    ),
    "context_window": lambda: PipelineStrategy(
        ToolResultCompactionStrategy(trigger=tokens_exceed(_EVICT_AT), target=never(), keep_last_tool_call_groups=4),
        TruncationStrategy(max_n=_TRUNCATE_AT, compact_to=_EVICT_AT, tokenizer=TOKENIZER),
    ),
}
SESSION_STRATEGIES = ("sliding_window", "sliding_window_turns", "truncation_tokens", "token_budget")
# MAF regroups and re-compacts the whole stored history on every call; past the sliding window its
# per-call cost at 2,000 turns runs to many seconds, so the side-by-side session covers the window only.
MAF_SESSION_STRATEGIES = ("sliding_window",)

COLD_BUDGET_MS = {10_001: 25.0, 100_001: 250.0}
# Cold runs at these sizes should cost at most this many times the floor (see time_floor).
FLOOR_RATIO_BUDGET = {10_001: 2.0}
SESSION_BUDGET_MS = 1.0

# What a sample measures: wall-clock time, or with --cpu this process's CPU time (steadier on a
# machine other work shares, since time spent waiting for the CPU is not counted).
Clock = Callable[[], float]


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


# A reference row beside the floor: the least any collapse of this workload can cost (see least_collapse).
LEAST_COLLAPSE = "(least a collapse can cost)"


def least_collapse(messages: list[Message]) -> list[Message]:
    """What no collapse of the workload's tool results can do without, as a second reference.

    Index the messages, as every strategy must (the index is what a later call updates and
    compacts again); write one bare summary per tool call, its name and the first 79 characters
    of its result, in place of the call and its result; count the summaries' tokens (what the
    next budget check reads).  Everything else a real collapse does is left out: normalising
    the preview's whitespace, keeping the newest tool group, the group table's rows and the
    metrics, the event.  Read against the floor, it shows how much of the collapsing
    strategies' figures any collapse pays.  It relies on the workload's fixed shape: a system
    message, then user, call, result, answer."""
    MessageIndex(messages, tokenizer=TOKENIZER)
    out = messages[:]
    texts = []
    for position in range(2, len(messages) - 2, 4):
        call, result = messages[position].contents[0], messages[position + 1].contents[0]
        texts.append(f"[Tool results: {call.name}: {result.result[:79]}…]")  # type: ignore[union-attr]
    TOKENIZER.count_plain_texts(list(map(len, texts)))
    out[2:-2:4] = [assistant_text_message(text, _SUMMARY_PROPERTIES) for text in texts]
    del out[3::4]
    return out


async def _compact_cold(messages: list[Message], strategy: CompactionStrategy | None) -> list[Message]:
    index = MessageIndex(messages, tokenizer=TOKENIZER)
    if strategy is not None:
        await strategy.compact(index)
    return index.projection()


def time_cold(
    name: str | None,
    dicts: list[dict[str, Any]],
    repeats: int,
    clock: Clock = time.perf_counter,
    floors: list[float] | None = None,
) -> tuple[list[float], int]:
    """Seconds per cold run; fresh messages every run (an exact tokenizer memoises its counts on
    messages).  With ``floors``, a floor pass (see :func:`time_floor`) is timed on messages of its
    own right before each run and appended there, so each run can be read against a floor taken
    under the same conditions: on a shared machine the speed drifts over a benchmark's minutes,
    and a floor measured once at the start would make every later ratio drift with it."""
    samples: list[float] = []
    size = 0
    # One event loop for all runs, made outside the timed region: an application compacts inside
    # the loop it already runs, and making and closing a loop (what asyncio.run does) costs half
    # a millisecond that is asyncio's, not the engine's.
    loop = asyncio.new_event_loop()
    for _ in range(repeats):
        if floors is not None:
            floors.extend(time_floor(dicts, 1, clock))
        messages = from_openai(dicts)
        strategy = STRATEGIES[name]() if name is not None and name != LEAST_COLLAPSE else None
        gc.collect()
        start = clock()
        if name == LEAST_COLLAPSE:
            projection = least_collapse(messages)
        else:
            projection = loop.run_until_complete(_compact_cold(messages, strategy))
        samples.append(clock() - start)
        size = len(projection)
        problems = validate(projection)
        if problems:
            raise AssertionError(f"{name}: projection is not API-valid: {problems[0]}")
        # Nothing of this run may still be alive while the next one is built and timed: a
        # leftover projection keeps half of the last history in memory, and every later run
        # then measures a fuller, more fragmented heap than a single call ever sees.
        del messages, strategy, projection
    loop.close()
    return samples, size


def read_every_text(messages: list[Message]) -> int:
    """The floor: one plain Python pass that reads each message's text (``Message.text``, which
    for a tool message is its result), and does nothing else with it."""
    characters = 0
    for message in messages:
        characters += len(message.text)
    return characters


def time_floor(dicts: list[dict[str, Any]], repeats: int, clock: Clock = time.perf_counter) -> list[float]:
    """Seconds per floor pass over freshly built messages (built outside the timed region, as the
    cold runs' are), so a cold compaction can be read as a multiple of merely reading the input."""
    samples: list[float] = []
    for _ in range(repeats):
        messages = from_openai(dicts)
        gc.collect()
        start = clock()
        read_every_text(messages)
        samples.append(clock() - start)
        del messages
    return samples


def time_session(name: str, turns: int, clock: Clock = time.perf_counter) -> list[float]:
    """Per-turn seconds of a session: append one turn, compact the request view, project."""
    rng = random.Random(7)
    system = from_openai([{"role": "system", "content": "You are a helpful shopping assistant."}])
    strategy = STRATEGIES[name]()
    index = MessageIndex(system, tokenizer=TOKENIZER)
    samples: list[float] = []

    async def run() -> None:
        for number in range(1, turns + 1):
            new = from_openai(workloads.turn(number, rng))
            start = clock()
            index.append(new)
            await strategy.compact(index)
            index.projection()
            samples.append(clock() - start)

    gc.collect()
    asyncio.run(run())
    return samples


def _row(cells: list[str], widths: list[int]) -> str:
    return "| " + " | ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))) + " |"


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [_row(header, widths), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines.extend(_row(r, widths) for r in rows)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10001,100001", help="message counts for cold runs")
    parser.add_argument("--repeats", type=int, default=7, help="cold runs per strategy and size")
    parser.add_argument("--turns", type=int, default=2000, help="turns in the session benchmark")
    parser.add_argument("--compare-maf", action="store_true", help="run the same workloads through MAF")
    parser.add_argument("--maf-sizes", default="10001", help="message counts for MAF cold runs (it is slow)")
    parser.add_argument("--maf-repeats", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    parser.add_argument("--check", action="store_true", help="exit 1 if a budget is missed")
    parser.add_argument("--json", dest="json_path", help="also write the figures as JSON")
    parser.add_argument("--cpu", action="store_true", help="time in process CPU time, not wall-clock time")
    args = parser.parse_args(argv)
    clock: Clock = time.process_time if args.cpu else time.perf_counter
    if args.quick:
        args.sizes, args.repeats, args.turns, args.maf_sizes = "2001", 3, 200, "1001"

    maf: Any = None
    if args.compare_maf:
        import maf_side  # noqa: PLC0415

        if not maf_side.available():
            print("--compare-maf needs the bench extra: pip install 'contextledger[bench]'", file=sys.stderr)
            return 2
        maf = maf_side
        maf.CLOCK = clock  # both sides on the same clock

    report: dict[str, Any] = {"cold": [], "session": []}
    missed: list[str] = []
    sizes = [int(s) for s in args.sizes.split(",")]
    maf_sizes = {int(s) for s in args.maf_sizes.split(",")}
    for size in sizes:
        dicts = workloads.messages(size)
        # Every cold run is read against the floor pass timed right before it (see time_cold):
        # "/floor" is the median of those paired ratios.
        floors: list[float] = []
        baseline, _ = time_cold(None, dicts, args.repeats, clock, floors)
        base_ms = _median_ms(baseline)
        base_ratio = statistics.median(map(truediv, baseline, floors))
        rows = [["(index + projection only)", f"{base_ms:.1f}", f"{base_ratio:.1f}x", "", "", "", str(size)]]
        least_floors: list[float] = []
        least, least_kept = time_cold(LEAST_COLLAPSE, dicts, args.repeats, clock, least_floors)
        floors += least_floors
        least_ratio = statistics.median(map(truediv, least, least_floors))
        rows.append([LEAST_COLLAPSE, f"{_median_ms(least):.1f}", f"{least_ratio:.1f}x", "", "", "", str(least_kept)])
        floor_budget = FLOOR_RATIO_BUDGET.get(size)
        for name in STRATEGIES:
            paired: list[float] = []
            samples, kept = time_cold(name, dicts, args.repeats, clock, paired)
            floors += paired
            ours = _median_ms(samples)
            floor_ratio = statistics.median(map(truediv, samples, paired))
            entry: dict[str, Any] = {
                "strategy": name,
                "messages": size,
                "ours_ms": ours,
                "floor_ratio": floor_ratio,
                "kept": kept,
            }
            theirs_cell = ratio_cell = ""
            if maf is not None and size in maf_sizes and name in maf.STRATEGY_NAMES:
                theirs = _median_ms(maf.time_cold(name, dicts, args.maf_repeats))
                entry["maf_ms"] = theirs
                entry["ratio"] = theirs / ours
                theirs_cell, ratio_cell = f"{theirs:.1f}", f"{theirs / ours:.0f}x"
            budget = COLD_BUDGET_MS.get(size)
            verdict = ""
            if budget is not None:
                verdict = "ok" if ours <= budget else f"over {budget:.0f} ms"
                if ours > budget:
                    missed.append(f"{name} at {size}: {ours:.1f} ms > {budget:.0f} ms")
            if floor_budget is not None and floor_ratio > floor_budget:
                verdict = (verdict + "; " if verdict else "") + f"over {floor_budget:.0f}x floor"
                missed.append(f"{name} at {size}: {floor_ratio:.2f}x the floor > {floor_budget:.0f}x")
            rows.append([name, f"{ours:.1f}", f"{floor_ratio:.1f}x", theirs_cell, ratio_cell, verdict, str(kept)])
            report["cold"].append(entry)
            print(f"  {size:>7} {name:<22} {ours:8.1f} ms {theirs_cell:>10} {ratio_cell:>7}", file=sys.stderr)
        floor_ms = _median_ms(floors)  # every floor pass of the size
        rows.insert(0, ["(floor: read every message's text)", f"{floor_ms:.1f}", "1.0x", "", "", "", ""])
        report.setdefault("floor", []).append(
            {
                "messages": size,
                "floor_ms": floor_ms,
                "index_ms": base_ms,
                "index_floor_ratio": base_ratio,
                "least_collapse_ms": _median_ms(least),
                "least_collapse_floor_ratio": least_ratio,
            }
        )
        print(f"\nCold compaction, {size:,} messages (median of {args.repeats}; MAF: {args.maf_repeats} run(s))")
        print(_table(["strategy", "ours ms", "/floor", "MAF ms", "MAF/ours", "budget", "messages kept"], rows))

    # The same conversation in the shapes other agents give their assistant messages, indexed and
    # projected cold: what a history of reasoning models or parallel tool calls costs to take in.
    rows = []
    for shape in workloads.SHAPES:
        shape_floors: list[float] = []
        samples, kept = time_cold(None, workloads.shaped(sizes[0], shape), args.repeats, clock, shape_floors)
        ratio = statistics.median(map(truediv, samples, shape_floors))
        rows.append([shape, f"{_median_ms(samples):.1f}", f"{ratio:.1f}x", str(kept)])
        report.setdefault("shapes", []).append(
            {"shape": shape, "messages": kept, "index_ms": _median_ms(samples), "index_floor_ratio": ratio}
        )
    print(f"\nIndex + projection only, {sizes[0]:,} messages in other shapes (median of {args.repeats})")
    print(_table(["shape", "ours ms", "/floor", "messages"], rows))

    rows = []
    for name in SESSION_STRATEGIES:
        samples = time_session(name, args.turns, clock)
        early = samples[99:199] if args.turns >= 200 else samples[: len(samples) // 2]
        late = samples[-100:]
        early_ms, late_ms = _median_ms(early), _median_ms(late)
        entry = {
            "strategy": name,
            "turns": args.turns,
            "early_ms": early_ms,
            "late_ms": late_ms,
            "total_s": sum(samples),
        }
        maf_cells = ["", ""]
        if maf is not None and name in MAF_SESSION_STRATEGIES:
            theirs = maf.time_session(args.turns, name)
            t_early = theirs[99:199] if args.turns >= 200 else theirs[: len(theirs) // 2]
            entry["maf_early_ms"], entry["maf_late_ms"] = _median_ms(t_early), _median_ms(theirs[-100:])
            entry["maf_total_s"] = sum(theirs)
            maf_cells = [f"{_median_ms(t_early):.3f}", f"{_median_ms(theirs[-100:]):.3f}"]
        ok = late_ms <= SESSION_BUDGET_MS and late_ms <= max(2 * early_ms, early_ms + 0.1)
        if not ok:
            missed.append(f"session {name}: turns 100-199 {early_ms:.3f} ms, last 100 {late_ms:.3f} ms")
        rows.append(
            [
                name,
                f"{early_ms:.3f}",
                f"{late_ms:.3f}",
                f"{late_ms / early_ms:.2f}",
                *maf_cells,
                "ok" if ok else "missed",
            ]
        )
        report["session"].append(entry)
    print(f"\nSession of {args.turns:,} turns: append one turn, compact the request view, project (median ms per turn)")
    print(
        _table(["strategy", "turns 100-199", "last 100", "last/early", "MAF 100-199", "MAF last 100", "budget"], rows)
    )

    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report, indent=2))
    if missed:
        print("\nBudgets missed:\n  " + "\n  ".join(missed))
        return 1 if args.check else 0
    checked = any(size in COLD_BUDGET_MS for size in sizes)
    print("\nEvery budget met." if checked else "\nSession budgets met (no cold budget applies at these sizes).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
