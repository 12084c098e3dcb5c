"""compaction-conformance-kit's checks against the lab's policies (the kit extra)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from contextledger.cli import main
from contextledger.clients import OfflineModel
from contextledger.lab._kit import KIT_VERSION, run_kit
from tests.lab.support import small, write

try:
    import compaction_kit as kit
except ModuleNotFoundError:  # the dev extra installs it; only a partial local install lacks it
    if os.environ.get("CI"):
        raise
    pytest.skip("compaction-conformance-kit is not installed (pip install -e '.[kit]')", allow_module_level=True)


@pytest.fixture(scope="module")
def figures() -> dict[str, Any]:
    return run_kit(("full-history", "bounded-facts", "combined"), OfflineModel)


def test_the_pinned_kit_version_is_the_one_measured(figures: dict[str, Any]) -> None:
    assert figures["kit_version"] == KIT_VERSION == kit.kit_version()


def test_the_combined_policy_keeps_at_least_the_pinned_rules_canaries_with_no_stale_value(
    figures: dict[str, Any],
) -> None:
    rows = {row["name"]: row for row in figures["rows"]}
    combined, pinned = rows["combined"], rows["pinned-rules"]
    assert min(combined["survived_per_seed"]) >= 10
    assert min(combined["survived_per_seed"]) >= max(pinned["survived_per_seed"])
    assert combined["stale_total"] == 0
    assert combined["within_budget"]
    # Its cost sits beside the kit's checklist compactor's, on the same sessions.
    assert rows["checklist-carrying"]["final_tokens_estimate_median"] > 0
    assert combined["final_tokens_estimate_median"] > 0


def test_the_kit_figures_are_measurements_of_each_policy(figures: dict[str, Any]) -> None:
    rows = {row["name"]: row for row in figures["rows"]}
    # Full history sends everything: every canary, every stale value, over the budget.
    assert rows["full-history"]["survived_per_seed"] == [20, 20, 20, 20]
    assert rows["full-history"]["stale_total"] == 8
    assert not rows["full-history"]["within_budget"]
    # Bounded facts hold declared key=value facts only; the kit's canaries are prose.
    assert rows["bounded-facts"]["survived_per_seed"] == [0, 0, 0, 0]
    assert rows["update-aware-checklist"]["survived_per_seed"] == [20, 20, 20, 20]


def test_the_command_puts_the_kit_figures_in_the_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    timeline = write(tmp_path / "t.json", small())
    report, html = tmp_path / "r.json", tmp_path / "r.html"
    code = main(
        [
            "lab",
            "--policies",
            "combined",
            str(timeline),
            "--kit",
            "--writer",
            "rules",
            "--json",
            str(report),
            "--html",
            str(html),
        ]
    )
    assert code == 0
    data = json.loads(report.read_text(encoding="utf-8"))
    assert next(row["name"] for row in data["kit"]["rows"]) == "combined"
    assert data["timelines"][0]["source"] == str(timeline)  # --policies did not swallow the file
    assert "compaction-conformance-kit" in html.read_text(encoding="utf-8")
    assert "compaction-conformance-kit" in capsys.readouterr().out
