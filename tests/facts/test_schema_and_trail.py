"""What every store (memory, SQLite, Redis) promises beyond facts: owners kept apart, expiry on the
store's clock, revocation, and a review trail that forget empties of values; and schemas read from
files and followed by the writers.

Each store test runs against every backend (the ``make_store`` fixture).  The fact rules under a
custom schema (keys and every bound different) are the conformance suite's, which runs under both.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from contextledger.exceptions import ConfigurationError, FactRejectedError, FactsError, StaleTicketError
from contextledger.facts import FactSchema, RuleWriter, parse_assertions
from contextledger.facts._store import FactMemory
from tests.facts.conftest import MakeStore
from tests.facts.support import CUSTOM_SCHEMA, Clock


def declare(store: FactMemory, text: str) -> None:
    store.apply(store.begin_turn(text), parse_assertions(text, store.schema))


def test_owners_cannot_read_each_others_facts(make_store: MakeStore, request: pytest.FixtureRequest) -> None:
    first = make_store()
    # In memory an owner's facts are a store object of their own; the others share storage.
    other = type(first)() if type(first).__name__ == "FactStore" else make_store(owner="someone-else")
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
    path.write_text(json.dumps(CUSTOM_SCHEMA.to_dict()))
    assert FactSchema.from_file(path) == CUSTOM_SCHEMA
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

    proposal = asyncio.run(RuleWriter(CUSTOM_SCHEMA).propose("about it: region=EU; tier=gold"))
    assert [c.key for c in proposal.candidates] == ["region", "tier"]
    from contextledger.facts._writers import writer_instructions  # noqa: PLC0415

    assert "owner, queue, region, service, site, stage, team, tier, vendor" in writer_instructions(CUSTOM_SCHEMA)
