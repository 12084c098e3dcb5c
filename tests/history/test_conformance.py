"""What every history provider promises, checked the same way against each backend.

The ``backend`` fixture runs each test against the in-memory store, a new SQLite file and a
fresh namespace on a real redis-server, so "same behaviour on all three" is a test result,
not a claim.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextledger.exceptions import ConfigurationError, InvalidMessageError
from contextledger.history import HistoryProvider, StoredTurn, TurnRewriter
from contextledger.messages import Message, TextContent
from tests.history.support import Backend, rich_messages
from tests.sizes import examples

BAD_SESSION_IDS: list[Any] = ["", None, 7, b"session", ["session"]]


def numbered(tag: str, count: int, start: int = 0) -> list[Message]:
    return [Message.user(f"{tag} {number}", message_id=f"{tag}-{number}") for number in range(start, start + count)]


def test_provider_satisfies_the_protocol(backend: Backend) -> None:
    async def scenario(history: HistoryProvider) -> None:
        assert isinstance(history, HistoryProvider)
        assert isinstance(history.source_id, str)
        assert history.source_id

    backend.run(scenario)


def test_unknown_session_loads_empty(backend: Backend) -> None:
    async def scenario(history: HistoryProvider) -> None:
        assert await history.load("never-written") == []

    backend.run(scenario)


def test_append_then_load_keeps_every_field_in_order(backend: Backend) -> None:
    messages = rich_messages("t")

    async def scenario(history: HistoryProvider) -> list[Message]:
        await history.append("s", messages[:3])
        await history.append("s", messages[3:])
        return await history.load("s")

    loaded = backend.run(scenario)
    assert loaded == messages
    assert [m.message_id for m in loaded] == [m.message_id for m in messages]
    assert [dict(m.additional_properties) for m in loaded] == [dict(m.additional_properties) for m in messages]
    assert [m.is_reasoning_only for m in loaded] == [m.is_reasoning_only for m in messages]
    assert [m.is_summary for m in loaded] == [m.is_summary for m in messages]


def test_history_survives_reopening_the_provider(backend: Backend) -> None:
    messages = rich_messages("reopen")

    async def write(history: HistoryProvider) -> None:
        await history.append("s", messages)

    async def read(history: HistoryProvider) -> list[Message]:
        return await history.load("s")

    backend.run(write)
    assert backend.run(read) == messages


def test_loaded_list_is_the_callers_copy(backend: Backend) -> None:
    async def scenario(history: HistoryProvider) -> None:
        await history.append("s", numbered("m", 3))
        first = await history.load("s")
        first.clear()
        assert await history.load("s") == numbered("m", 3)
        source = numbered("n", 2)
        await history.append("t", source)
        source.append(Message.user("late"))
        assert await history.load("t") == numbered("n", 2)

    backend.run(scenario)


def test_sessions_are_isolated(backend: Backend) -> None:
    async def scenario(history: HistoryProvider) -> None:
        await history.append("alice", numbered("a", 3))
        await history.append("bob", numbered("b", 2))
        await history.append("alice:history:bob", numbered("c", 1))  # a key-like id is just an id
        await history.clear("bob")
        assert await history.load("alice") == numbered("a", 3)
        assert await history.load("bob") == []
        assert await history.load("alice:history:bob") == numbered("c", 1)
        await history.replace("alice", numbered("z", 1))
        assert await history.load("alice:history:bob") == numbered("c", 1)

    backend.run(scenario)


@pytest.mark.parametrize(
    "make_bad",
    [
        pytest.param(lambda good: [*good, "not a message"], id="string-item"),
        pytest.param(lambda good: [good[0], {"role": "user", "content": "dict"}, good[1]], id="openai-dict"),
        pytest.param(lambda good: [*good, None], id="none-item"),
        pytest.param(
            lambda good: [good[0], Message.user("x", additional_properties={"when": object()})], id="not-json"
        ),
        pytest.param(lambda good: [good[0], Message.user("x", additional_properties={1: "a"})], id="int-key"),
        pytest.param(lambda good: [*good, Message.user("x", additional_properties={"f": float("nan")})], id="nan"),
        pytest.param(lambda good: [*good, Message("tool", ())], id="tool-without-result"),
        pytest.param(lambda good: good[0], id="single-message"),
        pytest.param(lambda good: "text", id="string"),
        pytest.param(lambda good: 42, id="number"),
    ],
)
def test_bad_batch_raises_and_stores_nothing(backend: Backend, make_bad: Callable[[list[Message]], Any]) -> None:
    before = numbered("kept", 2)
    bad = make_bad(numbered("new", 2))

    async def scenario(history: HistoryProvider) -> None:
        await history.append("s", before)
        with pytest.raises(InvalidMessageError, match="session 's'"):
            await history.append("s", bad)
        with pytest.raises(InvalidMessageError, match="session 's'"):
            await history.replace("s", bad)
        with pytest.raises(InvalidMessageError, match="session 'fresh'"):
            await history.append("fresh", bad)
        assert await history.load("s") == before
        assert await history.load("fresh") == []

    backend.run(scenario)


def test_bad_item_error_names_its_position(backend: Backend) -> None:
    async def scenario(history: HistoryProvider) -> None:
        with pytest.raises(InvalidMessageError, match="item 2 is str"):
            await history.append("s", [Message.user("a"), Message.user("b"), "c"])  # type: ignore[list-item]
        with pytest.raises(InvalidMessageError, match="message 1 cannot be stored as JSON"):
            await history.append("s", [Message.user("a"), Message.user("b", additional_properties={"x": {1, 2}})])

    backend.run(scenario)


@pytest.mark.parametrize("session_id", BAD_SESSION_IDS)
def test_bad_session_id_raises_and_writes_nothing(backend: Backend, session_id: Any) -> None:
    async def scenario(history: HistoryProvider) -> None:
        await history.append("s", numbered("kept", 1))
        for call in (
            lambda: history.load(session_id),
            lambda: history.append(session_id, numbered("x", 1)),
            lambda: history.replace(session_id, numbered("x", 1)),
            lambda: history.clear(session_id),
        ):
            with pytest.raises(ConfigurationError, match="session_id must be a non-empty string"):
                await call()
        assert await history.load("s") == numbered("kept", 1)

    backend.run(scenario)


def test_empty_append_is_a_no_op(backend: Backend) -> None:
    async def scenario(history: HistoryProvider) -> None:
        await history.append("s", [])
        assert await history.load("s") == []
        await history.append("s", numbered("a", 1))
        await history.append("s", ())
        assert await history.load("s") == numbered("a", 1)

    backend.run(scenario)


def test_any_iterable_of_messages_is_accepted(backend: Backend) -> None:
    async def scenario(history: HistoryProvider) -> None:
        await history.append("s", tuple(numbered("a", 2)))
        await history.append("s", (m for m in numbered("a", 2, start=2)))  # type: ignore[arg-type]
        assert await history.load("s") == numbered("a", 4)

    backend.run(scenario)


def test_replace_rewrites_the_whole_list(backend: Backend) -> None:
    async def scenario(history: HistoryProvider) -> None:
        await history.append("s", numbered("old", 5))
        await history.replace("s", numbered("new", 2))
        assert await history.load("s") == numbered("new", 2)
        await history.append("s", numbered("new", 1, start=2))
        assert await history.load("s") == numbered("new", 3)
        await history.replace("s", [])
        assert await history.load("s") == []
        await history.replace("unknown", numbered("x", 1))
        assert await history.load("unknown") == numbered("x", 1)

    backend.run(scenario)


def test_clear_forgets_and_is_idempotent(backend: Backend) -> None:
    async def scenario(history: HistoryProvider) -> None:
        await history.append("s", numbered("a", 3))
        await history.clear("s")
        assert await history.load("s") == []
        await history.clear("s")
        await history.clear("never-written")
        await history.append("s", numbered("b", 1))
        assert await history.load("s") == numbered("b", 1)

    backend.run(scenario)


def test_close_is_idempotent(backend: Backend) -> None:
    async def scenario(history: HistoryProvider) -> None:
        await history.append("s", numbered("a", 1))
        await history.close()
        await history.close()

    backend.run(scenario)


def test_many_small_appends_keep_order(backend: Backend) -> None:
    async def scenario(history: HistoryProvider) -> list[Message]:
        for number in range(300):
            await history.append("s", [Message.user(f"m {number}", message_id=str(number))])
        return await history.load("s")

    loaded = backend.run(scenario)
    assert [m.message_id for m in loaded] == [str(number) for number in range(300)]


def test_concurrent_appends_from_tasks_lose_nothing(backend: Backend) -> None:
    tasks, per_task = 20, 15

    async def writer(history: HistoryProvider, task: int) -> None:
        for number in range(per_task):
            turn = [Message.user(f"{task} {number} q"), Message.assistant(f"{task} {number} a")]
            await history.append("shared", turn)

    async def scenario(history: HistoryProvider) -> list[Message]:
        await asyncio.gather(*(writer(history, task) for task in range(tasks)))
        return await history.load("shared")

    loaded = backend.run(scenario)
    assert len(loaded) == tasks * per_task * 2
    # Each append is stored whole: a question is always directly followed by its answer.
    for question, answer in zip(loaded[::2], loaded[1::2]):
        assert question.text.removesuffix(" q") == answer.text.removesuffix(" a")
    for task in range(tasks):
        seen = [int(m.text.split()[1]) for m in loaded[::2] if m.text.split()[0] == str(task)]
        assert seen == list(range(per_task))


# Random operation sequences against a plain-list model ---------------------------------------------

_texts = st.text(alphabet=st.sampled_from('ab é☕\n"\\{}'), max_size=6)
_messages = st.builds(
    lambda role, text, message_id, flag: Message(
        role,
        (TextContent(text),),
        message_id=message_id,
        additional_properties={"flag": flag} if flag is not None else {},
    ),
    st.sampled_from(["user", "assistant", "system"]),
    _texts,
    st.none() | st.text(alphabet="xyz0123", min_size=1, max_size=4),
    st.none() | st.booleans() | st.integers(-3, 3) | st.lists(st.integers(0, 2), max_size=2),
)
_batches = st.lists(_messages, max_size=4)
_sessions = st.sampled_from(["a", "b"])
_operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), _sessions, _batches),
        st.tuples(st.just("replace"), _sessions, _batches),
        st.tuples(st.just("clear"), _sessions, st.just([])),
    ),
    max_size=8,
)


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=_operations)
def test_any_operation_sequence_matches_a_list_model(
    backend: Backend, operations: list[tuple[str, str, list[Message]]]
) -> None:
    prefix = uuid.uuid4().hex  # examples share the backend's storage, never its sessions

    async def scenario(history: HistoryProvider) -> None:
        model: dict[str, list[Message]] = {"a": [], "b": []}
        for operation, session, batch in operations:
            key = f"{prefix}-{session}"
            if operation == "append":
                await history.append(key, batch)
                model[session].extend(batch)
            elif operation == "replace":
                await history.replace(key, batch)
                model[session] = list(batch)
            else:
                await history.clear(key)
                model[session] = []
            for name, expected in model.items():
                assert await history.load(f"{prefix}-{name}") == expected

    backend.run(scenario)


# Turns: a turn id is stored at most once, with its messages ---------------------------------------


def turn_of(tag: str, replies: int = 1) -> tuple[list[Message], list[Message]]:
    return [Message.user(f"{tag}?", message_id=f"{tag}-q")], [
        Message.assistant(f"{tag} {number}", message_id=f"{tag}-a{number}") for number in range(replies)
    ]


def test_append_turn_stores_the_messages_and_the_turn(backend: Backend) -> None:
    inputs, reply = turn_of("t", replies=2)

    async def scenario(history: HistoryProvider) -> None:
        await history.append("s", numbered("before", 2))
        assert await history.load_turn("s", "turn-1") is None
        assert await history.append_turn("s", "turn-1", inputs, reply) is True
        assert await history.load("s") == [*numbered("before", 2), *inputs, *reply]
        stored = await history.load_turn("s", "turn-1")
        assert stored == StoredTurn("turn-1", tuple(inputs), tuple(reply))
        assert await history.load_turn("other-session", "turn-1") is None

    backend.run(scenario)


def test_a_turn_id_is_stored_at_most_once(backend: Backend) -> None:
    inputs, reply = turn_of("t")
    later_inputs, later_reply = turn_of("u")

    async def scenario(history: HistoryProvider) -> None:
        assert await history.append_turn("s", "turn-1", inputs, reply) is True
        assert await history.append_turn("s", "turn-1", inputs, reply) is False
        assert await history.append_turn("s", "turn-1", later_inputs, later_reply) is False
        assert await history.load("s") == [*inputs, *reply]
        assert (await history.load_turn("s", "turn-1")) == StoredTurn("turn-1", tuple(inputs), tuple(reply))
        assert await history.append_turn("s2", "turn-1", inputs, reply) is True  # ids are per session

    backend.run(scenario)


def test_replace_keeps_turn_ids_and_clear_forgets_them(backend: Backend) -> None:
    inputs, reply = turn_of("t")

    async def scenario(history: HistoryProvider) -> None:
        await history.append_turn("s", "turn-1", inputs, reply)
        await history.replace("s", numbered("reduced", 1))
        assert await history.append_turn("s", "turn-1", inputs, reply) is False
        assert await history.load("s") == numbered("reduced", 1)
        assert (await history.load_turn("s", "turn-1")) == StoredTurn("turn-1", tuple(inputs), tuple(reply))
        await history.clear("s")
        assert await history.load_turn("s", "turn-1") is None
        assert await history.append_turn("s", "turn-1", inputs, reply) is True
        assert await history.load("s") == [*inputs, *reply]

    backend.run(scenario)


def test_undo_turn_takes_back_the_turn_and_its_messages(backend: Backend) -> None:
    first, second = turn_of("a"), turn_of("b")

    async def scenario(history: HistoryProvider) -> None:
        await history.append_turn("s", "turn-a", *first)
        await history.append_turn("s", "turn-b", *second)
        await history.append("s", numbered("after", 1))  # another writer's messages came later
        await history.undo_turn("s", "turn-a", [*first[0], *first[1]])
        assert await history.load("s") == [*second[0], *second[1], *numbered("after", 1)]
        assert await history.load_turn("s", "turn-a") is None
        assert await history.load_turn("s", "turn-b") is not None
        assert await history.append_turn("s", "turn-a", *first) is True

    backend.run(scenario)


def by_id(turns: list[StoredTurn]) -> dict[str, StoredTurn]:
    """Turns keyed by id, each id once (load_turns promises no order)."""
    keyed = {turn.turn_id: turn for turn in turns}
    assert len(keyed) == len(turns)
    return keyed


def test_load_turns_returns_every_recorded_turn_of_the_session(backend: Backend) -> None:
    first, second = turn_of("a", replies=2), turn_of("b")

    async def scenario(history: HistoryProvider) -> None:
        assert await history.load_turns("s") == []
        await history.append_turn("s", "turn-a", *first)
        await history.append_turn("s", "turn-b", *second)
        await history.append_turn("other", "turn-c", *turn_of("c"))
        await history.replace("s", numbered("reduced", 1))  # a reduction keeps the turn records
        assert by_id(await history.load_turns("s")) == {
            "turn-a": StoredTurn("turn-a", tuple(first[0]), tuple(first[1])),
            "turn-b": StoredTurn("turn-b", tuple(second[0]), tuple(second[1])),
        }
        await history.undo_turn("s", "turn-b", [])
        assert [turn.turn_id for turn in await history.load_turns("s")] == ["turn-a"]
        await history.clear("s")
        assert await history.load_turns("s") == []
        assert [turn.turn_id for turn in await history.load_turns("other")] == ["turn-c"]

    backend.run(scenario)


def test_rewrite_turns_changes_the_records_and_nothing_else(backend: Backend) -> None:
    first, second = turn_of("a"), turn_of("b", replies=2)
    new_inputs = (Message.user("a? [forgotten]", message_id="a-q"),)
    new_reply = (Message.assistant("[removed]", message_id="a-a0"), Message.assistant("more"))

    async def scenario(history: HistoryProvider) -> None:
        await history.append_turn("s", "turn-a", *first)
        await history.append_turn("s", "turn-b", *second)
        before_messages, before_version = await history.load("s"), await history.version("s")
        await history.rewrite_turns(
            "s", [StoredTurn("turn-a", new_inputs, new_reply), StoredTurn("turn-gone", new_inputs, ())]
        )
        assert by_id(await history.load_turns("s")) == {
            "turn-a": StoredTurn("turn-a", new_inputs, new_reply),
            "turn-b": StoredTurn("turn-b", tuple(second[0]), tuple(second[1])),
        }
        assert await history.load_turn("s", "turn-a") == StoredTurn("turn-a", new_inputs, new_reply)
        assert await history.load_turn("s", "turn-gone") is None  # an unrecorded id is skipped, not recorded
        assert await history.load("s") == before_messages
        assert await history.version("s") == before_version
        assert await history.append_turn("s", "turn-a", *first) is False  # the id is still recorded
        await history.rewrite_turns("s", [])
        await history.rewrite_turns("never-seen", [StoredTurn("turn-a", new_inputs, ())])
        assert await history.load_turns("never-seen") == []

    backend.run(scenario)


def test_rewritten_turns_survive_reopening_the_provider(backend: Backend) -> None:
    inputs, reply = turn_of("t")
    rewritten = StoredTurn("turn-1", (Message.user("t? [forgotten]", message_id="t-q"),), ())

    async def write(history: HistoryProvider) -> None:
        await history.append_turn("s", "turn-1", inputs, reply)
        await history.rewrite_turns("s", [rewritten])

    async def read(history: HistoryProvider) -> list[StoredTurn]:
        return await history.load_turns("s")

    backend.run(write)
    assert backend.run(read) == [rewritten]


@pytest.mark.parametrize(
    ("make_bad", "match"),
    [
        (lambda good: [*good, "not a turn"], "item 1 is str"),
        (lambda good: good[0], "expected a sequence of StoredTurn"),
        (lambda good: [*good, good[0]], "given twice"),
        (lambda good: [StoredTurn("turn-1", (), good[0].reply)], "no input message"),
        (lambda good: [StoredTurn("turn-1", (Message.user("x"),), ("not a message",))], "not a Message"),  # type: ignore[arg-type]
    ],
)
def test_bad_rewrite_turns_raises_and_writes_nothing(
    backend: Backend, make_bad: Callable[[list[StoredTurn]], Any], match: str
) -> None:
    inputs, reply = turn_of("t")

    async def scenario(history: HistoryProvider) -> None:
        await history.append_turn("s", "turn-1", inputs, reply)
        stored = await history.load_turns("s")
        good = [StoredTurn("turn-1", (Message.user("changed"),), ())]
        with pytest.raises(InvalidMessageError, match=match):
            await history.rewrite_turns("s", make_bad(good))
        assert await history.load_turns("s") == stored
        with pytest.raises(ConfigurationError, match="turn_id must be printable text"):
            await history.rewrite_turns("s", [StoredTurn("", (Message.user("x"),), ())])
        with pytest.raises(ConfigurationError, match="session_id"):
            await history.load_turns("")
        assert await history.load_turns("s") == stored

    backend.run(scenario)


@pytest.mark.parametrize("turn_id", ["", None, 7, "x" * 257, "line\nbreak"])
def test_bad_turn_id_raises_and_writes_nothing(backend: Backend, turn_id: Any) -> None:
    inputs, reply = turn_of("t")

    async def scenario(history: HistoryProvider) -> None:
        with pytest.raises(ConfigurationError, match="turn_id must be printable text"):
            await history.append_turn("s", turn_id, inputs, reply)
        with pytest.raises(ConfigurationError, match="turn_id must be printable text"):
            await history.load_turn("s", turn_id)
        assert await history.load("s") == []

    backend.run(scenario)


def test_bad_turn_messages_raise_and_write_nothing(backend: Backend) -> None:
    inputs, reply = turn_of("t")

    async def scenario(history: HistoryProvider) -> None:
        with pytest.raises(InvalidMessageError, match="no input message"):
            await history.append_turn("s", "turn-1", [], reply)
        with pytest.raises(InvalidMessageError, match="session 's'"):
            await history.append_turn("s", "turn-1", inputs, [*reply, "not a message"])  # type: ignore[list-item]
        assert await history.load("s") == []
        assert await history.load_turn("s", "turn-1") is None
        assert await history.append_turn("s", "x" * 256, inputs, reply) is True  # the longest id

    backend.run(scenario)


def test_concurrent_appends_of_one_turn_store_it_once(backend: Backend) -> None:
    inputs, reply = turn_of("t")

    async def scenario(history: HistoryProvider) -> None:
        outcomes = await asyncio.gather(*(history.append_turn("s", "turn-1", inputs, reply) for _ in range(12)))
        assert sorted(outcomes) == [False] * 11 + [True]
        assert await history.load("s") == [*inputs, *reply]

    backend.run(scenario)


_turn_operations = st.lists(
    st.tuples(st.sampled_from(["append_turn", "replace", "clear"]), _sessions, st.sampled_from(["t1", "t2", "t3"])),
    max_size=10,
)


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=_turn_operations)
def test_any_turn_sequence_stores_each_turn_id_once(backend: Backend, operations: list[tuple[str, str, str]]) -> None:
    prefix = uuid.uuid4().hex

    async def scenario(history: HistoryProvider) -> None:
        model: dict[str, list[Message]] = {"a": [], "b": []}
        recorded: dict[str, set[str]] = {"a": set(), "b": set()}
        for operation, session, turn in operations:
            key = f"{prefix}-{session}"
            inputs, reply = turn_of(turn)
            if operation == "append_turn":
                stored = await history.append_turn(key, turn, inputs, reply)
                assert stored is (turn not in recorded[session])
                if stored:
                    recorded[session].add(turn)
                    model[session] += [*inputs, *reply]
            elif operation == "replace":
                model[session] = model[session][-1:]
                await history.replace(key, model[session])
            else:
                await history.clear(key)
                model[session], recorded[session] = [], set()
            for name, expected in model.items():
                assert await history.load(f"{prefix}-{name}") == expected
                for known in ("t1", "t2", "t3"):
                    found = await history.load_turn(f"{prefix}-{name}", known)
                    assert (found is not None) is (known in recorded[name])

    backend.run(scenario)


# Versions and rewrites: a reader's copy stays valid until something else changes the store ------


def test_appends_keep_the_generation_and_everything_else_moves_it_on(backend: Backend) -> None:
    inputs, reply = turn_of("t")

    async def scenario(history: HistoryProvider) -> None:
        start = await history.version("s")
        assert start.length == 0
        await history.append("s", numbered("a", 2))
        await history.append_turn("s", "turn-1", inputs, reply)
        grown = await history.version("s")
        assert (grown.generation, grown.length) == (start.generation, 4)
        seen = {grown.generation}
        changes: list[Callable[[], Awaitable[None]]] = [
            lambda: history.replace("s", numbered("b", 4)),
            lambda: history.undo_turn("s", "turn-1", []),
            lambda: history.clear("s"),
        ]
        for change in changes:
            await change()
            now = await history.version("s")
            assert now.generation not in seen  # never back to an old one: a stale copy cannot match
            seen.add(now.generation)
        await history.append("s", numbered("b", 4))
        refilled = await history.version("s")
        assert refilled.length == grown.length  # cleared and refilled to the same length...
        assert refilled != grown  # ...yet not the old version

    backend.run(scenario)


def test_rewrite_replaces_the_suffix_only_at_the_expected_version(backend: Backend) -> None:
    async def scenario(history: HistoryProvider) -> None:
        await history.append("s", numbered("a", 5))
        expected = await history.version("s")
        version = await history.rewrite("s", 3, numbered("z", 1), expected)
        assert version == await history.version("s")
        assert version is not None
        assert version.length == 4
        assert await history.load("s") == [*numbered("a", 3), *numbered("z", 1)]
        assert await history.rewrite("s", 0, [], expected) is None  # stale: nothing written
        assert await history.load("s") == [*numbered("a", 3), *numbered("z", 1)]
        await history.append("s", numbered("late", 1))  # another writer
        assert await history.rewrite("s", 0, [], version) is None
        latest = await history.version("s")
        assert await history.rewrite("s", 0, numbered("only", 2), latest) is not None
        assert await history.load("s") == numbered("only", 2)

    backend.run(scenario)


@pytest.mark.parametrize("start", [-1, 6, "1", True])
def test_rewrite_refuses_a_start_outside_the_history(backend: Backend, start: Any) -> None:
    async def scenario(history: HistoryProvider) -> None:
        await history.append("s", numbered("a", 5))
        with pytest.raises(ConfigurationError, match="start must be an int from 0 to"):
            await history.rewrite("s", start, [], await history.version("s"))
        assert await history.load("s") == numbered("a", 5)

    backend.run(scenario)


# A turn and a rewrite in one step (TurnRewriter) -----------------------------------------------


def test_every_backend_can_write_a_turn_and_a_rewrite_in_one_step(backend: Backend) -> None:
    async def scenario(history: HistoryProvider) -> None:
        assert isinstance(history, TurnRewriter)

    backend.run(scenario)


def test_rewrite_and_append_turn_applies_both_at_the_expected_version(backend: Backend) -> None:
    inputs, reply = turn_of("t", replies=2)

    async def scenario(history: HistoryProvider) -> None:
        assert isinstance(history, TurnRewriter)
        await history.append("s", numbered("a", 5))
        expected = await history.version("s")
        written = await history.rewrite_and_append_turn("s", 2, numbered("z", 1), expected, "turn-1", inputs, reply)
        assert written.stored
        assert written.version is not None
        assert written.version == await history.version("s")
        assert written.version.generation != expected.generation
        assert written.version.length == 2 + 1 + 3
        assert await history.load("s") == [*numbered("a", 2), *numbered("z", 1), *inputs, *reply]
        found = await history.load_turn("s", "turn-1")
        assert found is not None
        assert (list(found.inputs), list(found.reply)) == (inputs, reply)

    backend.run(scenario)


def test_rewrite_and_append_turn_appends_only_the_turn_when_the_history_moved_on(backend: Backend) -> None:
    inputs, reply = turn_of("t")

    async def scenario(history: HistoryProvider) -> None:
        assert isinstance(history, TurnRewriter)
        await history.append("s", numbered("a", 3))
        expected = await history.version("s")
        await history.append("s", numbered("other", 1))  # another writer, after the version was read
        before = await history.version("s")
        written = await history.rewrite_and_append_turn("s", 0, [], expected, "turn-1", inputs, reply)
        assert written.stored
        assert written.version is None
        assert await history.load("s") == [*numbered("a", 3), *numbered("other", 1), *inputs, *reply]
        after = await history.version("s")
        assert (after.generation, after.length) == (before.generation, before.length + 2)  # an append
        assert await history.load_turn("s", "turn-1") is not None

    backend.run(scenario)


def test_rewrite_and_append_turn_writes_nothing_for_a_recorded_turn(backend: Backend) -> None:
    inputs, reply = turn_of("t")

    async def scenario(history: HistoryProvider) -> None:
        assert isinstance(history, TurnRewriter)
        await history.append_turn("s", "turn-1", inputs, reply)
        expected = await history.version("s")
        written = await history.rewrite_and_append_turn("s", 0, [], expected, "turn-1", inputs, reply)
        assert (written.stored, written.version) == (False, None)
        assert await history.load("s") == [*inputs, *reply]
        assert await history.version("s") == expected

    backend.run(scenario)


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"start": 4}, ConfigurationError, "start must be an int from 0 to"),
        ({"start": -1}, ConfigurationError, "start must be an int from 0 to"),
        ({"expected": (0, 3)}, ConfigurationError, "expected must be a HistoryVersion"),
        ({"turn_id": ""}, ConfigurationError, "turn"),
        ({"inputs": []}, InvalidMessageError, "no input message"),
        ({"messages": ["not a message"]}, InvalidMessageError, "session 's'"),
        ({"reply": [Message.assistant("ok"), 3]}, InvalidMessageError, "session 's'"),
    ],
)
def test_bad_rewrite_and_append_turn_raises_and_writes_nothing(
    backend: Backend, change: dict[str, Any], error: type[Exception], match: str
) -> None:
    inputs, reply = turn_of("t")

    async def scenario(history: HistoryProvider) -> None:
        assert isinstance(history, TurnRewriter)
        await history.append("s", numbered("a", 3))
        version = await history.version("s")
        arguments: dict[str, Any] = {
            "session_id": "s",
            "start": 1,
            "messages": numbered("z", 1),
            "expected": version,
            "turn_id": "turn-1",
            "inputs": inputs,
            "reply": reply,
            **change,
        }
        with pytest.raises(error, match=match):
            await history.rewrite_and_append_turn(**arguments)
        assert await history.load("s") == numbered("a", 3)
        assert await history.version("s") == version
        assert await history.load_turn("s", "turn-1") is None

    backend.run(scenario)


def test_concurrent_rewrites_with_one_turn_store_it_once(backend: Backend) -> None:
    inputs, reply = turn_of("t")

    async def scenario(history: HistoryProvider) -> None:
        assert isinstance(history, TurnRewriter)
        await history.append("s", numbered("a", 4))
        expected = await history.version("s")
        outcomes = await asyncio.gather(
            *(
                history.rewrite_and_append_turn("s", 1, numbered("z", 1), expected, "turn-1", inputs, reply)
                for _ in range(12)
            )
        )
        assert sorted(outcome.stored for outcome in outcomes) == [False] * 11 + [True]
        assert [outcome.version is not None for outcome in outcomes].count(True) == 1
        assert await history.load("s") == [*numbered("a", 1), *numbered("z", 1), *inputs, *reply]

    backend.run(scenario)


# Operations as a writer with a cached version sees them: its own turns with a rewrite, checked
# against the version it last read, and another writer's appends and rewrites in between.
_writer_operations = st.lists(
    st.tuples(
        st.sampled_from(["mine", "mine", "theirs_append", "theirs_rewrite", "read_version"]),
        st.integers(min_value=0, max_value=6),
        st.integers(min_value=0, max_value=3),
    ),
    max_size=12,
)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=_writer_operations)
def test_a_stale_rewrite_is_never_applied_and_every_turn_is_stored_once(
    backend: Backend, operations: list[tuple[str, int, int]]
) -> None:
    key = f"stale-{uuid.uuid4().hex}"

    async def scenario(history: HistoryProvider) -> None:
        assert isinstance(history, TurnRewriter)
        model: list[Message] = []
        generation_moves = 0
        seen = await history.version(key)
        for number, (operation, start, size) in enumerate(operations):
            if operation == "read_version":
                seen = await history.version(key)
            elif operation == "theirs_append":
                extra = numbered(f"theirs{number}", size)
                await history.append(key, extra)
                model += extra
            elif operation == "theirs_rewrite":
                now = await history.version(key)
                cut = min(start, now.length)
                suffix = numbered(f"rw{number}", size)
                assert await history.rewrite(key, cut, suffix, now) is not None
                model = [*model[:cut], *suffix]
                generation_moves += 1
            else:
                inputs, reply = turn_of(f"mine{number}")
                cut = min(start, seen.length)
                suffix = numbered(f"mine{number}-rw", size)
                fresh = seen == await history.version(key)
                written = await history.rewrite_and_append_turn(key, cut, suffix, seen, f"turn-{number}", inputs, reply)
                assert written.stored
                assert (written.version is not None) is fresh  # applied exactly when not stale
                if fresh:
                    model = model[:cut] + suffix
                    generation_moves += 1
                model += [*inputs, *reply]
                if written.version is not None:
                    seen = written.version
                    assert seen == await history.version(key)
            assert await history.load(key) == model
        mine = [number for number, (operation, _, _) in enumerate(operations) if operation == "mine"]
        for number in mine:
            assert await history.load_turn(key, f"turn-{number}") is not None
        assert len(await history.load_turns(key)) == len(mine)

    backend.run(scenario)
