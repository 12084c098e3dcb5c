"""The lab prices every call with the provider's prefix cache counted (design.md#cost): cached, written
and uncached tokens and a cost beside the tokens sent, per call and per policy."""

from __future__ import annotations

import pytest

from contextledger.clients import OfflineModel
from contextledger.exceptions import ConfigurationError
from contextledger.lab import LabSettings, load_timelines, run_lab_sync


def totals(profile: str) -> dict[str, dict[str, float]]:
    timeline = [t for t in load_timelines() if t.name == "long-session"]
    report = run_lab_sync(
        timeline,
        OfflineModel,
        LabSettings(policies=("full-history", "last-3-turns"), writer="rules", price_profile=profile),
    )
    assert report.data["settings"]["price_profile"]["name"] == profile
    return {policy["name"]: policy["totals"] for policy in report.data["timelines"][0]["policies"]}


def test_a_growing_history_sent_whole_is_read_from_the_cache() -> None:
    full = totals("openai")["full-history"]
    assert full["cache_read"] > 0.5 * full["input_estimate"]
    # Read at a tenth of the price: far below what the same tokens cost uncached.
    assert full["cost"] < 0.6 * (full["cache_read"] + full["uncached"] + 4 * full["output_estimate"])


def test_without_a_cache_every_token_is_paid_in_full() -> None:
    for policy in totals("none").values():
        assert policy["cache_read"] == 0
        assert policy["cost"] == pytest.approx(policy["uncached"] + 4 * policy["output_estimate"])


def test_an_unknown_profile_is_refused_before_anything_runs() -> None:
    with pytest.raises(ConfigurationError, match="unknown price profile 'cheap'"):
        run_lab_sync(load_timelines()[:1], OfflineModel, LabSettings(price_profile="cheap"))


def test_the_gpt_5_6_profile_prices_the_writes_it_bills() -> None:
    full = totals("gpt-5.6")["full-history"]
    assert full["cache_read"] > 0.5 * full["input_estimate"]  # a growing history is read from the end of the last
    assert full["cache_written"] > 0
    written, read, uncached = full["cache_written"], full["cache_read"], full["uncached"]
    # Writes at 1.25x the input price (free before the family), reads at 0.1x, output at 4x.
    expected = (uncached - written) + 1.25 * written + 0.1 * read + 4 * full["output_estimate"]
    assert full["cost"] == pytest.approx(expected)
