"""What every fact store promises, run against the in-memory store and against Redis.

The ``make_store`` fixture runs each test on a fresh :class:`FactStore` and on a fresh owner of a
real redis-server, so "same contract" is a test result.  Every refusal is checked to leave the
store exactly as it was: epoch, turn and every fact with its provenance.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextledger.exceptions import ConfigurationError, FactRejectedError, FactsError, StaleTicketError
from contextledger.facts import (
    ALLOWED_KEYS,
    MAX_EVIDENCE_CHARS,
    MAX_FACTS,
    MAX_MESSAGE_CHARS,
    MAX_VALUE_CHARS,
    Admission,
    Candidate,
    Fact,
    FactMemory,
    Ticket,
    parse_assertions,
)
from tests.facts.conftest import MakeStore
from tests.facts.support import Clock, snapshot

KEYS = sorted(ALLOWED_KEYS)
START = Clock().now


def declare(store: FactMemory, text: str) -> Admission:
    """One user turn with the rule writer's reading of the message."""
    ticket = store.begin_turn(text)
    return store.apply(ticket, parse_assertions(text))


def refused(store: FactMemory, ticket: Ticket, candidates: list[Candidate]) -> FactRejectedError:
    """Apply a batch that must be refused, and check the store did not move at all."""
    before = snapshot(store)
    with pytest.raises(FactRejectedError) as caught:
        store.apply(ticket, candidates)
    assert snapshot(store) == before
    assert "nothing was admitted" in str(caught.value)
    assert "no fallback" in str(caught.value)
    assert caught.value.problems
    return caught.value


def test_store_satisfies_the_protocol(store: FactMemory) -> None:
    assert isinstance(store, FactMemory)


def test_a_new_store_is_empty(store: FactMemory) -> None:
    assert store.facts() == []
    assert store.get("module") is None
    assert store.turn == 0


def test_each_turn_gets_the_next_number_in_the_current_epoch(store: FactMemory) -> None:
    first = store.begin_turn("hello")
    second = store.begin_turn("module=Billing")
    assert (second.epoch, second.number) == (first.epoch, first.number + 1)
    assert second.user_text == "module=Billing"
    assert store.turn == second.number
    assert store.epoch == second.epoch


def test_the_seed_correction_replaces_both_keys_with_their_provenance(store: FactMemory) -> None:
    first = declare(store, "module=Reporting; database=PostgreSQL")
    assert [(f.key, f.value, f.evidence, f.turn) for f in first.admitted] == [
        ("module", "Reporting", "module=Reporting", 1),
        ("database", "PostgreSQL", "database=PostgreSQL", 1),
    ]
    assert first.replaced == first.evicted == ()
    second = declare(store, "module=Billing; database=SQL Server 2022")
    assert second.replaced == first.admitted
    assert second.evicted == ()
    recorded = START + timedelta(seconds=1)
    assert store.facts() == [
        Fact("database", "SQL Server 2022", "database=SQL Server 2022", 2, recorded),
        Fact("module", "Billing", "module=Billing", 2, recorded),
    ]
    assert store.get("MODULE") == second.admitted[0]
    assert all(f.recorded_at.tzinfo is not None and f.recorded_at.utcoffset() == timedelta(0) for f in store.facts())


def test_a_message_without_declarations_admits_nothing_and_is_not_an_error(store: FactMemory) -> None:
    declare(store, "module=Billing")
    before = store.facts()
    assert declare(store, "Where can I find logs?") == Admission()
    assert store.facts() == before


def test_facts_are_listed_oldest_turn_first_then_by_key(store: FactMemory) -> None:
    declare(store, "version=2; customer=Acme")
    declare(store, "module=Billing")
    declare(store, "version=3")
    assert [(f.key, f.turn) for f in store.facts()] == [("customer", 1), ("module", 2), ("version", 3)]


# Eviction --------------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [MAX_FACTS - 1, MAX_FACTS, MAX_FACTS + 1])
def test_store_bound(store: FactMemory, count: int) -> None:
    keys = ["version", "symptom", "product", "priority", "module", "log"][:count]
    admissions = [declare(store, f"{key}=v{turn}") for turn, key in enumerate(keys, 1)]
    assert len(store.facts()) == min(count, MAX_FACTS)
    evicted = [fact for admission in admissions for fact in admission.evicted]
    if count <= MAX_FACTS:
        assert evicted == []
    else:
        assert [(f.key, f.turn) for f in evicted] == [("version", 1)]
        assert store.get("version") is None


def test_eviction_breaks_a_tie_on_turn_by_the_smallest_key(store: FactMemory) -> None:
    declare(store, "version=1; customer=Acme; symptom=slow; database=Oracle; product=Ledger")
    admission = declare(store, "module=Billing")
    assert [f.key for f in admission.evicted] == ["customer"]
    admission = declare(store, "log=/var/log/app; priority=P1")
    assert [f.key for f in admission.evicted] == ["database", "product"]
    assert [f.key for f in store.facts()] == ["symptom", "version", "module", "log", "priority"]


def test_a_correction_renews_the_turn_so_the_corrected_fact_is_not_evicted_next(store: FactMemory) -> None:
    declare(store, "version=1; customer=Acme; symptom=slow; database=Oracle; product=Ledger")
    declare(store, "customer=Initech")  # the smallest key, now corrected at turn 2
    admission = declare(store, "module=Billing")
    assert [f.key for f in admission.evicted] == ["database"]
    assert store.get("customer") is not None


def test_a_full_batch_evicts_every_older_fact(store: FactMemory) -> None:
    declare(store, "version=1; customer=Acme; symptom=slow; database=Oracle; product=Ledger")
    admission = declare(store, "module=a; log=b; priority=c; environment=d; constraint=e")
    assert sorted(f.key for f in admission.evicted) == ["customer", "database", "product", "symptom", "version"]
    assert {f.turn for f in store.facts()} == {2}


# Rejections: each leaves the store as it was ----------------------------------------------------


@pytest.fixture
def seeded(store: FactMemory) -> FactMemory:
    declare(store, "module=Reporting; database=PostgreSQL")
    return store


SEED_TEXT = "module=Billing; database=SQL Server 2022"
MODULE = Candidate("module", "Billing", "module=Billing")
DATABASE = Candidate("database", "SQL Server 2022", "database=SQL Server 2022")


def test_the_exact_declarations_are_admitted_in_any_order(seeded: FactMemory) -> None:
    admission = seeded.apply(seeded.begin_turn(SEED_TEXT), [DATABASE, MODULE])
    assert [f.key for f in admission.admitted] == ["database", "module"]


@pytest.mark.parametrize(
    ("candidates", "expected"),
    [
        pytest.param(
            [MODULE, DATABASE, Candidate("team", "Payments", "module=Billing")], "not an allowed key", id="unknown-key"
        ),
        pytest.param([MODULE, Candidate("database", "", "database=SQL Server 2022")], "empty", id="empty-value"),
        pytest.param([MODULE, Candidate("database", "   ", "database=SQL Server 2022")], "empty", id="blank-value"),
        pytest.param([MODULE, DATABASE, MODULE], "duplicate", id="duplicate-candidate"),
        pytest.param(
            [MODULE, DATABASE, Candidate("MODULE", "Billing", "module=Billing")], "duplicate", id="duplicate-any-case"
        ),
        pytest.param([MODULE, Candidate("database", "SQL Server 2022", "")], "no evidence", id="missing-evidence"),
        pytest.param(
            [MODULE, Candidate("database", "SQL Server 2022", "database=SQL Server 2022 please")],
            "not an exact quote",
            id="evidence-not-in-message",
        ),
        pytest.param(
            [MODULE, Candidate("database", "SQL Server 2022", "module=Billing")],
            "does not contain the value",
            id="value-not-in-evidence",
        ),
        pytest.param(
            [MODULE, Candidate("database", "SQL Server 2022", "Database=SQL Server 2022")],
            "not an exact quote",
            id="evidence-case-changed",
        ),
        pytest.param(
            [MODULE, Candidate("database", "SQL Server", "database=SQL Server 2022")], "paraphrase", id="paraphrase"
        ),
        pytest.param(
            [MODULE, Candidate("database", "MS SQL Server 2022", "database=SQL Server 2022")],
            "paraphrase",
            id="embellished-value",
        ),
        pytest.param(
            [MODULE, DATABASE, Candidate("customer", "Billing", "module=Billing")], "may not add a key", id="added-key"
        ),
        pytest.param([MODULE], "may not drop a key", id="dropped-key"),
        pytest.param([], "may not drop a key", id="nothing-proposed"),
        pytest.param(
            [MODULE, Candidate("database", "SQL Server 2022", "x" * (MAX_EVIDENCE_CHARS + 1))],
            "over the limit",
            id="evidence-too-long",
        ),
        pytest.param(
            [MODULE, ("database", "SQL Server 2022", "database=SQL Server 2022")], "not a Candidate", id="tuple"
        ),
        pytest.param([MODULE, Candidate("database", 2022, "database=SQL Server 2022")], "non-text", id="value-not-str"),  # type: ignore[arg-type]
    ],
)
def test_every_faulty_batch_is_refused_whole(seeded: FactMemory, candidates: list[Candidate], expected: str) -> None:
    ticket = seeded.begin_turn(SEED_TEXT)
    error = refused(seeded, ticket, candidates)
    assert expected in " ".join(error.problems)
    # The ticket is still good: the faithful batch goes through afterwards.
    assert [f.value for f in seeded.apply(ticket, [MODULE, DATABASE]).admitted] == ["Billing", "SQL Server 2022"]


def test_evidence_must_quote_the_declaration_of_its_own_key(store: FactMemory) -> None:
    text = "module=Billing; customer=Billing Ltd"
    ticket = store.begin_turn(text)
    misplaced = [
        Candidate("module", "Billing", "customer=Billing Ltd"),
        Candidate("customer", "Billing Ltd", "customer=Billing Ltd"),
    ]
    error = refused(store, ticket, misplaced)
    assert "quotes another part of the message" in " ".join(error.problems)
    # A shorter quote of the right place is fine: it proves the user wrote the value there.
    admission = store.apply(ticket, [Candidate("module", "Billing", "=Billing"), misplaced[1]])
    assert [f.evidence for f in admission.admitted] == ["=Billing", "customer=Billing Ltd"]


def test_evidence_must_quote_the_winning_declaration(store: FactMemory) -> None:
    text = "module=Billing; module=Billing Core"
    ticket = store.begin_turn(text)
    error = refused(store, ticket, [Candidate("module", "Billing Core", "module=Billing")])
    assert "does not contain the value" in " ".join(error.problems)
    refused(store, ticket, [Candidate("module", "Billing", "module=Billing")])
    assert store.apply(ticket, [Candidate("module", "Billing Core", "module=Billing Core")]).admitted


def test_an_invalid_message_refuses_even_a_faithful_looking_batch(seeded: FactMemory) -> None:
    ticket = seeded.begin_turn("module=Billing; team=Payments")
    error = refused(seeded, ticket, [MODULE])
    assert "'team'" in " ".join(error.problems)


def test_keys_in_any_case_are_admitted_lower_cased(store: FactMemory) -> None:
    ticket = store.begin_turn("Module=Billing")
    (fact,) = store.apply(ticket, [Candidate("MODULE", "Billing", "Module=Billing")]).admitted
    assert fact.key == "module"
    assert store.get("module") == store.get("Module") == fact


@pytest.mark.parametrize("count", [MAX_FACTS - 1, MAX_FACTS, MAX_FACTS + 1])
def test_candidates_per_extraction_bound(store: FactMemory, count: int) -> None:
    text = "; ".join(f"{key}=value of {key}" for key in KEYS[:count])
    candidates = [Candidate(key, f"value of {key}", f"{key}=value of {key}") for key in KEYS[:count]]
    ticket = store.begin_turn(text)
    if count <= MAX_FACTS:
        assert len(store.apply(ticket, candidates).admitted) == count
    else:
        # The message itself is over the bound, so no batch can match it.
        assert any(f"declares {count} different keys" in p for p in refused(store, ticket, candidates).problems)
        # And a writer proposing more than five for a message of five is refused on its own count.
        five = store.begin_turn("; ".join(f"{key}=value of {key}" for key in KEYS[:MAX_FACTS]))
        problems = refused(store, five, candidates).problems
        assert any(f"{count} candidates were proposed, over the limit of {MAX_FACTS}" in p for p in problems)


@pytest.mark.parametrize("length", [MAX_VALUE_CHARS - 1, MAX_VALUE_CHARS, MAX_VALUE_CHARS + 1])
def test_value_bound_at_admission(store: FactMemory, length: int) -> None:
    value = "v" * length
    candidate = Candidate("symptom", value, f"symptom={value}")
    ticket = store.begin_turn(f"symptom={value}")
    if length <= MAX_VALUE_CHARS:
        assert store.apply(ticket, [candidate]).admitted[0].value == value
    else:
        assert any("over the limit of 256" in p for p in refused(store, ticket, [candidate]).problems)


@pytest.mark.parametrize("length", [MAX_EVIDENCE_CHARS - 1, MAX_EVIDENCE_CHARS, MAX_EVIDENCE_CHARS + 1])
def test_evidence_bound_at_admission(store: FactMemory, length: int) -> None:
    # The declaration is short; the writer quotes more of the message around it.
    text = "module=Billing\n" + "e" * 600
    evidence = text[:length]
    ticket = store.begin_turn(text)
    if length <= MAX_EVIDENCE_CHARS:
        assert store.apply(ticket, [Candidate("module", "Billing", evidence)]).admitted[0].evidence == evidence
    else:
        problems = refused(store, ticket, [Candidate("module", "Billing", evidence)]).problems
        assert any(f"{length} characters of evidence, over the limit of {MAX_EVIDENCE_CHARS}" in p for p in problems)


@pytest.mark.parametrize("length", [MAX_MESSAGE_CHARS - 1, MAX_MESSAGE_CHARS, MAX_MESSAGE_CHARS + 1])
def test_message_bound_at_begin_turn(store: FactMemory, length: int) -> None:
    text = "module=Billing;" + " " * (length - len("module=Billing;"))
    before = snapshot(store)
    if length <= MAX_MESSAGE_CHARS:
        assert declare(store, text).admitted[0].value == "Billing"
    else:
        with pytest.raises(FactRejectedError, match=f"{length} characters long, over the limit of 4096"):
            store.begin_turn(text)
        assert snapshot(store) == before


def test_a_forged_ticket_with_an_oversized_message_is_refused(store: FactMemory) -> None:
    real = store.begin_turn("module=Billing")
    forged = Ticket(real.epoch, real.number, "module=Billing" + " " * MAX_MESSAGE_CHARS)
    refused(store, forged, [MODULE])


def test_something_that_is_not_a_ticket_is_refused(store: FactMemory) -> None:
    store.begin_turn("module=Billing")
    before = snapshot(store)
    with pytest.raises(FactRejectedError, match="Ticket"):
        store.apply(("epoch", 1), [MODULE])  # type: ignore[arg-type]
    assert snapshot(store) == before


# Tickets and forgetting -------------------------------------------------------------------------


def test_an_older_turns_ticket_is_stale(seeded: FactMemory) -> None:
    old = seeded.begin_turn(SEED_TEXT)
    seeded.begin_turn("Where can I find logs?")
    before = snapshot(seeded)
    with pytest.raises(StaleTicketError, match="a newer turn has begun"):
        seeded.apply(old, [MODULE, DATABASE])
    assert snapshot(seeded) == before


def test_a_stale_ticket_is_refused_even_with_nothing_to_write(store: FactMemory) -> None:
    old = store.begin_turn("hello")
    store.forget()
    with pytest.raises(StaleTicketError):
        store.apply(old, [])


@pytest.mark.parametrize("forget_key", ["module", "database", None])
def test_no_extraction_begun_before_a_forget_can_write_after_it(seeded: FactMemory, forget_key: str | None) -> None:
    in_flight = seeded.begin_turn(SEED_TEXT)
    seeded.forget(forget_key)
    before = snapshot(seeded)
    with pytest.raises(StaleTicketError, match="a forget happened since"):
        seeded.apply(in_flight, [MODULE, DATABASE])
    assert snapshot(seeded) == before


def test_a_ticket_from_another_epoch_with_the_current_number_is_stale(store: FactMemory) -> None:
    ticket = store.begin_turn("module=Billing")
    forged = Ticket(ticket.epoch - 1, ticket.number, ticket.user_text)
    with pytest.raises(StaleTicketError):
        store.apply(forged, [MODULE])
    assert store.facts() == []


def test_forget_one_key_keeps_the_others_and_advances_the_epoch(seeded: FactMemory) -> None:
    database = seeded.get("database")
    epoch = seeded.epoch
    removed = seeded.forget("Module")
    assert [f.key for f in removed] == ["module"]
    assert (removed.epoch, removed.turn) == (seeded.epoch, seeded.turn)
    assert seeded.epoch == epoch + 1
    assert seeded.facts() == [database]


def test_forget_all_removes_every_fact_and_advances_the_epoch(seeded: FactMemory) -> None:
    facts = seeded.facts()
    epoch, turn = seeded.epoch, seeded.turn
    removed = seeded.forget()
    assert list(removed) == facts
    assert seeded.facts() == []
    assert (seeded.epoch, seeded.turn) == (epoch + 1, turn)


def test_forgetting_an_absent_key_still_advances_the_epoch(store: FactMemory) -> None:
    epoch = store.epoch
    in_flight = store.begin_turn("log=/var/log/app")
    assert store.forget("log") == ()
    assert store.epoch > epoch
    with pytest.raises(StaleTicketError):
        store.apply(in_flight, parse_assertions(in_flight.user_text))
    assert store.get("log") is None


@pytest.mark.parametrize("key", ["team", "", "modules", 3, b"module"])
def test_forgetting_something_that_is_not_a_key_changes_nothing(seeded: FactMemory, key: object) -> None:
    before = snapshot(seeded)
    with pytest.raises(FactsError, match="not a fact key"):
        seeded.forget(key)  # type: ignore[arg-type]
    assert snapshot(seeded) == before


def test_a_question_after_forget_recreates_nothing(seeded: FactMemory) -> None:
    seeded.forget()
    assert declare(seeded, "Which module and database are we on?") == Admission()
    assert seeded.facts() == []


def test_stores_opened_on_the_same_storage_share_facts_and_tickets(make_store: MakeStore) -> None:
    first, second = make_store(), make_store()
    ticket = first.begin_turn("module=Billing")
    second.begin_turn("Where can I find logs?")
    with pytest.raises(StaleTicketError):
        first.apply(ticket, [MODULE])
    declare(first, "module=Billing")
    assert [f.value for f in second.facts()] == ["Billing"]
    second.forget("module")
    assert first.facts() == []


def test_a_clock_without_a_time_zone_is_refused(make_store: MakeStore) -> None:
    naive = make_store(clock=lambda: datetime(2025, 1, 1))
    ticket = naive.begin_turn("module=Billing")
    before = snapshot(naive)
    with pytest.raises(ConfigurationError, match="aware datetime"):
        naive.apply(ticket, [MODULE])
    assert snapshot(naive) == before


def test_recorded_at_is_converted_to_utc(make_store: MakeStore) -> None:
    paris = timezone(timedelta(hours=1))
    store = make_store(clock=lambda: datetime(2025, 3, 1, 10, 30, tzinfo=paris))
    (fact,) = declare(store, "module=Billing").admitted
    assert fact.recorded_at == datetime(2025, 3, 1, 9, 30, tzinfo=timezone.utc)
    assert fact.recorded_at.utcoffset() == timedelta(0)
    assert store.facts() == [fact]


# A sequential model --------------------------------------------------------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(st.just("declare"), st.lists(st.sampled_from(KEYS), min_size=0, max_size=MAX_FACTS, unique=True)),
        st.tuples(st.just("forget"), st.sampled_from([*KEYS, None])),
        st.tuples(st.just("stale"), st.sampled_from(KEYS)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations)
def test_any_sequence_of_operations_matches_a_plain_model(
    make_store: MakeStore, steps: list[tuple[str, object]]
) -> None:
    store = make_store()
    store.forget()  # the fixture's storage is shared across examples: start each from nothing
    model: dict[str, tuple[str, int]] = {}
    for number, (kind, argument) in enumerate(steps):
        if kind == "declare":
            assert isinstance(argument, list)
            text = "; ".join(f"{key}=v{number}" for key in argument)
            ticket = store.begin_turn(text)
            turn = ticket.number
            for key in argument:
                model[key] = (f"v{number}", turn)
            declare_keys = set(argument)
            while len(model) > MAX_FACTS:
                oldest = min((k for k in model if k not in declare_keys), key=lambda k: (model[k][1], k))
                del model[oldest]
            store.apply(ticket, parse_assertions(text))
        elif kind == "forget":
            if argument is None:
                model.clear()
            else:
                model.pop(str(argument), None)
            store.forget(None if argument is None else str(argument))
        else:
            ticket = store.begin_turn(f"{argument}=late")
            store.begin_turn("next")
            with pytest.raises(StaleTicketError):
                store.apply(ticket, parse_assertions(ticket.user_text))
        assert {f.key: (f.value, f.turn) for f in store.facts()} == model
        assert len(store.facts()) <= MAX_FACTS


def test_extraction_runs_in_asyncio_tasks_on_one_store(store: FactMemory) -> None:
    from contextledger.facts import RuleWriter, extract  # noqa: PLC0415

    async def main() -> Admission:
        ticket = store.begin_turn(SEED_TEXT)
        return await extract(store, RuleWriter(), ticket)

    admission = asyncio.run(main())
    assert [f.value for f in admission.admitted] == ["Billing", "SQL Server 2022"]
