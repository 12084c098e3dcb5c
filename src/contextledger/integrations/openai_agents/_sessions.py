"""The Agents SDK's ``Session`` over any contextledger history, plain or answering with the request view."""

from __future__ import annotations

import dataclasses
from typing import Any

from contextledger.compaction import CompactionStrategy, compact_with_report
from contextledger.exceptions import ConfigurationError
from contextledger.history import HistoryProvider
from contextledger.messages import Message, from_responses, to_responses
from contextledger.messages._responses import item_dict, kept_as_given
from contextledger.tokenizers import Tokenizer

__all__ = ["CompactingSession", "ContextLedgerSession"]

Item = dict[str, Any]


class ContextLedgerSession:
    """The Agents SDK's ``Session`` over a contextledger history (in memory, SQLite or Redis).

    ``Runner.run(agent, input, session=ContextLedgerSession(SQLiteHistoryProvider(path), "user-1"))``:
    items are stored as contextledger messages (so the same history serves a contextledger
    agent, the drift lab or the CLI) and come back as the same items.  Each ``add_items`` is
    stored whole or not at all, as the history promises.
    """

    session_settings: Any = None

    def __init__(self, history: HistoryProvider, session_id: str) -> None:
        if not isinstance(history, HistoryProvider):
            raise ConfigurationError(f"history must be a contextledger history provider, got {history!r}")
        if not isinstance(session_id, str) or not session_id:
            raise ConfigurationError(f"session_id must be a non-empty string, got {session_id!r}")
        self.history = history
        self.session_id = session_id

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.history!r}, {self.session_id!r})"

    async def messages(self) -> list[Message]:
        """Every stored message: the full history, whatever a compacting session sends."""
        return await self.history.load(self.session_id)

    async def all_items(self) -> list[Item]:
        """Every stored item, in order."""
        return to_responses(await self.messages())

    async def get_items(self, limit: int | None = None) -> list[Item]:
        items = await self.all_items()
        return items if limit is None else items[-limit:] if limit > 0 else []

    async def add_items(self, items: list[Any]) -> None:
        if items:
            await self.history.append(self.session_id, from_responses([item_dict(item) for item in items]))

    async def pop_item(self) -> Item | None:
        items = await self.all_items()
        if not items:
            return None
        await self.history.replace(self.session_id, from_responses(items[:-1]))
        return items[-1]

    async def clear_session(self) -> None:
        await self.history.clear(self.session_id)


class CompactingSession(ContextLedgerSession):
    """A session whose ``get_items()`` is the request view: what ``strategy`` would send.

    The store keeps every item (:meth:`all_items`); only what the Runner reads to build the
    model's input is compacted, so a call is never separated from its outputs and a reasoning
    item never from the item it precedes.  ``get_items(limit)`` with a limit returns the newest
    stored items as they are: the SDK reads a limited tail to check its own writes, and a run
    under ``SessionSettings(limit=N)`` reads its history so.

    The session is read once per run; the items a long tool loop adds inside the run reach the
    model through the SDK's per-call hook instead: pass
    ``RunConfig(call_model_input_filter=session.input_filter)`` and every model call of the run
    is compacted with the same strategy (a limited read included), while the session still
    stores every item whole.
    """

    def __init__(
        self,
        history: HistoryProvider,
        session_id: str,
        strategy: CompactionStrategy,
        *,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        super().__init__(history, session_id)
        if not isinstance(strategy, CompactionStrategy):
            raise ConfigurationError(f"strategy must be a contextledger CompactionStrategy, got {strategy!r}")
        self.strategy = strategy
        self.tokenizer = tokenizer

    async def get_items(self, limit: int | None = None) -> list[Item]:
        if limit is not None:
            return await super().get_items(limit)
        result = await compact_with_report(await self.messages(), strategy=self.strategy, tokenizer=self.tokenizer)
        return to_responses(result.messages)

    async def input_filter(self, data: Any) -> Any:
        """``RunConfig.call_model_input_filter``: the model's input for this call, compacted.

        Items that pass unchanged are handed back as the very objects the SDK gave (it tracks
        them by identity to know what a call consumed); only summaries the strategy wrote are new.
        """
        model_data = data.model_data
        given = list(model_data.input)
        items = [item_dict(item) for item in given]
        result = await compact_with_report(from_responses(items), strategy=self.strategy, tokenizer=self.tokenizer)
        if not result.events:
            return model_data
        return dataclasses.replace(model_data, input=kept_as_given(to_responses(result.messages), items, given))
