"""Controlled facts as a MAF context provider (the seed's Demo160), with a forget that rewrites MAF histories."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import agent_framework as maf

from contextledger.exceptions import ConfigurationError
from contextledger.facts import FactWriter, ForgetReport
from contextledger.facts._forget import HistoryTarget, history_target
from contextledger.facts._store import FactMemory
from contextledger.integrations._shared import HostedFacts, converted_history
from contextledger.integrations.maf._history import ContextLedgerHistoryProvider
from contextledger.integrations.maf._messages import from_maf_messages, to_maf_messages


def _external_user_text(context: maf.SessionContext) -> str | None:
    """The run's own user text: its input user messages (what came from outside), never context a
    provider injected; joined by line breaks, which separate declarations and never merge two."""
    texts = [
        message.text
        for message in context.input_messages
        if message.role == "user" and "_attribution" not in message.additional_properties and message.text.strip()
    ]
    return "\n".join(texts) if texts else None


class FactsContextProvider(HostedFacts, maf.ContextProvider):
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
        self._host_facts(store, writer, host="FactsContextProvider")
        if not isinstance(source_id, str) or not source_id:
            raise ConfigurationError(f"source_id must be a non-empty string, got {source_id!r}")
        super().__init__(source_id)

    def __repr__(self) -> str:
        return f"FactsContextProvider(store={self.store!r}, writer={self.writer!r}, source_id={self.source_id!r})"

    async def before_run(
        self, *, agent: Any, session: maf.AgentSession, context: maf.SessionContext, state: dict[str, Any]
    ) -> None:
        context.extend_instructions(self.source_id, self._facts.block())
        self._facts.begin_run(context, _external_user_text(context))

    async def after_run(
        self, *, agent: Any, session: maf.AgentSession, context: maf.SessionContext, state: dict[str, Any]
    ) -> None:
        if context.response is None:
            self._facts.drop_run(context)
            return
        await self._facts.finish_run(context, context.response)

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
        return await self._forget(key, targets)


def _target(session: maf.AgentSession, history: maf.HistoryProvider) -> HistoryTarget:
    name = f"{history.source_id}:{session.session_id}"
    if isinstance(history, ContextLedgerHistoryProvider):
        # A contextledger store (maybe shared with an Agent that keeps turn records): rewrite all of it.
        return history_target(history.provider, history._session(session.session_id), name)

    async def read() -> list[maf.Message]:
        state = session.state.get(history.source_id) or {}
        return list(state.get("messages", []))

    async def write(messages: list[maf.Message]) -> None:
        session.state.setdefault(history.source_id, {})["messages"] = messages

    return converted_history(name, read, write, from_maf_messages, to_maf_messages)
