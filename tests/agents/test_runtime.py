"""The agent runtime on deterministic models: what each call sends, what a run stores, what failure leaves.

Every test drives a real :class:`Agent` with :class:`ScriptedChatClient` (whose recorded requests
are the ground truth of what was sent) or :class:`OfflineModel`, and real history providers.
The promises pinned here: the request is ordered instructions, provider context, history,
input, generated; every message's source is known; providers' hooks run in order and
``after_run`` only after success; the tool loop runs every call and reports tool errors to the
model; a run that fails for any reason stores nothing and leaves the session as it was.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from contextledger import validate
from contextledger.agents import (
    Agent,
    AgentResponse,
    CompactionProvider,
    ContextProvider,
    MessageSource,
    RunContext,
    Session,
    tool,
    use_context_providers,
)
from contextledger.agents._context import INSTRUCTIONS_PROPERTY
from contextledger.agents._response import sum_usage
from contextledger.clients import ChatResponse, OfflineModel, ScriptedChatClient, Usage
from contextledger.compaction import SlidingWindowStrategy
from contextledger.exceptions import (
    ConfigurationError,
    InvalidMessageError,
    ModelError,
    ModelResponseError,
    ModelTimeoutError,
    ToolError,
    ToolLoopError,
)
from contextledger.history import InMemoryHistoryProvider, SQLiteHistoryProvider
from contextledger.messages import FunctionCallContent, Message
from tests.tools import lookup_price, lookup_stock


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def calling(*calls: tuple[str, str, dict[str, Any]]) -> Message:
    """An assistant message asking for tools: (call id, tool name, arguments)."""
    return Message.assistant(calls=[FunctionCallContent(cid, name, json.dumps(args)) for cid, name, args in calls])


def texts(messages: Sequence[Message]) -> list[str]:
    return [f"{m.role}:{m.text}" if m.text else f"{m.role}:{[c.type for c in m.contents]}" for m in messages]


def stored(agent: Agent, session: Session) -> list[Message]:
    return list(run(agent.history.load(session.session_id)))


class Recorder(ContextProvider):
    """Records its hook calls in a shared log and optionally adds instructions and messages."""

    def __init__(
        self,
        name: str,
        log: list[tuple[str, str]],
        *,
        instructions: str | None = None,
        messages: Sequence[Message] = (),
    ) -> None:
        self.source_id = name
        self.log = log
        self.added_instructions = instructions
        self.added_messages = list(messages)
        self.contexts: list[RunContext] = []

    async def before_run(self, context: RunContext) -> None:
        self.log.append(("before", self.source_id))
        if self.added_instructions is not None:
            context.add_instructions(self.added_instructions)
        if self.added_messages:
            context.add_messages(self.source_id, self.added_messages)

    async def prepare_request(self, messages: Sequence[Message], context: RunContext | None) -> Sequence[Message]:
        self.log.append(("prepare", self.source_id))
        return messages

    async def after_run(self, context: RunContext) -> None:
        self.log.append(("after", self.source_id))
        self.contexts.append(context)


# The request ------------------------------------------------------------------------------------


def test_a_request_is_instructions_then_context_then_history_then_input_then_generated() -> None:
    log: list[tuple[str, str]] = []
    note = Message.user("context note")
    provider = Recorder("notes", log, instructions="Prices are in euros.", messages=[note])
    client = ScriptedChatClient(
        ["first answer", calling(("c1", "lookup_price", {"item": "laptop"})), "a laptop costs 6 euros"]
    )
    agent = Agent(client, instructions="You are a shop assistant.", tools=[lookup_price], context_providers=[provider])
    session = agent.create_session()
    run(agent.run("hello", session=session))
    question = Message.user("What's the price of a laptop?")
    response = run(agent.run([question], session=session))

    assert len(client.requests) == 3
    first_call, second_call = client.requests[1], client.requests[2]
    head = first_call[0]
    assert head.role == "system"
    assert head.text == "You are a shop assistant.\n\nPrices are in euros."
    assert head.additional_properties[INSTRUCTIONS_PROPERTY] is True
    assert first_call[1] is note
    assert texts(first_call[2:4]) == ["user:hello", "assistant:first answer"]
    assert first_call[4] is question
    assert len(first_call) == 5
    # The tool loop's second call adds what this run generated, in order, after the input.
    assert second_call[:5] == first_call
    assert second_call[5].function_calls[0].call_id == "c1"
    assert second_call[6].role == "tool"
    assert second_call[6].function_results[0].result == "laptop costs 6 euros"
    assert list(response.messages) == [*second_call[5:], response.messages[-1]]
    assert response.text == "a laptop costs 6 euros"
    for request in client.requests:
        assert validate(request) == []


def test_without_instructions_no_system_message_is_sent() -> None:
    log: list[tuple[str, str]] = []
    client = ScriptedChatClient(["ok"])
    agent = Agent(client, context_providers=[Recorder("quiet", log, instructions="   ")])
    run(agent.run("hi"))
    assert [m.role for m in client.requests[0]] == ["user"]


def test_instructions_of_several_providers_are_one_system_message_in_provider_order() -> None:
    log: list[tuple[str, str]] = []
    client = ScriptedChatClient(["ok"])
    agent = Agent(
        client,
        context_providers=[Recorder("a", log, instructions="Rule A."), Recorder("b", log, instructions="Rule B.")],
    )
    run(agent.run("hi"))
    systems = [m for m in client.requests[0] if m.role == "system"]
    assert len(systems) == 1
    assert systems[0].text == "Rule A.\n\nRule B."
    assert client.requests[0][0] is systems[0]


def test_provider_instructions_and_messages_must_be_the_right_types() -> None:
    class Wrong(ContextProvider):
        def __init__(self, kind: str) -> None:
            self.kind = kind

        async def before_run(self, context: RunContext) -> None:
            if self.kind == "instructions":
                context.add_instructions(["not", "text"])  # type: ignore[arg-type]
            else:
                context.add_messages("wrong", [Message.user("fine"), {"role": "user", "content": "dict"}])  # type: ignore[list-item]

    with pytest.raises(ConfigurationError, match=r"instructions must be text, got list"):
        run(Agent(ScriptedChatClient(["ok"]), context_providers=[Wrong("instructions")]).run("hi"))
    with pytest.raises(InvalidMessageError, match=r"provider 'wrong' added dict at position 1, not a Message"):
        run(Agent(ScriptedChatClient(["ok"]), context_providers=[Wrong("messages")]).run("hi"))


def test_the_tools_are_sent_on_every_call_as_openai_entries() -> None:
    client = ScriptedChatClient([calling(("c1", "lookup_price", {"item": "pen"})), "done"])
    agent = Agent(client, tools=[lookup_price, lookup_stock])
    response = run(agent.run("price of a pen"))
    assert len(client.tools) == 2
    for sent in client.tools:
        assert [entry["function"]["name"] for entry in sent] == ["lookup_price", "lookup_stock"]
    assert [call.tools for call in response.model_calls] == [tuple(client.tools[0]), tuple(client.tools[1])]
    no_tools = ScriptedChatClient(["plain"])
    run(Agent(no_tools).run("hi"))
    assert no_tools.tools == [[]]


def test_model_calls_record_exactly_what_was_sent_and_received() -> None:
    client = ScriptedChatClient([calling(("c1", "lookup_price", {"item": "pen"})), "done"])
    response = run(Agent(client, tools=[lookup_price]).run("price of a pen"))
    assert [list(call.request) for call in response.model_calls] == client.requests
    assert response.model_calls[-1].response.text == "done"
    assert str(response) == "done"


# Sources ----------------------------------------------------------------------------------------


def test_every_message_of_a_run_has_its_source() -> None:
    log: list[tuple[str, str]] = []
    note = Message.user("context note")
    provider = Recorder("notes", log, messages=[note])
    client = ScriptedChatClient(["earlier answer", calling(("c1", "lookup_price", {"item": "pen"})), "done"])
    agent = Agent(client, tools=[lookup_price], context_providers=[provider])
    session = agent.create_session()
    run(agent.run("earlier question", session=session))
    question = Message.user("price of a pen?")
    run(agent.run(question, session=session))

    context = provider.contexts[-1]
    kinds = [source.kind for _, source in context.entries]
    assert kinds == ["context", "history", "history", "external", "generated", "generated", "generated"]
    assert [message for message, _ in context.entries] == [*client.requests[-1], context.generated[-1]]
    assert context.messages_from("context") == [note]
    assert texts(context.messages_from("history")) == ["user:earlier question", "assistant:earlier answer"]
    assert context.messages_from("external") == [question]
    assert context.messages_from("generated") == context.generated
    assert context.source_of(note) == MessageSource("context", "notes")
    assert context.source_of(context.messages_from("history")[0]) == MessageSource("history", "in_memory")
    assert context.source_of(question) == MessageSource("external")
    for message in context.generated:
        assert context.source_of(message) == MessageSource("generated")
    assert context.source_of(Message.user("price of a pen?")) is None, "sources are by identity, not equality"
    with pytest.raises(ConfigurationError, match=r"source kind must be one of external, history, context, generated"):
        context.messages_from("tool")  # type: ignore[arg-type]


def test_sources_asked_before_the_model_answers_still_cover_what_it_generates_later() -> None:
    seen: list[MessageSource | None] = []

    class EarlyAsker(ContextProvider):
        async def before_run(self, context: RunContext) -> None:
            seen.append(context.source_of(context.input_messages[0]))

        async def after_run(self, context: RunContext) -> None:
            seen.extend(context.source_of(message) for message in context.generated)

    agent = Agent(
        ScriptedChatClient([calling(("c1", "lookup_price", {"item": "a"})), "one", "two", "three"]),
        tools=[lookup_price],
        context_providers=[EarlyAsker()],
    )
    session = agent.create_session()
    for question in ("first", "second", "third"):
        run(agent.run(question, session=session))
    # First run: input, assistant call, tool result, answer; then input and answer twice.
    assert seen == [MessageSource("external")] + [MessageSource("generated")] * 3 + (
        [MessageSource("external"), MessageSource("generated")] * 2
    )


def test_the_history_source_is_named_after_its_provider() -> None:
    history = InMemoryHistoryProvider("archive")
    log: list[tuple[str, str]] = []
    provider = Recorder("spy", log)
    agent = Agent(ScriptedChatClient(["a", "b"]), history=history, context_providers=[provider])
    session = agent.create_session()
    run(agent.run("one", session=session))
    run(agent.run("two", session=session))
    context = provider.contexts[-1]
    assert {context.source_of(m) for m in context.messages_from("history")} == {MessageSource("history", "archive")}


# Provider hooks ---------------------------------------------------------------------------------


def test_hooks_run_in_provider_order_and_after_run_follows_success_only() -> None:
    log: list[tuple[str, str]] = []
    first, second = Recorder("first", log), Recorder("second", log)
    client = ScriptedChatClient(["ok", ModelTimeoutError("the model did not answer")])
    agent = Agent(client, context_providers=[first, second])
    session = agent.create_session()
    response = run(agent.run("one", session=session))
    assert log == [
        ("before", "first"),
        ("before", "second"),
        ("prepare", "first"),
        ("prepare", "second"),
        ("after", "first"),
        ("after", "second"),
    ]
    assert first.contexts[0].response is response
    log.clear()
    with pytest.raises(ModelTimeoutError):
        run(agent.run("two", session=session))
    assert log == [("before", "first"), ("before", "second"), ("prepare", "first"), ("prepare", "second")]


def test_after_run_sees_the_turn_already_stored() -> None:
    loaded: list[list[Message]] = []

    class Reader(ContextProvider):
        async def after_run(self, context: RunContext) -> None:
            loaded.append(await context.agent.history.load(context.session.session_id))

    agent = Agent(ScriptedChatClient(["answer"]), context_providers=[Reader()])
    run(agent.run("question"))
    assert texts(loaded[0]) == ["user:question", "assistant:answer"]


def test_a_history_provider_listed_among_providers_is_loaded_in_its_place() -> None:
    class Counter(ContextProvider):
        def __init__(self) -> None:
            self.histories: list[int] = []

        async def before_run(self, context: RunContext) -> None:
            self.histories.append(len(context.messages_from("history")))

    history = InMemoryHistoryProvider()
    before, after = Counter(), Counter()
    agent = Agent(ScriptedChatClient(["a", "b"]), context_providers=[before, history, after])
    session = agent.create_session()
    run(agent.run("one", session=session))
    run(agent.run("two", session=session))
    assert before.histories == [0, 0]
    assert after.histories == [0, 2]


# The tool loop ----------------------------------------------------------------------------------


def test_parallel_calls_in_one_message_all_run_sync_and_async_in_order() -> None:
    client = ScriptedChatClient(
        [
            calling(
                ("c1", "lookup_price", {"item": "pen"}),
                ("c2", "lookup_stock", {"item": "pen"}),
                ("c3", "lookup_price", {"item": "notebook"}),
            ),
            "pens cost 3 euros",
        ]
    )
    agent = Agent(client, tools=[lookup_price, lookup_stock])
    session = agent.create_session()
    response = run(agent.run("pens?", session=session))
    results = [(m.function_results[0].call_id, m.function_results[0].result) for m in response.messages[1:4]]
    assert results == [
        ("c1", "pen costs 3 euros"),
        ("c2", json.dumps({"item": "pen", "warehouse": 1, "stock": 6, "report": "line " * 9})),
        ("c3", "notebook costs 8 euros"),
    ]
    assert len(client.requests) == 2
    assert validate(client.requests[1]) == []
    assert texts(stored(agent, session)) == ["user:pens?", *texts(response.messages)]


def test_several_rounds_of_tools_before_the_answer() -> None:
    client = ScriptedChatClient(
        [
            calling(("c1", "lookup_price", {"item": "pen"})),
            calling(("c2", "lookup_stock", {"item": "pen"})),
            "done",
        ]
    )
    response = run(Agent(client, tools=[lookup_price, lookup_stock]).run("pens?"))
    assert len(response.model_calls) == 3
    assert [m.role for m in response.messages] == ["assistant", "tool", "assistant", "tool", "assistant"]


def test_results_the_model_returned_itself_are_not_run_again() -> None:
    calls: list[str] = []

    def record(item: str) -> str:
        calls.append(item)
        return "ran"

    answered = ChatResponse(
        "",
        (
            calling(("c1", "record", {"item": "a"}), ("c2", "record", {"item": "b"})),
            Message.tool("c1", "answered by the provider"),
        ),
    )
    client = ScriptedChatClient([lambda request: answered if len(request) == 1 else ChatResponse("done")])
    response = run(Agent(client, tools=[record]).run("go"))
    assert calls == ["b"]
    assert [m.text for m in response.messages if m.role == "tool"] == ["answered by the provider", "ran"]
    assert response.messages[-1].text == "done"


def test_tool_errors_are_reported_to_the_model_by_default() -> None:
    def broken(item: str) -> str:
        raise LookupError(f"no price for {item}")

    client = ScriptedChatClient(
        [
            calling(
                ("c1", "broken", {"item": "pen"}),
                ("c2", "lookup_price", {"item": 5}),
                ("c3", "missing_tool", {}),
                ("c4", "lookup_price", {"item": "pen"}),
            ),
            "recovered",
        ]
    )
    agent = Agent(client, tools=[broken, lookup_price])
    response = run(agent.run("go"))
    results = {m.function_results[0].call_id: m.text for m in response.messages if m.role == "tool"}
    assert results["c1"] == "Error: LookupError: no price for pen"
    assert results["c2"].startswith("Error: ToolError: lookup_price: item=5 does not match")
    assert (
        results["c3"] == "Error: ToolError: there is no tool named 'missing_tool'; the tools are: broken, lookup_price"
    )
    assert results["c4"] == "pen costs 3 euros"
    assert response.text == "recovered"
    # The model saw every error as a tool result, in a request that is still valid to send.
    assert client.requests[1][-4:] == list(response.messages[1:5])
    assert validate(client.requests[1]) == []


def test_an_unknown_tool_without_any_tools_is_reported() -> None:
    client = ScriptedChatClient([calling(("c1", "anything", {})), "ok"])
    response = run(Agent(client).run("go"))
    assert response.messages[1].text == "Error: ToolError: there is no tool named 'anything'; the tools are: none"


def test_tool_errors_raise_when_asked_and_nothing_is_stored() -> None:
    def broken(item: str) -> str:
        raise LookupError("stock service down")

    for reply, expected in (
        (calling(("c1", "broken", {"item": "pen"})), LookupError),
        (calling(("c1", "nowhere", {})), ToolError),
        (calling(("c1", "broken", {"item": 1})), ToolError),
    ):
        client = ScriptedChatClient([reply, "never reached"])
        agent = Agent(client, tools=[broken], tool_errors="raise")
        session = agent.create_session()
        session.state["kept"] = [1, 2]
        with pytest.raises(expected):
            run(agent.run("go", session=session))
        assert len(client.requests) == 1
        assert stored(agent, session) == []
        assert session.state == {"kept": [1, 2]}


def test_a_model_that_never_stops_calling_tools_is_stopped_and_nothing_is_stored() -> None:
    counter = itertools.count(1)

    def again(request: Sequence[Message]) -> Message:
        return calling((f"c{next(counter)}", "lookup_price", {"item": "pen"}))

    invoked: list[str] = []

    def lookup(item: str) -> str:
        invoked.append(item)
        return "3 euros"

    for limit in (1, 3):
        client = ScriptedChatClient([again])
        agent = Agent(client, tools=[tool(lookup, name="lookup_price")], max_tool_rounds=limit)
        session = agent.create_session()
        run_before = len(invoked)
        with pytest.raises(ToolLoopError, match=rf"still calling tools after {limit} model calls; nothing was stored"):
            run(agent.run("go", session=session))
        assert len(client.requests) == limit
        assert len(invoked) - run_before == limit
        assert stored(agent, session) == []
        assert session.to_json() == Session(session.session_id).to_json()


def test_the_round_limit_counts_model_calls() -> None:
    client = ScriptedChatClient([calling(("c1", "lookup_price", {"item": "a"})), "done"])
    response = run(Agent(client, tools=[lookup_price], max_tool_rounds=2).run("go"))
    assert response.text == "done"


# Usage ------------------------------------------------------------------------------------------


def test_usage_is_the_sum_of_every_model_call() -> None:
    client = ScriptedChatClient([calling(("c1", "lookup_price", {"item": "pen"})), "done"])
    response = run(Agent(client, tools=[lookup_price]).run("price of a pen"))
    usages = [call.usage for call in response.model_calls]
    assert all(u is not None and u.input_tokens and u.output_tokens for u in usages)
    assert response.usage.input_tokens == sum(u.input_tokens for u in usages if u and u.input_tokens)
    assert response.usage.output_tokens == sum(u.output_tokens for u in usages if u and u.output_tokens)
    assert response.usage.is_estimate is True
    assert "(estimate)" in response.usage.describe()


def test_usage_a_provider_does_not_report_stays_unknown() -> None:
    client = ScriptedChatClient([calling(("c1", "lookup_price", {"item": "pen"})), "done"], report_usage=False)
    response = run(Agent(client, tools=[lookup_price]).run("price of a pen"))
    assert [call.usage for call in response.model_calls] == [None, None]
    assert response.usage.input_tokens is None
    assert response.usage.output_tokens is None
    assert response.usage.total_tokens is None
    assert response.usage.describe() == "in=unknown out=unknown"


def test_one_unknown_count_makes_the_sum_unknown_but_not_the_other_count() -> None:
    assert sum_usage([Usage(10, 2), Usage(5, 1)]) == Usage(15, 3, False)
    assert sum_usage([Usage(10, 2), None, Usage(5, 1)]) == Usage(None, None, False)
    assert sum_usage([Usage(10, 2), Usage(None, 1)]) == Usage(None, 3, False)
    assert sum_usage([Usage(10, None), Usage(5, 1, True)]) == Usage(15, None, True)
    assert sum_usage([None, Usage(5, 1, True)]) == Usage(None, None, True)
    assert sum_usage([]) == Usage(0, 0, False, cache_read_tokens=0, cache_write_tokens=0)  # no call, nothing cached


# History ----------------------------------------------------------------------------------------


def test_without_a_history_provider_history_is_kept_in_memory_per_session() -> None:
    client = ScriptedChatClient(["a1", "a2", "b1"])
    agent = Agent(client)
    assert isinstance(agent.history, InMemoryHistoryProvider)
    first, second = agent.create_session(), agent.create_session()
    run(agent.run("one", session=first))
    run(agent.run("two", session=first))
    run(agent.run("other", session=second))
    assert texts(client.requests[1]) == ["user:one", "assistant:a1", "user:two"]
    assert texts(client.requests[2]) == ["user:other"]
    assert texts(stored(agent, first)) == ["user:one", "assistant:a1", "user:two", "assistant:a2"]


def test_two_agents_without_history_do_not_share_it() -> None:
    left, right = Agent(ScriptedChatClient(["l"])), Agent(ScriptedChatClient(["r"]))
    assert left.history is not right.history
    session = Session("shared-id")
    run(left.run("hello", session=session))
    assert stored(right, session) == []


def test_a_run_without_a_session_uses_a_new_one() -> None:
    client = ScriptedChatClient(["a", "b"])
    agent = Agent(client)
    run(agent.run("one"))
    run(agent.run("two"))
    assert texts(client.requests[1]) == ["user:two"]


@pytest.mark.parametrize("style", ["history=", "context_providers", "both"])
def test_a_history_provider_given_either_way_stores_the_turn_once(style: str, tmp_path: Path) -> None:
    history = SQLiteHistoryProvider(tmp_path / "history.db")
    client = ScriptedChatClient(["a1", "a2"])
    if style == "history=":
        agent = Agent(client, history=history)
    elif style == "context_providers":
        agent = Agent(client, context_providers=[history])
    else:
        agent = Agent(client, history=history, context_providers=[history])
    assert agent.history is history
    assert list(agent.history_providers) == ["sqlite"]
    session = agent.create_session()
    run(agent.run("one", session=session))
    run(agent.run("two", session=session))
    run(history.close())
    reopened = SQLiteHistoryProvider(tmp_path / "history.db")
    assert texts(run(reopened.load(session.session_id))) == ["user:one", "assistant:a1", "user:two", "assistant:a2"]
    assert texts(client.requests[1]) == ["user:one", "assistant:a1", "user:two"]
    run(reopened.close())


def test_two_history_providers_with_one_source_id_are_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"two history providers have source_id 'in_memory'"):
        Agent(
            ScriptedChatClient(["ok"]), history=InMemoryHistoryProvider(), context_providers=[InMemoryHistoryProvider()]
        )
    with pytest.raises(ConfigurationError, match=r"source_id 'notes'"):
        Agent(
            ScriptedChatClient(["ok"]),
            context_providers=[InMemoryHistoryProvider("notes"), InMemoryHistoryProvider("notes")],
        )


def test_compaction_after_a_run_needs_the_history_it_names() -> None:
    history = InMemoryHistoryProvider("archive")
    with pytest.raises(ConfigurationError, match=r"no history provider with that source_id \(it has 'archive'\)"):
        Agent(
            ScriptedChatClient(["ok"]),
            history=history,
            context_providers=[CompactionProvider(after_strategy=SlidingWindowStrategy(keep_last_groups=2))],
        )
    with pytest.raises(ConfigurationError, match=r"compacts history 'elsewhere'"):
        Agent(
            ScriptedChatClient(["ok"]),
            context_providers=[
                CompactionProvider(
                    after_strategy=SlidingWindowStrategy(keep_last_groups=2), history_source_id="elsewhere"
                )
            ],
        )
    # Named correctly, or compacting only the request view, it is accepted.
    Agent(
        ScriptedChatClient(["ok"]),
        history=history,
        context_providers=[
            CompactionProvider(after_strategy=SlidingWindowStrategy(keep_last_groups=2), history_source_id="archive")
        ],
    )
    Agent(
        ScriptedChatClient(["ok"]),
        history=history,
        context_providers=[CompactionProvider(SlidingWindowStrategy(keep_last_groups=2))],
    )


def test_a_request_view_leaves_the_stored_history_whole() -> None:
    provider = CompactionProvider(SlidingWindowStrategy(keep_last_groups=1))
    client = ScriptedChatClient(["a1", "a2", "a3"])
    agent = Agent(client, context_providers=[provider])
    session = agent.create_session()
    for question in ("one", "two", "three"):
        run(agent.run(question, session=session))
    assert texts(client.requests[2]) == ["user:three"]
    assert texts(stored(agent, session)) == [
        "user:one",
        "assistant:a1",
        "user:two",
        "assistant:a2",
        "user:three",
        "assistant:a3",
    ]


def test_a_retained_history_compaction_stores_the_reduced_list() -> None:
    provider = CompactionProvider(after_strategy=SlidingWindowStrategy(keep_last_groups=2))
    client = ScriptedChatClient(["a1", "a2", "a3"])
    agent = Agent(client, context_providers=[provider])
    session = agent.create_session()
    for question in ("one", "two", "three"):
        run(agent.run(question, session=session))
    assert texts(stored(agent, session)) == ["user:three", "assistant:a3"]
    assert texts(client.requests[2]) == ["user:two", "assistant:a2", "user:three"]


# Bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", r"the run's input is empty"),
        ("  \n\t", r"the run's input is empty"),
        ([], r"an empty list of messages"),
        ((), r"an empty list of messages"),
        ([Message.user("fine"), "text"], r"input\[1\] is str, not a Message"),
        ([{"role": "user", "content": "hi"}], r"input\[0\] is dict.*contextledger.from_openai"),
        ({"role": "user", "content": "hi"}, r"takes text, a Message or a list of Messages, got dict"),
        (b"bytes", r"got bytes"),
        (42, r"got int"),
        (None, r"got NoneType"),
        (iter([Message.user("hi")]), r"got list_iterator"),
    ],
    ids=[
        "empty",
        "blank",
        "empty-list",
        "empty-tuple",
        "str-item",
        "dict-item",
        "dict",
        "bytes",
        "int",
        "none",
        "iter",
    ],
)
def test_bad_input_is_refused_before_anything_happens(value: Any, expected: str, tmp_path: Path) -> None:
    log: list[tuple[str, str]] = []
    client = ScriptedChatClient(["never"])
    agent = Agent(client, context_providers=[Recorder("spy", log)])
    session = agent.create_session()
    run(agent.run("before", session=session))
    saved = (stored(agent, session), session.to_json(), len(client.requests), list(log))
    with pytest.raises(InvalidMessageError, match=expected):
        run(agent.run(value, session=session))
    assert (stored(agent, session), session.to_json(), len(client.requests), log) == saved


def test_a_session_from_elsewhere_is_refused() -> None:
    agent = Agent(ScriptedChatClient(["ok"]))
    with pytest.raises(ConfigurationError, match=r"session must be a Session"):
        run(agent.run("hi", session="s1"))  # type: ignore[arg-type]
    assert run(agent.history.load("s1")) == []


def test_a_single_message_or_a_tuple_is_accepted_as_input() -> None:
    client = ScriptedChatClient(["a", "b"])
    agent = Agent(client)
    message = Message.user("one")
    run(agent.run(message))
    run(agent.run((Message.system("extra rule"), Message.user("two"))))
    assert client.requests[0] == [message]
    assert texts(client.requests[1]) == ["system:extra rule", "user:two"]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"client": object()}, r"client must be a chat client"),
        ({"name": ""}, r"agent name must be a non-empty string"),
        ({"instructions": 5}, r"instructions must be text, got int"),
        ({"max_tool_rounds": 0}, r"max_tool_rounds must be an int >= 1, got 0"),
        ({"max_tool_rounds": True}, r"max_tool_rounds must be an int >= 1, got True"),
        ({"max_tool_rounds": "3"}, r"max_tool_rounds must be an int >= 1, got '3'"),
        ({"tool_errors": "ignore"}, r"tool_errors must be 'report' or 'raise', got 'ignore'"),
        ({"context_providers": "history"}, r"context_providers must be a list"),
        ({"context_providers": [object()]}, r"is neither a ContextProvider nor a history provider"),
        ({"history": ContextProvider()}, r"history must be a history provider"),
    ],
)
def test_an_agent_built_wrong_says_what_is_wrong(kwargs: dict[str, Any], expected: str) -> None:
    arguments: dict[str, Any] = {"client": ScriptedChatClient(["ok"]), **kwargs}
    with pytest.raises(ConfigurationError, match=expected):
        Agent(**arguments)


def test_tools_built_wrong_fail_when_the_agent_is_built() -> None:
    def spread(*items: str) -> str:
        return ""

    with pytest.raises(ToolError, match=r"\*args"):
        Agent(ScriptedChatClient(["ok"]), tools=[spread])
    with pytest.raises(ToolError, match=r"two tools are named 'lookup_price'"):
        Agent(ScriptedChatClient(["ok"]), tools=[lookup_price, lookup_price])


# Failure leaves everything as it was ------------------------------------------------------------


class Meddler(ContextProvider):
    """Writes to session state in before_run, then (optionally) fails there."""

    def __init__(self, fail_on: int | None) -> None:
        self.fail_on = fail_on
        self.runs = 0

    async def before_run(self, context: RunContext) -> None:
        self.runs += 1
        context.session.state["runs"] = self.runs
        context.session.state.setdefault("seen", []).append(context.input_messages[0].text)
        if self.runs == self.fail_on:
            raise RuntimeError("the provider's store is down")


def test_a_provider_that_fails_before_the_call_leaves_session_and_history_unchanged() -> None:
    client = ScriptedChatClient(["a1", "a3"])
    agent = Agent(client, context_providers=[Meddler(fail_on=2)])
    session = agent.create_session()
    run(agent.run("one", session=session))
    saved_history, saved_json = stored(agent, session), session.to_json()
    with pytest.raises(RuntimeError, match="store is down"):
        run(agent.run("two", session=session))
    assert stored(agent, session) == saved_history
    assert session.to_json() == saved_json
    assert len(client.requests) == 1
    run(agent.run("three", session=session))
    assert session.state["seen"] == ["one", "three"]
    assert texts(stored(agent, session))[-2:] == ["user:three", "assistant:a3"]


@pytest.mark.parametrize(
    "failure",
    [
        ModelTimeoutError("no answer in 30 s"),
        ModelResponseError("HTTP 500"),
        RuntimeError("client bug"),
        asyncio.CancelledError(),
    ],
    ids=["timeout", "http-500", "runtime", "cancelled"],
)
def test_a_failing_model_call_leaves_session_and_history_unchanged(failure: BaseException) -> None:
    provider = CompactionProvider(SlidingWindowStrategy(keep_last_groups=2))
    client = ScriptedChatClient(["a1", "a2", failure, "a4"])
    agent = Agent(client, context_providers=[Meddler(fail_on=None), provider])
    session = agent.create_session()
    run(agent.run("one", session=session))
    run(agent.run("two", session=session))
    saved_history, saved_json = stored(agent, session), session.to_json()
    with pytest.raises(type(failure)):
        run(agent.run("three", session=session))
    assert stored(agent, session) == saved_history
    assert session.to_json() == saved_json
    run(agent.run("four", session=session))
    assert texts(stored(agent, session))[-2:] == ["user:four", "assistant:a4"]


def test_a_failure_in_the_second_call_of_the_tool_loop_stores_nothing() -> None:
    client = ScriptedChatClient([calling(("c1", "lookup_price", {"item": "pen"})), ModelTimeoutError("late")])
    agent = Agent(client, tools=[lookup_price])
    session = agent.create_session()
    with pytest.raises(ModelTimeoutError):
        run(agent.run("go", session=session))
    assert len(client.requests) == 2
    assert stored(agent, session) == []


@pytest.mark.parametrize(
    "reply",
    [
        {"content": "not a response"},  # what the provider sent, never made into a ChatResponse
        ChatResponse("", (Message.user("I am the user now"),)),
        ChatResponse("", (Message.system("new rules"),)),
        ChatResponse("", ("text",)),  # type: ignore[arg-type]
    ],
    ids=["not-a-response", "user-message", "system-message", "not-a-message"],
)
def test_garbage_from_the_client_is_a_model_response_error_and_nothing_is_stored(reply: Any) -> None:
    client = ScriptedChatClient([reply])
    agent = Agent(client)
    session = agent.create_session()
    with pytest.raises(ModelResponseError):
        run(agent.run("go", session=session))
    assert stored(agent, session) == []
    assert issubclass(ModelResponseError, ModelError)


def test_an_empty_chat_response_becomes_an_assistant_message_with_its_text() -> None:
    client = ScriptedChatClient([ChatResponse("plain text, no messages")])
    response = run(Agent(client).run("go"))
    assert texts(response.messages) == ["assistant:plain text, no messages"]


class BrokenHistory(InMemoryHistoryProvider):
    """A store whose append fails, after the first store already took the turn."""

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        from contextledger.exceptions import HistoryUnavailableError  # noqa: PLC0415

        raise HistoryUnavailableError("the store went away")

    # Overridden as a user's subclass would be, without the facts a built-in store's turn takes.
    async def append_turn(  # type: ignore[override]
        self, session_id: str, turn_id: str, inputs: Sequence[Message], reply: Sequence[Message]
    ) -> bool:
        from contextledger.exceptions import HistoryUnavailableError  # noqa: PLC0415

        raise HistoryUnavailableError("the store went away")


def test_a_history_store_that_fails_rolls_back_the_stores_already_written() -> None:
    from contextledger.exceptions import HistoryUnavailableError  # noqa: PLC0415

    main, mirror = InMemoryHistoryProvider("main"), BrokenHistory("mirror")
    agent = Agent(ScriptedChatClient(["a1"]), context_providers=[main, mirror])
    session = agent.create_session()
    run(main.append(session.session_id, [Message.user("old"), Message.assistant("older answer")]))
    with pytest.raises(HistoryUnavailableError):
        run(agent.run("new", session=session, turn_id="t1"))
    assert texts(run(main.load(session.session_id))) == ["user:old", "assistant:older answer"]
    assert run(main.load_turn(session.session_id, "t1")) is None  # taken back, so a retry runs the turn
    assert session.to_json() == Session(session.session_id).to_json()


# Request view: once per run, or before every call ------------------------------------------------


class CountingProvider(ContextProvider):
    def __init__(self) -> None:
        self.sizes: list[int] = []

    async def prepare_request(self, messages: Sequence[Message], context: RunContext | None) -> Sequence[Message]:
        self.sizes.append(len(messages))
        return messages


def tool_loop_script() -> list[Any]:
    return [
        calling(("c1", "lookup_price", {"item": "pen"})),
        calling(("c2", "lookup_price", {"item": "ink"})),
        "done",
    ]


def test_an_agent_level_provider_prepares_only_the_first_call_of_a_run() -> None:
    counting = CountingProvider()
    client = ScriptedChatClient(tool_loop_script())
    agent = Agent(client, instructions="Be brief.", tools=[lookup_price], context_providers=[counting])
    run(agent.run("go"))
    assert len(client.requests) == 3
    assert counting.sizes == [1]  # the view without instructions, once


def test_a_provider_on_the_client_prepares_every_call_of_the_tool_loop() -> None:
    counting = CountingProvider()
    client = ScriptedChatClient(tool_loop_script())
    agent = Agent(use_context_providers(client, counting), instructions="Be brief.", tools=[lookup_price])
    run(agent.run("go"))
    assert len(client.requests) == 3
    assert counting.sizes == [2, 4, 6]  # instructions included, growing with the loop


def test_compaction_on_the_client_compacts_inside_the_tool_loop_and_on_the_agent_it_does_not() -> None:
    def requests_with(registration: str) -> tuple[list[list[Message]], list[Message]]:
        client = ScriptedChatClient(tool_loop_script())
        provider = CompactionProvider(SlidingWindowStrategy(keep_last_groups=2, stable_step=1))
        if registration == "client":
            agent = Agent(use_context_providers(client, provider), instructions="Be brief.", tools=[lookup_price])
        else:
            agent = Agent(client, instructions="Be brief.", tools=[lookup_price], context_providers=[provider])
        session = agent.create_session()
        run(agent.run("go", session=session))
        return client.requests, stored(agent, session)

    on_client, client_history = requests_with("client")
    on_agent, agent_history = requests_with("agent")
    # Third call: user, tool group 1, tool group 2.  On the client the window keeps the last two groups.
    assert [m.role for m in on_agent[2]] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert [m.role for m in on_client[2]] == ["system", "assistant", "tool", "assistant", "tool"]
    for requests in (on_client, on_agent):
        assert requests[0][0].additional_properties[INSTRUCTIONS_PROPERTY] is True
        assert all(validate(request) == [] for request in requests)
    # Either way the stored history is the whole turn.
    assert texts(client_history) == texts(agent_history)
    assert [m.role for m in client_history] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]


def test_use_context_providers_is_checked() -> None:
    client = ScriptedChatClient(["ok"])
    with pytest.raises(ConfigurationError, match=r"needs at least one provider"):
        use_context_providers(client)
    with pytest.raises(ConfigurationError, match=r"is not a ContextProvider"):
        use_context_providers(client, InMemoryHistoryProvider())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"needs a chat client"):
        use_context_providers(object(), CountingProvider())  # type: ignore[arg-type]


# The offline model ------------------------------------------------------------------------------


def test_the_offline_model_calls_a_tool_and_reports_its_result() -> None:
    def lookup_weather(city: str) -> str:
        """Today's weather."""
        return f"sunny in {city}"

    agent = Agent(OfflineModel(), instructions="You report the weather.", tools=[lookup_weather])
    session = agent.create_session()
    response = run(agent.run("What is the weather in Paris", session=session))
    assert [m.role for m in response.messages] == ["assistant", "tool", "assistant"]
    assert response.messages[0].function_calls[0].name == "lookup_weather"
    assert response.messages[1].text == "sunny in paris"
    assert "sunny in paris" in response.text
    assert response.usage.is_estimate is True
    assert response.usage.input_tokens is not None
    assert response.usage.input_tokens > 0
    assert texts(stored(agent, session)) == ["user:What is the weather in Paris", *texts(response.messages)]


def test_the_offline_model_answers_from_history_across_turns() -> None:
    agent = Agent(OfflineModel())
    session = agent.create_session()
    run(agent.run("database=PostgreSQL; module=Billing", session=session))
    answer = run(agent.run("Which database do we use?", session=session))
    assert "PostgreSQL" in answer.text
    other = run(agent.run("Which database do we use?", session=agent.create_session()))
    assert "PostgreSQL" not in other.text


def test_the_response_carries_the_generated_messages_only() -> None:
    client = ScriptedChatClient(["a1", "a2"])
    agent = Agent(client)
    session = agent.create_session()
    run(agent.run("one", session=session))
    response = run(agent.run("two", session=session))
    assert isinstance(response, AgentResponse)
    assert texts(response.messages) == ["assistant:a2"]


# Known defects, pinned -----------------------------------------------------------------------------
# Each test states the promise; the marker says why it does not hold yet.  They are strict: the
# day the defect is fixed the test passes, the run fails, and the marker must go.


def test_a_failed_turn_keeps_the_request_view_state_of_the_last_successful_turn() -> None:
    def build(replies: list[Any]) -> Agent:
        provider = CompactionProvider(SlidingWindowStrategy(keep_last_groups=2))
        return Agent(ScriptedChatClient(replies), context_providers=[provider])

    steady_agent, failing_agent = build(["a1", "a2", "a3"]), build(["a1", "a2", "a3", ModelTimeoutError("late")])
    steady, failing = Session("s"), Session("s")
    for question in ("one", "two", "three"):
        run(steady_agent.run(question, session=steady))
        run(failing_agent.run(question, session=failing))
    with pytest.raises(ModelTimeoutError):
        run(failing_agent.run("four", session=failing))
    assert failing.to_json() == steady.to_json()


def _retained_window_agent(history: InMemoryHistoryProvider, replies: list[Any], keep: int) -> Agent:
    provider = CompactionProvider(after_strategy=SlidingWindowStrategy(keep_last_groups=keep, stable_step=1))
    return Agent(ScriptedChatClient(replies), context_providers=[history, provider])


# A window of groups can cut a turn in two.  A retained history never starts with what is left of
# a turn whose question was dropped: read back from the store it would pass for the preamble
# before the first user message, which every window keeps, and the history would grow forever.
@pytest.mark.parametrize(
    ("keep", "expected"),
    [
        (1, []),
        (2, ["user:four", "assistant:a4"]),
        (3, ["user:four", "assistant:a4"]),
        (4, ["user:three", "assistant:a3", "user:four", "assistant:a4"]),
    ],
)
def test_a_retained_history_reduced_from_the_store_is_the_one_kept_live(keep: int, expected: list[str]) -> None:
    live_history, restarted_history = InMemoryHistoryProvider(), InMemoryHistoryProvider()
    live = _retained_window_agent(live_history, ["a1", "a2", "a3", "a4"], keep)
    session = Session("s")
    for number, question in enumerate(("one", "two", "three", "four"), start=1):
        run(live.run(question, session=session))
        # A new process for every turn: same store, fresh agent and session.
        run(_retained_window_agent(restarted_history, [f"a{number}"], keep).run(question, session=Session("s")))
    assert texts(run(live_history.load("s"))) == expected
    assert texts(run(restarted_history.load("s"))) == expected


@pytest.mark.parametrize(("keep", "expected"), [(1, []), (3, ["user:four", "assistant:a4"])])
def test_a_reduced_history_provider_never_keeps_half_a_turn(keep: int, expected: list[str]) -> None:
    from contextledger.agents import ReducedHistoryProvider  # noqa: PLC0415

    history = ReducedHistoryProvider(
        InMemoryHistoryProvider(), SlidingWindowStrategy(keep_last_groups=keep, stable_step=1)
    )
    agent = Agent(ScriptedChatClient(["a1", "a2", "a3", "a4"]), history=history)
    session = agent.create_session()
    for question in ("one", "two", "three", "four"):
        run(agent.run(question, session=session))
    assert texts(run(history.load(session.session_id))) == expected


def test_with_two_history_stores_each_earlier_message_is_sent_once() -> None:
    client = ScriptedChatClient(["a1", "a2"])
    agent = Agent(client, context_providers=[InMemoryHistoryProvider("main"), InMemoryHistoryProvider("mirror")])
    session = agent.create_session()
    run(agent.run("one", session=session))
    run(agent.run("two", session=session))
    assert texts(client.requests[1]) == ["user:one", "assistant:a1", "user:two"]
