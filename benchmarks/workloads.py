"""Synthetic conversations for the benchmarks, as OpenAI-format dicts.

A system message, then turns of: user text, an assistant tool call, its 1–2 KB
tool result, and assistant text.  Four messages a turn, so ``messages(10_001)``
is the system message and 2,500 turns.  Generated from a fixed seed, so every
run and every implementation measures the same bytes.
"""

from __future__ import annotations

import json
import random
from typing import Any

TOOLS = ("lookup_price", "search_docs", "get_weather", "query_orders")


def turn(number: int, rng: random.Random) -> list[dict[str, Any]]:
    """The four OpenAI dicts of one turn (``number`` starts at 1)."""
    tool = TOOLS[number % len(TOOLS)]
    call_id = f"call_{number:07d}"
    size = rng.randint(1024, 2048)
    rows: list[str] = []
    while sum(len(r) for r in rows) < size:
        rows.append(f"item-{rng.randint(0, 99_999)}: price {rng.randint(1, 9_999)}.{rng.randint(0, 99):02d} EUR; ")
    result = json.dumps({"turn": number, "rows": rows})[:size]
    return [
        {"role": "user", "content": f"Turn {number}: what does item {number} cost, and is it in stock?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": tool, "arguments": json.dumps({"item": number})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": result},
        {"role": "assistant", "content": f"Item {number} costs what the {tool} result says; it is in stock."},
    ]


def messages(count: int, seed: int = 7) -> list[dict[str, Any]]:
    """A conversation of ``count`` messages (rounded down to whole turns, plus the system message)."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful shopping assistant."}]
    number = 0
    while len(out) + 4 <= count:
        number += 1
        out.extend(turn(number, rng))
    return out
