"""Probe expectations follow the facts contract, turn by turn, and the presence checks are exact."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger.facts import FactStore, RuleWriter, extract
from contextledger.lab import parse_timeline
from contextledger.lab._probes import check_context, decoded_text, is_present
from contextledger.messages import FunctionCallContent, Message
from tests.lab.support import expectations, final_state
from tests.sizes import examples


def _timeline(*turns: dict[str, Any]) -> Any:
    return parse_timeline({"schema": 1, "name": "t", "turns": list(turns)}, source="t.json")


def test_a_correction_is_superseded_from_the_next_turn_on() -> None:
    found = expectations(
        _timeline(
            {"user": "module=Reporting; database=PostgreSQL"},
            {"user": "module=Billing; database=SQL Server 2022"},
            {"user": "Which database?"},
        )
    )
    assert found[0].current == (("database", "PostgreSQL"), ("module", "Reporting"))
    # On the correcting turn the old value travels with the correction under every policy: not probed.
    assert found[1].current == (("database", "SQL Server 2022"), ("module", "Billing"))
    assert found[1].superseded == ()
    assert found[2].superseded == (("database", "PostgreSQL"), ("module", "Reporting"))


def test_the_sixth_key_evicts_the_oldest_turn_and_ties_go_to_the_smaller_key() -> None:
    found = expectations(
        _timeline(
            {"user": "product=Helix; customer=Contoso"},
            {"user": "module=Invoicing"},
            {"user": "database=MariaDB"},
            {"user": "priority=urgent"},
            {"user": "version=LTS 8"},
            {"user": "Anything else?"},
            {"user": "environment=staging"},
            {"user": "Anything else?"},
        )
    )
    # Turn 5 still sends six values: the eviction happens after its extraction.
    assert len(found[4].current) == 6
    assert found[5].evicted == (("customer", "Contoso"),)
    assert ("customer", "Contoso") not in found[5].current
    assert found[7].evicted == (("customer", "Contoso"), ("product", "Helix"))


def test_forget_one_key_then_everything_and_a_redeclared_value_is_current_again() -> None:
    found = expectations(
        _timeline(
            {"user": "module=Reporting; database=PostgreSQL"},
            {"user": "Skip the database.", "host_commands": ["forget database"]},
            {"user": "database=PostgreSQL"},
            {"user": "Start over.", "host_commands": ["forget"]},
            {"user": "Anything?"},
        )
    )
    assert found[1].forgotten == (("database", "PostgreSQL"),)
    assert found[1].current == (("module", "Reporting"),)
    assert found[2].forgotten == ()
    assert ("database", "PostgreSQL") in found[2].current
    assert found[3].current == ()
    assert found[3].forgotten == (("database", "PostgreSQL"), ("module", "Reporting"))
    assert final_state(_timeline({"user": "module=Lima"}, {"user": "module=Oslo"})) == (
        (("module", "Oslo"),),
        (("module", "Lima"),),
    )


def test_a_prohibition_is_the_current_constraint() -> None:
    found = expectations(
        _timeline(
            {"user": "constraint=never restart production"},
            {"user": "Hello"},
            {"user": "x", "host_commands": ["forget constraint"]},
        )
    )
    assert [e.prohibition for e in found] == ["never restart production", "never restart production", None]


def test_check_context_reports_exact_presence() -> None:
    expectation = expectations(
        _timeline(
            {"user": "module=Reporting; database=PostgreSQL; constraint=no restarts"},
            {"user": "module=Billing"},
            {"user": "Which?"},
        )
    )[2]
    outcome = check_context(expectation, "module: Billing; the database is PostgreSQL; reporting")
    assert outcome.current_present == (("database", "PostgreSQL"), ("module", "Billing"))
    assert outcome.current_missing == (("constraint", "no restarts"),)
    assert outcome.superseded_present == ()  # case matters: "reporting" is not "Reporting"
    assert outcome.prohibition_present is False
    outcome = check_context(expectation, "Reporting, no restarts")
    assert outcome.superseded_present == (("module", "Reporting"),)
    assert outcome.prohibition_present is True


def test_presence_is_exact_and_case_sensitive() -> None:
    assert is_present("SQL Server 2022", "database: SQL Server 2022.")
    assert not is_present("PostgreSQL", "postgresql")


def test_decoded_text_reads_tool_calls_and_results_as_decoded_json() -> None:
    messages = [
        Message.user("hello"),
        Message.assistant(calls=[FunctionCallContent("c1", "search_logs", '{"query": "path \\u003capp\\u003e"}')]),
        Message.tool("c1", '{"rows": ["say \\"hi\\"", "PostgreSQL is slow"]}'),
    ]
    text = decoded_text([messages])
    assert "path <app>" in text
    assert 'say "hi"' in text
    assert "PostgreSQL is slow" in text


def _block_after(*messages: str) -> str:
    store = FactStore()
    for text in messages:
        asyncio.run(extract(store, RuleWriter(), store.begin_turn(text)))
    return store.to_prompt_block()


def test_a_facts_block_is_read_by_its_value_fields_only() -> None:
    """Fault: 'module=evidence' then 'module=Billing' was reported present because the block says 'evidence'."""
    block = _block_after("module=evidence", "module=Billing")
    assert "evidence" in block  # the block's own wording ...
    text = decoded_text([[Message.system(block), Message.user("Which module is affected?")]])
    assert not is_present("evidence", text)  # ... is never read as the superseded value
    assert is_present("Billing", text)


def test_a_facts_block_value_is_read_decoded() -> None:
    """Fault: log=/var/log/<app>/export.log was reported missing because the block holds it escaped."""
    block = _block_after("log=/var/log/<app>/export.log")
    assert "/var/log/<app>/export.log" not in block  # escaped in the block
    text = decoded_text([[Message.system(block)]])
    assert is_present("/var/log/<app>/export.log", text)


def test_a_policys_own_labels_are_not_read() -> None:
    text = decoded_text([[Message.assistant("[Summary, generated and unverified] all good")]], ("[Summary,",))
    assert not is_present("Summary", text)


KEYS = ("product", "module", "priority", "database", "customer", "version", "environment")


@st.composite
def timelines(draw: st.DrawFn) -> list[dict[str, Any]]:
    turns = []
    for _ in range(draw(st.integers(1, 25))):
        keys = draw(st.lists(st.sampled_from(KEYS), max_size=3, unique=True))
        # Same-width values: no value can contain another, so every probe is decidable.
        parts = [f"{key}={key}-{draw(st.integers(0, 6)):02d}" for key in keys]
        turn: dict[str, Any] = {"user": "\n".join(parts) if parts else "Any news?"}
        command = draw(st.sampled_from([None, None, None, None, "forget", *(f"forget {k}" for k in KEYS)]))
        if command is not None:
            turn["host_commands"] = [command]
        turns.append(turn)
    return turns


@settings(max_examples=examples(150), deadline=None)
@given(timelines())
def test_expectations_match_what_the_fact_store_holds_on_every_turn(turns: list[dict[str, Any]]) -> None:
    """The probes are computed independently of the store; on every turn they must agree with it."""
    timeline = _timeline(*turns)

    async def replay() -> None:
        store = FactStore()
        writer = RuleWriter()
        for turn, expectation in zip(timeline.turns, expectations(timeline)):
            for command in turn.host_commands:
                if command.key is None:
                    store.forget()
                else:
                    store.forget(command.key)
            ticket = store.begin_turn(turn.user)
            held = {fact.key: fact.value for fact in store.facts()}
            held.update(turn.declarations)  # the current message travels with the stored facts
            assert dict(expectation.current) == held
            old = [set(expectation.superseded), set(expectation.forgotten), set(expectation.evicted)]
            assert not (old[0] & old[1])
            assert not (old[0] & old[2])
            assert not (old[1] & old[2])
            assert not set().union(*old) & set(expectation.current)
            await extract(store, writer, ticket)
        current, _ = final_state(timeline)
        assert dict(current) == {fact.key: fact.value for fact in store.facts()}

    asyncio.run(replay())
