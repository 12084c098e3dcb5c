"""FactsDesk: two agents, one store, host commands, and forgetting that reaches both histories."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger.agents import Agent
from contextledger.clients import OfflineModel, ScriptedChatClient
from contextledger.exceptions import ConfigurationError, FactsError
from contextledger.facts import FactsDesk, FactsProvider, FactStore, is_logs_question, scrub_history
from contextledger.history import SQLiteHistoryProvider
from contextledger.messages import FunctionCallContent, Message, validate
from tests.facts.support import Clock, snapshot


def texts(messages: list[Message]) -> list[str]:
    return [message.text for message in messages]


def test_scrub_removes_the_declarations_and_the_replies_built_on_them() -> None:
    history = [
        Message.user("module=Reporting; database=PostgreSQL"),
        Message.assistant("module: Reporting"),
        Message.user("Module = Billing\nplease check"),
        Message.assistant("ok"),
        Message.user("What runs Billing?"),
        Message.assistant("Billing runs on the new cluster."),
        Message.user("thanks"),
        Message.assistant("welcome"),
    ]
    scrubbed = scrub_history(history, frozenset({"module"}), set())
    assert texts(scrubbed) == [
        "database=PostgreSQL",
        "please check",
        "What runs Billing?",
        "thanks",
        "welcome",
    ]
    assert scrub_history(history, frozenset({"product"}), set()) == history


def test_scrub_drops_a_message_that_declared_nothing_else_and_keeps_tool_pairs_whole() -> None:
    call = FunctionCallContent("c1", "find_logs", '{"subject": "Billing"}')
    history = [
        Message.user("module=Billing"),
        Message.assistant("Noted."),
        Message.user("Where are the logs?"),
        Message.assistant(calls=[call]),
        Message.tool("c1", "Logs for Billing are in /var/log/billing"),
        Message.assistant("See /var/log/billing."),
        Message.user("Where are the logs for the API?"),
        Message.assistant(calls=[FunctionCallContent("c2", "find_logs", '{"subject": "api"}')]),
        Message.tool("c2", "/var/log/api"),
        Message.assistant("See /var/log/api."),
    ]
    scrubbed = scrub_history(history, frozenset({"module"}), set())
    assert texts(scrubbed) == [
        "Where are the logs?",
        "Where are the logs for the API?",
        "",
        "/var/log/api",
        "See /var/log/api.",
    ]
    assert validate(scrubbed) == []


_KEYS = st.sampled_from(["module", "database", "product", "Module"])
_VALUE = st.text(alphabet="abcXYZ 12", min_size=1, max_size=6).map(str.strip).filter(bool)
_SEGMENT = st.one_of(st.tuples(_KEYS, _VALUE).map(lambda kv: f"{kv[0]}={kv[1]}"), st.sampled_from(["hello", "why?"]))
_USER = st.lists(_SEGMENT, min_size=1, max_size=4).map("; ".join)


@settings(max_examples=80, deadline=None)
@given(turns=st.lists(st.tuples(_USER, st.text(alphabet="abcXYZ .", max_size=10)), max_size=6))
def test_after_a_scrub_no_message_states_a_forgotten_key(turns: list[tuple[str, str]]) -> None:
    history = [message for user, reply in turns for message in (Message.user(user), Message.assistant(reply))]
    scrubbed = scrub_history(history, frozenset({"module"}), set())
    forgotten_values = {
        segment.partition("=")[2].strip()
        for user, _ in turns
        for segment in user.split(";")
        if "=" in segment
        if segment.partition("=")[0].strip().lower() == "module"
    }
    kept_segments = [
        segment.strip()
        for user, _ in turns
        for segment in user.split(";")
        if segment.partition("=")[0].strip().lower() != "module" and segment.strip()
    ]
    scrubbed_segments = [s.strip() for m in scrubbed if m.role == "user" for s in m.text.split(";") if s.strip()]
    assert scrubbed_segments == kept_segments
    for message in scrubbed:
        if message.role == "assistant":
            assert not any(value in message.text for value in forgotten_values)


def sqlite_desk(tmp_path: Path, mode: str) -> FactsDesk:
    store = FactStore(clock=Clock())
    client = OfflineModel()

    def agent(name: str) -> Agent:
        providers = [FactsProvider(store)] if mode == "provider" else []
        history = SQLiteHistoryProvider(tmp_path / "history.sqlite3")
        return Agent(client, name=name, history=history, context_providers=providers)

    return FactsDesk(agent("main"), agent("logs"), store, mode=mode)  # type: ignore[arg-type]


def stored(tmp_path: Path, session_id: str) -> list[str]:
    """What a fresh reader of the SQLite file sees, not what the desk's objects cache."""
    reader = SQLiteHistoryProvider(tmp_path / "history.sqlite3")
    try:
        return [text for message in asyncio.run(reader.load(session_id)) for text in message.payload_texts()]
    finally:
        asyncio.run(reader.close())


@pytest.mark.parametrize("mode", ["provider", "manual"])
def test_seed_sequence_on_sqlite_histories(tmp_path: Path, mode: str) -> None:
    desk = sqlite_desk(tmp_path, mode)
    for line in ["module=Reporting; database=PostgreSQL", "module=Billing; database=SQL Server 2022"]:
        assert asyncio.run(desk.handle(line)).agent == "main"
    before_logs = snapshot(desk.store)
    assert asyncio.run(desk.handle("Where can I find logs?")).agent == "logs"
    assert snapshot(desk.store)[2] == before_logs[2]
    assert any("Reporting" in text for text in stored(tmp_path, "main"))
    report = asyncio.run(desk.handle("forget module")).forget
    assert report is not None
    assert report.changed_messages["main"] > 0
    assert [fact.key for fact in desk.store.facts()] == ["database"]
    for session in ("main", "logs"):
        assert not any("Reporting" in t or "Billing" in t or "module=" in t for t in stored(tmp_path, session))
    assert "database=SQL Server 2022" in stored(tmp_path, "main")
    asyncio.run(desk.handle("forget"))
    reply = asyncio.run(desk.handle("What database and module do we use?"))
    assert reply.agent == "main"
    assert desk.store.facts() == []
    for session in ("main", "logs"):
        assert not any("SQL Server" in t or "PostgreSQL" in t for t in stored(tmp_path, session))


def test_a_bad_forget_changes_nothing() -> None:
    client = ScriptedChatClient(["Noted."])
    desk = FactsDesk.create(client, store=FactStore(clock=Clock()))
    asyncio.run(desk.handle("module=Billing"))
    before = snapshot(desk.store)
    history = asyncio.run(desk.history("main"))
    with pytest.raises(FactsError, match="cannot forget 'colour'"):
        asyncio.run(desk.handle("forget colour"))
    assert snapshot(desk.store) == before
    assert asyncio.run(desk.history("main")) == history
    assert len(client.requests) == 1  # commands never reach the model
    asyncio.run(desk.handle("mem"))
    asyncio.run(desk.handle("MEM"))
    assert len(client.requests) == 1


def test_the_route_is_configurable_and_both_agents_see_one_store() -> None:
    client = ScriptedChatClient(["Noted."])
    desk = FactsDesk.create(client, route=lambda text: "database" in text)
    assert asyncio.run(desk.handle("database=SQL Server 2022")).agent == "logs"
    assert asyncio.run(desk.handle("Where can I find logs?")).agent == "main"
    assert 'database = "SQL Server 2022"' in client.requests[-1][0].text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Where can I find logs?", True),
        ("check the log file", True),
        ("LOGGING is off", True),
        ("login fails", False),
        ("catalogs are slow", False),
        ("module=Billing", False),
    ],
)
def test_default_route(text: str, expected: bool) -> None:
    assert is_logs_question(text) is expected


def test_desk_configuration_errors() -> None:
    client = OfflineModel()
    store = FactStore()
    plain = Agent(client)
    with pytest.raises(ConfigurationError, match="needs a FactsProvider"):
        FactsDesk(plain, Agent(client), store)
    with pytest.raises(ConfigurationError, match="must not carry a FactsProvider"):
        FactsDesk(Agent(client, context_providers=[FactsProvider(store)]), plain, store, mode="manual")
    with pytest.raises(ConfigurationError, match="two different agents"):
        FactsDesk(plain, plain, store, mode="manual")
    with pytest.raises(ConfigurationError, match="mode must be"):
        FactsDesk(plain, Agent(client), store, mode="auto")  # type: ignore[arg-type]
