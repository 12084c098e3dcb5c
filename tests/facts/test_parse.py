"""Reading declarations: the rules of design.md#declarations, each bound at N-1, N and N+1, and every way a message's
declarations can be invalid."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextledger.exceptions import FactRejectedError
from contextledger.facts import (
    ALLOWED_KEYS,
    MAX_EVIDENCE_CHARS,
    MAX_FACTS,
    MAX_MESSAGE_CHARS,
    MAX_VALUE_CHARS,
    parse_assertions,
)
from contextledger.facts._records import Candidate

KEYS = sorted(ALLOWED_KEYS)


def rejected(text: object) -> FactRejectedError:
    with pytest.raises(FactRejectedError) as caught:
        parse_assertions(text)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "nothing was admitted" in message
    assert "no fallback" in message
    assert caught.value.problems, "a rejection lists its problems"
    return caught.value


def test_the_seed_messages() -> None:
    assert parse_assertions("module=Reporting; database=PostgreSQL") == (
        Candidate("module", "Reporting", "module=Reporting"),
        Candidate("database", "PostgreSQL", "database=PostgreSQL"),
    )
    assert parse_assertions("module=Billing; database=SQL Server 2022") == (
        Candidate("module", "Billing", "module=Billing"),
        Candidate("database", "SQL Server 2022", "database=SQL Server 2022"),
    )


def test_inner_spaces_stay_and_outer_spaces_go() -> None:
    (candidate,) = parse_assertions("   database =   SQL Server 2022   ")
    assert candidate == Candidate("database", "SQL Server 2022", "database =   SQL Server 2022")


def test_split_on_the_first_equals_sign() -> None:
    assert parse_assertions("log=level=debug=yes") == (Candidate("log", "level=debug=yes", "log=level=debug=yes"),)


@pytest.mark.parametrize("separator", [";", "\n", "\r\n", "\r", " ;\n "])
def test_semicolons_and_line_breaks_separate_declarations(separator: str) -> None:
    text = f"product=Ledger{separator}version=4.2{separator}priority=P1"
    assert [(c.key, c.value) for c in parse_assertions(text)] == [
        ("product", "Ledger"),
        ("version", "4.2"),
        ("priority", "P1"),
    ]


def test_a_comma_does_not_separate() -> None:
    assert parse_assertions("constraint=no downtime, no data loss") == (
        Candidate("constraint", "no downtime, no data loss", "constraint=no downtime, no data loss"),
    )


def test_keys_are_case_insensitive_and_lower_cased_while_evidence_keeps_the_user_spelling() -> None:
    assert parse_assertions("MODULE=Billing; DataBase=Oracle") == (
        Candidate("module", "Billing", "MODULE=Billing"),
        Candidate("database", "Oracle", "DataBase=Oracle"),
    )


def test_the_last_declaration_of_a_key_wins_and_takes_its_place() -> None:
    text = "module=Reporting; database=PostgreSQL\nModule=Billing"
    assert parse_assertions(text) == (
        Candidate("database", "PostgreSQL", "database=PostgreSQL"),
        Candidate("module", "Billing", "Module=Billing"),
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Where can I find logs?",
        "The build is green; thanks",
        "if a + b = c then we are fine",
        "=orphan value",
        "see https://example.test/?q=1",
        "2+2=4",
    ],
)
def test_prose_questions_and_formulas_declare_nothing(text: str) -> None:
    assert parse_assertions(text) == ()


def test_prose_around_declarations_is_ignored() -> None:
    text = "Hello there.\nmodule=Billing\nCan you check the invoices?"
    assert parse_assertions(text) == (Candidate("module", "Billing", "module=Billing"),)


def test_an_unknown_key_invalidates_the_whole_message() -> None:
    error = rejected("module=Billing; team=Payments")
    assert len(error.problems) == 1
    assert "'team'" in error.problems[0]
    assert "not an allowed key" in error.problems[0]


def test_an_empty_value_invalidates_the_whole_message() -> None:
    error = rejected("module=Billing; database=   ")
    assert len(error.problems) == 1
    assert "empty value" in error.problems[0]
    assert "database" in error.problems[0]


def test_every_problem_is_listed_not_only_the_first() -> None:
    error = rejected("team=Payments; module=; owner=ada; log=" + "x" * (MAX_VALUE_CHARS + 1))
    assert len(error.problems) == 4
    joined = " ".join(error.problems)
    for expected in ("'team'", "'owner'", "module", f"{MAX_VALUE_CHARS + 1} characters"):
        assert expected in joined


def test_a_message_that_is_not_text_is_refused() -> None:
    error = rejected(b"module=Billing")
    assert "bytes" in error.problems[0]


# Bounds, each at N-1, N and N+1 -------------------------------------------------------------


@pytest.mark.parametrize("length", [MAX_VALUE_CHARS - 1, MAX_VALUE_CHARS, MAX_VALUE_CHARS + 1])
def test_value_bound(length: int) -> None:
    value = "v" * length
    text = f"symptom={value}"
    if length <= MAX_VALUE_CHARS:
        assert parse_assertions(text) == (Candidate("symptom", value, text),)
    else:
        error = rejected(text)
        assert error.problems == (
            f"the value of 'symptom' is {length} characters long, over the limit of {MAX_VALUE_CHARS}",
        )


@pytest.mark.parametrize("length", [MAX_EVIDENCE_CHARS - 1, MAX_EVIDENCE_CHARS, MAX_EVIDENCE_CHARS + 1])
def test_evidence_bound(length: int) -> None:
    # Spaces before "=" stay inside the declaration as written, so the quote can outgrow the value.
    declaration = "module" + " " * (length - len("module=x")) + "=x"
    assert len(declaration) == length
    if length <= MAX_EVIDENCE_CHARS:
        assert parse_assertions(declaration) == (Candidate("module", "x", declaration),)
    else:
        error = rejected(declaration)
        assert error.problems == (
            f"the declaration of 'module' is {length} characters long, over the evidence limit of {MAX_EVIDENCE_CHARS}",
        )


@pytest.mark.parametrize("length", [MAX_MESSAGE_CHARS - 1, MAX_MESSAGE_CHARS, MAX_MESSAGE_CHARS + 1])
def test_message_bound(length: int) -> None:
    text = "module=Billing\n" + "." * (length - len("module=Billing\n"))
    assert len(text) == length
    if length <= MAX_MESSAGE_CHARS:
        assert parse_assertions(text) == (Candidate("module", "Billing", "module=Billing"),)
    else:
        error = rejected(text)
        assert f"{length} characters long, over the limit of {MAX_MESSAGE_CHARS}" in error.problems[0]
        assert "never truncated" in error.problems[0]


@pytest.mark.parametrize("count", [MAX_FACTS - 1, MAX_FACTS, MAX_FACTS + 1])
def test_keys_per_message_bound(count: int) -> None:
    text = "; ".join(f"{key}=value {key}" for key in KEYS[:count])
    if count <= MAX_FACTS:
        assert [c.key for c in parse_assertions(text)] == KEYS[:count]
    else:
        error = rejected(text)
        assert f"declares {count} different keys" in error.problems[0]


def test_redeclaring_a_key_does_not_count_twice_against_the_bound() -> None:
    text = "; ".join(f"{key}=a" for key in KEYS[:MAX_FACTS]) + f"; {KEYS[0]}=b"
    candidates = parse_assertions(text)
    assert len(candidates) == MAX_FACTS
    assert candidates[-1] == Candidate(KEYS[0], "b", f"{KEYS[0]}=b")


# Properties -----------------------------------------------------------------------------------

values = (
    st.text(st.characters(codec="utf-8", exclude_characters=";\r\n"), min_size=1, max_size=40)
    .map(str.strip)
    .filter(bool)
)
spellings = st.sampled_from(KEYS).flatmap(
    lambda key: st.lists(st.booleans(), min_size=len(key), max_size=len(key)).map(
        lambda upper: "".join(c.upper() if u else c for c, u in zip(key, upper))
    )
)
declarations = st.lists(
    st.tuples(spellings, values, st.sampled_from(["", " ", "  "]), st.sampled_from([";", "\n", "; ", "\r\n"])),
    max_size=8,
)


@given(declarations)
def test_parsing_follows_the_rules_for_any_valid_declarations(items: list[tuple[str, str, str, str]]) -> None:
    text = "".join(f"{pad}{key}{pad}={pad}{value}{pad}{separator}" for key, value, pad, separator in items)
    expected: dict[str, str] = {}
    for key, value, _, _ in items:
        expected.pop(key.lower(), None)
        expected[key.lower()] = value
    if len(expected) > MAX_FACTS:
        rejected(text)
        return
    candidates = parse_assertions(text)
    assert {c.key: c.value for c in candidates} == expected
    assert [c.key for c in candidates] == list(expected)
    for candidate in candidates:
        assert candidate.evidence in text
        assert candidate.value in candidate.evidence
        assert candidate.evidence == candidate.evidence.strip()
        assert candidate.evidence.lower().startswith(candidate.key)
