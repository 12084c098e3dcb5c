"""Cold compaction of an earlier revision against this checkout, run back to back.

    python benchmarks/compare.py adc1957                # every strategy, 10,001 and 100,001 messages
    python benchmarks/compare.py adc1957 --rounds 5 --sizes 10001

A change to the engine must not make it slower, and one run of each side on a shared machine
proves nothing either way.  This exports the earlier revision's ``src`` with ``git archive``,
then runs this checkout's ``benchmarks/run.py`` (the same workloads and timing code for both)
against each side in turn, alternating, for several rounds.  It prints, per strategy and size,
the median over rounds of each side's median, and the ratio new/old; ``--check`` exits 1 if any
ratio is above ``--tolerance`` (default 1.10).

    python benchmarks/compare.py adc1957 --instructions   # needs valgrind; slow, but exact

On a busy machine even CPU time moves by a third between runs.  ``--instructions`` counts the
instructions one cold compaction of 10,001 messages executes instead (valgrind's callgrind, with
a fixed hash seed): the same code gives the same count to a thousandth whatever else runs, so a
change that does more work shows, and one that does not cannot look slower.  It does not see
cache misses or branch mispredictions, so a large ratio still wants a timed run to confirm it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def export(revision: str, into: Path) -> Path:
    """The revision's ``src`` folder, unpacked under ``into``."""
    archive = into / "old.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", str(ROOT), "archive", revision, "src"], stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "old", filter="data")
    return into / "old" / "src"


def run_once(src: Path, sizes: str, repeats: int, out: Path, *, cpu: bool) -> dict[tuple[str, int], float]:
    """One run of ``run.py`` against ``src``: {(strategy, size): median ms}."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    command = [sys.executable, str(HERE / "run.py"), "--sizes", sizes, "--repeats", str(repeats)]
    if cpu:
        command.append("--cpu")
    subprocess.run([*command, "--turns", "200", "--json", str(out)], env=env, check=True, capture_output=True)
    report = json.loads(out.read_text())
    figures = {(entry["strategy"], entry["messages"]): entry["ours_ms"] for entry in report["cold"]}
    for entry in report.get("floor", []):
        figures[("(index + projection only)", entry["messages"])] = entry["index_ms"]
    for entry in report.get("shapes", []):  # (a revision's run.py before these rows has none)
        figures[(f"(index + projection, {entry['shape']})", entry["messages"])] = entry["index_ms"]
    return figures


# One process per (side, strategy): converts ``count`` copies of the workload, then compacts each
# once (``build`` only converts); a strategy's count minus ``build``'s, over ``count``, is one
# compaction, conversion and start-up left out.
_DRIVER = """
import asyncio, gc, sys
sys.path.insert(0, {here!r})
import run, workloads
from contextledger import from_openai
name, count = sys.argv[1], int(sys.argv[2])
dicts = workloads.messages({size})
batches = [from_openai(dicts) for _ in range(count)]
loop = asyncio.new_event_loop()
gc.collect()
gc.disable()
for messages in batches if name != "build" else ():
    strategy = run.STRATEGIES[name]() if name != "none" else None
    loop.run_until_complete(run._compact_cold(messages, strategy))
"""


def instructions(src: Path, name: str, count: int, size: int) -> int:
    """Instructions executed by the driver for ``name`` and ``count`` against ``src``."""
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONHASHSEED": "0"}
    driver = _DRIVER.format(here=str(HERE), size=size)
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", driver]
    done = subprocess.run([*command, name, str(count)], env=env, check=True, capture_output=True, text=True)
    for line in done.stderr.splitlines():
        if "I   refs:" in line or "I refs:" in line:
            return int(line.split(":")[1].replace(",", "").strip())
    raise RuntimeError(f"valgrind reported no instruction count:\n{done.stderr[-2000:]}")


def compare_instructions(old: str, size: int, count: int, tolerance: float, check: bool) -> int:
    if shutil.which("valgrind") is None:
        print("--instructions needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(HERE))
    import run  # noqa: PLC0415  (this folder's module, for the strategy names)

    names = ["none", *run.STRATEGIES]
    with tempfile.TemporaryDirectory() as folder:
        sides = {"old": export(old, Path(folder)), "new": ROOT / "src"}
        per: dict[str, dict[str, float]] = {"old": {}, "new": {}}
        for side, src in sides.items():
            base = instructions(src, "build", count, size)
            for name in names:
                per[side][name] = (instructions(src, name, count, size) - base) / count
                print(f"{side} {name}: {per[side][name]:,.0f} instructions", file=sys.stderr)
    print(f"Cold compaction of {size:,} messages, {old} (old) against this checkout (new): instructions per run")
    print(f"| {'strategy':<22} | {'old':>14} | {'new':>14} | new/old |")
    print(f"|{'-' * 24}|{'-' * 16}|{'-' * 16}|---------|")
    worst = 0.0
    for name in names:
        ratio = per["new"][name] / per["old"][name]
        worst = max(worst, ratio)
        print(f"| {name:<22} | {per['old'][name]:14,.0f} | {per['new'][name]:14,.0f} | {ratio:7.3f} |")
    verdict = "within" if worst <= tolerance else "OVER"
    print(f"\nWorst new/old ratio {worst:.3f}: {verdict} the {tolerance:.2f} tolerance")
    return 1 if check and worst > tolerance else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", help="the earlier revision (a commit, tag or branch)")
    parser.add_argument("--sizes", default="10001,100001")
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs of each side")
    parser.add_argument("--repeats", type=int, default=5, help="cold runs per strategy within one run")
    parser.add_argument("--tolerance", type=float, default=1.10, help="largest accepted new/old ratio")
    parser.add_argument("--check", action="store_true", help="exit 1 if a ratio is above the tolerance")
    parser.add_argument("--cpu", action="store_true", help="time in process CPU time (steadier on a busy machine)")
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions under valgrind instead of timing (see above)"
    )
    args = parser.parse_args(argv)
    if args.instructions:
        size = int(args.sizes.split(",")[0]) if args.sizes != "10001,100001" else 10001
        return compare_instructions(args.old, size, 4, args.tolerance, args.check)

    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        sides = {"old": export(args.old, scratch), "new": ROOT / "src"}
        runs: dict[str, list[dict[tuple[str, int], float]]] = {"old": [], "new": []}
        for round_number in range(args.rounds):
            # Alternate which side goes first, so a slow spell of the machine falls on both.
            order = ("old", "new") if round_number % 2 == 0 else ("new", "old")
            for side in order:
                runs[side].append(
                    run_once(sides[side], args.sizes, args.repeats, scratch / f"{side}.json", cpu=args.cpu)
                )
                print(f"round {round_number + 1}/{args.rounds}: {side} done", file=sys.stderr)

    keys = sorted(runs["new"][0], key=lambda key: (key[1], key[0]))
    clock = "CPU" if args.cpu else "wall-clock"
    print(f"Cold compaction, {args.old} (old) against this checkout (new): {clock} ms, median of {args.rounds} runs")
    print(f"| {'strategy':<36} | {'messages':>8} | {'old':>8} | {'new':>8} | new/old |")
    print(f"|{'-' * 38}|{'-' * 10}|{'-' * 10}|{'-' * 10}|---------|")
    worst = 0.0
    for key in keys:
        old = statistics.median(run[key] for run in runs["old"] if key in run) if key in runs["old"][0] else None
        new = statistics.median(run[key] for run in runs["new"])
        if old is None:
            print(f"| {key[0]:<36} | {key[1]:>8} | {'-':>8} | {new:8.1f} |       - |")
            continue
        ratio = new / old
        worst = max(worst, ratio)
        print(f"| {key[0]:<36} | {key[1]:>8} | {old:8.1f} | {new:8.1f} | {ratio:7.2f} |")
    verdict = "within" if worst <= args.tolerance else "OVER"
    print(f"\nWorst new/old ratio {worst:.2f}: {verdict} the {args.tolerance:.2f} tolerance")
    return 1 if args.check and worst > args.tolerance else 0


if __name__ == "__main__":
    sys.exit(main())
