"""The lab in a terminal: a progress bar while it runs and one table per timeline (with ``rich``).

A public module of its own, imported only by whoever prints the report (the ``lab`` command),
so ``import contextledger.lab`` never pulls ``rich`` in.  Tables break lines only between words,
at any width a terminal has: a table too wide for it is printed in parts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from contextledger.lab._report import ANSWER_COLUMNS, KIT_COLUMNS, answer_rows, kit_rows, overview_rows, summary_rows

__all__ = ["print_report", "print_table", "progress_bar"]

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


def _longest_word(text: str) -> int:
    return max((cell_len(word) for word in text.split()), default=1)


def _longest_line(text: str) -> int:
    return max((cell_len(line) for line in text.splitlines()), default=1)


def print_table(
    console: Console, title: str, columns: Sequence[tuple[str, str]], rows: Sequence[Mapping[str, Any]]
) -> None:
    """Rows as a table whose headings and cells break only between words, at any console width.

    Each column is at least as wide as its longest word (heading or cell), and wider, up to its
    longest line, while the console has room; the last column takes what is left.  When the
    console is too narrow for every column, the table is printed in parts, one under the other,
    each opening with the first column (the row's name).
    """
    texts = {key: [heading, *(str(row.get(key, "-")) for row in rows)] for key, heading in columns}
    needs = {key: max(map(_longest_word, values)) for key, values in texts.items()}
    natural = {key: max(map(_longest_line, values)) for key, values in texts.items()}
    first, rest = columns[0], list(columns[1:])
    # A column costs its width, one space of padding on each side and one border.
    opening = needs[first[0]] + 3 + 1
    parts: list[list[tuple[str, str]]] = [[]]
    used = opening
    for column in rest:
        cost = needs[column[0]] + 3
        if parts[-1] and used + cost > console.width:
            parts.append([])
            used = opening
        parts[-1].append(column)
        used += cost
    for number, part in enumerate(parts, start=1):
        label = title if len(parts) == 1 else f"{title} (part {number} of {len(parts)})"
        table = Table(title=label, title_justify="left")
        shown = [first, *part]
        spare = console.width - 1 - sum(needs[key] + 3 for key, _ in shown)
        for index, (key, heading) in enumerate(shown):
            if index == len(shown) - 1:  # the last column may shrink: only its text wraps to fit
                table.add_column(heading, min_width=needs[key], overflow="fold")
                continue
            grow = max(0, min(natural[key] - needs[key], spare))
            spare -= grow
            table.add_column(heading, width=needs[key] + grow, overflow="fold")
        for row in rows:
            table.add_row(*(str(row.get(key, "-")) for key, _ in shown))
        console.print(table)


def print_report(data: Mapping[str, Any], console: Console) -> None:
    """The lab report as tables: the summary across timelines, the kit's figures, then each timeline."""
    settings = data["settings"]
    exact = settings["tokenizer"] != "estimate"
    headings = [h for h in _HEADINGS if exact or h[0] != "exact"]
    columns, rows = overview_rows(data)
    print_table(
        console, "Summary across timelines (tokens estimate; current found; stale sent; answers right)", columns, rows
    )
    if "kit" in data:
        kit = data["kit"]
        title = (
            f"compaction-conformance-kit {kit['kit_version']}: {kit['rounds']} rounds at a "
            f"{kit['budget_fraction']:.0%} budget, {kit['sessions']}"
        )
        print_table(console, title, KIT_COLUMNS, kit_rows(kit))
    for timeline in data["timelines"]:
        title = f"{timeline['name']} · {timeline['turns']} turns · {timeline['source']}"
        print_table(console, title, headings, summary_rows(timeline, compact=True))
        answers = answer_rows(timeline)
        if answers:
            print_table(
                console, f"{timeline['name']} · answers to probe questions (exact match)", ANSWER_COLUMNS, answers
            )
    lines = [
        f"model: {settings['model']}; tokens: {settings['estimate']}"
        + (f", with exact {settings['tokenizer']} counts" if exact else ""),
        "tokens: everything sent to the model, tool definitions and extra calls (facts writer, summariser, compactor) "
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
