"""Responses API input items and contextledger messages, converted both ways.

The OpenAI Agents SDK integration and the proxy's ``/v1/responses`` read and write items with
these two functions, so an item means the same thing wherever it is compacted (the mapping is
described in :mod:`contextledger.integrations.openai_agents`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from contextledger.exceptions import InvalidMessageError
from contextledger.messages._contents import (
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
)
from contextledger.messages._contents import thawed as plain
from contextledger.messages._message import Message
from contextledger.messages._openai import result_text

__all__ = [
    "RESPONSES_PROPERTY",
    "Item",
    "from_responses",
    "item_dict",
    "item_runs",
    "joins_calls",
    "kept_as_given",
    "to_responses",
]

RESPONSES_PROPERTY = "_responses"
"""``additional_properties`` key holding, per item a message came from, what the item had that
contextledger has no field for (``id``, ``status``, ``encrypted_content``, part annotations...)."""

Item = dict[str, Any]

# Calls answered by an output item of their own: the call's type, the key of its id, and the hosted
# tool it is (None: a client-side function-like call); each output's type, the key naming its call.
_PAIRED_CALLS: dict[str, tuple[str, str | None]] = {
    "custom_tool_call": ("call_id", None),
    "computer_call": ("call_id", "computer"),
    "local_shell_call": ("call_id", "shell"),
    "shell_call": ("call_id", "shell"),
    "apply_patch_call": ("call_id", "apply_patch"),
}
_OUTPUTS: dict[str, tuple[str, str | None]] = {
    "custom_tool_call_output": ("call_id", None),
    "computer_call_output": ("call_id", "computer"),
    "local_shell_call_output": ("call_id", "shell"),  # older SDKs wrote "id": read below
    "shell_call_output": ("call_id", "shell"),
    "apply_patch_call_output": ("call_id", "apply_patch"),
}
# Hosted calls whose item carries their own outcome (no output item follows): the tool, and the
# field holding the outcome.
_SELF_CONTAINED: dict[str, tuple[str, str | None]] = {
    "web_search_call": ("web_search", None),
    "file_search_call": ("file_search", "results"),
    "code_interpreter_call": ("code_interpreter", "outputs"),
    "image_generation_call": ("image_generation", "result"),
    "mcp_call": ("mcp", "output"),
    "tool_search_call": ("tool_search", None),
}
_CALL_KINDS = (FunctionCallContent, HostedCallContent, ApprovalRequestContent)

_TEXT_TYPES = {"input_text", "output_text"}


def _text_type(role: str) -> str:
    return "output_text" if role == "assistant" else "input_text"


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


# Items to messages ---------------------------------------------------------------------------


def _message_item(item: Mapping[str, Any], where: str) -> tuple[Message, Item]:
    role = item.get("role")
    record: Item = {key: value for key, value in item.items() if key not in ("role", "content")}
    if role == "developer":
        record["role"] = "developer"
        role = "system"
    if role not in ("system", "user", "assistant"):
        raise InvalidMessageError(f"{where}: message role {role!r}; use 'system', 'developer', 'user' or 'assistant'")
    content = item.get("content")
    contents: list[Content] = []
    if isinstance(content, str):
        contents.append(TextContent(content))
        if not content:
            record["empty_text"] = True  # an empty text, as a message holds one: it stores and reads back
    elif not content and isinstance(content, list):
        contents.append(TextContent(""))
        record["empty_list"] = True
    elif isinstance(content, list):
        extras: list[Item | None] = []
        for position, part in enumerate(content):
            if not isinstance(part, Mapping):
                raise InvalidMessageError(f"{where}: content part {position} is {part!r}; parts are objects")
            if part.get("type") in _TEXT_TYPES and isinstance(part.get("text"), str):
                contents.append(TextContent(part["text"]))
                extra = {key: value for key, value in part.items() if key not in ("type", "text")}
                if part["type"] != _text_type(role):
                    extra["type"] = part["type"]
                extras.append(extra or None)
            else:
                contents.append(OpaqueContent(part))
                extras.append(None)
        if any(extras):
            record["parts"] = extras
        if _message_content(contents, role, record) != content:
            record["content_list"] = True
    else:
        raise InvalidMessageError(f"{where}: message content must be a string or a list of parts, got {content!r}")
    return Message(role, tuple(contents)), record


def _item_message(item: Any, where: str) -> tuple[Message, Item] | None:
    """One item as a message and its record, or None for a call item (merged by the caller)."""
    if not isinstance(item, Mapping):
        raise InvalidMessageError(f"{where} is {type(item).__name__}, not a Responses API item (a dict)")
    kind = item.get("type")
    if kind is not None and not isinstance(kind, str):
        raise InvalidMessageError(f"{where}: 'type' must be a string, got {kind!r}")
    if "role" in item and kind in (None, "message"):
        return _message_item(item, where)
    if kind == "function_call_output":
        call_id, output = item.get("call_id"), item.get("output")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidMessageError(f"{where}: function_call_output has no call_id; it must name its call")
        record = {key: value for key, value in item.items() if key not in ("type", "call_id", "output")}
        if isinstance(output, str):
            result = FunctionResultContent(call_id, output)
        elif isinstance(output, list):
            result = FunctionResultContent(call_id, result_text(output), tuple(output))
        else:
            raise InvalidMessageError(f"{where}: function_call_output output must be text or a list, got {output!r}")
        return Message("tool", (result,)), record
    if kind in _OUTPUTS:
        key, tool = _OUTPUTS[kind]
        call_id = item.get(key)
        if kind == "local_shell_call_output" and not isinstance(call_id, str):
            call_id = item.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidMessageError(f"{where}: {kind} has no {key!r}; it must name the call it answers")
        output = _as_text(item.get("output"))
        if tool is None:
            return Message("tool", (FunctionResultContent(call_id, output),)), {"item": dict(item)}
        return Message("assistant", (HostedResultContent(call_id, tool, output),)), {"item": dict(item)}
    if kind == "mcp_approval_response":
        request_id = item.get("approval_request_id")
        if not isinstance(request_id, str) or not request_id:
            raise InvalidMessageError(f"{where}: mcp_approval_response has no approval_request_id")
        response = ApprovalResponseContent(request_id, item.get("approve"))  # type: ignore[arg-type]
        return Message("user", (response,)), {"item": dict(item)}
    if kind in _SELF_CONTAINED and isinstance(item.get("id"), str) and item["id"]:
        tool, outcome = _SELF_CONTAINED[kind]
        name = item.get("name")
        name = name if isinstance(name, str) else ""
        arguments = _as_text(item.get("arguments", item.get("action", item.get("code", item.get("queries", "")))))
        output = "" if outcome is None or item.get(outcome) is None else _as_text(item[outcome])
        call = HostedCallContent(item["id"], tool, name, arguments)
        return Message("assistant", (call, HostedResultContent(item["id"], tool, output))), {"item": dict(item)}
    if kind == "reasoning":
        summary = item.get("summary", [])
        if not isinstance(summary, list) or not all(
            isinstance(p, Mapping) and isinstance(p.get("text"), str) for p in summary
        ):
            raise InvalidMessageError(f"{where}: a reasoning item's summary must be a list of text parts")
        record = {key: value for key, value in item.items() if key not in ("type", "summary")}
        if not summary or any(set(p) != {"type", "text"} or p.get("type") != "summary_text" for p in summary):
            record["summary"] = list(summary)  # kept as it came; an empty summary still marks the message
        parts = [ReasoningContent(p["text"]) for p in summary] or [ReasoningContent("")]
        return Message("assistant", tuple(parts)), record
    if kind in ("function_call", "mcp_approval_request") or kind in _PAIRED_CALLS:
        return None
    if isinstance(kind, str) or (kind is None and "role" not in item and "content" not in item):
        # A self-contained hosted call, an item this module does not know, or an object that is no
        # Responses item at all (the SDK's EncryptedSession stores envelopes with no type): kept
        # whole and handed back as it came, as the SDK's own sessions do.  Content with no role is
        # a message missing its role, and is refused below.
        return Message("assistant", (OpaqueContent(item),)), {"hosted": True}
    raise InvalidMessageError(f"{where} has no 'type' and no 'role'; it is not a Responses API item")


def _call(item: Mapping[str, Any], where: str) -> tuple[Content, Item]:
    kind = item["type"]
    if kind == "function_call":
        call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments", "")
        if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not isinstance(arguments, str):
            raise InvalidMessageError(f"{where}: function_call needs string call_id, name and arguments, got {item!r}")
        record = {key: value for key, value in item.items() if key not in ("type", "call_id", "name", "arguments")}
        return FunctionCallContent(call_id, name, arguments), record
    if kind == "mcp_approval_request":
        request_id, name = item.get("id"), item.get("name")
        if not isinstance(request_id, str) or not request_id or not isinstance(name, str):
            raise InvalidMessageError(f"{where}: mcp_approval_request needs string id and name, got {item!r}")
        call = HostedCallContent(request_id, "mcp", name, _as_text(item.get("arguments", "")))
        return ApprovalRequestContent(request_id, call), {"item": dict(item)}
    key, tool = _PAIRED_CALLS[kind]
    call_id = item.get(key)
    if not isinstance(call_id, str) or not call_id:
        raise InvalidMessageError(f"{where}: {kind} has no {key!r}; its output could not be paired")
    if tool is None:  # a custom tool: run by the client like a function, its input free text
        name = item.get("name")
        return FunctionCallContent(call_id, name if isinstance(name, str) else kind, _as_text(item.get("input", ""))), {
            "item": dict(item)
        }
    arguments = _as_text(item.get("action", item.get("operation", "")))
    return HostedCallContent(call_id, tool, "", arguments), {"item": dict(item)}


def _with_records(message: Message, records: list[Item]) -> Message:
    if not any(records):
        return message
    return Message(message.role, message.contents, additional_properties={RESPONSES_PROPERTY: records})


def joins_calls(item: Any) -> bool:
    """Whether :func:`from_responses` merges ``item`` with the calls beside it (the order of
    ``_item_message``'s tests: a message, an output or a self-contained call is not one)."""
    if type(item) is not dict and not isinstance(item, Mapping):  # a dict is most, and quickest told
        return False
    kind = item.get("type")
    if not isinstance(kind, str) or ("role" in item and kind == "message"):
        return False
    if kind in _SELF_CONTAINED and isinstance(item.get("id"), str) and item["id"]:
        return False
    return kind in ("function_call", "mcp_approval_request") or kind in _PAIRED_CALLS


def item_runs(items: Sequence[Any]) -> list[tuple[int, int]]:
    """The ``(start, end)`` slices of ``items`` that :func:`from_responses` makes one message each
    of: an item alone, or consecutive calls together.  A reader that converts the same items over
    and over (a stateless client's whole input on every request) converts each run once."""
    runs: list[tuple[int, int]] = []
    start = 0
    count = len(items)
    while start < count:
        end = start + 1
        if joins_calls(items[start]):
            while end < count and joins_calls(items[end]):
                end += 1
        runs.append((start, end))
        start = end
    return runs


def from_responses(items: Sequence[Any]) -> list[Message]:
    """Responses API input items as contextledger messages (see the module docstring for the mapping)."""
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
        raise InvalidMessageError(f"expected a list of Responses API items, got {type(items).__name__}")
    messages: list[Message] = []
    calls: list[Content] = []
    call_records: list[Item] = []

    def close_calls() -> None:
        if calls:
            messages.append(_with_records(Message("assistant", tuple(calls)), list(call_records)))
            calls.clear()
            call_records.clear()

    for position, item in enumerate(items):
        where = f"item {position}"
        converted = _item_message(item, where)
        if converted is None:
            call, record = _call(item, where)
            calls.append(call)
            call_records.append(record)
            continue
        close_calls()
        message, record = converted
        messages.append(_with_records(message, [record]))
    close_calls()
    return messages


# Messages to items ---------------------------------------------------------------------------


def _message_content(contents: Sequence[Content], role: str, record: Mapping[str, Any]) -> str | list[Item]:
    extras = list(record.get("parts") or [])
    if not record.get("content_list") and not extras:
        if (record.get("empty_text") or record.get("empty_list")) and contents in ((), (TextContent(""),)):
            return "" if record.get("empty_text") else []
        if len(contents) == 1 and isinstance(contents[0], TextContent) and contents[0].text:
            return contents[0].text
    parts: list[Item] = []
    for position, content in enumerate(contents):
        if isinstance(content, TextContent):
            extra = dict(plain(extras[position])) if position < len(extras) and extras[position] else {}
            part_type = extra.pop("type", _text_type(role))
            parts.append({"type": part_type, "text": content.text, **extra})
        elif isinstance(content, OpaqueContent):
            parts.append(plain(content.data))
        else:
            raise InvalidMessageError(f"a {role} message part cannot be {type(content).__name__} in a Responses item")
    return parts


def _message_items(message: Message) -> list[Item]:
    records: list[Mapping[str, Any]] = list(message.additional_properties.get(RESPONSES_PROPERTY) or ())
    record: Mapping[str, Any] = records[0] if len(records) == 1 else {}
    if record.get("item") is not None:
        return [plain(record["item"])]
    if record.get("hosted") and len(message.contents) == 1 and isinstance(message.contents[0], OpaqueContent):
        return [plain(message.contents[0].data)]
    if message.role == "tool":
        items = []
        for content in message.contents:
            if not isinstance(content, FunctionResultContent):
                raise InvalidMessageError(f"a tool message holds tool results only, not {type(content).__name__}")
            output: Any = content.result if content.parts is None else plain(content.parts)
            items.append({"type": "function_call_output", "call_id": content.call_id, "output": output})
        if len(items) == 1:
            items[0].update(plain(record))
        return items
    if message.role == "assistant" and message.is_reasoning_only:
        item: Item = {"type": "reasoning"}
        rest = {key: value for key, value in plain(record).items() if key != "summary"}
        if "summary" in record:
            item["summary"] = plain(record["summary"])
        else:
            item["summary"] = [{"type": "summary_text", "text": c.text} for c in message.contents]  # type: ignore[union-attr]
        if message.message_id is not None and "id" not in rest:
            item["id"] = message.message_id
        return [{**item, **rest}]
    calls = [c for c in message.contents if isinstance(c, _CALL_KINDS)]
    if calls and len(calls) == len(message.contents):
        items = []
        for position, call in enumerate(calls):
            call_record: Mapping[str, Any] = records[position] if position < len(records) else {}
            if call_record.get("item") is not None:
                items.append(plain(call_record["item"]))
                continue
            if not isinstance(call, FunctionCallContent):
                items.append(_native_item(call))
                continue
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": call.arguments,
                    **plain(call_record),
                }
            )
        return items
    if any(isinstance(c, (*_CALL_KINDS, ReasoningContent, FunctionResultContent)) for c in message.contents):
        return _split(message)
    if any(isinstance(c, (HostedResultContent, ApprovalResponseContent)) for c in message.contents):
        return [_native_item(c) for c in message.contents]
    role = "developer" if record.get("role") == "developer" else message.role
    marks = ("role", "parts", "content_list", "empty_text", "empty_list")
    head = {key: value for key, value in plain(record).items() if key not in marks}
    return [{"role": role, "content": _message_content(message.contents, message.role, record), **head}]


def _split(message: Message) -> list[Item]:
    """A message with several kinds of content: one item per run of one kind, in order."""
    items: list[Item] = []
    run: list[Content] = []

    def flush() -> None:
        if run:
            items.extend(_message_items(Message(message.role, tuple(run))))
            run.clear()

    for content in message.contents:
        if isinstance(content, FunctionResultContent):
            raise InvalidMessageError(f"an {message.role} message cannot carry a tool result in a Responses item")
        if isinstance(content, (HostedResultContent, ApprovalResponseContent)):
            answers_last_call = (
                isinstance(content, HostedResultContent)
                and bool(run)
                and isinstance(run[-1], HostedCallContent)
                and run[-1].call_id == content.call_id
                and content.tool in _SELF_CONTAINED_TOOLS
            )
            if not answers_last_call:  # a self-contained hosted call's outcome travels in its call item
                flush()
                items.append(_native_item(content))
            continue
        if run and _kind(content) != _kind(run[-1]):
            flush()
        run.append(content)
    flush()
    return items


def _kind(content: Content) -> str:
    """Which item a content goes to: reasoning, a call, or a message."""
    if isinstance(content, ReasoningContent):
        return "reasoning"
    return "call" if isinstance(content, _CALL_KINDS) else "message"


_SELF_CONTAINED_TOOLS = frozenset(tool for tool, _ in _SELF_CONTAINED.values())
_HOSTED_ITEM_TYPES = {
    "computer": ("computer_call", "call_id"),
    "shell": ("shell_call", "call_id"),
    "apply_patch": ("apply_patch_call", "call_id"),
    **{tool: (kind, "id") for kind, (tool, _) in _SELF_CONTAINED.items()},
}


def _native_item(content: Content) -> Item:
    """The item for a hosted call, result or approval that did not come from a Responses item
    (from another framework, say): its type from the tool, its provider fields from ``data``."""
    if isinstance(content, HostedCallContent):
        kind, key = _HOSTED_ITEM_TYPES.get(content.tool, (f"{content.tool}_call", "call_id"))
        item: Item = {"type": kind, key: content.call_id, **plain(content.data)}
        if content.name:
            item["name"] = content.name
        if content.arguments:
            item["arguments"] = content.arguments
        return item
    if isinstance(content, HostedResultContent):
        kind, key = _HOSTED_ITEM_TYPES.get(content.tool, (f"{content.tool}_call", "call_id"))
        return {"type": f"{kind}_output", key: content.call_id, "output": content.output, **plain(content.data)}
    if isinstance(content, ApprovalRequestContent):
        return {
            "type": "mcp_approval_request",
            "id": content.request_id,
            "name": content.call.name,
            "arguments": content.call.arguments,
            **plain(content.data),
        }
    if isinstance(content, ApprovalResponseContent):
        return {
            "type": "mcp_approval_response",
            "approval_request_id": content.request_id,
            "approve": content.approved,
            **plain(content.data),
        }
    raise InvalidMessageError(f"{type(content).__name__} has no Responses API item of its own")


def to_responses(messages: Sequence[Message]) -> list[Item]:
    """contextledger messages as Responses API input items; items that came from
    :func:`from_responses` come back exactly as they were."""
    items: list[Item] = []
    for position, message in enumerate(messages):
        if not isinstance(message, Message):
            raise InvalidMessageError(f"message {position} is {type(message).__name__}, not a contextledger Message")
        items.extend(_message_items(message))
    return items


def item_dict(item: Any) -> Any:
    """An item as a plain dict (the SDK may hand over pydantic models)."""
    if hasattr(item, "model_dump"):
        return item.model_dump(exclude_unset=True)
    return item


def kept_as_given(projected: Sequence[Item], items: Sequence[Item], given: Sequence[Any] | None = None) -> list[Any]:
    """``projected`` (what :func:`to_responses` wrote for a compaction of ``items``: the kept items
    in order, and summaries) with each kept item replaced by the object it came from, ``given[i]``
    for ``items[i]`` (``items`` themselves by default).  Callers that track items by identity (the
    Agents SDK) or forward them byte for byte (the proxy) get back exactly what they sent."""
    originals = items if given is None else given
    positions: dict[str, list[int]] = {}
    for number, item in enumerate(items):
        positions.setdefault(_fingerprint(item), []).append(number)
    out: list[Any] = []
    after = 0
    for item in projected:
        found = next((n for n in positions.get(_fingerprint(item), ()) if n >= after), None)
        if found is None:
            out.append(item)  # a summary the strategy wrote
            continue
        out.append(originals[found])
        after = found + 1
    return out


def _fingerprint(item: Item) -> str:
    return json.dumps(item, sort_keys=True, ensure_ascii=False, default=repr)
