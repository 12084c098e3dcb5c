"""The message: a role and an ordered tuple of contents, immutable.

Compaction never edits a caller's message: it marks groups in an index and projects the included
messages, so the objects a caller handed in are exactly the objects that come back out.  The two
helpers at the end (:func:`set_token_memo`, :func:`assistant_text_message`) are the library's own
fast paths for tokenizers and compaction, which touch thousands of messages per call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from contextledger.exceptions import InvalidMessageError, UnknownRoleError
from contextledger.messages._contents import (
    _CONTENT_TYPES,
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
    _frozen,
    _require_str,
    answered_ids,
    opened_ids,
)

# What other packages of contextledger may import from here (internal, not part of the public API).
__all__ = [
    "SUMMARY_SOURCE_PROPERTY",
    "assistant_text_message",
    "held_by_provider_compaction",
    "is_provider_compaction_content",
    "set_token_memo",
]

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool"})

SUMMARY_PROPERTY = "_is_summary"
"""``additional_properties`` key that marks an assistant message as a summary."""

SUMMARY_SOURCE_PROPERTY = "_summary_source"
"""Which mechanism wrote a summary: ``"summarization"`` or ``"tool_results"``."""

PROVIDER_COMPACTION_TYPE = "compaction"
"""The ``type`` both providers give the item their own compaction returns: OpenAI's Responses
``{"type": "compaction", "encrypted_content": ...}`` output item and Anthropic's
``{"type": "compaction", "content": ...}`` content block (``compact_20260112`` edit)."""


def is_provider_compaction_content(content: object) -> bool:
    """Whether a content is a provider's compaction item that stands for everything before it.

    Both are read as :class:`OpaqueContent` (kept byte for byte).  OpenAI's item carries its
    summary encrypted (``encrypted_content``); Anthropic's block carries it as ``content`` text,
    and may carry ``encrypted_content`` too.  Anthropic documents a block whose ``content`` is
    null as a failed compaction that the server treats as a no-op: it covers nothing, so it is no
    boundary (it is still kept and sent like any other opaque block).
    """
    if not isinstance(content, OpaqueContent):
        return False
    data = content.data
    if data.get("type") != PROVIDER_COMPACTION_TYPE:
        return False
    return isinstance(data.get("content"), str) or isinstance(data.get("encrypted_content"), str)


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
        if not isinstance(self.role, str) or self.role not in ROLES:
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
    def is_provider_compaction(self) -> bool:
        """An assistant message holding a provider's compaction item (see
        :func:`is_provider_compaction_content`): the provider reads it in place of everything
        before it, so compaction keeps the newest one whenever anything after it is sent, byte for
        byte, and may drop what precedes it first (see :func:`newest_provider_compaction`)."""
        return self.role == "assistant" and any(is_provider_compaction_content(c) for c in self.contents)

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
        results, the summary in Anthropic's compaction block.  Token and byte counts are taken over
        these, never over JSON syntax."""
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
                elif is_provider_compaction_content(c) and isinstance(c.data.get("content"), str):
                    yield c.data["content"]  # Anthropic's compaction summary, which the model reads


def newest_provider_compaction(messages: Sequence[Message]) -> int | None:
    """The index of the newest message holding a provider compaction item, or ``None``.

    Everything before that message is covered by it: OpenAI's guide lets a client drop the
    items before the newest compaction item, and Anthropic ignores every block before the newest
    compaction block.  Compaction strategies treat it as the boundary of what they may change.
    """
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].is_provider_compaction:
            return index
    return None


def held_by_provider_compaction(messages: Sequence[Message]) -> list[Message]:
    """What a provider must still be shown of ``messages`` to pair calls with their results: the
    messages after the newest provider compaction item (all of them when there is none), less
    the results whose calls it holds.

    The item stands for everything before it, as ``previous_response_id`` does, so a result after
    it whose call went before it is no orphan, and a call before it needs no result after it.  A
    check of the pairing rules (:func:`~contextledger.messages.validate`) reads this list.
    """
    start = newest_provider_compaction(messages)
    if start is None:
        return list(messages)
    after = list(messages[start + 1 :])
    opened = {call for message in after for call in message.opened_ids}
    return [
        message
        for message in after
        if not (message.role == "tool" and message.answered_ids and opened.isdisjoint(message.answered_ids))
    ]


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
