"""Shared helpers for the lab tests: timelines written to real files, and lab runs."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from contextledger.clients import ChatClient, OfflineModel
from contextledger.lab import LabReport, LabSettings, Timeline, parse_timeline, run_lab_sync
from contextledger.lab import _contract as contract
from contextledger.lab._contract import Expectation

# Words that would turn a comparison into a verdict; no output of the lab may contain them.
VERDICT_WORDS = re.compile(r"\b(winner|winners|winning|best|ranking|ranked|rank)\b", re.IGNORECASE)

SMALL: dict[str, Any] = {
    "schema": 1,
    "name": "small",
    "description": "A short correction.",
    "tools": [{"name": "search_logs", "description": "Search the logs.", "default_result": "nothing found"}],
    "turns": [
        {"user": "New ticket.\nmodule=Reporting; database=PostgreSQL"},
        {"user": "Please check the logs for the export.", "tool_results": {"search_logs": "ERROR export timeout"}},
        {"user": "Correction.\nmodule=Billing; database=SQL Server 2022"},
        {"user": "Which database is it?"},
        {"user": "customer=Contoso"},
        {"user": "Which module is it?"},
    ],
}


def small(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(SMALL)
    data.update(changes)
    return data


def write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def timeline(data: dict[str, Any] | None = None) -> Timeline:
    return parse_timeline(data if data is not None else small(), source="test.json")


def run(
    timelines: Sequence[Timeline],
    model: Callable[[], ChatClient] = OfflineModel,
    **settings: Any,
) -> LabReport:
    return run_lab_sync(timelines, model, LabSettings(**settings))


def policy(report: LabReport, name: str, timeline_index: int = 0) -> dict[str, Any]:
    for item in report.data["timelines"][timeline_index]["policies"]:
        if item["name"] == name:
            result: dict[str, Any] = item
            return result
    raise KeyError(name)


def sent(policy_data: dict[str, Any], turn: int, call: int = 0, kind: str = "calls") -> list[dict[str, Any]]:
    """The OpenAI-format messages of one recorded call of a turn (1-based)."""
    record = policy_data["turns"][turn - 1][kind][call]
    return [policy_data["messages"][i] for i in record["messages"]]


def user_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "user"]


def expectations(timeline: Timeline) -> tuple[Expectation, ...]:
    """The contract's expectations for every turn of a timeline."""
    return contract.expectations(timeline.turns)


def final_state(timeline: Timeline) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """(current facts, superseded values) once the whole timeline has been read."""
    state = contract.final_state(timeline.turns)
    return state.current, state.superseded
