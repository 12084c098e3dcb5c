"""Tokenizers and chat clients lent across the boundary: a MAF tokenizer or client used by
contextledger, and any contextledger chat client as a MAF chat client."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final

import agent_framework as maf

from contextledger.clients import ChatResponse, Usage
from contextledger.exceptions import ConfigurationError, ModelError
from contextledger.integrations.maf._messages import from_maf_messages, to_maf_messages
from contextledger.messages import (
    Message,
)
from contextledger.tokenizers import MESSAGE_OVERHEAD, Tokenizer
from contextledger.tokenizers import CharacterEstimatorTokenizer as _CharacterEstimate


class CharacterEstimatorTokenizer(_CharacterEstimate):
    """contextledger's character estimate, usable by MAF too: it adds MAF's ``count_tokens(text)``.

    A sample imports ``CharacterEstimatorTokenizer`` from this package and hands the
    same object to a strategy and to MAF (``Agent(tokenizer=...)``, a chat client's
    ``tokenizer``, ``annotate_message_groups(tokenizer=...)``), which calls
    ``count_tokens`` on its own serialisation of each message.  Both sides then
    count with one rule: four characters per token, rounded up.
    """

    def count_tokens(self, text: str) -> int:
        """MAF's tokenizer protocol: the estimate for ``text``."""
        return self.count_text(text)


class AgentFrameworkTokenizer:
    """A MAF tokenizer (anything with ``count_tokens(text)``) used as a contextledger tokenizer.

    It lets a sample keep ``agent_framework``'s ``CharacterEstimatorTokenizer``
    while contextledger's strategies do the work.  Messages are counted over
    what the model reads (text, call names and arguments, results) plus the
    usual chat framing, never over a JSON serialisation.  Counts are labelled
    estimates unless the wrapped tokenizer says ``is_estimate = False``.
    """

    def __init__(self, tokenizer: Any) -> None:
        if not callable(getattr(tokenizer, "count_tokens", None)):
            raise ConfigurationError(f"a MAF tokenizer needs a count_tokens(text) method, got {tokenizer!r}")
        self.tokenizer = tokenizer
        kind = type(tokenizer)
        self._name = f"agent_framework:{kind.__module__}.{kind.__qualname__}"
        self._is_estimate = bool(getattr(tokenizer, "is_estimate", True))

    @property
    def name(self) -> str:
        return self._name

    @property
    def is_estimate(self) -> bool:
        return self._is_estimate

    def __repr__(self) -> str:
        return f"AgentFrameworkTokenizer({self.tokenizer!r})"

    def count_text(self, text: str) -> int:
        count = self.tokenizer.count_tokens(text)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ConfigurationError(f"{self.tokenizer!r}.count_tokens returned {count!r}; it must return an int >= 0")
        return count

    def count_message(self, message: Message) -> int:
        overhead = MESSAGE_OVERHEAD + (1 if message.author_name else 0)
        return overhead + sum(self.count_text(text) for text in message.payload_texts() if text)

    def count_messages(self, messages: Sequence[Message]) -> list[int]:
        return [self.count_message(message) for message in messages]


def _as_tokenizer(value: object) -> Tokenizer | None:
    if value is None or isinstance(value, Tokenizer):
        return value
    if callable(getattr(value, "count_tokens", None)):
        return AgentFrameworkTokenizer(value)
    raise ConfigurationError(
        f"tokenizer must be a contextledger Tokenizer or a MAF tokenizer with count_tokens(text), got {value!r}"
    )


class AgentFrameworkChatClient:
    """A MAF chat client used where contextledger wants a :class:`~contextledger.clients.ChatClient`.

    This is how ``SummarizationStrategy(client=summarizer_client)`` accepts the
    MAF client a sample already has.  Messages are converted both ways; the
    usage MAF reports (``input_token_count``/``output_token_count``) is passed
    through, ``None`` where it reported nothing.  A failure of the MAF client is
    raised as :class:`~contextledger.exceptions.ModelError`.
    """

    def __init__(self, client: Any) -> None:
        if not callable(getattr(client, "get_response", None)):
            raise ConfigurationError(f"a MAF chat client needs a get_response method, got {client!r}")
        self.client = client

    def __repr__(self) -> str:
        return f"AgentFrameworkChatClient({self.client!r})"

    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResponse:
        request = to_maf_messages(messages)
        chat_options: dict[str, Any] = dict(options)
        if tools:
            chat_options["tools"] = [dict(tool) for tool in tools]
        try:
            response = await self.client.get_response(request, options=chat_options)
        except ModelError:
            raise
        except Exception as error:
            raise ModelError(f"the Agent Framework client {self.client!r} failed: {error}") from error
        produced = tuple(from_maf_messages(response.messages or ()))
        details = response.usage_details or {}
        usage = None
        if details:
            usage = Usage(
                input_tokens=details.get("input_token_count"),
                output_tokens=details.get("output_token_count"),
            )
        return ChatResponse(text=response.text or "", messages=produced, usage=usage)


def _as_chat_client(value: object) -> object:
    """contextledger clients pass through; a MAF client is adapted.

    A MAF client is a ``BaseChatClient``, or anything whose ``get_response`` is a
    plain method returning an awaitable (MAF's protocol), where contextledger's
    clients define ``async def get_response``.
    """
    if value is None or isinstance(value, AgentFrameworkChatClient):
        return value
    method = getattr(value, "get_response", None)
    if isinstance(value, maf.BaseChatClient) or (callable(method) and not inspect.iscoroutinefunction(method)):
        return AgentFrameworkChatClient(value)
    return value


# Request options a contextledger client may take; MAF's other options (its own bookkeeping, tool
# modes the client cannot honour) are not forwarded.
_FORWARDED_OPTIONS: Final = (
    "max_tokens",
    "temperature",
    "top_p",
    "stop",
    "seed",
    "frequency_penalty",
    "presence_penalty",
)


class ContextLedgerChatClient(maf.FunctionInvocationLayer[Any], maf.ChatMiddlewareLayer[Any], maf.BaseChatClient[Any]):
    """A contextledger :class:`~contextledger.clients.ChatClient` as a MAF chat client.

    A MAF agent can then run on anything contextledger can talk to: the local
    SmolLM2 model (``ContextLedgerChatClient(LocalChatClient())``, no network),
    the offline model, or an OpenAI-compatible endpoint.  MAF's function
    invocation layer is kept, so tools a model calls are run by MAF as usual;
    function tools are offered to the client as OpenAI tool dicts.  The run's
    instructions become a leading system message.  Usage is passed through as
    the client reported it.  Streaming is not offered.
    """

    OTEL_PROVIDER_NAME: ClassVar[str] = "contextledger"

    def __init__(self, client: Any, **kwargs: Any) -> None:
        if not callable(getattr(client, "get_response", None)) or not inspect.iscoroutinefunction(client.get_response):
            raise ConfigurationError(f"ContextLedgerChatClient wraps a contextledger chat client, got {client!r}")
        super().__init__(**kwargs)
        self.client = client

    def __repr__(self) -> str:
        return f"ContextLedgerChatClient({self.client!r})"

    def _inner_get_response(
        self, *, messages: Sequence[maf.Message], stream: bool, options: Mapping[str, Any], **kwargs: Any
    ) -> Any:
        if stream:
            raise ConfigurationError("ContextLedgerChatClient does not stream; run the agent with stream=False")
        return self._respond(messages, options)

    async def _respond(self, messages: Sequence[maf.Message], options: Mapping[str, Any]) -> maf.ChatResponse[Any]:
        request = from_maf_messages(messages)
        instructions = options.get("instructions")
        if isinstance(instructions, str) and instructions:
            request = [Message.system(instructions), *request]
        tools = [
            tool.to_json_schema_spec()
            for tool in maf.normalize_tools(options.get("tools"))
            if isinstance(tool, maf.FunctionTool)
        ]
        forwarded = {key: options[key] for key in _FORWARDED_OPTIONS if options.get(key) is not None}
        response = await self.client.get_response(request, tools=tools or None, **forwarded)
        produced = (
            to_maf_messages(response.messages) if response.messages else [maf.Message("assistant", [response.text])]
        )
        usage: maf.UsageDetails | None = None
        if response.usage is not None:
            usage = maf.UsageDetails()
            if response.usage.input_tokens is not None:
                usage["input_token_count"] = response.usage.input_tokens
            if response.usage.output_tokens is not None:
                usage["output_token_count"] = response.usage.output_tokens
        model = getattr(self.client, "model", None)
        return maf.ChatResponse(messages=produced, usage_details=usage, model=model if isinstance(model, str) else None)
