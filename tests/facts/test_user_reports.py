"""What a user found by trying the memory: a comma between declarations, refusals missing from the
review trail, and a refused 5,007-character message kept whole in it.

The trail tests run on every store (memory, SQLite, Redis: the ``make_store`` fixture), through
:func:`extract` with the rule writer, the way every host extracts.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger.exceptions import FactRejectedError
from contextledger.facts import (
    DEFAULT_SCHEMA,
    FactSchema,
    FactStore,
    ReviewEvent,
    RuleWriter,
    diagnose,
    extract,
    parse_assertions,
)
from contextledger.facts._records import Candidate
from contextledger.facts._store import FactMemory
from tests.facts.conftest import MakeStore
from tests.facts.support import CUSTOM_SCHEMA
from tests.sizes import examples


def run_turn(store: FactMemory, text: str) -> None:
    """One turn as every host runs it: the ticket, then the rule writer and the store's apply."""
    asyncio.run(extract(store, RuleWriter(store.schema), store.begin_turn(text)))


# (a) The comma grammar -------------------------------------------------------------------------


def test_an_allowed_key_after_a_comma_starts_a_new_declaration() -> None:
    assert parse_assertions("database=Postgres, module=Billing") == (
        Candidate("database", "Postgres", "database=Postgres"),
        Candidate("module", "Billing", "module=Billing"),
    )
    # After prose too, and without a space, and for any number of declarations.
    assert [c.key for c in parse_assertions("Sorry: database=Postgres,module=Billing , customer=ACME")] == [
        "database",
        "module",
        "customer",
    ]


def test_a_comma_before_anything_but_an_allowed_key_stays_in_the_value() -> None:
    assert parse_assertions("constraint=read only, no writes") == (
        Candidate("constraint", "read only, no writes", "constraint=read only, no writes"),
    )
    assert parse_assertions("database=Postgres, timeout=30")[0].value == "Postgres, timeout=30"
    # A pasted log line that does not start with an allowed key stays prose, comma or not.
    assert parse_assertions("level=info, module=billing") == ()
    assert parse_assertions("timeout=30, module=Billing") == ()


def test_a_declaration_cut_at_a_comma_is_checked_like_any_other() -> None:
    with pytest.raises(FactRejectedError, match="'module' has an empty value"):
        parse_assertions("database=Postgres, module=")
    with pytest.raises(FactRejectedError, match="over the limit of 40"):
        parse_assertions("team=core, service=" + "s" * 41, CUSTOM_SCHEMA)
    # The keys are the schema's: a seed key after a comma is not one of the custom schema's.
    assert parse_assertions("team=core, module=Billing", CUSTOM_SCHEMA)[0].value == "core, module=Billing"


def test_the_store_admits_both_declarations_and_diagnoses_each() -> None:
    store = FactStore()
    ticket = store.begin_turn("database=Postgres, module=Billing")
    admission = asyncio.run(extract(store, RuleWriter(), ticket))
    assert {fact.key: fact.value for fact in store.facts()} == {"database": "Postgres", "module": "Billing"}
    outcomes = [(d.outcome, d.key, d.value) for d in diagnose(ticket.user_text, admission=admission)]
    assert outcomes == [("admitted", "database", "Postgres"), ("admitted", "module", "Billing")]


keys = st.sampled_from(sorted(DEFAULT_SCHEMA.keys))
values = st.text(st.sampled_from("abcXYZ019 ._-"), min_size=1, max_size=20).map(str.strip).filter(bool)


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(st.tuples(keys, values), min_size=1, max_size=5, unique_by=lambda pair: pair[0]),
    st.sampled_from([", ", ","]),
)
def test_declarations_joined_by_commas_read_as_joined_by_semicolons(pairs: list[tuple[str, str]], comma: str) -> None:
    by_comma = comma.join(f"{key}={value}" for key, value in pairs)
    by_semicolon = "; ".join(f"{key}={value}" for key, value in pairs)
    assert [(c.key, c.value) for c in parse_assertions(by_comma)] == [
        (c.key, c.value) for c in parse_assertions(by_semicolon)
    ]


# (b) Every refusal reaches the trail -----------------------------------------------------------


def rejections(store: FactMemory) -> list[ReviewEvent]:
    return [event for event in store.review() if event.kind == "rejected"]


def test_an_unknown_key_is_recorded_in_the_trail(make_store: MakeStore) -> None:
    store = make_store()
    with pytest.raises(FactRejectedError, match="'timeout' is not an allowed key"):
        run_turn(store, "module=Billing; timeout=30")
    assert store.facts() == []
    refused = {event.key: event for event in rejections(store)}
    assert set(refused) == {"module", "timeout"}
    assert "not an allowed key" in refused["timeout"].reason
    assert refused["timeout"].turn == 1


def test_a_value_too_long_is_recorded_in_the_trail(make_store: MakeStore) -> None:
    store = make_store()
    value = "x" * (store.schema.max_value_chars + 1)
    with pytest.raises(FactRejectedError, match="over the limit"):
        run_turn(store, f"module={value}")
    (refused,) = rejections(store)
    assert refused.key == "module"
    assert f"{len(value)} characters long, over the limit of {store.schema.max_value_chars}" in refused.reason


def test_a_failing_writer_is_recorded_in_the_trail(make_store: MakeStore) -> None:
    class Broken:
        async def propose(self, user_text: str) -> object:
            raise RuntimeError("the model is down")

    store = make_store()
    with pytest.raises(FactRejectedError, match="the model is down"):
        asyncio.run(extract(store, Broken(), store.begin_turn("module=Billing")))  # type: ignore[arg-type]
    (refused,) = rejections(store)
    assert (refused.key, refused.value) == ("module", "Billing")


# (c) The trail keeps no more than the schema allows --------------------------------------------


@pytest.mark.parametrize("schema", [DEFAULT_SCHEMA, CUSTOM_SCHEMA], ids=["seed", "custom"])
def test_a_refused_message_over_every_bound_is_kept_only_as_far_as_the_bounds(
    make_store: MakeStore, schema: FactSchema
) -> None:
    store = make_store(schema=schema)
    key = sorted(schema.keys)[0]
    text = f"{key}=" + "v" * (schema.max_message_chars + 900)
    with pytest.raises(FactRejectedError):
        run_turn(store, text)
    (refused,) = rejections(store)
    value_tail = len(text) - len(key) - 1 - schema.max_value_chars
    evidence_tail = len(text) - schema.max_evidence_chars
    assert refused.value == "v" * schema.max_value_chars + f" [cut: {value_tail} more characters not kept]"
    assert refused.evidence == text[: schema.max_evidence_chars] + f" [cut: {evidence_tail} more characters not kept]"
    assert store.facts() == []


def test_a_value_at_the_bound_is_kept_whole_and_one_over_is_cut(make_store: MakeStore) -> None:
    store = make_store()
    bound = store.schema.max_value_chars
    with pytest.raises(FactRejectedError):
        run_turn(store, "module=" + "a" * bound + "; timeout=1")  # refused for the unknown key
    with pytest.raises(FactRejectedError):
        run_turn(store, "module=" + "b" * (bound + 1))
    kept = [event.value for event in rejections(store) if event.key == "module"]
    assert kept == ["a" * bound, "b" * bound + " [cut: 1 more characters not kept]"]
