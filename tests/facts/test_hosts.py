"""One scenario list, run by every host that puts facts around a model: the agent runtime (provider
and manual styles), Agent Framework, LangChain, the Agents SDK and the proxy.

Each host is driven the way its users drive it, with a model that answers "Noted." (the
runtime's and Agent Framework's through ``ScriptedChatClient``, LangChain's fake chat model, the
Agents SDK and the proxy through an OpenAI-compatible server on 127.0.0.1), and its facts are
read where its users read them (the proxy's through ``GET .../facts``).  Every host goes through
:class:`~contextledger.facts.FactsHost`, so every scenario must hold on every host; a host
differing anywhere is the bug this suite exists to catch.

The proxy is given the custom schema as a file (``--facts-schema``); it has no per-turn result, so
there its facts and its listing are what is checked.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Protocol

import pytest

from contextledger.agents import Agent, FactsProvider, run_with_facts
from contextledger.clients import ScriptedChatClient
from contextledger.exceptions import FactRejectedError
from contextledger.facts import DEFAULT_SCHEMA, FactSchema, FactStore, FactsTurn
from tests.facts.support import CUSTOM_SCHEMA
from tests.integrations.conftest import completion
from tests.loopback import json_endpoint

pytest.importorskip("agent_framework", reason="the 'maf' extra")
pytest.importorskip("langchain.agents", reason="the 'langchain' extra")
pytest.importorskip("agents", reason="the 'openai-agents' extra")
pytest.importorskip("starlette", reason="the 'serve' extra")

import agent_framework as maf
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from openai import AsyncOpenAI

import agents as sdk
from contextledger.integrations.langchain import FactsMiddleware
from contextledger.integrations.maf import ContextLedgerChatClient, FactsContextProvider
from contextledger.integrations.openai_agents import AgentsFacts
from tests.serve.conftest import Proxy, StartProxy, fake_upstream, start_proxy  # noqa: F401

sdk.set_tracing_disabled(True)  # the SDK would otherwise export its own traces over the network

REPLY = "Noted."
KEY = "sk-facts-hosts-tenant"


class Host(Protocol):
    """One host, as the scenarios drive it."""

    def say(self, text: str) -> FactsTurn | None:
        """One user turn; the host's report of its facts turn (``None`` where the host has none)."""

    def facts(self) -> dict[str, str]:
        """The facts, read where the host's users read them."""

    def forget(self, key: str | None) -> None: ...

    def report(self) -> str:
        """What a person reads about the facts after the turn."""


class LibraryHost:
    """What the library hosts share: a store the test can read, and each turn's report."""

    def __init__(self, schema: FactSchema) -> None:
        self.store = FactStore(schema=schema)
        self.turn: FactsTurn | None = None

    def facts(self) -> dict[str, str]:
        return {fact.key: fact.value for fact in self.store.facts()}

    def report(self) -> str:
        assert self.turn is not None
        return self.turn.describe()


class RuntimeHost(LibraryHost):
    def __init__(self, schema: FactSchema) -> None:
        super().__init__(schema)
        self.provider = FactsProvider(self.store)
        self.agent = Agent(ScriptedChatClient([REPLY]), context_providers=[self.provider])
        self.session = self.agent.create_session()

    def say(self, text: str) -> FactsTurn | None:
        assert asyncio.run(self.agent.run(text, session=self.session)).text == REPLY
        self.turn = self.provider.last_turn
        return self.turn

    def forget(self, key: str | None) -> None:
        self.store.forget(key)


class ManualHost(RuntimeHost):
    def __init__(self, schema: FactSchema) -> None:
        LibraryHost.__init__(self, schema)
        self.agent = Agent(ScriptedChatClient([REPLY]))
        self.session = self.agent.create_session()

    def say(self, text: str) -> FactsTurn | None:
        self.turn = asyncio.run(run_with_facts(self.agent, self.store, text, self.session))
        return self.turn


class MafHost(LibraryHost):
    def __init__(self, schema: FactSchema) -> None:
        super().__init__(schema)
        self.provider = FactsContextProvider(self.store)
        self.history = maf.InMemoryHistoryProvider()
        self.agent = maf.Agent(
            client=ContextLedgerChatClient(ScriptedChatClient([REPLY])), context_providers=[self.history, self.provider]
        )
        self.session = self.agent.create_session()

    def say(self, text: str) -> FactsTurn | None:
        async def run() -> Any:
            return await self.agent.run(text, session=self.session)

        assert asyncio.run(run()).text == REPLY
        self.turn = self.provider.last_turn
        return self.turn

    def forget(self, key: str | None) -> None:
        asyncio.run(self.provider.forget(key, histories=[(self.session, self.history)]))


class LangChainHost(LibraryHost):
    def __init__(self, schema: FactSchema) -> None:
        super().__init__(schema)
        self.middleware = FactsMiddleware(self.store)
        model = GenericFakeChatModel(messages=(AIMessage(REPLY) for _ in itertools.count()))
        self.agent = create_agent(model, tools=[], middleware=[self.middleware], checkpointer=InMemorySaver())
        self.config: Any = {"configurable": {"thread_id": "hosts"}}

    def say(self, text: str) -> FactsTurn | None:
        state = self.agent.invoke({"messages": [HumanMessage(text)]}, self.config)
        assert state["messages"][-1].content == REPLY
        self.turn = self.middleware.last_turn
        return self.turn

    def forget(self, key: str | None) -> None:
        self.middleware.forget(key, graphs=[(self.agent, self.config)])


class AgentsSdkHost(LibraryHost):
    def __init__(self, schema: FactSchema, base_url: str) -> None:
        super().__init__(schema)
        self.facts_around = AgentsFacts(self.store)
        client = AsyncOpenAI(base_url=base_url, api_key="test-key", max_retries=0)
        model = sdk.OpenAIChatCompletionsModel(model="test-model", openai_client=client)
        self.agent = sdk.Agent(name="desk", instructions="You are the support desk.", model=model)

    def say(self, text: str) -> FactsTurn | None:
        result = asyncio.run(self.facts_around.run(self.agent, text))
        assert result.final_output == REPLY
        self.turn = self.facts_around.last_turn
        return self.turn

    def forget(self, key: str | None) -> None:
        asyncio.run(self.facts_around.forget(key))


class ProxyHost:
    """A real ``contextledger serve`` in session mode; its facts are read over HTTP."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.session = f"hosts-{uuid.uuid4().hex[:8]}"
        proxy.create_session(self.session, KEY)

    def say(self, text: str) -> FactsTurn | None:
        body = {"model": "fake", "messages": [{"role": "user", "content": text}]}
        status, reply = self.proxy.call(
            "POST", "/v1/chat/completions", body, KEY, headers={"X-Contextledger-Session": self.session}
        )
        assert status == 200, reply
        return None

    def facts(self) -> dict[str, str]:
        return self.proxy.facts(self.session, KEY)

    def forget(self, key: str | None) -> None:
        path = f"/v1/contextledger/sessions/{self.session}/forget"
        status, report = self.proxy.call("POST", path, {} if key is None else {"key": key}, KEY)
        assert status == 200, report

    def report(self) -> str:
        status, body = self.proxy.get(f"/v1/contextledger/sessions/{self.session}/facts", KEY)
        assert status == 200, body
        text: str = body["text"]
        return text

    def rejected_count(self) -> float:
        status, text = self.proxy.get("/metrics")
        assert status == 200
        lines = [
            line for line in str(text).splitlines() if line.startswith('contextledger_facts_total{outcome="rejected"}')
        ]
        return float(lines[0].split()[-1]) if lines else 0.0


LIBRARY_HOSTS = ["runtime", "manual", "maf", "langchain", "agents_sdk"]
HOSTS = [*LIBRARY_HOSTS, "proxy"]


class MakeHost(Protocol):
    def __call__(self, schema: FactSchema = DEFAULT_SCHEMA) -> Host: ...


@pytest.fixture
def chat_server() -> Iterator[str]:
    """An OpenAI-compatible chat-completions server on 127.0.0.1 that always answers ``REPLY``."""
    with json_endpoint(lambda body: (200, completion(REPLY))) as url:
        yield url


@pytest.fixture(params=HOSTS)
def make_host(request: pytest.FixtureRequest) -> Iterator[MakeHost]:
    name: str = request.param
    with ExitStack() as stack:

        def make(schema: FactSchema = DEFAULT_SCHEMA) -> Host:
            if name == "runtime":
                return RuntimeHost(schema)
            if name == "manual":
                return ManualHost(schema)
            if name == "maf":
                return MafHost(schema)
            if name == "langchain":
                return LangChainHost(schema)
            if name == "agents_sdk":
                return AgentsSdkHost(schema, request.getfixturevalue("chat_server"))
            starter: StartProxy = request.getfixturevalue("start_proxy")
            if schema == DEFAULT_SCHEMA:
                return ProxyHost(stack.enter_context(starter()))
            path: Path = request.getfixturevalue("tmp_path") / "schema.json"
            path.write_text(json.dumps(schema.to_dict()), encoding="utf-8")
            return ProxyHost(stack.enter_context(starter("--facts-schema", str(path))))

        yield make


# The scenarios ---------------------------------------------------------------------------------


def test_declarations_are_admitted_with_their_quotes(make_host: MakeHost) -> None:
    host = make_host()
    turn = host.say("module=Reporting; database=PostgreSQL")
    assert host.facts() == {"module": "Reporting", "database": "PostgreSQL"}
    if turn is not None:
        assert turn.admission is not None
        assert turn.rejection is None
        assert [(f.key, f.evidence) for f in turn.admission.admitted] == [
            ("module", "module=Reporting"),
            ("database", "database=PostgreSQL"),
        ]


def test_a_correction_replaces_its_key_only(make_host: MakeHost) -> None:
    host = make_host()
    host.say("module=Reporting; database=PostgreSQL")
    turn = host.say("Sorry, I was wrong: database=SQL Server 2022")
    assert host.facts() == {"module": "Reporting", "database": "SQL Server 2022"}
    if turn is not None:
        assert turn.admission is not None
        assert [(f.key, f.value) for f in turn.admission.replaced] == [("database", "PostgreSQL")]


def test_an_unknown_key_rejects_the_message_and_leaves_the_facts(make_host: MakeHost) -> None:
    host = make_host()
    host.say("module=Billing")
    rejected_before = host.rejected_count() if isinstance(host, ProxyHost) else 0.0
    turn = host.say("module=Reporting; timeout=30")
    assert host.facts() == {"module": "Billing"}
    if isinstance(host, ProxyHost):
        assert host.rejected_count() > rejected_before  # the proxy's metrics still count refusals
    else:
        assert turn is not None
        assert turn.admission is None
        assert isinstance(turn.rejection, FactRejectedError)
        outcomes = {d.key: d.outcome for d in turn.diagnostics}
        assert outcomes == {"module": "rejected", "timeout": "rejected"}
        assert "'timeout' is not an allowed key" in turn.describe()


def test_forget_removes_one_key_then_every_fact_and_nothing_comes_back(make_host: MakeHost) -> None:
    host = make_host()
    host.say("module=Billing; database=SQL Server 2022")
    host.forget("module")
    assert host.facts() == {"database": "SQL Server 2022"}
    host.forget(None)
    assert host.facts() == {}
    host.say("Where can I find logs?")
    assert host.facts() == {}


def test_an_allowed_key_after_a_comma_starts_a_new_declaration(make_host: MakeHost) -> None:
    host = make_host()
    turn = host.say("database=Postgres, module=Billing")
    assert host.facts() == {"database": "Postgres", "module": "Billing"}
    if turn is not None:
        assert [(d.outcome, d.key, d.value) for d in turn.diagnostics] == [
            ("admitted", "database", "Postgres"),
            ("admitted", "module", "Billing"),
        ]


def test_describe_after_an_admission_names_what_was_admitted(make_host: MakeHost) -> None:
    host = make_host()
    host.say("module=Billing")
    report = host.report()
    assert "no '='" not in report
    assert "module" in report
    assert "Billing" in report
    if not isinstance(host, ProxyHost):
        assert "admitted module='Billing' (evidence 'module=Billing')" in report


def test_a_custom_schema_is_the_stores_own_on_every_host(make_host: MakeHost) -> None:
    host = make_host(CUSTOM_SCHEMA)
    turn = host.say("team=core, service=billing")
    assert host.facts() == {"team": "core", "service": "billing"}
    if turn is not None:  # the proxy answers with the model's reply alone
        assert "admitted team='core'" in turn.describe()
    # A seed key is no key of this schema: the message is refused, the facts stay.
    turn = host.say("module=Billing")
    assert host.facts() == {"team": "core", "service": "billing"}
    if turn is not None:
        assert isinstance(turn.rejection, FactRejectedError)
        assert "'module' is not an allowed key" in turn.describe()
    # The schema's own bounds: a 41-character value is over its 40.
    turn = host.say("region=" + "r" * 41)
    assert "region" not in host.facts()
    if turn is not None:
        assert turn.rejection is not None
        assert "over the limit of 40" in turn.describe()
    host.say("region=" + "r" * 40)
    assert host.facts()["region"] == "r" * 40
    # Forgetting a key of this schema is forgetting, on every host (the proxy checks it against
    # the schema its sessions follow).
    host.forget("team")
    assert "team" not in host.facts()
