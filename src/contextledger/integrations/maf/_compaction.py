"""contextledger's strategies under MAF's names and arguments, as async callables over MAF's message list."""

from __future__ import annotations

import copy
import inspect
import uuid
from collections.abc import Sequence
from typing import Any, ClassVar, Final

import agent_framework as maf
from agent_framework import (
    GROUP_ANNOTATION_KEY,
    GROUP_ID_KEY,
    SUMMARIZED_BY_SUMMARY_ID_KEY,
    SUMMARY_OF_GROUP_IDS_KEY,
    SUMMARY_OF_MESSAGE_IDS_KEY,
)

from contextledger import compaction
from contextledger.compaction import CompactionResult, compact_with_report
from contextledger.exceptions import ConfigurationError, InvalidMessageError
from contextledger.integrations.maf._clients import _as_chat_client, _as_tokenizer
from contextledger.integrations.maf._messages import _EXCLUDE_REASON, _EXCLUDED, from_maf_message, to_maf_message
from contextledger.messages import FunctionCallContent, HostedCallContent, Message
from contextledger.tokenizers import Tokenizer


def _unwrap(value: object) -> object:
    return value.strategy if isinstance(value, AgentFrameworkStrategy) else value


def _adapt_arguments(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Arguments as the sample wrote them, turned into what contextledger's constructors take."""
    adapted = dict(kwargs)
    if "tokenizer" in adapted:
        adapted["tokenizer"] = _as_tokenizer(adapted["tokenizer"])
    for key in ("client", "chat_client"):
        if key in adapted:
            adapted[key] = _as_chat_client(adapted[key])
    if "strategies" in adapted:
        adapted["strategies"] = [_unwrap(item) for item in adapted["strategies"]]
    return adapted


class _Converted:
    """MAF's still-included messages as the engine sees them, and how to map its answer back.

    ``positions[number]`` is where ``ours[number]`` sits in MAF's list.  A call
    (function or hosted) whose every later result MAF has already excluded is
    left out of its converted message (``hidden[number]`` lists those results'
    positions): the engine then sees the rest of the tool group complete, so it
    can still collapse or drop it whole, and the hidden results follow their call
    into any summary.  A call with no result yet (an approval pending) is kept.
    """

    def __init__(self, messages: Sequence[maf.Message]) -> None:
        excluded = [bool(message.additional_properties.get(_EXCLUDED)) for message in messages]
        answered_by = _results_by_call(messages)
        self.positions: list[int] = []
        self.ours: list[Message] = []
        self.hidden: dict[int, list[int]] = {}
        for position, message in enumerate(messages):
            if excluded[position]:
                continue
            converted = from_maf_message(message, position=position)
            later = {
                content.call_id: [where for where in answered_by.get(content.call_id, ()) if where > position]
                for content in converted.contents
                if isinstance(content, _CALLS)
            }
            gone = {call_id for call_id, results in later.items() if results and all(excluded[w] for w in results)}
            kept = tuple(
                content
                for content in converted.contents
                if not (isinstance(content, _CALLS) and content.call_id in gone)
            )
            if gone and kept:
                converted = Message(
                    converted.role,
                    kept,
                    author_name=converted.author_name,
                    message_id=converted.message_id,
                    additional_properties=converted.additional_properties,
                    extra=converted.extra,
                )
                self.hidden[len(self.ours)] = sorted({where for call_id in gone for where in later[call_id]})
            self.positions.append(position)
            self.ours.append(converted)


_CALLS: Final = (FunctionCallContent, HostedCallContent)


def _results_by_call(messages: Sequence[maf.Message]) -> dict[str, list[int]]:
    """Positions of the messages holding a result (function or hosted), by the call id they answer."""
    found: dict[str, list[int]] = {}
    for position, message in enumerate(messages):
        for content in message.contents:
            if content.type == "function_result" or content.type.endswith("_tool_result"):
                call_id = content.image_id if content.type == "image_generation_tool_result" else content.call_id
                if isinstance(call_id, str):
                    found.setdefault(call_id, []).append(position)
    return found


async def _compact(
    strategy: compaction.CompactionStrategy,
    tokenizer: Tokenizer | None,
    messages: Sequence[maf.Message],
) -> tuple[_Converted, CompactionResult] | None:
    """Run ``strategy`` over the messages MAF still includes; None when nothing changed.

    The result's projection holds the converted messages themselves, so identity
    maps it back to MAF's list.
    """
    converted = _Converted(messages)
    result = await compact_with_report(converted.ours, strategy=strategy, tokenizer=tokenizer)
    projection = result.messages
    if len(projection) == len(converted.ours) and all(a is b for a, b in zip(projection, converted.ours)):
        return None
    return converted, result


def _placement(
    result: CompactionResult, ours: list[Message]
) -> tuple[set[int], dict[int, list[Message]], list[Message]]:
    """Which converted messages the projection kept, and where its new messages (summaries) go:
    before the kept message that follows them, or at the end."""
    slot = {id(message): number for number, message in enumerate(ours)}
    kept: set[int] = set()
    before: dict[int, list[Message]] = {}
    pending: list[Message] = []
    for message in result.messages:
        number = slot.get(id(message))
        if number is None:
            pending.append(message)
            continue
        kept.add(number)
        if pending:
            before[number] = pending
            pending = []
    return kept, before, pending


def _reasons(result: CompactionResult) -> dict[int, str]:
    reasons: dict[int, str] = {}
    for group in result.index.groups:
        if group.excluded:
            for message in group.messages:
                reasons[id(message)] = f"contextledger:{group.exclusion_reason or 'excluded'}"
    return reasons


class AgentFrameworkStrategy:
    """A contextledger strategy as MAF's ``CompactionStrategy``: ``await strategy(messages) -> bool``.

    MAF hands a strategy its message list and reads back which messages are
    excluded (``additional_properties["_excluded"]``) and any messages inserted.
    This adapter runs contextledger's engine over the messages MAF still
    includes, marks the ones the projection leaves out (with the reason), and
    inserts contextledger's summary messages where the projection places them,
    so what MAF then sends is exactly contextledger's projection.  Messages MAF
    had already excluded stay excluded and unseen.
    """

    def __init__(self, strategy: compaction.CompactionStrategy, *, tokenizer: object = None) -> None:
        if not isinstance(strategy, compaction.CompactionStrategy):
            raise ConfigurationError(
                f"AgentFrameworkStrategy wraps a contextledger CompactionStrategy, got {strategy!r}"
            )
        self.strategy = strategy
        # Not named ``tokenizer``: MAF reads that attribute and would re-tokenise every message
        # with it for annotations this engine never uses.
        self.counting_tokenizer = _as_tokenizer(tokenizer)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.strategy!r})"

    async def __call__(self, messages: list[maf.Message]) -> bool:
        """Compact MAF's list in place; True when the projection changed."""
        if not isinstance(messages, list):
            raise InvalidMessageError(
                f"a MAF compaction strategy takes a list of messages, got {type(messages).__name__}"
            )
        self._check(messages)
        outcome = await _compact(self.strategy, self.counting_tokenizer, messages)
        if outcome is None:
            return False
        converted, result = outcome
        ours = converted.ours
        kept, before, trailing = _placement(result, ours)
        reasons = _reasons(result)
        slot_of = {position: number for number, position in enumerate(converted.positions)}
        written: dict[int, maf.Message] = {}  # id(contextledger summary) -> the MAF message written for it
        rebuilt: list[maf.Message] = []
        for position, message in enumerate(messages):
            number = slot_of.get(position)
            if number is not None:
                for new in before.get(number, ()):
                    written[id(new)] = _written(new)
                    rebuilt.append(written[id(new)])
                if number not in kept:
                    message.additional_properties[_EXCLUDED] = True
                    message.additional_properties[_EXCLUDE_REASON] = reasons.get(
                        id(ours[number]), f"contextledger:{self.strategy.name}"
                    )
            rebuilt.append(message)
        for new in trailing:
            written[id(new)] = _written(new)
            rebuilt.append(written[id(new)])
        annotated = any(GROUP_ANNOTATION_KEY in message.additional_properties for message in messages)
        _link_summaries(result, written, converted, messages)
        messages[:] = rebuilt
        if annotated and written:
            _annotate_as_maf_does(messages, first=min(map(rebuilt.index, written.values())))
        return True

    def _check(self, messages: list[maf.Message]) -> None:
        """Arguments the engine accepted for MAF's sake but can only honour on some lists."""


def _annotate_as_maf_does(messages: list[maf.Message], *, first: int) -> None:
    """Give inserted summaries MAF's group annotations, as MAF's own strategies do after inserting
    (re-annotating from the first insertion), without letting that bookkeeping change what is sent:
    MAF's annotator re-includes a call it sees answered, so each message's inclusion is put back as
    the projection decided it."""
    decided = [message.additional_properties.get(_EXCLUDED, _UNSET) for message in messages]
    maf.annotate_message_groups(messages, from_index=first)
    for message, excluded in zip(messages, decided):
        if excluded is _UNSET:
            message.additional_properties.pop(_EXCLUDED, None)
        else:
            message.additional_properties[_EXCLUDED] = excluded


_UNSET: Final = object()


def _written(summary: Message) -> maf.Message:
    """The MAF message for a message contextledger wrote (a summary): with an id of its own, as MAF
    expects of every message it links, and marked included."""
    written = to_maf_message(summary)
    if not written.message_id:
        written.message_id = f"contextledger_summary_{uuid.uuid4().hex}"
    written.additional_properties[_EXCLUDED] = False
    return written


def _link_summaries(
    result: CompactionResult,
    written: dict[int, maf.Message],
    converted: _Converted,
    messages: Sequence[maf.Message],
) -> None:
    """Write MAF's trace links between each summary and the messages it stands for.

    The summary gets ``_group._summary_of_message_ids`` (and ``_summary_of_group_ids`` when MAF
    had grouped them), each original ``_group._summarized_by_summary_id``: MAF reads these to keep
    summaries across tool-loop iterations, and users read them to audit a summary.  Results MAF had
    already excluded count as part of the call they answer.
    """
    position_of = {id(message): converted.positions[number] for number, message in enumerate(converted.ours)}
    number_of = {id(message): number for number, message in enumerate(converted.ours)}
    for group in result.index.groups:
        summary = written.get(id(group.messages[0])) if group.replaces and group.messages else None
        if summary is None:
            continue
        positions: set[int] = set()
        for replaced in group.replaces:
            for message in replaced.messages:
                if id(message) in position_of:
                    positions.add(position_of[id(message)])
                    positions.update(converted.hidden.get(number_of[id(message)], ()))
        originals = [messages[position] for position in sorted(positions)]
        group_ids: list[str] = []
        for original in originals:
            annotation = original.additional_properties.setdefault(GROUP_ANNOTATION_KEY, {})
            annotation[SUMMARIZED_BY_SUMMARY_ID_KEY] = summary.message_id
            group_id = annotation.get(GROUP_ID_KEY)
            if isinstance(group_id, str) and group_id not in group_ids:
                group_ids.append(group_id)
        links = summary.additional_properties.setdefault(GROUP_ANNOTATION_KEY, {})
        links[SUMMARY_OF_MESSAGE_IDS_KEY] = [original.message_id for original in originals if original.message_id]
        links[SUMMARY_OF_GROUP_IDS_KEY] = group_ids


async def apply_compaction(
    messages: Sequence[maf.Message],
    *,
    strategy: AgentFrameworkStrategy | compaction.CompactionStrategy | maf.CompactionStrategy | None,
    tokenizer: object = None,
) -> list[maf.Message]:
    """The MAF messages ``strategy`` would send, leaving ``messages`` and their annotations untouched.

    The seed's ad hoc call, ``await apply_compaction(messages, strategy=...,
    tokenizer=...)``, on MAF messages: kept messages are the caller's own
    objects, summaries are new ones.  ``tokenizer`` may be contextledger's or
    MAF's.  ``strategy`` may also be one a user wrote against MAF's API (an
    async ``strategy(messages) -> bool`` that marks ``_excluded`` in place): it
    runs on copies annotated by MAF, so the caller's list is left as it was.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidMessageError(f"messages must be a list of agent_framework.Message, got {type(messages).__name__}")
    if strategy is None:
        return [message for message in messages if not message.additional_properties.get(_EXCLUDED)]
    if isinstance(strategy, AgentFrameworkStrategy):
        engine = strategy.strategy
        counting = _as_tokenizer(tokenizer) if tokenizer is not None else strategy.counting_tokenizer
    elif isinstance(strategy, compaction.CompactionStrategy):
        engine, counting = strategy, _as_tokenizer(tokenizer)
    elif isinstance(strategy, maf.CompactionStrategy):
        return await _apply_foreign(messages, strategy, tokenizer)
    else:
        raise ConfigurationError(
            "strategy must be a contextledger strategy or a MAF one (async strategy(messages) -> bool), "
            f"got {strategy!r}"
        )
    outcome = await _compact(engine, counting, messages)
    if outcome is None:
        return [message for message in messages if not message.additional_properties.get(_EXCLUDED)]
    converted, result = outcome
    original = {id(ours): messages[position] for ours, position in zip(converted.ours, converted.positions)}
    return [original.get(id(message)) or to_maf_message(message) for message in result.messages]


async def _apply_foreign(
    messages: Sequence[maf.Message], strategy: maf.CompactionStrategy, tokenizer: object
) -> list[maf.Message]:
    """Run a strategy written against MAF's API on copies, as MAF's own ``apply_compaction`` would run it
    (grouping annotations first, token counts when a tokenizer is given), and project.

    Kept messages come back as the caller's objects; messages the strategy inserted come back as it
    wrote them.  Edits it made to a kept message's contents are not carried back.
    """
    copies = [copy.deepcopy(message) for message in messages]
    source = {id(duplicate): message for duplicate, message in zip(copies, messages)}
    counting = _as_maf_tokenizer(tokenizer)
    maf.annotate_message_groups(copies, tokenizer=counting)
    if not isinstance(await strategy(copies), bool):
        raise ConfigurationError(f"the MAF strategy {strategy!r} must return True or False")
    return [
        source.get(id(duplicate), duplicate)
        for duplicate in copies
        if not duplicate.additional_properties.get(_EXCLUDED)
    ]


def _as_maf_tokenizer(value: object) -> Any:
    """A tokenizer MAF can call: anything with ``count_tokens``, or a contextledger tokenizer (its text count)."""
    if value is None or callable(getattr(value, "count_tokens", None)):
        return value
    if isinstance(value, Tokenizer):
        return _TextCounter(value)
    raise ConfigurationError(
        f"tokenizer must be a contextledger Tokenizer or a MAF tokenizer with count_tokens(text), got {value!r}"
    )


class _TextCounter:
    """A contextledger tokenizer seen through MAF's one-method protocol."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    def count_tokens(self, text: str) -> int:
        return self.tokenizer.count_text(text)


class _SameName(AgentFrameworkStrategy):
    """Builds contextledger's ``engine`` from the arguments a MAF sample passes, adapting MAF's
    tokenizers, chat clients and this module's strategies on the way."""

    engine: ClassVar[type[compaction.CompactionStrategy]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs, counting = self._spellings(dict(kwargs))
        if "prefix_stable" in inspect.signature(type(self).engine).parameters:
            # MAF's rule, which its own tests pin: a target is met exactly, on every call.
            kwargs.setdefault("prefix_stable", False)
        super().__init__(type(self).engine(*self._positional(args), **_adapt_arguments(kwargs)), tokenizer=counting)

    @staticmethod
    def _positional(args: tuple[Any, ...]) -> tuple[Any, ...]:
        return args

    def _spellings(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], object]:
        """MAF's argument names turned into the engine's; and the tokenizer this wrapper counts with
        when the engine's strategy takes none."""
        return kwargs, None


class TruncationStrategy(_SameName):
    """contextledger's truncation under MAF's name: ``TruncationStrategy(max_n=32_000, compact_to=16_000,
    tokenizer=...)``; takes every argument of :class:`contextledger.compaction.TruncationStrategy`."""

    engine = compaction.TruncationStrategy


class SlidingWindowStrategy(_SameName):
    """contextledger's sliding window under MAF's name: ``SlidingWindowStrategy(keep_last_groups=20)``;
    system messages, turn 0 and summaries always stay.

    MAF's ``preserve_system=False`` is accepted so samples run unchanged, but the window keeps
    system messages whatever it says (design.md#strategies): on a list that has an included system message it
    raises :class:`ConfigurationError` rather than keep what the caller asked it to drop.
    """

    engine = compaction.SlidingWindowStrategy

    def _spellings(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], object]:
        preserve_system = kwargs.pop("preserve_system", True)
        if not isinstance(preserve_system, bool):
            raise ConfigurationError(f"preserve_system must be True or False, got {preserve_system!r}")
        self.preserve_system = preserve_system
        return kwargs, None

    def _check(self, messages: list[maf.Message]) -> None:
        if self.preserve_system:
            return
        for position, message in enumerate(messages):
            if message.role == "system" and not message.additional_properties.get(_EXCLUDED):
                raise ConfigurationError(
                    f"SlidingWindowStrategy(preserve_system=False): message {position} is a system message, and "
                    "the sliding window always keeps system messages; use TruncationStrategy(preserve_system=False) "
                    "to let compaction drop them"
                )


class ToolResultCompactionStrategy(_SameName):
    """contextledger's tool-result collapse under MAF's name:
    ``ToolResultCompactionStrategy(keep_last_tool_call_groups=1)``."""

    engine = compaction.ToolResultCompactionStrategy


class SelectiveToolCallCompactionStrategy(_SameName):
    """contextledger's selective tool-call removal under MAF's name:
    ``SelectiveToolCallCompactionStrategy(keep_last_tool_call_groups=1)``."""

    engine = compaction.SelectiveToolCallCompactionStrategy


class SummarizationStrategy(_SameName):
    """contextledger's summarisation under MAF's name: ``SummarizationStrategy(client=summarizer_client,
    target_count=4, threshold=2, prompt=...)``.  ``client`` may be a MAF chat client or a contextledger
    one; a failed summary restores everything and inserts nothing."""

    engine = compaction.SummarizationStrategy

    @staticmethod
    def _positional(args: tuple[Any, ...]) -> tuple[Any, ...]:
        return (_as_chat_client(args[0]), *args[1:]) if args else args


class ContextWindowCompactionStrategy(_SameName):
    """contextledger's context-window policy under MAF's name: ``ContextWindowCompactionStrategy(
    max_context_window_tokens=128_000, max_output_tokens=16_384, keep_last_tool_call_groups=4,
    tool_eviction_threshold=0.5, truncation_threshold=0.8)``; tool results collapse first, then the
    oldest groups go."""

    engine = compaction.ContextWindowCompactionStrategy


class TokenBudgetComposedStrategy(_SameName):
    """contextledger's token-budget composition under MAF's name: ``TokenBudgetComposedStrategy(
    token_budget=16_000, tokenizer=..., strategies=[...])``, the children being strategies of this module."""

    engine = compaction.TokenBudgetComposedStrategy


class PipelineStrategy(_SameName):
    """contextledger's pipeline (the seed's ``PipelineCompactionStrategy``): children in order, each
    with its own trigger."""

    engine = compaction.PipelineStrategy

    @staticmethod
    def _positional(args: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(
            [_unwrap(item) for item in arg] if isinstance(arg, (list, tuple)) else _unwrap(arg) for arg in args
        )
