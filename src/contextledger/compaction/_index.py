"""The message index: a flat message list seen as atomic groups, with running metrics.

Strategies never delete anything.  They mark groups excluded (with a reason) or
insert summary groups, and the *projection* — the included messages, in
order — is what gets sent.  Every metric a trigger reads is a running total
kept up to date on each exclusion, so checking a trigger is O(1) and a
strategy that excludes k groups costs O(k), not O(k·n).

Appending messages to an indexed history groups and counts only what was
appended; if earlier messages changed, the index is rebuilt.
"""

from __future__ import annotations

import gc
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from itertools import repeat
from operator import attrgetter, itemgetter, sub
from typing import Any

from contextledger.exceptions import CompactionError, InvalidMessageError
from contextledger.messages import (
    SUMMARY_SOURCE_PROPERTY,
    FunctionCallContent,
    FunctionResultContent,
    Message,
    ReasoningContent,
    TextContent,
)
from contextledger.tokenizers import CharacterEstimatorTokenizer, Tokenizer

__all__ = ["CompactionEvent", "GroupKind", "MessageGroup", "MessageIndex", "gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Hold the cyclic garbage collector during a burst of allocations that creates no cycles.

    Indexing 100,000 messages allocates a few hundred thousand small objects;
    with the collector running, each young-generation pass re-walks them and
    the build slows by a third.  Reference counting still frees everything.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class GroupKind(str, Enum):
    """What a group is, which decides what each strategy may do with it."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT_TEXT = "assistant_text"
    TOOL_CALL = "tool_call"
    SUMMARY = "summary"

    def __str__(self) -> str:
        return self.value


# Reading an enum member through its class costs a lookup each time; the hot loops use these.
_SYSTEM = GroupKind.SYSTEM
_TOOL_CALL = GroupKind.TOOL_CALL
_SUMMARY = GroupKind.SUMMARY
_excluded = attrgetter("excluded")
_first = itemgetter(0)


class MessageGroup:
    """Messages that are kept or excluded together.

    A tool-call group holds the assistant message that made the calls and every
    result that answers them, so excluding it can never separate a call from its
    result.  ``orphan`` flags a group holding a tool result that answers no call
    in it (input that was already broken); such a group is never collapsed into
    text.  ``turn`` is ``None`` for system groups and for summaries written by
    summarisation (they belong to no turn); messages before the first user
    message are turn 0.
    """

    # What every group has, or gets on the hot paths (an exclusion sets its reason, a tool-call
    # group its call ids), lives in slots, so neither indexing nor excluding thousands of groups
    # creates a per-group dict.  The rarer attributes below are class-level defaults, set on an
    # instance only when they differ.
    __slots__ = ("__dict__", "call_ids", "excluded", "exclusion_reason", "kind", "messages", "token_count", "turn")

    kind: GroupKind
    messages: list[Message]
    turn: int | None
    token_count: int
    excluded: bool
    exclusion_reason: str | None
    call_ids: frozenset[str] | None

    orphan: bool = False
    origin: str = "input"
    replaces: tuple[MessageGroup, ...] = ()
    _byte_count: int | None = None
    # A replacement's key in the index's ordered set of included groups: the group whose place it
    # took, which keeps its position without rebuilding the set.  None means "the group itself".
    _live_key: MessageGroup | None = None

    def __init__(
        self,
        kind: GroupKind,
        messages: list[Message],
        turn: int | None,
        token_count: int,
        *,
        orphan: bool = False,
        origin: str = "input",
        replaces: tuple[MessageGroup, ...] = (),
    ) -> None:
        self.kind = kind
        self.messages = messages
        self.turn = turn
        self.token_count = token_count
        self.excluded = False
        self.exclusion_reason = None
        self.call_ids = None
        if orphan:
            self.orphan = True
        if origin != "input":
            self.origin = origin
        if replaces:
            self.replaces = replaces

    @property
    def key(self) -> MessageGroup:
        """This group's key among the included groups (see ``_live_key``)."""
        return self._live_key or self

    @property
    def message_count(self) -> int:
        return len(self.messages)

    @property
    def byte_count(self) -> int:
        """UTF-8 bytes of the payload (text, reasoning, call names and arguments, results)."""
        if self._byte_count is None:
            total = 0
            for message in self.messages:
                for text in message.payload_texts():
                    total += len(text) if text.isascii() else len(text.encode("utf-8"))
            self._byte_count = total
        return self._byte_count

    @property
    def included(self) -> bool:
        return not self.excluded

    @property
    def is_complete(self) -> bool:
        """For a tool-call group: every call has a result.  Other groups are always complete."""
        return _is_complete(self)

    def __repr__(self) -> str:
        state = f"excluded:{self.exclusion_reason}" if self.excluded else "included"
        return (
            f"MessageGroup({self.kind.value}, turn={self.turn}, messages={len(self.messages)}, "
            f"tokens={self.token_count}, {state})"
        )


class _SummaryGroup(MessageGroup):
    """A summary group written by a strategy.

    Strategies write one per collapsed tool group, thousands per call on a long
    history, and each needs its origin, what it replaces and (as a replacement)
    its place among the included groups: slots here, so none of them needs a dict.
    """

    __slots__ = ("_live_key", "origin", "replaces")

    def __init__(
        self,
        message: Message,
        turn: int | None,
        token_count: int,
        origin: str,
        replaces: tuple[MessageGroup, ...],
    ) -> None:
        self.kind = _SUMMARY
        self.messages = [message]
        self.turn = turn
        self.token_count = token_count
        self.excluded = False
        self.exclusion_reason = None
        self.call_ids = None
        self.origin = origin
        self.replaces = replaces
        self._live_key = None


def _is_complete(group: MessageGroup) -> bool:
    """``group.is_complete``, callable without the property on the strategies' hot paths."""
    call_ids = group.call_ids
    if not call_ids:  # only tool-call groups made by a call have call ids
        return True
    messages = group.messages
    if len(messages) == 2 and len(call_ids) == 1:  # one call, one answer: the usual shape
        answer = messages[1].contents
        return len(answer) == 1 and isinstance(answer[0], FunctionResultContent) and answer[0].call_id in call_ids
    answered = {
        c.call_id for m in messages if m.role == "tool" for c in m.contents if isinstance(c, FunctionResultContent)
    }
    return call_ids <= answered


@dataclass(frozen=True, slots=True)
class CompactionEvent:
    """One thing a strategy did, for reports and the CLI."""

    strategy: str
    action: str  # "excluded", "collapsed", "summarized", "restored", "failed", "fallback"
    kind: str | None = None
    turn: int | None = None
    messages: int = 0
    tokens: int = 0
    detail: str = ""
    usage: Any = field(default=None, compare=False)
    groups: tuple[MessageGroup, ...] = field(default=(), compare=False, repr=False)


def _summary_turn(message: Message, turn: int) -> int | None:
    # Tool-result summaries stand in for a tool group and stay in its turn; a conversation
    # summary belongs to no turn, so it never keeps an old turn alive.
    return turn if message.additional_properties.get(SUMMARY_SOURCE_PROPERTY) == "tool_results" else None


class MessageIndex:
    """A flat message list grouped into atomic units, with included/excluded state and metrics.

    Build one from a message list (``MessageIndex(messages, tokenizer=...)``),
    let strategies mark it, then read :meth:`projection`.  Reuse it across calls
    with :meth:`update` so only new messages are grouped and counted.
    """

    def __init__(self, messages: Iterable[Message] = (), *, tokenizer: Tokenizer | None = None) -> None:
        self.tokenizer: Tokenizer = tokenizer if tokenizer is not None else CharacterEstimatorTokenizer()
        self.events: list[CompactionEvent] = []
        self._reset()
        self.append(messages)

    # Building -------------------------------------------------------------------------------

    def _reset(self) -> None:
        self._groups: list[MessageGroup] = []
        # The included groups, in conversation order.  Strategies, triggers and the projection
        # read only this, so a call costs O(included + appended), not O(whole history).
        self._live: dict[MessageGroup, MessageGroup] = {}
        self._source: list[Message] = []
        self._pending: dict[int, list[MessageGroup]] = {}  # id(anchor) -> groups to insert before it
        self._turn = 0
        self._open_tool: MessageGroup | None = None
        self._provisional: list[MessageGroup] = []  # trailing reasoning-only groups that may still join a call
        self.total_groups = 0
        self.total_messages = 0
        self.total_tokens = 0
        self.included_groups = 0
        self.included_messages = 0
        self.included_tokens = 0
        self.included_non_system_groups = 0
        self.included_non_system_messages = 0
        self.included_tool_call_groups = 0
        self.included_turns = 0
        # Included groups per turn, indexed by turn (turn 0 is never counted as a turn).
        self._turn_groups: list[int] = [0]
        self.total_turns = 0

    def _count(self, group: MessageGroup, sign: int) -> None:
        """Add (sign=1) or remove (sign=-1) one group's contribution to the included metrics.

        The per-exclusion path of every strategy: O(1), no loops."""
        size = sign * len(group.messages)
        self.included_groups += sign
        self.included_messages += size
        self.included_tokens += sign * group.token_count
        kind = group.kind
        if kind is not _SYSTEM:
            self.included_non_system_groups += sign
            self.included_non_system_messages += size
            if kind is _TOOL_CALL:
                self.included_tool_call_groups += sign
        turn = group.turn
        if turn:
            before = self._turn_groups[turn]
            after = before + sign
            self._turn_groups[turn] = after
            if before == 0 and after > 0:
                self.included_turns += 1
            elif before > 0 and after == 0:
                self.included_turns -= 1

    def _tally(
        self,
        groups: Iterable[MessageGroup],
        sign: int,
        *,
        totals: bool = True,
        admit: bool = False,
        exclude: str | None = None,
    ) -> list[MessageGroup]:
        """Add (sign=1) or remove (sign=-1) many groups' contributions in one pass: totals, and the
        included metrics of the included ones.  With ``admit`` the included ones also join the
        ordered set of included groups; with ``exclude`` (a reason) they are excluded as they are
        counted out, and returned.  Runs of groups in the same turn update the per-turn count once,
        so a long history costs one update per turn, not per group."""
        total_groups = total_messages = total_tokens = 0
        groups_in = messages_in = tokens_in = non_system = non_system_messages = tool_calls = 0
        turns_delta = 0
        turn_groups = self._turn_groups
        live = self._live
        system, tool = _SYSTEM, _TOOL_CALL
        run_turn = 0
        run_length = 0
        marked: list[MessageGroup] = []
        mark = marked.append
        for group in groups:
            size = len(group.messages)
            tokens = group.token_count
            total_groups += 1
            total_messages += size
            total_tokens += tokens
            if group.excluded:
                continue
            if exclude is not None:
                group.excluded = True
                group.exclusion_reason = exclude
                del live[group._live_key or group]
                mark(group)
            elif admit:
                live[group._live_key or group] = group
            groups_in += 1
            messages_in += size
            tokens_in += tokens
            kind = group.kind
            if kind is not system:
                non_system += 1
                non_system_messages += size
                if kind is tool:
                    tool_calls += 1
            turn = group.turn
            if turn:
                if turn == run_turn:
                    run_length += 1
                else:
                    if run_length:  # close the previous run: one per-turn update for all of it
                        before = turn_groups[run_turn]
                        after = before + sign * run_length
                        turn_groups[run_turn] = after
                        turns_delta += (before == 0 and after > 0) - (before > 0 and after == 0)
                    run_turn, run_length = turn, 1
        if run_length:
            before = turn_groups[run_turn]
            after = before + sign * run_length
            turn_groups[run_turn] = after
            turns_delta += (before == 0 and after > 0) - (before > 0 and after == 0)
        if totals:
            self.total_groups += sign * total_groups
            self.total_messages += sign * total_messages
            self.total_tokens += sign * total_tokens
        self.included_groups += sign * groups_in
        self.included_messages += sign * messages_in
        self.included_tokens += sign * tokens_in
        self.included_non_system_groups += sign * non_system
        self.included_non_system_messages += sign * non_system_messages
        self.included_tool_call_groups += sign * tool_calls
        self.included_turns += turns_delta
        return marked

    def append(self, messages: Iterable[Message]) -> None:
        """Group and count ``messages`` as if they followed what is already indexed.

        Only the tail that can still change (an open tool-call group waiting for
        results, and reasoning messages that may belong to the next call) is
        re-examined; everything before it is left alone.
        """
        new = messages if isinstance(messages, list) else list(messages)
        if not new:
            return
        for position, message in enumerate(new):
            if not isinstance(message, Message):
                raise InvalidMessageError(
                    f"item {len(self._source) + position} is {type(message).__name__}, not a Message; "
                    "convert OpenAI dicts with contextledger.from_openai first"
                )
        with gc_paused():
            self._append(new)

    def _append(self, new: list[Message]) -> None:
        self._flush()
        counts = self.tokenizer.count_messages(new)
        groups = self._groups
        live = self._live
        start = len(groups)
        open_tool = self._open_tool
        provisional = self._provisional
        if provisional and (
            any(group.excluded for group in provisional) or (open_tool is not None and open_tool.excluded)
        ):
            # A strategy already excluded some of these; merging them into a call group now could
            # flip a message's inclusion behind its back, so they stay the groups they were.
            provisional = []
        # The still-open tail (rare: a call still waiting for its results) is taken out of the
        # metrics and counted again, as it ends up, below.  Otherwise every group made here is new
        # and included, and the metrics follow from a few counts kept while the groups are made.
        reopened = open_tool is not None or bool(provisional)
        if reopened:
            first = open_tool if open_tool is not None else provisional[0]
            start = len(groups) - 1
            while groups[start] is not first:
                start -= 1
            self._tally(groups[start:], -1)
        turn = first_turn = self._turn
        turn_starts: list[int] = []  # where each new turn's user group sits in ``groups``
        unturned: list[int] = []  # where each group of no turn (system, conversation summary) sits
        systems = tool_groups = 0
        user_kind, text_kind, tool_kind = GroupKind.USER, GroupKind.ASSISTANT_TEXT, _TOOL_CALL
        text_type, call_type, result_type, reasoning_type = (
            TextContent,
            FunctionCallContent,
            FunctionResultContent,
            ReasoningContent,
        )
        group_type = MessageGroup
        new_group = object.__new__
        add = groups.append
        mark_turn = turn_starts.append
        for message, tokens in zip(new, counts):
            role = message.role
            if role == "assistant":
                contents = message.contents
                only: type | None = type(contents[0]) if len(contents) == 1 else None
                if only is text_type and not message.additional_properties:
                    # The commonest groups are built in place: a constructor call per message
                    # would cost as much as the rest of the loop.
                    open_tool = None
                    if provisional:
                        provisional = []
                    group = new_group(group_type)
                    group.kind = text_kind
                    group.messages = [message]
                    group.turn = turn
                    group.token_count = tokens
                    group.excluded = False
                    group.exclusion_reason = group.call_ids = None
                    add(group)
                    continue
                if only is call_type:
                    call_ids = frozenset((contents[0].call_id,))  # type: ignore[union-attr]
                else:
                    call_ids = frozenset(c.call_id for c in contents if type(c) is call_type)
                if call_ids:
                    group = new_group(group_type)
                    group.kind = tool_kind
                    group.messages = [message]
                    group.turn = turn
                    group.token_count = tokens
                    group.excluded = False
                    group.exclusion_reason = None
                    group.call_ids = call_ids
                    if provisional:  # reasoning right before a call belongs to it
                        del groups[len(groups) - len(provisional) :]
                        for dropped in provisional:
                            live.pop(dropped._live_key or dropped, None)
                        group.messages[:0] = [m for g in provisional for m in g.messages]
                        group.token_count += sum(g.token_count for g in provisional)
                        provisional = []
                    open_tool = group
                    add(group)
                    tool_groups += 1
                elif message.is_summary:
                    open_tool = None
                    if provisional:
                        provisional = []
                    origin = str(message.additional_properties.get(SUMMARY_SOURCE_PROPERTY, "summarization"))
                    summary_turn = _summary_turn(message, turn)
                    if summary_turn is None:
                        unturned.append(len(groups))
                    add(group_type(_SUMMARY, [message], summary_turn, tokens, origin=origin))
                elif contents and all(type(c) is reasoning_type for c in contents):
                    group = group_type(text_kind, [message], turn, tokens)
                    provisional.append(group)
                    add(group)
                else:
                    open_tool = None
                    if provisional:
                        provisional = []
                    add(group_type(text_kind, [message], turn, tokens))
            elif role == "user":
                open_tool = None
                if provisional:
                    provisional = []
                mark_turn(len(groups))
                turn += 1
                group = new_group(group_type)
                group.kind = user_kind
                group.messages = [message]
                group.turn = turn
                group.token_count = tokens
                group.excluded = False
                group.exclusion_reason = group.call_ids = None
                add(group)
            elif role == "tool":
                contents = message.contents
                asked = open_tool.call_ids if open_tool is not None else None
                if asked is not None and len(contents) == 1 and isinstance(contents[0], result_type):
                    belongs = contents[0].call_id in asked
                else:
                    result_ids = [c.call_id for c in contents if type(c) is result_type]
                    belongs = asked is not None and bool(result_ids) and all(call_id in asked for call_id in result_ids)
                # A result nobody asked for, while a call still waits for its own, stays inside the
                # open group (flagged), so that call and its results are never split apart.
                if open_tool is not None and (belongs or not _is_complete(open_tool)):
                    if provisional:  # reasoning between results joins the tool group
                        for group in provisional:
                            groups.pop()
                            live.pop(group._live_key or group, None)
                            open_tool.messages.extend(group.messages)
                            open_tool.token_count += group.token_count
                        provisional = []
                    open_tool.messages.append(message)
                    open_tool.token_count += tokens
                    if open_tool._byte_count is not None:
                        open_tool._byte_count = None
                    if not belongs:
                        open_tool.orphan = True
                else:
                    open_tool = None
                    if provisional:
                        provisional = []
                    add(group_type(tool_kind, [message], turn, tokens, orphan=True))
                    tool_groups += 1
            else:  # system
                open_tool = None
                if provisional:
                    provisional = []
                unturned.append(len(groups))
                add(group_type(_SYSTEM, [message], None, tokens))
                systems += 1
        self._open_tool = open_tool
        self._provisional = provisional
        self._turn = self.total_turns = turn
        self._source.extend(new)
        turn_groups = self._turn_groups
        turn_groups.extend(repeat(0, turn - first_turn))
        if reopened:
            self._tally(groups[start:], 1, admit=True)
            return
        fresh = groups[start:]
        live.update(zip(fresh, fresh))
        # Groups per turn, from where each turn starts: the turn already open, then the new ones
        # (merged reasoning only ever left the end of the list, so the starts still hold).
        per_turn = [turn_starts[0] if turn_starts else len(groups), *turn_starts[1:], len(groups)]
        per_turn = list(map(sub, per_turn, [start, *turn_starts]))
        for position in unturned:
            per_turn[bisect_right(turn_starts, position)] -= 1
        turns_delta = len(turn_starts)  # every new turn has its user group
        if first_turn and per_turn[0]:
            before = turn_groups[first_turn]
            turn_groups[first_turn] = before + per_turn[0]
            turns_delta += before == 0
        turn_groups[first_turn + 1 :] = per_turn[1:]
        made = len(fresh)
        size = len(new)
        tokens = sum(counts)
        self.total_groups += made
        self.total_messages += size
        self.total_tokens += tokens
        self.included_groups += made
        self.included_messages += size
        self.included_tokens += tokens
        self.included_non_system_groups += made - systems
        self.included_non_system_messages += size - systems
        self.included_tool_call_groups += tool_groups
        self.included_turns += turns_delta

    def update(self, messages: Sequence[Message]) -> bool:
        """Bring the index in line with ``messages``: append what is new, or rebuild if the
        already-indexed prefix changed.  Exclusions survive an append; a rebuild clears them.
        Returns True if it had to rebuild."""
        indexed = len(self._source)
        if len(messages) >= indexed and (indexed == 0 or list(messages[:indexed]) == self._source):
            self.append(list(messages[indexed:]))
            return False
        self._reset()
        self.append(list(messages))
        return True

    # Marking ----------------------------------------------------------------------------------

    def exclude(self, group: MessageGroup, reason: str) -> bool:
        """Mark a group excluded; returns False if it already was."""
        if group.excluded:
            return False
        self._count(group, -1)  # while still included, so its contribution is taken out
        group.excluded = True
        group.exclusion_reason = reason
        del self._live[group._live_key or group]
        return True

    def exclude_many(self, groups: Iterable[MessageGroup], reason: str) -> list[MessageGroup]:
        """Exclude several groups in one pass; returns those that were not already excluded."""
        return self._tally(groups, -1, totals=False, exclude=reason)

    def include(self, group: MessageGroup) -> bool:
        """Undo an exclusion; returns False if the group was already included."""
        if not group.excluded:
            return False
        group.excluded = False
        group.exclusion_reason = None
        self._count(group, 1)
        self._relive()
        return True

    def include_many(self, groups: Sequence[MessageGroup]) -> None:
        """Undo several exclusions (a failed summarisation restoring what it took)."""
        for group in groups:
            if group.excluded:
                group.excluded = False
                group.exclusion_reason = None
                self._count(group, 1)
        self._relive()

    def _relive(self) -> None:
        """Rebuild the ordered set of included groups from the full list (O(n); only on restores)."""
        live: dict[MessageGroup, MessageGroup] = {}
        for group in self.groups:
            if not group.excluded:
                if group._live_key is not None:
                    group._live_key = None
                live[group] = group
        self._live = live

    def make_summary_groups(
        self,
        messages: Sequence[Message],
        *,
        turns: Sequence[int | None],
        origin: str,
        replaces: Sequence[tuple[MessageGroup, ...]],
    ) -> list[MessageGroup]:
        """Summary groups for many messages, counted in one tokenizer batch."""
        counts = self.tokenizer.count_messages(messages)
        return list(map(_SummaryGroup, messages, turns, counts, repeat(origin), replaces))

    def make_summary_group(
        self, message: Message, *, turn: int | None, origin: str, replaces: tuple[MessageGroup, ...]
    ) -> MessageGroup:
        """A summary group for ``message``, counted with this index's tokenizer, not yet inserted."""
        tokens = self.tokenizer.count_messages([message])[0]
        return _SummaryGroup(message, turn, tokens, origin, replaces)

    def replace_many(self, pairs: Sequence[tuple[MessageGroup, MessageGroup]], reason: str) -> None:
        """Exclude each original and insert its replacement just before it, in one pass.

        The replacements are new summary groups (see :meth:`make_summary_groups`).
        """
        self.account_replacements(pairs, reason)
        self.place_replacements(pairs)

    def account_replacements(self, pairs: Sequence[tuple[MessageGroup, MessageGroup]], reason: str) -> None:
        """The metric half of :meth:`replace_many`: O(len(pairs)), so a strategy can check its
        target after every step.  Call :meth:`place_replacements` with all pairs before reading
        the groups or the projection."""
        if any(map(_excluded, map(_first, pairs))):  # checked first, so a refusal changes nothing
            raise CompactionError("replace_many: only included groups can be replaced")
        messages_delta = tokens_delta = added_tokens = tool_calls_delta = 0
        system, tool = _SYSTEM, _TOOL_CALL
        odd: list[tuple[MessageGroup, MessageGroup]] = []
        for original, replacement in pairs:
            if original.turn != replacement.turn or original.kind is system or len(replacement.messages) != 1:
                odd.append((original, replacement))
                continue
            # The usual case, netted in one step: same turn, one non-system group for another.
            messages_delta += 1 - len(original.messages)
            added = replacement.token_count
            tokens_delta += added - original.token_count
            added_tokens += added
            tool_calls_delta += (replacement.kind is tool) - (original.kind is tool)
            original.excluded = True
            original.exclusion_reason = reason
        plain = len(pairs) - len(odd)
        self.total_groups += plain
        self.total_messages += plain
        self.total_tokens += added_tokens
        self.included_messages += messages_delta
        self.included_non_system_messages += messages_delta
        self.included_tokens += tokens_delta
        self.included_tool_call_groups += tool_calls_delta
        if odd:
            self._tally([original for original, _ in odd], -1, totals=False)
            for original, _ in odd:
                original.excluded = True
                original.exclusion_reason = reason
            self._tally([replacement for _, replacement in odd], 1)

    def place_replacements(self, pairs: Sequence[tuple[MessageGroup, MessageGroup]]) -> None:
        """The structural half of :meth:`replace_many`: each replacement takes its original's
        place among the included groups (same key, same position), O(len(pairs))."""
        pending = self._pending
        live = self._live
        for original, replacement in pairs:
            anchor = id(original)
            if anchor in pending:
                pending[anchor].append(replacement)
            else:
                pending[anchor] = [replacement]
            key = original._live_key or original
            replacement._live_key = key
            live[key] = replacement

    def insert_before(self, anchor: MessageGroup, group: MessageGroup) -> None:
        """Insert ``group`` just before ``anchor``.

        Insertions are batched: the group list is rebuilt once, the next time it
        is read, so collapsing thousands of groups costs one pass, not one per group.
        """
        self._pending.setdefault(id(anchor), []).append(group)
        self.total_groups += 1
        self.total_messages += len(group.messages)
        self.total_tokens += group.token_count
        if not group.excluded:
            self._count(group, 1)
            self._relive()

    def _flush(self) -> None:
        if not self._pending:
            return
        pending = self._pending
        merged: list[MessageGroup] = []

        def place(group: MessageGroup) -> None:
            # A group inserted before another inserted group (a summary of summaries) lands first.
            inserted = pending.pop(id(group), None)
            if inserted is not None:
                for earlier in inserted:
                    place(earlier)
            merged.append(group)

        for group in self._groups:
            place(group)
        if pending:  # an anchor that is not in the index: a strategy bug, never silently dropped
            raise CompactionError("a summary group was anchored to a group that is not in this index")
        self._groups = merged

    # Reading ----------------------------------------------------------------------------------

    @property
    def groups(self) -> list[MessageGroup]:
        """Every group in order, excluded ones included.  Do not mutate the list."""
        self._flush()
        return self._groups

    @property
    def source_messages(self) -> list[Message]:
        """The messages that were indexed, as given (summaries written by strategies are not here)."""
        return self._source

    @property
    def included_bytes(self) -> int:
        return sum(g.byte_count for g in self._live.values())

    @property
    def total_bytes(self) -> int:
        return sum(g.byte_count for g in self.groups)

    def projection(self) -> list[Message]:
        """The included messages, in order: what is sent to the model."""
        source = self._source
        if self.included_messages == self.total_messages == len(source):
            # Every group included and nothing inserted: the groups hold exactly the indexed
            # messages, in order (a group never has fewer than one message).
            return list(source)
        out: list[Message] = []
        extend = out.extend
        for group in self._live.values():
            extend(group.messages)
        return out

    @property
    def live(self) -> list[MessageGroup]:
        """The included groups, in order (a snapshot: safe to exclude while iterating)."""
        return list(self._live.values())

    def newest_live(self) -> Iterator[MessageGroup]:
        """Included groups from the newest back; stop early to pay only for what you read."""
        return reversed(self._live.values())

    def metrics(self) -> dict[str, int]:
        """Totals and included counts, for reports."""
        return {
            "groups": self.total_groups,
            "messages": self.total_messages,
            "tokens": self.total_tokens,
            "turns": self.total_turns,
            "included_groups": self.included_groups,
            "included_messages": self.included_messages,
            "included_tokens": self.included_tokens,
            "included_turns": self.included_turns,
        }

    def __len__(self) -> int:
        return len(self.groups)

    def __repr__(self) -> str:
        return (
            f"MessageIndex(groups={self.included_groups}/{self.total_groups}, "
            f"messages={self.included_messages}/{self.total_messages}, "
            f"tokens={self.included_tokens}/{self.total_tokens} ({self.tokenizer.name}))"
        )
