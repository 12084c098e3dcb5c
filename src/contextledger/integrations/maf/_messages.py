"""MAF messages and contents converted to and from contextledger's, without loss."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

import agent_framework as maf

from contextledger.exceptions import InvalidMessageError
from contextledger.integrations._shared import plain
from contextledger.integrations.maf._hosted import HOSTED_TYPES, hosted_from_maf, hosted_to_maf
from contextledger.messages import (
    ApprovalRequestContent,
    ApprovalResponseContent,
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
    if kind in HOSTED_TYPES:
        hosted = hosted_from_maf(content.to_dict())
        if hosted is not None:
            return hosted
    return OpaqueContent(content.to_dict())


_HOSTED_CLASSES: Final = (HostedCallContent, HostedResultContent, ApprovalRequestContent, ApprovalResponseContent)


def _baseline(content: Content, where: str = "message") -> maf.Content:
    """The MAF content contextledger's typed fields alone describe (no stashed extras)."""
    if isinstance(content, TextContent):
        return maf.Content.from_text(content.text)
    if isinstance(content, ReasoningContent):
        return maf.Content.from_text_reasoning(text=content.text)
    if isinstance(content, FunctionCallContent):
        return maf.Content.from_function_call(content.call_id, content.name, arguments=content.arguments)
    if isinstance(content, FunctionResultContent):
        return maf.Content.from_function_result(content.call_id, result=content.result)
    if isinstance(content, _HOSTED_CLASSES):
        return hosted_to_maf(content, where)
    return maf.Content.from_dict(plain(content.data))


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


def from_maf_message(message: maf.Message, *, position: int | None = None) -> Message:
    """Convert one MAF message; :func:`to_maf_message` gives back an equal one.

    Text, reasoning, function calls and results, hosted tool calls and their
    outputs (MCP, code interpreter, search, image generation, shell, computer
    use) and function approvals become typed contents (see ``_hosted``); MAF
    content kinds contextledger has no type for (data, uri, errors...) are
    carried as :class:`OpaqueContent` holding MAF's own serialisation.  The
    MAF-only fields of typed contents are kept under :data:`MAF_CONTENTS_PROPERTY`.
    ``raw_representation`` (a provider's SDK object) is not carried, as MAF
    itself does not serialise it, and a content's ``exception`` diagnostics come
    back redacted the way MAF's serialisation redacts them.
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
            stash["extra"] = plain(content.extra)
        if content.function_extra:
            stash["function_extra"] = plain(content.function_extra)
        if content.openai_type != "function":
            stash["openai_type"] = content.openai_type
        return stash or None
    if isinstance(content, FunctionResultContent) and content.parts is not None:
        return {"parts": plain(content.parts)}
    return None


def _maf_content(content: Content, residual: Mapping[str, Any] | None, where: str) -> maf.Content:
    if isinstance(content, OpaqueContent):
        data = plain(content.data)
        if data.get("type") in _MAF_CONTENT_TYPES:
            return maf.Content.from_dict(data)
        if data.get("type") == "image_url":
            return _image_content(data, where)
        raise InvalidMessageError(
            f"{where}: content part of type {data.get('type')!r} has no Agent Framework equivalent; "
            "convert it to text or to an image_url part first"
        )
    built = _baseline(content, where)
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
    properties = plain(message.additional_properties)
    residuals = properties.pop(MAF_CONTENTS_PROPERTY, None)
    if residuals is not None and (not isinstance(residuals, list) or len(residuals) != len(message.contents)):
        raise InvalidMessageError(
            f"{where}: {MAF_CONTENTS_PROPERTY!r} must list one entry per content "
            f"({len(message.contents)}), got {residuals!r}; remove the key or keep it unchanged"
        )
    extra = plain(message.extra)
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
