"""Compaction where LangChain users put ``trim_messages``: a runnable, agent middleware, a LangGraph hook.

All three change only what the model sees: the graph state keeps the full history, and the
messages kept are the caller's own objects.  LangChain v1's ``before_model`` hook can only
update the state, so the request view is made in ``wrap_model_call``, the hook that changes
what one model call sends; ``before_model`` would rewrite the history itself.

The middleware can also hand the model its own controls (``agent_tools=True``): middleware
registers tools with the agent (``AgentMiddleware.tools``), so ``recall_context`` and
``compact_context`` reach every model call, and they read the graph state (``ToolRuntime``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain.tools import ToolRuntime
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import BaseTool, StructuredTool

from contextledger.agents import (
    COMPACT_DESCRIPTION,
    COMPACT_TOOL,
    RECALL_DESCRIPTION,
    RECALL_LIMIT,
    RECALL_TOOL,
    RecallableCompaction,
)
from contextledger.compaction import CompactionStrategy, compact_with_report
from contextledger.exceptions import ConfigurationError, InvalidMessageError
from contextledger.integrations._shared import run_sync
from contextledger.integrations.langchain._messages import from_langchain, to_langchain_message
from contextledger.tokenizers import Tokenizer

__all__ = ["CompactionMiddleware", "compact_langchain", "compaction_runnable", "pre_model_hook"]


def _check_strategy(strategy: object) -> CompactionStrategy:
    if not isinstance(strategy, CompactionStrategy):
        raise ConfigurationError(f"strategy must be a contextledger CompactionStrategy, got {strategy!r}")
    return strategy


async def compact_langchain(
    messages: Sequence[BaseMessage], *, strategy: CompactionStrategy, tokenizer: Tokenizer | None = None
) -> list[BaseMessage]:
    """The LangChain messages ``strategy`` would send: kept messages are the caller's own objects,
    summaries are new ones; ``messages`` is not changed."""
    originals = list(messages)
    ours = from_langchain(originals)
    result = await compact_with_report(ours, strategy=_check_strategy(strategy), tokenizer=tokenizer)
    back = {id(converted): original for converted, original in zip(ours, originals)}
    return [back.get(id(message)) or to_langchain_message(message) for message in result.messages]


def compaction_runnable(
    strategy: CompactionStrategy, *, tokenizer: Tokenizer | None = None
) -> RunnableLambda[Any, Any]:
    """A runnable from a list of LangChain messages to the list ``strategy`` would send.

    It goes where ``trim_messages(...)`` goes in a chain (``compaction_runnable(strategy) | model``),
    sync or async; unlike trimming it never separates a tool call from its results.
    """
    chosen = _check_strategy(strategy)

    async def compact(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        return await compact_langchain(_as_messages(messages), strategy=chosen, tokenizer=tokenizer)

    def compact_sync(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        return run_sync(compact(messages))

    return RunnableLambda(compact_sync, afunc=compact, name=f"contextledger_{chosen.name}")


def _as_messages(value: Any) -> list[BaseMessage]:
    """A message list from what a chain hands on: a list, a prompt value, or a state with ``messages``."""
    if hasattr(value, "to_messages"):
        return list(value.to_messages())
    if isinstance(value, Mapping) and "messages" in value:
        return list(value["messages"])
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return list(value)
    raise InvalidMessageError(f"expected a list of LangChain messages, got {type(value).__name__}")


def pre_model_hook(strategy: CompactionStrategy, *, tokenizer: Tokenizer | None = None) -> RunnableLambda[Any, Any]:
    """A LangGraph pre-model hook: from the graph state to ``{"llm_input_messages": projection}``.

    LangGraph sends ``llm_input_messages`` to the model and leaves ``messages`` (the state's
    history) as it was, so the model sees the projection and the state keeps everything.  Use it
    as ``create_react_agent(..., pre_model_hook=pre_model_hook(strategy))`` or as a node of a
    hand-built graph whose model node reads ``llm_input_messages``.
    """
    chosen = _check_strategy(strategy)

    async def hook(state: Any) -> dict[str, Any]:
        messages = _as_messages(state)
        return {"llm_input_messages": await compact_langchain(messages, strategy=chosen, tokenizer=tokenizer)}

    def hook_sync(state: Any) -> dict[str, Any]:
        return run_sync(hook(state))

    return RunnableLambda(hook_sync, afunc=hook, name="contextledger_pre_model_hook")


class CompactionMiddleware(AgentMiddleware):
    """Compacts what each model call of a LangChain v1 agent (``create_agent``) sends.

    ``create_agent(model, tools, middleware=[CompactionMiddleware(strategy)])``: every model call
    sends the projection of the agent's messages; the agent state, and so the checkpointer, keep
    the full history.  The system prompt is never compacted (LangChain keeps it apart).

    ``agent_tools=True`` registers ``recall_context(ref, query?)`` and ``compact_context(note?)`` with the
    agent, as :class:`contextledger.agents.CompactionProvider` offers them: collapsed lines and
    notices of messages set aside carry ``ref="..."``, a recall reads the graph state as it is now
    (at most ``recall_limit`` characters), and a compaction the model asks for holds from its next
    call on (see :class:`contextledger.agents.RecallableCompaction`).
    """

    def __init__(
        self,
        strategy: CompactionStrategy,
        *,
        tokenizer: Tokenizer | None = None,
        agent_tools: bool = False,
        recall_limit: int = RECALL_LIMIT,
    ) -> None:
        super().__init__()
        self.strategy = _check_strategy(strategy)
        self.tokenizer = tokenizer
        if not isinstance(agent_tools, bool):
            raise ConfigurationError(f"agent_tools must be True or False, got {agent_tools!r}")
        self._controls = (
            RecallableCompaction(self.strategy, tokenizer=tokenizer, recall_limit=recall_limit) if agent_tools else None
        )
        self.tools: list[BaseTool] = [] if self._controls is None else self._model_tools(self._controls)

    def __repr__(self) -> str:
        return f"CompactionMiddleware({self.strategy!r})"

    @staticmethod
    def _model_tools(controls: RecallableCompaction) -> list[BaseTool]:
        def state_messages(runtime: ToolRuntime) -> list[Any]:
            state = runtime.state
            messages = state.get("messages", []) if isinstance(state, Mapping) else getattr(state, "messages", [])
            return from_langchain(list(messages))

        async def recall(ref: str, runtime: ToolRuntime, query: str | None = None) -> str:
            return await controls.recall(ref, state_messages(runtime), query)

        async def compact(runtime: ToolRuntime, note: str | None = None) -> str:
            return await controls.compact(state_messages(runtime), note)

        def recall_sync(ref: str, runtime: ToolRuntime, query: str | None = None) -> str:
            return run_sync(recall(ref, runtime, query))

        def compact_sync(runtime: ToolRuntime, note: str | None = None) -> str:
            return run_sync(compact(runtime, note))

        return [
            StructuredTool.from_function(
                func=recall_sync, coroutine=recall, name=RECALL_TOOL, description=RECALL_DESCRIPTION
            ),
            StructuredTool.from_function(
                func=compact_sync, coroutine=compact, name=COMPACT_TOOL, description=COMPACT_DESCRIPTION
            ),
        ]

    async def _request(self, request: ModelRequest) -> ModelRequest:
        if self._controls is None:
            messages = await compact_langchain(request.messages, strategy=self.strategy, tokenizer=self.tokenizer)
            return request.override(messages=messages)  # type: ignore[arg-type]
        originals = list(request.messages)
        ours = from_langchain(originals)
        back = {id(converted): original for converted, original in zip(ours, originals)}
        sent = await self._controls.request(ours)
        kept: list[Any] = [back.get(id(m)) or to_langchain_message(m) for m in sent]
        return request.override(messages=kept)

    def wrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], ModelResponse],
    ) -> ModelResponse:
        return handler(run_sync(self._request(request)))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        return await handler(await self._request(request))
