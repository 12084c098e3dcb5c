"""The OpenAI Agents SDK: Responses API items converted both ways, sessions over our SQLite and
Redis histories, and a Runner on the Responses API against a real server on 127.0.0.1 for 35
turns, every request valid and compacted while the session keeps every item."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.sizes import examples

pytest.importorskip("agents", reason="the 'openai-agents' extra")

from agents.testing import ScriptedModel
from openai import AsyncOpenAI
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

from agents import (
    Agent,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    SessionSettings,
    function_tool,
    set_tracing_disabled,
)
from contextledger.compaction import (
    CompactionStrategy,
    ContextWindowCompactionStrategy,
    PipelineStrategy,
    SlidingWindowStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
    compact_with_report,
)
from contextledger.exceptions import ConfigurationError, InvalidMessageError
from contextledger.facts import FactStore
from contextledger.history import InMemoryHistoryProvider, RedisHistoryProvider, SQLiteHistoryProvider
from contextledger.integrations.openai_agents import (
    AgentsFacts,
    CompactingSession,
    ContextLedgerSession,
    from_responses,
    to_responses,
)
from contextledger.messages import (
    ApprovalRequestContent,
    ApprovalResponseContent,
    FunctionCallContent,
    FunctionResultContent,
    HostedCallContent,
    HostedResultContent,
    Message,
    ReasoningContent,
    TextContent,
    validate,
)
from contextledger.messages._responses import item_dict, item_runs, joins_calls, kept_as_given
from contextledger.serve._requests import MessageReader
from contextledger.serve._responses import _forwarded, _item_bytes, _same
from contextledger.tokenizers import CharacterEstimatorTokenizer
from tests.history.support import RedisServer
from tests.integrations import scripted_turns as turns
from tests.integrations.conftest import ChatServer
from tests.integrations.json_data import identifiers, json_values, words

set_tracing_disabled(True)  # the SDK would otherwise export its own traces over the network

# Conversion ----------------------------------------------------------------------------------

text_parts = st.builds(
    lambda kind, text, extra: {"type": kind, "text": text, **extra},
    st.sampled_from(["input_text", "output_text"]),
    words,
    st.fixed_dictionaries({}, optional={"annotations": st.just([]), "logprobs": st.just([])}),
)
contents = words | st.lists(text_parts | st.just({"type": "input_image", "image_url": "data:,"}), max_size=3)
item_ids = st.fixed_dictionaries(
    {}, optional={"id": identifiers, "status": st.sampled_from(["completed", "incomplete"])}
)


def message(role: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(
        lambda content, extra: {"role": role, "content": content, **extra},
        contents,
        st.fixed_dictionaries({}, optional={"type": st.just("message"), "id": identifiers}),
    )


reasoning = st.builds(
    lambda summary, extra: {"type": "reasoning", "summary": summary, **extra},
    st.lists(st.builds(lambda text: {"type": "summary_text", "text": text}, words), max_size=2),
    st.fixed_dictionaries({"id": identifiers}, optional={"encrypted_content": words}),
)
hosted: st.SearchStrategy[dict[str, Any]] = st.sampled_from(
    [
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}},
        {"type": "file_search_call", "id": "fs_1", "queries": ["q"], "status": "completed", "results": None},
        {
            "type": "code_interpreter_call",
            "id": "ci_1",
            "code": "1+1",
            "container_id": "c",
            "outputs": [],
            "status": "completed",
        },
        {"type": "image_generation_call", "id": "ig_1", "result": None, "status": "completed"},
        {"type": "mcp_call", "id": "mcp_1", "arguments": "{}", "name": "t", "server_label": "s", "output": "ok"},
    ]
)
counter = itertools.count()


@st.composite
def tool_rounds(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Reasoning, then parallel function and hosted calls, then every output in some order."""
    items: list[dict[str, Any]] = []
    if draw(st.booleans()):
        items.append(draw(reasoning))
    calls: list[dict[str, Any]] = []
    outputs: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 3))):
        call_id = f"call_{next(counter)}"
        kind = draw(st.sampled_from(["function", "function", "computer", "custom", "mcp_approval"]))
        if kind == "function":
            calls.append(
                {
                    "type": "function_call",
                    "call_id": call_id,
                    "name": draw(identifiers),
                    "arguments": json.dumps(draw(json_values)),
                    **draw(item_ids),
                }
            )
            output: Any = draw(
                words | st.lists(text_parts.map(lambda p: {"type": "input_text", "text": p["text"]}), max_size=2)
            )
            outputs.append({"type": "function_call_output", "call_id": call_id, "output": output})
        elif kind == "computer":
            calls.append(
                {
                    "type": "computer_call",
                    "call_id": call_id,
                    "id": f"cu_{call_id}",
                    "action": {"type": "click", "x": 1, "y": 2},
                    "pending_safety_checks": [],
                    "status": "completed",
                }
            )
            outputs.append(
                {
                    "type": "computer_call_output",
                    "call_id": call_id,
                    "output": {"type": "computer_screenshot", "image_url": "data:,"},
                }
            )
        elif kind == "custom":
            calls.append({"type": "custom_tool_call", "call_id": call_id, "name": "grammar", "input": draw(words)})
            outputs.append({"type": "custom_tool_call_output", "call_id": call_id, "output": draw(words)})
        else:
            calls.append(
                {"type": "mcp_approval_request", "id": call_id, "arguments": "{}", "name": "t", "server_label": "s"}
            )
            outputs.append(
                {"type": "mcp_approval_response", "approval_request_id": call_id, "approve": draw(st.booleans())}
            )
    items += calls
    items += draw(st.permutations(outputs))
    return items


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if draw(st.booleans()):
        items.append(draw(message(draw(st.sampled_from(["system", "developer"])))))
    for _ in range(draw(st.integers(1, 4))):
        items.append(draw(message("user")))
        for _ in range(draw(st.integers(0, 2))):
            items += draw(tool_rounds())
        if draw(st.booleans()):
            items.append(draw(hosted))
        if draw(st.booleans()):
            items.append(draw(reasoning))
        items.append(draw(message("assistant")))
    return items


_CALL_ID_KEYS = {
    "function_call": "call_id",
    "custom_tool_call": "call_id",
    "computer_call": "call_id",
    "mcp_approval_request": "id",
}
_OUTPUT_ID_KEYS = {
    "function_call_output": "call_id",
    "custom_tool_call_output": "call_id",
    "computer_call_output": "call_id",
    "mcp_approval_response": "approval_request_id",
}


def pairing_problems(items: Sequence[dict[str, Any]]) -> list[str]:
    """What the Responses API refuses: an output whose call is not before it, a call with no
    output after it, a reasoning item that is last or followed by a user message."""
    problems: list[str] = []
    opened: set[str] = set()
    answered: set[str] = set()
    for position, item in enumerate(items):
        kind = item.get("type")
        if kind in _CALL_ID_KEYS:
            opened.add(item[_CALL_ID_KEYS[kind]])
        elif kind in _OUTPUT_ID_KEYS:
            call_id = item[_OUTPUT_ID_KEYS[kind]]
            if call_id not in opened:
                problems.append(f"item {position}: output for {call_id} before or without its call")
            answered.add(call_id)
        elif kind == "reasoning":
            following = items[position + 1] if position + 1 < len(items) else None
            if following is None or following.get("role") in ("user", "system", "developer"):
                problems.append(f"item {position}: reasoning item not followed by the item it belongs to")
    problems += [f"call {call_id} has no output" for call_id in sorted(opened - answered)]
    return problems


@settings(max_examples=examples(300), deadline=None)
@given(conversations())
def test_responses_items_survive_a_round_trip_through_ours(items: list[dict[str, Any]]) -> None:
    assert pairing_problems(items) == []
    ours = from_responses(items)
    assert to_responses(ours) == items
    opened: set[str] = set()  # every answer names an id a message before it opened
    for message in ours:
        assert set(message.answered_ids) <= opened | set(message.opened_ids)
        opened.update(message.opened_ids)


@settings(max_examples=examples(200), deadline=None)
@given(conversations(), st.integers(1, 12))
def test_the_proxys_run_by_run_reading_and_forwarding_match_the_whole_conversions(
    items: list[dict[str, Any]], keep: int
) -> None:
    """The proxy reads a Responses input run by run (remembering each run) and forwards what a
    compaction kept by identity; both give what converting the whole input gives."""
    reader = MessageReader()
    messages, spans = reader.read_runs(items, item_runs(items), from_responses)
    assert messages == from_responses(items)
    again, _ = reader.read_runs(items, item_runs(items), from_responses)
    assert all(first is second for first, second in zip(messages, again))  # remembered, not converted again
    strategy = SlidingWindowStrategy(keep_last_groups=keep, stable_step=1)
    kept = asyncio.run(compact_with_report(messages, strategy=strategy)).messages
    assert _forwarded(kept, messages, spans, items, _same) == kept_as_given(to_responses(kept), items)
    # Read as a stateless body's items, each as its bytes: the same messages, and what is forwarded
    # is the bytes of the items the dicts' path forwards.
    raw = [json.dumps(item, ensure_ascii=False).encode() for item in items]
    read = MessageReader().read_raw_runs(raw, joins_calls, from_responses)
    assert read is not None
    values, raw_messages, raw_spans = read.values, read.messages, read.spans
    assert (read.items, values, raw_messages, raw_spans) == (raw, items, messages, spans)
    raw_kept = asyncio.run(compact_with_report(raw_messages, strategy=strategy)).messages
    forwarded = _forwarded(raw_kept, raw_messages, raw_spans, raw, _item_bytes)
    assert [json.loads(item) for item in forwarded] == kept_as_given(to_responses(kept), items)


@settings(max_examples=examples(200), deadline=None)
@given(conversations(), st.integers(1, 12))
def test_compacted_items_are_still_valid_to_send(items: list[dict[str, Any]], keep: int) -> None:
    """A window boundary anywhere never leaves a call without its outputs, an output without its
    call, or a reasoning item without the item it precedes."""
    projection = asyncio.run(
        compact_with_report(from_responses(items), strategy=SlidingWindowStrategy(keep_last_groups=keep))
    ).messages
    assert pairing_problems(to_responses(projection)) == []


@st.composite
def our_conversations(draw: st.DrawFn) -> list[Message]:
    messages: list[Message] = [Message.user(draw(words.filter(bool)))]
    for round_number in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            messages.append(Message("assistant", (ReasoningContent(draw(words)),)))
        calls = [
            FunctionCallContent(f"c{round_number}-{k}", draw(identifiers), json.dumps(draw(json_values)))
            for k in range(draw(st.integers(1, 3)))
        ]
        messages.append(Message("assistant", tuple(calls)))
        messages += [Message("tool", (FunctionResultContent(call.call_id, draw(words)),)) for call in calls]
    messages.append(Message.assistant(draw(words.filter(bool))))
    return messages


@settings(max_examples=examples(200), deadline=None)
@given(our_conversations())
def test_our_messages_survive_a_round_trip_through_items(messages: list[Message]) -> None:
    assert from_responses(to_responses(messages)) == messages


def test_a_message_holding_several_kinds_of_content_becomes_one_item_per_kind() -> None:
    call = FunctionCallContent("c1", "lookup", '{"order": 1}')
    items = to_responses([Message.assistant("Checking.", calls=[call], reasoning="the user wants order 1")])
    assert items == [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "the user wants order 1"}]},
        {"role": "assistant", "content": "Checking."},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"order": 1}'},
    ]


def test_items_that_cannot_be_read_are_refused_with_the_reason() -> None:
    with pytest.raises(InvalidMessageError, match="no call_id"):
        from_responses([{"type": "function_call_output", "output": "x"}])
    with pytest.raises(InvalidMessageError, match="role"):
        from_responses([{"role": "critic", "content": "x"}])
    with pytest.raises(InvalidMessageError, match="not a Responses API item"):
        from_responses([{"content": "x"}])
    with pytest.raises(ConfigurationError):
        CompactingSession(InMemoryHistoryProvider(), "s", "window")  # type: ignore[arg-type]


# Sessions ------------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "redis"])
def history(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "sqlite":
        provider: Any = SQLiteHistoryProvider(tmp_path / "history.db")
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        provider = RedisHistoryProvider(server.url, namespace=f"agents-{uuid.uuid4().hex}")
    return provider  # each test closes it inside its own event loop (a Redis connection belongs to one)


# What the SDK writes that a session once could not store (each raised on add_items, after the tool
# had run, so the turn was lost): a tool output given as parts, a function call and a hosted or
# approval call in one response, a local shell output keyed as SDK 0.24 keys it, a reasoning summary
# of several parts, and the envelopes the SDK's EncryptedSession stores.
SDK_ITEMS: dict[str, list[dict[str, Any]]] = {
    "structured tool output": [
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "id": "fc_1", "status": "completed"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "hello"}]},
    ],
    "function and approval calls": [
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "id": "fc_1"},
        {"type": "mcp_approval_request", "id": "mcpr_1", "name": "tool", "arguments": "{}", "server_label": "s"},
    ],
    "function and computer calls": [
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "id": "fc_1"},
        {
            "type": "computer_call",
            "call_id": "cc_1",
            "id": "cu_1",
            "action": {"type": "click", "x": 1, "y": 2},
            "pending_safety_checks": [],
            "status": "completed",
        },
    ],
    "function and shell calls": [
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "id": "fc_1"},
        {"type": "shell_call", "call_id": "sh_1", "id": "sc_1", "action": {"commands": ["ls"]}, "status": "completed"},
    ],
    "local shell output keyed by call_id": [
        {
            "type": "local_shell_call",
            "call_id": "ls_1",
            "id": "lsc_1",
            "action": {"type": "exec", "command": ["ls"], "env": {}},
            "status": "completed",
        },
        {"type": "local_shell_call_output", "call_id": "ls_1", "output": "a b"},
    ],
    "reasoning summary of several parts": [
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "first"}, {"type": "summary_text", "text": "second"}],
        },
        {"type": "message", "role": "assistant", "id": "msg_1", "content": [{"type": "output_text", "text": "hi"}]},
    ],
    "an envelope with no type": [{"__enc__": 1, "v": 1, "kid": "hkdf-v1", "payload": "abcd"}],
}


@pytest.mark.parametrize("name", list(SDK_ITEMS))
def test_what_the_sdk_writes_is_stored_and_read_back_unchanged(history: Any, name: str) -> None:
    items = SDK_ITEMS[name]

    async def scenario() -> None:
        session = ContextLedgerSession(history, f"sdk-{uuid.uuid4().hex[:8]}")
        try:
            await session.add_items([dict(item) for item in items])
            assert await session.get_items() == items
        finally:
            await history.close()

    asyncio.run(scenario())


def test_the_sdks_encrypted_session_wraps_ours(tmp_path: Path) -> None:
    from agents.extensions.memory import EncryptedSession  # noqa: PLC0415

    items = [*SDK_ITEMS["structured tool output"], {"role": "assistant", "content": "done"}]

    async def scenario() -> None:
        history = SQLiteHistoryProvider(tmp_path / "history.db")
        inner = ContextLedgerSession(history, "encrypted")
        # The SDK types the wrapped session as its own base class; ours is a Session by shape.
        session = EncryptedSession(session_id="encrypted", underlying_session=cast(Any, inner), encryption_key="k" * 32)
        try:
            await session.add_items(cast(Any, [dict(item) for item in items]))
            assert await session.get_items() == items
            stored = await inner.get_items()
            assert all("payload" in item and "call_id" not in item for item in stored)  # only envelopes
        finally:
            await history.close()

    asyncio.run(scenario())


def test_the_session_keeps_items_as_they_came(history: Any) -> None:
    items = [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "id": "fc_1", "status": "completed"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": "2"},
        {"type": "function_call_output", "call_id": "c1", "output": "1"},
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "done", "annotations": []}],
        },
    ]

    async def scenario() -> None:
        session = ContextLedgerSession(history, "user-1")
        await session.add_items(items[:4])
        await session.add_items(items[4:])
        assert await session.get_items() == items
        assert await session.get_items(limit=2) == items[-2:]
        assert await ContextLedgerSession(history, "user-1").get_items() == items  # what the store holds
        assert await session.pop_item() == items[-1]
        assert await session.get_items() == items[:-1]
        await session.clear_session()
        assert await session.get_items() == []
        assert await session.pop_item() is None
        await history.close()

    asyncio.run(scenario())


# A Runner on the Responses API against a server on 127.0.0.1 --------------------------------


def response_envelope(body: dict[str, Any], serial: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    """A completed Responses API reply carrying ``output``."""
    return {
        "id": f"resp_{serial}",
        "object": "response",
        "created_at": 0,
        "model": body["model"],
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 60,
            "output_tokens": 8,
            "total_tokens": 68,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 4},
        },
    }


def responses_reply(body: dict[str, Any]) -> dict[str, Any]:
    """The scripted model, speaking the Responses API: a reasoning item before every answer or call."""
    items = body["input"]
    serial = uuid.uuid4().hex[:8]
    output: list[dict[str, Any]] = [
        {
            "type": "reasoning",
            "id": f"rs_{serial}",
            "summary": [{"type": "summary_text", "text": "Planning the reply."}],
        }
    ]
    last = items[-1]
    if last.get("type") == "function_call_output":
        results = []
        for item in reversed(items):
            if item.get("type") != "function_call_output":
                break
            results.append(item["output"] if isinstance(item["output"], str) else json.dumps(item["output"]))
        text = turns.answer_after_tools(results)
    else:
        content = last["content"]
        number = turns.order_number(content if isinstance(content, str) else json.dumps(content))
        text = "Noted."
        if number is not None:
            for call_id, name, args in turns.calls_for(number):
                output.append(
                    {
                        "type": "function_call",
                        "id": f"fc_{call_id}",
                        "call_id": call_id,
                        "name": name,
                        "arguments": json.dumps(args),
                        "status": "completed",
                    }
                )
            text = ""
    if text:
        output.append(
            {
                "type": "message",
                "id": f"msg_{serial}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    return response_envelope(body, serial, output)


def check_request(body: dict[str, Any]) -> None:
    """Valid to send: every call with all its outputs, every reasoning item followed by the item it
    belongs to; and compacted: at most the window's turns of history, plus the turn being run."""
    items = body["input"]
    assert validate(from_responses(items)) == [], items
    for position, item in enumerate(items):
        if item.get("type") == "reasoning":
            assert position + 1 < len(items)
            assert (
                items[position + 1].get("type") in ("function_call", "message")
                or items[position + 1].get("role") == "assistant"
            )
    assert sum(1 for item in items if item.get("role") == "user") <= turns.WINDOW_TURNS + 1
    assert body["instructions"].startswith(turns.INSTRUCTIONS)


def stored_texts(items: Sequence[dict[str, Any]]) -> str:
    return json.dumps(items, ensure_ascii=False)


def test_a_runner_on_the_responses_api_with_our_compacting_session_runs_the_whole_script(
    chat_server: ChatServer, tmp_path: Path
) -> None:
    chat_server.respond = responses_reply
    client = AsyncOpenAI(base_url=chat_server.url, api_key="test-key", max_retries=0)
    agent = Agent(
        name="desk",
        instructions=turns.INSTRUCTIONS,
        model=OpenAIResponsesModel(model="test-model", openai_client=client),
        tools=[function_tool(turns.lookup_order), function_tool(turns.lookup_status)],
    )
    store = FactStore()
    facts = AgentsFacts(store)
    history = SQLiteHistoryProvider(tmp_path / "desk.db")
    session = CompactingSession(history, "desk-1", turns.strategy())

    async def scenario() -> None:
        for number, text in enumerate(turns.script()):
            result = await facts.run(agent, text, session=session)
            assert result.final_output
            if number == 0:
                assert {f.key: f.value for f in store.facts()} == {"module": "Reporting", "database": "PostgreSQL"}
        assert {f.key: f.value for f in store.facts()} == {"module": "Billing", "database": "SQL Server 2022"}
        assert facts.last_turn is not None

        requests = chat_server.requests
        assert len(requests) >= 2 * turns.TOOL_TURNS
        for body in requests:
            check_request(body)
        collapsed = sum(any("[Tool results" in json.dumps(item) for item in body["input"]) for body in requests)
        assert collapsed > turns.TOOL_TURNS / 2
        last = requests[-1]
        assert 'module = "Billing"' in last["instructions"]
        assert 'database = "SQL Server 2022"' in last["instructions"]
        assert "Reporting" not in json.dumps(last)
        assert "PostgreSQL" not in json.dumps(last)

        # The session's store kept every item: compaction changed only what the model saw.
        everything = await session.all_items()
        users = [item["content"] for item in everything if item.get("role") == "user"]
        assert users == turns.script()
        expected_outputs = sum(len(turns.calls_for(n)) for n in range(turns.TOOL_TURNS))
        assert sum(1 for item in everything if item.get("type") == "function_call_output") == expected_outputs
        assert sum(1 for item in everything if item.get("type") == "reasoning") == len(requests)
        assert not any("[Tool results" in json.dumps(item) for item in everything)
        assert len(await session.get_items()) < len(everything)

        await facts.forget("module", sessions=[session])
        assert [fact.key for fact in store.facts()] == ["database"]
        stored = stored_texts(await session.all_items())
        for forgotten in ("module=", "Reporting", "Billing"):
            assert forgotten not in stored
        assert "database=SQL Server 2022" in stored
        await facts.forget(sessions=[session])
        assert store.facts() == []
        await facts.run(agent, turns.QUESTION, session=session)
        assert store.facts() == []
        sent = json.dumps(chat_server.requests[-1])
        for value in ("Reporting", "Billing", "PostgreSQL", "SQL Server 2022"):
            assert value not in sent
        await history.close()

    asyncio.run(scenario())


def test_hosted_calls_become_typed_contents_and_come_back_whole() -> None:

    search = {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "q"},
    }
    computer = [
        {
            "type": "computer_call",
            "call_id": "cc_1",
            "id": "cu_1",
            "action": {"type": "click", "x": 1, "y": 2},
            "pending_safety_checks": [],
            "status": "completed",
        },
        {
            "type": "computer_call_output",
            "call_id": "cc_1",
            "output": {"type": "computer_screenshot", "image_url": "data:,"},
        },
    ]
    approval = [
        {"type": "mcp_approval_request", "id": "ap_1", "name": "pay", "arguments": "{}", "server_label": "bank"},
        {"type": "mcp_approval_response", "approval_request_id": "ap_1", "approve": True},
    ]
    (hosted,) = from_responses([search])
    assert [type(c) for c in hosted.contents] == [HostedCallContent, HostedResultContent]
    assert hosted.opened_ids == hosted.answered_ids == ["ws_1"]  # a complete unit by itself
    ours = from_responses([*computer, *approval])
    assert to_responses(ours) == [*computer, *approval]
    assert [type(message.contents[0]) for message in ours] == [
        HostedCallContent,
        HostedResultContent,
        ApprovalRequestContent,
        ApprovalResponseContent,
    ]
    assert [message.role for message in ours] == ["assistant", "assistant", "assistant", "user"]
    # The approval request and the call it holds share one id: opened once (not a reused id).
    assert [m.opened_ids for m in ours] == [["cc_1"], [], ["ap_1"], []]
    assert [m.answered_ids for m in ours] == [[], ["cc_1"], [], ["ap_1"]]


def test_a_failed_run_admits_nothing(chat_server: ChatServer) -> None:
    def respond(body: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("the model is down")

    chat_server.respond = respond
    client = AsyncOpenAI(base_url=chat_server.url, api_key="test-key", max_retries=0)
    agent = Agent(
        name="desk", instructions=turns.INSTRUCTIONS, model=OpenAIResponsesModel(model="m", openai_client=client)
    )
    store = FactStore()
    facts = AgentsFacts(store)
    session = CompactingSession(InMemoryHistoryProvider(), "desk-2", turns.strategy())

    async def scenario() -> None:
        with pytest.raises(Exception, match="model is down"):
            await facts.run(agent, turns.FIRST, session=session)
        assert store.facts() == []
        assert facts.last_turn is None
        assert chat_server.requests[-1]["instructions"].endswith(store.to_prompt_block())
        # The SDK itself stores a turn's input before calling the model; the facts never saw it admitted.
        assert await session.all_items() == [{"role": "user", "content": turns.FIRST}]

    asyncio.run(scenario())


def test_messages_from_elsewhere_with_hosted_contents_become_items_in_order() -> None:
    search = HostedCallContent("ws_9", "web_search", arguments='{"query": "logs"}')
    shell = HostedCallContent("sh_9", "shell", arguments='{"commands": ["ls"]}')
    messages = [
        Message.user("Find the logs."),
        Message(
            "assistant",
            (
                ReasoningContent("look it up"),
                TextContent("Searching."),
                search,
                HostedResultContent("ws_9", "web_search", "3 hits"),
                shell,
            ),
        ),
        Message("assistant", (HostedResultContent("sh_9", "shell", "a.log"),)),
    ]
    assert to_responses(messages) == [
        {"role": "user", "content": "Find the logs."},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "look it up"}]},
        {"role": "assistant", "content": "Searching."},
        {"type": "web_search_call", "id": "ws_9", "arguments": '{"query": "logs"}'},
        {"type": "shell_call", "call_id": "sh_9", "arguments": '{"commands": ["ls"]}'},
        {"type": "shell_call_output", "call_id": "sh_9", "output": "a.log"},
    ]
    assert pairing_problems(to_responses(messages)) == []


# A long tool loop inside one run --------------------------------------------------------------

LOOP_STEPS = 40


def loop_reply(body: dict[str, Any]) -> dict[str, Any]:
    """A model that calls ``fetch_page`` forty times in one run, then answers."""
    done = sum(1 for item in body["input"] if item.get("type") == "function_call_output")
    # The input may be compacted: count the calls from the page number the last output names.
    last = body["input"][-1]
    if last.get("type") == "function_call_output":
        done = int(json.loads(last["output"])["page"]) + 1
    serial = uuid.uuid4().hex[:8]
    output: list[dict[str, Any]] = [
        {"type": "reasoning", "id": f"rs_{serial}", "summary": [{"type": "summary_text", "text": "Next page."}]}
    ]
    if done < LOOP_STEPS:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{serial}",
                "call_id": f"call_{serial}",
                "name": "fetch_page",
                "arguments": json.dumps({"page": done}),
                "status": "completed",
            }
        )
    else:
        output.append(
            {
                "type": "message",
                "id": f"msg_{serial}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": f"Read {done} pages.", "annotations": []}],
            }
        )
    return response_envelope(body, serial, output)


def fetch_page(page: int) -> str:
    """Fetch one page of the archive."""
    return json.dumps({"page": page, "text": "archive line " * 80})


def test_every_model_call_of_a_long_tool_loop_is_compacted_and_the_session_keeps_every_item(
    chat_server: ChatServer, tmp_path: Path
) -> None:
    """Forty tool calls in one run: with the session's input filter every model call past the
    trigger is compacted (the session alone is read once, before the first), the calls still pair
    with their outputs, and the session stores all forty whole."""
    chat_server.respond = loop_reply
    client = AsyncOpenAI(base_url=chat_server.url, api_key="test-key", max_retries=0)
    agent = Agent(
        name="archivist",
        instructions="Read the archive page by page.",
        model=OpenAIResponsesModel(model="test-model", openai_client=client),
        tools=[function_tool(fetch_page)],
    )
    estimate = CharacterEstimatorTokenizer()
    strategy = TruncationStrategy(max_n=2_000, compact_to=1_000, tokenizer=estimate)
    history = SQLiteHistoryProvider(tmp_path / "archive.db")
    session = CompactingSession(history, "archive-1", strategy, tokenizer=estimate)
    config = RunConfig(call_model_input_filter=session.input_filter)

    async def scenario() -> None:
        try:
            text = "Read the whole archive."
            result = await Runner.run(agent, text, session=cast(Any, session), run_config=config, max_turns=60)
            assert result.final_output == f"Read {LOOP_STEPS} pages."
            stored = await session.all_items()
        finally:
            await history.close()
        requests = chat_server.requests
        assert len(requests) == LOOP_STEPS + 1
        outputs = [item for item in stored if item.get("type") == "function_call_output"]
        assert [item["output"] for item in outputs] == [fetch_page(page) for page in range(LOOP_STEPS)]  # whole
        assert pairing_problems(stored) == []
        over = 0
        for number, body in enumerate(requests):
            sent = from_responses(body["input"])
            assert validate(sent) == [], number
            assert pairing_problems(body["input"]) == [], number
            tokens = sum(estimate.count_messages(sent))
            if tokens > 2_000:
                over += 1
        # Every call past the trigger was compacted: none sent more than the trigger allows (the
        # newest exchange aside), while the run's whole input grew to several times that.
        assert over == 0
        assert sum(estimate.count_messages(from_responses(stored))) > 4 * 2_000
        last_outputs = sum(1 for item in requests[-1]["input"] if item.get("type") == "function_call_output")
        assert last_outputs < LOOP_STEPS / 2

    asyncio.run(scenario())


# The SDK's scripted model: reasoning before every call and reply, under every kind of strategy ----

SCRIPTED_TURNS = 30


def scripted_steps(turn: int) -> list[list[Any]]:
    """One turn of the script: reasoning then a call, the tool runs, reasoning then the reply (the
    reply's item, like every item the SDK stores, carries fields the adapter keeps as properties)."""
    return [
        [
            ResponseReasoningItem(
                id=f"rs_{turn}_a", type="reasoning", summary=[Summary(text=f"Look up {turn}.", type="summary_text")]
            ),
            ResponseFunctionToolCall(
                id=f"fc_{turn}",
                call_id=f"call_{turn}",
                name="fetch_page",
                arguments=json.dumps({"page": turn}),
                type="function_call",
                status="completed",
            ),
        ],
        [
            ResponseReasoningItem(
                id=f"rs_{turn}_b", type="reasoning", summary=[Summary(text="Answer.", type="summary_text")]
            ),
            ResponseOutputMessage(
                id=f"msg_{turn}",
                type="message",
                role="assistant",
                status="completed",
                content=[ResponseOutputText(text=f"Page {turn} read.", type="output_text", annotations=[])],
            ),
        ],
    ]


def reasoning_problems(items: Sequence[dict[str, Any]]) -> list[str]:
    """Every reasoning item directly before the item it was produced with, and every such item
    after its reasoning: one is never sent without the other (the Responses API refuses either)."""
    problems = []
    for position, item in enumerate(items):
        item_id = str(item.get("id", ""))
        before = items[position - 1].get("id") if position else None
        after = items[position + 1].get("id") if position + 1 < len(items) else None
        if item_id.startswith("rs_"):
            turn, part = item_id[3:].rsplit("_", 1)
            expected = f"fc_{turn}" if part == "a" else f"msg_{turn}"
            if after != expected:
                problems.append(f"{item_id} sent without {expected}")
        elif item_id.startswith(("fc_", "msg_")):
            turn = item_id.split("_", 1)[1]
            expected = f"rs_{turn}_a" if item_id.startswith("fc_") else f"rs_{turn}_b"
            if before != expected:
                problems.append(f"{item_id} sent without {expected}")
    return problems


# Sizes at which the window's cut falls between a reply and its reasoning (before the fix, 20 of the
# 60 model calls under the first two, several under the third, sent a reply without its reasoning).
SCRIPTED_STRATEGIES: dict[str, Callable[[], CompactionStrategy]] = {
    "sliding window": lambda: SlidingWindowStrategy(keep_last_groups=5, stable_step=1),
    "collapse and window": lambda: PipelineStrategy(
        ToolResultCompactionStrategy(keep_last_tool_call_groups=1),
        SlidingWindowStrategy(keep_last_groups=5, stable_step=1),
    ),
    "context window": lambda: ContextWindowCompactionStrategy(1_300, 500),
}


@pytest.mark.parametrize("name", list(SCRIPTED_STRATEGIES))
def test_a_scripted_runner_never_parts_reasoning_from_its_item_under_any_strategy(name: str) -> None:
    """Was: a reply the adapter built (every one carries properties) left its reasoning behind, so a
    window sent msg_N without rs_N."""
    model = ScriptedModel(steps=[step for turn in range(SCRIPTED_TURNS) for step in scripted_steps(turn)])
    agent = Agent(name="reader", instructions="Read.", model=model, tools=[function_tool(fetch_page)])
    session = CompactingSession(InMemoryHistoryProvider(), "reader-1", SCRIPTED_STRATEGIES[name]())
    config = RunConfig(call_model_input_filter=session.input_filter)

    async def scenario() -> list[dict[str, Any]]:
        for turn in range(SCRIPTED_TURNS):
            result = await Runner.run(agent, f"Read page {turn}.", session=cast(Any, session), run_config=config)
            assert result.final_output == f"Page {turn} read."
        return await session.all_items()

    stored = asyncio.run(scenario())
    assert len(model.calls) == 2 * SCRIPTED_TURNS
    sent = [[item_dict(item) for item in call.input] for call in model.calls]
    assert {number: reasoning_problems(items) for number, items in enumerate(sent) if reasoning_problems(items)} == {}
    assert all(pairing_problems(items) == [] for items in sent)
    assert len(sent[-1]) < len(stored)  # the strategy did compact
    assert reasoning_problems(stored) == []
    assert sum(1 for item in stored if item.get("type") == "reasoning") == 2 * SCRIPTED_TURNS


def test_a_session_limit_read_is_compacted_by_the_input_filter() -> None:
    """A run under SessionSettings(limit=N) reads the newest N items as stored (the SDK checks its
    own writes so); the per-call filter compacts what the model is sent from that read too."""
    model = ScriptedModel(steps=[step for turn in range(6) for step in scripted_steps(turn)])
    agent = Agent(name="reader", instructions="Read.", model=model, tools=[function_tool(fetch_page)])
    session = CompactingSession(
        InMemoryHistoryProvider(), "limited", SlidingWindowStrategy(keep_last_groups=3, stable_step=1)
    )

    async def scenario() -> list[dict[str, Any]]:
        for turn in range(5):
            await Runner.run(agent, f"Read page {turn}.", session=cast(Any, session))
        stored = await session.all_items()
        assert await session.get_items(limit=12) == stored[-12:]  # a limited read is the stored tail
        plain = RunConfig(session_settings=SessionSettings(limit=12))
        filtered = RunConfig(session_settings=SessionSettings(limit=12), call_model_input_filter=session.input_filter)
        await Runner.run(agent, "Read page 5.", session=cast(Any, session), run_config=filtered)
        model.extend(scripted_steps(6))
        await Runner.run(agent, "Read page 6.", session=cast(Any, session), run_config=plain)
        return stored

    stored = asyncio.run(scenario())
    with_filter, without_filter = model.calls[10].input, model.calls[12].input
    assert len(without_filter) == 12 + 1  # the limited read as stored, and the new user message
    assert len(with_filter) < 12 + 1
    assert reasoning_problems([item_dict(item) for item in with_filter]) == []
    assert len(stored) == 5 * 6
