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


# The same conversation as other agents send it: the shapes their assistant messages take.
SHAPES = ("plain", "text_and_call", "parallel_calls", "reasoning")


def shaped(count: int, shape: str) -> list[dict[str, Any]]:
    """:func:`messages` with every turn in ``shape``: ``text_and_call`` (a sentence before each
    call, as many models write), ``parallel_calls`` (each call message asks two tools, then both
    results), ``reasoning`` (``reasoning_content`` on every assistant message).  Parallel calls add
    a message a turn, so that shape has fewer turns for the same count."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; choose one of {', '.join(SHAPES)}")
    if shape == "parallel_calls":
        out = []
        for message in messages((count - 1) // 5 * 4 + 1):
            out.append(message)
            if message["role"] == "tool":  # the first result: ask a second tool beside the first
                call = out[-2]["tool_calls"]
                call.append(dict(call[0], id=f"{call[0]['id']}b"))
                out.append({"role": "tool", "tool_call_id": call[1]["id"], "content": message["content"][::-1]})
        return out
    out = messages(count)
    for message in out:
        if message["role"] != "assistant":
            continue
        if shape == "text_and_call" and message.get("tool_calls"):
            message["content"] = "Let me look that up."
        elif shape == "reasoning":
            message["reasoning_content"] = "The user asks for a price and stock; the tool result answers both."
    return out
