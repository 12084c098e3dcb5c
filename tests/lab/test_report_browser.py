"""The HTML report opened in headless Chromium: the summary, labelled axes, tooltips, gaps, readable long series.

The checks read the DOM Chromium built from the page (``--dump-dom``), and a
screenshot of the page is kept beside the test output in ``reports/`` (or in
``$LAB_REPORT_ARTIFACTS``) for a person to look at.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from contextledger.clients import OfflineModel
from contextledger.lab import LabSettings, load_timelines, render_html, run_lab_sync

ARTIFACTS = Path(os.environ.get("LAB_REPORT_ARTIFACTS", Path(__file__).resolve().parents[2] / "reports"))
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)


def _chromium() -> str:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; .ci/run installs Debian's chromium package")
        pytest.skip("chromium is not installed (apt-get install chromium); CI installs it")
    return binary


class _Page(HTMLParser):
    """What the checks need from the DOM: tables, charts, their axis titles, marks and tooltips."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, dict[str, str]]] = []
        self.timeline = ""
        self.overview_rows = 0
        self.overview_columns: list[str] = []
        self.charts: list[dict[str, Any]] = []
        self.marks_without_title: list[str] = []
        self.notes: dict[str, list[str]] = defaultdict(list)
        self._pending: tuple[str, dict[str, str]] | None = None
        self._text: list[str] = []

    @property
    def chart(self) -> dict[str, Any]:
        return self.charts[-1]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {key: value or "" for key, value in attrs}
        classes = found.get("class", "").split()
        self.stack.append((tag, found))
        if tag == "section" and "timeline" in classes:
            self.timeline = found["data-timeline"]
        elif tag == "table" and "overview" in classes:
            self.overview_columns = []
        elif tag == "svg" and "data-chart" in found:
            self.charts.append(
                {"timeline": self.timeline, **found, "axis_titles": [], "markers": [], "cells": 0, "paths": []}
            )
        elif tag == "path" and "series" in classes:
            self.chart["paths"].append(found["d"])
        elif tag in ("circle", "rect") and ("marker" in classes or "cell" in classes):
            self._pending = (tag, found)
            if "cell" in classes:
                self.chart["cells"] += 1
            else:
                self.chart["markers"].append(float(found["cy"]))
        elif (tag == "title" and self._pending is not None) or tag in ("text", "th", "p", "td"):
            self._text = []

    def handle_data(self, data: str) -> None:
        self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        opened, found = self.stack.pop() if self.stack else ("", {})
        text = "".join(self._text).strip()
        classes = found.get("class", "").split()
        if tag == "title" and self._pending is not None:
            if text:
                self._pending = None
        elif tag in ("circle", "rect") and self._pending is not None:
            self.marks_without_title.append(f"{self.timeline}: {self._pending[1]}")
            self._pending = None
        elif tag == "text" and "axis-title" in classes and text:
            self.chart["axis_titles"].append(text)
        elif tag == "th" and any(t == "table" and "overview" in f.get("class", "") for t, f in self.stack):
            self.overview_columns.append(text)
        elif (
            tag == "tr"
            and any(t == "tbody" for t, _ in self.stack)
            and any(t == "table" and "overview" in f.get("class", "") for t, f in self.stack)
        ):
            self.overview_rows += 1
        elif tag == "p" and "coincide" in classes:
            self.notes[self.timeline].append(text)
        del opened


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    binary = _chromium()
    folder = tmp_path_factory.mktemp("report")
    report = run_lab_sync(load_timelines(), OfflineModel, LabSettings(writer="rules"))
    html = folder / "lab-report.html"
    html.write_text(render_html(report.data), encoding="utf-8")
    profile = f"--user-data-dir={folder / 'profile'}"
    dom = subprocess.run(
        [binary, *FLAGS, profile, "--dump-dom", html.as_uri()],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    screenshot = ARTIFACTS / "lab-report.png"
    screenshot.unlink(missing_ok=True)
    shot = subprocess.run(
        [binary, *FLAGS, profile, "--window-size=1280,2400", f"--screenshot={screenshot}", html.as_uri()],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert shot.returncode == 0, shot.stderr[-2000:]
    parsed = _Page()
    parsed.feed(dom.stdout)
    return {"dom": parsed, "data": report.data, "screenshot": screenshot}


def test_a_screenshot_is_kept_with_the_test_output(page: dict[str, Any]) -> None:
    screenshot: Path = page["screenshot"]
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert screenshot.stat().st_size > 20_000  # a drawn page, not a blank one


def test_the_summary_table_covers_every_policy_and_timeline(page: dict[str, Any]) -> None:
    dom, data = page["dom"], page["data"]
    assert dom.overview_rows == len(data["settings"]["policies"])
    assert len(dom.overview_columns) == 1 + len(data["timelines"])


def test_every_chart_has_labelled_axes_and_every_mark_a_tooltip(page: dict[str, Any]) -> None:
    dom, data = page["dom"], page["data"]
    policies = len(data["settings"]["policies"])
    for item in data["timelines"]:
        charts = [chart for chart in dom.charts if chart["timeline"] == item["name"]]
        panels = [chart for chart in charts if chart["data-chart"] == "tokens"]
        assert len(panels) == policies
        assert any(chart["data-chart"] == "probes" for chart in charts)
        for chart in charts:
            assert "turn" in chart["axis_titles"], chart
            assert len(chart["axis_titles"]) >= 2, chart  # the y axis is named too
            assert chart["markers"] or chart["cells"]
    assert dom.marks_without_title == []


def test_turns_where_nothing_was_sent_are_gaps_not_zeros(page: dict[str, Any]) -> None:
    dom, data = page["dom"], page["data"]
    item = next(t for t in data["timelines"] if any(e["scripted_reply"] for e in t["policies"][0]["turns"]))
    for policy in item["policies"]:
        # A turn sent something when the model or an extra call (a summariser, a provider's
        # compactor) was asked, even on a turn whose reply was scripted.
        sent = [t for t in policy["turns"] if t["calls"] or t["extra_calls"]]
        chart = next(c for c in dom.charts if c["timeline"] == item["name"] and c.get("data-policy") == policy["name"])
        assert len(chart["markers"]) == len(sent) < item["turns"]
        flags = [bool(t["calls"] or t["extra_calls"]) for t in policy["turns"]]
        breaks = sum(1 for a, b in itertools.pairwise(flags) if not a and b)
        assert chart["paths"][0].count("M") == 1 + breaks, policy["name"]


def test_on_the_long_timeline_every_series_spans_a_fifth_of_its_chart(page: dict[str, Any]) -> None:
    dom, data = page["dom"], page["data"]
    longest = max(data["timelines"], key=lambda t: t["turns"])
    assert longest["turns"] == 221
    for chart in dom.charts:
        if chart["timeline"] != longest["name"] or chart["data-chart"] != "tokens":
            continue
        span = (max(chart["markers"]) - min(chart["markers"])) / float(chart["data-plot-height"])
        assert span >= 0.2, (chart["data-policy"], span)


def test_series_that_coincide_are_named_in_a_note(page: dict[str, Any]) -> None:
    dom, data = page["dom"], page["data"]
    longest = max(data["timelines"], key=lambda t: t["turns"])
    series = {
        p["name"]: [t["tokens"]["input_estimate"] if t["calls"] else None for t in p["turns"]]
        for p in longest["policies"]
    }
    assert series["last-3-turns"] == series["request-view"]  # they do coincide on this timeline ...
    notes = dom.notes[longest["name"]]
    assert any("last-3-turns" in note and "request-view" in note for note in notes)  # ... and the page says so
