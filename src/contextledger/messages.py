"""Chat messages, their contents, and lossless conversion to and from OpenAI's format.

Messages are immutable values.  Compaction never edits a caller's message: it
marks groups in an index and projects the included messages, so the objects a
caller handed in are exactly the objects that come back out.

OpenAI Chat Completions dicts convert both ways without loss: several
``tool_calls`` in one message, ``tool_call_id``, ``name``, list-of-parts
content, ``reasoning_content`` and any key this module does not know are all
kept and written back as they came.

Hosted (server-side) tool calls — MCP calls, code interpreter, web or file
search, image generation, shell and computer use — and approval requests and
responses are real contents, not opaque parts: each carries its id, and
compaction pairs it with its output by that id (SPEC §11).  Chat Completions
has no field for them, so they travel as content parts of our own
(``{"type": "hosted_call", ...}``) that convert back to the same contents.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, TypeAlias

from contextledger.exceptions import InvalidMessageError, TranscriptError, UnknownRoleError

__all__ = [
    "HOSTED_TOOLS",
    "ROLES",
    "SUMMARY_PROPERTY",
    "SUMMARY_SOURCE_PROPERTY",
    "ApprovalRequestContent",
    "ApprovalResponseContent",
    "Content",
    "FunctionCallContent",
    "FunctionResultContent",
    "HostedCallContent",
    "HostedResultContent",
    "Message",
    "OpaqueContent",
    "Problem",
    "ReasoningContent",
    "TextContent",
    "answered_ids",
    "dump_jsonl",
    "from_openai",
    "load_jsonl",
    "message_from_openai",
    "message_to_openai",
    "opened_ids",
    "read_jsonl",
    "to_openai",
    "validate",
    "write_jsonl",
]

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool"})

SUMMARY_PROPERTY = "_is_summary"
"""``additional_properties`` key that marks an assistant message as a summary."""

SUMMARY_SOURCE_PROPERTY = "_summary_source"
"""Which mechanism wrote a summary: ``"summarization"`` or ``"tool_results"``."""

# The key under which to_openai(..., metadata=True) keeps what OpenAI has no field for.
_METADATA_KEY = "_contextledger"

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _freeze(value: Any) -> Any:
    """A read-only deep copy of JSON-like data: mappings become read-only, lists become tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: _freeze(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(item) for item in value)
    return value


def _thaw(value: Any) -> Any:
    """A fresh, mutable deep copy of frozen data, for output (dicts and lists, as JSON has)."""
    if isinstance(value, Mapping):
        return {key: _thaw(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_thaw(item) for item in value]
    return value


def _frozen(mapping: Mapping[str, Any] | None, what: str) -> Mapping[str, Any]:
    if mapping is None:
        return _EMPTY
    if not isinstance(mapping, Mapping):
        raise InvalidMessageError(f"{what} must be a mapping, got {type(mapping).__name__}: {mapping!r}")
    if not mapping:
        return _EMPTY
    frozen: Mapping[str, Any] = _freeze(mapping)
    return frozen


def _require_str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidMessageError(
            f"{what} must be a string, got {type(value).__name__}: {value!r}; "
            "serialise structured values to JSON text first"
        )
    return value


@dataclass(frozen=True, slots=True)
class TextContent:
    """Visible text."""

    text: str
    type: Literal["text"] = field(default="text", init=False)

    def __post_init__(self) -> None:
        _require_str(self.text, "TextContent.text")


@dataclass(frozen=True, slots=True)
class ReasoningContent:
    """Model reasoning that some providers return beside the answer (``reasoning_content``)."""

    text: str
    type: Literal["reasoning"] = field(default="reasoning", init=False)

    def __post_init__(self) -> None:
        _require_str(self.text, "ReasoningContent.text")


@dataclass(frozen=True, slots=True)
class FunctionCallContent:
    """One tool call requested by the assistant; ``arguments`` is the JSON text the model wrote."""

    call_id: str
    name: str
    arguments: str = "{}"
    # OpenAI keys this library has no field for: beside ``id`` in the tool call, and inside ``function``.
    extra: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    function_extra: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    # The tool call's ``type`` as it came; None when the dict had no ``type`` key.
    openai_type: str | None = "function"
    type: Literal["function_call"] = field(default="function_call", init=False)

    def __post_init__(self) -> None:
        _require_str(self.call_id, "FunctionCallContent.call_id")
        _require_str(self.name, "FunctionCallContent.name")
        _require_str(self.arguments, "FunctionCallContent.arguments")
        if not self.call_id:
            raise InvalidMessageError("FunctionCallContent.call_id is empty; every tool call needs an id")
        object.__setattr__(self, "extra", _frozen(self.extra, "FunctionCallContent.extra"))
        object.__setattr__(self, "function_extra", _frozen(self.function_extra, "FunctionCallContent.function_extra"))


@dataclass(frozen=True, slots=True)
class FunctionResultContent:
    """The result of one tool call, as the text sent back to the model."""

    call_id: str
    result: str
    # When the tool message's content was a list of parts, the parts as they came.
    parts: tuple[Mapping[str, Any], ...] | None = None
    type: Literal["function_result"] = field(default="function_result", init=False)

    def __post_init__(self) -> None:
        _require_str(self.call_id, "FunctionResultContent.call_id")
        _require_str(self.result, "FunctionResultContent.result")
        if not self.call_id:
            raise InvalidMessageError("FunctionResultContent.call_id is empty; a tool result needs its call id")


@dataclass(frozen=True, slots=True)
class OpaqueContent:
    """A content part carried as it came (image, audio, file, error...), never interpreted."""

    data: Mapping[str, Any]
    type: Literal["opaque"] = field(default="opaque", init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "data", _frozen(self.data, "OpaqueContent.data"))


HOSTED_TOOLS: frozenset[str] = frozenset(
    {"mcp", "code_interpreter", "web_search", "file_search", "image_generation", "shell", "computer"}
)
"""The hosted tools this library names; ``HostedCallContent.tool`` may hold any other name too."""


def _require_id(value: object, what: str) -> str:
    if not _require_str(value, what):
        raise InvalidMessageError(f"{what} is empty; calls, results and approvals are paired by this id")
    return value  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class HostedCallContent:
    """A tool call run by the provider or a server it calls (an MCP tool, the code interpreter,
    web or file search, image generation, a shell or computer action).

    ``tool`` says which (see :data:`HOSTED_TOOLS`), ``name`` the tool's own name where it has one
    (an MCP tool), ``arguments`` the input as text (JSON arguments, code, a command, a query).
    ``data`` keeps every provider field this class has no attribute for (server label, status,
    container id...), written back unchanged.  Its output, when the provider reports one, is a
    :class:`HostedResultContent` with the same ``call_id`` — in the same message or a later one.
    """

    call_id: str
    tool: str
    name: str = ""
    arguments: str = ""
    data: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    type: Literal["hosted_call"] = field(default="hosted_call", init=False)

    def __post_init__(self) -> None:
        _require_id(self.call_id, "HostedCallContent.call_id")
        _require_id(self.tool, "HostedCallContent.tool")
        _require_str(self.name, "HostedCallContent.name")
        _require_str(self.arguments, "HostedCallContent.arguments")
        object.__setattr__(self, "data", _frozen(self.data, "HostedCallContent.data"))


@dataclass(frozen=True, slots=True)
class HostedResultContent:
    """The output of a hosted call (:class:`HostedCallContent` with the same ``call_id``), as text;
    ``data`` keeps the provider's other fields (images, files, exit codes...)."""

    call_id: str
    tool: str
    output: str = ""
    data: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    type: Literal["hosted_result"] = field(default="hosted_result", init=False)

    def __post_init__(self) -> None:
        _require_id(self.call_id, "HostedResultContent.call_id")
        _require_id(self.tool, "HostedResultContent.tool")
        _require_str(self.output, "HostedResultContent.output")
        object.__setattr__(self, "data", _frozen(self.data, "HostedResultContent.data"))


@dataclass(frozen=True, slots=True)
class ApprovalRequestContent:
    """A request that the user approve a call before it runs (MCP approvals, MAF's function
    approvals).  ``request_id`` pairs it with its :class:`ApprovalResponseContent`; ``call`` is the
    call awaiting approval, whose results (if it runs) pair with this request too."""

    request_id: str
    call: FunctionCallContent | HostedCallContent
    data: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    type: Literal["approval_request"] = field(default="approval_request", init=False)

    def __post_init__(self) -> None:
        _require_id(self.request_id, "ApprovalRequestContent.request_id")
        if not isinstance(self.call, (FunctionCallContent, HostedCallContent)):
            raise InvalidMessageError(
                f"ApprovalRequestContent.call must be a FunctionCallContent or HostedCallContent, got {self.call!r}"
            )
        object.__setattr__(self, "data", _frozen(self.data, "ApprovalRequestContent.data"))


@dataclass(frozen=True, slots=True)
class ApprovalResponseContent:
    """The user's answer to the :class:`ApprovalRequestContent` with the same ``request_id``.
    ``call`` repeats the call it answers for when the sender includes it (a reference, not a new
    call)."""

    request_id: str
    approved: bool
    call: FunctionCallContent | HostedCallContent | None = None
    data: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    type: Literal["approval_response"] = field(default="approval_response", init=False)

    def __post_init__(self) -> None:
        _require_id(self.request_id, "ApprovalResponseContent.request_id")
        if not isinstance(self.approved, bool):
            raise InvalidMessageError(f"ApprovalResponseContent.approved must be True or False, got {self.approved!r}")
        if self.call is not None and not isinstance(self.call, (FunctionCallContent, HostedCallContent)):
            raise InvalidMessageError(
                "ApprovalResponseContent.call must be a FunctionCallContent, HostedCallContent or None, "
                f"got {self.call!r}"
            )
        object.__setattr__(self, "data", _frozen(self.data, "ApprovalResponseContent.data"))


Content: TypeAlias = (
    TextContent
    | ReasoningContent
    | FunctionCallContent
    | FunctionResultContent
    | HostedCallContent
    | HostedResultContent
    | ApprovalRequestContent
    | ApprovalResponseContent
    | OpaqueContent
)
_CONTENT_TYPES = (
    TextContent,
    ReasoningContent,
    FunctionCallContent,
    FunctionResultContent,
    HostedCallContent,
    HostedResultContent,
    ApprovalRequestContent,
    ApprovalResponseContent,
    OpaqueContent,
)


def opened_ids(contents: Iterable[Content]) -> list[str]:
    """The ids these contents open, in order: each call's id, and for an approval request its
    request id and the id of the call it holds (that call's results answer it too)."""
    ids: list[str] = []
    for c in contents:
        if isinstance(c, (FunctionCallContent, HostedCallContent)):
            ids.append(c.call_id)
        elif isinstance(c, ApprovalRequestContent):
            ids.append(c.request_id)
            ids.append(c.call.call_id)
    return ids


def answered_ids(contents: Iterable[Content]) -> list[str]:
    """The ids these contents answer, in order: each result's call id, each approval response's
    request id."""
    ids: list[str] = []
    for c in contents:
        if isinstance(c, (FunctionResultContent, HostedResultContent)):
            ids.append(c.call_id)
        elif isinstance(c, ApprovalResponseContent):
            ids.append(c.request_id)
    return ids


@dataclass(frozen=True, slots=True, eq=True)
class Message:
    """One chat message: a role and an ordered tuple of contents.

    ``extra`` holds OpenAI keys this library has no field for; they are written
    back unchanged.  ``additional_properties`` is metadata for the application
    and for contextledger itself (for example :data:`SUMMARY_PROPERTY`); it is
    never sent to a model.
    """

    role: Role
    contents: tuple[Content, ...] = ()
    author_name: str | None = None
    message_id: str | None = None
    additional_properties: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    extra: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    # How OpenAI's ``content`` field looked ("text", "parts", "null", "absent"), for round trips.
    content_form: str | None = field(default=None, compare=False, repr=False)
    # (tokenizer key, count): a memo so a message is tokenised once per tokenizer.
    _token_memo: tuple[object, int] | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise UnknownRoleError(f"unknown role {self.role!r}; use one of 'system', 'user', 'assistant', 'tool'")
        contents = self.contents
        if isinstance(contents, str):
            contents = (TextContent(contents),)
        elif not isinstance(contents, tuple):
            if not isinstance(contents, Iterable):
                raise InvalidMessageError(
                    f"Message.contents must be a string or a sequence of contents, got {contents!r}"
                )
            contents = tuple(contents)
        for item in contents:
            if not isinstance(item, _CONTENT_TYPES):
                raise InvalidMessageError(
                    f"Message.contents holds {type(item).__name__} {item!r}; use one of "
                    + ", ".join(t.__name__ for t in _CONTENT_TYPES)
                )
        object.__setattr__(self, "contents", contents)
        if self.author_name is not None:
            _require_str(self.author_name, "Message.author_name")
        if self.message_id is not None:
            _require_str(self.message_id, "Message.message_id")
        if self.additional_properties is not _EMPTY:
            object.__setattr__(
                self,
                "additional_properties",
                _frozen(self.additional_properties, "Message.additional_properties"),
            )
        if self.extra is not _EMPTY:
            object.__setattr__(self, "extra", _frozen(self.extra, "Message.extra"))

    # Convenience constructors -------------------------------------------------------------

    @classmethod
    def system(cls, text: str, **kwargs: Any) -> Message:
        return cls("system", (TextContent(text),), **kwargs)

    @classmethod
    def user(cls, text: str, **kwargs: Any) -> Message:
        return cls("user", (TextContent(text),), **kwargs)

    @classmethod
    def assistant(
        cls,
        text: str | None = None,
        *,
        calls: Sequence[FunctionCallContent] = (),
        reasoning: str | None = None,
        **kwargs: Any,
    ) -> Message:
        contents: list[Content] = []
        if reasoning is not None:
            contents.append(ReasoningContent(reasoning))
        if text is not None:
            contents.append(TextContent(text))
        contents.extend(calls)
        return cls("assistant", tuple(contents), **kwargs)

    @classmethod
    def tool(cls, call_id: str, result: str, **kwargs: Any) -> Message:
        return cls("tool", (FunctionResultContent(call_id, result),), **kwargs)

    # Views ----------------------------------------------------------------------------------

    @property
    def text(self) -> str:
        """The visible text: every text content joined, or a tool message's results."""
        parts = [c.text for c in self.contents if isinstance(c, TextContent)]
        if not parts and self.role == "tool":
            parts = [c.result for c in self.contents if isinstance(c, FunctionResultContent)]
        return "".join(parts) if len(parts) != 1 else parts[0]

    @property
    def function_calls(self) -> tuple[FunctionCallContent, ...]:
        return tuple(c for c in self.contents if isinstance(c, FunctionCallContent))

    @property
    def function_results(self) -> tuple[FunctionResultContent, ...]:
        return tuple(c for c in self.contents if isinstance(c, FunctionResultContent))

    @property
    def opened_ids(self) -> list[str]:
        """Ids of the calls and approval requests this message opens (see :func:`opened_ids`)."""
        return opened_ids(self.contents)

    @property
    def answered_ids(self) -> list[str]:
        """Ids of the calls and approval requests this message answers (see :func:`answered_ids`)."""
        return answered_ids(self.contents)

    @property
    def is_summary(self) -> bool:
        return self.role == "assistant" and self.additional_properties.get(SUMMARY_PROPERTY) is True

    @property
    def is_reasoning_only(self) -> bool:
        """An assistant message that carries reasoning and nothing else."""
        return (
            self.role == "assistant"
            and bool(self.contents)
            and all(isinstance(c, ReasoningContent) for c in self.contents)
        )

    def payload_texts(self) -> Iterator[str]:
        """Every string the model reads from this message: text, reasoning, call names and arguments,
        results.  Token and byte counts are taken over these, never over JSON syntax."""
        for c in self.contents:
            if isinstance(c, (TextContent, ReasoningContent)):
                yield c.text
            elif isinstance(c, FunctionCallContent):
                yield c.name
                yield c.arguments
            elif isinstance(c, FunctionResultContent):
                yield c.result
            elif isinstance(c, HostedCallContent):
                yield c.name
                yield c.arguments
            elif isinstance(c, HostedResultContent):
                yield c.output
            elif isinstance(c, ApprovalRequestContent):
                yield c.call.name
                yield c.call.arguments
            elif isinstance(c, ApprovalResponseContent):
                continue
            else:
                text = c.data.get("text")
                if isinstance(text, str):
                    yield text


_set_token_memo = Message.__dict__["_token_memo"].__set__
set_token_memo: Callable[[Message, tuple[object, int]], None] = _set_token_memo
"""Record a message's token count for a tokenizer (the memo is invisible to equality and output)."""


class _TextContentFields:
    """TextContent's slots on a class that lets them be assigned (see assistant_text_message)."""

    __slots__ = TextContent.__slots__
    text: str
    type: str


class _MessageFields:
    """Message's slots on a class that lets them be assigned (see assistant_text_message)."""

    __slots__ = Message.__slots__
    role: str
    contents: tuple[object, ...]
    author_name: str | None
    message_id: str | None
    additional_properties: Mapping[str, Any]
    extra: Mapping[str, Any]
    content_form: str | None
    _token_memo: tuple[object, int] | None


def assistant_text_message(
    text: str, properties: Mapping[str, Any], token_memo: tuple[object, int] | None = None
) -> Message:
    """An assistant text message built from parts the library already validated.

    Compaction writes one such message per collapsed group, thousands per call on
    long histories; this skips the re-validation a caller-supplied message gets.
    ``properties`` must already be read-only (a ``MappingProxyType``); ``token_memo`` is the
    count a tokenizer would record for it, when the caller already knows it.

    A frozen dataclass only takes its fields through a descriptor call each, which
    costs more than the rest of the work; so the fields are assigned on a plain
    object with the very same slots, which then becomes the frozen class (same
    layout, so Python allows the switch).  The result is an ordinary ``Message``.
    """
    content = _TextContentFields()
    content.text = text
    content.type = "text"
    content.__class__ = TextContent  # type: ignore[assignment]
    message = _MessageFields()
    message.role = "assistant"
    message.contents = (content,)
    message.author_name = None
    message.message_id = None
    message.additional_properties = properties
    message.extra = _EMPTY
    message.content_form = None
    message._token_memo = token_memo
    message.__class__ = Message  # type: ignore[assignment]
    return message  # type: ignore[return-value]


# OpenAI conversion --------------------------------------------------------------------------

_KNOWN_KEYS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content"})


# Hosted calls, their results and approvals travel in Chat Completions as content parts of these
# types; each part holds the content's fields and, beside them, its ``data`` (provider fields).
_HOSTED_PART_FIELDS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "hosted_call": ("type", "call_id", "tool", "name", "arguments"),
        "hosted_result": ("type", "call_id", "tool", "output"),
        "approval_request": ("type", "request_id", "call"),
        "approval_response": ("type", "request_id", "approved", "call"),
    }
)


def _part_data(part: Mapping[str, Any]) -> dict[str, Any]:
    known = _HOSTED_PART_FIELDS[part["type"]]
    return {key: value for key, value in part.items() if key not in known}


def _approval_call(value: object, where: str) -> FunctionCallContent | HostedCallContent:
    if isinstance(value, Mapping) and value.get("type") == "hosted_call":
        call = _parse_hosted_part(value, where)
        assert isinstance(call, HostedCallContent)
        return call
    return _parse_tool_call(value, where)


def _parse_hosted_part(part: Mapping[str, Any], where: str) -> Content:
    """A hosted call, hosted result or approval part (see ``_HOSTED_PART_FIELDS``) as its content."""
    kind = part["type"]
    try:
        if kind == "hosted_call":
            return HostedCallContent(
                part.get("call_id"),  # type: ignore[arg-type]
                part.get("tool"),  # type: ignore[arg-type]
                part.get("name", ""),
                part.get("arguments", ""),
                _part_data(part),
            )
        if kind == "hosted_result":
            return HostedResultContent(
                part.get("call_id"),  # type: ignore[arg-type]
                part.get("tool"),  # type: ignore[arg-type]
                part.get("output", ""),
                _part_data(part),
            )
        if kind == "approval_request":
            if "call" not in part:
                raise InvalidMessageError("an approval request needs the 'call' it asks about")
            return ApprovalRequestContent(
                part.get("request_id"),  # type: ignore[arg-type]
                _approval_call(part["call"], where),
                _part_data(part),
            )
        call = part.get("call")
        return ApprovalResponseContent(
            part.get("request_id"),  # type: ignore[arg-type]
            part.get("approved"),  # type: ignore[arg-type]
            None if call is None else _approval_call(call, where),
            _part_data(part),
        )
    except InvalidMessageError as error:
        raise InvalidMessageError(f"{where}: {kind} part {dict(part)!r}: {error}") from None


def _hosted_part(content: Content) -> dict[str, Any]:
    """The content part that carries a hosted call, hosted result or approval (inverse of
    ``_parse_hosted_part``); fields left at their default are not written."""
    part: dict[str, Any] = {"type": content.type}
    if isinstance(content, HostedCallContent):
        part.update(call_id=content.call_id, tool=content.tool)
        if content.name:
            part["name"] = content.name
        if content.arguments:
            part["arguments"] = content.arguments
    elif isinstance(content, HostedResultContent):
        part.update(call_id=content.call_id, tool=content.tool)
        if content.output:
            part["output"] = content.output
    elif isinstance(content, ApprovalRequestContent):
        part.update(request_id=content.request_id, call=_call_part(content.call))
    elif isinstance(content, ApprovalResponseContent):
        part.update(request_id=content.request_id, approved=content.approved)
        if content.call is not None:
            part["call"] = _call_part(content.call)
    part.update(_thaw(content.data))  # type: ignore[union-attr]
    return part


def _call_part(call: FunctionCallContent | HostedCallContent) -> dict[str, Any]:
    return _tool_call_item(call) if isinstance(call, FunctionCallContent) else _hosted_part(call)


def _parse_parts(parts: list[Any], where: str) -> list[Content]:
    contents: list[Content] = []
    for position, part in enumerate(parts):
        if not isinstance(part, Mapping):
            raise InvalidMessageError(f"{where}: content part {position} is {part!r}; parts must be objects")
        kind = part.get("type")
        if kind == "text" and set(part) == {"type", "text"}:
            contents.append(TextContent(_require_str(part["text"], f"{where}: content part {position} text")))
        elif isinstance(kind, str) and kind in _HOSTED_PART_FIELDS:
            contents.append(_parse_hosted_part(part, f"{where}: content part {position}"))
        else:
            contents.append(OpaqueContent(part))
    return contents


def _parse_tool_call(item: object, where: str) -> FunctionCallContent:
    if not isinstance(item, Mapping):
        raise InvalidMessageError(f"{where}: each tool_calls entry must be an object, got {item!r}")
    call_id = item.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidMessageError(f"{where}: tool call {item!r} has no string 'id'; every call needs one")
    function = item.get("function")
    if not isinstance(function, Mapping):
        raise InvalidMessageError(f"{where}: tool call {call_id!r} has no 'function' object")
    name = _require_str(function.get("name"), f"{where}: tool call {call_id!r} function.name")
    arguments = function.get("arguments", "{}")
    arguments = _require_str(arguments, f"{where}: tool call {call_id!r} function.arguments")
    kind = item.get("type")
    if "type" in item and not isinstance(kind, str):
        raise InvalidMessageError(f"{where}: tool call {call_id!r} has a non-string 'type' {kind!r}")
    return FunctionCallContent(
        call_id,
        name,
        arguments,
        extra={k: v for k, v in item.items() if k not in ("id", "function", "type")},
        function_extra={k: v for k, v in function.items() if k not in ("name", "arguments")},
        openai_type=kind,
    )


def message_from_openai(data: Mapping[str, Any], *, position: int | None = None) -> Message:
    """Convert one OpenAI Chat Completions message dict; raise :class:`InvalidMessageError` if malformed."""
    where = "message" if position is None else f"message {position}"
    if not isinstance(data, Mapping):
        raise InvalidMessageError(f"{where} must be an object, got {type(data).__name__}: {data!r}")
    role = data.get("role")
    metadata = data.get(_METADATA_KEY) or {}
    if not isinstance(metadata, Mapping):
        raise InvalidMessageError(f"{where}: {_METADATA_KEY!r} must be an object, got {metadata!r}")
    extra = {k: v for k, v in data.items() if k not in _KNOWN_KEYS and k != _METADATA_KEY}
    for key in ("name", "tool_calls", "reasoning_content", "tool_call_id"):
        if key in data and data[key] is None:  # an explicit null (as SDK dumps write) survives the round trip
            extra[key] = None
    if role == "developer":
        extra["role"] = "developer"
        role = "system"
    if role not in ROLES:
        raise UnknownRoleError(
            f"{where}: unknown role {role!r}; OpenAI messages use 'system', 'developer', 'user', 'assistant' or 'tool'"
        )
    author_name = data.get("name")
    if author_name is not None:
        _require_str(author_name, f"{where}: 'name'")
    contents: list[Content] = []
    content = data.get("content", ...)
    form: str
    if content is ...:
        form = "absent"
    elif content is None:
        form = "null"
    elif isinstance(content, str):
        form = "text"
    elif isinstance(content, list):
        form = "parts"
    else:
        raise InvalidMessageError(
            f"{where}: 'content' must be a string, a list of parts or null, got {type(content).__name__}: {content!r}"
        )

    if role == "tool":
        for key in ("tool_calls", "reasoning_content"):
            if data.get(key) is not None:
                raise InvalidMessageError(
                    f"{where}: a tool message carries one result, not {key!r} (got {data[key]!r}); "
                    "put calls and reasoning in an assistant message"
                )
        call_id = data.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidMessageError(
                f"{where}: tool message has no string 'tool_call_id' (got {call_id!r}); "
                "a tool result must name the call it answers"
            )
        if form == "parts":
            parts = _parse_parts(content, where)
            text = "".join(p.text for p in parts if isinstance(p, TextContent))
            contents.append(FunctionResultContent(call_id, text, tuple(_freeze(p) for p in content)))
        else:
            contents.append(FunctionResultContent(call_id, content if form == "text" else ""))
    else:
        if data.get("tool_call_id") is not None:
            raise InvalidMessageError(f"{where}: only tool messages carry 'tool_call_id' (role is {role!r})")
        reasoning = data.get("reasoning_content")
        if reasoning is not None:
            contents.append(ReasoningContent(_require_str(reasoning, f"{where}: 'reasoning_content'")))
        if form == "text":
            contents.append(TextContent(content))
        elif form == "parts":
            contents.extend(_parse_parts(content, where))
        tool_calls = data.get("tool_calls")
        if tool_calls is not None:
            if role != "assistant":
                raise InvalidMessageError(f"{where}: only assistant messages carry 'tool_calls' (role is {role!r})")
            if not isinstance(tool_calls, list):
                raise InvalidMessageError(f"{where}: 'tool_calls' must be a list, got {tool_calls!r}")
            contents.extend(_parse_tool_call(item, where) for item in tool_calls)
            if not tool_calls:
                extra["tool_calls"] = []
    properties = metadata.get("additional_properties")
    if properties is None:
        properties = _EMPTY
    message_id = metadata.get("message_id")
    return Message(
        role,
        tuple(contents),
        author_name=author_name,
        message_id=message_id,
        additional_properties=properties,
        extra=extra,
        content_form=form,
    )


def from_openai(messages: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Convert a list of OpenAI message dicts; the first malformed one raises, naming its position."""
    if isinstance(messages, (str, bytes, Mapping)):
        raise InvalidMessageError("from_openai expects a list of message dicts, not a single value")
    return [message_from_openai(m, position=i) for i, m in enumerate(messages)]


def message_to_openai(message: Message, *, metadata: bool = False) -> dict[str, Any]:
    """Convert one message to an OpenAI dict.

    With ``metadata=True`` the message id and ``additional_properties`` are kept
    under a ``_contextledger`` key (used by JSONL transcripts); leave it off for
    requests to a model, which would reject the unknown key.
    """
    out: dict[str, Any] = {"role": message.role}
    texts: list[Content] = []
    calls: list[FunctionCallContent] = []
    reasoning: list[str] = []
    results: list[FunctionResultContent] = []
    for c in message.contents:
        if isinstance(c, FunctionCallContent):
            calls.append(c)
        elif isinstance(c, ReasoningContent):
            reasoning.append(c.text)
        elif isinstance(c, FunctionResultContent):
            results.append(c)
        else:
            texts.append(c)
    form = message.content_form
    if message.role == "tool":
        unwritable = [c for c in message.contents if not isinstance(c, FunctionResultContent)]
        if unwritable or len(results) > 1:
            # Chat Completions has one result per tool message and nowhere to put anything else.
            raise InvalidMessageError(
                "a tool message can be written to OpenAI's format with exactly one FunctionResultContent; "
                f"this one holds {len(results)} results and {unwritable!r}: move calls and reasoning to an "
                "assistant message and give each result its own tool message"
            )
        result = results[0] if results else None
        if result is not None and result.parts is not None:
            out["content"] = [_thaw(p) for p in result.parts]
        elif form == "null":
            out["content"] = None
        elif form != "absent" or (result is not None and result.result):
            out["content"] = result.result if result is not None else ""
        out["tool_call_id"] = result.call_id if result is not None else ""
    else:
        if reasoning:
            out["reasoning_content"] = "".join(reasoning)
        only_text = all(isinstance(c, TextContent) for c in texts)
        if form is None:
            if not texts:
                form = "null" if calls or reasoning or message.role == "assistant" else "text"
            elif only_text and len(texts) == 1:
                form = "text"
            else:
                form = "parts"
        if form == "parts" or not only_text or len(texts) > 1:
            out["content"] = [_part(c) for c in texts]
        elif form == "text":
            out["content"] = texts[0].text if texts else ""  # type: ignore[union-attr]
        elif form == "null":
            out["content"] = None
        if calls:
            out["tool_calls"] = [_tool_call_item(call) for call in calls]
    if message.author_name is not None:
        out["name"] = message.author_name
    out.update(_thaw(message.extra))
    if metadata:
        block: dict[str, Any] = {}
        if message.message_id is not None:
            block["message_id"] = message.message_id
        if message.additional_properties:
            block["additional_properties"] = _thaw(message.additional_properties)
        if block:
            out[_METADATA_KEY] = block
    return out


def _part(content: Content) -> dict[str, Any]:
    """A content part of a list-of-parts ``content``."""
    if isinstance(content, TextContent):
        return {"type": "text", "text": content.text}
    if isinstance(content, OpaqueContent):
        return _thaw(content.data)  # type: ignore[no-any-return]
    return _hosted_part(content)


def _tool_call_item(call: FunctionCallContent) -> dict[str, Any]:
    """One ``tool_calls`` entry, as it came in (inverse of ``_parse_tool_call``)."""
    item: dict[str, Any] = {"id": call.call_id}
    if call.openai_type is not None:
        item["type"] = call.openai_type
    item["function"] = {"name": call.name, "arguments": call.arguments, **_thaw(call.function_extra)}
    item.update(_thaw(call.extra))
    return item


def to_openai(messages: Iterable[Message], *, metadata: bool = False) -> list[dict[str, Any]]:
    """Convert messages to OpenAI dicts (see :func:`message_to_openai`)."""
    return [message_to_openai(m, metadata=metadata) for m in messages]


# JSONL transcripts ---------------------------------------------------------------------------


def load_jsonl(lines: Iterable[str], *, path: str | None = None) -> list[Message]:
    """Parse OpenAI-format JSONL (one message object per line; blank lines ignored)."""
    messages: list[Message] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as error:
            raise TranscriptError(
                f"not valid JSON ({error.msg} at column {error.colno})", path=path, line=number
            ) from None
        try:
            messages.append(message_from_openai(data))
        except InvalidMessageError as error:
            raise TranscriptError(str(error), path=path, line=number) from None
    return messages


def read_jsonl(path: str | os.PathLike[str]) -> list[Message]:
    """Read a JSONL transcript file; a malformed line raises :class:`TranscriptError` naming it."""
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as handle:
            return load_jsonl(handle, path=name)
    except FileNotFoundError:
        raise TranscriptError("no such file; check the path", path=name) from None
    except UnicodeDecodeError as error:
        raise TranscriptError(f"not UTF-8 text ({error.reason})", path=name) from None


def dump_jsonl(messages: Iterable[Message]) -> str:
    """Serialise messages as JSONL text, keeping ids and additional properties."""
    return "".join(json.dumps(message_to_openai(m, metadata=True), ensure_ascii=False) + "\n" for m in messages)


def write_jsonl(path: str | os.PathLike[str], messages: Iterable[Message]) -> None:
    """Write a transcript atomically: the file appears complete or not at all."""
    text = dump_jsonl(messages)
    target = Path(path)
    try:
        mode = target.stat().st_mode & 0o777  # replacing a file keeps its permissions
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or Path("."))
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


# Validation ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason a message list would be rejected by a chat-completions API."""

    index: int
    code: str
    detail: str

    def __str__(self) -> str:
        return f"message {self.index}: {self.code}: {self.detail}"


def validate(messages: Sequence[Message | Mapping[str, Any]]) -> list[Problem]:
    """Report what makes a message list invalid to send: orphan tool results, calls without all
    their results, duplicate call ids, unknown roles or malformed dicts.

    A tool call's results must follow it, before any other non-tool message
    (reasoning-only assistant messages may sit between them).  An empty list of
    problems means the list is safe to send.
    """
    problems: list[Problem] = []
    pending: dict[str, int] = {}  # call id -> index of the message that made the call
    seen_calls: set[str] = set()
    answered: set[str] = set()

    def close_block() -> None:
        for call_id, where in pending.items():
            problems.append(
                Problem(where, "missing_tool_result", f"tool call {call_id!r} has no result before the next message")
            )
        pending.clear()

    for index, item in enumerate(messages):
        if isinstance(item, Message):
            message = item
        else:
            try:
                message = message_from_openai(item, position=index)
            except InvalidMessageError as error:
                code = "unknown_role" if isinstance(error, UnknownRoleError) else "malformed_message"
                problems.append(Problem(index, code, str(error)))
                continue
        if message.role == "tool":
            for result in message.function_results:
                if result.call_id in pending:
                    del pending[result.call_id]
                    answered.add(result.call_id)
                elif result.call_id in answered:
                    problems.append(
                        Problem(index, "duplicate_tool_result", f"call {result.call_id!r} was already answered")
                    )
                elif result.call_id in seen_calls:
                    problems.append(
                        Problem(
                            index,
                            "misplaced_tool_result",
                            f"result for call {result.call_id!r} does not directly follow its call",
                        )
                    )
                else:
                    problems.append(
                        Problem(index, "orphan_tool_result", f"no preceding call has id {result.call_id!r}")
                    )
            continue
        if message.is_reasoning_only and pending:
            continue
        close_block()
        for call in message.function_calls:
            if call.call_id in seen_calls:
                problems.append(Problem(index, "duplicate_call_id", f"call id {call.call_id!r} is used twice"))
                continue
            seen_calls.add(call.call_id)
            pending[call.call_id] = index
    close_block()
    problems.sort(key=lambda p: p.index)
    return problems
