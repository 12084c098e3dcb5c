"""Hypothesis generators for conversations and compaction strategies, shared by the property tests.

Conversations are built block by block (a user turn, an assistant reply, a tool exchange, a
summary...) rather than message by message: a random message soup is almost never API-valid,
and the properties that matter most ("a valid input stays valid") need valid inputs in bulk.
Defects are then added on purpose by :func:`dirty_conversations`, so the library's handling of
broken histories is exercised separately and knowingly.

Strategies are generated as :class:`StrategySpec` values rather than as strategy objects: a
summariser's scripted client is stateful (it records requests and walks through its replies),
so a test that runs "the same" strategy twice, or compares against a variant of it, needs a
recipe it can build fresh each time.  A spec's ``repr`` is also what hypothesis prints for a
falsifying example, so it reads like the constructor call that reproduces it.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any, Literal

from hypothesis import strategies as st

from contextledger.clients import ScriptedChatClient
from contextledger.compaction import (
    CompactionStrategy,
    PipelineStrategy,
    SelectiveToolCallCompactionStrategy,
    SlidingWindowStrategy,
    SummarizationStrategy,
    TokenBudgetComposedStrategy,
    ToolResultCompactionStrategy,
    Trigger,
    TruncationStrategy,
    all_of,
    always,
    any_of,
    groups_exceed,
    has_tool_calls,
    messages_exceed,
    never,
    tokens_below,
    tokens_exceed,
    turns_exceed,
)
from contextledger.exceptions import TokenizerUnavailableError
from contextledger.messages import (
    SUMMARY_PROPERTY,
    ApprovalRequestContent,
    ApprovalResponseContent,
    FunctionCallContent,
    FunctionResultContent,
    HostedCallContent,
    HostedResultContent,
    Message,
    OpaqueContent,
    ReasoningContent,
    TextContent,
)
from contextledger.messages._message import SUMMARY_SOURCE_PROPERTY
from contextledger.tokenizers import CharacterEstimatorTokenizer, OpenAITokenizer, Tokenizer

__all__ = [
    "COMPOSITE_KINDS",
    "SHAPES",
    "Conversation",
    "ScriptedReply",
    "StrategySpec",
    "conversations",
    "count_formatter",
    "describe",
    "dirty_conversations",
    "gentlest_first_specs",
    "leaf_specs",
    "selective_specs",
    "shapes_of",
    "sliding_window_specs",
    "specs_for",
    "strategy_specs",
    "summarization_specs",
    "tokenizers",
    "tool_result_specs",
    "triggers",
    "truncation_specs",
]

# Text ------------------------------------------------------------------------------------------

# A fixed pool of texts rather than st.text: drawing one is a single choice instead of dozens
# (generation, not the library, dominates the cost of a case), and the pool still covers what
# token and byte counting can get wrong: multi-byte scripts, emoji, JSON-looking text, whitespace
# the tool-result preview normalises, and runs long enough to overflow the preview.  The empty
# text comes first, so shrinking heads for it.
WORDS = (
    "hello",
    "the",
    "weather",
    "in",
    "Zürich",
    "naïve",
    "café",
    "日本語",
    "東京の天気",
    "Привет",
    "مرحبا",
    "🙂",
    "ok",
    "42",
    '{"a": 1}',
    "line\nbreak",
    "tab\tstop",
    "x" * 30,
)


def _pool(seed: int, size: int, max_words: int) -> tuple[str, ...]:
    rng = random.Random(seed)
    return tuple(" ".join(rng.choices(WORDS, k=rng.randint(1, max_words))) for _ in range(size))


TEXTS: tuple[str, ...] = ("", *WORDS, *_pool(1, 40, 10))
LONG_TEXTS: tuple[str, ...] = tuple((text + " ") * 6 for text in _pool(2, 8, 10))

TOOL_NAMES = ("get_weather", "search_docs", "calc", "lookup_ユーザー")
TOOL_ARGUMENTS = ("{}", '{"city": "Zürich"}', '{"q": "日本"}', '{"n": 42}')
AUTHOR_NAMES = ("alice", "Bob", "José", "助手")

_TEXT = st.sampled_from(TEXTS)
_OPTIONAL_TEXT = st.sampled_from((None, None, *TEXTS[:12]))
_RESULT_TEXT = st.sampled_from(TEXTS + LONG_TEXTS)
_AUTHOR = st.sampled_from((None, None, None, *AUTHOR_NAMES))
_MESSAGE_ID = st.sampled_from((None, None, "m-1", "msg_ß", "42"))


@cache
def _upto(high: int) -> st.SearchStrategy[int]:
    """``st.integers(0, high)``, built once per bound: hypothesis validates every new strategy
    object on first use, and building them inside draws made validation the main cost of a case."""
    return st.integers(0, high)


@cache
def _between(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high)


_PERMUTATIONS = {size: st.permutations(range(size)) for size in (1, 2, 3)}
_BOOLEANS = st.booleans()
_TOOL_NAME = st.sampled_from(TOOL_NAMES)
_TOOL_ARGUMENTS = st.sampled_from(TOOL_ARGUMENTS)
_ASSISTANT_PROPERTIES = st.sampled_from(({}, {}, {"source": "model"}))
# What an adapter keeps of an item beside its contents (the Agents SDK adapter's ids and status): on
# reasoning, calls and results too, as every message such an adapter builds carries some.
_ITEM_PROPERTIES = st.sampled_from(({}, {}, {"item": {"id": "item_1", "status": "completed"}}))
_ASSISTANT_REASONING = st.sampled_from((None, *TEXTS[:8]))
_SUMMARY_SOURCE = st.sampled_from((None, "summarization", "tool_results"))


# Conversations ---------------------------------------------------------------------------------

# Repetition weights the draw: user turns, replies and tool exchanges dominate real histories.
_BODY_BLOCKS = ("user",) * 4 + ("assistant",) * 3 + ("tools",) * 4 + ("system", "summary", "reasoning", "opaque")
_BODY_BLOCK = st.sampled_from(_BODY_BLOCKS)
# What may come before the first user message (turn 0): anything but a user message.
_PREAMBLE_BLOCKS = ("system", "system", "assistant", "tools", "summary", "reasoning")
# Real agent traffic adds layouts chat-completions payloads do not have (design.md#units): results apart
# from their call (after a note or a user message), approvals, and hosted tool calls.
_TRAFFIC_BLOCKS = (*_BODY_BLOCKS, "interleaved", "interleaved", "approval", "approval", "hosted", "hosted")
_TRAFFIC_BLOCK = st.sampled_from(_TRAFFIC_BLOCKS)
_HOSTED_TOOLS = st.sampled_from(("mcp", "code_interpreter", "web_search", "file_search", "image_generation", "shell"))
SHAPES = ("interleaved results", "user between call and result", "hosted calls", "reasoning items", "approvals")
"""The real-traffic shapes a generated conversation may have (see :func:`shapes_of`)."""


class Conversation(list[Message]):
    """A generated message list that hypothesis prints as the constructor calls that rebuild it,
    one message per line, instead of every dataclass field of every message."""

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text("[\n" + "".join(f"    {describe(m)},\n" for m in self) + "]")


def shapes_of(messages: Sequence[Message]) -> set[str]:
    """Which of :data:`SHAPES` a message list has, read from the messages themselves."""
    found: set[str] = set()
    opened: dict[str, int] = {}
    for position, message in enumerate(messages):
        if message.is_reasoning_only:
            found.add("reasoning items")
        for content in message.contents:
            if isinstance(content, (HostedCallContent, HostedResultContent)):
                found.add("hosted calls")
            elif isinstance(content, (ApprovalRequestContent, ApprovalResponseContent)):
                found.add("approvals")
        for call_id in message.answered_ids:
            start = opened.get(call_id)
            if start is None or start == position:
                continue
            between = messages[start + 1 : position]
            if any(m.role not in ("tool",) and not m.is_reasoning_only for m in between):
                found.add("interleaved results")
            if any(m.role == "user" for m in between):
                found.add("user between call and result")
        for call_id in message.opened_ids:
            opened.setdefault(call_id, position)
    return found


def describe(message: Message) -> str:
    """A short constructor-like rendering of one message."""
    parts: list[str] = []
    for content in message.contents:
        if isinstance(content, TextContent):
            parts.append(repr(content.text))
        elif isinstance(content, FunctionCallContent):
            parts.append(f"call({content.call_id!r}, {content.name!r})")
        elif isinstance(content, FunctionResultContent):
            parts.append(f"result({content.call_id!r}, {content.result!r})")
        elif isinstance(content, ReasoningContent):
            parts.append(f"reasoning({content.text!r})")
        elif isinstance(content, HostedCallContent):
            parts.append(f"hosted_call({content.call_id!r}, {content.tool!r})")
        elif isinstance(content, HostedResultContent):
            parts.append(f"hosted_result({content.call_id!r}, {content.output!r})")
        elif isinstance(content, ApprovalRequestContent):
            parts.append(f"approval_request({content.request_id!r}, call({content.call.call_id!r}))")
        elif isinstance(content, ApprovalResponseContent):
            parts.append(f"approval_response({content.request_id!r}, {content.approved!r})")
        else:
            parts.append("opaque(...)")
    if message.author_name is not None:
        parts.append(f"author_name={message.author_name!r}")
    if message.additional_properties:
        parts.append(f"additional_properties={dict(message.additional_properties)!r}")
    return f"{message.role}({', '.join(parts)})"


class _Builder:
    """Appends one block at a time, handing out call ids that are unique in the conversation."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.messages: list[Message] = []
        self._ids = itertools.count(1)

    def call_id(self) -> str:
        return f"call_{next(self._ids)}"

    def reasoning(self) -> Message:
        return Message.assistant(reasoning=self.draw(_TEXT), additional_properties=self.draw(_ITEM_PROPERTIES))

    def block(self, kind: str) -> None:
        draw, out = self.draw, self.messages
        if kind == "system":
            out.append(Message.system(draw(_TEXT), author_name=draw(_AUTHOR), message_id=draw(_MESSAGE_ID)))
        elif kind == "user":
            out.append(Message.user(draw(_TEXT), author_name=draw(_AUTHOR), message_id=draw(_MESSAGE_ID)))
        elif kind == "assistant":
            # Application metadata on a plain reply takes the index off its fast path; keep both paths busy.
            properties = draw(_ASSISTANT_PROPERTIES)
            reasoning = draw(_ASSISTANT_REASONING)
            out.append(
                Message.assistant(
                    draw(_TEXT),
                    reasoning=reasoning,
                    author_name=draw(_AUTHOR),
                    additional_properties=properties,
                )
            )
        elif kind == "reasoning":
            out.append(self.reasoning())
        elif kind == "summary":
            marker: dict[str, Any] = {SUMMARY_PROPERTY: True}
            source = draw(_SUMMARY_SOURCE)
            if source is not None:
                marker[SUMMARY_SOURCE_PROPERTY] = source
            out.append(Message.assistant("[Summary] " + draw(_TEXT), additional_properties=marker))
        elif kind == "opaque":
            image = OpaqueContent({"type": "image_url", "image_url": {"url": "https://example.com/a.png"}})
            out.append(Message("user", (TextContent(draw(_TEXT)), image), author_name=draw(_AUTHOR)))
        elif kind == "interleaved":
            self.interleaved_exchange()
        elif kind == "approval":
            self.approval()
        elif kind == "hosted":
            self.hosted()
        else:
            self.tool_exchange()

    def between(self) -> None:
        """What real traffic puts between a call and its result: a note, a user reply, reasoning."""
        kind = self.draw(_upto(3))
        if kind == 0:
            self.messages.append(Message.assistant(self.draw(_TEXT)))
        elif kind == 1:
            self.messages.append(Message.user(self.draw(_TEXT)))
        elif kind == 2:
            self.messages.append(self.reasoning())

    def interleaved_exchange(self) -> None:
        """A call message, then its results with other messages before and between them."""
        draw, out = self.draw, self.messages
        calls = [
            FunctionCallContent(self.call_id(), draw(_TOOL_NAME), draw(_TOOL_ARGUMENTS))
            for _ in range(draw(_between(1, 3)))
        ]
        out.append(Message.assistant(draw(_OPTIONAL_TEXT), calls=calls))
        for _ in range(draw(_between(1, 2))):
            self.between()
        for position in draw(_PERMUTATIONS[len(calls)]):
            if draw(_upto(2)) == 0:
                self.between()
            out.append(Message.tool(calls[position].call_id, draw(_RESULT_TEXT)))

    def approval(self) -> None:
        """An approval request for a call, the user's answer, then (if approved) the call's result,
        sometimes after a note."""
        draw, out = self.draw, self.messages
        call = FunctionCallContent(self.call_id(), draw(_TOOL_NAME), draw(_TOOL_ARGUMENTS))
        request_id = f"approval_{call.call_id}"
        approved = draw(_BOOLEANS)
        out.append(Message("assistant", (ApprovalRequestContent(request_id, call),)))
        out.append(Message("user", (ApprovalResponseContent(request_id, approved),)))
        if approved:
            if draw(_BOOLEANS):
                out.append(Message.assistant("approval completed"))
            out.append(Message.tool(call.call_id, draw(_RESULT_TEXT)))

    def hosted(self) -> None:
        """A hosted call (reasoning before it, sometimes), its output in the same message, the
        next one, or after a note; or no output at all."""
        draw, out = self.draw, self.messages
        out.extend(self.reasoning() for _ in range(draw(_upto(1))))
        tool = draw(_HOSTED_TOOLS)
        call = HostedCallContent(self.call_id(), tool, draw(_TOOL_NAME), draw(_TOOL_ARGUMENTS))
        result = HostedResultContent(call.call_id, tool, draw(_RESULT_TEXT))
        where = draw(_upto(3))
        properties = draw(_ITEM_PROPERTIES)
        if where == 0:
            out.append(Message("assistant", (call, result), additional_properties=properties))
            return
        out.append(Message("assistant", (call,), additional_properties=properties))
        if where == 3:
            return
        if where == 2:
            self.between()
        out.append(Message("assistant", (result,)))

    def tool_exchange(self) -> None:
        """Reasoning before the call, one call message with 1-3 parallel calls, then every result in
        any order, with reasoning-only messages before and between the results."""
        draw, out = self.draw, self.messages
        out.extend(self.reasoning() for _ in range(draw(_upto(2))))
        calls = [
            FunctionCallContent(self.call_id(), draw(_TOOL_NAME), draw(_TOOL_ARGUMENTS))
            for _ in range(draw(_between(1, 3)))
        ]
        text = draw(_OPTIONAL_TEXT)
        reasoning = draw(_OPTIONAL_TEXT)
        properties = draw(_ITEM_PROPERTIES)
        out.append(
            Message.assistant(
                text, calls=calls, reasoning=reasoning, author_name=draw(_AUTHOR), additional_properties=properties
            )
        )
        for position in draw(_PERMUTATIONS[len(calls)]):
            call = calls[position]
            if draw(_upto(4)) == 0:
                out.append(self.reasoning())
            out.append(Message.tool(call.call_id, draw(_RESULT_TEXT), additional_properties=draw(_ITEM_PROPERTIES)))


@cache
def _block_lists(blocks: tuple[str, ...], max_size: int) -> st.SearchStrategy[list[str]]:
    return st.lists(st.sampled_from(blocks), max_size=max_size)


@cache
@st.composite
def conversations(
    draw: st.DrawFn, *, max_blocks: int = 18, max_preamble: int = 3, traffic: bool = False
) -> Conversation:
    """An API-valid conversation: ``validate()`` reports nothing for it.

    Optional turn-0 blocks come first (system prompts, a greeting, a tool exchange or a carried-over
    summary before any user message), then a body where any block may follow any other, so system
    messages and summaries also land mid-conversation.  Every call id is unique.

    With ``traffic`` the body also holds the layouts of real agent traffic (:data:`SHAPES`):
    ``validate()`` then reports results that sit apart from their call, as it should for a
    chat-completions payload, but every call id is still unique.
    """
    builder = _Builder(draw)
    for kind in draw(_block_lists(_PREAMBLE_BLOCKS, max_preamble)):
        builder.block(kind)
    # The length is drawn uniformly rather than left to st.lists, whose sizes cluster around five:
    # strategies only show their floors and targets on histories long enough to need compacting.
    body = _TRAFFIC_BLOCK if traffic else _BODY_BLOCK
    for _ in range(draw(_upto(max_blocks))):
        builder.block(draw(body))
    return Conversation(builder.messages)


_DEFECTS = (
    "orphan_result",
    "unanswered_call",
    "drop_result",
    "duplicate_call_id",
    "duplicate_result",
    "move_result",
    "repeated_id_in_one_message",
)


_SURE_DEFECT = st.sampled_from(_DEFECTS[:2])
_MORE_DEFECTS = st.lists(st.sampled_from(_DEFECTS), max_size=3)


@cache
@st.composite
def dirty_conversations(draw: st.DrawFn, *, max_blocks: int = 18) -> Conversation:
    """A conversation with at least one defect ``validate()`` reports.

    The first defect is one that is always reported (a result for a call nobody made, or a call
    that never gets a result); up to three more are drawn from every kind: dropped, duplicated
    and moved results, and reused call ids.  Defects land at any position, including inside a
    tool exchange and before the first message.
    """
    messages = list(draw(conversations(max_blocks=max_blocks)))
    fresh = itertools.count(1)
    defects = [draw(_SURE_DEFECT), *draw(_MORE_DEFECTS)]

    def position() -> int:
        return draw(_upto(len(messages)))

    def pick(indices: Sequence[int]) -> int | None:
        return indices[draw(_upto(len(indices) - 1))] if indices else None

    for defect in defects:
        tools = [i for i, m in enumerate(messages) if m.role == "tool"]
        call_ids = [c.call_id for m in messages for c in m.function_calls]
        name = draw(_TOOL_NAME)
        if defect == "orphan_result":
            messages.insert(position(), Message.tool(f"ghost_{next(fresh)}", draw(_RESULT_TEXT)))
        elif defect == "unanswered_call":
            messages.insert(position(), Message.assistant(calls=[FunctionCallContent(f"lone_{next(fresh)}", name)]))
        elif defect == "drop_result":
            chosen = pick(tools)
            if chosen is not None:
                del messages[chosen]
        elif defect == "duplicate_call_id" and call_ids:
            reused = call_ids[draw(_upto(len(call_ids) - 1))]
            where = position()
            messages[where:where] = [
                Message.assistant(calls=[FunctionCallContent(reused, name)]),
                Message.tool(reused, draw(_RESULT_TEXT)),
            ]
        elif defect == "duplicate_result":
            chosen = pick(tools)
            if chosen is not None:
                original = messages[chosen].function_results[0]
                messages.insert(position(), Message.tool(original.call_id, draw(_RESULT_TEXT)))
        elif defect == "move_result":
            chosen = pick(tools)
            if chosen is not None:
                moved = messages.pop(chosen)
                messages.insert(position(), moved)
        elif defect == "repeated_id_in_one_message":
            repeated = f"twice_{next(fresh)}"
            call = FunctionCallContent(repeated, name)
            where = position()
            messages[where:where] = [Message.assistant(calls=[call, call]), Message.tool(repeated, "once")]
    return Conversation(messages)


# Tokenizers ------------------------------------------------------------------------------------


@cache
def _exact_tokenizer() -> Tokenizer | None:
    try:
        return OpenAITokenizer("o200k_base")
    except TokenizerUnavailableError:
        return None


ESTIMATE: Tokenizer = CharacterEstimatorTokenizer()


def tokenizers() -> st.SearchStrategy[Tokenizer]:
    """Mostly the estimate (fast, and what most users run), sometimes exact o200k counts.

    The same instances every time, so spec strategies can be built once per tokenizer.
    """
    return _TOKENIZERS


def _tokenizer_choices() -> st.SearchStrategy[Tokenizer]:
    exact = _exact_tokenizer()
    choices: list[Tokenizer] = [ESTIMATE, ESTIMATE, ESTIMATE]
    if exact is not None:
        choices.append(exact)
    return st.sampled_from(choices)


_TOKENIZERS = _tokenizer_choices()


# Triggers --------------------------------------------------------------------------------------

# Generated conversations hold roughly 0-40 messages, 0-400 estimated tokens and 0-8 turns, so
# thresholds in these ranges fire on some conversations and not on others.
_TOKEN_LIMITS = st.integers(0, 300)
_MESSAGE_LIMITS = st.integers(0, 24)
_TURN_LIMITS = st.integers(0, 6)
_GROUP_LIMITS = st.integers(0, 16)

_TRIGGER_LEAVES: st.SearchStrategy[Trigger] = st.one_of(
    st.just(always()),
    st.just(never()),
    _TOKEN_LIMITS.map(tokens_exceed),
    _TOKEN_LIMITS.map(tokens_below),
    _MESSAGE_LIMITS.map(messages_exceed),
    _TURN_LIMITS.map(turns_exceed),
    _GROUP_LIMITS.map(groups_exceed),
    st.just(has_tool_calls()),
)


def _combine(inner: st.SearchStrategy[Trigger]) -> st.SearchStrategy[Trigger]:
    parts = st.lists(inner, max_size=3)
    return st.one_of(parts.map(lambda ts: all_of(*ts)), parts.map(lambda ts: any_of(*ts)))


_TRIGGERS: st.SearchStrategy[Trigger] = st.recursive(_TRIGGER_LEAVES, _combine, max_leaves=4)
_OPTIONAL_TARGET: st.SearchStrategy[Trigger | None] = st.one_of(st.none(), st.none(), _TRIGGERS)


def triggers() -> st.SearchStrategy[Trigger]:
    """Every trigger factory, and all_of/any_of over them (empty ones included), nested twice at most."""
    return _TRIGGERS


@cache
def _floor(high: int) -> st.SearchStrategy[int | None]:
    return st.one_of(st.none(), st.integers(0, high))


@cache
def _optional(strategy: st.SearchStrategy[int]) -> st.SearchStrategy[int | None]:
    return st.one_of(st.none(), strategy)


_TRISTATE = st.sampled_from((None, True, False))


# Strategy specs --------------------------------------------------------------------------------

ReplyKind = Literal["text", "empty", "raise", "echo"]


@dataclass(frozen=True)
class ScriptedReply:
    """One scripted summariser reply: text, a blank reply, an exception, or a reply computed from
    the request.  "empty" and "raise" are the two ways a summariser fails."""

    kind: ReplyKind
    text: str = ""

    @property
    def fails(self) -> bool:
        return self.kind in ("empty", "raise") or (self.kind == "text" and not self.text.strip())

    def build(self) -> str | BaseException | Callable[[Sequence[Message]], str]:
        if self.kind == "raise":
            return RuntimeError(self.text or "summariser unavailable")
        if self.kind == "echo":
            return echo_reply
        return self.text


def echo_reply(messages: Sequence[Message]) -> str:
    """A reply that depends on the request, as a real model's does."""
    return f"{len(messages)} messages, {sum(len(m.text) for m in messages)} characters"


def count_formatter(messages: Sequence[Message]) -> str:
    """A custom tool-result formatter (the pluggable-formatter path)."""
    return f"[Tool results: {len(messages)} messages]"


COMPOSITE_KINDS = frozenset({"PipelineStrategy", "TokenBudgetComposedStrategy"})

_CLASSES: dict[str, type[CompactionStrategy]] = {
    cls.__name__: cls
    for cls in (
        TruncationStrategy,
        SlidingWindowStrategy,
        ToolResultCompactionStrategy,
        SelectiveToolCallCompactionStrategy,
        SummarizationStrategy,
        PipelineStrategy,
        TokenBudgetComposedStrategy,
    )
}


@dataclass(frozen=True, eq=False)
class StrategySpec:
    """A recipe for one compaction strategy: class name, constructor keywords, children, replies.

    ``style`` records how the constructor is called where the API offers two spellings
    (``client=`` or ``chat_client=``; ``PipelineStrategy(a, b)`` or ``PipelineStrategy([a, b])``).
    """

    kind: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    children: tuple[StrategySpec, ...] = ()
    replies: tuple[ScriptedReply, ...] = ()
    style: str = ""

    def build(self) -> CompactionStrategy:
        """A fresh strategy (with a fresh scripted client) every call."""
        kwargs = dict(self.kwargs)
        if self.kind == "SummarizationStrategy":
            kwargs[self.style or "client"] = ScriptedChatClient([r.build() for r in self.replies])
            return SummarizationStrategy(**kwargs)
        children = [child.build() for child in self.children]
        if self.kind == "PipelineStrategy":
            return PipelineStrategy(children) if self.style == "list" else PipelineStrategy(*children)
        if self.kind == "TokenBudgetComposedStrategy":
            return TokenBudgetComposedStrategy(strategies=children, **kwargs)
        return _CLASSES[self.kind](**kwargs)

    def walk(self) -> Iterator[StrategySpec]:
        """This spec and every spec nested in it, depth first."""
        yield self
        for child in self.children:
            yield from child.walk()

    @property
    def always_fails(self) -> bool:
        """A summariser every one of whose replies is a failure."""
        return self.kind == "SummarizationStrategy" and all(r.fails for r in self.replies)

    @property
    def drops_system(self) -> bool:
        """Whether some strategy in the tree is allowed to exclude system messages."""
        return any(s.kind == "TruncationStrategy" and s.kwargs.get("preserve_system") is False for s in self.walk())

    @property
    def has_failing_summarizer(self) -> bool:
        return any(s.always_fails for s in self.walk())

    def without_failing_summarizers(self) -> StrategySpec | None:
        """The same tree with every always-failing summariser removed (None if that is the root)."""
        if self.always_fails:
            return None
        if self.kind not in COMPOSITE_KINDS:
            return self
        kept = tuple(c for c in (child.without_failing_summarizers() for child in self.children) if c is not None)
        return replace(self, children=kept)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """Hypothesis prints falsifying examples with this: the constructor-like repr below."""
        printer.text(repr(self))

    def __repr__(self) -> str:
        parts = [repr(child) for child in self.children]
        if self.kind == "PipelineStrategy" and self.style == "list":
            parts = [f"[{', '.join(parts)}]"]
        elif self.kind == "TokenBudgetComposedStrategy":
            parts = [f"strategies=[{', '.join(parts)}]"]
        if self.kind == "SummarizationStrategy":
            replies = ", ".join(f"{r.kind}:{r.text!r}" for r in self.replies)
            parts.append(f"{self.style or 'client'}=ScriptedChatClient([{replies}])")
        for key, value in self.kwargs.items():
            shown = value.__name__ if callable(value) and hasattr(value, "__name__") else repr(value)
            parts.append(f"{key}={shown}")
        return f"{self.kind}({', '.join(parts)})"


def _keywords(**values: Any) -> dict[str, Any]:
    """Constructor keywords without the ones left at their default (None), so reprs stay short."""
    return {key: value for key, value in values.items() if value is not None}


@st.composite
def truncation_specs(draw: st.DrawFn, tokenizer: Tokenizer) -> StrategySpec:
    """TruncationStrategy in the trigger style or the keyword style (on messages, or on tokens
    when a tokenizer is given), with both preservation switches."""
    extra = _keywords(
        preserve_system=draw(_TRISTATE),
        preserve_first_user_group=draw(_TRISTATE),
    )
    if draw(_BOOLEANS):
        kwargs = _keywords(trigger=draw(_TRIGGERS), minimum_preserved=draw(_floor(6)), target=draw(_OPTIONAL_TARGET))
        return StrategySpec("TruncationStrategy", {**kwargs, **extra})
    with_tokens = draw(_BOOLEANS)
    max_n = draw(_between(1, 300 if with_tokens else 24))
    compact_to = draw(_optional(_between(1, max_n)))
    kwargs = _keywords(
        max_n=max_n,
        compact_to=compact_to,
        tokenizer=tokenizer if with_tokens else None,
        minimum_preserved=draw(_floor(4)),
    )
    return StrategySpec("TruncationStrategy", {**kwargs, **extra})


_WINDOW_FLOOR_NAMES = st.sampled_from(("minimum_preserved", "minimum_preserved_turns"))
_TOOL_FLOOR_STYLES = st.sampled_from(("defaults", "keep_last", "keep_last_with_trigger", "trigger"))
_FORMATTERS = st.sampled_from((None, None, None, count_formatter))


@st.composite
def sliding_window_specs(draw: st.DrawFn, tokenizer: Tokenizer) -> StrategySpec:
    """SlidingWindowStrategy with ``keep_last_groups`` or with a trigger and a turn floor (spelled
    either ``minimum_preserved`` or ``minimum_preserved_turns``)."""
    if draw(_BOOLEANS):
        return StrategySpec("SlidingWindowStrategy", {"keep_last_groups": draw(_between(1, 8))})
    floor_name = draw(_WINDOW_FLOOR_NAMES)
    kwargs = _keywords(trigger=draw(_TRIGGERS), target=draw(_OPTIONAL_TARGET), **{floor_name: draw(_floor(3))})
    return StrategySpec("SlidingWindowStrategy", kwargs)


@st.composite
def _tool_floor_kwargs(draw: st.DrawFn) -> dict[str, Any]:
    style = draw(_TOOL_FLOOR_STYLES)
    if style == "defaults":
        return {}
    if style == "keep_last":
        return {"keep_last_tool_call_groups": draw(_upto(3))}
    if style == "keep_last_with_trigger":
        return _keywords(
            keep_last_tool_call_groups=draw(_upto(3)),
            trigger=draw(_TRIGGERS),
            target=draw(_OPTIONAL_TARGET),
        )
    return _keywords(trigger=draw(_TRIGGERS), minimum_preserved=draw(_floor(4)), target=draw(_OPTIONAL_TARGET))


@st.composite
def tool_result_specs(draw: st.DrawFn, tokenizer: Tokenizer) -> StrategySpec:
    """ToolResultCompactionStrategy in every floor style, with random preview caps and sometimes a
    custom formatter."""
    kwargs = draw(_tool_floor_kwargs())
    kwargs.update(
        _keywords(
            max_result_chars=draw(_optional(_between(8, 100))),
            max_summary_chars=draw(_optional(_between(32, 400))),
            formatter=draw(_FORMATTERS),
        )
    )
    return StrategySpec("ToolResultCompactionStrategy", kwargs)


@st.composite
def selective_specs(draw: st.DrawFn, tokenizer: Tokenizer) -> StrategySpec:
    """SelectiveToolCallCompactionStrategy in every floor style."""
    return StrategySpec("SelectiveToolCallCompactionStrategy", draw(_tool_floor_kwargs()))


_REPLIES = st.one_of(
    st.sampled_from(TEXTS[:10]).map(lambda text: ScriptedReply("text", "a summary: " + text)),
    st.just(ScriptedReply("text", "[Summary] already prefixed")),
    st.just(ScriptedReply("echo")),
    st.sampled_from(("", "   ", "\n\t")).map(lambda text: ScriptedReply("empty", text)),
    st.sampled_from(("timeout", "rate limited", "")).map(lambda text: ScriptedReply("raise", text)),
)


_CLIENT_KEYWORDS = st.sampled_from(("client", "chat_client"))
_PROMPT_KEYWORDS = st.sampled_from(("prompt", "summarization_prompt"))
_INPUT_BUDGETS = st.sampled_from((16_000, None, 60, 150, 300))
_PROMPTS = st.sampled_from((None, "Summarise briefly.", "Résume la conversation."))


@cache
def _reply_lists(replies: st.SearchStrategy[ScriptedReply]) -> st.SearchStrategy[list[ScriptedReply]]:
    return st.lists(replies, min_size=1, max_size=3)


@st.composite
def summarization_specs(
    draw: st.DrawFn, tokenizer: Tokenizer, *, replies: st.SearchStrategy[ScriptedReply] = _REPLIES
) -> StrategySpec:
    """SummarizationStrategy in the keyword style (target_count/threshold) or the trigger style,
    either client spelling, a default or custom prompt, and an input budget from tight to none.

    ``on_error`` stays "report" here: a raising summariser is a separate, explicit test.
    """
    style = draw(_CLIENT_KEYWORDS)
    prompt_key = draw(_PROMPT_KEYWORDS)
    common = _keywords(max_input_tokens=draw(_INPUT_BUDGETS), **{prompt_key: draw(_PROMPTS)})
    if draw(_BOOLEANS):
        kwargs = _keywords(target_count=draw(_optional(_between(1, 6))), threshold=draw(_floor(3)))
    else:
        kwargs = _keywords(trigger=draw(_TRIGGERS), minimum_preserved=draw(_floor(5)), target=draw(_OPTIONAL_TARGET))
    scripted = tuple(draw(_reply_lists(replies)))
    return StrategySpec("SummarizationStrategy", {**kwargs, **common}, replies=scripted, style=style)


SpecFactory = Callable[[Tokenizer], st.SearchStrategy[StrategySpec]]

LEAF_FACTORIES: tuple[SpecFactory, ...] = (
    truncation_specs,
    sliding_window_specs,
    tool_result_specs,
    selective_specs,
    summarization_specs,
)


_BUILT: dict[tuple[object, ...], st.SearchStrategy[StrategySpec]] = {}


def _once(
    key: tuple[object, ...], build: Callable[[], st.SearchStrategy[StrategySpec]]
) -> st.SearchStrategy[StrategySpec]:
    """Build a spec strategy once per key (see :func:`_upto` for why that matters).  Keys use the
    tokenizer's name: the generated trees only ever use the instances :func:`tokenizers` hands out."""
    if key not in _BUILT:
        _BUILT[key] = build()
    return _BUILT[key]


def specs_for(factory: SpecFactory, tokenizer: Tokenizer) -> st.SearchStrategy[StrategySpec]:
    """``factory(tokenizer)``, built once per pair."""
    return _once(("specs", factory, tokenizer.name), lambda: factory(tokenizer))


def leaf_specs(tokenizer: Tokenizer) -> st.SearchStrategy[StrategySpec]:
    """Any non-composite strategy."""
    return _once(("leaves", tokenizer.name), lambda: st.one_of([specs_for(f, tokenizer) for f in LEAF_FACTORIES]))


_PIPELINE_STYLES = st.sampled_from(("args", "list"))


@cache
def _child_lists(children: st.SearchStrategy[StrategySpec]) -> st.SearchStrategy[list[StrategySpec]]:
    return st.lists(children, max_size=3)


@st.composite
def _pipeline_specs(draw: st.DrawFn, children: st.SearchStrategy[StrategySpec]) -> StrategySpec:
    kids = tuple(draw(_child_lists(children)))
    return StrategySpec("PipelineStrategy", children=kids, style=draw(_PIPELINE_STYLES))


@st.composite
def _budget_specs(draw: st.DrawFn, children: st.SearchStrategy[StrategySpec], tokenizer: Tokenizer) -> StrategySpec:
    kwargs = _keywords(
        token_budget=draw(_between(1, 300)),
        tokenizer=tokenizer if draw(_BOOLEANS) else None,
        early_stop=draw(_TRISTATE),
    )
    return StrategySpec("TokenBudgetComposedStrategy", kwargs, children=tuple(draw(_child_lists(children))))


_MOSTLY = st.sampled_from((True, True, True, False))


@st.composite
def gentlest_first_specs(draw: st.DrawFn, tokenizer: Tokenizer) -> StrategySpec:
    """The pipeline the compaction documentation recommends, gentlest first: collapse old tool
    results, summarise, slide the window, truncate as a backstop; each stage usually present and
    randomly parameterised.  Later stages then work on summaries the earlier ones just wrote."""
    stages = [
        draw(specs_for(factory, tokenizer))
        for factory in (tool_result_specs, summarization_specs, sliding_window_specs, truncation_specs)
        if draw(_MOSTLY)
    ]
    return StrategySpec("PipelineStrategy", children=tuple(stages))


def strategy_specs(
    tokenizer: Tokenizer, *, depth: int = 2, leaves: SpecFactory = leaf_specs
) -> st.SearchStrategy[StrategySpec]:
    """A leaf strategy, or a pipeline / token-budget composition nested at most ``depth`` deep.

    Every strategy that takes a tokenizer gets the same one: mixing vocabularies in one tree is a
    configuration error the library rejects, not something to compact with.
    """
    if depth <= 0:
        return leaves(tokenizer)

    def build() -> st.SearchStrategy[StrategySpec]:
        children = strategy_specs(tokenizer, depth=depth - 1, leaves=leaves)
        return st.one_of(
            leaves(tokenizer),
            _pipeline_specs(children),
            _budget_specs(children, tokenizer),
            specs_for(gentlest_first_specs, tokenizer),
        )

    return _once(("tree", tokenizer.name, depth, leaves), build)
