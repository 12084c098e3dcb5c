"""One scripted conversation for every framework adapter: the seed's facts sequence, then 32 turns
of tool calls (parallel ones on even turns), then a question; and the model that answers it.

The model computes each reply from the request alone (a server on 127.0.0.1 calls it), so the
same script runs on LangChain, LangGraph and the OpenAI Agents SDK, each speaking its own wire
format; what each request must satisfy is checked by the tests from what the server recorded.
"""

from __future__ import annotations

import re

from contextledger.compaction import (
    CompactionStrategy,
    PipelineStrategy,
    SlidingWindowStrategy,
    ToolResultCompactionStrategy,
    turns_exceed,
)

FIRST = "module=Reporting; database=PostgreSQL"
SECOND = "module=Billing; database=SQL Server 2022"
QUESTION = "Which module and database do we use now?"
TOOL_TURNS = 32
WINDOW_TURNS = 4
INSTRUCTIONS = "You are the support desk's assistant."


def lookup_request(number: int) -> str:
    return f"Please lookup order {number}."


def script() -> list[str]:
    """The user's turns: the declaration, its correction, the tool turns, the question."""
    return [FIRST, SECOND, *(lookup_request(number) for number in range(TOOL_TURNS)), QUESTION]


def strategy() -> CompactionStrategy:
    """Collapse old tool results, then keep the last four user turns."""
    return PipelineStrategy(
        ToolResultCompactionStrategy(keep_last_tool_call_groups=1),
        SlidingWindowStrategy(trigger=turns_exceed(WINDOW_TURNS)),
    )


def order_number(text: str) -> int | None:
    found = re.search(r"lookup order (\d+)", text)
    return int(found.group(1)) if found else None


def calls_for(number: int) -> list[tuple[str, str, dict[str, int]]]:
    """The tool calls the model makes for an order: two in parallel on even orders, one on odd ones."""
    calls = [(f"call-{number}-order", "lookup_order", {"order": number})]
    if number % 2 == 0:
        calls.append((f"call-{number}-status", "lookup_status", {"order": number}))
    return calls


def lookup_order(order: int) -> str:
    """Look up an order's contents."""
    return f"order {order}: 3 items, " + "x" * 300


def lookup_status(order: int) -> str:
    """Look up an order's shipping status."""
    return f"order {order} shipped"


def answer_after_tools(results: list[str]) -> str:
    return "Done: " + "; ".join(result[:40] for result in results)
