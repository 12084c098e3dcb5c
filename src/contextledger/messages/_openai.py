"""Lossless conversion between messages and OpenAI Chat Completions message dicts.

Several ``tool_calls`` in one message, ``tool_call_id``, ``name``, list-of-parts content,
``reasoning_content`` and any key this module does not know are all kept and written back as they
came.  Hosted calls, their results and approvals have no Chat Completions field, so they travel as
content parts of our own (``{"type": "hosted_call", ...}``) that convert back to the same contents.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from contextledger.exceptions import InvalidMessageError, UnknownRoleError
from contextledger.messages._contents import (
    _EMPTY,
    ApprovalRequestContent,
    ApprovalResponseContent,
    Content,
    FunctionCallContent,
    FunctionResultContent,
    HostedCallContent,
    HostedResultContent,
    OpaqueContent,
    ReasoningContent,
    TextContent,
    _freeze,
    _require_str,
    thawed,
)
from contextledger.messages._message import ROLES, Message

# What other packages of contextledger may import from here (internal, not part of the public API).
__all__ = [
    "message_from_openai",
    "message_to_openai",
    "result_text",
]

# The key under which to_openai(..., metadata=True) keeps what OpenAI has no field for.
_METADATA_KEY = "_contextledger"

_ROLE_NAMES = tuple(sorted(ROLES))

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
    part.update(thawed(content.data))  # type: ignore[union-attr]
    return part


def _call_part(call: FunctionCallContent | HostedCallContent) -> dict[str, Any]:
    return _tool_call_item(call) if isinstance(call, FunctionCallContent) else _hosted_part(call)


RESULT_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
"""Part types whose ``text`` makes up a structured tool result's text, in every format read here."""


def result_text(parts: Iterable[Any]) -> str:
    """The text of a tool result given as parts: its text-like parts, joined."""
    return "".join(
        part["text"]
        for part in parts
        if isinstance(part, Mapping)
        and isinstance(part.get("type"), str)  # a type that is an object is no text part (and unhashable)
        and part["type"] in RESULT_TEXT_PARTS
        and isinstance(part.get("text"), str)
    )


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
    if role not in _ROLE_NAMES:  # a tuple, not the frozenset: a list or object role is refused, not unhashable
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
            _parse_parts(content, where)  # refuses what is not a part
            contents.append(FunctionResultContent(call_id, result_text(content), tuple(_freeze(p) for p in content)))
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
        if "order" in metadata or "reasoning" in metadata:
            contents = _in_written_order(contents, metadata, where)
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


def _written_order(contents: Sequence[Content]) -> tuple[list[str] | None, list[str] | None]:
    """What a stored message needs beside its OpenAI fields to read back as it was: the order of
    its contents when it is not the one the fields give (reasoning, then content parts, then tool
    calls), and its reasoning parts when there are several (the field joins them)."""
    if len(contents) < 2:
        return None, None
    kinds = [_ORDER_KINDS.get(type(c), "p") for c in contents]
    order = kinds if kinds != sorted(kinds, key=_ORDER_RANK.__getitem__) else None
    reasoning = [c.text for c in contents if isinstance(c, ReasoningContent)]
    return order, reasoning if len(reasoning) > 1 else None


def _in_written_order(contents: list[Content], metadata: Mapping[str, Any], where: str) -> list[Content]:
    """Inverse of :func:`_written_order`: the contents as they were before they were written."""
    reasoning = metadata.get("reasoning")
    order = metadata.get("order")
    queues: dict[str, list[Content]] = {kind: [] for kind in _ORDER_RANK}
    for content in contents:
        queues[_ORDER_KINDS.get(type(content), "p")].append(content)
    if reasoning is not None:
        if not isinstance(reasoning, list) or not all(isinstance(text, str) for text in reasoning):
            raise InvalidMessageError(
                f"{where}: {_METADATA_KEY}.reasoning must be a list of strings, got {reasoning!r}"
            )
        if "".join(reasoning) != "".join(c.text for c in queues["r"] if isinstance(c, ReasoningContent)):
            raise InvalidMessageError(f"{where}: {_METADATA_KEY}.reasoning does not match 'reasoning_content'")
        queues["r"] = [ReasoningContent(text) for text in reasoning]
    if order is None:
        return [content for kind in _ORDER_RANK for content in queues[kind]]
    if not isinstance(order, list) or sorted(order, key=lambda kind: _ORDER_RANK.get(kind, 9)) != [
        k for k in _ORDER_RANK for _ in queues[k]
    ]:
        raise InvalidMessageError(f"{where}: {_METADATA_KEY}.order {order!r} does not match the message's contents")
    taken = {kind: iter(queue) for kind, queue in queues.items()}
    return [next(taken[kind]) for kind in order]


_ORDER_KINDS: dict[type, str] = {ReasoningContent: "r", FunctionCallContent: "c"}
_ORDER_RANK = {"r": 0, "p": 1, "c": 2}


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
            out["content"] = [thawed(p) for p in result.parts]
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
    out.update(thawed(message.extra))
    if metadata:
        block: dict[str, Any] = {}
        if message.message_id is not None:
            block["message_id"] = message.message_id
        if message.additional_properties:
            block["additional_properties"] = thawed(message.additional_properties)
        if message.role != "tool":
            order, parts = _written_order(message.contents)
            if order is not None:
                block["order"] = order
            if parts is not None:
                block["reasoning"] = parts
        if block:
            out[_METADATA_KEY] = block
    return out


def _part(content: Content) -> dict[str, Any]:
    """A content part of a list-of-parts ``content``."""
    if isinstance(content, TextContent):
        return {"type": "text", "text": content.text}
    if isinstance(content, OpaqueContent):
        return thawed(content.data)  # type: ignore[no-any-return]
    return _hosted_part(content)


def _tool_call_item(call: FunctionCallContent) -> dict[str, Any]:
    """One ``tool_calls`` entry, as it came in (inverse of ``_parse_tool_call``)."""
    item: dict[str, Any] = {"id": call.call_id}
    if call.openai_type is not None:
        item["type"] = call.openai_type
    item["function"] = {"name": call.name, "arguments": call.arguments, **thawed(call.function_extra)}
    item.update(thawed(call.extra))
    return item


def to_openai(messages: Iterable[Message], *, metadata: bool = False) -> list[dict[str, Any]]:
    """Convert messages to OpenAI dicts (see :func:`message_to_openai`)."""
    return [message_to_openai(m, metadata=metadata) for m in messages]
