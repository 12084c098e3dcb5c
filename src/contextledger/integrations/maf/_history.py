"""Any contextledger history store behind MAF's history-provider interface."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Final

import agent_framework as maf

from contextledger import compaction
from contextledger.compaction import compact_with_report
from contextledger.exceptions import ConfigurationError, HistoryError
from contextledger.history import HistoryProvider
from contextledger.integrations.maf._clients import _as_tokenizer
from contextledger.integrations.maf._compaction import AgentFrameworkStrategy, _unwrap
from contextledger.integrations.maf._messages import _EXCLUDE_REASON, _EXCLUDED, from_maf_messages, to_maf_messages
from contextledger.messages import (
    Message,
)

_VIEW_ANNOTATIONS: Final = frozenset({"_group", _EXCLUDED, _EXCLUDE_REASON})


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

    async def get_messages(
        self, session_id: str | None, *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[maf.Message]:
        stored = await self.provider.load(self._session(session_id))
        return to_maf_messages(stored)

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[maf.Message],
        *,
        state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        key = self._session(session_id)
        converted = [_without_view_annotations(message) for message in from_maf_messages(messages)]
        if converted:
            await self.provider.append(key, converted)
        if self.reducer is not None:
            stored = await self.provider.load(key)
            result = await compact_with_report(stored, strategy=self.reducer, tokenizer=self.tokenizer)
            projection = result.messages
            if len(projection) != len(stored) or any(a is not b for a, b in zip(projection, stored)):
                await self.provider.replace(key, projection)
