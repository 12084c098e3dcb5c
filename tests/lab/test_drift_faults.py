"""Regression tests for the lab's false readings, and answer probes scored apart from the text checks."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from contextledger.clients import ChatClient, ScriptedChatClient
from contextledger.lab import parse_timeline
from contextledger.messages import Message
from tests.lab.support import policy, run, sent

FAULTS: dict[str, Any] = {
    "schema": 1,
    "name": "faults",
    "tools": [{"name": "search_logs", "description": "Search the logs.", "default_result": "nothing"}],
    "turns": [
        {"user": "version=4.2; product=Ledger"},
        {"user": "version=5.0; colour=blue", "note": "rejected: colour is not a fact key"},
        {"user": "module=evidence"},
        {"user": "module=Billing"},
        {"user": "log=/var/log/<app>/export.log"},
        {
            "user": "Check the logs please.",
            "assistant": "The export failed at 02:00.",
            "tool_results": {"search_logs": "ERROR export stalled on shard-7"},
        },
        {"user": "Which module is affected, and where are the logs?"},
    ],
    "questions": {"module": "Which module is affected?"},
}


def _faults() -> Any:
    return parse_timeline(FAULTS, source="faults.json")


def test_each_fault_timeline_reads_true_under_bounded_facts_and_combined() -> None:
    report = run([_faults()], writer="rules", policies=("full-history", "bounded-facts", "combined"))
    for name in ("bounded-facts", "combined"):
        last = policy(report, name)["turns"][-1]["probes"]
        # Fault 2: the block's own word "evidence" is not the superseded module value.
        assert last["superseded"]["present"] == [], name
        # Fault 3: the escaped log path is found once decoded.
        assert ["log", "/var/log/<app>/export.log"] in last["current"]["present"], name
        assert last["current"]["missing"] == [], name
        # Fault 1: the rejected version is neither current nor sent.
        assert ["version", "4.2"] in last["current"]["present"], name
        assert last["rejected"] == {"expected": 1, "present": []}, name
    # Full history still sends the rejected message: measured, not hidden.
    full = policy(report, "full-history")["turns"][-1]["probes"]
    assert full["rejected"]["present"] == [["version", "5.0"]]
    notes = policy(report, "bounded-facts")["turns"][1]["notes"]
    assert any("rejected by the facts contract" in note for note in notes)


def test_a_scripted_turn_sends_its_tool_results_into_the_conversation() -> None:
    """Fault 4: a scripted turn's tool noise never reached any policy."""
    report = run([_faults()], writer="rules", policies=("full-history",))
    data = policy(report, "full-history")
    scripted = data["turns"][5]
    assert scripted["scripted_reply"]
    assert scripted["calls"] == []
    later = sent(data, 7)
    results = [m["content"] for m in later if m["role"] == "tool"]
    assert results == ["ERROR export stalled on shard-7"]  # ... but the tool result is in the history after it
    assert any(m.get("tool_calls") for m in later)


_QUESTION = re.compile(r"What is the current (\w+)\?|Which (module) is affected\?")


def _answering(wrong: bool) -> Callable[[], ChatClient]:
    """A model that answers probe questions from the context (right) or with the old value on purpose (wrong)."""
    old = {"module": "evidence", "version": "5.0"}

    def reply(messages: Sequence[Message]) -> str:
        if "summar" in messages[0].text.lower():
            return "Summary: a ticket."
        question = _QUESTION.search(messages[-1].text)
        if question is None:
            return "Noted."
        key = question.group(1) or question.group(2)
        if wrong:
            return old.get(key, "unknown")
        context = "\n".join(m.text for m in messages[:-1])
        values = re.findall(rf"\b{key}\s*=\s*\"?([^;\n\"]+)", context)
        # A model reads the block's escapes as the characters they stand for.
        return json.loads(f'"{values[-1].strip()}"') if values else "I do not know."

    return lambda: ScriptedChatClient([reply])


def test_answer_scores_drop_with_a_model_that_answers_wrong_while_text_presence_stays() -> None:
    names = ("full-history", "bounded-facts")
    right = run([_faults()], _answering(False), writer="rules", policies=names, ask_probes=True)
    wrong = run([_faults()], _answering(True), writer="rules", policies=names, ask_probes=True)
    for name in names:
        good, bad = policy(right, name), policy(wrong, name)
        assert good["totals"]["probes"] == bad["totals"]["probes"]  # the text sent is the same
        assert bad["answers"]["right"] < good["answers"]["right"]
        module = next(q for q in bad["answers"]["questions"] if q["key"] == "module")
        assert module["question"] == "Which module is affected?"  # the timeline's own question
        assert module["right"] == 0
        assert module["answers_with_old_value"] == 1
    facts = policy(right, "bounded-facts")["answers"]
    assert facts["right"] == facts["asked"]
