"""LangChain messages and contextledger's, converted both ways without loss."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from contextledger.exceptions import InvalidMessageError
from contextledger.integrations._shared import plain
from contextledger.messages import (
    Content,
    FunctionCallContent,
    FunctionResultContent,
    HostedCallContent,
    HostedResultContent,
    Message,
    OpaqueContent,
    ReasoningContent,
    TextContent,
)

__all__ = [
    "LANGCHAIN_PROPERTY",
    "METADATA_KEY",
    "from_langchain",
    "from_langchain_message",
    "to_langchain",
    "to_langchain_message",
]

LANGCHAIN_PROPERTY = "_langchain"
"""``additional_properties`` key holding what a LangChain message had that contextledger has no field for."""

METADATA_KEY = "contextledger"
"""``response_metadata`` key holding what a contextledger message had that LangChain has no field for."""

_ROLES = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}


def _block_content(block: Any, position: int, where: str, typed: bool = True, tools: Mapping[str, str] = {}) -> Content:
    if isinstance(block, str):
        return TextContent(block)
    if not isinstance(block, Mapping):
        raise InvalidMessageError(f"{where}: content block {position} is {block!r}; blocks are strings or dicts")
    hosted = _hosted_content(block, tools) if typed else None  # a tool result holds no calls
    if hosted is not None:
        return hosted
    keys = set(block)
    if keys == {"type", "text"} and block["type"] == "text" and isinstance(block["text"], str):
        return TextContent(block["text"])
    if typed and keys == {"type", "reasoning"} and block["type"] == "reasoning" and isinstance(block["reasoning"], str):
        return ReasoningContent(block["reasoning"])
    return OpaqueContent(block)


def _hosted_content(block: Mapping[str, Any], tools: Mapping[str, str]) -> Content | None:
    """A server-side tool call or result block as a hosted content (the block's other fields in ``data``)."""
    kind = block.get("type")
    if kind == "server_tool_call":
        call_id, name, args = block.get("id"), block.get("name"), block.get("args")
        if isinstance(call_id, str) and call_id and isinstance(name, str) and name and isinstance(args, Mapping):
            data = {key: value for key, value in block.items() if key not in ("type", "id", "name", "args")}
            return HostedCallContent(call_id, name, name, json.dumps(args, ensure_ascii=False), data)
    if kind == "server_tool_result":
        call_id = block.get("tool_call_id")
        if isinstance(call_id, str) and call_id:
            output = block.get("output")
            text = output if isinstance(output, str) else "" if output is None else json.dumps(output, default=str)
            data = {key: value for key, value in block.items() if key not in ("type", "tool_call_id")}
            return HostedResultContent(call_id, tools.get(call_id, "server_tool"), text, data)
    return None


def _hosted_block(content: HostedCallContent | HostedResultContent) -> dict[str, Any]:
    if isinstance(content, HostedCallContent):
        args = json.loads(content.arguments) if content.arguments.strip() else {}
        return {"type": "server_tool_call", "id": content.call_id, "name": content.name or content.tool, "args": args}
    block = {"type": "server_tool_result", "tool_call_id": content.call_id, **plain(content.data)}
    block.setdefault("status", "success")
    if "output" not in content.data and content.output:
        block["output"] = content.output
    return block


def _content_out(parts: Sequence[Content], strings: Sequence[int], as_list: bool) -> str | list[str | dict[str, Any]]:
    """LangChain's ``content`` for these parts: one text as a string, otherwise a list of blocks."""
    if not as_list and not strings:
        if not parts:
            return ""
        if len(parts) == 1 and isinstance(parts[0], TextContent) and parts[0].text:
            return parts[0].text  # an empty text stays a block: "" is how LangChain says "no content"
    blocks: list[str | dict[str, Any]] = []
    for position, part in enumerate(parts):
        if isinstance(part, TextContent):
            blocks.append(part.text if position in strings else {"type": "text", "text": part.text})
        elif isinstance(part, ReasoningContent):
            blocks.append({"type": "reasoning", "reasoning": part.text})
        elif isinstance(part, OpaqueContent):
            blocks.append(plain(part.data))
        elif isinstance(part, HostedCallContent):
            blocks.append({**_hosted_block(part), **plain(part.data)})
        elif isinstance(part, HostedResultContent):
            blocks.append(_hosted_block(part))
        else:  # approvals: LangChain asks for them by interrupting the graph, not in messages
            raise InvalidMessageError(
                f"{type(part).__name__} has no LangChain content block; resolve the approval before converting"
            )
    return blocks


def _content_in(content: Any, where: str, kept: dict[str, Any], typed: bool = True) -> list[Content]:
    """Parts of a LangChain ``content``; records in ``kept`` what the parts alone would not give back."""
    if isinstance(content, str):
        return [TextContent(content)] if content else []
    if not isinstance(content, list):
        raise InvalidMessageError(f"{where}: content must be a string or a list, got {type(content).__name__}")
    tools = {
        block["id"]: block["name"]
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "server_tool_call" and isinstance(block.get("name"), str)
    }
    parts = [_block_content(block, position, where, typed, tools) for position, block in enumerate(content)]
    strings = [position for position, block in enumerate(content) if isinstance(block, str)]
    if strings:
        kept["string_blocks"] = strings
    if _content_out(parts, strings, False) != content:
        kept["content_list"] = True
    return parts


def from_langchain_message(message: BaseMessage, *, position: int | None = None) -> Message:
    """One LangChain message as contextledger's; :func:`to_langchain_message` gives back an equal one."""
    where = "LangChain message" if position is None else f"LangChain message {position}"
    if not isinstance(message, BaseMessage):
        raise InvalidMessageError(f"{where} is {type(message).__name__}, not a langchain_core BaseMessage")
    role = _ROLES.get(message.type)
    if role is None:
        raise InvalidMessageError(
            f"{where} has type {message.type!r}; contextledger converts system, human, ai and tool messages "
            "(convert a ChatMessage or chunk to one of those first)"
        )
    kept: dict[str, Any] = {}
    metadata = dict(message.response_metadata)
    ours = metadata.pop(METADATA_KEY, None) or {}
    if not isinstance(ours, Mapping):
        raise InvalidMessageError(f"{where}: response_metadata[{METADATA_KEY!r}] must be a dict, got {ours!r}")
    if metadata:
        kept["response_metadata"] = metadata
    if message.additional_kwargs:
        kept["additional_kwargs"] = dict(message.additional_kwargs)
    contents: list[Content]
    if isinstance(message, ToolMessage):
        if not message.tool_call_id:
            raise InvalidMessageError(f"{where}: a ToolMessage needs the tool_call_id of the call it answers")
        if isinstance(message.content, str):
            contents = [FunctionResultContent(message.tool_call_id, message.content)]
        else:
            parts = _content_in(message.content, where, kept, typed=False)
            kept.pop("content_list", None)
            blocks = tuple(
                {"type": "text", "text": part.text} if isinstance(part, TextContent) else plain(part.data)  # type: ignore[union-attr]
                for part in parts
            )
            text = "".join(part.text for part in parts if isinstance(part, TextContent))
            contents = [FunctionResultContent(message.tool_call_id, text, blocks)]
        if message.status != "success":
            kept["status"] = message.status
        if message.artifact is not None:
            kept["artifact"] = message.artifact
    else:
        contents = _content_in(message.content, where, kept)
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if not call.get("id"):
                    raise InvalidMessageError(
                        f"{where}: tool call {call.get('name')!r} has no id; a call needs one so its result can follow"
                    )
                arguments = json.dumps(call["args"], ensure_ascii=False)
                contents.append(FunctionCallContent(str(call["id"]), call["name"], arguments))
            if message.invalid_tool_calls:
                kept["invalid_tool_calls"] = [dict(call) for call in message.invalid_tool_calls]
            if message.usage_metadata is not None:
                kept["usage_metadata"] = dict(message.usage_metadata)
    properties = dict(ours.get("additional_properties") or {})
    if kept:
        properties[LANGCHAIN_PROPERTY] = kept
    return Message(
        role,  # type: ignore[arg-type]
        tuple(contents),
        author_name=message.name,
        message_id=message.id,
        additional_properties=properties,
        extra=ours.get("extra") or {},
        content_form=ours.get("content_form"),
    )


def to_langchain_message(message: Message) -> BaseMessage:
    """One contextledger message as LangChain's.

    An assistant message's text, reasoning and other parts become its ``content`` and its calls
    its ``tool_calls`` (LangChain keeps them apart, so calls come back after the content).
    """
    if not isinstance(message, Message):
        raise InvalidMessageError(f"expected a contextledger Message, got {type(message).__name__}")
    kept: Mapping[str, Any] = message.additional_properties.get(LANGCHAIN_PROPERTY) or {}
    properties = {k: v for k, v in message.additional_properties.items() if k != LANGCHAIN_PROPERTY}
    ours: dict[str, Any] = {}
    if properties:
        ours["additional_properties"] = plain(properties)
    if message.extra:
        ours["extra"] = plain(message.extra)
    if message.content_form is not None:
        ours["content_form"] = message.content_form
    common: dict[str, Any] = {
        "response_metadata": {**plain(kept.get("response_metadata") or {}), **({METADATA_KEY: ours} if ours else {})},
        "additional_kwargs": plain(kept.get("additional_kwargs") or {}),
        "name": message.author_name,
        "id": message.message_id,
    }
    strings = list(kept.get("string_blocks") or ())
    as_list = bool(kept.get("content_list"))
    calls = [c for c in message.contents if isinstance(c, FunctionCallContent)]
    results = [c for c in message.contents if isinstance(c, FunctionResultContent)]
    parts = [c for c in message.contents if not isinstance(c, (FunctionCallContent, FunctionResultContent))]
    if message.role == "tool":
        if len(results) != 1 or parts or calls:
            raise InvalidMessageError(
                f"a LangChain ToolMessage holds exactly one tool result; message {message.message_id!r} has "
                f"{len(results)} results and {len(parts) + len(calls)} other contents"
            )
        result = results[0]
        content: Any = result.result
        if result.parts is not None:
            content = [
                part["text"] if position in strings else plain(part) for position, part in enumerate(result.parts)
            ]
        extra_fields: dict[str, Any] = {}
        if "artifact" in kept:
            extra_fields["artifact"] = plain(kept["artifact"])
        return ToolMessage(
            content=content,
            tool_call_id=result.call_id,
            status=kept.get("status", "success"),
            **extra_fields,
            **common,
        )
    if results or (calls and message.role != "assistant"):
        raise InvalidMessageError(
            f"a {message.role} message cannot carry tool calls or results in LangChain; "
            f"message {message.message_id!r} does"
        )
    content = _content_out(parts, strings, as_list)
    if message.role == "system":
        return SystemMessage(content=content, **common)
    if message.role == "user":
        return HumanMessage(content=content, **common)
    tool_calls = []
    for call in calls:
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except json.JSONDecodeError as error:
            raise InvalidMessageError(
                f"tool call {call.call_id!r} has arguments that are not JSON ({error.msg}); "
                "LangChain keeps a call's arguments as a dict"
            ) from None
        if not isinstance(arguments, dict):
            raise InvalidMessageError(f"tool call {call.call_id!r} has arguments {call.arguments!r}, not a JSON object")
        tool_calls.append({"name": call.name, "args": arguments, "id": call.call_id, "type": "tool_call"})
    return AIMessage(
        content=content,
        tool_calls=tool_calls,
        invalid_tool_calls=plain(kept.get("invalid_tool_calls") or []),
        usage_metadata=plain(kept["usage_metadata"]) if "usage_metadata" in kept else None,
        **common,
    )


def from_langchain(messages: Sequence[BaseMessage]) -> list[Message]:
    """LangChain messages as contextledger's; the first one that cannot be converted raises, naming its position."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidMessageError(f"expected a list of LangChain messages, got {type(messages).__name__}")
    return [from_langchain_message(message, position=position) for position, message in enumerate(messages)]


def to_langchain(messages: Sequence[Message]) -> list[BaseMessage]:
    """contextledger messages as LangChain's."""
    return [to_langchain_message(message) for message in messages]
