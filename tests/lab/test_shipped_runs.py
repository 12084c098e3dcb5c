"""The lab over every shipped timeline, offline: deterministic, faithful to the facts contract, and verdict-free."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from contextledger.clients import OfflineModel
from contextledger.lab import LabReport, load_timelines, render_html
from contextledger.lab._report import summary_rows
from contextledger.messages import from_openai
from contextledger.tokenizers import OpenAITokenizer
from tests.lab.support import VERDICT_WORDS, policy, run, timeline


@pytest.fixture(scope="module")
def shipped() -> LabReport:
    return run(load_timelines())


def test_two_offline_runs_give_identical_json(shipped: LabReport) -> None:
    again = run(load_timelines())
    assert again.to_json() == shipped.to_json()


def test_bounded_facts_holds_every_current_value_and_no_superseded_one_on_every_shipped_timeline(
    shipped: LabReport,
) -> None:
    for position, item in enumerate(shipped.data["timelines"]):
        probes = policy(shipped, "bounded-facts", position)["totals"]["probes"]
        assert probes["current_expected"] > 0, item["name"]
        assert probes["current_present"] == probes["current_expected"], item["name"]
        assert probes["superseded_present"] == 0, item["name"]
        assert probes["forgotten_present"] == 0, item["name"]


def test_the_other_policies_are_reported_as_measured(shipped: LabReport) -> None:
    """Every figure is recomputed from the recorded turns, whatever it is."""
    for position, item in enumerate(shipped.data["timelines"]):
        for data in item["policies"]:
            totals = data["totals"]["probes"]
            turns = [turn for turn in data["turns"] if turn["probes"] is not None]
            assert totals["turns_sent"] == len(turns)
            for kind in ("superseded", "forgotten", "evicted"):
                assert totals[f"{kind}_present"] == sum(len(t["probes"][kind]["present"]) for t in turns)
            assert totals["current_present"] == sum(len(t["probes"]["current"]["present"]) for t in turns)
            # And each per-turn probe agrees with a fresh look at the messages the turn sent.
            for turn in turns[:: max(1, len(turns) // 10)]:
                text = "\n".join(
                    text
                    for call in turn["calls"]
                    for message in from_openai([data["messages"][i] for i in call["messages"]])
                    for text in message.payload_texts()
                )
                expected = item["expectations"][turn["turn"] - 1]
                for key, value in expected["current"]:
                    assert ([key, value] in turn["probes"]["current"]["present"]) == (value in text)
                for key, value in expected["superseded"]:
                    assert ([key, value] in turn["probes"]["superseded"]["present"]) == (value in text)
        del position


def test_the_drift_the_seed_expects_is_visible(shipped: LabReport) -> None:
    names = [item["name"] for item in shipped.data["timelines"]]
    early = names.index("early-prohibition")
    window = policy(shipped, "last-3-turns", early)["totals"]["probes"]
    full = policy(shipped, "full-history", early)["totals"]["probes"]
    assert window["prohibition_present"] < window["prohibition_turns"]  # the window loses the prohibition
    assert full["prohibition_present"] == full["prohibition_turns"]
    correction = names.index("correction")
    assert policy(shipped, "full-history", correction)["totals"]["probes"]["superseded_present"] > 0
    eviction = names.index("eviction")
    assert policy(shipped, "bounded-facts", eviction)["totals"]["probes"]["evicted_expected"] > 0
    assert policy(shipped, "bounded-facts", eviction)["totals"]["probes"]["evicted_present"] == 0


def test_no_output_names_a_winner(shipped: LabReport) -> None:
    assert not VERDICT_WORDS.search(shipped.to_json())
    assert not VERDICT_WORDS.search(render_html(shipped.data))
    for item in shipped.data["timelines"]:
        for row in summary_rows(item) + summary_rows(item, compact=True):
            assert not VERDICT_WORDS.search(" ".join(row.values()))


def test_an_exact_tokenizer_adds_exact_counts_beside_the_estimate() -> None:
    pytest.importorskip("toktok", reason="needs the 'exact' extra: pip install -e '.[exact]'")
    report = run([timeline()], OfflineModel, tokenizer="o200k_base", policies=("full-history", "bounded-facts"))
    encoder = OpenAITokenizer("o200k_base")
    data = policy(report, "bounded-facts")
    for turn in data["turns"]:
        for call in turn["extra_calls"]:
            messages = from_openai([data["messages"][i] for i in call["messages"]])
            assert call["input_exact"] == sum(encoder.count_messages(messages))
            assert call["input_estimate"] > 0
    assert isinstance(data["totals"]["input_exact"], int)
    html = render_html(report.data)
    assert "tokens sent, exact" in html
    assert "exact o200k_base counts" in html


def test_the_library_import_does_not_load_rich() -> None:
    code = "import sys, contextledger, contextledger.lab, contextledger.cli; print('rich' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_report_settings_say_what_the_numbers_are(shipped: LabReport) -> None:
    settings: dict[str, Any] = shipped.data["settings"]
    assert settings["model"] == "offline"
    assert "estimate" in settings["estimate"]
    assert settings["policies"] == [p["name"] for p in shipped.data["timelines"][0]["policies"]]
