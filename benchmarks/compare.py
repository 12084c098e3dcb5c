"""Cold compaction of an earlier revision against this checkout, run back to back.

    python benchmarks/compare.py adc1957                # every strategy, 10,001 and 100,001 messages
    python benchmarks/compare.py adc1957 --rounds 5 --sizes 10001

A change to the engine must not make it slower, and one run of each side on a shared machine
proves nothing either way.  This exports the earlier revision's ``src`` with ``git archive``,
then runs this checkout's ``benchmarks/run.py`` (the same workloads and timing code for both)
against each side in turn, alternating, for several rounds.  It prints, per strategy and size,
the median over rounds of each side's median, and the ratio new/old; ``--check`` exits 1 if any
ratio is above ``--tolerance`` (default 1.10).
"""

from __future__ import annotations

import argparse
import json
import os
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", help="the earlier revision (a commit, tag or branch)")
    parser.add_argument("--sizes", default="10001,100001")
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs of each side")
    parser.add_argument("--repeats", type=int, default=5, help="cold runs per strategy within one run")
    parser.add_argument("--tolerance", type=float, default=1.10, help="largest accepted new/old ratio")
    parser.add_argument("--check", action="store_true", help="exit 1 if a ratio is above the tolerance")
    parser.add_argument("--cpu", action="store_true", help="time in process CPU time (steadier on a busy machine)")
    args = parser.parse_args(argv)

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
