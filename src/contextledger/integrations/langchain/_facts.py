"""Controlled facts as LangChain v1 agent middleware, with a forget that rewrites a graph's stored messages."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import BaseMessage, HumanMessage, RemoveMessage, SystemMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from contextledger.facts import FactsTurn, FactWriter, ForgetReport
from contextledger.facts._forget import HistoryTarget
from contextledger.facts._store import FactMemory
from contextledger.integrations._shared import HostedFacts, converted_history, run_sync
from contextledger.integrations.langchain._messages import from_langchain, to_langchain

__all__ = ["FactsMiddleware"]


def _new_user_text(messages: Sequence[BaseMessage]) -> tuple[str | None, str | None]:
    """The run's own user text (the human messages after the last non-human one) and the id of the
    last of them, which marks the run; text injected by the library is never among them."""
    texts: list[str] = []
    last_id: str | None = None
    for message in reversed(messages):
        if not isinstance(message, HumanMessage):
            break
        if last_id is None:
            last_id = message.id
        if message.text.strip():
            texts.append(message.text)
    return ("\n".join(reversed(texts)) if texts else None), last_id


class FactsMiddleware(HostedFacts, AgentMiddleware):
    """contextledger's controlled facts as LangChain v1 agent middleware.

    ``before_agent`` takes the turn's ticket from the run's new user messages (never from
    replies, tool results or the block itself); each model call gets the facts block appended to
    its system message, which is never written to the state; ``after_agent``, reached only when
    the agent finished without an error, has ``writer`` propose from that text and the store
    admit or refuse the whole batch with the ticket.  A refusal never fails the run: it is kept
    on ``last_turn``.  :meth:`aforget` forgets in the store and rewrites the graph's stored
    messages so the old statement is no longer in front of the model.
    """

    def __init__(self, store: FactMemory, writer: FactWriter | None = None) -> None:
        super().__init__()
        self._host_facts(store, writer, host="FactsMiddleware")
        self._turns: dict[str, FactsTurn] = {}

    def __repr__(self) -> str:
        return f"FactsMiddleware(store={self.store!r}, writer={self.writer!r})"

    # The three steps, usable on their own in a hand-built graph.

    def begin(self, messages: Sequence[BaseMessage]) -> None:
        """Start the turn of the run whose input ends ``messages``."""
        text, marker = _new_user_text(messages)
        if marker is None:
            return
        begun = self._facts.begin(text)
        if begun is not None:
            self._turns[marker] = begun

    def system_message(self, system: SystemMessage | None) -> SystemMessage:
        """``system`` with the facts block after it (or the block alone)."""
        block = self._facts.block()
        if system is None or (isinstance(system.content, str) and not system.content.strip()):
            return SystemMessage(content=block)
        if isinstance(system.content, list):  # blocks (cache marks...) kept as they are, the facts after them
            return system.model_copy(update={"content": [*system.content, {"type": "text", "text": block}]})
        return system.model_copy(update={"content": f"{system.content}\n\n{block}"})

    async def finish(self, messages: Sequence[BaseMessage]) -> FactsTurn | None:
        """After a successful run: extract with the ticket taken by :meth:`begin` (the turn's
        ``response`` is the run's last message).

        The run is the newest user message of ``messages`` that began a turn; turns begun by
        older messages of the same history belong to runs that failed, and are dropped.
        """
        marked = [m.id for m in messages if isinstance(m, HumanMessage) and m.id is not None and m.id in self._turns]
        begun = self._turns.pop(marked[-1]) if marked else None
        for stale in marked[:-1]:
            self._turns.pop(stale, None)
        return await self._facts.finish(begun, messages[-1] if messages else None)

    # The middleware hooks.

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        self.begin(state["messages"])
        return None

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        self.begin(state["messages"])
        return None

    def wrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], ModelResponse],
    ) -> ModelResponse:
        return handler(request.override(system_message=self.system_message(request.system_message)))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        return await handler(request.override(system_message=self.system_message(request.system_message)))

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        run_sync(self.finish(state["messages"]))
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        await self.finish(state["messages"])
        return None

    # Forgetting.

    async def aforget(self, key: str | None = None, *, graphs: Sequence[tuple[Any, Any]] = ()) -> ForgetReport:
        """Forget ``key`` (or every fact) in the store and in each ``(graph, config)``'s stored messages.

        :func:`contextledger.facts.forget_facts` does the work (the store first, so no extraction
        in flight can bring a fact back; then each history scrubbed); a graph's messages are read
        with ``aget_state`` and written back whole through ``aupdate_state``.
        """
        targets = [_graph_history(graph, config, position) for position, (graph, config) in enumerate(graphs)]
        return await self._forget(key, targets)

    def forget(self, key: str | None = None, *, graphs: Sequence[tuple[Any, Any]] = ()) -> ForgetReport:
        """:meth:`aforget` for synchronous code."""
        return run_sync(self.aforget(key, graphs=graphs))


def _graph_history(graph: Any, config: Any, position: int) -> HistoryTarget:
    """A LangGraph graph's stored ``messages`` for one thread, as a history ``forget`` can rewrite."""

    async def read() -> list[BaseMessage]:
        snapshot = await graph.aget_state(config)
        return list(snapshot.values.get("messages", []))

    async def write(messages: list[BaseMessage]) -> None:
        await graph.aupdate_state(config, {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *messages]})

    return converted_history(f"graph {position}", read, write, from_langchain, to_langchain)
