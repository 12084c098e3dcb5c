"""FactsDesk: two agents, one store, host commands, and forgetting that reaches both histories."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from contextledger import demo, facts
from contextledger.agents import Agent, FactsProvider
from contextledger.clients import OfflineModel, ScriptedChatClient
from contextledger.demo import FactsDesk, is_logs_question
from contextledger.exceptions import ConfigurationError, FactsError
from contextledger.facts import FactStore, scrub_history
from contextledger.facts._forget import FORGOTTEN_MARKER, REMOVED_MARKER
from contextledger.history import SQLiteHistoryProvider
from contextledger.messages import FunctionCallContent, Message, validate
from tests.facts.support import Clock, snapshot


def texts(messages: list[Message]) -> list[str]:
    return [message.text for message in messages]


def test_scrub_marks_user_declarations_and_replaces_replies_holding_a_forgotten_value() -> None:
    history = [
        Message.user("module=Reporting; database=PostgreSQL"),
        Message.assistant("module: Reporting"),
        Message.user("Sorry, I was wrong: Module=Billing\nplease check"),
        Message.assistant("ok"),
        Message.user("What runs Billing?"),
        Message.assistant("Billing runs on the new cluster."),
        Message.user("thanks"),
        Message.assistant("welcome to Billings"),
    ]
    scrubbed = scrub_history(history, frozenset({"module"}), set())
    assert texts(scrubbed) == [
        f"{FORGOTTEN_MARKER}; database=PostgreSQL",
        REMOVED_MARKER,
        f"Sorry, I was wrong: {FORGOTTEN_MARKER}\nplease check",
        "ok",
        f"What runs {FORGOTTEN_MARKER}?",
        REMOVED_MARKER,
        "thanks",
        "welcome to Billings",  # whole words only: "Billings" is another word
    ]
    assert scrub_history(history, frozenset({"product"}), set()) == history


def test_scrub_keeps_tool_pairs_whole_and_short_values_only_go_inside_declarations() -> None:
    call = FunctionCallContent("c1", "find_logs", '{"subject": "Billing"}')
    history = [
        Message.user("module=Billing; priority=P1"),
        Message.assistant("Noted P1."),
        Message.user("Where are the logs?"),
        Message.assistant(calls=[call]),
        Message.tool("c1", "Logs for Billing are in /var/log/billing"),
        Message.assistant("See /var/log/billing."),
    ]
    scrubbed = scrub_history(history, frozenset({"module", "priority"}), set())
    assert texts(scrubbed) == [
        f"{FORGOTTEN_MARKER}; {FORGOTTEN_MARKER}",
        "Noted P1.",
        "Where are the logs?",
        "",
        REMOVED_MARKER,
        "See /var/log/billing.",
    ]
    assert [c.arguments for c in scrubbed[3].contents if isinstance(c, FunctionCallContent)] == ["{}"]
    assert validate(scrubbed) == []


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
    assert any("database=SQL Server 2022" in text for text in stored(tmp_path, "main"))
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


def test_the_desk_is_a_demo_of_the_memory_not_part_of_it() -> None:
    for name in ("FactsDesk", "DeskReply", "ChatLoop", "build_desk"):
        assert not hasattr(facts, name)
        assert name in demo.__all__
    assert demo.__doc__ is not None
    for name in demo.__all__:
        if name not in ("COMMANDS", "Mode"):
            assert name in demo.__doc__, f"{name} is missing from contextledger.demo's map"
