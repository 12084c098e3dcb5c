"""The lean grouping loop: plain runs of messages grouped the way the general loop groups them.

Most histories are long plain runs: user and assistant text, system prompts, and assistant
messages of reasoning, text and function calls whose results come right after them.
:meth:`PlainRuns._append_plain` groups such a run with a loop that only records where each group
starts and what it counts; sizes and the columns follow in C.  At the first message it does not
take (a reasoning-only message, a hosted call, an approval, a result that sits apart, a call
reusing the id of one still waiting, an open tail from the last append) it stops and the general
loop (``_grouping``, where the rules live) continues from the same state.  The two agree on every
input: ``tests/compaction/test_columns.py`` compares them on random conversations.
"""

from __future__ import annotations

from collections import deque
from itertools import accumulate, repeat
from operator import add, sub

from contextledger.compaction._grouping import Grouping
from contextledger.compaction._table import _SYSTEM, _TEXT, _TOOL_CALL, _USER, GroupKind
from contextledger.messages import FunctionCallContent, FunctionResultContent, Message, ReasoningContent, TextContent
from contextledger.tokenizers import CALL_OVERHEAD, MESSAGE_OVERHEAD, CharacterEstimatorTokenizer

__all__ = ["PlainRuns"]


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


class PlainRuns(Grouping):
    """The lean loop in front of the general one, and the switch that turns it off (the tests
    compare both ways)."""

    _plain_batches = True

    def _append(self, new: list[Message]) -> None:
        if not self._plain_batches or self._open_tool is not None or self._provisional:
            super()._append(new)  # an open tail from the last append: the general loop
            return
        tokenizer = self.tokenizer
        if type(tokenizer) is CharacterEstimatorTokenizer:
            # The estimate is counted in the same pass (each message is read once, which
            # matters on a long history that does not fit the caches).
            done = self._append_plain(new, None, tokenizer)
            if done < len(new):
                rest = new[done:]
                self._append_any(rest, tokenizer.count_messages(rest))
            return
        counts = tokenizer.count_messages(new)
        done = self._append_plain(new, counts, None)
        if done < len(new):
            self._append_any(new[done:], counts[done:])

    def _append_plain(
        self, new: list[Message], counts: list[int] | None, estimator: CharacterEstimatorTokenizer | None
    ) -> int:
        """Group the plain run at the start of ``new``; returns how many messages it took.

        With ``estimator`` (and no ``counts``) it also counts each group it takes, a result into
        its call's count, as :meth:`CharacterEstimatorTokenizer.count_messages` would: then a plain
        message also has no author name."""
        table = self._table
        base = len(table.pool)
        kinds: list[GroupKind] = []
        turns: list[int | None] = []
        starts: list[int] = []  # where each group starts in ``new``
        add_kind, add_turn, add_start = kinds.append, turns.append, starts.append
        calls: list[int] = []  # groups made by a call, as positions in ``kinds``
        asked: list[str | frozenset[str]] = []  # and the ids of that call (a set when read from several contents)
        turn = first_turn = self._turn
        systems = 0
        waiting = self._waiting  # calls of earlier groups still waiting (their results may come)
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
                if message.additional_properties:
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
            return 0
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
        first = len(table.kind)
        # One int object per id and per position, shared by every column that holds it (a long
        # history would otherwise make, and later free, several hundred thousand of them).
        ids = list(range(first, first + count))
        if len(table.ids) == first:
            table.ids.extend(ids)
        table.pool.extend(new[:position] if position < len(new) else new)
        table.kind.extend(kinds)
        table.turn.extend(turns)
        table.tokens.extend(tokens)
        table.first.extend(map(add, starts, repeat(base)) if base else starts)
        table.size.extend(sizes)
        table.reason.extend(repeat(None, count))
        table.origin.extend(repeat("input", count))
        table.replaces.extend(repeat(None, count))
        if calls:
            table.pending_calls.append((first, calls, asked))
        if open_call is not None:
            last = first + count - 1
            if isinstance(open_call, set):
                table.unanswered[last] = frozenset(open_call)
                waiting.update(dict.fromkeys(open_call, last))
            else:
                table.unanswered[last] = open_call
                waiting[open_call] = last
        if open_call is not None or answered:
            self._open_tool = first + count - 1  # results may still join it, as in the general loop
        self._turn = turn
        self._source.extend(new[:position] if position < len(new) else new)
        self._order.extend(ids)
        self._tail.extend(ids)
        self._count_appended(
            count,
            position,
            added,
            systems=systems,
            tool_groups=len(calls),
            turns=turns,
            first_turn=first_turn,
            last_turn=turn,
        )
        return position
