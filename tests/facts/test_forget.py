"""Forget leaves nothing: random histories with declarations embedded in prose, and the issue's transcript."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger._forgotten import FORGOTTEN_MARKER, REMOVED_MARKER
from contextledger.agents import Agent, FactsProvider
from contextledger.clients import ScriptedChatClient
from contextledger.demo import FactsDesk
from contextledger.exceptions import ConfigurationError, TurnIdReusedError
from contextledger.facts import FactStore, forget_facts, scrub_history
from contextledger.facts._forget import HistoryTarget, history_target
from contextledger.facts._parse import read_message
from contextledger.history import InMemoryHistoryProvider, SQLiteHistoryProvider, StoredTurn
from contextledger.messages import Message
from tests.sizes import examples

KEYS = ["module", "database", "customer", "priority"]
_WORDS = st.sampled_from(["hello", "Sorry, I was wrong:", "see", "we run", "(note", "thanks,", "x"])
_VALUE = st.text(alphabet="abcdeXYZ0123 ", min_size=1, max_size=10).map(str.strip).filter(bool)
_KEY = st.sampled_from([*KEYS, "Module", "DATABASE"])


@st.composite
def user_messages(draw: st.DrawFn) -> str:
    """Segments of prose, bare declarations and declarations after prose, joined by ';' or line breaks."""
    segments = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["prose", "bare", "after-prose"]))
        if kind == "prose":
            segments.append(draw(_WORDS))
        elif kind == "bare":
            segments.append(f"{draw(_KEY)}={draw(_VALUE)}")
        else:
            segments.append(f"{draw(_WORDS)} {draw(_KEY)}={draw(_VALUE)}")
    return draw(st.sampled_from(["; ", "\n"])).join(segments)


def _whole_word(value: str, text: str) -> bool:
    return re.search(r"(?<!\w)" + re.escape(value) + r"(?!\w)", text) is not None


@settings(max_examples=examples(150), deadline=None)
@given(
    main=st.lists(st.tuples(user_messages(), st.booleans()), min_size=1, max_size=6),
    logs=st.lists(st.tuples(user_messages(), st.booleans()), max_size=4),
    key=st.sampled_from([*KEYS, None]),
    kept=st.integers(0, 12),
)
def test_after_forget_no_history_or_turn_record_holds_a_declaration_or_value_of_the_key(
    main: list[tuple[str, bool]], logs: list[tuple[str, bool]], key: str | None, kept: int
) -> None:
    """Each (user, reply) pair is stored as an exactly-once turn, then a reduction keeps only the
    last ``kept`` messages of "main": a value declared in a dropped turn survives only in its
    turn record, and forget must find it there and leave it nowhere."""
    history = InMemoryHistoryProvider()
    turns = {"main": main, "logs": logs}

    async def store() -> None:
        for name, pairs in turns.items():
            for number, (text, echo) in enumerate(pairs):
                # A reply that repeats what the user said, or one that says nothing of it.
                reply = Message.assistant(f"From this conversation: {text}" if echo else "Noted.")
                await history.append_turn(name, f"turn-{number}", [Message.user(text)], [reply])
        reduced = await history.load("main")
        await history.replace("main", reduced[len(reduced) - min(kept, len(reduced)) :])

    asyncio.run(store())
    forgotten_keys = set(KEYS) if key is None else {key}
    values = {
        sign.value
        for pairs in turns.values()
        for text, _ in pairs
        for sign in read_message(text).signs
        if sign.kind != "prose" and sign.key in forgotten_keys and sign.value
    }

    report = asyncio.run(forget_facts(FactStore(), key, histories=[history_target(history, name) for name in turns]))

    async def everything(name: str) -> tuple[list[Message], dict[str, StoredTurn]]:
        return await history.load(name), {turn.turn_id: turn for turn in await history.load_turns(name)}

    for name, pairs in turns.items():
        messages, records = asyncio.run(everything(name))
        assert len(records) == len(pairs)  # every turn id is still recorded, so a retry is still known
        assert report.changed_turns[f"in_memory:{name}"] == sum(
            1 for number, (text, echo) in enumerate(pairs) if records[f"turn-{number}"].inputs[0].text != text
        )
        for message in [*messages, *(m for turn in records.values() for m in (*turn.inputs, *turn.reply))]:
            for sign in read_message(message.text).signs:
                assert not (sign.kind != "prose" and sign.key in forgotten_keys), (message.text, sign)
            for value in values:
                if len(value) >= 3:
                    assert not _whole_word(value, message.text), (value, message.text)
        # Declarations of other keys in user messages are kept word for word, unless they share a forgotten value.
        others = set(KEYS) - forgotten_keys
        for number, (original, _) in enumerate(pairs):
            now = records[f"turn-{number}"].inputs[0].text
            before = {
                (s.key, s.value)
                for s in read_message(original).signs
                if s.kind == "declaration" and s.key in others and not any(v in (s.value or "") for v in values)
            }
            after = {(s.key, s.value) for s in read_message(now).signs if s.kind == "declaration" and s.key in others}
            assert before <= after


def test_a_value_left_only_in_a_turn_record_is_forgotten_from_the_messages_too() -> None:
    """The store never held module=Reporting and a reduction dropped the turn that declared it,
    yet a summary still names it: the turn record is where forget learns the value."""
    history = InMemoryHistoryProvider()

    async def scenario() -> tuple[list[Message], list[StoredTurn]]:
        await history.append_turn("s", "t1", [Message.user("module=Reporting")], [Message.assistant("Noted.")])
        await history.replace("s", [Message.assistant("Summary: the user works on Reporting.")])
        await forget_facts(FactStore(), "module", histories=[history_target(history, "s")])
        return await history.load("s"), await history.load_turns("s")

    messages, records = asyncio.run(scenario())
    assert [m.text for m in messages] == [REMOVED_MARKER]
    assert records == [StoredTurn("t1", (Message.user(FORGOTTEN_MARKER),), (Message.assistant("Noted."),))]


def test_a_history_target_needs_both_turn_functions_or_neither() -> None:
    async def load() -> list[Message]:
        return []

    async def replace(messages: list[Message]) -> None:
        return None

    async def load_turns() -> list[StoredTurn]:
        return []

    with pytest.raises(ConfigurationError, match="only one of load_turns and rewrite_turns"):
        HistoryTarget("h", load, replace, load_turns)
    assert HistoryTarget("h", load, replace).load_turns is None


def test_scrub_is_idempotent_on_a_history_it_already_scrubbed() -> None:
    history = [Message.user("Sorry: database=SQL Server 2022"), Message.assistant("database: SQL Server 2022")]
    once = scrub_history(history, frozenset({"database"}), {"SQL Server 2022"})
    assert scrub_history(once, frozenset({"database"}), {"SQL Server 2022"}) == once


TRANSCRIPT = [
    "database=PostgreSQL 15",
    "Sorry, I was wrong: database=SQL Server 2022",
    "Hi, I'm calling about… customer=Acme GmbH; module=Billing",
]


def test_the_desk_forgets_the_transcript_and_the_offline_model_cannot_answer() -> None:
    for mode in ("provider", "manual"):
        from contextledger.clients import OfflineModel  # noqa: PLC0415

        desk = FactsDesk.create(OfflineModel(), mode=mode)
        for line in TRANSCRIPT:
            asyncio.run(desk.handle(line))
        assert desk.store.get("database") is not None
        assert desk.store.get("database").value == "SQL Server 2022"  # type: ignore[union-attr]
        asyncio.run(desk.handle("forget"))
        answer = asyncio.run(desk.handle("Which database am I on?")).text
        assert "SQL Server" not in answer, answer
        assert "PostgreSQL" not in answer, answer
        for name in ("main", "logs"):
            for message in asyncio.run(desk.history(name)):
                for value in ("PostgreSQL 15", "SQL Server 2022", "Acme GmbH", "Billing"):
                    assert value not in message.text or message.text == "Which database am I on?", message.text


def echoing_model() -> ScriptedChatClient:
    """Repeats the user's last message back, so a reply holds whatever the user declared."""
    return ScriptedChatClient(
        [lambda messages: "Noted: " + next(m.text for m in reversed(messages) if m.role == "user")],
        report_usage=False,
    )


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_a_retried_turn_after_forget_replays_without_the_value_or_a_model_call(store: str, tmp_path: Path) -> None:
    """design.md#forgetting through the agent runtime: the turn record a retry reads is rewritten by forget."""
    history = InMemoryHistoryProvider() if store == "memory" else SQLiteHistoryProvider(tmp_path / "h.db")
    facts = FactStore()
    model = echoing_model()
    agent = Agent(model, context_providers=[history, FactsProvider(facts)])
    session = agent.create_session()

    async def scenario() -> None:
        first = await agent.run("We run on database=PostgreSQL 15", session=session, turn_id="t-1")
        assert "PostgreSQL 15" in first.text
        assert facts.get("database") is not None
        report = await forget_facts(facts, "database", histories=[history_target(history, session.session_id)])
        assert report.changed_turns == {f"{history.source_id}:{session.session_id}": 1}

        again = await agent.run("We run on database=PostgreSQL 15", session=session, turn_id="t-1")
        assert again.replayed
        assert model.calls == 1
        assert "PostgreSQL" not in again.text
        assert REMOVED_MARKER in again.text
        assert all("PostgreSQL" not in m.text for m in again.messages)
        for turn in await history.load_turns(session.session_id):
            assert all("PostgreSQL" not in m.text for m in (*turn.inputs, *turn.reply)), turn
        assert all("PostgreSQL" not in m.text for m in await history.load(session.session_id))
        assert facts.get("database") is None  # the replay admitted nothing
        # Another input under the same id is still refused: only what a marker stands for may
        # differ (what stood there is exactly what may no longer be known).
        with pytest.raises(TurnIdReusedError):
            await agent.run("Which database am I on?", session=session, turn_id="t-1")
        await history.close()

    asyncio.run(scenario())
