"""The same rules for any schema, and what every store (memory, SQLite, Redis) promises beyond facts:
owners kept apart, expiry on the store's clock, revocation, and a review trail that forget empties of values.

Each test runs against every backend (the ``make_store`` fixture) and, where a schema matters,
against the seed's schema and a custom one whose keys and every bound differ.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from contextledger.exceptions import ConfigurationError, FactRejectedError, FactsError, StaleTicketError
from contextledger.facts import DEFAULT_SCHEMA, FactMemory, FactSchema, RuleWriter, diagnose, parse_assertions
from tests.facts.conftest import MakeStore
from tests.facts.support import Clock

CUSTOM = FactSchema(frozenset({"ticket", "region", "owner_team", "sla"}), 3, 20, 40, 120)
SCHEMAS = [pytest.param(DEFAULT_SCHEMA, id="seed"), pytest.param(CUSTOM, id="custom")]


def keys_of(schema: FactSchema) -> list[str]:
    return sorted(schema.keys)


def declare(store: FactMemory, text: str) -> None:
    store.apply(store.begin_turn(text), parse_assertions(text, store.schema))


def test_the_custom_schema_differs_from_the_seed_in_keys_and_every_bound() -> None:
    assert not CUSTOM.keys & DEFAULT_SCHEMA.keys
    for bound in ("max_facts", "max_value_chars", "max_evidence_chars", "max_message_chars"):
        assert getattr(CUSTOM, bound) != getattr(DEFAULT_SCHEMA, bound)


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize("offset", [-1, 0, 1])
def test_store_bound_and_eviction(make_store: MakeStore, schema: FactSchema, offset: int) -> None:
    store = make_store(schema=schema)
    count = schema.max_facts + offset
    keys = keys_of(schema)
    for number in range(min(count, len(keys))):
        declare(store, f"{keys[number]}=v{number}")
    held = [fact.key for fact in store.facts()]
    assert len(held) == min(count, len(keys), schema.max_facts)
    if count > schema.max_facts and count <= len(keys):
        assert keys[0] not in held  # the oldest went first


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize("offset", [-1, 0, 1])
def test_value_evidence_and_message_bounds(make_store: MakeStore, schema: FactSchema, offset: int) -> None:
    store = make_store(schema=schema)
    key = keys_of(schema)[0]
    value = "v" * (schema.max_value_chars + offset)
    if offset <= 0:
        declare(store, f"{key}={value}")
        assert store.get(key).value == value  # type: ignore[union-attr]
    else:
        with pytest.raises(FactRejectedError, match=f"over the limit of {schema.max_value_chars}"):
            declare(store, f"{key}={value}")
    length = schema.max_message_chars + offset
    text = f"{key}=x" + " " * (length - len(key) - 2)
    if offset <= 0:
        store.begin_turn(text)
    else:
        with pytest.raises(FactRejectedError, match=f"over the limit of {schema.max_message_chars}"):
            store.begin_turn(text)
    prose = "p" * (schema.max_evidence_chars - schema.max_value_chars)
    evidence_text = f"{prose} {key}={'v' * (schema.max_value_chars - len(key) - 1 + offset)}"
    if len(evidence_text) <= schema.max_message_chars:
        reading = diagnose(evidence_text, schema=schema)
        assert reading[-1].key == key


@pytest.mark.parametrize("schema", SCHEMAS)
def test_a_key_outside_the_schema_refuses_the_message_and_after_prose_stays_prose(
    make_store: MakeStore, schema: FactSchema
) -> None:
    store = make_store(schema=schema)
    outsider = "product" if schema is CUSTOM else "ticket"
    with pytest.raises(FactRejectedError, match="not an allowed key"):
        declare(store, f"{outsider}=X")
    text = f"by the way {outsider}=X; {keys_of(schema)[0]}=Y"
    declare(store, text)
    assert [fact.key for fact in store.facts()] == [keys_of(schema)[0]]
    with pytest.raises(FactsError, match="not a fact key"):
        store.forget(outsider)


@pytest.mark.parametrize("schema", SCHEMAS)
def test_correction_after_prose_and_forget(make_store: MakeStore, schema: FactSchema) -> None:
    store = make_store(schema=schema)
    key = keys_of(schema)[-1]
    declare(store, f"{key}=first")
    declare(store, f"Sorry, I was wrong: {key}=second")
    fact = store.get(key)
    assert fact is not None
    assert (fact.value, fact.evidence) == ("second", f"{key}=second")
    ticket = store.begin_turn(f"{key}=third")
    store.forget(key)
    with pytest.raises(StaleTicketError):
        store.apply(ticket, parse_assertions(ticket.user_text, schema))
    assert store.facts() == []


def test_owners_cannot_read_each_others_facts(make_store: MakeStore, request: pytest.FixtureRequest) -> None:
    first = make_store()
    if type(first).__name__ == "FactStore":
        pytest.skip("the in-memory store holds one owner's facts by construction")
    other = make_store(owner="someone-else")
    declare(first, "module=Billing")
    assert other.facts() == []
    assert other.review() == []
    declare(other, "module=Reporting")
    assert first.get("module").value == "Billing"  # type: ignore[union-attr]
    other.forget()
    assert first.get("module") is not None


def test_facts_expire_on_the_stores_clock_and_the_trail_says_so(make_store: MakeStore) -> None:
    clock = Clock()
    store = make_store(clock=clock, ttl_seconds=60)
    declare(store, "module=Billing")
    fact = store.get("module")
    assert fact is not None
    assert fact.expires_at == fact.recorded_at + timedelta(seconds=60)
    clock.now += timedelta(seconds=61)
    assert store.facts() == []
    assert store.get("module") is None
    assert "No facts" in store.to_prompt_block() or "no key=value fact" in store.to_prompt_block()
    expired = store.expire()
    assert [f.key for f in expired] == ["module"]
    kinds = [event.kind for event in store.review()]
    assert kinds[-1] == "expired"
    assert "Billing" not in json.dumps([e.describe() for e in store.review()[-1:]])


def test_revocation_needs_a_reason_and_is_recorded(make_store: MakeStore) -> None:
    store = make_store()
    declare(store, "module=Billing; database=SQL Server 2022")
    with pytest.raises(FactsError, match="needs a reason"):
        store.revoke("module", reason=" ")
    assert len(store.facts()) == 2
    ticket = store.begin_turn("module=Reporting")
    removed = store.revoke("module", reason="customer asked by email")
    assert [fact.key for fact in removed] == ["module"]
    with pytest.raises(StaleTicketError):
        store.apply(ticket, parse_assertions(ticket.user_text))
    revoked, refused = store.review()[-2:]
    assert (revoked.kind, revoked.key) == ("revoked", "module")
    assert "customer asked by email" in revoked.reason
    # The refusal of the pre-revocation extraction is recorded without the revoked key's value.
    assert (refused.kind, refused.key, refused.value) == ("rejected", "module", None)


def test_the_trail_records_every_event_and_forget_leaves_none_of_the_values(make_store: MakeStore) -> None:
    store = make_store()
    declare(store, "database=PostgreSQL 15")
    declare(store, "Sorry, I was wrong: database=SQL Server 2022")
    refused = store.begin_turn("database=Oracle 19; timeout=30")
    with pytest.raises(FactRejectedError):
        store.apply(refused, [])
    stale = store.begin_turn("database=MariaDB 11")
    store.begin_turn("module=Billing")
    with pytest.raises(StaleTicketError):
        store.apply(stale, parse_assertions(stale.user_text))
    for number in range(5):
        declare(store, f"{['product', 'module', 'priority', 'customer', 'version'][number]}=item {number}")
    kinds = [event.kind for event in store.review()]
    assert kinds[:2] == ["admitted", "corrected"]
    assert kinds.count("rejected") >= 3
    assert "evicted" in kinds
    assert all(event.at.tzinfo is not None and event.reason for event in store.review())
    trail_text = "\n".join(e.describe() for e in store.review())
    for value in ("PostgreSQL 15", "SQL Server 2022", "Oracle 19", "MariaDB 11"):
        assert value in trail_text
    store.forget("database")
    after = store.review()
    dumped = "\n".join(e.describe() + repr(e) for e in after)
    for value in ("PostgreSQL 15", "SQL Server 2022", "Oracle 19", "MariaDB 11"):
        assert value not in dumped
    assert "item 4" in dumped  # other keys keep their values
    assert after[-1].kind == "forgotten"
    assert after[-1].key == "database"
    assert any(event.erased and event.key == "database" for event in after)
    store.forget()
    assert all(event.value is None and event.evidence is None for event in store.review())


def test_a_schema_file_is_read_and_a_bad_one_is_named(tmp_path: Path) -> None:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(CUSTOM.to_dict()))
    assert FactSchema.from_file(path) == CUSTOM
    path.write_text(json.dumps({"keys": ["9lives"]}))
    with pytest.raises(ConfigurationError, match="is not a word"):
        FactSchema.from_file(path)
    path.write_text(json.dumps({"keys": ["a"], "max_facts": 0}))
    with pytest.raises(ConfigurationError, match="max_facts must be a positive integer"):
        FactSchema.from_file(path)
    with pytest.raises(ConfigurationError, match="does not exist"):
        FactSchema.from_file(tmp_path / "missing.json")


def test_the_rule_writer_and_the_model_writer_prompt_follow_the_schema() -> None:
    import asyncio  # noqa: PLC0415

    proposal = asyncio.run(RuleWriter(CUSTOM).propose("about it: region=EU; sla=4h"))
    assert [c.key for c in proposal.candidates] == ["region", "sla"]
    from contextledger.facts._writers import writer_instructions  # noqa: PLC0415

    assert "owner_team, region, sla, ticket" in writer_instructions(CUSTOM)
