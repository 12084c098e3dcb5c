"""``contextledger lab``: the drift lab from the command line, with its terminal table and files.

The lab and ``rich`` are imported only when the command runs, so the other commands (and
``import contextledger``) never load them.  ``-`` as a timeline reads it from standard input;
``--json -`` or ``--html -`` prints that report, and the terminal table then goes to standard
error so the two never mix.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from contextledger.cli import INTERRUPTED
from contextledger.cli._common import STANDARD_STREAM, TOKENIZERS, UsageError, check_output, read_text, write_text
from contextledger.exceptions import ConfigurationError, LabError, TimelineError

if TYPE_CHECKING:
    from contextledger.lab import Timeline

__all__ = ["register"]

_POLICIES = (  # the shipped ones
    "full-history, last-3-turns, summary, bounded-facts, request-view, reduced-history, provider-compaction, "
    "combined, collapse-recall"
)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    lab = commands.add_parser(
        "lab",
        help="compare context policies on fixed timelines (the drift lab)",
        description=(
            "Replay timelines under each context policy and report what was sent, what it cost and which facts "
            "the context still held. Without TIMELINE, every shipped timeline runs. Runs offline by default."
        ),
    )
    lab.add_argument(
        "timelines",
        nargs="*",
        metavar="TIMELINE",
        help="timeline JSON files, '-' for standard input (default: the shipped ones)",
    )
    lab.add_argument("--model", default="offline", help="offline (default), local, or openai:MODEL")
    lab.add_argument(
        "--policies",
        action="append",
        metavar="NAME[,NAME...]",
        help=f"policies to run, in this order, comma-separated or repeated (default: all): {_POLICIES}",
    )
    lab.add_argument("--tokenizer", default="estimate", choices=TOKENIZERS)
    lab.add_argument("--html", metavar="FILE", help="write the self-contained HTML report here ('-' for stdout)")
    lab.add_argument("--json", metavar="FILE", help="write the full measurements as JSON here ('-' for stdout)")
    lab.add_argument(
        "--replicates",
        type=int,
        default=1,
        metavar="N",
        help="with a live model, ask each probe question N times (answers vary)",
    )
    lab.add_argument(
        "--writer",
        default="model",
        choices=["model", "rules"],
        help="how bounded facts are extracted: a structured-output call to the model (default) or parsing rules",
    )
    lab.add_argument(
        "--price-profile",
        default="openai",
        choices=["openai", "gpt-5.6", "anthropic", "none"],
        help="the provider terms each call is priced under, its prompt cache counted (default openai)",
    )
    lab.add_argument(
        "--kit",
        action="store_true",
        help="also run compaction-conformance-kit's checks against each policy (needs the kit extra)",
    )
    lab.set_defaults(run=run)


def _policy_names(given: list[str] | None) -> tuple[str, ...]:
    names = tuple(name.strip() for item in given or () for name in item.split(",") if name.strip())
    for name in names:
        if name.endswith(".json") or Path(name).suffix:
            raise LabError(
                f"--policies got {name!r}, which looks like a timeline file, not a policy name; "
                "put timeline files before --policies or separate policy names with commas"
            )
    return names


def _timelines(paths: list[str]) -> list[Timeline]:
    """Every timeline named, validated before anything runs: a file, ``-`` (standard input), or
    the name of a shipped timeline (``correction``), for a user who has no copy of it."""
    from contextledger.lab import load_timeline, load_timelines, parse_timeline, unique_timelines  # noqa: PLC0415

    if not paths:
        return load_timelines()
    if paths.count(STANDARD_STREAM) > 1:
        raise UsageError("give '-' (standard input) as a timeline at most once")
    timelines = []
    for path in paths:
        if path != STANDARD_STREAM:
            file, label = _timeline_file(path)
            timelines.append(load_timeline(file, source=label))
            continue
        try:
            data = json.loads(read_text(STANDARD_STREAM, what="timeline"))
        except json.JSONDecodeError as error:
            raise TimelineError(f"is not JSON: {error.msg} at line {error.lineno}", path="<stdin>") from None
        timelines.append(parse_timeline(data, source="<stdin>"))
    return unique_timelines(timelines)


def _timeline_file(given: str) -> tuple[Path, str]:
    """The file a timeline argument names and how reports label it: a path that exists wins over
    a shipped timeline of the same name."""
    from contextledger.lab import shipped_timeline_paths  # noqa: PLC0415

    if Path(given).exists():
        return Path(given), given
    shipped = {Path(label).stem.removeprefix("shipped:"): (path, label) for label, path in shipped_timeline_paths()}
    name = given.removesuffix(".json")
    if name in shipped:
        path, label = shipped[name]
        return path, label
    raise UsageError(
        f"no timeline {given!r}: no such file, and no shipped timeline has that name; give a timeline JSON file "
        f"or a shipped name: {', '.join(shipped)}"
    )


def run(args: argparse.Namespace) -> int:
    from rich.console import Console  # noqa: PLC0415

    from contextledger.clients import resolve_client  # noqa: PLC0415
    from contextledger.lab import LabSettings, render_html, run_kit, run_lab_sync  # noqa: PLC0415
    from contextledger.lab.terminal import print_report, progress_bar  # noqa: PLC0415

    if args.replicates < 1:
        raise ConfigurationError(f"--replicates must be 1 or more, got {args.replicates}")
    if args.json == STANDARD_STREAM and args.html == STANDARD_STREAM:
        raise UsageError("only one of --json and --html can be '-' (standard output)")
    for path in (args.json, args.html):
        if path:
            check_output(path)
    names = _policy_names(args.policies)
    timelines = _timelines(args.timelines)  # every file is validated before anything runs
    live = args.model.strip() != "offline"
    settings = LabSettings(
        policies=names,
        tokenizer=args.tokenizer,
        writer=args.writer,
        replicates=args.replicates,
        ask_probes=live,
        model_label=args.model.strip(),
        price_profile=args.price_profile,
    ).checked()
    resolve_client(args.model)  # a misconfigured model fails here, before the first turn
    if args.kit:
        from contextledger._extras import require_extra  # noqa: PLC0415

        require_extra("compaction_kit", extra="kit", feature="contextledger lab --kit")  # before any turn runs
    if not live and args.replicates > 1:
        print("note: --replicates applies to probe questions, which are asked only of a live model", file=sys.stderr)
    # A report on stdout leaves the table to stderr; a file or a pipe gets a table wide enough to
    # read, not the 80 columns rich assumes.
    table_on_stderr = STANDARD_STREAM in (args.json, args.html)
    stream = sys.stderr if table_on_stderr else sys.stdout
    console = Console(file=stream, highlight=False, width=None if stream.isatty() else 150)
    try:
        with progress_bar(Console(stderr=True)) as on_progress:
            report = run_lab_sync(timelines, lambda: resolve_client(args.model), settings, on_progress=on_progress)
    except KeyboardInterrupt:
        unwritten = [f"the {label} report {path}" for label, path in (("JSON", args.json), ("HTML", args.html)) if path]
        print(
            f"contextledger: interrupted: the lab stopped before it finished, so nothing was written "
            f"({', '.join([*unwritten, 'no table'])}); a partial comparison is never reported",
            file=sys.stderr,
        )
        return INTERRUPTED
    if args.kit:
        report.data["kit"] = run_kit(settings.policies, lambda: resolve_client(args.model))
    if args.json:
        write_text(args.json, report.to_json())
    if args.html:
        write_text(args.html, render_html(report.data))
    print_report(report.data, console)
    for label, path in (("JSON", args.json), ("HTML", args.html)):
        if path and path != STANDARD_STREAM:
            console.print(f"{label} report written to {path}")
    return 0
