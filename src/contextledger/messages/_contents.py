"""The contents a message holds: text, reasoning, tool calls and results, hosted calls and their
results, approvals, and opaque parts carried as they came.

Every content is a frozen value; mappings inside one (``extra``, ``data``) are frozen deep copies,
so no caller can change a content after handing it in.  The helpers that freeze and thaw JSON-like
data live here because the contents need them first; the OpenAI codec uses them to write the same
data back out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, TypeAlias

from contextledger.exceptions import InvalidMessageError

# What other packages of contextledger may import from here (internal, not part of the public API).
__all__ = [
    "HOSTED_TOOLS",
    "answered_ids",
    "opened_ids",
    "thawed",
]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _freeze(value: Any) -> Any:
    """A read-only deep copy of JSON-like data: mappings become read-only, lists become tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: _freeze(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(item) for item in value)
    return value


def thawed(value: Any) -> Any:
    """A fresh, mutable deep copy of frozen JSON-like data (read-only mappings and tuples become
    dicts and lists, as JSON has), for output or for a caller that will change it."""
    if isinstance(value, Mapping):
        return {key: thawed(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [thawed(item) for item in value]
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
    request id and the id of the call it holds (that call's results answer it too).  An approval
    request whose id is its call's id (as a Responses ``mcp_approval_request`` is read) opens that
    id once: one id naming both is not the same id opened twice."""
    ids: list[str] = []
    for c in contents:
        if isinstance(c, (FunctionCallContent, HostedCallContent)):
            ids.append(c.call_id)
        elif isinstance(c, ApprovalRequestContent):
            ids.append(c.request_id)
            if c.call.call_id != c.request_id:
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
