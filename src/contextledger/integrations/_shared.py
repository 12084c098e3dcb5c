"""The kit every adapter shares, so the adapters differ only in their framework's shapes.

- :func:`plain`: contextledger's frozen metadata back as the plain dicts and lists a
  framework's own messages hold (one helper, not one per adapter);
- :func:`run_sync`: a coroutine run from a framework's synchronous hook;
- :class:`HostedFacts`: the facts side of an adapter, one
  :class:`~contextledger.facts.FactsHost` (the writer on the store's own schema, the same
  turn and diagnostics as every other host) and ``forget`` through history targets;
- :func:`converted_history`: a framework's stored messages as a history ``forget`` rewrites.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from contextledger.exceptions import FactsError
from contextledger.facts import Admission, FactsHost, FactsTurn, FactWriter, ForgetReport, forget_facts
from contextledger.facts._forget import HistoryTarget
from contextledger.facts._store import FactMemory
from contextledger.messages import Message
from contextledger.messages._contents import thawed as plain

__all__ = ["HostedFacts", "converted_history", "plain", "run_sync"]

_T = TypeVar("_T")
_Native = TypeVar("_Native")


def run_sync(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine from synchronous code, also when that code is called inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def converted_history(
    name: str,
    read: Callable[[], Awaitable[Sequence[_Native]]],
    write: Callable[[list[_Native]], Awaitable[None]],
    decode: Callable[[Sequence[_Native]], list[Message]],
    encode: Callable[[list[Message]], list[_Native]],
) -> HistoryTarget:
    """A history held in a framework's own shapes, as ``forget`` reads and rewrites it:
    ``read``/``write`` reach the framework's store, ``decode``/``encode`` convert."""

    async def load() -> list[Message]:
        return decode(await read())

    async def replace(messages: list[Message]) -> None:
        await write(encode(messages))

    return HistoryTarget(name, load, replace)


class HostedFacts:
    """The facts side every adapter shares; the adapter's ``__init__`` calls :meth:`_host_facts`.

    The turn itself (the ticket, the extraction, the diagnostics, the default writer on the
    store's own schema) is the one :class:`~contextledger.facts.FactsHost`; this adds what a
    user reads on every adapter: ``store``, ``writer``, ``last_turn`` and its two halves.
    """

    _facts: FactsHost

    def _host_facts(self, store: FactMemory, writer: FactWriter | None, *, host: str) -> None:
        self._facts = FactsHost(store, writer, host=host)

    @property
    def store(self) -> FactMemory:
        return self._facts.store

    @property
    def writer(self) -> FactWriter:
        return self._facts.writer

    @property
    def last_turn(self) -> FactsTurn | None:
        """The outcome of the latest run that finished (its admission or refusal and its diagnostics)."""
        return self._facts.last_turn

    @property
    def last_admission(self) -> Admission | None:
        turn = self._facts.last_turn
        return None if turn is None else turn.admission

    @property
    def last_rejection(self) -> FactsError | None:
        turn = self._facts.last_turn
        return None if turn is None else turn.rejection

    async def _forget(self, key: str | None, targets: Sequence[HistoryTarget]) -> ForgetReport:
        """:func:`~contextledger.facts.forget_facts` on the store and ``targets``."""
        return await forget_facts(self._facts.store, key, histories=targets)
