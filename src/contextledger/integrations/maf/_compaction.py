"""contextledger's strategies under MAF's names and arguments, as async callables over MAF's message list."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import agent_framework as maf

from contextledger import compaction
from contextledger.compaction import CompactionResult, compact_messages
from contextledger.exceptions import ConfigurationError, InvalidMessageError
from contextledger.integrations.maf._clients import _as_chat_client, _as_tokenizer
from contextledger.integrations.maf._messages import _EXCLUDE_REASON, _EXCLUDED, from_maf_message, to_maf_message
from contextledger.messages import (
    Message,
)
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


async def _compact(
    strategy: compaction.CompactionStrategy,
    tokenizer: Tokenizer | None,
    messages: Sequence[maf.Message],
) -> tuple[list[int], CompactionResult, list[Message]] | None:
    """Run ``strategy`` over the messages MAF still includes.

    Returns the positions of those messages in ``messages``, the result, and
    their converted counterparts (the result's projection holds these very
    objects, so identity maps it back), or None when nothing changed.
    """
    positions = [number for number, message in enumerate(messages) if not message.additional_properties.get(_EXCLUDED)]
    ours = [from_maf_message(messages[number], position=number) for number in positions]
    result = await compact_messages(ours, strategy=strategy, tokenizer=tokenizer)
    projection = result.messages
    if len(projection) == len(ours) and all(a is b for a, b in zip(projection, ours)):
        return None
    return positions, result, ours


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
        outcome = await _compact(self.strategy, self.counting_tokenizer, messages)
        if outcome is None:
            return False
        positions, result, ours = outcome
        kept, before, trailing = _placement(result, ours)
        reasons = _reasons(result)
        slot_of = {position: number for number, position in enumerate(positions)}
        rebuilt: list[maf.Message] = []
        for position, message in enumerate(messages):
            number = slot_of.get(position)
            if number is not None:
                rebuilt.extend(to_maf_message(new) for new in before.get(number, ()))
                if number not in kept:
                    message.additional_properties[_EXCLUDED] = True
                    message.additional_properties[_EXCLUDE_REASON] = reasons.get(
                        id(ours[number]), f"contextledger:{self.strategy.name}"
                    )
            rebuilt.append(message)
        rebuilt.extend(to_maf_message(new) for new in trailing)
        messages[:] = rebuilt
        return True


async def apply_compaction(
    messages: Sequence[maf.Message],
    *,
    strategy: AgentFrameworkStrategy | compaction.CompactionStrategy | None,
    tokenizer: object = None,
) -> list[maf.Message]:
    """The MAF messages ``strategy`` would send, leaving ``messages`` and their annotations untouched.

    The seed's ad hoc call, ``await apply_compaction(messages, strategy=...,
    tokenizer=...)``, on MAF messages: kept messages are the caller's own
    objects, summaries are new ones.  ``tokenizer`` may be contextledger's or
    MAF's.
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
    else:
        raise ConfigurationError(f"strategy must be a contextledger strategy, got {strategy!r}")
    outcome = await _compact(engine, counting, messages)
    if outcome is None:
        return [message for message in messages if not message.additional_properties.get(_EXCLUDED)]
    positions, result, ours = outcome
    original = {id(ours[number]): messages[position] for number, position in enumerate(positions)}
    return [original.get(id(message)) or to_maf_message(message) for message in result.messages]


class _SameName(AgentFrameworkStrategy):
    """Builds contextledger's ``engine`` from the arguments a MAF sample passes, adapting MAF's
    tokenizers, chat clients and this module's strategies on the way."""

    engine: ClassVar[type[compaction.CompactionStrategy]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(type(self).engine(*self._positional(args), **_adapt_arguments(kwargs)))

    @staticmethod
    def _positional(args: tuple[Any, ...]) -> tuple[Any, ...]:
        return args


class TruncationStrategy(_SameName):
    """contextledger's truncation under MAF's name: ``TruncationStrategy(max_n=32_000, compact_to=16_000,
    tokenizer=...)``; takes every argument of :class:`contextledger.compaction.TruncationStrategy`."""

    engine = compaction.TruncationStrategy


class SlidingWindowStrategy(_SameName):
    """contextledger's sliding window under MAF's name: ``SlidingWindowStrategy(keep_last_groups=20)``;
    system messages, turn 0 and summaries always stay."""

    engine = compaction.SlidingWindowStrategy


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
