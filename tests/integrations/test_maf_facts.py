"""The seed's Demo160 inside MAF: controlled facts through a MAF context provider, two MAF agents (a main
agent and a logs agent, separate sessions) sharing one fact store, talking through MAF's OpenAI client
to a server on 127.0.0.1.

The sequence: declare ``module=Reporting; database=PostgreSQL``, correct to ``module=Billing; database=SQL
Server 2022`` (both keys replaced, each with its exact quote), ask "Where can I find logs?" (routed to the
logs agent, which sees the same facts; the facts do not change), ``forget module`` (database kept, both
histories rewritten), ``forget`` (nothing left), and a last question that must not recreate any fact.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from contextledger.demo import is_logs_question
from contextledger.exceptions import ConfigurationError, FactRejectedError, FactsError, StaleTicketError
from contextledger.facts import FactStore, parse_assertions
from contextledger.facts._block import EMPTY_BLOCK
from contextledger.facts._forget import FORGOTTEN_MARKER
from contextledger.history import SQLiteHistoryProvider
from contextledger.messages import Message
from tests.integrations.conftest import ChatServer, completion
from tests.optional_imports import try_import

with try_import("maf") as maf_extra:
    from agent_framework import Agent, AgentResponse, AgentSession, HistoryProvider, InMemoryHistoryProvider

    from contextledger.integrations.maf import ContextLedgerHistoryProvider, FactsContextProvider, from_maf_messages
    from tests.integrations.maf_support import maf_client

pytestmark = maf_extra.skip

MAIN = "You are the main assistant of a support desk."
LOGS = "You are the logs assistant of a support desk."
KNOWN_VALUES = ("Reporting", "PostgreSQL", "Billing", "SQL Server 2022")
HALLUCINATION = "You use module=Billing; database=SQL Server 2022."


def respond(request: dict[str, Any]) -> dict[str, Any]:
    """A model that repeats the values it was shown in its instructions, as a real one might; asked
    which module it is, it states declarations from thin air, which must never become facts."""
    system = request["messages"][0]["content"]
    question = request["messages"][-1]["content"]
    usage = {"prompt_tokens": len(json.dumps(request["messages"])) // 4, "completion_tokens": 9}
    if "which module" in question:
        return completion(HALLUCINATION, usage=usage)
    seen = [value for value in KNOWN_VALUES if value in system]
    if system.startswith(LOGS):
        return completion(f"Logs are under /var/log/<service>/ for {', '.join(seen) or 'your service'}.", usage=usage)
    return completion(f"Noted; I see {', '.join(seen) or 'no facts'}.", usage=usage)


def run(agent: Agent, text: str) -> AgentResponse[Any]:
    async def main() -> AgentResponse[Any]:
        return await agent.run(text)

    return asyncio.run(main())


def facts(store: FactStore) -> dict[str, tuple[str, str]]:
    return {fact.key: (fact.value, fact.evidence) for fact in store.facts()}


def mentions(messages: list[Message], value: str) -> bool:
    return any(value in message.text for message in messages)


def test_demo160_inside_maf_agents(chat_server: ChatServer, tmp_path: Path) -> None:
    chat_server.respond = respond
    store = FactStore()
    main_facts, logs_facts = FactsContextProvider(store), FactsContextProvider(store)
    main_history = InMemoryHistoryProvider()
    logs_history = ContextLedgerHistoryProvider(SQLiteHistoryProvider(tmp_path / "logs.sqlite3"))
    main = Agent(
        client=maf_client(chat_server), name="main", instructions=MAIN, context_providers=[main_history, main_facts]
    )
    logs = Agent(
        client=maf_client(chat_server), name="logs", instructions=LOGS, context_providers=[logs_history, logs_facts]
    )
    main_session, logs_session = main.create_session(), AgentSession(session_id="logs-session")
    histories = [(main_session, main_history), (logs_session, logs_history)]

    async def ask(text: str) -> dict[str, Any]:
        """The host's route: logs questions to the logs agent, the rest to the main agent."""
        agent, session = (logs, logs_session) if is_logs_question(text) else (main, main_session)
        start = len(chat_server.requests)
        await agent.run(text, session=session)
        (request,) = chat_server.requests[start:]
        return request

    async def stored() -> list[Message]:
        main_stored = from_maf_messages(main_session.state.get(main_history.source_id, {}).get("messages", []))
        return main_stored + await logs_history.provider.load("logs-session")

    async def demo() -> None:
        # Declare, then correct: each key replaced, each with its exact quote.
        await ask("module=Reporting; database=PostgreSQL")
        assert facts(store) == {
            "module": ("Reporting", "module=Reporting"),
            "database": ("PostgreSQL", "database=PostgreSQL"),
        }
        request = await ask("module=Billing; database=SQL Server 2022")
        assert "Reporting" in request["messages"][0]["content"], "the block of this call is the memory before it"
        assert facts(store) == {
            "module": ("Billing", "module=Billing"),
            "database": ("SQL Server 2022", "database=SQL Server 2022"),
        }
        admission = main_facts.last_admission
        assert admission is not None
        assert {fact.value for fact in admission.replaced} == {"Reporting", "PostgreSQL"}

        # Routed to the other agent, which sees the same (corrected) facts; nothing changes.
        before = store.facts()
        request = await ask("Where can I find logs?")
        instructions = request["messages"][0]["content"]
        assert instructions.startswith(LOGS)
        assert "Billing" in instructions
        assert "SQL Server 2022" in instructions
        assert "Reporting" not in instructions
        assert "PostgreSQL" not in instructions
        assert store.facts() == before
        assert logs_facts.last_admission is not None
        assert logs_facts.last_admission.admitted == ()
        assert len(main_session.state[main_history.source_id]["messages"]) == 4, "the logs turn stayed apart"

        # A correction after prose is read as ours is, with its diagnostics on the MAF provider's turn.
        await ask("Sorry, I was wrong: module=Billing")
        turn = main_facts.last_turn
        assert turn is not None
        assert [(d.outcome, d.key, d.evidence) for d in turn.diagnostics] == [("admitted", "module", "module=Billing")]

        # forget module: database stays, and neither history still states or repeats the module.
        report = await main_facts.forget("module", histories=histories)
        assert sum(report.changed_messages.values()) > 0
        assert any(FORGOTTEN_MARKER in m.text for m in await stored() if m.role == "user")
        assert facts(store) == {"database": ("SQL Server 2022", "database=SQL Server 2022")}
        kept = await stored()
        for value in ("Reporting", "Billing"):
            assert not mentions(kept, value), f"{value!r} survived forget module in a history"
        assert not any(re.search(r"module\s*=", m.text) for m in kept)
        assert any("database=SQL Server 2022" in m.text for m in kept if m.role == "user")

        # forget: nothing left in the store or in either history.
        await main_facts.forget(histories=histories)
        assert store.facts() == []
        left = await stored()
        assert not any(mentions(left, value) for value in KNOWN_VALUES)

        # A later question: the model states declarations, which never become facts.
        request = await ask("Remind me which module and database I use?")
        assert EMPTY_BLOCK in request["messages"][0]["content"]
        sent = json.dumps(request["messages"][1:])
        assert not any(value in sent for value in KNOWN_VALUES), "a forgotten value was sent again"
        assert store.facts() == []
        assert main_facts.last_admission is not None
        assert main_facts.last_admission.admitted == ()

    asyncio.run(demo())


def test_a_failed_model_call_admits_nothing(chat_server: ChatServer) -> None:
    def fail(request: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("the model is down")

    chat_server.respond = fail
    store = FactStore()
    provider = FactsContextProvider(store)
    agent = Agent(client=maf_client(chat_server), instructions=MAIN, context_providers=[provider])
    with pytest.raises(Exception, match=r"model is down|500"):
        run(agent, "module=Billing")
    assert store.facts() == []
    assert provider.last_turn is None


def test_a_forget_during_the_call_makes_the_extraction_stale(chat_server: ChatServer) -> None:
    store = FactStore()

    def forget_then_answer(request: dict[str, Any]) -> dict[str, Any]:
        store.forget()  # another agent forgot everything while this model was answering
        return completion("ok")

    chat_server.respond = forget_then_answer
    provider = FactsContextProvider(store)
    agent = Agent(client=maf_client(chat_server), instructions=MAIN, context_providers=[provider])
    run(agent, "module=Billing")
    assert store.facts() == []
    assert isinstance(provider.last_rejection, StaleTicketError)


def test_invalid_declarations_are_refused_whole_and_the_run_still_answers(chat_server: ChatServer) -> None:
    chat_server.respond = lambda request: completion("ok")
    store = FactStore()
    provider = FactsContextProvider(store)
    agent = Agent(client=maf_client(chat_server), instructions=MAIN, context_providers=[provider])
    run(agent, "module=Billing")
    response = run(agent, "module=Reporting; colour=blue")
    assert response.text == "ok"
    assert isinstance(provider.last_rejection, FactRejectedError)
    assert "colour" in str(provider.last_rejection)
    assert facts(store) == {"module": ("Billing", "module=Billing")}


def test_forget_refuses_a_history_it_cannot_rewrite_before_changing_anything() -> None:
    store = FactStore()
    ticket = store.begin_turn("module=Billing")
    store.apply(ticket, parse_assertions("module=Billing"))
    provider = FactsContextProvider(store)

    class Elsewhere(HistoryProvider):
        async def get_messages(self, session_id: str | None, *, state: Any = None, **kwargs: Any) -> list[Any]:
            return []

        async def save_messages(
            self, session_id: str | None, messages: Any, *, state: Any = None, **kwargs: Any
        ) -> None:
            return None

    with pytest.raises(ConfigurationError, match="cannot rewrite"):
        asyncio.run(provider.forget("module", histories=[(AgentSession(), Elsewhere("elsewhere"))]))
    assert facts(store) == {"module": ("Billing", "module=Billing")}, "a refused forget changed the store"


def test_forgetting_an_unknown_key_changes_neither_store_nor_history(chat_server: ChatServer) -> None:
    chat_server.respond = lambda request: completion("ok")
    store = FactStore()
    provider = FactsContextProvider(store)
    history = InMemoryHistoryProvider()
    agent = Agent(client=maf_client(chat_server), instructions=MAIN, context_providers=[history, provider])
    session = agent.create_session()

    async def main() -> None:
        await agent.run("module=Billing", session=session)
        before = [m.to_dict() for m in session.state[history.source_id]["messages"]]
        with pytest.raises(FactsError, match="colour"):
            await provider.forget("colour", histories=[(session, history)])
        assert [m.to_dict() for m in session.state[history.source_id]["messages"]] == before

    asyncio.run(main())
    assert facts(store) == {"module": ("Billing", "module=Billing")}
