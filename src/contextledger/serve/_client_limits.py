"""How much each client key may ask: requests a minute and requests at once.

The smallest set that keeps one client from starving the others, or spending the upstream's
budget alone.  Budgets in money, SSO and a UI are a gateway's job (docs/guides/proxy.md).  Each key has a token
bucket holding ``per_minute`` requests and refilling at ``per_minute`` a minute (a burst of the
whole minute's worth, then a steady pace), and a count of its requests under way.  A request past
either is refused with the whole seconds after which one more would be admitted.

Counted in this process: each replica behind a load balancer counts its own.  Memory is one small
record per key in the file; a key taken out of it is forgotten at the reload.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from contextledger.exceptions import ConfigurationError

__all__ = ["ClientLimits", "Limited"]


@dataclass(frozen=True, slots=True)
class Limited:
    """Why a request was refused (``rate`` or ``concurrency``), and after how many whole seconds
    to try again (``Retry-After``)."""

    limit: Literal["rate", "concurrency"]
    retry_after: int


class _Allowance:
    """One key's bucket and requests under way."""

    __slots__ = ("running", "tokens", "updated")

    def __init__(self, tokens: float, updated: float) -> None:
        self.tokens = tokens
        self.updated = updated
        self.running = 0


class ClientLimits:
    """Per-key limits; ``None`` leaves a limit off.  Called from the event loop only (nothing in
    :meth:`admit` or :meth:`release` awaits, so no lock is needed)."""

    def __init__(
        self, per_minute: int | None, at_once: int | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        for name, value in (("client_rpm", per_minute), ("client_concurrency", at_once)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigurationError(f"{name} must be a whole number of requests, 1 or more, got {value!r}")
        self.per_minute = per_minute
        self.at_once = at_once
        self._clock = clock
        self._allowances: dict[bytes, _Allowance] = {}

    def admit(self, key: bytes) -> Limited | None:
        """``None`` when the request may go (and is then counted as under way until
        :meth:`release`), or why it may not."""
        now = self._clock()
        allowance = self._allowances.get(key)
        if allowance is None:
            allowance = self._allowances[key] = _Allowance(float(self.per_minute or 0), now)
        if self.at_once is not None and allowance.running >= self.at_once:
            return Limited("concurrency", 1)  # a request under way usually ends within seconds
        if self.per_minute is not None:
            rate = self.per_minute / 60.0
            allowance.tokens = min(float(self.per_minute), allowance.tokens + (now - allowance.updated) * rate)
            allowance.updated = now
            if allowance.tokens < 1.0:
                return Limited("rate", max(1, math.ceil((1.0 - allowance.tokens) / rate)))
            allowance.tokens -= 1.0
        allowance.running += 1
        return None

    def release(self, key: bytes) -> None:
        """A request :meth:`admit` let through has ended (its answer, streamed or not, is sent)."""
        allowance = self._allowances.get(key)
        if allowance is not None and allowance.running > 0:
            allowance.running -= 1

    def keep_only(self, keys: Iterable[bytes]) -> None:
        """Forget the keys no longer in the file (their requests under way end uncounted)."""
        kept = set(keys)
        self._allowances = {key: value for key, value in self._allowances.items() if key in kept}

    def under_way(self, key: bytes) -> int:
        allowance = self._allowances.get(key)
        return 0 if allowance is None else allowance.running
