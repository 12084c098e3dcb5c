"""The collapse-and-recall policy: turns set aside carry a reference, the offline model recalls one
when a question asks what its context lacks, and every recall is a model call counted in the cost."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from contextledger.clients import OfflineModel
from contextledger.lab import policy_names
from contextledger.messages import Message
from tests.lab.support import policy, run, small, timeline

TURNS = [
    {"user": "New ticket.\nmodule=Reporting; database=PostgreSQL"},
    {"user": "The export page is slow."},
    {"user": "It started on Monday."},
    {"user": "Users in two regions see it."},
    {"user": "It happens after login."},
    {"user": "Which database is it?"},
]


def _report() -> Any:
    return run([timeline(small(turns=TURNS))], policies=("request-view", "collapse-recall"), ask_probes=True)


def _recall_calls(data: dict[str, Any], turn: int) -> int:
    return sum(
        1
        for index in (i for call in data["turns"][turn - 1]["calls"] for i in call["messages"])
        for tool_call in data["messages"][index].get("tool_calls") or ()
        if tool_call["function"]["name"] == "recall_context"
    )


def test_the_policy_is_registered_after_the_shipped_ones() -> None:
    assert policy_names().index("collapse-recall") > policy_names().index("combined")


def test_a_question_about_a_turn_set_aside_is_answered_through_one_recall_counted_in_the_cost() -> None:
    report = _report()
    window, recall = policy(report, "request-view"), policy(report, "collapse-recall")
    last_window, last_recall = window["turns"][-1], recall["turns"][-1]
    # The window alone no longer holds the declaration: one call, and the model does not know.
    assert len(last_window["calls"]) == 1
    # With references, the model recalls the notice's turns (one more call) and answers from them.
    assert len(last_recall["calls"]) == 2
    assert _recall_calls(recall, 6) == 1
    assert any("recalled 1 set-aside group" in note for note in last_recall["notes"])
    assert last_recall["tokens"]["input_estimate"] > last_window["tokens"]["input_estimate"]
    assert recall["totals"]["model_calls"] == window["totals"]["model_calls"] + 1 + _answer_recalls(recall)
    right = {item["key"]: item["right"] for item in recall["answers"]["questions"]}
    assert right["database"] == 1
    window_right = {item["key"]: item["right"] for item in window["answers"]["questions"]}
    assert window_right["database"] == 0


def _answer_recalls(data: dict[str, Any]) -> int:
    """Turns other than the last that recalled (a question in the timeline's earlier turns)."""
    return sum(_recall_calls(data, turn) for turn in range(1, len(data["turns"])))


def test_the_offline_model_recalls_only_when_the_question_lacks_its_answer() -> None:
    tools: list[dict[str, Any]] = [{"type": "function", "function": {"name": "recall_context", "parameters": {}}}]
    notice = Message.user('[4 earlier messages set aside; ref="0123456789ab"]')

    async def reply(*messages: Message) -> Message:
        response = await OfflineModel().get_response(list(messages), tools=tools)
        return response.messages[0]

    asked = asyncio.run(reply(notice, Message.user("Which database is it?")))
    assert [(c.name, c.arguments) for c in asked.function_calls] == [("recall_context", '{"ref": "0123456789ab"}')]
    known = asyncio.run(reply(notice, Message.user("database=MySQL"), Message.user("Which database is it?")))
    assert not known.function_calls
    statement = asyncio.run(reply(notice, Message.user("Thanks.")))
    assert not statement.function_calls
    # Offered a recall that takes a query, it asks for what the question names.
    tools[:] = [
        {
            "type": "function",
            "function": {
                "name": "recall_context",
                "parameters": {"type": "object", "properties": {"ref": {}, "query": {}}},
            },
        }
    ]
    queried = asyncio.run(reply(notice, Message.user("Which database is it?")))
    assert [json.loads(c.arguments) for c in queried.function_calls] == [
        {"ref": "0123456789ab", "query": "Which database is it?"}
    ]


def test_the_kit_reports_the_policy_with_what_it_sent_and_its_tool_rounds() -> None:
    pytest.importorskip("compaction_kit", reason="the 'kit' extra")
    from contextledger.lab import run_kit  # noqa: PLC0415

    rows = {row["name"]: row for row in run_kit(["full-history", "collapse-recall"], OfflineModel, seeds=(1,))["rows"]}
    full, recall = rows["full-history"], rows["collapse-recall"]
    assert full["survived_median"] == 20
    # The kit scores the text of the next request, which asks nothing: nothing is recalled, and
    # the canaries the window set aside are not in it.
    assert recall["tool_round_tokens_estimate"] == 0
    assert recall["final_tokens_estimate_median"] < full["final_tokens_estimate_median"] // 10
    assert recall["survived_median"] < full["survived_median"]
    # Asked each canary's question, as the kit probes a live agent, the model recalls what it
    # lacks: as many canaries as the full history at well under half of its tokens, the recall
    # rounds included.
    asked, everything = recall["asked"], full["asked"]
    assert everything["survived_median"] == 20
    assert asked["survived_median"] >= everything["survived_median"]
    assert asked["tokens_total"] <= 0.5 * everything["tokens_total"]


def test_a_policy_without_recall_asked_the_kit_s_questions_holds_what_it_held_unasked() -> None:
    """Asking changes nothing for a policy whose model cannot fetch what it set aside: the measure
    favours recall only by what the recall brings back."""
    pytest.importorskip("compaction_kit", reason="the 'kit' extra")
    from contextledger.lab import run_kit  # noqa: PLC0415

    rows = {row["name"]: row for row in run_kit(["last-3-turns", "combined"], OfflineModel, seeds=(1, 2))["rows"]}
    for name in ("last-3-turns", "combined"):
        assert rows[name]["asked"]["survived_per_seed"] == rows[name]["survived_per_seed"], name
    assert "asked" not in rows["update-aware-checklist"]  # a kit reference has no model to ask
