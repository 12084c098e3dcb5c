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
    """Tokens a call cost, as the provider reported them; ``None`` means not reported.

    ``input_tokens`` is every input token sent, whatever the provider's spelling (Anthropic's
    ``input_tokens`` leaves cached tokens out; here they are added back), so input counts from
    different vendors add up.  Of those, ``cache_read_tokens`` were read from the provider's
    prompt cache and ``cache_write_tokens`` written to it (billed at the provider's cache prices);
    :attr:`uncached_input_tokens` is the rest.

    A provider that compacts the conversation on its own servers may run extra sampling for it.
    ``compactions`` is how many compaction passes the call reported (``None``: it said nothing of
    any).  ``compaction`` is their usage when the provider reports it apart from the counts above
    and bills it on top of them: Anthropic's ``usage.iterations`` lists each sampling iteration
    (``{"type": "compaction" | "message", "input_tokens", "output_tokens",
    "cache_read_input_tokens", "cache_creation_input_tokens"}``), and its top-level counts leave
    the ``compaction`` iterations out, so those are summed here.  OpenAI reports no separate
    figures: a ``/responses/compact`` answer's ``usage`` is the compaction pass itself, and a
    ``context_management`` compaction inside ``/responses`` is part of the response's own counts;
    there ``compaction`` stays ``None`` and ``compactions`` counts the compaction items returned.
    :attr:`billed_input_tokens` and :attr:`billed_output_tokens` add both up.
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    is_estimate: bool = False
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    compactions: int | None = None
    compaction: Usage | None = None

    @property
    def total_tokens(self) -> int | None:
        if self.input_tokens is None or self.output_tokens is None:
            return None
        return self.input_tokens + self.output_tokens

    @property
    def uncached_input_tokens(self) -> int | None:
        """Input tokens not read from the cache (written ones included); unknown unless both counts are."""
        if self.input_tokens is None or self.cache_read_tokens is None:
            return None
        return self.input_tokens - self.cache_read_tokens

    @property
    def billed_input_tokens(self) -> int | None:
        """Every input token billed: :attr:`input_tokens` plus the provider compaction's own."""
        return _plus(self.input_tokens, None if self.compaction is None else self.compaction.input_tokens)

    @property
    def billed_output_tokens(self) -> int | None:
        """Every output token billed: :attr:`output_tokens` plus the provider compaction's own."""
        return _plus(self.output_tokens, None if self.compaction is None else self.compaction.output_tokens)

    def describe(self) -> str:
        def show(value: int | None) -> str:
            return "unknown" if value is None else str(value)

        label = " (estimate)" if self.is_estimate else ""
        cache = ""
        if self.cache_read_tokens is not None or self.cache_write_tokens is not None:
            cache = f" cache_read={show(self.cache_read_tokens)} cache_write={show(self.cache_write_tokens)}"
        compaction = ""
        if self.compactions is not None or self.compaction is not None:
            compaction = f" compactions={show(self.compactions)}"
            if self.compaction is not None:
                compaction += f" compaction_in={show(self.compaction.input_tokens)}"
                compaction += f" compaction_out={show(self.compaction.output_tokens)}"
        return f"in={show(self.input_tokens)} out={show(self.output_tokens)}{cache}{compaction}{label}"


def _plus(main: int | None, extra: int | None) -> int | None:
    """A count plus an optional extra part of it (an unknown main count stays unknown)."""
    if main is None:
        return None
    return main + (extra or 0)


@dataclass(frozen=True, slots=True)
class ChatResponse:
    """A model's reply: its text, the messages it produced, and what it cost (if known).

    ``model``, ``response_id`` and ``finish_reasons`` are what the provider said of its answer
    (the model that actually answered, which may differ from the one asked for; the answer's id;
    why it stopped), left empty when it said nothing; traces report them.
    """

    text: str
    messages: tuple[Message, ...] = ()
    usage: Usage | None = None
    model: str | None = None
    response_id: str | None = None
    finish_reasons: tuple[str, ...] = ()


@runtime_checkable
class ChatClient(Protocol):
    """An async chat model.

    ``tools`` are OpenAI-style tool definitions the model may call; ``options``
    are per-call settings a client may honour (``max_chars`` for a summary,
    ``temperature``...) and must ignore when it does not know them.  A client
    may name its provider for traces with a ``provider_name`` attribute (a
    GenAI semantic conventions value such as ``"openai"``) and its model with
    ``model``.
    """

    async def get_response(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None, **options: Any
    ) -> ChatResponse: ...
