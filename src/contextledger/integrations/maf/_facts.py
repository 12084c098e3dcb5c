"""Controlled facts as a MAF context provider (the seed's Demo160), with a forget that rewrites MAF histories."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import agent_framework as maf

from contextledger.exceptions import ConfigurationError, FactsError
from contextledger.facts import (
    ALLOWED_KEYS,
    Admission,
    FactMemory,
    FactsTurn,
    FactWriter,
    Forgotten,
    RuleWriter,
    extract,
    parse_assertions,
    scrub_history,
)
from contextledger.integrations.maf._history import ContextLedgerHistoryProvider
from contextledger.integrations.maf._messages import from_maf_messages, to_maf_messages
from contextledger.messages import (
    Message,
)


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
        self.writer: FactWriter = writer if writer is not None else RuleWriter()
        self.last_turn: FactsTurn | None = None
        self._turns: weakref.WeakKeyDictionary[maf.SessionContext, FactsTurn] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"FactsContextProvider(store={self.store!r}, writer={self.writer!r}, source_id={self.source_id!r})"

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
        text = _external_user_text(context)
        if text is None:
            return
        try:
            self._turns[context] = FactsTurn(self.store.begin_turn(text))
        except FactsError as error:  # a message over the bound: the run goes on, the facts cannot change
            self._turns[context] = FactsTurn(None, rejection=error)

    async def after_run(
        self, *, agent: Any, session: maf.AgentSession, context: maf.SessionContext, state: dict[str, Any]
    ) -> None:
        begun = self._turns.pop(context, None)
        if begun is None or context.response is None:
            return
        if begun.ticket is None:
            self.last_turn = begun
            return
        try:
            self.last_turn = FactsTurn(begun.ticket, await extract(self.store, self.writer, begun.ticket))
        except FactsError as error:  # refused or stale: reported, never raised into a run that succeeded
            self.last_turn = FactsTurn(begun.ticket, rejection=error)

    async def forget(
        self,
        key: str | None = None,
        *,
        histories: Sequence[tuple[maf.AgentSession, maf.HistoryProvider]] = (),
    ) -> Forgotten:
        """Forget ``key`` (or every fact) in the store and in each (session, history) given.

        Each history is rewritten as :func:`contextledger.facts.scrub_history` rewrites one:
        the declarations of the forgotten keys are cut from user messages and the replies of
        turns that declared or mention a forgotten value are dropped, so the old statement is
        no longer in front of the model.  MAF's ``InMemoryHistoryProvider`` and
        :class:`ContextLedgerHistoryProvider` can be rewritten; another history provider is
        refused before anything changes.  The store is forgotten first, so no extraction in
        flight can bring a fact back even if a history then fails.
        """
        for _, history in histories:
            if not isinstance(history, (maf.InMemoryHistoryProvider, ContextLedgerHistoryProvider)):
                raise ConfigurationError(
                    f"cannot rewrite {history!r}: forget rewrites MAF's InMemoryHistoryProvider and "
                    "ContextLedgerHistoryProvider; clear other histories yourself"
                )
        # The store validates the key (and refuses a bad one before anything changes).
        name = key.strip().lower() if isinstance(key, str) else None
        keys = ALLOWED_KEYS if name is None else frozenset({name})
        loaded = [(session, history, await _load_history(session, history)) for session, history in histories]
        forgotten = self.store.forget(key)
        values = {fact.value for fact in forgotten}
        for _, _, messages in loaded:
            values |= _declared_values(messages, keys)
        for session, history, messages in loaded:
            scrubbed = scrub_history(messages, keys, values)
            if len(scrubbed) != len(messages) or any(a is not b for a, b in zip(scrubbed, messages)):
                await _replace_history(session, history, scrubbed)
        return forgotten


def _declared_values(messages: Sequence[Message], keys: frozenset[str]) -> set[str]:
    """Every value a user message in ``messages`` declared for one of ``keys``."""
    values: set[str] = set()
    for message in messages:
        if message.role != "user":
            continue
        try:
            declared = parse_assertions(message.text)
        except FactsError:
            continue  # a message whose declarations were refused declared nothing
        values |= {candidate.value for candidate in declared if candidate.key in keys}
    return values


async def _load_history(session: maf.AgentSession, history: maf.HistoryProvider) -> list[Message]:
    if isinstance(history, ContextLedgerHistoryProvider):
        return await history.provider.load(history._session(session.session_id))
    state = session.state.get(history.source_id) or {}
    return from_maf_messages(state.get("messages", []))


async def _replace_history(session: maf.AgentSession, history: maf.HistoryProvider, messages: list[Message]) -> None:
    if isinstance(history, ContextLedgerHistoryProvider):
        await history.provider.replace(history._session(session.session_id), messages)
        return
    session.state.setdefault(history.source_id, {})["messages"] = to_maf_messages(messages)
