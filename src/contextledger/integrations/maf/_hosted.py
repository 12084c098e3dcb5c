"""MAF's hosted tool calls, their outputs and approvals, as contextledger's typed contents and back.

MAF has one content type per hosted tool (``mcp_server_tool_call``,
``code_interpreter_tool_result``, ``search_tool_call``...); contextledger has two
(:class:`HostedCallContent`, :class:`HostedResultContent`) told apart by ``tool``,
plus the two approval contents.  The id a result answers becomes ``call_id``; the
tool's own name (an MCP tool) ``name``; its input and output, as text, ``arguments``
and ``output``, so compaction can group, count and summarise them.

Nothing is lost either way.  A MAF field the typed attributes do not hold exactly
(structured arguments, a list of output contents, a server name, a status) is
kept in ``data`` under MAF's own key, and goes back to that field; a key of
``data`` MAF has no field for travels in the content's additional properties.
Text is the canonical form: a plain string (or one plain text content, where
MAF takes a list of contents) converts to the typed attribute alone.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import agent_framework as maf

from contextledger.exceptions import InvalidMessageError
from contextledger.integrations._shared import plain
from contextledger.messages import (
    ApprovalRequestContent,
    ApprovalResponseContent,
    Content,
    FunctionCallContent,
    HostedCallContent,
    HostedResultContent,
)

DATA_PROPERTY: Final = "_contextledger_data"
"""Key in a MAF content's ``additional_properties`` holding the ``data`` keys MAF has no field for."""

MAF_TYPE_KEY: Final = "maf_type"
"""Key in ``data`` naming MAF's content type when the tool alone does not say it."""


@dataclass(frozen=True, slots=True)
class _Kind:
    """How one MAF content type maps: which tool, whether call or result, and its fields."""

    tool: str | None  # None: the tool is the MAF ``tool_name`` field (search)
    is_call: bool
    id_field: str
    text_field: str | None  # the field read as arguments (a call) or output (a result)
    text_is_list: bool  # MAF takes a list of contents there; a lone plain text is the canonical form
    name_field: str | None = None


_KINDS: Final[dict[str, _Kind]] = {
    "mcp_server_tool_call": _Kind("mcp", True, "call_id", "arguments", False, "tool_name"),
    "mcp_server_tool_result": _Kind("mcp", False, "call_id", "output", False),
    "code_interpreter_tool_call": _Kind("code_interpreter", True, "call_id", "inputs", True),
    "code_interpreter_tool_result": _Kind("code_interpreter", False, "call_id", "outputs", True),
    "image_generation_tool_call": _Kind("image_generation", True, "image_id", None, False),
    "image_generation_tool_result": _Kind("image_generation", False, "image_id", "outputs", True),
    "search_tool_call": _Kind(None, True, "call_id", "arguments", False),
    "search_tool_result": _Kind(None, False, "call_id", "result", False),
    "shell_tool_call": _Kind("shell", True, "call_id", "commands", False),
    "shell_tool_result": _Kind("shell", False, "call_id", "outputs", True),
    "computer_tool_call": _Kind("computer", True, "call_id", "actions", False),
    "computer_tool_result": _Kind("computer", False, "call_id", "screenshot", False),
}
HOSTED_TYPES: Final = frozenset(_KINDS) | {"function_approval_request", "function_approval_response"}

# The MAF type written for a tool when ``data`` does not name one.
_DEFAULT_TYPE: Final[dict[tuple[str, bool], str]] = {
    (kind.tool, kind.is_call): name for name, kind in _KINDS.items() if kind.tool is not None
}
_SEARCH_TOOLS: Final = frozenset({"web_search", "file_search"})
_ABSENT: Final = object()
_TEXT_KEY: Final = {True: "arguments", False: "output"}
# Fields MAF writes with these values whatever it is given: derived, so not kept in ``data``.
_DEFAULTS: Final[dict[str, Any]] = {"user_input_request": True}


def _text_of(value: Any) -> str:
    """What a model reads of a MAF field: strings as they are, contents by their text, else JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return "\n".join(value)  # shell commands
    if isinstance(value, list):
        return "\n".join(_text_of(item) for item in value)
    if isinstance(value, Mapping):
        if value.get("type") == "text":
            return str(value.get("text") or "")
        if value.get("type") == "shell_command_output":
            return "\n".join(str(value[key]) for key in ("stdout", "stderr") if value.get(key))
        if value.get("type") == "uri":
            return str(value.get("uri") or "")
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _is_plain_text(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and set(value) <= {"type", "text", "additional_properties"}
        and value.get("type") == "text"
        and isinstance(value.get("text"), str)
        and not value.get("additional_properties")
    )


def _text_and_rest(kind: _Kind, field: str, value: Any) -> tuple[str, Any]:
    """The typed text for a MAF field, and what ``data`` must keep of it (``_ABSENT``: nothing)."""
    if value is None:
        return "", _ABSENT
    if isinstance(value, str) and not kind.text_is_list and field != "commands":
        return value, _ABSENT
    if (
        field == "commands"
        and isinstance(value, list)
        and all(isinstance(item, str) for item in value)
        and value not in ([], [""])
        and not any("\n" in item for item in value)
    ):
        return "\n".join(value), _ABSENT
    if kind.text_is_list and isinstance(value, list) and len(value) == 1 and _is_plain_text(value[0]):
        return value[0]["text"], _ABSENT
    return _text_of(value), value


def _field_of(kind: _Kind, field: str, text: str) -> Any:
    """The MAF field value for a typed text that ``data`` did not override (the canonical form)."""
    if not text:
        return None
    if field == "commands":
        return text.split("\n")
    if kind.text_is_list:
        return [{"type": "text", "text": text, "additional_properties": {}}]
    return text


def hosted_from_maf(data: Mapping[str, Any]) -> Content | None:
    """A hosted call, result or approval of MAF's (as ``Content.to_dict()``) as contextledger's content;
    None when it carries no id to pair by (MAF allows that), so the caller carries it opaquely."""
    kind_name = data["type"]
    if kind_name in ("function_approval_request", "function_approval_response"):
        return _approval_from_maf(data)
    kind = _KINDS[kind_name]
    rest = {key: value for key, value in data.items() if key not in ("type", "additional_properties")}
    properties = data.get("additional_properties") or {}
    stashed = properties.get(DATA_PROPERTY) if isinstance(properties, Mapping) else None
    if isinstance(stashed, Mapping):
        rest.update(stashed)
    call_id = rest.pop(kind.id_field, None)
    if not isinstance(call_id, str) or not call_id:
        return None
    tool = kind.tool
    if tool is None:  # search: the tool is the content's tool_name
        tool_name = rest.pop("tool_name", None)
        tool = tool_name if isinstance(tool_name, str) and tool_name else "web_search"
        if tool not in _SEARCH_TOOLS or tool_name != tool:
            rest[MAF_TYPE_KEY] = kind_name
            if tool_name != tool:
                rest["tool_name"] = tool_name
    elif _DEFAULT_TYPE[(tool, kind.is_call)] != kind_name:
        rest[MAF_TYPE_KEY] = kind_name
    text = ""
    if kind.text_field is not None:
        text, kept = _text_and_rest(kind, kind.text_field, rest.pop(kind.text_field, None))
        if kept is not _ABSENT:
            rest[kind.text_field] = kept
    elif isinstance(rest.get(_TEXT_KEY[kind.is_call]), str):  # MAF has no field for it: it came stashed
        text = rest.pop(_TEXT_KEY[kind.is_call])
    for key, value in _DEFAULTS.items():
        if rest.get(key, _ABSENT) == value:
            del rest[key]
    if kind.is_call:
        name = ""
        value = rest.pop(kind.name_field or "name", None)
        if isinstance(value, str):
            name = value
        elif value is not None:
            rest[kind.name_field or "name"] = value
        return HostedCallContent(call_id, tool, name=name, arguments=text, data=rest)
    return HostedResultContent(call_id, tool, output=text, data=rest)


def _approval_from_maf(data: Mapping[str, Any]) -> Content | None:
    request_id = data.get("id")
    if not isinstance(request_id, str) or not request_id:
        return None
    rest = {
        key: value
        for key, value in data.items()
        if key not in ("type", "id", "function_call", "approved", "additional_properties")
        and _DEFAULTS.get(key, _ABSENT) != value
    }
    call_data = data.get("function_call")
    call = _call_from_maf(call_data) if isinstance(call_data, Mapping) else None
    approved = data.get("approved")
    if data["type"] == "function_approval_request":
        return None if call is None else ApprovalRequestContent(request_id, call, data=rest)
    if not isinstance(approved, bool) or (call_data is not None and call is None):
        return None
    return ApprovalResponseContent(request_id, approved, call, data=rest)


def _call_from_maf(data: Mapping[str, Any]) -> FunctionCallContent | HostedCallContent | None:
    """The call an approval holds; None when it is no call contextledger can pair (no id)."""
    if data.get("type") == "function_call":
        call_id, name, arguments = data.get("call_id"), data.get("name"), data.get("arguments")
        if not isinstance(call_id, str) or not call_id:
            return None
        text = arguments if isinstance(arguments, str) else "{}" if arguments is None else json.dumps(arguments)
        return FunctionCallContent(call_id, name if isinstance(name, str) else "", text)
    if data.get("type") in _KINDS and _KINDS[data["type"]].is_call:
        converted = hosted_from_maf(data)
        return converted if isinstance(converted, HostedCallContent) else None
    return None


def hosted_to_maf(content: Content, where: str) -> maf.Content:
    """The MAF content for a hosted call, result or approval (see :func:`hosted_from_maf`)."""
    if isinstance(content, (ApprovalRequestContent, ApprovalResponseContent)):
        built: dict[str, Any] = {
            "type": "function_approval_request"
            if isinstance(content, ApprovalRequestContent)
            else "function_approval_response",
            "id": content.request_id,
            **plain(content.data),
        }
        if content.call is not None:
            built["function_call"] = _call_to_maf(content.call, where).to_dict()
        if isinstance(content, ApprovalResponseContent):
            built["approved"] = content.approved
        else:
            built.setdefault("user_input_request", True)
        return _from_dict(built, {}, where)
    if not isinstance(content, (HostedCallContent, HostedResultContent)):
        raise InvalidMessageError(f"{where}: {content!r} is not a hosted call, result or approval")
    is_call = isinstance(content, HostedCallContent)
    rest = plain(content.data)
    kind_name = rest.pop(MAF_TYPE_KEY, None)
    if kind_name is None:
        if content.tool in _SEARCH_TOOLS:
            kind_name = "search_tool_call" if is_call else "search_tool_result"
        else:
            kind_name = _DEFAULT_TYPE.get((content.tool, is_call))
    if kind_name not in _KINDS or _KINDS[kind_name].is_call != is_call:
        raise InvalidMessageError(
            f"{where}: hosted tool {content.tool!r} has no Agent Framework content type; MAF knows "
            f"{sorted({kind.tool for kind in _KINDS.values() if kind.tool} | _SEARCH_TOOLS)}"
        )
    kind = _KINDS[kind_name]
    built = {"type": kind_name, kind.id_field: content.call_id}
    if kind.tool is None and "tool_name" not in rest:
        built["tool_name"] = content.tool
    text = content.arguments if isinstance(content, HostedCallContent) else content.output
    if kind.text_field is None:
        if text:
            rest[_TEXT_KEY[is_call]] = text
    elif kind.text_field not in rest:
        value = _field_of(kind, kind.text_field, text)
        if value is not None:
            built[kind.text_field] = value
    if isinstance(content, HostedCallContent) and (kind.name_field or "name") not in rest:
        if kind.name_field is not None:
            built[kind.name_field] = content.name
        elif content.name:
            rest["name"] = content.name
    if kind_name == "computer_tool_call":
        built["user_input_request"] = True
    return _from_dict(built, rest, where)


def _call_to_maf(call: FunctionCallContent | HostedCallContent, where: str) -> maf.Content:
    if isinstance(call, FunctionCallContent):
        return maf.Content.from_function_call(call.call_id, call.name, arguments=call.arguments)
    return hosted_to_maf(call, where)


def _from_dict(built: dict[str, Any], rest: dict[str, Any], where: str) -> maf.Content:
    """Build the MAF content from its fields plus ``rest``; keys of ``rest`` MAF has no field for, or
    drops, are stashed in its additional properties."""
    fields = {key: value for key, value in rest.items() if key in _CONTENT_FIELDS}
    try:
        content = maf.Content.from_dict({**fields, **built})
    except Exception as error:
        raise InvalidMessageError(
            f"{where}: Agent Framework cannot build {built['type']} from {rest!r}: {error}"
        ) from error
    kept = content.to_dict()
    lost = {key: value for key, value in rest.items() if kept.get(key, _ABSENT) != value}
    if lost:
        content.additional_properties[DATA_PROPERTY] = lost
    return content


_CONTENT_FIELDS: Final = frozenset(inspect.signature(maf.Content.__init__).parameters) - {
    "self",
    "type",
    "additional_properties",
    "raw_representation",
}
