"""What every fact store promises, run against each store under the seed's schema and a custom one.

The ``make_store`` fixture runs each test on a fresh :class:`FactStore`, a fresh SQLite file and a
fresh owner of a real redis-server, and this module's ``schema`` fixture runs each of those under
the seed's schema and under :data:`CUSTOM_SCHEMA`, whose keys and every bound differ; so "same
contract for every store and every schema" is a test result.  Cases name keys by the role they play
(:class:`Words`: the seed's words are the ones these cases were first written with) and bounds by
the schema, so each case checks the same rule at the same place, N-1, N and N+1 included, under
both.  Every refusal is checked to leave the store exactly as it was: epoch, turn and every fact
with its provenance.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextledger.exceptions import ConfigurationError, FactRejectedError, FactsError, StaleTicketError
from contextledger.facts import DEFAULT_SCHEMA, Admission, Fact, FactSchema, diagnose, parse_assertions
from contextledger.facts._records import Candidate, Ticket
from contextledger.facts._store import FactMemory
from tests.facts.conftest import MakeStore
from tests.facts.support import CUSTOM_SCHEMA, Clock, snapshot
from tests.sizes import examples

START = Clock().now
BOUNDS = ("max_facts", "max_value_chars", "max_evidence_chars", "max_message_chars")


@dataclass(frozen=True)
class Words:
    """The keys the cases use, by role, for one schema.

    ``secondary`` sorts before ``primary``; ``batch`` holds ``max_facts`` declarations written
    out of key order, its smallest key is ``other`` and its second smallest ``secondary``;
    ``pair`` and ``fresh_batch`` share no key with ``batch`` (nor ``pair`` with ``primary``).
    """

    schema: FactSchema
    primary: str
    secondary: str
    other: str
    late: str
    absent: str
    free: str
    outsider: str
    fill: tuple[str, ...]
    batch: tuple[tuple[str, str], ...]
    pair: tuple[tuple[str, str], ...]
    fresh_batch: tuple[tuple[str, str], ...]

    @property
    def text(self) -> str:
        """The seed's correction: both keys in one message."""
        return f"{self.primary}=Billing; {self.secondary}=SQL Server 2022"

    @property
    def first(self) -> Candidate:
        return Candidate(self.primary, "Billing", f"{self.primary}=Billing")

    @property
    def second(self) -> Candidate:
        return Candidate(self.secondary, "SQL Server 2022", f"{self.secondary}=SQL Server 2022")

    def keys(self) -> list[str]:
        return sorted(self.schema.keys)


def written(declarations: tuple[tuple[str, str], ...]) -> str:
    return "; ".join(f"{key}={value}" for key, value in declarations)


def keys_in_order(declarations: tuple[tuple[str, str], ...]) -> list[str]:
    return sorted(key for key, _ in declarations)


SEED_WORDS = Words(
    DEFAULT_SCHEMA,
    primary="module",
    secondary="database",
    other="customer",
    late="version",
    absent="log",
    free="symptom",
    outsider="team",
    fill=("version", "symptom", "product", "priority", "module", "log"),
    batch=(("version", "1"), ("customer", "Acme"), ("symptom", "slow"), ("database", "Oracle"), ("product", "Ledger")),
    pair=(("log", "/var/log/app"), ("priority", "P1")),
    fresh_batch=(("module", "a"), ("log", "b"), ("priority", "c"), ("environment", "d"), ("constraint", "e")),
)
CUSTOM_WORDS = Words(
    CUSTOM_SCHEMA,
    primary="team",
    secondary="service",
    other="owner",
    late="tier",
    absent="region",
    free="stage",
    outsider="module",
    fill=("tier", "stage", "site", "queue", "team"),
    batch=(("tier", "1"), ("owner", "Acme"), ("stage", "slow"), ("service", "Oracle")),
    pair=(("region", "/var/log/app"), ("queue", "P1")),
    fresh_batch=(("team", "a"), ("region", "b"), ("queue", "c"), ("site", "d")),
)
WORDS = {words.schema: words for words in (SEED_WORDS, CUSTOM_WORDS)}


@pytest.fixture(params=[pytest.param(DEFAULT_SCHEMA, id="seed"), pytest.param(CUSTOM_SCHEMA, id="custom")])
def schema(request: pytest.FixtureRequest) -> FactSchema:
    """Overrides the facts fixture: every store of this suite follows the seed's schema, then the custom one."""
    value = request.param
    assert isinstance(value, FactSchema)
    return value


@pytest.fixture
def words(schema: FactSchema) -> Words:
    return WORDS[schema]


def declare(store: FactMemory, text: str) -> Admission:
    """One user turn with the rule writer's reading of the message."""
    ticket = store.begin_turn(text)
    return store.apply(ticket, parse_assertions(text, store.schema))


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


def test_the_custom_schema_differs_from_the_seed_in_keys_and_every_bound() -> None:
    assert not CUSTOM_SCHEMA.keys & DEFAULT_SCHEMA.keys
    for bound in BOUNDS:
        assert getattr(CUSTOM_SCHEMA, bound) != getattr(DEFAULT_SCHEMA, bound)


@pytest.mark.parametrize("words", [pytest.param(SEED_WORDS, id="seed"), pytest.param(CUSTOM_WORDS, id="custom")])
def test_the_words_play_their_roles_in_their_schema(words: Words) -> None:
    """What the cases rely on, so a case that passes under one schema tests the same rule under the other."""
    schema = words.schema
    roles = [words.primary, words.secondary, words.other, words.late, words.absent, words.free]
    assert set(roles) <= schema.keys
    assert len(set(roles) - {words.absent, words.free}) == 4
    assert words.outsider not in schema.keys
    assert f"{words.primary}s" not in schema.keys
    assert words.secondary < words.primary
    assert len(schema.keys) >= schema.max_facts + 1
    assert len(set(words.fill)) == len(words.fill) == schema.max_facts + 1
    assert set(words.fill) <= schema.keys
    batch = [key for key, _ in words.batch]
    assert len(set(batch)) == len(batch) == schema.max_facts
    assert batch != sorted(batch)  # the tie-break is by key, not by place in the message
    assert keys_in_order(words.batch)[:2] == [words.other, words.secondary]
    assert schema.max_facts >= 4  # the second eviction still chooses among older facts
    assert words.primary not in batch
    pair = {key for key, _ in words.pair}
    assert len(pair) == 2
    assert not pair & {*batch, words.primary}
    fresh = {key for key, _ in words.fresh_batch}
    assert len(fresh) == schema.max_facts
    assert not fresh & set(batch)
    assert {*batch, *pair, *fresh} <= schema.keys
    # Each bound is reached on its own: one over the value bound is still within evidence and
    # message, one over the evidence bound still within the message.
    assert len(f"{words.free}=") + schema.max_value_chars + 1 <= schema.max_evidence_chars
    assert len(f"{words.primary}=Billing\n") + schema.max_evidence_chars <= schema.max_message_chars
    declaring_every_key = "; ".join(f"{key}=value of {key}" for key in words.keys()[: schema.max_facts + 1])
    assert len(declaring_every_key) <= schema.max_message_chars
    assert max(len(f"{key}=value of {key}") for key in schema.keys) <= schema.max_evidence_chars


def test_store_satisfies_the_protocol(store: FactMemory) -> None:
    assert isinstance(store, FactMemory)


def test_the_store_follows_the_schema_it_was_given(store: FactMemory, schema: FactSchema) -> None:
    assert store.schema == schema


def test_a_new_store_is_empty(store: FactMemory, words: Words) -> None:
    assert store.facts() == []
    assert store.get(words.primary) is None
    assert store.turn == 0


def test_each_turn_gets_the_next_number_in_the_current_epoch(store: FactMemory, words: Words) -> None:
    first = store.begin_turn("hello")
    second = store.begin_turn(f"{words.primary}=Billing")
    assert (second.epoch, second.number) == (first.epoch, first.number + 1)
    assert second.user_text == f"{words.primary}=Billing"
    assert store.turn == second.number
    assert store.epoch == second.epoch


def test_the_seed_correction_replaces_both_keys_with_their_provenance(store: FactMemory, words: Words) -> None:
    primary, secondary = words.primary, words.secondary
    first = declare(store, f"{primary}=Reporting; {secondary}=PostgreSQL")
    assert [(f.key, f.value, f.evidence, f.turn) for f in first.admitted] == [
        (primary, "Reporting", f"{primary}=Reporting", 1),
        (secondary, "PostgreSQL", f"{secondary}=PostgreSQL", 1),
    ]
    assert first.replaced == first.evicted == ()
    second = declare(store, words.text)
    assert second.replaced == first.admitted
    assert second.evicted == ()
    recorded = START + timedelta(seconds=1)
    assert store.facts() == [
        Fact(secondary, "SQL Server 2022", f"{secondary}=SQL Server 2022", 2, recorded),
        Fact(primary, "Billing", f"{primary}=Billing", 2, recorded),
    ]
    assert store.get(primary.upper()) == second.admitted[0]
    assert all(f.recorded_at.tzinfo is not None and f.recorded_at.utcoffset() == timedelta(0) for f in store.facts())


def test_a_message_without_declarations_admits_nothing_and_is_not_an_error(store: FactMemory, words: Words) -> None:
    declare(store, f"{words.primary}=Billing")
    before = store.facts()
    assert declare(store, "Where can I find logs?") == Admission()
    assert store.facts() == before


def test_facts_are_listed_oldest_turn_first_then_by_key(store: FactMemory, words: Words) -> None:
    declare(store, f"{words.late}=2; {words.other}=Acme")
    declare(store, f"{words.primary}=Billing")
    declare(store, f"{words.late}=3")
    assert [(f.key, f.turn) for f in store.facts()] == [(words.other, 1), (words.primary, 2), (words.late, 3)]


def test_a_correction_after_prose_is_admitted_with_its_evidence(store: FactMemory, words: Words) -> None:
    declare(store, f"{words.late}=first")
    admission = declare(store, f"Sorry, I was wrong: {words.late}=second")
    assert [(f.key, f.value) for f in admission.replaced] == [(words.late, "first")]
    fact = store.get(words.late)
    assert fact is not None
    assert (fact.value, fact.evidence, fact.turn) == ("second", f"{words.late}=second", 2)


def test_a_word_outside_the_schema_after_prose_stays_prose(store: FactMemory, words: Words) -> None:
    before = snapshot(store)
    with pytest.raises(FactRejectedError, match="not an allowed key"):
        declare(store, f"{words.outsider}=X")
    assert store.facts() == list(before[2])  # the turn began; nothing was written
    text = f"by the way {words.outsider}=X; {words.primary}=Y"
    reading = diagnose(text, schema=store.schema)
    assert [(d.outcome, d.key) for d in reading] == [("prose", None), ("pending", words.primary)]
    assert f"'{words.outsider}' is not an allowed key" in reading[0].reason
    declare(store, text)
    assert [(f.key, f.value) for f in store.facts()] == [(words.primary, "Y")]


# Eviction --------------------------------------------------------------------------------------


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["N-1", "N", "N+1"])
def test_store_bound(store: FactMemory, words: Words, offset: int) -> None:
    bound = store.schema.max_facts
    count = bound + offset
    keys = list(words.fill[:count])
    assert len(keys) == count
    admissions = [declare(store, f"{key}=v{turn}") for turn, key in enumerate(keys, 1)]
    assert len(store.facts()) == min(count, bound)
    evicted = [fact for admission in admissions for fact in admission.evicted]
    if count <= bound:
        assert evicted == []
    else:
        assert [(f.key, f.turn) for f in evicted] == [(words.fill[0], 1)]
        assert store.get(words.fill[0]) is None


def test_eviction_breaks_a_tie_on_turn_by_the_smallest_key(store: FactMemory, words: Words) -> None:
    in_order = keys_in_order(words.batch)
    declare(store, written(words.batch))
    admission = declare(store, f"{words.primary}=Billing")
    assert [f.key for f in admission.evicted] == in_order[:1]
    admission = declare(store, written(words.pair))
    assert [f.key for f in admission.evicted] == in_order[1:3]
    assert [f.key for f in store.facts()] == [*in_order[3:], words.primary, *keys_in_order(words.pair)]


def test_a_correction_renews_the_turn_so_the_corrected_fact_is_not_evicted_next(
    store: FactMemory, words: Words
) -> None:
    smallest, second_smallest = keys_in_order(words.batch)[:2]
    declare(store, written(words.batch))
    declare(store, f"{smallest}=Initech")  # the smallest key, now corrected at turn 2
    admission = declare(store, f"{words.primary}=Billing")
    assert [f.key for f in admission.evicted] == [second_smallest]
    assert store.get(smallest) is not None


def test_a_full_batch_evicts_every_older_fact(store: FactMemory, words: Words) -> None:
    declare(store, written(words.batch))
    admission = declare(store, written(words.fresh_batch))
    assert sorted(f.key for f in admission.evicted) == keys_in_order(words.batch)
    assert {f.turn for f in store.facts()} == {2}


# Rejections: each leaves the store as it was ----------------------------------------------------


@pytest.fixture
def seeded(store: FactMemory, words: Words) -> FactMemory:
    declare(store, f"{words.primary}=Reporting; {words.secondary}=PostgreSQL")
    return store


def test_the_exact_declarations_are_admitted_in_any_order(seeded: FactMemory, words: Words) -> None:
    admission = seeded.apply(seeded.begin_turn(words.text), [words.second, words.first])
    assert [f.key for f in admission.admitted] == [words.secondary, words.primary]


Batch = Callable[[Words], list[Candidate]]


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        pytest.param(
            lambda w: [w.first, w.second, Candidate(w.outsider, "Payments", w.first.evidence)],
            "not an allowed key",
            id="unknown-key",
        ),
        pytest.param(lambda w: [w.first, Candidate(w.secondary, "", w.second.evidence)], "empty", id="empty-value"),
        pytest.param(lambda w: [w.first, Candidate(w.secondary, "   ", w.second.evidence)], "empty", id="blank-value"),
        pytest.param(lambda w: [w.first, w.second, w.first], "duplicate", id="duplicate-candidate"),
        pytest.param(
            lambda w: [w.first, w.second, Candidate(w.primary.upper(), "Billing", w.first.evidence)],
            "duplicate",
            id="duplicate-any-case",
        ),
        pytest.param(
            lambda w: [w.first, Candidate(w.secondary, "SQL Server 2022", "")], "no evidence", id="missing-evidence"
        ),
        pytest.param(
            lambda w: [w.first, Candidate(w.secondary, "SQL Server 2022", f"{w.second.evidence} please")],
            "not an exact quote",
            id="evidence-not-in-message",
        ),
        pytest.param(
            lambda w: [w.first, Candidate(w.secondary, "SQL Server 2022", w.first.evidence)],
            "does not contain the value",
            id="value-not-in-evidence",
        ),
        pytest.param(
            lambda w: [
                w.first,
                Candidate(w.secondary, "SQL Server 2022", f"{w.secondary.capitalize()}=SQL Server 2022"),
            ],
            "not an exact quote",
            id="evidence-case-changed",
        ),
        pytest.param(
            lambda w: [w.first, Candidate(w.secondary, "SQL Server", w.second.evidence)], "paraphrase", id="paraphrase"
        ),
        pytest.param(
            lambda w: [w.first, Candidate(w.secondary, "MS SQL Server 2022", w.second.evidence)],
            "paraphrase",
            id="embellished-value",
        ),
        pytest.param(
            lambda w: [w.first, w.second, Candidate(w.other, "Billing", w.first.evidence)],
            "may not add a key",
            id="added-key",
        ),
        pytest.param(lambda w: [w.first], "may not drop a key", id="dropped-key"),
        pytest.param(lambda w: [], "may not drop a key", id="nothing-proposed"),
        pytest.param(
            lambda w: [w.first, Candidate(w.secondary, "SQL Server 2022", "x" * (w.schema.max_evidence_chars + 1))],
            "over the limit",
            id="evidence-too-long",
        ),
        pytest.param(
            lambda w: [w.first, (w.secondary, "SQL Server 2022", w.second.evidence)], "not a Candidate", id="tuple"
        ),
        pytest.param(
            lambda w: [w.first, Candidate(w.secondary, 2022, w.second.evidence)],  # type: ignore[arg-type]
            "non-text",
            id="value-not-str",
        ),
    ],
)
def test_every_faulty_batch_is_refused_whole(seeded: FactMemory, words: Words, build: Batch, expected: str) -> None:
    ticket = seeded.begin_turn(words.text)
    error = refused(seeded, ticket, build(words))
    assert expected in " ".join(error.problems)
    # The ticket is still good: the faithful batch goes through afterwards.
    admitted = seeded.apply(ticket, [words.first, words.second]).admitted
    assert [f.value for f in admitted] == ["Billing", "SQL Server 2022"]


def test_evidence_must_quote_the_declaration_of_its_own_key(store: FactMemory, words: Words) -> None:
    text = f"{words.primary}=Billing; {words.other}=Billing Ltd"
    ticket = store.begin_turn(text)
    misplaced = [
        Candidate(words.primary, "Billing", f"{words.other}=Billing Ltd"),
        Candidate(words.other, "Billing Ltd", f"{words.other}=Billing Ltd"),
    ]
    error = refused(store, ticket, misplaced)
    assert "quotes another part of the message" in " ".join(error.problems)
    # A shorter quote of the right place is fine: it proves the user wrote the value there.
    admission = store.apply(ticket, [Candidate(words.primary, "Billing", "=Billing"), misplaced[1]])
    assert [f.evidence for f in admission.admitted] == ["=Billing", f"{words.other}=Billing Ltd"]


def test_evidence_must_quote_the_winning_declaration(store: FactMemory, words: Words) -> None:
    key = words.primary
    text = f"{key}=Billing; {key}=Billing Core"
    ticket = store.begin_turn(text)
    error = refused(store, ticket, [Candidate(key, "Billing Core", f"{key}=Billing")])
    assert "does not contain the value" in " ".join(error.problems)
    refused(store, ticket, [Candidate(key, "Billing", f"{key}=Billing")])
    assert store.apply(ticket, [Candidate(key, "Billing Core", f"{key}=Billing Core")]).admitted


def test_an_invalid_message_refuses_even_a_faithful_looking_batch(seeded: FactMemory, words: Words) -> None:
    ticket = seeded.begin_turn(f"{words.primary}=Billing; {words.outsider}=Payments")
    error = refused(seeded, ticket, [words.first])
    assert f"'{words.outsider}'" in " ".join(error.problems)


def test_keys_in_any_case_are_admitted_lower_cased(store: FactMemory, words: Words) -> None:
    key = words.primary
    ticket = store.begin_turn(f"{key.capitalize()}=Billing")
    (fact,) = store.apply(ticket, [Candidate(key.upper(), "Billing", f"{key.capitalize()}=Billing")]).admitted
    assert fact.key == key
    assert store.get(key) == store.get(key.capitalize()) == fact


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["N-1", "N", "N+1"])
def test_candidates_per_extraction_bound(store: FactMemory, words: Words, offset: int) -> None:
    bound = store.schema.max_facts
    count = bound + offset
    keys = words.keys()[:count]
    assert len(keys) == count
    text = "; ".join(f"{key}=value of {key}" for key in keys)
    candidates = [Candidate(key, f"value of {key}", f"{key}=value of {key}") for key in keys]
    ticket = store.begin_turn(text)
    if count <= bound:
        assert len(store.apply(ticket, candidates).admitted) == count
    else:
        # The message itself is over the bound, so no batch can match it.
        assert any(f"declares {count} different keys" in p for p in refused(store, ticket, candidates).problems)
        # And a writer proposing more than the bound for a message at the bound is refused on its own count.
        at_bound = store.begin_turn("; ".join(f"{key}=value of {key}" for key in keys[:bound]))
        problems = refused(store, at_bound, candidates).problems
        assert any(f"{count} candidates were proposed, over the limit of {bound}" in p for p in problems)


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["N-1", "N", "N+1"])
def test_value_bound_at_admission(store: FactMemory, words: Words, offset: int) -> None:
    bound = store.schema.max_value_chars
    value = "v" * (bound + offset)
    candidate = Candidate(words.free, value, f"{words.free}={value}")
    ticket = store.begin_turn(f"{words.free}={value}")
    if offset <= 0:
        assert store.apply(ticket, [candidate]).admitted[0].value == value
    else:
        assert any(f"over the limit of {bound}" in p for p in refused(store, ticket, [candidate]).problems)


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["N-1", "N", "N+1"])
def test_evidence_bound_at_admission(store: FactMemory, words: Words, offset: int) -> None:
    bound = store.schema.max_evidence_chars
    length = bound + offset
    # The declaration is short; the writer quotes more of the message around it.
    text = f"{words.primary}=Billing\n" + "e" * bound
    evidence = text[:length]
    assert len(evidence) == length
    ticket = store.begin_turn(text)
    if offset <= 0:
        assert store.apply(ticket, [Candidate(words.primary, "Billing", evidence)]).admitted[0].evidence == evidence
    else:
        problems = refused(store, ticket, [Candidate(words.primary, "Billing", evidence)]).problems
        assert any(f"{length} characters of evidence, over the limit of {bound}" in p for p in problems)


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["N-1", "N", "N+1"])
def test_message_bound_at_begin_turn(store: FactMemory, words: Words, offset: int) -> None:
    bound = store.schema.max_message_chars
    length = bound + offset
    head = f"{words.primary}=Billing;"
    text = head + " " * (length - len(head))
    assert len(text) == length
    before = snapshot(store)
    if offset <= 0:
        assert declare(store, text).admitted[0].value == "Billing"
    else:
        with pytest.raises(FactRejectedError, match=f"{length} characters long, over the limit of {bound}"):
            store.begin_turn(text)
        assert snapshot(store) == before


def test_a_forged_ticket_with_an_oversized_message_is_refused(store: FactMemory, words: Words) -> None:
    real = store.begin_turn(words.first.evidence)
    forged = Ticket(real.epoch, real.number, words.first.evidence + " " * store.schema.max_message_chars)
    refused(store, forged, [words.first])


def test_something_that_is_not_a_ticket_is_refused(store: FactMemory, words: Words) -> None:
    store.begin_turn(words.first.evidence)
    before = snapshot(store)
    with pytest.raises(FactRejectedError, match="Ticket"):
        store.apply(("epoch", 1), [words.first])  # type: ignore[arg-type]
    assert snapshot(store) == before


# Tickets and forgetting -------------------------------------------------------------------------


def test_an_older_turns_ticket_is_stale(seeded: FactMemory, words: Words) -> None:
    old = seeded.begin_turn(words.text)
    seeded.begin_turn("Where can I find logs?")
    before = snapshot(seeded)
    with pytest.raises(StaleTicketError, match="a newer turn has begun"):
        seeded.apply(old, [words.first, words.second])
    assert snapshot(seeded) == before


def test_a_stale_ticket_is_refused_even_with_nothing_to_write(store: FactMemory) -> None:
    old = store.begin_turn("hello")
    store.forget()
    with pytest.raises(StaleTicketError):
        store.apply(old, [])


@pytest.mark.parametrize("role", ["primary", "secondary", None])
def test_no_extraction_begun_before_a_forget_can_write_after_it(
    seeded: FactMemory, words: Words, role: str | None
) -> None:
    in_flight = seeded.begin_turn(words.text)
    seeded.forget(None if role is None else getattr(words, role))
    before = snapshot(seeded)
    with pytest.raises(StaleTicketError, match="a forget happened since"):
        seeded.apply(in_flight, [words.first, words.second])
    assert snapshot(seeded) == before


def test_a_ticket_from_another_epoch_with_the_current_number_is_stale(store: FactMemory, words: Words) -> None:
    ticket = store.begin_turn(words.first.evidence)
    forged = Ticket(ticket.epoch - 1, ticket.number, ticket.user_text)
    with pytest.raises(StaleTicketError):
        store.apply(forged, [words.first])
    assert store.facts() == []


def test_forget_one_key_keeps_the_others_and_advances_the_epoch(seeded: FactMemory, words: Words) -> None:
    kept = seeded.get(words.secondary)
    epoch = seeded.epoch
    removed = seeded.forget(words.primary.capitalize())
    assert [f.key for f in removed] == [words.primary]
    assert (removed.epoch, removed.turn) == (seeded.epoch, seeded.turn)
    assert seeded.epoch == epoch + 1
    assert seeded.facts() == [kept]


def test_forget_all_removes_every_fact_and_advances_the_epoch(seeded: FactMemory) -> None:
    facts = seeded.facts()
    epoch, turn = seeded.epoch, seeded.turn
    removed = seeded.forget()
    assert list(removed) == facts
    assert seeded.facts() == []
    assert (seeded.epoch, seeded.turn) == (epoch + 1, turn)


def test_forgetting_an_absent_key_still_advances_the_epoch(store: FactMemory, words: Words) -> None:
    epoch = store.epoch
    in_flight = store.begin_turn(f"{words.absent}=/var/log/app")
    assert store.forget(words.absent) == ()
    assert store.epoch > epoch
    with pytest.raises(StaleTicketError):
        store.apply(in_flight, parse_assertions(in_flight.user_text, store.schema))
    assert store.get(words.absent) is None


@pytest.mark.parametrize(
    "make_key",
    [
        pytest.param(lambda w: w.outsider, id="outsider"),
        pytest.param(lambda w: "", id="empty"),
        pytest.param(lambda w: f"{w.primary}s", id="plural"),
        pytest.param(lambda w: 3, id="int"),
        pytest.param(lambda w: w.primary.encode(), id="bytes"),
    ],
)
def test_forgetting_something_that_is_not_a_key_changes_nothing(
    seeded: FactMemory, words: Words, make_key: Callable[[Words], object]
) -> None:
    before = snapshot(seeded)
    with pytest.raises(FactsError, match="not a fact key"):
        seeded.forget(make_key(words))  # type: ignore[arg-type]
    assert snapshot(seeded) == before


def test_a_question_after_forget_recreates_nothing(seeded: FactMemory, words: Words) -> None:
    seeded.forget()
    assert declare(seeded, f"Which {words.primary} and {words.secondary} are we on?") == Admission()
    assert seeded.facts() == []


def test_stores_opened_on_the_same_storage_share_facts_and_tickets(make_store: MakeStore, words: Words) -> None:
    first, second = make_store(), make_store()
    ticket = first.begin_turn(words.first.evidence)
    second.begin_turn("Where can I find logs?")
    with pytest.raises(StaleTicketError):
        first.apply(ticket, [words.first])
    declare(first, words.first.evidence)
    assert [f.value for f in second.facts()] == ["Billing"]
    second.forget(words.primary)
    assert first.facts() == []


def test_a_clock_without_a_time_zone_is_refused(make_store: MakeStore, words: Words) -> None:
    naive = make_store(clock=lambda: datetime(2025, 1, 1))
    ticket = naive.begin_turn(words.first.evidence)
    before = snapshot(naive)
    with pytest.raises(ConfigurationError, match="aware datetime"):
        naive.apply(ticket, [words.first])
    assert snapshot(naive) == before


def test_recorded_at_is_converted_to_utc(make_store: MakeStore, words: Words) -> None:
    paris = timezone(timedelta(hours=1))
    store = make_store(clock=lambda: datetime(2025, 3, 1, 10, 30, tzinfo=paris))
    (fact,) = declare(store, words.first.evidence).admitted
    assert fact.recorded_at == datetime(2025, 3, 1, 9, 30, tzinfo=timezone.utc)
    assert fact.recorded_at.utcoffset() == timedelta(0)
    assert store.facts() == [fact]


# A sequential model --------------------------------------------------------------------------------


def operations(schema: FactSchema) -> st.SearchStrategy[list[tuple[str, object]]]:
    keys = sorted(schema.keys)
    return st.lists(
        st.one_of(
            st.tuples(
                st.just("declare"), st.lists(st.sampled_from(keys), min_size=0, max_size=schema.max_facts, unique=True)
            ),
            st.tuples(st.just("forget"), st.sampled_from([*keys, None])),
            st.tuples(st.just("stale"), st.sampled_from(keys)),
        ),
        max_size=25,
    )


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_sequence_of_operations_matches_a_plain_model(
    make_store: MakeStore, schema: FactSchema, data: st.DataObject
) -> None:
    steps = data.draw(operations(schema), label="steps")
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
            while len(model) > schema.max_facts:
                oldest = min((k for k in model if k not in declare_keys), key=lambda k: (model[k][1], k))
                del model[oldest]
            store.apply(ticket, parse_assertions(text, schema))
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
                store.apply(ticket, parse_assertions(ticket.user_text, schema))
        assert {f.key: (f.value, f.turn) for f in store.facts()} == model
        assert len(store.facts()) <= schema.max_facts


def test_extraction_runs_in_asyncio_tasks_on_one_store(store: FactMemory, words: Words) -> None:
    from contextledger.facts import RuleWriter, extract  # noqa: PLC0415

    async def main() -> Admission:
        ticket = store.begin_turn(words.text)
        return await extract(store, RuleWriter(store.schema), ticket)

    admission = asyncio.run(main())
    assert [f.value for f in admission.admitted] == ["Billing", "SQL Server 2022"]
