"""The narrow interface between contextledger and a chat model.

Anything with an async ``get_response(messages)`` that returns a
:class:`ChatResponse` is a chat client: a real endpoint, the built-in offline
model, or a scripted stand-in.  Usage counts are each optional because many
providers report none; ``None`` is shown as ``unknown`` and never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from contextledger.messages import Message

__all__ = ["ChatClient", "ChatResponse", "Usage"]


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens a call cost, as the provider reported them; ``None`` means not reported."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    is_estimate: bool = False

    @property
    def total_tokens(self) -> int | None:
        if self.input_tokens is None or self.output_tokens is None:
            return None
        return self.input_tokens + self.output_tokens

    def describe(self) -> str:
        def show(value: int | None) -> str:
            return "unknown" if value is None else str(value)

        label = " (estimate)" if self.is_estimate else ""
        return f"in={show(self.input_tokens)} out={show(self.output_tokens)}{label}"


@dataclass(frozen=True, slots=True)
class ChatResponse:
    """A model's reply: its text, the messages it produced, and what it cost (if known)."""

    text: str
    messages: tuple[Message, ...] = ()
    usage: Usage | None = None


@runtime_checkable
class ChatClient(Protocol):
    """An async chat model.

    ``tools`` are OpenAI-style tool definitions the model may call; ``options``
    are per-call settings a client may honour (``max_chars`` for a summary,
    ``temperature``...) and must ignore when it does not know them.
    """

    async def get_response(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None, **options: Any
    ) -> ChatResponse: ...
