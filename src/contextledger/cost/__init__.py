"""Cost as users pay it: price profiles and an estimate of the provider's prefix cache.

>>> from contextledger.cost import PrefixCacheSimulator, request_blocks

Where things live (the public names, those in ``__all__``, are imported from here,
``contextledger.cost``; the other names below are plumbing the library's packages share, each listed
in its own module's ``__all__``):

- ``_profiles.py``: :class:`PriceProfile` (prices, cache-read and cache-write multipliers, the
  least cacheable prefix, the step in which hits are counted, the cache lifetime, where the cache
  can hold a prefix) and the built-in profiles :data:`OPENAI`, :data:`GPT_5_6`,
  :data:`ANTHROPIC` and :data:`NO_CACHE`, found by name with :func:`price_profile`;
- ``_simulator.py``: :class:`PrefixCacheSimulator` replays requests in order and prices each
  one (:class:`CallCost`, summed by :class:`CostTotals`); a request is a sequence of
  :class:`Block` (built from messages by :func:`request_blocks`, once per message with a
  :data:`BlockMemo`; :func:`message_block` is one message's block), or as the
  :class:`RequestPrefixes` a replayed request keeps.

Every figure it gives is an estimate of the provider's behaviour; the module docstring of
``_simulator.py`` lists the assumptions.
"""

from typing import TYPE_CHECKING

from contextledger._deprecated import moved_name
from contextledger.cost._profiles import ANTHROPIC, GPT_5_6, NO_CACHE, OPENAI, PriceProfile, price_profile
from contextledger.cost._simulator import (
    Block,
    CallCost,
    CostTotals,
    PrefixCacheSimulator,
    RequestPrefixes,
    request_blocks,
)

__all__ = [
    "ANTHROPIC",
    "GPT_5_6",
    "NO_CACHE",
    "OPENAI",
    "Block",
    "CallCost",
    "CostTotals",
    "PrefixCacheSimulator",
    "PriceProfile",
    "RequestPrefixes",
    "price_profile",
    "request_blocks",
]

if not TYPE_CHECKING:
    # Names that were public here before and are internal now: still importable, with a
    # DeprecationWarning, until 0.6 (the release rule in CHANGELOG.md).
    _MOVED = {
        "BlockMemo": "contextledger.cost._simulator",
        "message_block": "contextledger.cost._simulator",
    }

    def __getattr__(name: str) -> object:
        return moved_name(__name__, name, _MOVED)
