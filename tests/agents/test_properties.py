"""Properties of the agent runtime on random multi-turn conversations with random tool calls.

Each case draws a conversation script (per turn: the input, zero to three rounds of parallel
tool calls, some to tools that fail or do not exist, then an answer) and a compaction setup (a
random truncation, sliding-window, tool-result or selective-tool strategy on the request view,
registered on the agent or on the client, sometimes with another one compacting the retained
history).  The promises checked:

1. every request sent is API-valid (no tool result without its call, no call without its
   results), starts with the instructions, and carries the run's newest input;
2. with a request view only, the stored history is exactly every run's input followed by what
   it generated;
3. a model call that fails at a random point of a random turn leaves the history and the
   serialised session as they were before that turn, and the conversation then goes on exactly
   as if the failure had never happened;
4. nothing the caller passed in is changed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextledger import to_openai, validate
from contextledger.agents import Agent, AgentResponse, CompactionProvider, Session, use_context_providers
from contextledger.agents._context import INSTRUCTIONS_PROPERTY
from contextledger.clients import ScriptedChatClient
from contextledger.exceptions import ModelResponseError, ModelTimeoutError
from contextledger.history import InMemoryHistoryProvider
from contextledger.messages import FunctionCallContent, Message
from contextledger.tokenizers import CharacterEstimatorTokenizer
from tests.conversations import (
    StrategySpec,
    selective_specs,
    sliding_window_specs,
    specs_for,
    tool_result_specs,
    truncation_specs,
)
from tests.sizes import examples
from tests.tools import lookup_price, lookup_stock

PROPERTY = settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])

TOKENIZER = CharacterEstimatorTokenizer()
REQUEST_VIEW_SPECS = st.one_of(
    [
        specs_for(factory, TOKENIZER)
        for factory in (truncation_specs, sliding_window_specs, tool_result_specs, selective_specs)
    ]
)


# The tools the scripted model calls ---------------------------------------------------------------


def flaky_service(item: str) -> str:
    """Always down."""
    raise ConnectionError(f"service down while asking for {item}")


TOOLS = (lookup_price, lookup_stock, flaky_service)
TOOL_NAMES = ("lookup_price", "lookup_stock", "flaky_service", "no_such_tool")


# Scripts ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One run: the input texts (the last one a user message), the model's tool rounds, its answer."""

    inputs: tuple[str, ...]
    input_style: str  # "text", "message" or "list"
    rounds: tuple[tuple[tuple[str, str], ...], ...]  # per round: (tool name, JSON arguments) per call
    answer: str

    def input_for_run(self) -> str | Message | list[Message]:
        if self.input_style == "text":
            return self.inputs[-1]
        if self.input_style == "message":
            return Message.user(self.inputs[-1], message_id=f"m-{len(self.inputs[-1])}")
        *earlier, last = self.inputs
        return [*(Message.system(text) for text in earlier), Message.user(last, additional_properties={"k": [1]})]

    def replies(self, turn_number: int) -> list[Message]:
        """The model's messages for this turn, with call ids unique in the whole conversation."""
        messages = [
            Message.assistant(
                "thinking" if round_number % 2 else None,
                calls=[
                    FunctionCallContent(f"t{turn_number}r{round_number}c{k}", name, arguments)
                    for k, (name, arguments) in enumerate(calls)
                ],
            )
            for round_number, calls in enumerate(self.rounds)
        ]
        return [*messages, Message.assistant(self.answer)]


_WORDS = st.sampled_from(("laptop", "pen", "Zürich", "日本語の本", "ink", "a" * 40, "chair", "🙂 lamp"))
_ARGUMENTS = st.one_of(
    _WORDS.map(lambda word: json.dumps({"item": word})),
    _WORDS.map(lambda word: json.dumps({"item": word, "warehouse": 2})),
    st.sampled_from(('{"item": 5}', "{not json", '{"colour": "red"}', "", "[]")),
)
_CALL = st.tuples(st.sampled_from(TOOL_NAMES), _ARGUMENTS)
_ROUND = st.lists(_CALL, min_size=1, max_size=3).map(tuple)


@st.composite
def turns(draw: st.DrawFn) -> Turn:
    texts = draw(st.lists(_WORDS, min_size=1, max_size=2))
    style = draw(st.sampled_from(("text", "message", "list"))) if len(texts) == 1 else "list"
    rounds = draw(st.lists(_ROUND, max_size=3).map(tuple))
    answer = draw(_WORDS.map(lambda word: f"about {word}: done"))
    return Turn(tuple(texts), style, rounds, answer)


conversations = st.lists(turns(), min_size=1, max_size=6)


def load(
    client: ScriptedChatClient, replies: Sequence[Message], failure: tuple[int, BaseException] | None = None
) -> None:
    """Script a run's replies on ``client``, in order; with ``failure``, its call raises instead and ends the script."""
    script: list[Message | BaseException] = list(replies)
    if failure is not None:
        position, error = failure
        script[position:] = [error]
    client.replies.extend(script)


@dataclass(frozen=True)
class Setup:
    """Where the request-view compaction is registered, and an optional retained-history compaction."""

    before: StrategySpec
    registration: str  # "agent" or "client"
    after: StrategySpec | None

    def build(self) -> tuple[Agent, ScriptedChatClient]:
        client = ScriptedChatClient()
        history = InMemoryHistoryProvider()
        before = CompactionProvider(self.before.build(), source_id="view")
        providers: list[Any] = [history]
        chat: Any = client
        if self.registration == "agent":
            providers.append(before)
        else:
            chat = use_context_providers(client, before)
        if self.after is not None:
            providers.append(CompactionProvider(after_strategy=self.after.build(), source_id="retained"))
        agent = Agent(chat, instructions="You answer about the shop.", tools=list(TOOLS), context_providers=providers)
        return agent, client


@st.composite
def setups(draw: st.DrawFn, *, with_after: bool) -> Setup:
    after = draw(st.one_of(st.none(), REQUEST_VIEW_SPECS)) if with_after else None
    return Setup(draw(REQUEST_VIEW_SPECS), draw(st.sampled_from(("agent", "client"))), after)


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


async def play(
    agent: Agent, client: ScriptedChatClient, session: Session, script: Sequence[Turn]
) -> list[AgentResponse]:
    responses = []
    for number, turn in enumerate(script):
        load(client, turn.replies(number))
        responses.append(await agent.run(turn.input_for_run(), session=session))
    return responses


def as_sent(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return to_openai(messages, metadata=True)


# 1. Every request is valid ------------------------------------------------------------------------


@PROPERTY
@given(script=conversations, setup=setups(with_after=True))
def test_every_request_is_valid_and_carries_instructions_and_the_newest_input(script: list[Turn], setup: Setup) -> None:
    agent, client = setup.build()
    session = agent.create_session()
    inputs: list[Message] = []
    first_calls: list[int] = []  # index into requests of each run's first call

    async def scenario() -> None:
        for number, turn in enumerate(script):
            first_calls.append(len(client.requests))
            load(client, turn.replies(number))
            given_input = turn.input_for_run()
            if isinstance(given_input, str):
                response = await agent.run(given_input, session=session)
                inputs.append(response.model_calls[0].request[-1])
            else:
                await agent.run(given_input, session=session)
                inputs.append(given_input if isinstance(given_input, Message) else given_input[-1])

    run(scenario())
    assert len(client.requests) == sum(len(turn.rounds) + 1 for turn in script)
    for request in client.requests:
        assert validate(request) == [], [str(p) for p in validate(request)]
        assert request[0].role == "system"
        assert request[0].additional_properties.get(INSTRUCTIONS_PROPERTY) is True
        assert len(request) >= 2
    for first_call, newest in zip(first_calls, inputs):
        assert client.requests[first_call][-1] == newest  # a run's first call ends with its input


# 2. A request view leaves the history whole ------------------------------------------------------


@PROPERTY
@given(script=conversations, setup=setups(with_after=False))
def test_with_a_request_view_only_the_history_is_every_input_and_everything_generated(
    script: list[Turn], setup: Setup
) -> None:
    agent, client = setup.build()
    session = agent.create_session()
    responses = run(play(agent, client, session, script))
    expected: list[Message] = []
    for number, (turn, response) in enumerate(zip(script, responses)):
        given_input = turn.input_for_run()
        if isinstance(given_input, str):
            expected.append(Message.user(given_input))
        elif isinstance(given_input, Message):
            expected.append(given_input)
        else:
            expected.extend(given_input)
        expected.extend(response.messages)
        # A run generates the scripted replies, each call followed by its result.
        assert [m for m in response.messages if m.role == "assistant"] == turn.replies(number)
        results = [m for m in response.messages if m.role == "tool"]
        assert len(results) == sum(len(calls) for calls in turn.rounds)
    stored = run(agent.history.load(session.session_id))
    assert as_sent(stored) == as_sent(expected)
    assert stored == expected


# 3. A failed turn leaves no trace ----------------------------------------------------------------


FAILURES = st.sampled_from(
    (ModelTimeoutError("no answer in time"), ModelResponseError("HTTP 500"), RuntimeError("client bug"))
)


@st.composite
def failure_points(draw: st.DrawFn, script: list[Turn]) -> tuple[int, int, BaseException]:
    turn = draw(st.integers(0, len(script) - 1))
    call = draw(st.integers(0, len(script[turn].rounds)))
    return turn, call, draw(FAILURES)


@PROPERTY
@given(data=st.data(), script=conversations, setup=setups(with_after=True))
def test_a_failed_model_call_leaves_history_and_session_as_before_the_turn(
    data: st.DataObject, script: list[Turn], setup: Setup
) -> None:
    failed_turn, failed_call, error = data.draw(failure_points(script), label="failure (turn, call, error)")
    agent, client = setup.build()
    session = Session("conversation")

    async def scenario() -> None:
        await play(agent, client, session, script[:failed_turn])
        history_before = await agent.history.load(session.session_id)
        json_before = session.to_json()
        load(client, script[failed_turn].replies(failed_turn), failure=(failed_call, error))
        with pytest.raises(type(error)):
            await agent.run(script[failed_turn].input_for_run(), session=session)
        assert await agent.history.load(session.session_id) == history_before
        assert session.to_json() == json_before

    run(scenario())


@settings(PROPERTY, derandomize=True)
@given(data=st.data(), script=conversations, setup=setups(with_after=True))
def test_a_failed_turn_is_invisible_to_the_rest_of_the_conversation(
    data: st.DataObject, script: list[Turn], setup: Setup
) -> None:
    """Twin sessions: one never fails, the other fails once; from then on they must agree exactly."""
    failed_turn, failed_call, error = data.draw(failure_points(script), label="failure (turn, call, error)")
    steady_agent, steady_client = setup.build()
    failing_agent, failing_client = setup.build()
    steady, failing = Session("conversation"), Session("conversation")

    async def scenario() -> None:
        await play(steady_agent, steady_client, steady, script[:failed_turn])
        await play(failing_agent, failing_client, failing, script[:failed_turn])
        load(failing_client, script[failed_turn].replies(failed_turn), failure=(failed_call, error))
        with pytest.raises(type(error)):
            await failing_agent.run(script[failed_turn].input_for_run(), session=failing)
        # The steady session is serialised only now: nothing was flushed before the failure.
        assert failing.to_json() == steady.to_json()
        assert await failing_agent.history.load("conversation") == await steady_agent.history.load("conversation")
        sent_before = len(steady_client.requests)
        failing_client.requests.clear()  # the record only: the script goes on from where it was
        for number in range(failed_turn, len(script)):
            for client, agent, session in (
                (steady_client, steady_agent, steady),
                (failing_client, failing_agent, failing),
            ):
                load(client, script[number].replies(number))
                await agent.run(script[number].input_for_run(), session=session)
        assert [as_sent(r) for r in failing_client.requests] == [
            as_sent(r) for r in steady_client.requests[sent_before:]
        ]
        assert await failing_agent.history.load("conversation") == await steady_agent.history.load("conversation")
        assert failing.to_json() == steady.to_json()

    run(scenario())


# 4. The caller's input is never changed -----------------------------------------------------------


@PROPERTY
@given(script=conversations, setup=setups(with_after=True))
def test_the_callers_input_list_and_messages_are_never_changed(script: list[Turn], setup: Setup) -> None:
    agent, client = setup.build()
    session = agent.create_session()

    async def scenario() -> None:
        for number, turn in enumerate(script):
            load(client, turn.replies(number))
            given_input = turn.input_for_run()
            items = [given_input] if isinstance(given_input, Message) else given_input
            if isinstance(items, str):
                await agent.run(items, session=session)
                continue
            objects = list(items)
            snapshot = as_sent(items)
            memo = [dict(m.additional_properties) for m in items]
            await agent.run(given_input, session=session)
            assert len(items) == len(objects)
            assert all(a is b for a, b in zip(items, objects))
            assert as_sent(items) == snapshot
            assert [dict(m.additional_properties) for m in items] == memo

    run(scenario())


def test_a_failed_turn_after_another_providers_reduction_leaves_the_view_as_it_was() -> None:
    """Found by the property above: the request view registered on the client kept its exclusions
    for the history as it was before the retained history's reduction (another provider's), so a
    session rebuilt from its state after a failed turn lost them and sent the first question again."""
    lookup = ("lookup_price", '{"item": "laptop"}')
    script = [
        Turn(("laptop", "laptop"), "list", ((lookup, lookup, lookup), (lookup,)), "about laptop: done"),
        Turn(("laptop",), "text", (), "about laptop: done"),
    ]
    setup = Setup(
        StrategySpec("TruncationStrategy", {"max_n": 7}),
        "client",
        StrategySpec("SelectiveToolCallCompactionStrategy", {}),
    )

    async def scenario() -> None:
        steady_agent, steady_client = setup.build()
        failing_agent, failing_client = setup.build()
        steady, failing = Session("conversation"), Session("conversation")
        await play(steady_agent, steady_client, steady, script[:1])
        await play(failing_agent, failing_client, failing, script[:1])
        load(failing_client, script[1].replies(1), failure=(0, ModelTimeoutError("no answer in time")))
        with pytest.raises(ModelTimeoutError):
            await failing_agent.run(script[1].input_for_run(), session=failing)
        sent_before = len(steady_client.requests)
        failing_client.requests.clear()
        for client, agent, session in ((steady_client, steady_agent, steady), (failing_client, failing_agent, failing)):
            load(client, script[1].replies(1))
            await agent.run(script[1].input_for_run(), session=session)
        assert [as_sent(r) for r in failing_client.requests] == [
            as_sent(r) for r in steady_client.requests[sent_before:]
        ]
        assert failing.to_json() == steady.to_json()

    run(scenario())
