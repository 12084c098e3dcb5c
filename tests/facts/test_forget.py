"""Forget leaves nothing: random histories with declarations embedded in prose, and the issue's transcript."""

from __future__ import annotations

import asyncio
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger.facts import FactsDesk, FactStore, HistoryTarget, forget_facts, scrub_history
from contextledger.facts._parse import read_message
from contextledger.messages import Message

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


@settings(max_examples=150, deadline=None)
@given(
    main=st.lists(st.tuples(user_messages(), st.booleans()), min_size=1, max_size=6),
    logs=st.lists(st.tuples(user_messages(), st.booleans()), max_size=4),
    key=st.sampled_from([*KEYS, None]),
)
def test_after_forget_no_history_holds_a_declaration_or_value_of_the_key(
    main: list[tuple[str, bool]], logs: list[tuple[str, bool]], key: str | None
) -> None:
    def history(turns: list[tuple[str, bool]]) -> list[Message]:
        messages = []
        for text, echo in turns:
            messages.append(Message.user(text))
            # A reply that repeats what the user said, or one that says nothing of it.
            messages.append(Message.assistant(f"From this conversation: {text}" if echo else "Noted."))
        return messages

    stored = {"main": history(main), "logs": history(logs)}
    forgotten_keys = set(KEYS) if key is None else {key}
    values = {
        sign.value
        for messages in stored.values()
        for message in messages
        if message.role == "user"
        for sign in read_message(message.text).signs
        if sign.kind != "prose" and sign.key in forgotten_keys and sign.value
    }

    def target(name: str) -> HistoryTarget:
        async def load() -> list[Message]:
            return list(stored[name])

        async def replace(messages: list[Message]) -> None:
            stored[name] = messages

        return HistoryTarget(name, load, replace)

    asyncio.run(forget_facts(FactStore(), key, histories=[target("main"), target("logs")]))
    for messages in stored.values():
        for message in messages:
            for sign in read_message(message.text).signs:
                assert not (sign.kind != "prose" and sign.key in forgotten_keys), (message.text, sign)
            for value in values:
                if len(value) >= 3:
                    assert not _whole_word(value, message.text), (value, message.text)
    # Declarations of other keys in user messages are kept word for word, unless they share a forgotten value.
    others = set(KEYS) - forgotten_keys
    for name, turns in (("main", main), ("logs", logs)):
        kept = [m.text for m in stored[name] if m.role == "user"]
        for (original, _), now in zip(turns, kept):
            before = {
                (s.key, s.value)
                for s in read_message(original).signs
                if s.kind == "declaration" and s.key in others and not any(v in (s.value or "") for v in values)
            }
            after = {(s.key, s.value) for s in read_message(now).signs if s.kind == "declaration" and s.key in others}
            assert before <= after


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
