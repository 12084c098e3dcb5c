"""Timeline files: the shipped ones load and show what they are for; malformed ones are refused precisely."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from contextledger.exceptions import TimelineError
from contextledger.lab import load_timeline, load_timelines, parse_timeline
from contextledger.lab._timeline import shipped_timeline_paths
from tests.lab.support import expectations, small, write

REQUIRED = {"correction", "early-prohibition", "tool-noise", "eviction", "forget", "distractors", "long-session"}


def test_the_shipped_timelines_load_and_include_the_seven_scenarios() -> None:
    timelines = {t.name: t for t in load_timelines()}
    assert set(timelines) >= REQUIRED
    assert len(timelines) == len(shipped_timeline_paths())
    for item in timelines.values():
        assert item.source.startswith("shipped:")
    assert len(timelines["long-session"].turns) >= 200


def test_each_shipped_timeline_exercises_its_scenario() -> None:
    timelines = {t.name: t for t in load_timelines()}

    correction = timelines["correction"]
    declared = [dict(turn.declarations) for turn in correction.turns]
    assert {"module": "Reporting", "database": "PostgreSQL"} in declared
    assert {"module": "Billing", "database": "SQL Server 2022"} in declared
    assert ("database", "PostgreSQL") in expectations(correction)[-1].superseded

    prohibition = timelines["early-prohibition"]
    assert "constraint" in prohibition.turns[0].declarations
    assert len(prohibition.turns) - 1 >= 20
    assert all(e.prohibition is not None for e in expectations(prohibition))

    noise = timelines["tool-noise"]
    with_tools = [turn for turn in noise.turns if turn.tool_results]
    assert len(with_tools) * 2 >= len(noise.turns)
    assert sum(len(r) for turn in with_tools for r in turn.tool_results.values()) > 2000

    eviction = timelines["eviction"]
    assert any(e.evicted for e in expectations(eviction))

    forget = timelines["forget"]
    forget_turns = [turn.number for turn in forget.turns if turn.host_commands]
    assert forget_turns
    assert abs(forget_turns[0] - len(forget.turns) / 2) <= 2
    assert any(e.forgotten for e in expectations(forget))

    distractors = timelines["distractors"]
    scripted = [(turn, e) for turn, e in zip(distractors.turns, expectations(distractors)) if turn.scripted_reply]
    assert scripted
    for turn, expectation in scripted:
        assert turn.scripted_reply is not None
        assert any(value in turn.scripted_reply for _, value in expectation.superseded)


def test_a_user_file_loads_with_its_path_as_source(tmp_path: Path) -> None:
    path = write(tmp_path / "mine.json", small())
    loaded = load_timelines([path])
    assert [t.name for t in loaded] == ["small"]
    assert loaded[0].source == str(path)
    assert loaded[0].turns[2].declarations == {"module": "Billing", "database": "SQL Server 2022"}
    assert loaded[0].turns[1].tool_results == {"search_logs": "ERROR export timeout"}


def _mutated(change: Any) -> dict[str, Any]:
    data = small()
    change(data)
    return data


def _set(path: tuple[Any, ...], value: Any) -> Any:
    def apply(data: dict[str, Any]) -> None:
        target: Any = data
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value

    return apply


def _delete(path: tuple[Any, ...]) -> Any:
    def apply(data: dict[str, Any]) -> None:
        target: Any = data
        for part in path[:-1]:
            target = target[part]
        del target[path[-1]]

    return apply


MALFORMED = [
    (_delete(("schema",)), "schema", "missing"),
    (_set(("schema",), 2), "schema", "unsupported schema 2"),
    (_set(("schema",), True), "schema", "unsupported schema"),
    (_set(("colour",), "blue"), "colour", "unknown field"),
    (_delete(("name",)), "name", "missing"),
    (_set(("name",), "has spaces"), "name", "not a valid name"),
    (_set(("instructions",), ""), "instructions", "must not be empty"),
    (_set(("instructions",), "Always answer about PostgreSQL."), "instructions", "'PostgreSQL'"),
    (_set(("tools",), {}), "tools", "must be a list"),
    (_set(("tools", 0, "name"), "search logs"), "tools[0].name", "not a valid tool name"),
    (_delete(("tools", 0, "description")), "tools[0].description", "missing"),
    (
        lambda data: data["tools"].append({"name": "search_logs", "description": "again"}),
        "tools[1].name",
        "declared twice",
    ),
    (_delete(("turns",)), "turns", "missing"),
    (_set(("turns",), []), "turns", "non-empty list"),
    (_set(("turns", 3), "Which database?"), "turns[3]", "must be an object"),
    (_delete(("turns", 3, "user")), "turns[3].user", "missing"),
    (_set(("turns", 3, "user"), 42), "turns[3].user", "must be a string, got int"),
    (_set(("turns", 3, "user"), "   "), "turns[3].user", "must not be empty"),
    (_set(("turns", 3, "usr"), "hello"), "turns[3].usr", "unknown field"),
    (_set(("turns", 3, "user"), "x" * 4097), "turns[3].user", "4097 characters"),
    (_set(("turns", 3, "user"), "I mixed things up, module =Billing"), "turns[3].user", "reads as prose"),
    (_set(("turns", 1, "tool_results"), {"get_metrics": "{}"}), "turns[1].tool_results.get_metrics", "no tool"),
    (_set(("turns", 1, "tool_results"), ["x"]), "turns[1].tool_results", "must be an object"),
    (_set(("turns", 1, "tool_results", "search_logs"), 3), "turns[1].tool_results.search_logs", "must be a string"),
    (_set(("turns", 3, "assistant"), ""), "turns[3].assistant", "must not be empty"),
    (_set(("turns", 3, "host_commands"), []), "turns[3].host_commands", "non-empty list"),
    (_set(("turns", 3, "host_commands"), ["forgot module"]), "turns[3].host_commands[0]", "unknown host command"),
    (_set(("turns", 3, "host_commands"), ["forget colour"]), "turns[3].host_commands[0]", "not a fact key"),
    (_set(("turns", 3, "host_commands"), ["forget a b"]), "turns[3].host_commands[0]", "unknown host command"),
    (_set(("turns", 3, "note"), 5), "turns[3].note", "must be a string"),
    (_set(("turns", 4, "user"), "database=SQL Server 2022 Express"), "turns[4].user", "contains the old"),
]


@pytest.mark.parametrize(("change", "entry", "problem"), MALFORMED)
def test_a_malformed_timeline_names_the_file_the_entry_and_the_problem(
    tmp_path: Path, change: Any, entry: str, problem: str
) -> None:
    path = write(tmp_path / "bad.json", _mutated(change))
    with pytest.raises(TimelineError) as caught:
        load_timeline(path)
    error = caught.value
    assert error.path == str(path)
    assert error.entry == entry
    assert problem in str(error)
    assert str(error).startswith(f"{path}, {entry}: ")


def test_a_file_that_is_not_json_names_the_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{\n  "schema": 1,\n  "name": "x",,\n}', encoding="utf-8")
    with pytest.raises(TimelineError) as caught:
        load_timeline(path)
    assert caught.value.entry == "line 3, column 15"
    assert "not valid JSON" in str(caught.value)


@pytest.mark.parametrize(
    ("content", "problem"),
    [(b"\xff\xfe{}", "not UTF-8"), (b"[]", "one JSON object, got a list"), (b"null", "got null")],
)
def test_a_file_of_the_wrong_kind_is_refused(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "odd.json"
    path.write_bytes(content)
    with pytest.raises(TimelineError, match=problem) as caught:
        load_timeline(path)
    assert caught.value.path == str(path)


def test_a_missing_file_is_a_timeline_error(tmp_path: Path) -> None:
    with pytest.raises(TimelineError, match="cannot be read") as caught:
        load_timeline(tmp_path / "absent.json")
    assert caught.value.path == str(tmp_path / "absent.json")


def test_one_bad_file_stops_the_whole_set_and_names_that_file(tmp_path: Path) -> None:
    good = write(tmp_path / "good.json", small())
    bad_data = small(name="other")
    bad_data["turns"][2]["host_commands"] = ["forget colour"]
    bad = write(tmp_path / "bad.json", bad_data)
    with pytest.raises(TimelineError) as caught:
        load_timelines([good, bad])
    assert caught.value.path == str(bad)
    assert caught.value.entry == "turns[2].host_commands[0]"


@pytest.mark.parametrize(
    ("user", "reason"),
    [
        ("colour=blue", "'colour'"),
        ("module=", "empty value"),
        ("product=Pa; module=Mb; priority=Pc; database=Dd; customer=Ce; version=Vf", "over the limit of 5"),
    ],
)
def test_a_message_the_contract_rejects_is_replayed_with_the_reason(user: str, reason: str) -> None:
    data = small()
    data["turns"][3]["user"] = user
    turn = parse_timeline(data, source="t.json").turns[3]
    assert turn.declarations == {}
    assert turn.rejection is not None
    assert reason in turn.rejection


def test_two_timelines_with_one_name_are_refused(tmp_path: Path) -> None:
    first = write(tmp_path / "a.json", small())
    second = write(tmp_path / "b.json", small())
    with pytest.raises(TimelineError, match="already used") as caught:
        load_timelines([first, second])
    assert caught.value.path == str(second)


def test_the_parsed_turns_keep_every_declared_field() -> None:
    data = small()
    data["turns"][3]["assistant"] = "It is PostgreSQL."
    data["turns"][3]["host_commands"] = ["forget", "Forget MODULE"]
    parsed = parse_timeline(copy.deepcopy(data))
    turn = parsed.turns[3]
    assert turn.number == 4
    assert turn.scripted_reply == "It is PostgreSQL."
    assert [(c.text, c.key) for c in turn.host_commands] == [("forget", None), ("Forget MODULE", "module")]
    assert parsed.tool_result(parsed.turns[0], "search_logs") == "nothing found"
    assert parsed.tool_result(parsed.turns[1], "search_logs") == "ERROR export timeout"


def test_a_rejected_correction_is_replayed_and_its_values_probed_as_rejected() -> None:
    """Fault: 'version=4.2; product=Ledger' then 'version=5.0; colour=blue' was refused as a timeline."""
    found = parse_timeline(
        {
            "schema": 1,
            "name": "rejected",
            "turns": [
                {"user": "version=4.2; product=Ledger"},
                {"user": "version=5.0; colour=blue"},
                {"user": "Which version are we on?"},
            ],
        },
        source="rejected.json",
    )
    second = found.turns[1]
    assert second.declarations == {}
    assert second.rejected == {"version": "5.0"}
    assert second.rejection is not None
    assert "colour" in second.rejection
    expected = expectations(found)
    assert expected[1].rejected == ()  # the refused message carries its own values on its turn
    assert expected[2].current == (("product", "Ledger"), ("version", "4.2"))
    assert expected[2].rejected == (("version", "5.0"),)
