"""Controlled facts as a MAF context provider (the seed's Demo160), with a forget that rewrites MAF histories."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import agent_framework as maf

from contextledger.exceptions import ConfigurationError, FactsError
from contextledger.facts import (
    Admission,
    FactMemory,
    FactsTurn,
    FactWriter,
    ForgetReport,
    HistoryTarget,
    RuleWriter,
    forget_facts,
    history_target,
)
from contextledger.facts._turns import TurnTracker
from contextledger.integrations.maf._history import ContextLedgerHistoryProvider
from contextledger.integrations.maf._messages import from_maf_messages, to_maf_messages
from contextledger.messages import Message


def _external_user_text(context: maf.SessionContext) -> str | None:
    """The run's own user text: its input user messages (what came from outside), never context a
    provider injected; joined by line breaks, which separate declarations and never merge two."""
    texts = [
        message.text
        for message in context.input_messages
        if message.role == "user" and "_attribution" not in message.additional_properties and message.text.strip()
    ]
    return "\n".join(texts) if texts else None


class FactsContextProvider(maf.ContextProvider):
    """contextledger's controlled facts as a MAF context provider (the seed's Demo160).

    Before the run it adds ``store.to_prompt_block()`` to the run's instructions (never to a
    message, so the block is never stored in a history) and takes the turn's ticket from the
    run's external user messages.  MAF calls ``after_run`` only when the model call succeeded;
    then ``writer`` (the rule writer by default) proposes from that text alone and the store
    admits or refuses the batch with the ticket, so a ``forget`` made while the model answered
    makes the extraction stale.  Generated replies and injected context are never read.

    A refused extraction does not fail a run that succeeded; it is kept on ``last_turn``
    (and ``last_rejection``).  One provider may serve several agents sharing one store.
    """

    def __init__(self, store: FactMemory, writer: FactWriter | None = None, *, source_id: str = "facts") -> None:
        if not isinstance(store, FactMemory):
            raise ConfigurationError(
                f"FactsContextProvider needs a fact store (FactStore or RedisFactStore), got {store!r}"
            )
        if writer is not None and not isinstance(writer, FactWriter):
            raise ConfigurationError(f"writer must have async propose(user_text), got {writer!r}")
        if not isinstance(source_id, str) or not source_id:
            raise ConfigurationError(f"source_id must be a non-empty string, got {source_id!r}")
        super().__init__(source_id)
        self.store = store
        self.writer: FactWriter = writer if writer is not None else RuleWriter(store.schema)
        self._turns = TurnTracker(store, self.writer)

    def __repr__(self) -> str:
        return f"FactsContextProvider(store={self.store!r}, writer={self.writer!r}, source_id={self.source_id!r})"

    @property
    def last_turn(self) -> FactsTurn | None:
        """The outcome of the latest run that finished (its admission or refusal and its diagnostics)."""
        return self._turns.last_turn

    @property
    def last_admission(self) -> Admission | None:
        return None if self.last_turn is None else self.last_turn.admission

    @property
    def last_rejection(self) -> FactsError | None:
        return None if self.last_turn is None else self.last_turn.rejection

    async def before_run(
        self, *, agent: Any, session: maf.AgentSession, context: maf.SessionContext, state: dict[str, Any]
    ) -> None:
        context.extend_instructions(self.source_id, self.store.to_prompt_block())
        self._turns.begin(context, _external_user_text(context))

    async def after_run(
        self, *, agent: Any, session: maf.AgentSession, context: maf.SessionContext, state: dict[str, Any]
    ) -> None:
        if context.response is None:
            self._turns.forget_run(context)
            return
        await self._turns.finish(context, context.response)

    async def forget(
        self,
        key: str | None = None,
        *,
        histories: Sequence[tuple[maf.AgentSession, maf.HistoryProvider]] = (),
    ) -> ForgetReport:
        """Forget ``key`` (or every fact) in the store and in each (session, history) given.

        This is :func:`contextledger.facts.forget_facts`, the one forgetting of the library: the
        declarations of the key are replaced by a marker in user messages, and any other message
        holding a forgotten value is replaced whole.  MAF's ``InMemoryHistoryProvider`` and
        :class:`ContextLedgerHistoryProvider` can be rewritten; another history provider is
        refused before anything changes.
        """
        for _, history in histories:
            if not isinstance(history, (maf.InMemoryHistoryProvider, ContextLedgerHistoryProvider)):
                raise ConfigurationError(
                    f"cannot rewrite {history!r}: forget rewrites MAF's InMemoryHistoryProvider and "
                    "ContextLedgerHistoryProvider; clear other histories yourself"
                )
        targets = [_target(session, history) for session, history in histories]
        return await forget_facts(self.store, key, histories=targets)


def _target(session: maf.AgentSession, history: maf.HistoryProvider) -> HistoryTarget:
    name = f"{history.source_id}:{session.session_id}"
    if isinstance(history, ContextLedgerHistoryProvider):
        # A contextledger store (maybe shared with an Agent that keeps turn records): rewrite all of it.
        return history_target(history.provider, history._session(session.session_id), name)

    async def load() -> list[Message]:
        state = session.state.get(history.source_id) or {}
        return from_maf_messages(state.get("messages", []))

    async def replace(messages: list[Message]) -> None:
        session.state.setdefault(history.source_id, {})["messages"] = to_maf_messages(messages)

    return HistoryTarget(name, load, replace)
