"""The tools test agents call, written once for every test that needs one.

Each answers from its arguments alone, so a test can state the result it expects:
``lookup_price("laptop")`` is ``"laptop costs 6 euros"``, and ``lookup_stock("pen")`` holds
``"stock": 6``.  :class:`PriceList` is the catalogue version, for tests that need to know which
items were asked for, a price of their own, or a long result (something for compaction to
collapse).  A tool's docstring is the description the model is sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any


def lookup_price(item: str) -> str:
    """The price of an item."""
    return f"{item} costs {len(item)} euros"


async def lookup_stock(item: str, warehouse: int = 1) -> dict[str, Any]:
    """How many of an item a warehouse holds, with its stock report."""
    await asyncio.sleep(0)  # a real suspension point: async tools are awaited, not called
    return {"item": item, "warehouse": warehouse, "stock": len(item) * 2, "report": "line " * (len(item) * 3)}


class PriceList:
    """A shop's catalogue as a ``lookup_price`` tool (``PriceList().lookup_price``), recording the
    items it was asked for in ``calls``.

    An item costs what ``prices`` says, else ``default``.  ``detail_chars`` adds about that many
    characters of catalogue detail to every answer.
    """

    def __init__(
        self, prices: Mapping[str, str] | None = None, *, default: str = "999 EUR", detail_chars: int = 0
    ) -> None:
        self.prices = dict(prices or {})
        self.default = default
        self.detail_chars = detail_chars
        self.calls: list[str] = []

    def lookup_price(self, item: str) -> str:
        """Look up the price of an item in the catalogue."""
        self.calls.append(item)
        answer = f"{item}: {self.prices.get(item, self.default)}"
        if self.detail_chars:
            answer += ". " + "catalogue detail " * (self.detail_chars // 17)
        return answer
