"""Declarations after prose (design.md#declarations) and a diagnostic for every '=' of every message."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextledger.agents import Agent, FactsProvider
from contextledger.clients import OfflineModel
from contextledger.exceptions import FactRejectedError
from contextledger.facts import Diagnostic, FactStore, RuleWriter, diagnose, extract, parse_assertions


@pytest.mark.parametrize(
    ("text", "declared"),
    [
        ("Sorry, I was wrong: database=SQL Server 2022", {"database": ("SQL Server 2022", "database=SQL Server 2022")}),
        (
            "Hi, I'm calling about… customer=Acme GmbH; module=Billing",
            {"customer": ("Acme GmbH", "customer=Acme GmbH"), "module": ("Billing", "module=Billing")},
        ),
        ("(module=Billing", {"module": ("Billing", "module=Billing")}),
        ("first,module=Billing", {"module": ("Billing", "module=Billing")}),
        ("note:Module=Billing", {"module": ("Billing", "Module=Billing")}),
        ("set timeout=30 please", {}),
        ("see https://x.test/?version=2", {}),
        ("/a.b=c and then", {}),
        ("level=info module=billing", {}),
        ("we ran x-database=1", {}),
        ("the 9database=1 thing", {}),
        ("after prose database =spaced", {}),
    ],
)
def test_declarations_after_prose_follow_spec_11(text: str, declared: dict[str, tuple[str, str]]) -> None:
    found = {c.key: (c.value, c.evidence) for c in parse_assertions(text)}
    assert found == declared
    diagnostics = diagnose(text)
    assert len(diagnostics) == text.count("=")  # every '=' explained
    if not declared:
        assert {d.outcome for d in diagnostics} == {"prose"}
        assert all(d.reason.startswith("prose") or "value of" in d.reason for d in diagnostics)


def test_an_unknown_key_after_prose_refuses_nothing_but_one_that_starts_a_segment_refuses_all() -> None:
    assert [c.key for c in parse_assertions("set timeout=30; module=Billing")] == ["module"]
    with pytest.raises(FactRejectedError, match="'timeout' is not an allowed key"):
        parse_assertions("timeout=30; module=Billing")


def test_each_outcome_has_its_reason() -> None:
    store = FactStore()
    asyncio.run(extract(store, RuleWriter(), store.begin_turn("database=PostgreSQL 15")))
    text = "module=Reporting; Sorry: module=Billing; database=SQL Server 2022; set level=3"
    admission = asyncio.run(extract(store, RuleWriter(), store.begin_turn(text)))
    found = diagnose(text, admission=admission)
    assert [(d.outcome, d.key) for d in found] == [
        ("replaced", "module"),
        ("admitted", "module"),
        ("admitted", "database"),
        ("prose", None),
    ]
    assert "replaced by a later declaration of 'module'" in found[0].reason
    assert found[1].reason.startswith("a new fact")
    assert found[2].reason.startswith("corrects the value admitted at turn 1")
    assert "'level' is not an allowed key" in found[3].reason
    assert text[found[1].position] == "="

    refused_text = "module=Billing; colour=blue"
    ticket = store.begin_turn(refused_text)
    with pytest.raises(FactRejectedError) as refused:
        asyncio.run(extract(store, RuleWriter(), ticket))
    outcomes = diagnose(refused_text, rejection=refused.value)
    assert [d.outcome for d in outcomes] == ["rejected", "rejected"]
    assert "the declaration of 'colour' in this message was refused" in outcomes[0].reason
    assert "'colour' is not an allowed key" in outcomes[1].reason
    assert [d.outcome for d in diagnose("module=Billing")] == ["pending"]


def test_no_reason_ever_quotes_a_value() -> None:
    text = "module=Secret Value; database=; Sorry: product=" + "v" * 300
    for diagnostic in diagnose(text):
        assert "Secret Value" not in diagnostic.reason
        assert "vvv" not in diagnostic.reason


@given(st.text(alphabet="ab =;:,(\n?/.mdoule", max_size=60))
def test_every_equals_sign_of_any_text_gets_exactly_one_diagnostic(text: str) -> None:
    diagnostics = diagnose(text)
    assert [d.position for d in diagnostics] == [index for index, char in enumerate(text) if char == "="]
    assert all(isinstance(d, Diagnostic) and d.reason for d in diagnostics)


def test_the_provider_turn_carries_the_diagnostics_for_the_lab_and_the_api() -> None:
    store = FactStore()
    provider = FactsProvider(store)
    agent = Agent(OfflineModel(), name="main", context_providers=[provider])
    session = agent.create_session()
    asyncio.run(agent.run("Sorry, I was wrong: database=SQL Server 2022 and timeout=3", session=session))
    turn = provider.last_turn
    assert turn is not None
    assert [(d.outcome, d.key, d.value) for d in turn.diagnostics] == [("prose", None, None), ("prose", None, None)]
    asyncio.run(agent.run("Sorry, I was wrong: database=SQL Server 2022", session=session))
    turn = provider.last_turn
    assert turn is not None
    assert [(d.outcome, d.key, d.evidence) for d in turn.diagnostics] == [
        ("admitted", "database", "database=SQL Server 2022")
    ]
    assert "admitted database='SQL Server 2022'" in turn.describe()


def test_the_model_writer_on_the_offline_model_reads_declarations_after_prose_for_any_schema() -> None:
    from contextledger.facts import FactSchema, ModelWriter  # noqa: PLC0415

    custom = FactSchema(frozenset({"owner_team", "region"}))
    for schema, text, expected in (
        (None, "Sorry, I was wrong: database=SQL Server 2022", [("database", "SQL Server 2022")]),
        (
            custom,
            "about it: owner_team=Payments; see ?region=x; region=EU",
            [("owner_team", "Payments"), ("region", "EU")],
        ),
    ):
        store = FactStore() if schema is None else FactStore(schema=schema)
        writer = ModelWriter(OfflineModel(), schema=store.schema)
        admission = asyncio.run(extract(store, writer, store.begin_turn(text)))
        assert [(fact.key, fact.value) for fact in admission.admitted] == expected
