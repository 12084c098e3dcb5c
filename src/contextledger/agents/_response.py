"""What a run returns: its text, the messages it generated, every model call and the turn's id."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contextledger.clients import ChatResponse, Usage
from contextledger.messages import Message

__all__ = [
    "AgentResponse",
    "ModelCall",
    "sum_usage",
]


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One call to the model inside a run: what the agent sent its client, and what came back.

    A client wrapped with :func:`use_context_providers` rewrites the request once more before
    the model sees it; record at that client to see the final form.
    """

    request: tuple[Message, ...]
    tools: tuple[Mapping[str, Any], ...]
    response: ChatResponse

    @property
    def usage(self) -> Usage | None:
        return self.response.usage


@dataclass(frozen=True, slots=True)
class AgentResponse:
    """What a run produced: the final text, every generated message, and the cost of every model call.

    ``turn_id`` is the run's turn id (the caller's or a generated one).  ``replayed`` is True
    when the turn was already stored and this is the stored reply: no model was called
    (``model_calls`` is empty) and ``text`` is the text of the reply's last assistant message.
    """

    text: str
    messages: tuple[Message, ...]
    model_calls: tuple[ModelCall, ...]
    turn_id: str = ""
    replayed: bool = False

    @property
    def usage(self) -> Usage:
        return sum_usage(call.usage for call in self.model_calls)

    def __str__(self) -> str:
        return self.text


def sum_usage(usages: Any) -> Usage:
    """Add usages up; a count stays unknown (None) if any call did not report it, so it is never understated.

    Cache reads and writes are summed the same way, so a run's usage says how much of its input
    the provider's cache served.
    """
    totals: list[int | None] = [0, 0, 0, 0]
    estimate = False
    for usage in usages:
        if usage is None:
            totals = [None, None, None, None]
            continue
        counts = (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens)
        totals = [None if total is None or count is None else total + count for total, count in zip(totals, counts)]
        estimate = estimate or usage.is_estimate
    inputs, outputs, read, written = totals
    return Usage(inputs, outputs, estimate, cache_read_tokens=read, cache_write_tokens=written)
