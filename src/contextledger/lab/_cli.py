"""``contextledger lab``: runs the lab from parsed arguments, prints the terminal report, writes the files.

Imported only when the ``lab`` command runs, so the other commands (and
``import contextledger``) never load the lab or ``rich``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from contextledger.exceptions import ConfigurationError, LabError

__all__ = ["run_lab_command"]


def _policy_names(given: list[str] | None) -> tuple[str, ...]:
    names = tuple(name.strip() for item in given or () for name in item.split(",") if name.strip())
    for name in names:
        if name.endswith(".json") or Path(name).suffix:
            raise LabError(
                f"--policies got {name!r}, which looks like a timeline file, not a policy name; "
                "put timeline files before --policies or separate policy names with commas"
            )
    return names


def run_lab_command(args: argparse.Namespace) -> int:
    from rich.console import Console  # noqa: PLC0415

    from contextledger.clients import resolve_client  # noqa: PLC0415
    from contextledger.lab._report import render_html  # noqa: PLC0415
    from contextledger.lab._run import LabSettings, run_lab_sync  # noqa: PLC0415
    from contextledger.lab._terminal import print_report, progress_bar  # noqa: PLC0415
    from contextledger.lab._timeline import load_timelines  # noqa: PLC0415

    if args.replicates < 1:
        raise ConfigurationError(f"--replicates must be 1 or more, got {args.replicates}")
    names = _policy_names(args.policies)
    timelines = load_timelines(args.timelines)  # every file is validated before anything runs
    live = args.model.strip() != "offline"
    settings = LabSettings(
        policies=names,
        tokenizer=args.tokenizer,
        writer=args.writer,
        replicates=args.replicates,
        ask_probes=live,
        model_label=args.model.strip(),
    ).checked()
    resolve_client(args.model)  # a misconfigured model fails here, before the first turn
    if args.kit:
        from contextledger._extras import require_extra  # noqa: PLC0415

        require_extra("compaction_kit", extra="kit", feature="contextledger lab --kit")  # before any turn runs
    if not live and args.replicates > 1:
        print("note: --replicates applies to probe questions, which are asked only of a live model", file=sys.stderr)
    # A file or a pipe gets a table wide enough to read, not the 80 columns rich assumes.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)
    with progress_bar(Console(stderr=True)) as on_progress:
        report = run_lab_sync(timelines, lambda: resolve_client(args.model), settings, on_progress=on_progress)
    if args.kit:
        from contextledger.lab._kit import run_kit  # noqa: PLC0415

        report.data["kit"] = run_kit(settings.policies, lambda: resolve_client(args.model))
    if args.json:
        Path(args.json).write_text(report.to_json(), encoding="utf-8")
    if args.html:
        Path(args.html).write_text(render_html(report.data), encoding="utf-8")
    print_report(report.data, console)
    for label, path in (("JSON", args.json), ("HTML", args.html)):
        if path:
            console.print(f"{label} report written to {path}")
    return 0
