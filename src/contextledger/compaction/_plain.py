"""The lean grouping loop: a plain run of messages read the way the general loop groups it.

Most histories are long plain runs: user and assistant text, system prompts, and assistant
messages of reasoning, text and function calls whose results come right after them.
:func:`read_plain_run` reads such a run with a loop that only records where each group starts
and what it counts; sizes and token counts follow in C, and the grouper (``_grouping``) writes
the :class:`PlainRun` into the table in a few extends.  At the first message it does not take
(a reasoning-only message, a hosted call, an approval, a result that sits apart, a call reusing
the id of one still waiting, an open tail from the last append) it stops, and the general loop
continues from the same state.  The two agree on every input:
``tests/compaction/test_columns.py`` compares them on random conversations.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import sub

from contextledger.compaction._table import _SYSTEM, _TEXT, _TOOL_CALL, _USER, GroupKind
from contextledger.messages import FunctionCallContent, FunctionResultContent, Message, ReasoningContent, TextContent
from contextledger.tokenizers import CALL_OVERHEAD, MESSAGE_OVERHEAD, CharacterEstimatorTokenizer

__all__ = ["PlainRun", "read_plain_run"]


def _plain_parts(contents: tuple[object, ...]) -> tuple[int, list[str]] | None:
    """For an assistant message of several contents: the characters the estimate reads and the
    ids of the calls it opens, when it holds only reasoning, text and function calls, no call id
    twice, and not reasoning alone (that may still join the next call); else None, for the
    general loop."""
    chars = 0
    opened: list[str] = []
    reasoning = 0
    for content in contents:
        kind = type(content)
        if kind is TextContent:
            chars += len(content.text)  # type: ignore[attr-defined]
        elif kind is FunctionCallContent:
            chars += len(content.name) + len(content.arguments)  # type: ignore[attr-defined]
            opened.append(content.call_id)  # type: ignore[attr-defined]
        elif kind is ReasoningContent:
            chars += len(content.text)  # type: ignore[attr-defined]
            reasoning += 1
        else:
            return None
    if reasoning == len(contents) or len(set(opened)) != len(opened):
        return None
    return chars, opened


@dataclass(slots=True)
class PlainRun:
    """What the lean loop read from the start of a batch: one entry per group in each list."""

    taken: int  # how many messages of the batch it took
    kinds: list[GroupKind]
    turns: list[int | None]
    starts: list[int]  # where each group starts in the batch
    sizes: list[int]
    tokens: list[int]
    added: int  # the tokens of every message taken
    calls: list[int]  # the groups made by a call, as positions in ``kinds``
    asked: list[str | frozenset[str]]  # and the ids of that call (a set when read from several contents)
    open_call: str | frozenset[str] | None  # a call of the last group still waiting for its result(s)
    answered: bool  # whether the last group is a call that got its result
    turn: int  # the turn of the last message taken
    systems: int  # how many system groups


def read_plain_run(
    new: list[Message],
    counts: list[int] | None,
    estimator: CharacterEstimatorTokenizer | None,
    turn: int,
    waiting: Mapping[str, int],
) -> PlainRun | None:
    """Read the plain run at the start of ``new``, which follows a message of ``turn`` with the
    calls ``waiting`` (of earlier groups) still waiting; None when it takes no message.

    With ``estimator`` (and no ``counts``) it also counts each group it takes, a result into
    its call's count, as :meth:`CharacterEstimatorTokenizer.count_messages` would: then a plain
    message also has no author name."""
    kinds: list[GroupKind] = []
    turns: list[int | None] = []
    starts: list[int] = []  # where each group starts in ``new``
    add_kind, add_turn, add_start = kinds.append, turns.append, starts.append
    calls: list[int] = []  # groups made by a call, as positions in ``kinds``
    asked: list[str | frozenset[str]] = []  # and the ids of that call (a set when read from several contents)
    systems = 0
    open_call: str | set[str] | None = None  # the call (or parallel calls) still waiting for a result
    several = False  # whether a message opened parallel calls (a group may take several results)
    answered = False  # whether the last group is a call that got its result
    text_type, call_type, result_type = TextContent, FunctionCallContent, FunctionResultContent
    estimate = estimator is not None
    counted: list[int] = []  # the estimate of each group, with ``estimator``
    add_count = counted.append
    answers: list[int] = []  # the call group each result joined, as positions in ``kinds``
    per_token = estimator.characters_per_token if estimator is not None else 1
    rounding = per_token - 1
    overhead, call_overhead = MESSAGE_OVERHEAD, MESSAGE_OVERHEAD + CALL_OVERHEAD
    position = -1
    for message in new:
        position += 1
        if estimate and message.author_name is not None:
            break
        role = message.role
        if role == "assistant":
            contents = message.contents
            if message.additional_properties and message.is_summary:  # a summary's group: the general loop
                break
            if len(contents) != 1:
                # Several contents (reasoning beside a reply or calls, text beside calls,
                # parallel calls): one message, one group, sized as the tokenizer sizes it.
                if open_call is not None:
                    break
                parts = _plain_parts(contents)
                if parts is None:
                    break
                chars, opened = parts
                if not opened:
                    if estimate:
                        add_count(overhead + (chars + rounding) // per_token)
                    add_kind(_TEXT)
                    add_turn(turn)
                    add_start(position)
                    answered = False
                    continue
                if waiting and not waiting.keys().isdisjoint(opened):
                    break
                if estimate:
                    add_count(overhead + CALL_OVERHEAD * len(opened) + (chars + rounding) // per_token)
                calls.append(len(kinds))
                asked.append(frozenset(opened))
                add_kind(_TOOL_CALL)
                add_turn(turn)
                add_start(position)
                if len(opened) == 1:
                    open_call = opened[0]
                else:
                    open_call = set(opened)
                    several = True
                answered = False
                continue
            content = contents[0]
            kind = type(content)
            if kind is text_type:
                if open_call is not None:  # an assistant text while a call waits: not plain
                    break
                if estimate:
                    add_count(overhead + (len(content.text) + rounding) // per_token)  # type: ignore[union-attr]
                add_kind(_TEXT)
            elif kind is call_type:
                if open_call is not None:  # a second call before the first is answered
                    break
                call_id = content.call_id  # type: ignore[union-attr]
                if waiting and call_id in waiting:  # it takes over the id of a call still waiting
                    break
                if estimate:
                    chars = len(content.name) + len(content.arguments)  # type: ignore[union-attr]
                    add_count(call_overhead + (chars + rounding) // per_token)
                calls.append(len(kinds))
                asked.append(call_id)
                add_kind(_TOOL_CALL)
                add_turn(turn)
                add_start(position)
                open_call = call_id
                answered = False
                continue
            else:
                break
        elif role == "tool":
            if open_call is None:
                break
            try:
                (content,) = message.contents
            except ValueError:
                break
            if type(content) is not result_type:
                break
            call_id = content.call_id
            if call_id == open_call:
                open_call = None
            elif isinstance(open_call, set) and call_id in open_call:  # one of parallel calls
                open_call.discard(call_id)
                if not open_call:
                    open_call = None
            else:
                break
            if estimate:
                counted[-1] += overhead + (len(content.result) + rounding) // per_token
            answers.append(len(kinds) - 1)
            answered = True
            continue
        else:
            if open_call is not None:
                break
            try:
                (content,) = message.contents
            except ValueError:
                break
            if type(content) is not text_type:  # an approval response, say: the general loop
                break
            if estimate:
                add_count(overhead + (len(content.text) + rounding) // per_token)
            if role == "user":
                turn += 1
                add_kind(_USER)
            else:  # system
                add_kind(_SYSTEM)
                add_turn(None)
                add_start(position)
                systems += 1
                answered = False
                continue
        add_turn(turn)
        add_start(position)
        answered = False
    else:
        position += 1
    # ``position`` is now how many messages were taken.  A call left waiting stays open for the
    # general loop, which takes over from the same state.
    if position == 0:
        return None
    count = len(kinds)
    # Every plain group is one message, but a call its results joined.
    sizes = [1] * count
    if several:
        for group in answers:
            sizes[group] += 1
    else:  # one result each
        deque(map(sizes.__setitem__, answers, repeat(2)), maxlen=0)
    if counts is None:
        tokens = counted
        added = sum(counted)
    else:
        ends = [*starts[1:], position]
        reached = list(accumulate(counts[:position], initial=0))
        tokens = list(map(sub, map(reached.__getitem__, ends), map(reached.__getitem__, starts)))
        added = reached[position]
    waiting_call = frozenset(open_call) if isinstance(open_call, set) else open_call
    return PlainRun(
        position, kinds, turns, starts, sizes, tokens, added, calls, asked, waiting_call, answered, turn, systems
    )
