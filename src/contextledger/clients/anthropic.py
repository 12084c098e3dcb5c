"""A chat client for Anthropic's Messages API that can also ask Anthropic to compact a conversation.

Built on the official ``anthropic`` SDK (the ``anthropic`` extra), imported only when a client is
built.  Messages go out through :func:`~contextledger.messages.to_anthropic` (leading system
messages become the top-level ``system``) and the reply's content blocks come back through
:func:`~contextledger.messages.from_anthropic`, parsed from the body's text so that each block is
kept exactly as Anthropic sent it.

Anthropic's compaction, as its compaction guide describes it, is a context edit: a request whose
``context_management.edits`` holds ``{"type": "compact_20260112", "trigger": {"type":
"input_tokens", "value": N}, "pause_after_compaction": ..., "instructions": ...}`` (with the beta
header ``anthropic-beta: compact-2026-01-12``) is compacted on the server once its input passes N
tokens (at least 50,000, 150,000 unless set): the model writes a summary, returned as a
``{"type": "compaction", "content": ...}`` block at the start of the assistant's content, and later
requests that send the block back are read from it on, whatever precedes it.  With
``pause_after_compaction`` the reply stops right after the block (``stop_reason: "compaction"``).
The pass is billed on top of the reply: ``usage.iterations`` lists a ``compaction`` entry with its
own counts, which the top-level counts leave out.

- :meth:`AnthropicChatClient.compact` sends the messages with that edit and
  ``pause_after_compaction: true`` and returns the block, or raises when Anthropic answered without
  compacting (most often: the input was below the trigger).  This is what
  :class:`~contextledger.compaction.ProviderCompactionStrategy` calls.
- ``compact_trigger=N`` sets the edit (not paused) on every :meth:`get_response`, so Anthropic
  compacts during ordinary calls and the reply's messages hold the block.

Any request whose messages hold a compaction block is sent with the beta header, since the block
belongs to the beta.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from contextledger._extras import require_extra
from contextledger._tracing import traced_model_call
from contextledger.clients._compactor import ProviderCompaction
from contextledger.clients._protocol import ChatResponse
from contextledger.clients._sdk_client import sdk_client
from contextledger.clients._sdk_errors import excerpt, model_error, parse_object
from contextledger.clients._usage import read_reply_usage
from contextledger.exceptions import ConfigurationError, InvalidMessageError, ModelResponseError
from contextledger.messages import Message, OpaqueContent, from_anthropic, to_anthropic

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic

__all__ = [
    "COMPACTION_BETA",
    "COMPACTION_EDIT",
    "MINIMUM_COMPACT_TRIGGER",
    "AnthropicChatClient",
    "anthropic_tools",
]

COMPACTION_BETA = "compact-2026-01-12"
"""The beta header value Anthropic's compaction needs."""

COMPACTION_EDIT = "compact_20260112"
"""The context edit's ``type``."""

MINIMUM_COMPACT_TRIGGER = 50_000
"""The lowest trigger, in input tokens, Anthropic's compaction guide allows."""

# What Anthropic needs to continue after the compacted messages when they end with its own turn
# (recent models refuse a request that ends with an assistant message).
_CONTINUE = "Continue."


def anthropic_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tool definitions in the Messages API's shape: a chat-completions function tool becomes
    ``{"name", "description", "input_schema"}``; anything else (a server tool, an already converted
    one) is sent as it is."""
    converted: list[dict[str, Any]] = []
    for tool in tools:
        function = tool.get("function")
        if tool.get("type") == "function" and isinstance(function, Mapping):
            entry: dict[str, Any] = {"name": function.get("name")}
            if function.get("description") is not None:
                entry["description"] = function["description"]
            entry["input_schema"] = function.get("parameters") or {"type": "object", "properties": {}}
            converted.append(entry)
        else:
            converted.append(dict(tool))
    return converted


def _holds_compaction(messages: Sequence[Message]) -> bool:
    return any(
        isinstance(content, OpaqueContent) and content.data.get("type") == "compaction"
        for message in messages
        for content in message.contents
    )


def _count(value: object, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(f"AnthropicChatClient {what} must be an int >= {minimum}, got {value!r}")
    return value


class AnthropicChatClient:
    """Calls ``POST /v1/messages`` on Anthropic (or a compatible server).

    ``model``, ``base_url`` and ``api_key`` fall back to ``ANTHROPIC_MODEL``,
    ``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY``.  ``max_tokens`` (required by the API) is sent
    with every request unless the call passes its own.  ``client`` lets the caller supply a
    configured ``anthropic.AsyncAnthropic``.  The SDK retries 429, 5xx, timeouts and connection
    errors ``max_retries`` times; what still fails is raised as one of the library's
    :class:`~contextledger.exceptions.ModelError` subclasses naming the endpoint and the model.

    ``compact_trigger`` turns on Anthropic's compaction during ordinary calls;
    :meth:`compact` asks for one pass now with ``compact_trigger`` or, when unset,
    :data:`MINIMUM_COMPACT_TRIGGER`.  Usage is read as reported, with ``usage.iterations``'
    compaction entries in ``Usage.compaction``.
    """

    provider_name: ClassVar[str] = "anthropic"
    opening_stays: bool = True
    """The Messages API wants a user message first, and its guide does not say a compaction block
    may open a conversation (see :class:`ProviderCompactor`)."""

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_tokens: int = 4096,
        timeout: float = 120.0,
        max_retries: int = 2,
        client: AsyncAnthropic | None = None,
        compact_trigger: int | None = None,
    ) -> None:
        model = model or os.environ.get("ANTHROPIC_MODEL") or None
        if not model:
            raise ConfigurationError(
                "AnthropicChatClient needs a model: pass model='...' or set the ANTHROPIC_MODEL environment variable"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ConfigurationError(
                f"AnthropicChatClient timeout must be a positive number of seconds, got {timeout!r}"
            )
        self.max_tokens = _count(max_tokens, "max_tokens", 1)
        self.max_retries = _count(max_retries, "max_retries", 0)
        self.compact_trigger = (
            None if compact_trigger is None else _count(compact_trigger, "compact_trigger", MINIMUM_COMPACT_TRIGGER)
        )
        anthropic = require_extra("anthropic", extra="anthropic", feature="AnthropicChatClient")
        self.model: str = model
        self.timeout = float(timeout)
        self._client = sdk_client(
            client,
            anthropic.AsyncAnthropic,
            anthropic.AnthropicError,
            feature="AnthropicChatClient",
            model=model,
            api_key=api_key,
            base_url=base_url,
            key_variable="ANTHROPIC_API_KEY",
            url_variable="ANTHROPIC_BASE_URL",
            timeout=self.timeout,
            max_retries=self.max_retries,
            hint="pass api_key='...' or set ANTHROPIC_API_KEY",
        )
        self.base_url: str = str(self._client.base_url)

    def __repr__(self) -> str:
        return f"AnthropicChatClient(model={self.model!r}, base_url={self.base_url!r})"

    def _where(self) -> str:
        return f"model {self.model!r} at {self.base_url.rstrip('/')}/v1/messages"

    def _edit(self, trigger: int, *, pause: bool, instructions: str | None = None) -> dict[str, Any]:
        edit: dict[str, Any] = {
            "type": COMPACTION_EDIT,
            "trigger": {"type": "input_tokens", "value": trigger},
            "pause_after_compaction": pause,
        }
        if instructions is not None:
            edit["instructions"] = instructions
        return edit

    @traced_model_call
    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResponse:
        """Send ``messages`` and return the assistant's reply (every content block, one message).

        Extra ``options`` (``temperature``, ``thinking``, ``max_tokens``...) are merged into the body
        as given."""
        extra: dict[str, Any] = {}
        if tools:
            extra["tools"] = anthropic_tools(tools)
        if self.compact_trigger is not None:
            extra["context_management"] = {"edits": [self._edit(self.compact_trigger, pause=False)]}
        extra.update(options)
        body = await self._post(messages, extra)
        reply = self._reply(body)
        reason = body.get("stop_reason")
        return ChatResponse(
            text=reply.text,
            messages=(reply,),
            usage=read_reply_usage(body),
            model=body["model"] if isinstance(body.get("model"), str) else None,
            response_id=body["id"] if isinstance(body.get("id"), str) else None,
            finish_reasons=(reason,) if isinstance(reason, str) else (),
        )

    async def compact(self, messages: Sequence[Message], *, instructions: str | None = None) -> ProviderCompaction:
        """Ask Anthropic to compact ``messages`` now: the compaction edit with
        ``pause_after_compaction``, so the reply is the ``compaction`` block alone.  ``instructions``
        replaces Anthropic's summarisation prompt.  When the messages end with the assistant's turn,
        a short user turn asking to continue is added, as the API wants one last.

        Raises :class:`ModelResponseError` when Anthropic answered without compacting, which it
        does when the input is below the trigger."""
        request = list(messages)
        if not request or request[-1].role == "assistant":
            request.append(Message.user(_CONTINUE))
        trigger = self.compact_trigger or MINIMUM_COMPACT_TRIGGER
        edit = self._edit(trigger, pause=True, instructions=instructions)
        body = await self._post(request, {"context_management": {"edits": [edit]}}, compacting=True)
        reply = self._reply(body)
        if not any(
            isinstance(c, OpaqueContent)
            and c.data.get("type") == "compaction"
            and isinstance(c.data.get("content"), str)
            for c in reply.contents
        ):
            raise ModelResponseError(
                f"{self._where()} answered without compacting (stop_reason {body.get('stop_reason')!r}); "
                f"it compacts only inputs above the trigger of {trigger:,} input tokens"
            )
        return ProviderCompaction(
            (reply,),
            read_reply_usage(body),
            body["model"] if isinstance(body.get("model"), str) else None,
            body["id"] if isinstance(body.get("id"), str) else None,
        )

    async def _post(
        self, messages: Sequence[Message], extra: dict[str, Any], *, compacting: bool = False
    ) -> dict[str, Any]:
        import anthropic  # noqa: PLC0415  (already loaded by the constructor)

        system, payload = to_anthropic(messages)
        headers: dict[str, str] = {}
        if compacting or "context_management" in extra or _holds_compaction(messages):
            headers["anthropic-beta"] = COMPACTION_BETA
        body_extra = dict(extra)
        max_tokens = body_extra.pop("max_tokens", self.max_tokens)
        if system is not None:
            body_extra["system"] = system
        try:
            raw = await self._client.messages.with_raw_response.create(
                model=self.model,
                max_tokens=max_tokens,
                messages=payload,  # type: ignore[arg-type]  # plain dicts in the documented wire format
                extra_body=body_extra or None,
                extra_headers=headers or None,
            )
        except anthropic.AnthropicError as error:
            where = self._where()
            mapped = model_error(anthropic, error, where, timeout=self.timeout, attempts=self.max_retries + 1)
            if mapped is None:
                raise
            raise mapped from error
        return parse_object(await raw.text(), raw.status_code, self._where())

    def _reply(self, body: Mapping[str, Any]) -> Message:
        content = body.get("content")
        if not isinstance(content, list) or not all(isinstance(block, dict) for block in content):
            raise ModelResponseError(f"{self._where()} returned no 'content' list of blocks: {excerpt(str(body))}")
        if body.get("role", "assistant") != "assistant":
            raise ModelResponseError(f"{self._where()} returned a reply whose role is {body.get('role')!r}")
        try:
            converted = from_anthropic([{"role": "assistant", "content": content}])
        except InvalidMessageError as error:
            raise ModelResponseError(f"{self._where()} returned content that cannot be read: {error}") from error
        return converted[0] if converted else Message("assistant", ())
