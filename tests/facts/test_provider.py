"""FactsProvider and the manual helper: what reaches the model, and what may become a fact."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger.agents import Agent, ContextProvider, FactsProvider, RunContext, run_with_facts
from contextledger.clients import OfflineModel, ScriptedChatClient
from contextledger.exceptions import ConfigurationError, FactRejectedError, ModelTimeoutError, StaleTicketError
from contextledger.facts import ALLOWED_KEYS, FactsPlacement, FactStore, ModelWriter, parse_assertions
from contextledger.facts._block import EMPTY_BLOCK
from contextledger.history import InMemoryHistoryProvider
from contextledger.messages import Message
from tests.facts.support import Clock, snapshot
from tests.sizes import examples


class Injector(ContextProvider):
    """Adds context messages that state facts, as a retrieval provider might."""

    source_id = "injector"

    def __init__(self, text: str) -> None:
        self.text = text

    async def before_run(self, context: RunContext) -> None:
        context.add_messages(self.source_id, [Message.user(self.text), Message.assistant(self.text)])


def values(store: FactStore) -> dict[str, str]:
    return {fact.key: fact.value for fact in store.facts()}


@pytest.mark.parametrize("placement", ["latest_user", "start"])
def test_the_block_goes_where_placed_and_is_never_stored(placement: FactsPlacement) -> None:
    store = FactStore(clock=Clock())
    client = ScriptedChatClient(["Noted."])
    history = InMemoryHistoryProvider()
    provider = FactsProvider(store, placement=placement)
    agent = Agent(client, instructions="Be brief.", history=history, context_providers=[provider])
    session = agent.create_session()
    asyncio.run(agent.run("module=Billing", session=session))
    asyncio.run(agent.run("Which module?", session=session))
    first, second = client.requests
    if placement == "start":
        assert first[0].text == f"Be brief.\n\n{EMPTY_BLOCK}"
        assert second[0].text == f"Be brief.\n\n{store.to_prompt_block()}"
        assert all(message.role != "system" for message in second[1:])
    else:
        # Just before the newest user message: the start of the request stays what it was.
        assert [m.text for m in first] == ["Be brief.", EMPTY_BLOCK, "module=Billing"]
        assert [m.text for m in second] == [
            "Be brief.",
            "module=Billing",
            "Noted.",
            store.to_prompt_block(),
            "Which module?",
        ]
    assert 'module = "Billing"' in "".join(m.text for m in second)
    stored = asyncio.run(history.load(session.session_id))
    assert [message.text for message in stored] == ["module=Billing", "Noted.", "Which module?", "Noted."]


def test_only_the_external_user_messages_of_the_call_are_extracted() -> None:
    store = FactStore(clock=Clock())
    client = ScriptedChatClient(["priority=high; customer=Generated"])
    history = InMemoryHistoryProvider()
    asyncio.run(history.append("s", [Message.user("version=9.9"), Message.assistant("environment=prod")]))
    provider = FactsProvider(store)
    agent = Agent(client, history=history, context_providers=[Injector("module=Injected; database=Injected"), provider])
    session = agent.create_session("s")
    response = asyncio.run(
        agent.run(
            [Message.user("product=Ledger"), Message.assistant("symptom=external reply"), Message.user("log=/tmp/x")],
            session=session,
        ),
    )
    assert response.text == "priority=high; customer=Generated"
    assert values(store) == {"product": "Ledger", "log": "/tmp/x"}
    assert provider.last_admission is not None
    assert [fact.key for fact in provider.last_admission.admitted] == ["product", "log"]
    # The next turn has the generated reply and the earlier turn in its history: neither is read again.
    asyncio.run(agent.run("What now?", session=session))
    assert values(store) == {"product": "Ledger", "log": "/tmp/x"}
    assert provider.last_admission is not None
    assert provider.last_admission.admitted == ()
    assert {fact.turn for fact in store.facts()} == {1}


_KEY = st.sampled_from(sorted(ALLOWED_KEYS))
_VALUE = st.text(alphabet="abcdefghij XYZ0123456789", min_size=1, max_size=12).map(str.strip).filter(bool)
_DECLARATIONS = st.lists(st.tuples(_KEY, _VALUE), max_size=4).map(lambda items: "; ".join(f"{k}={v}" for k, v in items))


@settings(max_examples=examples(40), deadline=None)
@given(external=_DECLARATIONS, injected=_DECLARATIONS, generated=_DECLARATIONS, earlier=_DECLARATIONS)
def test_facts_come_from_the_external_text_alone(external: str, injected: str, generated: str, earlier: str) -> None:
    store = FactStore(clock=Clock())
    history = InMemoryHistoryProvider()
    if earlier:
        asyncio.run(history.append("s", [Message.assistant(earlier)]))
    injected_text = injected or "nothing"
    agent = Agent(
        ScriptedChatClient([generated or "ok"]),
        history=history,
        context_providers=[Injector(injected_text), FactsProvider(store)],
    )
    asyncio.run(agent.run(external or "hello", session=agent.create_session("s")))
    expected = {candidate.key: candidate.value for candidate in parse_assertions(external)}
    assert values(store) == expected


def test_a_failed_model_call_admits_nothing() -> None:
    store = FactStore(clock=Clock())
    store.apply(store.begin_turn("product=Ledger"), parse_assertions("product=Ledger"))
    before = snapshot(store)
    provider = FactsProvider(store)
    agent = Agent(ScriptedChatClient([ModelTimeoutError("no answer in 30 s")]), context_providers=[provider])
    session = agent.create_session()
    with pytest.raises(ModelTimeoutError):
        asyncio.run(agent.run("module=Billing", session=session))
    assert snapshot(store)[2] == before[2]
    assert provider.last_turn is None
    assert asyncio.run(agent.history.load(session.session_id)) == []


def test_a_forget_during_the_call_makes_the_extraction_stale() -> None:
    store = FactStore(clock=Clock())
    provider = FactsProvider(store)

    def answer_while_forgetting(request: Sequence[Message]) -> str:
        store.forget()
        return "Noted."

    agent = Agent(ScriptedChatClient([answer_while_forgetting]), context_providers=[provider])
    response = asyncio.run(agent.run("module=Billing"))
    assert response.text == "Noted."
    assert isinstance(provider.last_rejection, StaleTicketError)
    assert "a forget happened since" in str(provider.last_rejection)
    assert store.facts() == []


def test_refused_declarations_do_not_break_the_run_and_are_kept() -> None:
    store = FactStore(clock=Clock())
    provider = FactsProvider(store)
    agent = Agent(ScriptedChatClient(["Noted."]), context_providers=[provider])
    session = agent.create_session()
    asyncio.run(agent.run("product=Ledger", session=session))
    before = snapshot(store)
    assert asyncio.run(agent.run("product=Other; colour=blue", session=session)).text == "Noted."
    assert isinstance(provider.last_rejection, FactRejectedError)
    assert "'colour'" in str(provider.last_rejection)
    assert snapshot(store)[2] == before[2]
    too_long = "module=" + "x" * 4096
    assert asyncio.run(agent.run(too_long, session=session)).text == "Noted."
    assert isinstance(provider.last_rejection, FactRejectedError)
    assert provider.last_turn is not None
    assert provider.last_turn.ticket is None
    assert snapshot(store)[2] == before[2]


def test_a_model_writer_proposes_from_the_user_text() -> None:
    store = FactStore(clock=Clock())
    writer = ModelWriter(OfflineModel())
    agent = Agent(OfflineModel(), context_providers=[FactsProvider(store, writer)])
    asyncio.run(agent.run("module=Billing; database=SQL Server 2022"))
    assert values(store) == {"module": "Billing", "database": "SQL Server 2022"}
    assert len(writer.call_usage) == 1


def test_the_provider_refuses_what_is_not_a_store_or_a_writer() -> None:
    with pytest.raises(ConfigurationError, match="fact store"):
        FactsProvider({})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="propose"):
        FactsProvider(FactStore(), writer="rules")  # type: ignore[arg-type]


def test_manual_helper_prepends_the_block_and_stores_the_user_text() -> None:
    store = FactStore(clock=Clock())
    client = ScriptedChatClient(["Noted."])
    agent = Agent(client)
    session = agent.create_session()
    turn = asyncio.run(run_with_facts(agent, store, "module=Reporting", session))
    assert turn.admission is not None
    assert values(store) == {"module": "Reporting"}
    block = store.to_prompt_block()
    second = asyncio.run(run_with_facts(agent, store, "module=Billing", session))
    sent = client.requests[1][-1]
    assert sent.role == "user"
    assert sent.text == f"{block}\n\nmodule=Billing"
    assert second.admission is not None
    assert [fact.value for fact in second.admission.replaced] == ["Reporting"]
    stored = asyncio.run(agent.history.load(session.session_id))
    assert [message.text for message in stored] == ["module=Reporting", "Noted.", "module=Billing", "Noted."]
    assert values(store) == {"module": "Billing"}


def test_manual_helper_admits_nothing_when_the_run_fails_or_goes_stale() -> None:
    store = FactStore(clock=Clock())
    agent = Agent(ScriptedChatClient([ModelTimeoutError("no answer")]))
    with pytest.raises(ModelTimeoutError):
        asyncio.run(run_with_facts(agent, store, "module=Billing", agent.create_session()))
    assert store.facts() == []

    def answer_while_forgetting(request: Sequence[Message]) -> str:
        store.forget("module")
        return "Noted."

    stale_agent = Agent(ScriptedChatClient([answer_while_forgetting]))
    turn = asyncio.run(run_with_facts(stale_agent, store, "module=Billing", stale_agent.create_session()))
    assert isinstance(turn.rejection, StaleTicketError)
    assert turn.response is not None
    assert store.facts() == []
    with pytest.raises(ConfigurationError, match="user's text"):
        asyncio.run(run_with_facts(stale_agent, store, "  ", stale_agent.create_session()))
