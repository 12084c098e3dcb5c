"""What a provider charges, and how its prompt cache behaves, as one value a cost estimate reads.

Tokens sent are not what a user pays for: providers keep the prefix of a request in a cache for a
few minutes and bill what they read from it at a fraction of the input price.  A profile holds the
few numbers that decide a bill under that rule, so the lab, the benchmarks and the proxy all price
the same request the same way, and a user can state their own provider's terms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from contextledger.exceptions import ConfigurationError

__all__ = ["ANTHROPIC", "GPT_5_6", "NO_CACHE", "OPENAI", "PriceProfile", "price_profile"]

CacheMode = Literal["automatic", "breakpoints", "none"]


@dataclass(frozen=True, slots=True)
class PriceProfile:
    """A provider's prices and prompt-cache rules, in units the caller chooses.

    Prices are per input or output token (the built-in profiles use 1.0 for an uncached input
    token, so a cost reads as "uncached input tokens' worth").  ``cache_read_multiplier`` and
    ``cache_write_multiplier`` scale the input price for tokens read from and written to the
    cache.  ``cache_mode`` says where the cache can hold a prefix: ``"automatic"`` (every
    request's prefix is cached, OpenAI's rule), ``"breakpoints"`` (only prefixes ending at a
    breakpoint the request marks, at most ``max_breakpoints``, looked up at most
    ``lookback_blocks`` blocks back from each: Anthropic's rule) or ``"none"``.
    ``min_cacheable_tokens`` is the shortest prefix the cache keeps, ``step_tokens`` the
    granularity in which a hit is counted, and ``lifetime_seconds`` how long an entry lives after
    its last use (``None``: for ever).  ``managed_breakpoint`` (``breakpoints`` mode only): the
    provider places a breakpoint of its own at the end of every request, beside the ones the
    request marks, and it counts among the ``max_breakpoints`` cache writes a request may make.
    """

    name: str
    input_price: float = 1.0
    output_price: float = 4.0
    cache_read_multiplier: float = 0.1
    cache_write_multiplier: float = 1.0
    cache_mode: CacheMode = "automatic"
    min_cacheable_tokens: int = 1024
    step_tokens: int = 128
    lifetime_seconds: float | None = 300.0
    max_breakpoints: int = 4
    lookback_blocks: int | None = 20
    managed_breakpoint: bool = False

    def __post_init__(self) -> None:
        for field_name in ("input_price", "output_price", "cache_read_multiplier", "cache_write_multiplier"):
            value = getattr(self, field_name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
                raise ConfigurationError(
                    f"PriceProfile {self.name!r}: {field_name} must be a finite number >= 0, got {value!r}"
                )
        if self.cache_mode not in ("automatic", "breakpoints", "none"):
            raise ConfigurationError(
                f"PriceProfile {self.name!r}: cache_mode must be 'automatic', 'breakpoints' or 'none', "
                f"got {self.cache_mode!r}"
            )
        for field_name in ("min_cacheable_tokens", "step_tokens", "max_breakpoints"):
            value = getattr(self, field_name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigurationError(f"PriceProfile {self.name!r}: {field_name} must be an int >= 1, got {value!r}")
        lookback = self.lookback_blocks
        if lookback is not None and (not isinstance(lookback, int) or isinstance(lookback, bool) or lookback < 0):
            raise ConfigurationError(
                f"PriceProfile {self.name!r}: lookback_blocks must be an int >= 0 or None, got {self.lookback_blocks!r}"
            )
        managed = self.managed_breakpoint
        if not isinstance(managed, bool) or (managed and self.cache_mode != "breakpoints"):
            raise ConfigurationError(
                f"PriceProfile {self.name!r}: managed_breakpoint is True or False, and True only with "
                f"cache_mode='breakpoints' (the provider's own breakpoint beside the request's), got "
                f"{self.managed_breakpoint!r} with cache_mode={self.cache_mode!r}"
            )
        if self.lifetime_seconds is not None and (
            not isinstance(self.lifetime_seconds, (int, float))
            or isinstance(self.lifetime_seconds, bool)
            or not self.lifetime_seconds > 0
        ):
            raise ConfigurationError(
                f"PriceProfile {self.name!r}: lifetime_seconds must be > 0 or None, got {self.lifetime_seconds!r}"
            )


#: OpenAI's automatic prompt caching before the GPT-5.6 family: any prefix of 1,024 tokens or
#: more, hits in 128-token steps, cached input at a tenth of the price (the discount varies by
#: model), nothing extra for writes.
OPENAI = PriceProfile("openai")

#: Anthropic's explicit caching: prefixes ending at a ``cache_control`` breakpoint (at most four,
#: a hit found up to 20 blocks back), reads at 0.1x the input price, writes at 1.25x (the
#: five-minute lifetime, refreshed on use).  Hits are counted to the token, not in steps.
#: Output at 5x the input price (4x in the OpenAI profile), as their current models are priced.
ANTHROPIC = PriceProfile(
    "anthropic",
    output_price=5.0,
    cache_read_multiplier=0.1,
    cache_write_multiplier=1.25,
    cache_mode="breakpoints",
    step_tokens=1,
)

#: OpenAI's rules from the GPT-5.6 family on.  The provider keeps one breakpoint of its own near
#: the newest user or tool message (here: the end of the request, where an agent's requests end),
#: and a request may mark more with ``prompt_cache_breakpoint`` on the content blocks of system,
#: user and tool messages; together they are at most four cache writes.  An entry is read only
#: where a breakpoint wrote it, whole, with no 128-token rounding and no limit on how far back it
#: lies, so a stable prefix followed by a message that changes is read only when a breakpoint sits
#: at its end.  Writing costs 1.25x the uncached input price, reading 0.1x; entries live at least
#: 30 minutes.  Output is priced as in the ``openai`` profile, so the two compare directly.  The
#: ``openai`` profile stays right for the models before this family (free writes, any prefix).
GPT_5_6 = PriceProfile(
    "gpt-5.6",
    cache_read_multiplier=0.1,
    cache_write_multiplier=1.25,
    cache_mode="breakpoints",
    step_tokens=1,
    lifetime_seconds=1800.0,
    lookback_blocks=None,
    managed_breakpoint=True,
)

#: No cache: every input token at full price (what figures of tokens sent assume).
NO_CACHE = PriceProfile("none", cache_mode="none", cache_read_multiplier=1.0)

_BUILT_IN = {profile.name: profile for profile in (OPENAI, GPT_5_6, ANTHROPIC, NO_CACHE)}


def price_profile(name: str | PriceProfile) -> PriceProfile:
    """The built-in profile called ``name`` (``openai``, ``gpt-5.6``, ``anthropic``, ``none``), or ``name`` itself."""
    if isinstance(name, PriceProfile):
        return name
    try:
        return _BUILT_IN[name]
    except (KeyError, TypeError):
        known = ", ".join(sorted(_BUILT_IN))
        raise ConfigurationError(
            f"unknown price profile {name!r}: use one of {known}, or build a PriceProfile with your provider's terms"
        ) from None
