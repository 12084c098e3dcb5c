"""Anthropic Messages API messages and contextledger messages, converted both ways.

Anthropic's messages alternate ``user`` and ``assistant``, each a string or a list of content
blocks.  Here:

- an assistant message is one assistant :class:`Message`: ``text`` blocks become
  :class:`TextContent`, ``thinking`` and ``redacted_thinking`` :class:`ReasoningContent` (the
  thinking text; empty for redacted thinking), ``tool_use`` :class:`FunctionCallContent` (its
  ``input`` as JSON text), anything else (server tools, their results, blocks this module does
  not know) :class:`OpaqueContent`, kept whole.  A turn's thinking is in the same message as its
  tool calls, so compaction keeps or drops them together and never edits either;
- a user message's leading ``tool_result`` blocks are a ``tool`` message (one
  :class:`FunctionResultContent` each), the rest a ``user`` message: compaction pairs each result
  with its call by id, as in every other format.  A ``tool_result`` after another block is refused,
  as the Messages API refuses it;
- the top-level ``system`` (a string or text blocks) is a leading system message.

Every block keeps, in ``additional_properties[ANTHROPIC_PROPERTY]``, its fields other than the
one the content holds (a thinking block's ``signature``, ``cache_control``, ``citations``, a
``tool_use`` id and name, a result's ``is_error``), in their order, so :func:`to_anthropic` writes
each block back as it came, byte for byte, while the content is unchanged.  The text itself lives
only in the content: a ``forget`` that rewrites a text leaves no copy of the old one behind, and a
block whose content was rewritten is written from the new content.

:func:`to_anthropic` joins what must travel together: a tool message and the user message after it
are one user message again, consecutive messages of one role are joined (the API takes one turn
per role at a time), a system message after the start (the proxy's facts block) becomes a text
block of the next user message, and a conversation that compaction left starting with a summary
starts with it as user text (the summary's own marker says what it is), since the conversation
must open with the user.  Any other assistant message keeps its role wherever it stands: an
assistant's words are never presented as the user's (compaction moves a cut that would leave one
first, see :func:`contextledger.compaction.opened_by_user`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from contextledger.exceptions import InvalidMessageError
from contextledger.messages._contents import (
    Content,
    FunctionCallContent,
    FunctionResultContent,
    OpaqueContent,
    ReasoningContent,
    TextContent,
)
from contextledger.messages._contents import thawed as plain
from contextledger.messages._message import Message
from contextledger.messages._openai import result_text

__all__ = [
    "ANTHROPIC_PROPERTY",
    "from_anthropic",
    "message_blocks",
    "system_blocks",
    "system_messages",
    "to_anthropic",
]

ANTHROPIC_PROPERTY = "_anthropic"
"""``additional_properties`` key holding what a message's Anthropic blocks had besides their
content (see the module docstring); never sent to a model."""

Block = dict[str, Any]

# The field of each block type that its content holds; the rest of the block is kept aside.
_HELD = {
    "text": "text",
    "thinking": "thinking",
    "redacted_thinking": None,
    "tool_use": "input",
    "tool_result": "content",
}
_HOLE = None  # where the content's value goes back in a kept block


def _template(block: Mapping[str, Any], held: str | None) -> Block:
    return {key: (_HOLE if key == held else value) for key, value in block.items()}


def _filled(template: Mapping[str, Any], held: str, value: Any) -> Block:
    return {key: (value if key == held else plain(item)) for key, item in template.items()}


def _block_content(block: Any, where: str) -> tuple[Content, Block | None]:
    """One block as a content and what is kept of it (None: nothing to keep, or kept whole)."""
    if not isinstance(block, Mapping):
        raise InvalidMessageError(f"{where} is {type(block).__name__}; content blocks are objects")
    kind = block.get("type")
    if not isinstance(kind, str):
        raise InvalidMessageError(f"{where} has no string 'type'; every content block names its type")
    if kind == "text":
        text = block.get("text")
        if not isinstance(text, str):
            raise InvalidMessageError(f"{where}: a text block needs a string 'text'")
        return TextContent(text), _template(block, "text")
    if kind == "thinking":
        thinking = block.get("thinking")
        if not isinstance(thinking, str):
            raise InvalidMessageError(f"{where}: a thinking block needs a string 'thinking'")
        return ReasoningContent(thinking), _template(block, "thinking")
    if kind == "redacted_thinking":
        return ReasoningContent(""), dict(block)
    if kind == "tool_use":
        call_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
        if not isinstance(call_id, str) or not call_id or not isinstance(name, str):
            raise InvalidMessageError(f"{where}: a tool_use block needs a non-empty string 'id' and a string 'name'")
        if not isinstance(arguments, Mapping):
            raise InvalidMessageError(f"{where}: a tool_use block's 'input' must be an object")
        text = json.dumps(arguments, ensure_ascii=False)
        return FunctionCallContent(call_id, name, text), _template(block, "input")
    if kind == "tool_result":
        call_id, content = block.get("tool_use_id"), block.get("content", _ABSENT)
        if not isinstance(call_id, str) or not call_id:
            raise InvalidMessageError(f"{where}: a tool_result block needs a non-empty string 'tool_use_id'")
        if isinstance(content, str):
            result = FunctionResultContent(call_id, content)
        elif isinstance(content, list) and all(isinstance(part, Mapping) for part in content):
            result = FunctionResultContent(call_id, result_text(content), tuple(content))
        elif content is _ABSENT:
            result = FunctionResultContent(call_id, "", ())
        else:
            raise InvalidMessageError(f"{where}: a tool_result's 'content' must be a string or a list of blocks")
        return result, _template(block, "content")
    return OpaqueContent(block), None


_ABSENT = object()


def _with_record(role: str, contents: list[Content], blocks: list[Block | None], head: Mapping[str, Any]) -> Message:
    record: dict[str, Any] = {"blocks": blocks}
    if head:
        record["message"] = dict(head)
    return Message(role, tuple(contents), additional_properties={ANTHROPIC_PROPERTY: record})  # type: ignore[arg-type]


def _message(item: Any, position: int) -> list[Message]:
    where = f"message {position}"
    if not isinstance(item, Mapping):
        raise InvalidMessageError(f"{where} is {type(item).__name__}; a message is an object with role and content")
    role, content = item.get("role"), item.get("content")
    if role not in ("user", "assistant"):
        raise InvalidMessageError(f"{where}: role {role!r}; the Messages API takes 'user' and 'assistant'")
    head = {key: value for key, value in item.items() if key not in ("role", "content")}
    if isinstance(content, str):
        record = {"string": True, **({"message": head} if head else {})}
        return [Message(role, (TextContent(content),), additional_properties={ANTHROPIC_PROPERTY: record})]
    if not isinstance(content, list):
        raise InvalidMessageError(f"{where}: 'content' must be a string or a list of content blocks")
    if not content:
        raise InvalidMessageError(f"{where}: 'content' is empty; a message needs at least one content block")
    results: list[Content] = []
    result_blocks: list[Block | None] = []
    rest: list[Content] = []
    rest_blocks: list[Block | None] = []
    for number, block in enumerate(content):
        converted, kept = _block_content(block, f"{where}, block {number}")
        if isinstance(converted, FunctionResultContent):
            if role != "user" or rest:
                raise InvalidMessageError(
                    f"{where}, block {number}: a tool_result must come first in a user message, before any other "
                    "block, right after the assistant message with its tool_use"
                )
            results.append(converted)
            result_blocks.append(kept)
        else:
            rest.append(converted)
            rest_blocks.append(kept)
    messages: list[Message] = []
    if results:
        messages.append(_with_record("tool", results, result_blocks, head))
        head = {}
    if rest or not results:
        messages.append(_with_record(role, rest, rest_blocks, head))
    return messages


def system_messages(system: Any) -> list[Message]:
    """The top-level ``system`` (a string or a list of text blocks) as system messages."""
    if system is None:
        return []
    if isinstance(system, str):
        return [Message("system", (TextContent(system),), additional_properties={ANTHROPIC_PROPERTY: {"string": True}})]
    if not isinstance(system, list):
        raise InvalidMessageError("'system' must be a string or a list of text blocks")
    contents: list[Content] = []
    blocks: list[Block | None] = []
    for number, block in enumerate(system):
        converted, kept = _block_content(block, f"system block {number}")
        if not isinstance(converted, TextContent):
            raise InvalidMessageError(f"system block {number} is not a text block; 'system' holds text blocks")
        contents.append(converted)
        blocks.append(kept)
    return [_with_record("system", contents, blocks, {})]


def from_anthropic(messages: Sequence[Any], system: Any = None) -> list[Message]:
    """Messages API ``messages`` (and ``system``) as contextledger messages (see the module docstring)."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidMessageError(f"expected a list of Messages API messages, got {type(messages).__name__}")
    converted = system_messages(system)
    for position, item in enumerate(messages):
        converted.extend(_message(item, position))
    return converted


# Messages to Anthropic's -----------------------------------------------------------------------


def _record(message: Message) -> Mapping[str, Any]:
    record = message.additional_properties.get(ANTHROPIC_PROPERTY)
    return record if isinstance(record, Mapping) else {}


def _kept(blocks: Sequence[Any], position: int, count: int, content: Content) -> Mapping[str, Any] | None:
    """The kept block for the content at ``position``, when the message still has its blocks."""
    if len(blocks) != count or not isinstance(blocks[position], Mapping):
        return None
    kept: Mapping[str, Any] = blocks[position]
    kind = kept.get("type")
    if isinstance(content, FunctionCallContent) and (kind != "tool_use" or kept.get("id") != content.call_id):
        return None
    if isinstance(content, FunctionResultContent) and (
        kind != "tool_result" or kept.get("tool_use_id") != content.call_id
    ):
        return None
    if isinstance(content, ReasoningContent) and kind not in ("thinking", "redacted_thinking"):
        return None
    if isinstance(content, TextContent) and kind != "text":
        return None
    return kept


def _block(content: Content, kept: Mapping[str, Any] | None) -> Block | None:
    """The block for one content (from what was kept of it, when there is something); None for
    reasoning that has no block to go back to (a signature cannot be made up)."""
    if isinstance(content, TextContent):
        if kept is None and not content.text:
            return None  # the API refuses empty text blocks; one of ours (an empty reply's) has nothing to say
        return _filled(kept, "text", content.text) if kept is not None else {"type": "text", "text": content.text}
    if isinstance(content, ReasoningContent):
        if kept is None:
            return None
        if kept.get("type") == "redacted_thinking":
            return plain(kept)  # type: ignore[no-any-return]
        return _filled(kept, "thinking", content.text)
    if isinstance(content, FunctionCallContent):
        try:
            arguments = json.loads(content.arguments)
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            arguments = {}
        if kept is not None:
            return _filled(kept, "input", arguments)
        return {"type": "tool_use", "id": content.call_id, "name": content.name, "input": arguments}
    if isinstance(content, FunctionResultContent):
        value: Any = content.result if content.parts is None else plain(content.parts)
        if kept is not None:
            return _filled(kept, "content", value)
        return {"type": "tool_result", "tool_use_id": content.call_id, "content": value}
    if isinstance(content, OpaqueContent):
        return plain(content.data)  # type: ignore[no-any-return]
    raise InvalidMessageError(f"{type(content).__name__} has no Messages API block; convert it to text first")


def message_blocks(message: Message) -> list[Block]:
    """One message's content as Messages API blocks (kept blocks as they came; reasoning without
    its block, which no signature can be made up for, left out)."""
    return _blocks(message)


def _blocks(message: Message) -> list[Block]:
    record = _record(message)
    kept_blocks = record.get("blocks") or ()
    blocks = []
    for position, content in enumerate(message.contents):
        block = _block(content, _kept(kept_blocks, position, len(message.contents), content))
        if block is not None:
            blocks.append(block)
    return blocks


def system_blocks(messages: Sequence[Message]) -> str | list[Block]:
    """System messages as a top-level ``system``: a string when they were one, else text blocks."""
    if len(messages) == 1 and _record(messages[0]).get("string") and len(messages[0].contents) == 1:
        return messages[0].text
    return [block for message in messages for block in _blocks(message)]


def _wire_role(message: Message) -> str:
    return "assistant" if message.role == "assistant" else "user"


def to_anthropic(messages: Sequence[Message]) -> tuple[str | list[Block] | None, list[Block]]:
    """contextledger messages as Messages API ``(system, messages)``; messages that came from
    :func:`from_anthropic` come back exactly as they were (see the module docstring)."""
    leading = 0
    while leading < len(messages) and messages[leading].role == "system":
        leading += 1
    system = system_blocks(messages[:leading]) if leading else None
    out: list[Block] = []
    pending: list[Block] = []  # later system messages: text for the next user message
    sources: list[Message] = []  # the messages the last output message was made of
    for message in messages[leading:]:
        if not isinstance(message, Message):
            raise InvalidMessageError(f"{message!r} is not a contextledger Message")
        if message.role == "system":
            pending.extend(_blocks(message))
            continue
        role = _wire_role(message)
        if not out and message.is_summary:
            role = "user"  # a summary compaction left first is read as context; its marker says what it is
        blocks = _blocks(message)
        if role == "user" and pending:
            blocks = [*pending, *blocks] if message.role != "tool" else [*blocks, *pending]
            pending = []
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            previous = out[-1]
            previous["content"] = [*_as_list(previous["content"]), *blocks]
            sources.append(message)
            continue
        sources = [message]
        item: Block = {"role": role, "content": blocks}
        record = _record(message)
        if record.get("message"):
            item.update(plain(record["message"]))
        if record.get("string") and len(message.contents) == 1 and len(blocks) == 1 and blocks[0]["type"] == "text":
            item["content"] = blocks[0]["text"]
        out.append(item)
    if pending:
        out.append({"role": "user", "content": pending})
    return system, out


def _as_list(content: Any) -> list[Block]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
