"""The narrow interface to a provider that compacts a conversation on its own servers.

OpenAI (``POST /responses/compact``) and Anthropic (the ``compact_20260112`` context edit) both
take a conversation and hand back an item that stands for it: OpenAI's opaque
``{"type": "compaction", "encrypted_content": ...}`` output item, Anthropic's
``{"type": "compaction", "content": ...}`` content block.  A :class:`ProviderCompactor` is
anything with an async ``compact(messages)`` returning a :class:`ProviderCompaction`: the
messages the provider returned (as they came, byte for byte) and what the pass cost.

:class:`OfflineCompactor` plays a provider's compactor with any chat client (by default the
offline model), so the lab and offline tests can put provider compaction beside the library's own
strategies: it asks its client for a summary and returns it as Anthropic's block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

from contextledger.clients._protocol import ChatClient, Usage
from contextledger.exceptions import ConfigurationError, ModelResponseError
from contextledger.messages import (
    FunctionCallContent,
    FunctionResultContent,
    Message,
    OpaqueContent,
    TextContent,
    from_anthropic,
)

__all__ = ["OFFLINE_COMPACTION_PROMPT", "OfflineCompactor", "ProviderCompaction", "ProviderCompactor"]


@dataclass(frozen=True, slots=True)
class ProviderCompaction:
    """What a provider's compaction returned.

    ``messages`` is the window to send in place of the messages compacted, in order, exactly as
    the provider returned it: for Anthropic one assistant message holding the ``compaction``
    block; for OpenAI the ``/responses/compact`` output, which may keep some user messages
    before its ``compaction`` item.  ``usage`` is the pass's own cost, as reported.
    """

    messages: tuple[Message, ...]
    usage: Usage | None = None
    model: str | None = None
    response_id: str | None = None


@runtime_checkable
class ProviderCompactor(Protocol):
    """A provider that compacts a conversation and returns its own compaction item.

    ``opening_stays`` says whether the provider's API requires a conversation to open with a user
    message even when a compaction item follows it (Anthropic's does, and its documentation does
    not say a compaction block may open one): a strategy then keeps the conversation's opening
    user message in front of the item, though the provider reads the item in its place.
    ``instructions`` replaces the provider's own summarisation prompt where the API takes one.
    """

    opening_stays: bool

    async def compact(self, messages: Sequence[Message], *, instructions: str | None = None) -> ProviderCompaction: ...


OFFLINE_COMPACTION_PROMPT = (
    "You summarise the earlier part of a conversation so that it can continue from your summary "
    "alone. Keep every key=value fact with its latest value and every rule or prohibition word for word."
)


def _transcript(messages: Sequence[Message]) -> str:
    """The messages as plain text, an earlier compaction's summary included (the provider reads it)."""
    lines: list[str] = []
    for message in messages:
        for content in message.contents:
            if isinstance(content, TextContent) and content.text:
                lines.append(f"{message.role}: {content.text}")
            elif isinstance(content, FunctionCallContent):
                lines.append(f"assistant called {content.name}({content.arguments})")
            elif isinstance(content, FunctionResultContent):
                lines.append(f"tool result: {content.result}")
            elif isinstance(content, OpaqueContent) and content.data.get("type") == "compaction":
                summary = content.data.get("content")
                if isinstance(summary, str):
                    lines.append(f"(earlier compaction) {summary}")
    return "\n".join(lines)


class OfflineCompactor:
    """A provider's compactor played by a chat client: the summary it writes comes back as
    Anthropic's ``compaction`` block in an assistant message, the shape a real provider returns.

    ``client`` writes the summary (the offline model when the lab runs offline; the lab passes it
    behind a recorder so the pass is counted as an extra call).  Its reply's usage is the
    compaction's.  A reply with no text raises :class:`ModelResponseError`, as a provider that
    returned no item would fail.  ``opening_stays`` is Anthropic's rule by default (see
    :class:`ProviderCompactor`); the lab turns it off, because the offline model, unlike
    Anthropic's, would read the opening message kept before the block.
    """

    provider_name: ClassVar[str] = "contextledger"

    def __init__(
        self, client: ChatClient | None = None, *, prompt: str = OFFLINE_COMPACTION_PROMPT, opening_stays: bool = True
    ) -> None:
        if client is None:
            from contextledger.clients._offline import OfflineModel  # noqa: PLC0415

            client = OfflineModel()
        if not callable(getattr(client, "get_response", None)):
            raise ConfigurationError(
                f"OfflineCompactor needs a chat client with get_response(messages), got {client!r}"
            )
        if not isinstance(prompt, str) or not prompt.strip():
            raise ConfigurationError(f"OfflineCompactor prompt must be non-empty text, got {prompt!r}")
        if not isinstance(opening_stays, bool):
            raise ConfigurationError(f"OfflineCompactor opening_stays must be True or False, got {opening_stays!r}")
        self.client = client
        self.prompt = prompt
        self.opening_stays = opening_stays

    def __repr__(self) -> str:
        return f"OfflineCompactor({self.client!r})"

    async def compact(self, messages: Sequence[Message], *, instructions: str | None = None) -> ProviderCompaction:
        request = [Message.system(instructions or self.prompt), Message.user(_transcript(messages))]
        response = await self.client.get_response(request)
        text = response.text.strip() if isinstance(response.text, str) else ""
        if not text:
            raise ModelResponseError(f"{self.client!r} wrote no summary, so no compaction block was made")
        block = {"type": "compaction", "content": text}
        (message,) = from_anthropic([{"role": "assistant", "content": [block]}])
        return ProviderCompaction((message,), response.usage, response.model, response.response_id)
