"""The agent: one model, its instructions and tools, and the providers that shape each call.

A run is a transaction.  Everything it produces (generated messages, the
history append, the providers' session state) becomes visible only after the
model has answered; a model that times out, fails or answers garbage leaves
the session and its history exactly as they were before the turn.

Every run is a turn with an id (the caller's ``turn_id``, or a generated one), and each
history stores a turn id at most once.  A run whose turn id is already stored returns the
stored reply without calling the model, so a caller that lost the outcome of a run (a
timeout, a cancellation, :class:`TurnOutcomeUnknownError`) retries it with the same id and
can never store the turn twice.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from contextledger._forgotten import same_input
from contextledger._tracing import traced_agent_run, traced_model_request
from contextledger.agents._context import (
    INSTRUCTIONS_PROPERTY,
    ContextProvider,
    ProvidedClient,
    RunContext,
    current_run,
)
from contextledger.agents._history import kept_history, session_history
from contextledger.agents._response import AgentResponse, ModelCall
from contextledger.agents._session import Session
from contextledger.agents._tools import FunctionTool, describe_tools
from contextledger.clients import ChatClient, ChatResponse
from contextledger.exceptions import (
    ConfigurationError,
    InvalidMessageError,
    ModelResponseError,
    ToolError,
    ToolLoopError,
    TurnIdReusedError,
)
from contextledger.history import (
    HistoryProvider,
    InMemoryHistoryProvider,
    RetainedRewrite,
    StoredTurn,
    Turn,
    write_turn,
)
from contextledger.history._encoding import check_turn_id
from contextledger.history._turns import TurnTarget
from contextledger.messages import FunctionCallContent, Message

__all__ = ["Agent"]


def _input_messages(value: str | Message | Sequence[Message]) -> list[Message]:
    if isinstance(value, str):
        if not value.strip():
            raise InvalidMessageError("the run's input is empty; pass the user's text or a list of messages")
        return [Message.user(value)]
    if isinstance(value, Message):
        return [value]
    if isinstance(value, (bytes, Mapping)) or not isinstance(value, Sequence):
        raise InvalidMessageError(f"agent.run takes text, a Message or a list of Messages, got {type(value).__name__}")
    items: list[Message] = []
    for position, item in enumerate(value):
        if not isinstance(item, Message):
            raise InvalidMessageError(
                f"agent.run input[{position}] is {type(item).__name__}, not a Message; "
                "convert OpenAI dicts with contextledger.from_openai"
            )
        items.append(item)
    if not items:
        raise InvalidMessageError("agent.run got an empty list of messages; pass at least one user message")
    return items


def _replayed(stored: StoredTurn) -> AgentResponse:
    text = next((m.text for m in reversed(stored.reply) if m.role == "assistant" and m.text), "")
    return AgentResponse(text, stored.reply, (), stored.turn_id, replayed=True)


def _is_history(provider: object) -> bool:
    return isinstance(provider, HistoryProvider) and not isinstance(provider, ContextProvider)


class Agent:
    """A chat model with instructions, function tools, history and context providers.

    ``context_providers`` run in order; a history provider may be listed among
    them (as in ``[history, compaction]``) or given as ``history=``.  With no
    history provider the agent keeps history in memory for the life of the
    agent.  Tools are plain functions (sync or async); the agent runs the
    tool-calling loop, at most ``max_tool_rounds`` model calls per run.  A
    tool that raises, or that the model calls with bad arguments, gets the
    error sent back as its result so the model can recover, unless
    ``tool_errors="raise"``.
    """

    def __init__(
        self,
        client: ChatClient,
        *,
        name: str = "agent",
        instructions: str | None = None,
        tools: Sequence[Callable[..., Any] | FunctionTool] = (),
        context_providers: Sequence[ContextProvider | HistoryProvider] = (),
        history: HistoryProvider | None = None,
        max_tool_rounds: int = 8,
        tool_errors: Literal["report", "raise"] = "report",
    ) -> None:
        if not callable(getattr(client, "get_response", None)):
            raise ConfigurationError(f"client must be a chat client with async get_response(), got {client!r}")
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"agent name must be a non-empty string, got {name!r}")
        if instructions is not None and not isinstance(instructions, str):
            raise ConfigurationError(f"instructions must be text, got {type(instructions).__name__}")
        if isinstance(max_tool_rounds, bool) or not isinstance(max_tool_rounds, int) or max_tool_rounds < 1:
            raise ConfigurationError(f"max_tool_rounds must be an int >= 1, got {max_tool_rounds!r}")
        if tool_errors not in ("report", "raise"):
            raise ConfigurationError(f"tool_errors must be 'report' or 'raise', got {tool_errors!r}")
        if isinstance(context_providers, (str, bytes)) or not isinstance(context_providers, Sequence):
            raise ConfigurationError(f"context_providers must be a list, got {context_providers!r}")
        self.client = client
        self.name = name
        self.instructions = instructions
        self.tools = describe_tools(tools)
        self.max_tool_rounds = max_tool_rounds
        self.tool_errors = tool_errors
        providers: list[ContextProvider | HistoryProvider] = []
        if history is not None:
            if not _is_history(history):
                raise ConfigurationError(f"history must be a history provider (load/append/replace), got {history!r}")
            providers.append(history)
        for provider in context_providers:
            if not (_is_history(provider) or isinstance(provider, ContextProvider)):
                raise ConfigurationError(
                    f"{provider!r} is neither a ContextProvider nor a history provider; "
                    "subclass contextledger.agents.ContextProvider"
                )
            if any(provider is other for other in providers):
                continue
            providers.append(provider)
        if not any(_is_history(p) for p in providers):
            providers.insert(0, InMemoryHistoryProvider())
        histories: dict[str, HistoryProvider] = {}
        for provider in providers:
            if _is_history(provider):
                assert isinstance(provider, HistoryProvider)
                if provider.source_id in histories:
                    raise ConfigurationError(
                        f"two history providers have source_id {provider.source_id!r}; give each its own"
                    )
                histories[provider.source_id] = provider
        self.context_providers: tuple[ContextProvider | HistoryProvider, ...] = tuple(providers)
        self.history_providers: Mapping[str, HistoryProvider] = histories
        # Providers registered on the client (use_context_providers) rewrite every call there;
        # the agent still gives them their place in the run: bind, before_run and after_run.
        on_client = getattr(client, "providers", ()) if isinstance(client, ProvidedClient) else ()
        self._client_providers: tuple[ContextProvider, ...] = tuple(
            p for p in on_client if not any(p is q for q in providers)
        )
        for provider in [*providers, *self._client_providers]:
            if isinstance(provider, ContextProvider):
                provider.bind(self)
        # Tools the providers offer the model (a compaction provider's recall_context, say): run
        # like the agent's own; a provider among the agent's that offers any has the request
        # made again before every call, so it sees (and may compact) what the run generated.
        self._provider_tools: dict[str, FunctionTool] = {}
        for provider in [*providers, *self._client_providers]:
            if isinstance(provider, ContextProvider):
                for offered in provider.model_tools():
                    if offered.name in self.tools or offered.name in self._provider_tools:
                        raise ConfigurationError(
                            f"{provider!r} offers the model a tool named {offered.name!r}, and the agent already "
                            "has one by that name; rename the agent's tool"
                        )
                    self._provider_tools[offered.name] = offered
        self._reshape_each_call = any(
            isinstance(p, ContextProvider) and p.model_tools() for p in self.context_providers
        )

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, tools={list(self.tools)}, providers={len(self.context_providers)})"

    @property
    def history(self) -> HistoryProvider:
        """The first history provider: the history each request is built from.

        Every history provider stores each turn; only this one is read into requests.
        """
        return next(iter(self.history_providers.values()))

    def create_session(self, session_id: str | None = None) -> Session:
        return Session(session_id)

    @traced_agent_run
    async def run(
        self,
        messages: str | Message | Sequence[Message],
        *,
        session: Session | None = None,
        turn_id: str | None = None,
    ) -> AgentResponse:
        """Answer ``messages`` in ``session`` (a new one if not given), running tools as the model asks.

        ``turn_id`` names this turn (printable text, 1-256 characters; generated if not given,
        and returned as ``response.turn_id``).  If the session's history already stores that
        turn, its stored reply is returned with ``replayed=True`` and no model call; the same id
        with other input raises :class:`TurnIdReusedError`.

        On failure the error propagates and the session state is as before.  A
        :class:`HistoryError` (or any error before the store) means nothing was stored: not the
        input, not a partial reply, not a provider's session state.  A
        :class:`TurnOutcomeUnknownError` means the turn is stored once or not at all: run it
        again with the same ``turn_id`` to find out (a cancelled run is in the same position, so
        pass your own ``turn_id`` when you may cancel).
        """
        inputs = _input_messages(messages)
        if session is None:
            session = self.create_session()
        elif not isinstance(session, Session):
            raise ConfigurationError(f"session must be a Session from agent.create_session(), got {session!r}")
        if turn_id is None:
            turn = uuid.uuid4().hex  # new, so no store can hold it yet: nothing to look up
        else:
            turn = check_turn_id(turn_id)
            stored = await self.history.load_turn(session.session_id, turn)
            if stored is not None:
                return await self._replay(session, stored, inputs)
        saved_state = copy.deepcopy(session.state)
        context = RunContext(self, session, inputs, turn)
        token = current_run.set(context)
        try:
            response = await self._run(context)
            context.response = response
            for provider in [*self.context_providers, *self._client_providers]:
                if isinstance(provider, ContextProvider):
                    await provider.before_store(context)
            earlier = await self._store(context)
            if earlier is not None:
                # Another run of this turn id stored it first (a retry racing the original):
                # its reply is the turn's reply, and the providers' state from this run is moot.
                session.state.clear()
                session.state.update(saved_state)
                session.drop_caches()
                return await self._replay(session, earlier, inputs)
        except BaseException:
            session.state.clear()
            session.state.update(saved_state)
            session.drop_caches()
            raise
        finally:
            current_run.reset(token)
        for provider in [*self.context_providers, *self._client_providers]:
            if isinstance(provider, ContextProvider):
                await provider.after_run(context)
        for step in context._last:
            await step()
        return response

    async def _run(self, context: RunContext) -> AgentResponse:
        primary = self.history
        for provider in [*self.context_providers, *self._client_providers]:
            if isinstance(provider, ContextProvider):
                await provider.before_run(context)
            elif provider is primary:
                history = await session_history(context.session, provider)
                context._add_history(provider.source_id, history.messages)
            # Another history (a mirror) receives the turn too, but is never read into requests.
        instructions = [self.instructions] if self.instructions else []
        instructions.extend(context.instructions)
        head = (
            [Message.system("\n\n".join(instructions), additional_properties={INSTRUCTIONS_PROPERTY: True})]
            if instructions
            else []
        )
        view: Sequence[Message] | None = None
        tool_specs = tuple(t.to_openai() for t in [*self.tools.values(), *self._provider_tools.values()])
        calls: list[ModelCall] = []
        for _ in range(self.max_tool_rounds):
            # The call's span opens before its request is shaped, so the providers' work on the
            # first request (a compaction) is traced as a child of the call it shaped.
            with traced_model_request(self.client) as traced:
                if view is None or self._reshape_each_call:
                    # Read in place, never copied: a provider pays for what it reads of a long history.
                    view = context._request(generated=self._reshape_each_call)
                    for provider in self.context_providers:
                        if isinstance(provider, ContextProvider):
                            view = await provider.prepare_request(view, context)
                request = [*head, *view] if self._reshape_each_call else [*head, *view, *context.generated]
                if tool_specs:
                    reply = await traced.answer(self.client.get_response(request, tools=tool_specs))
                else:
                    reply = await traced.answer(self.client.get_response(request))
            if not isinstance(reply, ChatResponse):
                raise ModelResponseError(f"the chat client returned {type(reply).__name__}, not a ChatResponse")
            calls.append(ModelCall(tuple(request), tool_specs, reply))
            produced = list(reply.messages) if reply.messages else [Message.assistant(reply.text)]
            for message in produced:
                if not isinstance(message, Message) or message.role not in ("assistant", "tool"):
                    raise ModelResponseError(f"the chat client returned {message!r} as a reply message")
            context.generated.extend(produced)
            requested = [c for m in produced if m.role == "assistant" for c in m.function_calls]
            answered = {r.call_id for m in produced for r in m.function_results}
            pending = [call for call in requested if call.call_id not in answered]
            if not pending:
                return AgentResponse(reply.text, tuple(context.generated), tuple(calls), context.turn_id)
            for call in pending:
                context.generated.append(Message.tool(call.call_id, await self._call_tool(call)))
        raise ToolLoopError(
            f"agent {self.name!r}: the model was still calling tools after {self.max_tool_rounds} model calls; "
            "nothing was stored. Raise max_tool_rounds if the task really needs more steps"
        )

    async def _call_tool(self, call: FunctionCallContent) -> str:
        function = self.tools.get(call.name) or self._provider_tools.get(call.name)
        try:
            if function is None:
                known = ", ".join([*self.tools, *self._provider_tools]) or "none"
                raise ToolError(f"there is no tool named {call.name!r}; the tools are: {known}")
            return await function.invoke(call.arguments)
        except Exception as error:
            if self.tool_errors == "raise":
                raise
            return f"Error: {type(error).__name__}: {error}"

    async def _replay(self, session: Session, stored: StoredTurn, inputs: Sequence[Message]) -> AgentResponse:
        """The stored turn as this run's response, after checking it answers the same input.

        A history that missed the turn (its store failed after another had stored it) gets it now;
        the first history, which the stored turn was read from, has it.
        """
        if not same_input(stored.inputs, inputs):  # equal, or equal but for what a forget took out
            raise TurnIdReusedError(
                f"turn {stored.turn_id!r} of session {session.session_id!r} is already stored with other input "
                f"({len(stored.inputs)} message(s) starting {stored.inputs[0].text[:60]!r}); "
                "give each new turn its own turn_id"
            )
        for provider in self.history_providers.values():
            if provider is not self.history:
                await provider.append_turn(session.session_id, stored.turn_id, stored.inputs, stored.reply)
        return _replayed(stored)

    async def _store(self, context: RunContext) -> StoredTurn | None:
        """Store the turn in every history through the one turn writer
        (:func:`~contextledger.history.write_turn`): all of them or (taking back what it can) none.

        Returns None when this run stored the turn, or the turn another run had already stored
        under the same id.  An unknown outcome (:class:`TurnOutcomeUnknownError`) propagates
        and nothing is taken back: a retry with the same turn id completes the turn.
        """
        session = context.session
        turn = Turn(session.session_id, context.turn_id, context.input_messages, tuple(context.generated))
        targets: list[TurnTarget] = []
        for provider in self.history_providers.values():
            asked = context._rewrites.get(provider.source_id)
            kept = kept_history(session, provider)
            rewrite = None
            if asked is not None and kept is not None:
                # The writer changes the session's copy in place; the run keeps what it was built on.
                context._keep_history_from(asked.start)
                rewrite = RetainedRewrite(asked.start, (*asked.messages, *turn.messages))
            targets.append(TurnTarget(provider, kept, rewrite))
        outcome = await write_turn(turn, targets)
        if not outcome.stored:
            return outcome.earlier
        if len(targets) == 1 and targets[0].rewrite is not None and outcome.rewritten is not None:
            context._rewritten[targets[0].history.source_id] = outcome.rewritten
        return None
