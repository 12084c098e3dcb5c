"""FactsHost on its own: the one begin/extract/diagnose every host runs (the hosts themselves are
in ``test_hosts.py``)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from contextledger.exceptions import ConfigurationError, FactRejectedError, StaleTicketError
from contextledger.facts import FactsHost, FactStore, RuleWriter
from tests.facts.support import CUSTOM_SCHEMA

_T = TypeVar("_T")


def test_the_default_writer_follows_the_stores_schema() -> None:
    host = FactsHost(FactStore(schema=CUSTOM_SCHEMA))
    assert isinstance(host.writer, RuleWriter)
    assert host.writer.schema is CUSTOM_SCHEMA
    turn = asyncio.run(host.finish(host.begin("team=core")))
    assert turn is not None
    assert turn.admission is not None
    assert [fact.key for fact in turn.admission.admitted] == ["team"]


def test_a_message_over_the_bound_finishes_at_once_with_its_diagnostics() -> None:
    host = FactsHost(FactStore(schema=CUSTOM_SCHEMA))
    begun = host.begin("team=core; " + "and more words " * 20)
    assert begun is not None
    assert begun.ticket is None
    assert isinstance(begun.rejection, FactRejectedError)
    assert [d.outcome for d in begun.diagnostics] == ["rejected"]
    finished = asyncio.run(host.finish(begun, "the reply"))
    assert finished is not None
    assert finished.response == "the reply"
    assert host.last_turn is finished
    assert "over the limit of 300" in finished.describe()


def test_no_text_is_no_turn() -> None:
    host = FactsHost(FactStore())
    assert host.begin(None) is None
    assert asyncio.run(host.finish(None)) is None
    assert host.last_turn is None


def test_a_refusal_is_reported_never_raised() -> None:
    store = FactStore()
    host = FactsHost(store)
    begun = host.begin("module=Billing")
    store.forget()  # the turn is stale before its extraction
    turn = asyncio.run(host.finish(begun))
    assert turn is not None
    assert isinstance(turn.rejection, StaleTicketError)
    assert turn.diagnostics[0].outcome == "rejected"
    assert "stale" in turn.describe()


def test_runs_are_kept_apart_and_a_failed_run_leaves_nothing() -> None:
    class Run:
        pass

    store = FactStore()
    host = FactsHost(store)
    first, second, failed = Run(), Run(), Run()
    host.begin_run(first, "module=Billing")
    host.begin_run(failed, "customer=ACME")
    host.drop_run(failed)
    assert asyncio.run(host.finish_run(failed)) is None
    # A newer turn has begun, so the first run's extraction is stale; the second's is admitted.
    host.begin_run(second, "database=Postgres")
    stale = asyncio.run(host.finish_run(first))
    admitted = asyncio.run(host.finish_run(second))
    assert stale is not None
    assert isinstance(stale.rejection, StaleTicketError)
    assert admitted is not None
    assert admitted.admission is not None
    assert [fact.key for fact in store.facts()] == ["database"]
    forgotten = Run()
    host.begin_run(forgotten, "module=Reporting")
    del forgotten
    gc.collect()
    assert len(host._runs) == 0  # a run never finished is held weakly


def test_the_store_is_called_through_the_hosts_call() -> None:
    calls: list[str] = []

    async def call(operation: Callable[[], _T]) -> _T:
        calls.append(getattr(operation, "__name__", "operation"))
        return operation()

    store = FactStore()
    host = FactsHost(store, call=call)
    asyncio.run(host.finish(host.begin("module=Billing")))
    asyncio.run(host.finish(host.begin("timeout=30")))
    assert len(calls) == 2  # one apply, one reject: the store is never called around it
    assert [event.kind for event in store.review()] == ["admitted", "rejected"]


@pytest.mark.parametrize(("store", "writer"), [({}, None), (FactStore(), "rules")])
def test_a_host_needs_a_store_and_a_writer(store: Any, writer: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"needs a fact store|propose"):
        FactsHost(store, writer, host="the test host")
