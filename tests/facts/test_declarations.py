"""Two declarations run together with only a space between them are refused, never stored as one
value: ``module=Billing database=SQL Server 2022`` is two facts to the person who wrote it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextledger.exceptions import FactRejectedError
from contextledger.facts import ALLOWED_KEYS, FactsHost, FactStore, SQLiteFactStore, diagnose, parse_assertions
from contextledger.facts._forget import declared_values
from contextledger.facts._records import Candidate
from contextledger.messages import Message
from tests.facts.support import CUSTOM_SCHEMA, snapshot

RUN_ON = "module=Billing database=SQL Server 2022"
KEYS = sorted(ALLOWED_KEYS)


def refused(text: str, **schema: object) -> FactRejectedError:
    with pytest.raises(FactRejectedError) as caught:
        parse_assertions(text, **schema)  # type: ignore[arg-type]
    assert "nothing was admitted" in str(caught.value)
    return caught.value


def names_the_separators(reason: str) -> bool:
    return "';'" in reason and "line break" in reason


def test_the_reported_message_is_refused_naming_the_separators() -> None:
    error = refused(RUN_ON)
    assert error.problems, "a refusal lists its problems"
    assert all(names_the_separators(problem) for problem in error.problems)
    joined = " ".join(error.problems)
    assert "'module'" in joined
    assert "'database='" in joined
    assert "module=...; database=..." in joined  # the fix, written out
    assert "Billing" not in joined  # reasons never quote a value
    assert "SQL Server" not in joined


@pytest.mark.parametrize("separator", [";", "; ", "\n", "\r\n"])
def test_the_same_facts_with_a_separator_are_two_facts(separator: str) -> None:
    assert parse_assertions(f"module=Billing{separator}database=SQL Server 2022") == (
        Candidate("module", "Billing", "module=Billing"),
        Candidate("database", "SQL Server 2022", "database=SQL Server 2022"),
    )


@pytest.mark.parametrize(
    "text",
    [
        RUN_ON,
        "Module=Billing DATABASE=SQL Server 2022",  # keys are matched case-insensitively
        "module=Billing\tdatabase=SQL Server 2022",  # a tab is a space
        "module=Billing  database = SQL Server 2022",  # spaces around '=' as in any declaration
        "module= database=SQL Server 2022",  # the space right after the first '='
        "module=Billing database=SQL Server 2022 priority=P1",  # three run together
        "log=level=info module=billing",  # a value that is a log line holds an allowed key too
        "constraint=x y=z module=Billing",  # an allowed key later in the value still counts
        "database=Postgres, module=Billing priority=P1",  # after a comma's cut, in the next piece
        "product=Ledger; module=Billing database=SQL Server 2022",  # the whole message goes
    ],
)
def test_a_value_holding_an_allowed_key_after_a_space_is_refused(text: str) -> None:
    error = refused(text)
    assert any(names_the_separators(problem) for problem in error.problems)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("constraint=x y=z", "x y=z"),  # 'y' is not an allowed key
        ("constraint=a=b", "a=b"),  # '=' with no space before its word
        ("constraint=path/module=x", "path/module=x"),  # an allowed key after '/', not a space
        ("constraint=xmodule=y", "xmodule=y"),  # a longer word that ends in an allowed key
        ("constraint=a module2=b", "a module2=b"),  # a longer word that starts with one
        ("constraint=a (module=b)", "a (module=b)"),  # after '(', not a space
        ("constraint=a module b", "a module b"),  # an allowed key with no '=' after it
    ],
)
def test_a_value_holding_any_other_equals_sign_keeps_it(text: str, value: str) -> None:
    assert parse_assertions(text) == (Candidate("constraint", value, text),)


@pytest.mark.parametrize("text", ["query=a=b", "note=x y=z", "level=info module=billing"])
def test_a_segment_that_does_not_start_with_an_allowed_key_stays_prose(text: str) -> None:
    assert parse_assertions(text) == ()


def test_the_allowed_keys_are_the_schema_in_force() -> None:
    error = refused("team=Payments service=api", schema=CUSTOM_SCHEMA)
    assert any("'service='" in problem and names_the_separators(problem) for problem in error.problems)
    # 'module' is no key of this schema, so it is part of the value here.
    assert parse_assertions("team=Payments module=x", CUSTOM_SCHEMA) == (
        Candidate("team", "Payments module=x", "team=Payments module=x"),
    )


def test_every_equals_sign_of_the_run_is_diagnosed_as_refused() -> None:
    found = diagnose("product=Ledger; " + RUN_ON)
    assert [(d.key, d.outcome) for d in found] == [
        ("product", "pending"),
        ("module", "rejected"),
        ("database", "rejected"),
    ]
    assert found[1].value == "Billing"
    assert found[2].value == "SQL Server 2022"
    assert all(names_the_separators(d.reason) for d in found[1:])


def test_forget_finds_both_declarations_of_a_refused_run() -> None:
    history = [Message.user(RUN_ON)]
    assert declared_values(history, frozenset({"database"})) == {"SQL Server 2022"}
    assert declared_values(history, frozenset({"module"})) == {"Billing"}


def test_a_real_sqlite_store_keeps_nothing_of_the_batch(tmp_path: Path) -> None:
    path = tmp_path / "facts.sqlite3"
    with SQLiteFactStore(path, owner="ops") as store:
        host = FactsHost(store)
        first = asyncio.run(host.finish(host.begin("module=Reporting; database=PostgreSQL")))
        assert first is not None
        assert first.admission is not None
        before = snapshot(store)
        turn = asyncio.run(host.finish(host.begin("product=Ledger; " + RUN_ON)))
        assert turn is not None
        assert turn.admission is None
        assert isinstance(turn.rejection, FactRejectedError)
        assert names_the_separators(turn.describe())
        assert [(fact.key, fact.value) for fact in store.facts()] == [
            ("database", "PostgreSQL"),
            ("module", "Reporting"),
        ]
        assert snapshot(store)[2] == before[2]
        trail = store.review()
        assert [event.kind for event in trail[-3:]] == ["rejected"] * 3
        assert any(names_the_separators(event.describe()) for event in trail[-3:])
    with SQLiteFactStore(path, owner="ops") as reopened:
        assert [(fact.key, fact.value) for fact in reopened.facts()] == [
            ("database", "PostgreSQL"),
            ("module", "Reporting"),
        ]


def test_the_in_memory_store_keeps_nothing_either() -> None:
    store = FactStore()
    host = FactsHost(store)
    turn = asyncio.run(host.finish(host.begin(RUN_ON)))
    assert turn is not None
    assert turn.rejection is not None
    assert list(store.facts()) == []
    fixed = asyncio.run(host.finish(host.begin("module=Billing; database=SQL Server 2022")))
    assert fixed is not None
    assert fixed.admission is not None
    assert {fact.key: fact.value for fact in store.facts()} == {"module": "Billing", "database": "SQL Server 2022"}


# Property ---------------------------------------------------------------------------------------

two_keys = st.lists(st.sampled_from(KEYS), min_size=2, max_size=2, unique=True)
# A value ending in ',' is left out: ``k1=v, k2=v`` is two declarations by the comma rule.
plain_values = (
    st.text(st.characters(codec="utf-8", exclude_characters=";\r\n="), min_size=1, max_size=30)
    .map(str.strip)
    .filter(lambda value: value and not value.endswith(","))
)


@given(two_keys, plain_values, plain_values)
def test_any_two_declarations_are_refused_with_a_space_and_read_with_a_semicolon(
    keys: list[str], first: str, second: str
) -> None:
    one, two = keys
    refused(f"{one}={first} {two}={second}")
    assert parse_assertions(f"{one}={first}, {two}={second}") == parse_assertions(f"{one}={first}; {two}={second}")
    candidates = parse_assertions(f"{one}={first}; {two}={second}")
    assert [(c.key, c.value) for c in candidates] == [(one, first), (two, second)]
