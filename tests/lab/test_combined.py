"""The combined policy: declared values as bounded facts, standing rules verbatim, a request view for the rest."""

from __future__ import annotations

from typing import Any

import pytest

from contextledger.lab import parse_timeline
from contextledger.lab._combined import StandingRules, is_standing_rule
from tests.lab.support import policy, run, sent


@pytest.mark.parametrize(
    "line",
    [
        "Never restart the billing service during business hours.",
        "Do not email the customer directly.",
        "Only use the read replica. Queries go there.",
        "You must open a change request first.",
        "If the export fails again, page the on-call engineer.",
        "Deployment rule: one change at a time.",
        "I prefer short answers.",
    ],
)
def test_prohibitions_obligations_and_labelled_rules_are_standing_rules(line: str) -> None:
    assert is_standing_rule(line)


@pytest.mark.parametrize(
    "line",
    [
        "The export failed three nights in a row.",
        "Must we restart it?",
        "constraint=never restart production",
        "Load test peaked with no errors on the small cluster.",
        "",
    ],
)
def test_statements_questions_and_declarations_are_not(line: str) -> None:
    assert not is_standing_rule(line)


RULES: dict[str, Any] = {
    "schema": 1,
    "name": "rules",
    "turns": [
        {"user": "Never restart the billing service during business hours.\nmodule=Billing"},
        {"user": "Budget cap is $300. Never exceed it without approval."},
        {"user": "The export failed again."},
        {"user": "Budget cap is $700. Never exceed it without approval."},
        {"user": "Anything new?"},
        {"user": "Still failing."},
        {"user": "What can I do now?"},
        {"user": "Let us start over.", "host_commands": ["forget"]},
        {"user": "What are the rules?"},
    ],
}


def test_rules_stay_verbatim_beyond_the_window_a_restated_rule_replaces_its_stale_figure_and_forget_removes_them() -> (
    None
):
    report = run([parse_timeline(RULES, source="rules.json")], writer="rules", policies=("combined",))
    data = policy(report, "combined")
    before_forget = "\n".join(m["content"] or "" for m in sent(data, 7))
    assert "Never restart the billing service during business hours." in before_forget  # six turns back
    assert "Budget cap is $700. Never exceed it without approval." in before_forget
    assert "$300" not in before_forget  # the restated rule replaced the old figure, and turn 2 is out of the window
    after = "\n".join(m["content"] or "" for m in sent(data, 9))
    assert "Never restart" not in after
    assert "$700" not in after
    assert "Billing" not in after  # the declared value is forgotten too, from the facts and the stored history
    assert data["turns"][-1]["probes"]["forgotten"]["present"] == []


def test_forget_constraint_drops_every_kept_rule_and_forget_key_those_that_mention_its_value() -> None:
    rules = StandingRules()
    rules.read("Never deploy Billing on Fridays.\nAlways page the on-call engineer.\nThe export failed.")
    assert rules.rules == ["Never deploy Billing on Fridays.", "Always page the on-call engineer."]
    assert rules.forget("module", ["Billing"]) == ["Never deploy Billing on Fridays."]
    assert rules.rules == ["Always page the on-call engineer."]
    assert rules.forget("constraint", []) == ["Always page the on-call engineer."]
    assert rules.block() == ""
