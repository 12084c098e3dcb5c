"""The lab in a terminal: a progress bar while it runs and one table per timeline (with ``rich``).

Only the command line imports this module, so ``import contextledger`` never
pulls ``rich`` in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from contextledger.lab._report import ANSWER_COLUMNS, KIT_COLUMNS, answer_rows, kit_rows, overview_rows, summary_rows

__all__ = ["print_report", "progress_bar"]

# Shorter headings than the HTML report's: the table has to fit a terminal.
_HEADINGS = (
    ("policy", "policy"),
    ("calls", "calls\n+extra"),
    ("tokens", "tokens\nestimate"),
    ("extra_tokens", "extra\ncalls"),
    ("exact", "tokens\nexact"),
    ("cost", "cost\nest."),
    ("reported", "provider\nin / out"),
    ("current", "current\npresent"),
    ("superseded", "superseded\npresent"),
    ("prohibition", "prohibition\npresent"),
    ("forgotten", "forgotten\npresent"),
    ("evicted", "evicted\npresent"),
    ("rejected", "rejected\npresent"),
    ("kept", "kept at end\nmsgs / tokens"),
    ("answers", "answers\nright"),
    ("notes", "notes"),
)


@contextmanager
def progress_bar(console: Console) -> Iterator[Callable[[int, int, str], None]]:
    """A callback for :func:`run_lab`'s ``on_progress`` that drives a rich progress bar."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("starting", total=None)

        def update(done: int, total: int, label: str) -> None:
            progress.update(task, completed=done, total=total, description=label)

        yield update


def print_report(data: Mapping[str, Any], console: Console) -> None:
    settings = data["settings"]
    exact = settings["tokenizer"] != "estimate"
    headings = [h for h in _HEADINGS if exact or h[0] != "exact"]
    columns, rows = overview_rows(data)
    overview = Table(
        title="Summary across timelines (tokens estimate; current found; stale sent; answers right)",
        title_justify="left",
    )
    for _, heading in columns:
        overview.add_column(heading, overflow="fold")
    for row in rows:
        overview.add_row(*(row.get(key, "-") for key, _ in columns))
    console.print(overview)
    if "kit" in data:
        kit = data["kit"]
        table = Table(
            title=f"compaction-conformance-kit {kit['kit_version']}: {kit['rounds']} rounds at a "
            f"{kit['budget_fraction']:.0%} budget, {kit['sessions']}",
            title_justify="left",
        )
        for _, heading in KIT_COLUMNS:
            table.add_column(heading, overflow="fold")
        for kit_row in kit_rows(kit):
            table.add_row(*(kit_row[key] for key, _ in KIT_COLUMNS))
        console.print(table)
    for timeline in data["timelines"]:
        table = Table(
            title=f"{timeline['name']} · {timeline['turns']} turns · {timeline['source']}",
            title_justify="left",
            show_lines=False,
        )
        for key, heading in headings:
            table.add_column(heading, overflow="fold", no_wrap=key == "policy")
        for row in summary_rows(timeline, compact=True):
            table.add_row(*(row[key] for key, _ in headings))
        console.print(table)
        answers = answer_rows(timeline)
        if answers:
            asked = Table(title=f"{timeline['name']} · answers to probe questions (exact match)", title_justify="left")
            for _, heading in ANSWER_COLUMNS:
                asked.add_column(heading)
            for answer in answers:
                asked.add_row(*(answer[key] for key, _ in ANSWER_COLUMNS))
            console.print(asked)
    lines = [
        f"model: {settings['model']}; tokens: {settings['estimate']}"
        + (f", with exact {settings['tokenizer']} counts" if exact else ""),
        "tokens: everything sent to the model, tool definitions and extra calls (facts writer, summariser) "
        "included; 'calls +extra' counts model calls + extra calls.",
        "present: (turn, value) checks of the text sent that found the value, out of those made; - : nothing to check.",
        _price_line(settings),
        "Policies are listed in the order they ran; the figures are measurements, not a verdict.",
    ]
    for line in lines:
        console.print(line, style="dim", highlight=False)


def _price_line(settings: Mapping[str, Any]) -> str:
    profile = settings.get("price_profile")
    if not profile:
        return "cost: not estimated in this report."
    return (
        f"cost: price profile {profile['name']!r} (cached input x{profile['cache_read_multiplier']:g}, cache writes "
        f"x{profile['cache_write_multiplier']:g}, output x{profile['output_price']:g}), the provider's prefix cache "
        "estimated over each policy's calls in order; in uncached input tokens."
    )
