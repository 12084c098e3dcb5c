"""contextledger inside Microsoft Agent Framework for Python (``agent_framework``).

An application that already runs MAF agents keeps its agents, clients and
sessions and swaps in contextledger where it wants its guarantees:

- **Messages** convert both ways without loss for text, reasoning, function
  calls and results, ids, author names and additional properties
  (:func:`from_maf_message`, :func:`to_maf_message`).  What contextledger has no
  field for travels in a reserved property and comes back on the return trip.
- **Compaction strategies** carry the names and arguments of MAF's own
  (``TruncationStrategy(max_n=..., compact_to=..., tokenizer=...)``,
  ``SlidingWindowStrategy(keep_last_groups=20)``...), so a sample written for
  ``agent_framework._compaction`` runs by changing its import.  Each is an async
  callable over MAF's message list, as MAF expects everywhere it takes a
  strategy: ``Agent(compaction_strategy=...)``, a chat client's
  ``compaction_strategy``, and MAF's own ``CompactionProvider``.  The grouping,
  the exclusions and the summaries are contextledger's, so the projection MAF
  sends is exactly what :func:`contextledger.compaction.apply_compaction`
  returns for the same messages.
- **Models**: :class:`ContextLedgerChatClient` runs a MAF agent on any contextledger chat
  client (the local model, the offline model, an OpenAI-compatible endpoint), and
  :class:`AgentFrameworkChatClient` lends a MAF client to contextledger (a summariser).
- **History**: any :class:`contextledger.history.HistoryProvider` (in memory,
  SQLite, Redis) behind MAF's history-provider interface
  (:class:`ContextLedgerHistoryProvider`).
- **Controlled facts**: :class:`FactsContextProvider` puts the facts block into the
  instructions before each run and extracts from the run's external user messages after a
  successful one; its ``forget`` also rewrites the MAF histories given.

The package is the ``maf`` extra: ``pip install 'contextledger[maf]'``.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Final

try:
    import agent_framework as maf
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "contextledger.integrations.maf needs Microsoft Agent Framework: pip install 'contextledger[maf]'"
    ) from error

from contextledger import compaction
from contextledger.clients import ChatResponse, Usage
from contextledger.compaction import CharacterEstimatorTokenizer, CompactionResult, compact_messages
from contextledger.exceptions import ConfigurationError, FactsError, HistoryError, InvalidMessageError, ModelError
from contextledger.facts import (
    ALLOWED_KEYS,
    Admission,
    FactMemory,
    FactsTurn,
    FactWriter,
    Forgotten,
    RuleWriter,
    extract,
    parse_assertions,
    scrub_history,
)
from contextledger.history import HistoryProvider
from contextledger.messages import (
    Content,
    FunctionCallContent,
    FunctionResultContent,
    Message,
    OpaqueContent,
    ReasoningContent,
    TextContent,
)
from contextledger.tokenizers import MESSAGE_OVERHEAD, Tokenizer

__all__ = [
    "MAF_CONTENTS_PROPERTY",
    "MAF_EXTRA_PROPERTY",
    "AgentFrameworkChatClient",
    "AgentFrameworkStrategy",
    "AgentFrameworkTokenizer",
    "CharacterEstimatorTokenizer",
    "ContextLedgerChatClient",
    "ContextLedgerHistoryProvider",
    "FactsContextProvider",
    "PipelineStrategy",
    "SelectiveToolCallCompactionStrategy",
    "SlidingWindowStrategy",
    "SummarizationStrategy",
    "TokenBudgetComposedStrategy",
    "ToolResultCompactionStrategy",
    "TruncationStrategy",
    "apply_compaction",
    "from_maf_message",
    "from_maf_messages",
    "to_maf_message",
    "to_maf_messages",
]

MAF_CONTENTS_PROPERTY: Final = "_maf_contents"
"""Key in a converted :class:`Message`'s ``additional_properties`` holding, per content, what
MAF's content carried beyond the fields contextledger models (content ids, reasoning payloads,
structured arguments, result items...), so converting back restores it."""

MAF_EXTRA_PROPERTY: Final = "_contextledger"
"""Key in a MAF message's or content's ``additional_properties`` holding the OpenAI fields of a
contextledger message that MAF has no place for, so converting back restores them."""

# MAF's compaction annotations: which messages its projection leaves out, and why.
_EXCLUDED: Final = "_excluded"
_EXCLUDE_REASON: Final = "_exclude_reason"

_ROLES: Final = frozenset({"system", "user", "assistant", "tool"})
_ABSENT: Final = "__absent__"


# Messages -----------------------------------------------------------------------------------


def _json_text(value: object) -> str:
    """A structured value as the JSON text contextledger keeps (arguments, results)."""
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return str(value)


def _typed_content(content: maf.Content, where: str) -> Content:
    """The contextledger content for one MAF content; anything it has no type for is carried opaquely."""
    kind = content.type
    if kind == "text":
        return TextContent(content.text or "")
    if kind == "text_reasoning":
        return ReasoningContent(content.text or "")
    if kind == "function_call":
        if not content.call_id or not isinstance(content.call_id, str):
            raise InvalidMessageError(
                f"{where}: function call {content.name!r} has no call_id; a call needs an id its result can name"
            )
        arguments = content.arguments
        text = arguments if isinstance(arguments, str) else "{}" if arguments is None else _json_text(arguments)
        return FunctionCallContent(content.call_id, content.name or "", text)
    if kind == "function_result":
        if not content.call_id or not isinstance(content.call_id, str):
            raise InvalidMessageError(f"{where}: function result has no call_id; a result must name its call")
        result = content.result
        text = result if isinstance(result, str) else "" if result is None else _json_text(result)
        return FunctionResultContent(content.call_id, text)
    return OpaqueContent(content.to_dict())


def _baseline(content: Content) -> maf.Content:
    """The MAF content contextledger's typed fields alone describe (no stashed extras)."""
    if isinstance(content, TextContent):
        return maf.Content.from_text(content.text)
    if isinstance(content, ReasoningContent):
        return maf.Content.from_text_reasoning(text=content.text)
    if isinstance(content, FunctionCallContent):
        return maf.Content.from_function_call(content.call_id, content.name, arguments=content.arguments)
    if isinstance(content, FunctionResultContent):
        return maf.Content.from_function_result(content.call_id, result=content.result)
    return maf.Content.from_dict(_thaw(content.data))


def _residual(content: maf.Content, typed: Content) -> dict[str, Any] | None:
    """What ``content`` holds beyond what its typed counterpart rebuilds; None when nothing."""
    if isinstance(typed, OpaqueContent):
        return None
    full = content.to_dict()
    base = _baseline(typed).to_dict()
    residual = {key: value for key, value in full.items() if base.get(key, _ABSENT) != value}
    missing = sorted(key for key in base if key not in full)
    if missing:
        residual[_ABSENT] = missing
    return residual or None


def _thaw(value: Any) -> Any:
    """A mutable deep copy of read-only data (contextledger freezes what it stores)."""
    if isinstance(value, Mapping):
        return {key: _thaw(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_thaw(item) for item in value]
    return value


def from_maf_message(message: maf.Message, *, position: int | None = None) -> Message:
    """Convert one MAF message; :func:`to_maf_message` gives back an equal one.

    Text, reasoning, function calls and results become typed contents; MAF
    content kinds contextledger has no type for (data, uri, errors, hosted
    tools...) are carried as :class:`OpaqueContent` holding MAF's own
    serialisation.  The MAF-only fields of typed contents are kept under
    :data:`MAF_CONTENTS_PROPERTY`.  ``raw_representation`` (a provider's SDK
    object) is not carried, as MAF itself does not serialise it, and a content's
    ``exception`` diagnostics come back redacted the way MAF's serialisation
    redacts them.
    """
    where = "message" if position is None else f"message {position}"
    if not isinstance(message, maf.Message):
        raise InvalidMessageError(f"{where} must be an agent_framework.Message, got {type(message).__name__}")
    role = message.role
    extra: dict[str, Any] = {}
    properties = dict(message.additional_properties or {})
    stashed = properties.pop(MAF_EXTRA_PROPERTY, None)
    if isinstance(stashed, Mapping):
        extra.update(stashed.get("extra") or {})
    if role == "developer":
        extra["role"] = "developer"
        role = "system"
    if role not in _ROLES:
        raise InvalidMessageError(
            f"{where}: role {role!r} has no contextledger equivalent; use system, user, assistant or tool"
        )
    contents: list[Content] = []
    residuals: list[dict[str, Any] | None] = []
    for content in message.contents:
        typed = _typed_content(content, where)
        own = dict(content.additional_properties or {})
        mine = own.pop(MAF_EXTRA_PROPERTY, None)
        compared = content
        if isinstance(mine, Mapping) and isinstance(mine.get("part"), Mapping):
            typed = OpaqueContent(mine["part"])  # an OpenAI part MAF carried for us: back as it came
        elif isinstance(mine, Mapping) and isinstance(typed, (FunctionCallContent, FunctionResultContent)):
            typed = _restore_extras(typed, mine)
            compared = _without_stash(content, own)
        contents.append(typed)
        residuals.append(_residual(compared, typed))
    if any(item is not None for item in residuals):
        properties[MAF_CONTENTS_PROPERTY] = residuals
    return Message(
        role,  # type: ignore[arg-type]  # checked against the four roles above
        tuple(contents),
        author_name=message.author_name,
        message_id=message.message_id,
        additional_properties=properties,
        extra=extra,
    )


def _without_stash(content: maf.Content, properties: dict[str, Any]) -> maf.Content:
    data = content.to_dict()
    data["additional_properties"] = properties
    return maf.Content.from_dict(data)


def _restore_extras(typed: Content, stash: Mapping[str, Any]) -> Content:
    """Put back the OpenAI fields of a call or result that :func:`to_maf_message` stashed."""
    if isinstance(typed, FunctionCallContent):
        return FunctionCallContent(
            typed.call_id,
            typed.name,
            typed.arguments,
            extra=stash.get("extra") or {},
            function_extra=stash.get("function_extra") or {},
            openai_type=stash.get("openai_type", "function"),
        )
    if isinstance(typed, FunctionResultContent):
        parts = stash.get("parts")
        return FunctionResultContent(typed.call_id, typed.result, tuple(parts) if parts is not None else None)
    return typed


def _stash(content: Content) -> dict[str, Any] | None:
    """The OpenAI fields of a call or result that MAF has no place for; None when all are defaults."""
    if isinstance(content, FunctionCallContent):
        stash: dict[str, Any] = {}
        if content.extra:
            stash["extra"] = _thaw(content.extra)
        if content.function_extra:
            stash["function_extra"] = _thaw(content.function_extra)
        if content.openai_type != "function":
            stash["openai_type"] = content.openai_type
        return stash or None
    if isinstance(content, FunctionResultContent) and content.parts is not None:
        return {"parts": _thaw(content.parts)}
    return None


def _maf_content(content: Content, residual: Mapping[str, Any] | None, where: str) -> maf.Content:
    if isinstance(content, OpaqueContent):
        data = _thaw(content.data)
        if data.get("type") in _MAF_CONTENT_TYPES:
            return maf.Content.from_dict(data)
        if data.get("type") == "image_url":
            return _image_content(data, where)
        raise InvalidMessageError(
            f"{where}: content part of type {data.get('type')!r} has no Agent Framework equivalent; "
            "convert it to text or to an image_url part first"
        )
    built = _baseline(content)
    if residual:
        data = built.to_dict()
        absent = residual.get(_ABSENT, ())
        data.update({key: value for key, value in residual.items() if key != _ABSENT})
        for key in absent:
            data.pop(key, None)
        built = maf.Content.from_dict(data)
    stash = _stash(content)
    if stash is not None:
        built.additional_properties[MAF_EXTRA_PROPERTY] = stash
    return built


def _image_content(part: dict[str, Any], where: str) -> maf.Content:
    """An OpenAI ``image_url`` part as MAF's uri/data content (what MAF sends as an image), keeping
    the part itself so converting back gives it unchanged."""
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, Mapping) else None
    try:
        if not isinstance(url, str):
            raise ValueError("no url")
        built = maf.Content.from_uri(url, media_type=None if url.startswith("data:") else "image/*")
    except Exception as error:
        raise InvalidMessageError(
            f"{where}: image_url part {part!r} has no usable URL ({error}); MAF needs a URL with a scheme"
        ) from error
    built.additional_properties[MAF_EXTRA_PROPERTY] = {"part": part}
    return built


def to_maf_message(message: Message, *, position: int | None = None) -> maf.Message:
    """Convert one contextledger message to a new MAF message (see :func:`from_maf_message`)."""
    where = "message" if position is None else f"message {position}"
    if not isinstance(message, Message):
        raise InvalidMessageError(f"{where} must be a contextledger Message, got {type(message).__name__}")
    properties = _thaw(message.additional_properties)
    residuals = properties.pop(MAF_CONTENTS_PROPERTY, None)
    if residuals is not None and (not isinstance(residuals, list) or len(residuals) != len(message.contents)):
        raise InvalidMessageError(
            f"{where}: {MAF_CONTENTS_PROPERTY!r} must list one entry per content "
            f"({len(message.contents)}), got {residuals!r}; remove the key or keep it unchanged"
        )
    extra = _thaw(message.extra)
    role: str = message.role
    if role == "system" and extra.get("role") == "developer":
        role = extra.pop("role")
    if extra:
        properties[MAF_EXTRA_PROPERTY] = {"extra": extra}
    contents = [
        _maf_content(content, residuals[number] if residuals else None, where)
        for number, content in enumerate(message.contents)
    ]
    return maf.Message(
        role,
        contents,
        author_name=message.author_name,
        message_id=message.message_id,
        additional_properties=properties,
    )


def from_maf_messages(messages: Iterable[maf.Message]) -> list[Message]:
    """Convert MAF messages; the first that cannot be converted raises, naming its position."""
    return [from_maf_message(message, position=number) for number, message in enumerate(messages)]


def to_maf_messages(messages: Iterable[Message]) -> list[maf.Message]:
    """Convert contextledger messages to new MAF messages."""
    return [to_maf_message(message, position=number) for number, message in enumerate(messages)]


_MAF_CONTENT_TYPES: Final = frozenset(
    {
        "data",
        "uri",
        "error",
        "usage",
        "hosted_file",
        "hosted_vector_store",
        "code_interpreter_tool_call",
        "code_interpreter_tool_result",
        "image_generation_tool_call",
        "image_generation_tool_result",
        "mcp_server_tool_call",
        "mcp_server_tool_result",
        "search_tool_call",
        "search_tool_result",
        "shell_tool_call",
        "shell_tool_result",
        "shell_command_output",
        "computer_tool_call",
        "computer_tool_result",
        "function_approval_request",
        "function_approval_response",
        "oauth_consent_request",
    }
)


# Tokenizers and chat clients ----------------------------------------------------------------


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


# Compaction ---------------------------------------------------------------------------------


def _unwrap(value: object) -> object:
    return value.strategy if isinstance(value, AgentFrameworkStrategy) else value


def _adapt_arguments(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Arguments as the sample wrote them, turned into what contextledger's constructors take."""
    adapted = dict(kwargs)
    if "tokenizer" in adapted:
        adapted["tokenizer"] = _as_tokenizer(adapted["tokenizer"])
    for key in ("client", "chat_client"):
        if key in adapted:
            adapted[key] = _as_chat_client(adapted[key])
    if "strategies" in adapted:
        adapted["strategies"] = [_unwrap(item) for item in adapted["strategies"]]
    return adapted


async def _compact(
    strategy: compaction.CompactionStrategy,
    tokenizer: Tokenizer | None,
    messages: Sequence[maf.Message],
) -> tuple[list[int], CompactionResult, list[Message]] | None:
    """Run ``strategy`` over the messages MAF still includes.

    Returns the positions of those messages in ``messages``, the result, and
    their converted counterparts (the result's projection holds these very
    objects, so identity maps it back), or None when nothing changed.
    """
    positions = [number for number, message in enumerate(messages) if not message.additional_properties.get(_EXCLUDED)]
    ours = [from_maf_message(messages[number], position=number) for number in positions]
    result = await compact_messages(ours, strategy=strategy, tokenizer=tokenizer)
    projection = result.messages
    if len(projection) == len(ours) and all(a is b for a, b in zip(projection, ours)):
        return None
    return positions, result, ours


def _placement(
    result: CompactionResult, ours: list[Message]
) -> tuple[set[int], dict[int, list[Message]], list[Message]]:
    """Which converted messages the projection kept, and where its new messages (summaries) go:
    before the kept message that follows them, or at the end."""
    slot = {id(message): number for number, message in enumerate(ours)}
    kept: set[int] = set()
    before: dict[int, list[Message]] = {}
    pending: list[Message] = []
    for message in result.messages:
        number = slot.get(id(message))
        if number is None:
            pending.append(message)
            continue
        kept.add(number)
        if pending:
            before[number] = pending
            pending = []
    return kept, before, pending


def _reasons(result: CompactionResult) -> dict[int, str]:
    reasons: dict[int, str] = {}
    for group in result.index.groups:
        if group.excluded:
            for message in group.messages:
                reasons[id(message)] = f"contextledger:{group.exclusion_reason or 'excluded'}"
    return reasons


class AgentFrameworkStrategy:
    """A contextledger strategy as MAF's ``CompactionStrategy``: ``await strategy(messages) -> bool``.

    MAF hands a strategy its message list and reads back which messages are
    excluded (``additional_properties["_excluded"]``) and any messages inserted.
    This adapter runs contextledger's engine over the messages MAF still
    includes, marks the ones the projection leaves out (with the reason), and
    inserts contextledger's summary messages where the projection places them,
    so what MAF then sends is exactly contextledger's projection.  Messages MAF
    had already excluded stay excluded and unseen.
    """

    def __init__(self, strategy: compaction.CompactionStrategy, *, tokenizer: object = None) -> None:
        if not isinstance(strategy, compaction.CompactionStrategy):
            raise ConfigurationError(
                f"AgentFrameworkStrategy wraps a contextledger CompactionStrategy, got {strategy!r}"
            )
        self.strategy = strategy
        # Not named ``tokenizer``: MAF reads that attribute and would re-tokenise every message
        # with it for annotations this engine never uses.
        self.counting_tokenizer = _as_tokenizer(tokenizer)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.strategy!r})"

    async def __call__(self, messages: list[maf.Message]) -> bool:
        """Compact MAF's list in place; True when the projection changed."""
        if not isinstance(messages, list):
            raise InvalidMessageError(
                f"a MAF compaction strategy takes a list of messages, got {type(messages).__name__}"
            )
        outcome = await _compact(self.strategy, self.counting_tokenizer, messages)
        if outcome is None:
            return False
        positions, result, ours = outcome
        kept, before, trailing = _placement(result, ours)
        reasons = _reasons(result)
        slot_of = {position: number for number, position in enumerate(positions)}
        rebuilt: list[maf.Message] = []
        for position, message in enumerate(messages):
            number = slot_of.get(position)
            if number is not None:
                rebuilt.extend(to_maf_message(new) for new in before.get(number, ()))
                if number not in kept:
                    message.additional_properties[_EXCLUDED] = True
                    message.additional_properties[_EXCLUDE_REASON] = reasons.get(
                        id(ours[number]), f"contextledger:{self.strategy.name}"
                    )
            rebuilt.append(message)
        rebuilt.extend(to_maf_message(new) for new in trailing)
        messages[:] = rebuilt
        return True


async def apply_compaction(
    messages: Sequence[maf.Message],
    *,
    strategy: AgentFrameworkStrategy | compaction.CompactionStrategy | None,
    tokenizer: object = None,
) -> list[maf.Message]:
    """The MAF messages ``strategy`` would send, leaving ``messages`` and their annotations untouched.

    The seed's ad hoc call, ``await apply_compaction(messages, strategy=...,
    tokenizer=...)``, on MAF messages: kept messages are the caller's own
    objects, summaries are new ones.  ``tokenizer`` may be contextledger's or
    MAF's.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidMessageError(f"messages must be a list of agent_framework.Message, got {type(messages).__name__}")
    if strategy is None:
        return [message for message in messages if not message.additional_properties.get(_EXCLUDED)]
    if isinstance(strategy, AgentFrameworkStrategy):
        engine = strategy.strategy
        counting = _as_tokenizer(tokenizer) if tokenizer is not None else strategy.counting_tokenizer
    elif isinstance(strategy, compaction.CompactionStrategy):
        engine, counting = strategy, _as_tokenizer(tokenizer)
    else:
        raise ConfigurationError(f"strategy must be a contextledger strategy, got {strategy!r}")
    outcome = await _compact(engine, counting, messages)
    if outcome is None:
        return [message for message in messages if not message.additional_properties.get(_EXCLUDED)]
    positions, result, ours = outcome
    original = {id(ours[number]): messages[position] for number, position in enumerate(positions)}
    return [original.get(id(message)) or to_maf_message(message) for message in result.messages]


class _SameName(AgentFrameworkStrategy):
    """Builds contextledger's ``engine`` from the arguments a MAF sample passes, adapting MAF's
    tokenizers, chat clients and this module's strategies on the way."""

    engine: ClassVar[type[compaction.CompactionStrategy]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(type(self).engine(*self._positional(args), **_adapt_arguments(kwargs)))

    @staticmethod
    def _positional(args: tuple[Any, ...]) -> tuple[Any, ...]:
        return args


class TruncationStrategy(_SameName):
    """contextledger's truncation under MAF's name: ``TruncationStrategy(max_n=32_000, compact_to=16_000,
    tokenizer=...)``; takes every argument of :class:`contextledger.compaction.TruncationStrategy`."""

    engine = compaction.TruncationStrategy


class SlidingWindowStrategy(_SameName):
    """contextledger's sliding window under MAF's name: ``SlidingWindowStrategy(keep_last_groups=20)``;
    system messages, turn 0 and summaries always stay."""

    engine = compaction.SlidingWindowStrategy


class ToolResultCompactionStrategy(_SameName):
    """contextledger's tool-result collapse under MAF's name:
    ``ToolResultCompactionStrategy(keep_last_tool_call_groups=1)``."""

    engine = compaction.ToolResultCompactionStrategy


class SelectiveToolCallCompactionStrategy(_SameName):
    """contextledger's selective tool-call removal under MAF's name:
    ``SelectiveToolCallCompactionStrategy(keep_last_tool_call_groups=1)``."""

    engine = compaction.SelectiveToolCallCompactionStrategy


class SummarizationStrategy(_SameName):
    """contextledger's summarisation under MAF's name: ``SummarizationStrategy(client=summarizer_client,
    target_count=4, threshold=2, prompt=...)``.  ``client`` may be a MAF chat client or a contextledger
    one; a failed summary restores everything and inserts nothing."""

    engine = compaction.SummarizationStrategy

    @staticmethod
    def _positional(args: tuple[Any, ...]) -> tuple[Any, ...]:
        return (_as_chat_client(args[0]), *args[1:]) if args else args


class TokenBudgetComposedStrategy(_SameName):
    """contextledger's token-budget composition under MAF's name: ``TokenBudgetComposedStrategy(
    token_budget=16_000, tokenizer=..., strategies=[...])``, the children being strategies of this module."""

    engine = compaction.TokenBudgetComposedStrategy


class PipelineStrategy(_SameName):
    """contextledger's pipeline (the seed's ``PipelineCompactionStrategy``): children in order, each
    with its own trigger."""

    engine = compaction.PipelineStrategy

    @staticmethod
    def _positional(args: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(
            [_unwrap(item) for item in arg] if isinstance(arg, (list, tuple)) else _unwrap(arg) for arg in args
        )


# History ------------------------------------------------------------------------------------


_VIEW_ANNOTATIONS: Final = frozenset({"_group", _EXCLUDED, _EXCLUDE_REASON})


def _without_view_annotations(message: Message) -> Message:
    """``message`` without MAF's compaction annotations (see :class:`ContextLedgerHistoryProvider`)."""
    properties = message.additional_properties
    if not any(key in properties for key in _VIEW_ANNOTATIONS):
        return message
    kept = {key: value for key, value in properties.items() if key not in _VIEW_ANNOTATIONS}
    return dataclasses.replace(message, additional_properties=kept)


class ContextLedgerHistoryProvider(maf.HistoryProvider):
    """A contextledger history store (in memory, SQLite, Redis) as a MAF history provider.

    MAF loads the session's messages before each run and stores the run's
    input and response after it; here they live in ``provider``, keyed by the
    MAF session id, with every field converted losslessly.  MAF's session
    ``state`` is not used, so a session object can be rebuilt from its id alone.

    ``reducer`` (a strategy of this module or of :mod:`contextledger.compaction`)
    makes the retained history smaller after each save: the reduced list
    *replaces* the stored one, so what it removed is gone (unlike a
    request-view compaction, which leaves the stored history whole).
    What is stored is the conversation, never a view of it: MAF's compaction
    annotations (``_group``, ``_excluded``, ``_exclude_reason``), which a
    request-view strategy writes on the very message objects MAF then stores,
    are removed on the way in.  Otherwise an exclusion meant for one request
    would silently become a reduction of the retained history.
    """

    def __init__(
        self,
        provider: HistoryProvider,
        *,
        source_id: str | None = None,
        load_messages: bool = True,
        store_inputs: bool = True,
        store_context_messages: bool = False,
        store_context_from: set[str] | None = None,
        store_outputs: bool = True,
        reducer: AgentFrameworkStrategy | compaction.CompactionStrategy | None = None,
        tokenizer: object = None,
    ) -> None:
        if not isinstance(provider, HistoryProvider):
            raise ConfigurationError(
                f"ContextLedgerHistoryProvider needs a contextledger HistoryProvider, got {provider!r}"
            )
        engine = _unwrap(reducer)
        if engine is not None and not isinstance(engine, compaction.CompactionStrategy):
            raise ConfigurationError(f"reducer must be a compaction strategy, got {reducer!r}")
        super().__init__(
            source_id or provider.source_id,
            load_messages=load_messages,
            store_inputs=store_inputs,
            store_context_messages=store_context_messages,
            store_context_from=store_context_from,
            store_outputs=store_outputs,
        )
        self.provider = provider
        self.reducer: compaction.CompactionStrategy | None = engine
        self.tokenizer = _as_tokenizer(tokenizer)

    def __repr__(self) -> str:
        return f"ContextLedgerHistoryProvider({self.provider!r}, source_id={self.source_id!r})"

    @staticmethod
    def _session(session_id: str | None) -> str:
        if not isinstance(session_id, str) or not session_id:
            raise HistoryError(
                f"a stored history needs the MAF session's id, got {session_id!r}; run the agent with a session "
                "(agent.create_session())"
            )
        return session_id

    async def get_messages(
        self, session_id: str | None, *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[maf.Message]:
        stored = await self.provider.load(self._session(session_id))
        return to_maf_messages(stored)

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[maf.Message],
        *,
        state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        key = self._session(session_id)
        converted = [_without_view_annotations(message) for message in from_maf_messages(messages)]
        if converted:
            await self.provider.append(key, converted)
        if self.reducer is not None:
            stored = await self.provider.load(key)
            result = await compact_messages(stored, strategy=self.reducer, tokenizer=self.tokenizer)
            projection = result.messages
            if len(projection) != len(stored) or any(a is not b for a, b in zip(projection, stored)):
                await self.provider.replace(key, projection)


# Controlled facts ---------------------------------------------------------------------------


def _external_user_text(context: maf.SessionContext) -> str | None:
    """The run's own user text: its input user messages (what came from outside), never context a
    provider injected; joined by line breaks, which separate declarations and never merge two."""
    texts = [
        message.text
        for message in context.input_messages
        if message.role == "user" and "_attribution" not in message.additional_properties and message.text.strip()
    ]
    return "\n".join(texts) if texts else None


class FactsContextProvider(maf.ContextProvider):
    """contextledger's controlled facts as a MAF context provider (the seed's Demo160).

    Before the run it adds ``store.to_prompt_block()`` to the run's instructions (never to a
    message, so the block is never stored in a history) and takes the turn's ticket from the
    run's external user messages.  MAF calls ``after_run`` only when the model call succeeded;
    then ``writer`` (the rule writer by default) proposes from that text alone and the store
    admits or refuses the batch with the ticket, so a ``forget`` made while the model answered
    makes the extraction stale.  Generated replies and injected context are never read.

    A refused extraction does not fail a run that succeeded; it is kept on ``last_turn``
    (and ``last_rejection``).  One provider may serve several agents sharing one store.
    """

    def __init__(self, store: FactMemory, writer: FactWriter | None = None, *, source_id: str = "facts") -> None:
        if not isinstance(store, FactMemory):
            raise ConfigurationError(
                f"FactsContextProvider needs a fact store (FactStore or RedisFactStore), got {store!r}"
            )
        if writer is not None and not isinstance(writer, FactWriter):
            raise ConfigurationError(f"writer must have async propose(user_text), got {writer!r}")
        if not isinstance(source_id, str) or not source_id:
            raise ConfigurationError(f"source_id must be a non-empty string, got {source_id!r}")
        super().__init__(source_id)
        self.store = store
        self.writer: FactWriter = writer if writer is not None else RuleWriter()
        self.last_turn: FactsTurn | None = None
        self._turns: weakref.WeakKeyDictionary[maf.SessionContext, FactsTurn] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"FactsContextProvider(store={self.store!r}, writer={self.writer!r}, source_id={self.source_id!r})"

    @property
    def last_admission(self) -> Admission | None:
        return None if self.last_turn is None else self.last_turn.admission

    @property
    def last_rejection(self) -> FactsError | None:
        return None if self.last_turn is None else self.last_turn.rejection

    async def before_run(
        self, *, agent: Any, session: maf.AgentSession, context: maf.SessionContext, state: dict[str, Any]
    ) -> None:
        context.extend_instructions(self.source_id, self.store.to_prompt_block())
        text = _external_user_text(context)
        if text is None:
            return
        try:
            self._turns[context] = FactsTurn(self.store.begin_turn(text))
        except FactsError as error:  # a message over the bound: the run goes on, the facts cannot change
            self._turns[context] = FactsTurn(None, rejection=error)

    async def after_run(
        self, *, agent: Any, session: maf.AgentSession, context: maf.SessionContext, state: dict[str, Any]
    ) -> None:
        begun = self._turns.pop(context, None)
        if begun is None or context.response is None:
            return
        if begun.ticket is None:
            self.last_turn = begun
            return
        try:
            self.last_turn = FactsTurn(begun.ticket, await extract(self.store, self.writer, begun.ticket))
        except FactsError as error:  # refused or stale: reported, never raised into a run that succeeded
            self.last_turn = FactsTurn(begun.ticket, rejection=error)

    async def forget(
        self,
        key: str | None = None,
        *,
        histories: Sequence[tuple[maf.AgentSession, maf.HistoryProvider]] = (),
    ) -> Forgotten:
        """Forget ``key`` (or every fact) in the store and in each (session, history) given.

        Each history is rewritten as :func:`contextledger.facts.scrub_history` rewrites one:
        the declarations of the forgotten keys are cut from user messages and the replies of
        turns that declared or mention a forgotten value are dropped, so the old statement is
        no longer in front of the model.  MAF's ``InMemoryHistoryProvider`` and
        :class:`ContextLedgerHistoryProvider` can be rewritten; another history provider is
        refused before anything changes.  The store is forgotten first, so no extraction in
        flight can bring a fact back even if a history then fails.
        """
        for _, history in histories:
            if not isinstance(history, (maf.InMemoryHistoryProvider, ContextLedgerHistoryProvider)):
                raise ConfigurationError(
                    f"cannot rewrite {history!r}: forget rewrites MAF's InMemoryHistoryProvider and "
                    "ContextLedgerHistoryProvider; clear other histories yourself"
                )
        # The store validates the key (and refuses a bad one before anything changes).
        name = key.strip().lower() if isinstance(key, str) else None
        keys = ALLOWED_KEYS if name is None else frozenset({name})
        loaded = [(session, history, await _load_history(session, history)) for session, history in histories]
        forgotten = self.store.forget(key)
        values = {fact.value for fact in forgotten}
        for _, _, messages in loaded:
            values |= _declared_values(messages, keys)
        for session, history, messages in loaded:
            scrubbed = scrub_history(messages, keys, values)
            if len(scrubbed) != len(messages) or any(a is not b for a, b in zip(scrubbed, messages)):
                await _replace_history(session, history, scrubbed)
        return forgotten


def _declared_values(messages: Sequence[Message], keys: frozenset[str]) -> set[str]:
    """Every value a user message in ``messages`` declared for one of ``keys``."""
    values: set[str] = set()
    for message in messages:
        if message.role != "user":
            continue
        try:
            declared = parse_assertions(message.text)
        except FactsError:
            continue  # a message whose declarations were refused declared nothing
        values |= {candidate.value for candidate in declared if candidate.key in keys}
    return values


async def _load_history(session: maf.AgentSession, history: maf.HistoryProvider) -> list[Message]:
    if isinstance(history, ContextLedgerHistoryProvider):
        return await history.provider.load(history._session(session.session_id))
    state = session.state.get(history.source_id) or {}
    return from_maf_messages(state.get("messages", []))


async def _replace_history(session: maf.AgentSession, history: maf.HistoryProvider, messages: list[Message]) -> None:
    if isinstance(history, ContextLedgerHistoryProvider):
        await history.provider.replace(history._session(session.session_id), messages)
        return
    session.state.setdefault(history.source_id, {})["messages"] = to_maf_messages(messages)
