"""Any contextledger history store behind MAF's history-provider interface.

Every run's messages are stored as one turn through the one turn writer
(:func:`~contextledger.history.write_turn`): under a turn id, exactly once, with the reducer's
rewrite of the retained history in the same atomic step, and never leaving a history that starts
in the middle of a turn.
"""

from __future__ import annotations

import contextvars
import dataclasses
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Final

import agent_framework as maf

from contextledger import compaction
from contextledger.agents import ReducedHistoryProvider
from contextledger.exceptions import ConfigurationError, HistoryError
from contextledger.history import HistoryProvider, KeptHistory, Turn, TurnOutcome, synced_history, write_turn
from contextledger.history._encoding import check_turn_id
from contextledger.history._turns import TurnTarget
from contextledger.integrations.maf._clients import _as_tokenizer
from contextledger.integrations.maf._compaction import AgentFrameworkStrategy, _unwrap
from contextledger.integrations.maf._messages import _EXCLUDE_REASON, _EXCLUDED, from_maf_messages, to_maf_messages
from contextledger.messages import (
    Message,
)

_VIEW_ANNOTATIONS: Final = frozenset({"_group", _EXCLUDED, _EXCLUDE_REASON})
TURN_ID_KEY: Final = "contextledger_turn_id"
"""Where a run's turn id lives in MAF's ``SessionContext.metadata``: set it (another provider's
``before_run``) to choose the id; otherwise one is generated for the run."""
# Sessions whose history an adapter keeps a copy of (the most recently used).
_KEPT = 256

# The run whose messages MAF's after_run is saving: its input messages (to split the saved
# messages into the turn's inputs and its reply) and its turn id.
_saving: contextvars.ContextVar[tuple[list[maf.Message], str] | None] = contextvars.ContextVar(
    "contextledger_maf_saving", default=None
)


def _without_view_annotations(message: Message) -> Message:
    """``message`` without MAF's compaction annotations (see :class:`ContextLedgerHistoryProvider`)."""
    properties = message.additional_properties
    if not any(key in properties for key in _VIEW_ANNOTATIONS):
        return message
    kept = {key: value for key, value in properties.items() if key not in _VIEW_ANNOTATIONS}
    return dataclasses.replace(message, additional_properties=kept)


class ContextLedgerHistoryProvider(maf.HistoryProvider):
    """A contextledger history store (in memory, SQLite, Redis) as a MAF history provider.

    MAF loads the session's messages before each run and stores the run's
    input and response after it; here they live in ``provider``, keyed by the
    MAF session id, with every field converted losslessly.  MAF's session
    ``state`` is not used, so a session object can be rebuilt from its id alone.

    ``reducer`` (a strategy of this module or of :mod:`contextledger.compaction`)
    makes the retained history smaller after each save: the reduced list
    *replaces* the stored one, so what it removed is gone (unlike a
    request-view compaction, which leaves the stored history whole).
    What is stored is the conversation, never a view of it: MAF's compaction
    annotations (``_group``, ``_excluded``, ``_exclude_reason``), which a
    request-view strategy writes on the very message objects MAF then stores,
    are removed on the way in.  Otherwise an exclusion meant for one request
    would silently become a reduction of the retained history.

    Each run is stored as one turn (see the module docstring) under the turn id in
    ``context.metadata[TURN_ID_KEY]`` or a generated one.  A save whose outcome was lost
    (:class:`~contextledger.exceptions.TurnOutcomeUnknownError`, which carries the turn id) is
    retried with :meth:`save_turn` and that id: a stored turn is not stored again.
    """

    def __init__(
        self,
        provider: HistoryProvider,
        *,
        source_id: str | None = None,
        load_messages: bool = True,
        store_inputs: bool = True,
        store_context_messages: bool = False,
        store_context_from: set[str] | None = None,
        store_outputs: bool = True,
        reducer: AgentFrameworkStrategy | compaction.CompactionStrategy | None = None,
        tokenizer: object = None,
    ) -> None:
        if not isinstance(provider, HistoryProvider):
            raise ConfigurationError(
                f"ContextLedgerHistoryProvider needs a contextledger HistoryProvider, got {provider!r}"
            )
        engine = _unwrap(reducer)
        if engine is not None and not isinstance(engine, compaction.CompactionStrategy):
            raise ConfigurationError(f"reducer must be a compaction strategy, got {reducer!r}")
        super().__init__(
            source_id or provider.source_id,
            load_messages=load_messages,
            store_inputs=store_inputs,
            store_context_messages=store_context_messages,
            store_context_from=store_context_from,
            store_outputs=store_outputs,
        )
        self.provider = provider
        self.reducer: compaction.CompactionStrategy | None = engine
        self.tokenizer = _as_tokenizer(tokenizer)
        self._reduced = (
            ReducedHistoryProvider(provider, engine, tokenizer=self.tokenizer) if engine is not None else None
        )
        # The stored history as this adapter last read or wrote it, per session, so a run reads
        # the store's version only (the messages again only when another writer moved it).
        self._kept: OrderedDict[str, KeptHistory] = OrderedDict()

    def __repr__(self) -> str:
        return f"ContextLedgerHistoryProvider({self.provider!r}, source_id={self.source_id!r})"

    @staticmethod
    def _session(session_id: str | None) -> str:
        if not isinstance(session_id, str) or not session_id:
            raise HistoryError(
                f"a stored history needs the MAF session's id, got {session_id!r}; run the agent with a session "
                "(agent.create_session())"
            )
        return session_id

    async def _synced(self, key: str) -> KeptHistory:
        kept = await synced_history(self.provider, key, self._kept.get(key))
        self._kept[key] = kept
        self._kept.move_to_end(key)
        while len(self._kept) > _KEPT:
            self._kept.popitem(last=False)
        return kept

    async def get_messages(
        self, session_id: str | None, *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[maf.Message]:
        kept = await self._synced(self._session(session_id))
        return to_maf_messages(kept.messages)

    async def after_run(
        self,
        *,
        agent: maf.SupportsAgentRun,
        session: maf.AgentSession,
        context: maf.SessionContext,
        state: dict[str, Any],
    ) -> None:
        """MAF's own choice of what to store, saved as one turn (see :meth:`save_messages`)."""
        turn_id = context.metadata.get(TURN_ID_KEY)
        if not isinstance(turn_id, str):
            turn_id = uuid.uuid4().hex
        token = _saving.set((list(context.input_messages), turn_id))
        try:
            await super().after_run(agent=agent, session=session, context=context, state=state)
        finally:
            _saving.reset(token)

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[maf.Message],
        *,
        state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Store ``messages`` as one turn: the run's input messages (and whatever MAF stores before
        them) as its inputs, the rest as its reply.  Called outside a run, the first message is the
        input and the turn id is a new one."""
        key = self._session(session_id)
        saving = _saving.get()
        inputs_given, turn_id = saving if saving is not None else ([], uuid.uuid4().hex)
        ends = [position for position, message in enumerate(messages) if any(message is m for m in inputs_given)]
        split = ends[-1] + 1 if ends else 1
        inputs = [_without_view_annotations(message) for message in from_maf_messages(messages[:split])]
        reply = [_without_view_annotations(message) for message in from_maf_messages(messages[split:])]
        if inputs or reply:
            await self.save_turn(key, turn_id, inputs or reply[:1], reply if inputs else reply[1:])

    async def save_turn(
        self, session_id: str, turn_id: str, inputs: Sequence[Message], reply: Sequence[Message]
    ) -> TurnOutcome:
        """Store one turn under ``turn_id``, at most once, with the reducer's rewrite in the same step.

        ``stored`` False in the outcome: the id was stored already, nothing was written, and
        ``earlier`` is the turn stored under it.
        """
        key = self._session(session_id)
        turn = Turn(key, check_turn_id(turn_id), tuple(inputs), tuple(reply))
        kept = await self._synced(key)
        try:
            if self._reduced is not None:
                return await self._reduced.write(turn, kept)
            return await write_turn(turn, [TurnTarget(self.provider, kept)])
        except BaseException:
            self._kept.pop(key, None)  # the next read goes to the store
            raise
