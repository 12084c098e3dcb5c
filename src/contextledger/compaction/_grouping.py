"""Grouping: design.md#compaction-groups and design.md#units turned into groups, as messages are appended.

The rules, in one place:

- a user message starts a turn (messages before the first one are turn 0); system messages
  belong to no turn and are groups of their own;
- an assistant message that opens calls (function calls, hosted tool calls, approval
  requests) starts a tool-call group, and every result that answers it right after joins it;
- a result that comes after other messages (an approval note, a user reply, another call) is
  a group of its own, made one *unit* with its call's group by call id: they are kept or
  excluded together wherever they sit;
- a reasoning-only message joins the reply or call it directly precedes;
- a result nobody asked for is flagged orphan (inside the open call's group while that call
  still waits, so the call is never split from its own results).

:meth:`Grouper._group_any` applies every rule.  Most histories are long plain runs, which a
lean loop (``_plain``) groups first, handing over to this one at the first message it does not
take; both produce the same table on every input (``tests/compaction/test_columns.py`` checks it
on random conversations).

Appending groups only what was appended: the tail that can still change (a call waiting for
results, reasoning that may precede a call) is re-examined, nothing before it.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat
from operator import add
from typing import cast

from contextledger.compaction._marking import Marking
from contextledger.compaction._metrics import Metrics
from contextledger.compaction._plain import PlainRun, read_plain_run
from contextledger.compaction._table import _SUMMARY, _SYSTEM, _TEXT, _TOOL_CALL, _USER, GroupKind, _Table, gc_paused
from contextledger.exceptions import InvalidMessageError
from contextledger.messages import FunctionCallContent, FunctionResultContent, Message, ReasoningContent, TextContent
from contextledger.messages._contents import answered_ids, opened_ids
from contextledger.messages._message import SUMMARY_SOURCE_PROPERTY
from contextledger.tokenizers import CharacterEstimatorTokenizer, Tokenizer

__all__ = ["Grouper"]


def _asked(call_id: str, asked: str | frozenset[str]) -> bool:
    """Whether a call group's call ids (one id, or a set of them) include ``call_id``."""
    return call_id == asked if isinstance(asked, str) else call_id in asked


def _summary_turn(message: Message, turn: int) -> int | None:
    # Tool-result summaries stand in for a tool group and stay in its turn; a conversation
    # summary belongs to no turn, so it never keeps an old turn alive.
    return turn if message.additional_properties.get(SUMMARY_SOURCE_PROPERTY) == "tool_results" else None


class Grouper:
    """Appending to an index: the lean loop for plain runs, the general loop for the rest, and
    the state both carry between appends (the turn, a call group results may still join,
    reasoning that may still join a call, calls still waiting for results)."""

    # Whether plain runs go through the lean loop first (the tests compare both ways).
    _plain_batches = True

    def __init__(self, table: _Table, metrics: Metrics, marking: Marking, tokenizer: Tokenizer) -> None:
        self._table = table
        self._metrics = metrics
        self._marking = marking
        self._tokenizer = tokenizer
        self.source: list[Message] = []  # the messages appended so far, as given
        self._turn = 0  # the turn the last appended message belongs to
        self._open_tool: int | None = None  # a tool-call group results may still join
        self._provisional: list[int] = []  # trailing reasoning-only groups that may still join a call
        self._waiting: dict[str, int] = {}  # call id -> the group whose call still waits for it
        self._linked: list[int] = []  # earlier groups the last append linked a new result to
        # (messages read, position of the newest with a provider compaction item): see _boundary
        self.compaction_scan: tuple[int, int | None] = (0, None)

    def newest_provider_compaction(self) -> int | None:
        """The position among the appended messages of the newest one holding a provider
        compaction item (see ``_boundary``), or None; only messages appended since the last call
        are read."""
        source = self.source
        scanned, found = self.compaction_scan
        for position in range(len(source) - 1, min(scanned, len(source)) - 1, -1):
            message = source[position]
            if message.role == "assistant" and message.is_provider_compaction:
                found = position
                break
        self.compaction_scan = (len(source), found)
        return found

    def append(self, messages: Iterable[Message]) -> None:
        """Group and count ``messages`` as if they followed what is already indexed.

        Only the tail that can still change (an open tool-call group waiting for
        results, and reasoning messages that may belong to the next call) is
        re-examined; everything before it is left alone.
        """
        new = messages if isinstance(messages, list) else list(messages)
        if not new:
            return
        if not all(map(isinstance, new, repeat(Message))):
            for position, message in enumerate(new):
                if not isinstance(message, Message):
                    raise InvalidMessageError(
                        f"item {len(self.source) + position} is {type(message).__name__}, not a Message; "
                        "convert OpenAI dicts with contextledger.from_openai first"
                    )
        with gc_paused():
            self._append(new)

    def _append(self, new: list[Message]) -> None:
        """The lean loop takes the plain run at the start, the general loop the rest."""
        tokenizer = self._tokenizer
        if not self._plain_batches or self._open_tool is not None or self._provisional:
            # An open tail from the last append: the general loop.
            self._append_any(new, tokenizer.count_messages(new))
            return
        if type(tokenizer) is CharacterEstimatorTokenizer:
            # The estimate is counted in the same pass (each message is read once, which
            # matters on a long history that does not fit the caches).
            run = read_plain_run(new, None, tokenizer, self._turn, self._waiting)
            done = self._add_plain(new, run)
            if done < len(new):
                rest = new[done:]
                self._append_any(rest, tokenizer.count_messages(rest))
            return
        counts = tokenizer.count_messages(new)
        done = self._add_plain(new, read_plain_run(new, counts, None, self._turn, self._waiting))
        if done < len(new):
            self._append_any(new[done:], counts[done:])

    def _add_plain(self, new: list[Message], run: PlainRun | None) -> int:
        """Write a plain run (see ``_plain``) into the table, the order and the metrics; returns
        how many messages of ``new`` it took."""
        if run is None:
            return 0
        table = self._table
        taken, count = run.taken, len(run.kinds)
        first, base = len(table.kind), len(table.pool)
        # One int object per id and per position, shared by every column that holds it (a long
        # history would otherwise make, and later free, several hundred thousand of them).
        ids = list(range(first, first + count))
        if len(table.ids) == first:
            table.ids.extend(ids)
        taken_messages = new[:taken] if taken < len(new) else new
        table.pool.extend(taken_messages)
        table.kind.extend(run.kinds)
        table.turn.extend(run.turns)
        table.tokens.extend(run.tokens)
        table.first.extend(map(add, run.starts, repeat(base)) if base else run.starts)
        table.size.extend(run.sizes)
        table.reason.extend(repeat(None, count))
        table.origin.extend(repeat("input", count))
        table.replaces.extend(repeat(None, count))
        if run.calls:
            table.pending_calls.append((first, run.calls, run.asked))
        open_call = run.open_call
        last = first + count - 1
        if open_call is not None:
            table.unanswered[last] = open_call
            if isinstance(open_call, str):
                self._waiting[open_call] = last
            else:
                self._waiting.update(dict.fromkeys(open_call, last))
        if open_call is not None or run.answered:
            self._open_tool = last  # results may still join it, as in the general loop
        first_turn = self._turn
        self._turn = run.turn
        self.source.extend(taken_messages)
        self._marking.append_included(ids)
        self._metrics.count_appended(
            count,
            taken,
            run.added,
            systems=run.systems,
            tool_groups=len(run.calls),
            turns=run.turns,
            first_turn=first_turn,
            last_turn=run.turn,
        )
        return taken

    def _append_any(self, new: list[Message], counts: list[int]) -> None:
        """The general loop (see :meth:`_group_any`); then a new result linked to a call that a
        strategy had excluded is excluded with it, for the same reason: exclusions survive an
        append, and a unit is never split (design.md#units)."""
        self._linked = []
        self._group_any(new, counts)
        reasons = self._table.reason
        for group in self._linked:
            reason = reasons[group]
            if reason is not None:
                self._marking.exclude_with(group, reason)

    def _link_answers(self, group: int, ids: Iterable[str]) -> bool:
        """Link ``group`` to the earlier groups whose waiting calls ``ids`` answer; True if every
        id answered such a call."""
        table, waiting = self._table, self._waiting
        matched = True
        for call_id in ids:
            call_group = waiting.pop(call_id, None)
            if call_group is None or call_group == group:
                matched = matched and call_group == group
                continue
            table.answer(call_group, (call_id,))
            table.link(call_group, group)
            self._linked.append(call_group)
        return matched

    def _group_any(self, new: list[Message], counts: list[int]) -> None:
        """The general loop: every grouping rule, and an open tail from the last append."""
        table = self._table
        waiting = self._waiting
        kinds, turns, tokens, firsts, sizes = table.kind, table.turn, table.tokens, table.first, table.size
        call_ids_of, unanswered, orphans = table.call_ids, table.unanswered, table.orphan
        open_tool = self._open_tool
        provisional = self._provisional
        if provisional and (
            any(table.reason[group] is not None for group in provisional)
            or (open_tool is not None and table.reason[open_tool] is not None)
        ):
            # A strategy already excluded some of these; merging them into a call group now could
            # flip a message's inclusion behind its back, so they stay the groups they were.
            provisional = []
        # The still-open tail (a call waiting for its results, reasoning that may precede a call)
        # is taken out of the metrics and counted again, as it ends up, below.  Otherwise every
        # group made here is new and included, and the metrics follow from a few sums.
        tail = ([open_tool] if open_tool is not None else []) + provisional
        reopened = bool(tail)
        metrics = self._metrics
        if reopened:
            metrics.tally(tail, -1)
        dead: list[int] = []  # groups merged into a call group (reasoning before or between results)
        origins: dict[int, str] = {}  # summaries among the input, by what wrote them
        start = len(kinds)
        turn = first_turn = self._turn
        systems = tool_groups = 0
        text_type, call_type, result_type, reasoning_type = (
            TextContent,
            FunctionCallContent,
            FunctionResultContent,
            ReasoningContent,
        )
        position = len(table.pool) - 1
        table.pool.extend(new)

        def open_group(kind: GroupKind, turn: int | None, count: int, position: int) -> int:
            """A new one-message group; returns its id (the rare columns are filled in bulk after)."""
            group = len(kinds)
            kinds.append(kind)
            turns.append(turn)
            tokens.append(count)
            firsts.append(position)
            sizes.append(1)
            return group

        def take_reasoning(group: int) -> None:
            """Reasoning right before a reply or a call belongs to it."""
            nonlocal provisional
            if provisional:
                table.merge(group, [*provisional, group])
                dead.extend(provisional)
                provisional = []

        def join(group: int, message: Message, count: int, position: int, answers: list[str], belongs: bool) -> None:
            """Add a result message to the open call group ``group`` (``belongs``: it answers it)."""
            nonlocal provisional
            if provisional:  # reasoning between results joins the tool group
                table.merge(group, [group, *provisional])
                dead.extend(provisional)
                provisional = []
            tokens[group] += count
            if firsts[group] + sizes[group] == position:
                sizes[group] += 1
            else:  # not adjacent (something was added to the pool since): move the group
                table.relocate(group, [message])
            for call_id in answers:
                if waiting.get(call_id) == group:
                    del waiting[call_id]
            table.answer(group, answers)
            if not belongs:
                orphans.add(group)

        for message, count in zip(new, counts):
            position += 1
            contents = message.contents
            only: type | None = type(contents[0]) if len(contents) == 1 else None
            role = message.role
            if role == "assistant":
                if only is text_type and not message.additional_properties:  # the common case
                    open_tool = None
                    take_reasoning(open_group(_TEXT, turn, count, position))
                    continue
                asked: str | frozenset[str]
                answers: list[str] = []
                if only is call_type:
                    asked = contents[0].call_id  # type: ignore[union-attr]
                    opened = [asked]
                else:
                    opened = opened_ids(contents)
                    answers = answered_ids(contents)
                    asked = frozenset(opened)
                if opened:
                    group = open_group(_TOOL_CALL, turn, count, position)
                    take_reasoning(group)
                    call_ids_of[group] = asked
                    left = [call_id for call_id in opened if call_id not in answers] if answers else opened
                    if left:
                        unanswered[group] = left[0] if len(left) == 1 else frozenset(left)
                        waiting.update(dict.fromkeys(left, group))
                    earlier = [call_id for call_id in answers if call_id not in asked]
                    if earlier and not self._link_answers(group, earlier):
                        orphans.add(group)
                    open_tool = group
                    tool_groups += 1
                    continue
                if answers:  # a hosted result or similar, with no call of its own
                    asked_open = call_ids_of.get(open_tool) if open_tool is not None else None
                    if asked_open is not None and all(_asked(call_id, asked_open) for call_id in answers):
                        join(cast(int, open_tool), message, count, position, answers, True)
                        continue
                    open_tool, provisional = None, []
                    group = open_group(_TOOL_CALL, turn, count, position)
                    if not self._link_answers(group, answers):  # its own group, one unit with its calls
                        orphans.add(group)
                    tool_groups += 1
                    continue
                if contents and all(type(c) is reasoning_type for c in contents) and not message.is_summary:
                    provisional.append(open_group(_TEXT, turn, count, position))  # may yet join a call
                    continue
                open_tool = None
                if message.is_summary:
                    provisional = []
                    group = open_group(_SUMMARY, _summary_turn(message, turn), count, position)
                    origins[group] = str(message.additional_properties.get(SUMMARY_SOURCE_PROPERTY, "summarization"))
                else:
                    # Any other reply (text with properties, several parts, no text at all) keeps
                    # the reasoning that led to it, as a plain text reply does.
                    take_reasoning(open_group(_TEXT, turn, count, position))
            elif role == "tool":
                asked_ids = call_ids_of.get(open_tool) if open_tool is not None else None
                if asked_ids is not None and only is result_type:
                    answers = [contents[0].call_id]  # type: ignore[union-attr]
                    belongs = answers[0] == asked_ids if type(asked_ids) is str else answers[0] in asked_ids
                else:
                    answers = answered_ids(contents)
                    belongs = asked_ids is not None and bool(answers) and all(_asked(i, asked_ids) for i in answers)
                if belongs:
                    join(cast(int, open_tool), message, count, position, answers, True)
                elif open_tool is not None and open_tool in unanswered and not any(i in waiting for i in answers):
                    # A result nobody asked for, while a call still waits for its own, stays inside
                    # the open group (flagged), so that call and its results are never split apart.
                    join(open_tool, message, count, position, answers, False)
                else:
                    # A result of an earlier call, after other messages (an approval, a note, a user
                    # reply): its own group, one unit with its call (design.md#units); or, answering no
                    # waiting call at all, an orphan group of its own.
                    open_tool, provisional = None, []
                    group = open_group(_TOOL_CALL, turn, count, position)
                    if not answers or not self._link_answers(group, answers):
                        orphans.add(group)
                    tool_groups += 1
            else:
                open_tool, provisional = None, []
                if role == "user":
                    turn += 1
                    group = open_group(_USER, turn, count, position)
                    if only is not text_type:  # an approval response answers its request, wherever it is
                        self._link_answers(group, answered_ids(contents))
                else:  # system
                    open_group(_SYSTEM, None, count, position)
                    systems += 1
        made = len(kinds) - start
        table.reason.extend(repeat(None, made))
        table.origin.extend(repeat("input", made))
        table.replaces.extend(repeat(None, made))
        for group, origin in origins.items():
            table.origin[group] = origin
        self._open_tool = open_tool
        self._provisional = provisional
        self._turn = turn
        self.source.extend(new)
        if table.bytes and tail:
            table.bytes.pop(tail[0], None)  # an open group's byte count changes as results join
        fresh = list(range(start, len(kinds)))
        if dead:
            gone = set(dead)
            fresh = [group for group in fresh if group not in gone]
            old = [group for group in tail if group in gone]
            if old:  # merged groups from the last append leave the order and the included set
                self._marking.drop_merged(set(old))
                tail = [group for group in tail if group not in gone]
        if reopened:
            metrics.open_turns(turn)
            self._marking.append(fresh, metrics.tally(tail + fresh, 1))
            return
        self._marking.append(fresh, fresh)
        metrics.count_appended(
            len(fresh),
            len(new),
            sum(counts),
            systems=systems,
            tool_groups=tool_groups,
            turns=map(turns.__getitem__, fresh),
            first_turn=first_turn,
            last_turn=turn,
        )
