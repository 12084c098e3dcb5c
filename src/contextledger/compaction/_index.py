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
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
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

    # Every group has these; the rarer attributes below are class-level defaults, set on an
    # instance only when they differ, so indexing a long history builds each group in five stores.
    __slots__ = ("__dict__", "excluded", "kind", "messages", "token_count", "turn")

    orphan: bool = False
    origin: str = "input"
    replaces: tuple[MessageGroup, ...] = ()
    exclusion_reason: str | None = None
    call_ids: frozenset[str] | None = None
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
        if orphan:
            self.orphan = True
        if origin != "input":
            self.origin = origin
        if replaces:
            self.replaces = replaces

    @property
    def key(self) -> MessageGroup:
        """This group's key among the included groups (see ``_live_key``)."""
        return self._live_key if self._live_key is not None else self

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
        if self.kind is not GroupKind.TOOL_CALL or not self.call_ids:
            return True
        if len(self.call_ids) == 1 and len(self.messages) == 2:  # one call, one answer: the usual shape
            answer = self.messages[1].contents
            return (
                len(answer) == 1
                and isinstance(answer[0], FunctionResultContent)
                and (answer[0].call_id in self.call_ids)
            )
        answered = {
            c.call_id
            for m in self.messages
            if m.role == "tool"
            for c in m.contents
            if isinstance(c, FunctionResultContent)
        }
        return self.call_ids <= answered

    def __repr__(self) -> str:
        state = f"excluded:{self.exclusion_reason}" if self.excluded else "included"
        return (
            f"MessageGroup({self.kind.value}, turn={self.turn}, messages={len(self.messages)}, "
            f"tokens={self.token_count}, {state})"
        )


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
        self._turn_groups: dict[int, int] = {}
        self.total_turns = 0

    def _count(self, group: MessageGroup, sign: int) -> None:
        """Add (sign=1) or remove (sign=-1) one group's contribution to the included metrics.

        The per-exclusion path of every strategy: O(1), no loops."""
        size = sign * len(group.messages)
        self.included_groups += sign
        self.included_messages += size
        self.included_tokens += sign * group.token_count
        kind = group.kind
        if kind is not GroupKind.SYSTEM:
            self.included_non_system_groups += sign
            self.included_non_system_messages += size
            if kind is GroupKind.TOOL_CALL:
                self.included_tool_call_groups += sign
        turn = group.turn
        if turn:
            before = self._turn_groups.get(turn, 0)
            after = before + sign
            self._turn_groups[turn] = after
            if before == 0 and after > 0:
                self.included_turns += 1
            elif before > 0 and after == 0:
                self.included_turns -= 1

    def _tally(
        self, groups: Iterable[MessageGroup], sign: int, *, totals: bool = True, admit: bool = False
    ) -> None:
        """Add (sign=1) or remove (sign=-1) many groups' contributions in one pass: totals, and the
        included metrics of the included ones.  With ``admit`` the included ones also join the
        ordered set of included groups.  Runs of groups in the same turn update the per-turn
        count once, so appending a long history costs one dict update per turn, not per group."""
        total_groups = total_messages = total_tokens = 0
        groups_in = messages_in = tokens_in = non_system = non_system_messages = tool_calls = 0
        turns_delta = 0
        turn_groups = self._turn_groups
        live = self._live
        system, tool = GroupKind.SYSTEM, GroupKind.TOOL_CALL
        run_turn: int | None = None
        run_length = 0

        def close_run(turn: int, count: int) -> int:
            """Apply a run of ``count`` groups of one turn; +1/-1 if the turn appeared/vanished."""
            before = turn_groups.get(turn, 0)
            after = before + sign * count
            turn_groups[turn] = after
            return (before == 0 and after > 0) - (before > 0 and after == 0)

        for group in groups:
            size = len(group.messages)
            tokens = group.token_count
            total_groups += 1
            total_messages += size
            total_tokens += tokens
            if group.excluded:
                continue
            if admit:
                live[group.key] = group
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
                    if run_turn is not None:
                        turns_delta += close_run(run_turn, run_length)
                    run_turn, run_length = turn, 1
        if run_turn is not None:
            turns_delta += close_run(run_turn, run_length)
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
        # Take the still-open tail out of the metrics; it is counted again, as it ends up, below.
        start = len(groups)
        open_tool = self._open_tool
        provisional = self._provisional
        if provisional and (
            any(group.excluded for group in provisional) or (open_tool is not None and open_tool.excluded)
        ):
            # A strategy already excluded some of these; merging them into a call group now could
            # flip a message's inclusion behind its back, so they stay the groups they were.
            provisional = []
        if open_tool is not None or provisional:
            first = open_tool if open_tool is not None else provisional[0]
            start = len(groups) - 1
            while groups[start] is not first:
                start -= 1
            self._tally(groups[start:], -1)
        turn = self._turn
        system_kind, user_kind, text_kind, tool_kind, summary_kind = (
            GroupKind.SYSTEM,
            GroupKind.USER,
            GroupKind.ASSISTANT_TEXT,
            GroupKind.TOOL_CALL,
            GroupKind.SUMMARY,
        )
        add = groups.append
        live = self._live
        for message, tokens in zip(new, counts):
            role = message.role
            if role == "tool":
                contents = message.contents
                if (
                    open_tool is not None
                    and open_tool.call_ids is not None
                    and len(contents) == 1
                    and isinstance(contents[0], FunctionResultContent)
                ):
                    belongs = contents[0].call_id in open_tool.call_ids
                else:
                    result_ids = [c.call_id for c in contents if type(c) is FunctionResultContent]
                    belongs = (
                        open_tool is not None
                        and open_tool.call_ids is not None
                        and bool(result_ids)
                        and all(call_id in open_tool.call_ids for call_id in result_ids)
                    )
                # A result nobody asked for, while a call still waits for its own, stays inside the
                # open group (flagged), so that call and its results are never split apart.
                if open_tool is not None and (belongs or not open_tool.is_complete):
                    if provisional:  # reasoning between results joins the tool group
                        for group in provisional:
                            groups.pop()
                            live.pop(group.key, None)
                            open_tool.messages.extend(group.messages)
                            open_tool.token_count += group.token_count
                        provisional = []
                    open_tool.messages.append(message)
                    open_tool.token_count += tokens
                    open_tool._byte_count = None
                    if not belongs:
                        open_tool.orphan = True
                else:
                    open_tool = None
                    if provisional:
                        provisional = []
                    add(MessageGroup(tool_kind, [message], turn, tokens, orphan=True))
            elif role == "user":
                open_tool = None
                if provisional:
                    provisional = []
                turn += 1
                add(MessageGroup(user_kind, [message], turn, tokens))
            elif role == "assistant":
                contents = message.contents
                only: type | None = type(contents[0]) if len(contents) == 1 else None
                if only is TextContent and not message.additional_properties:
                    # The common case, decided without scanning anything.
                    open_tool = None
                    if provisional:
                        provisional = []
                    add(MessageGroup(text_kind, [message], turn, tokens))
                    continue
                head = contents[0] if contents else None
                if only is FunctionCallContent and isinstance(head, FunctionCallContent):
                    call_ids: frozenset[str] = frozenset((head.call_id,))
                else:
                    call_ids = frozenset(c.call_id for c in contents if type(c) is FunctionCallContent)
                if call_ids:
                    group = MessageGroup(tool_kind, [message], turn, tokens)
                    group.call_ids = call_ids
                    if provisional:  # reasoning right before a call belongs to it
                        del groups[len(groups) - len(provisional) :]
                        for dropped in provisional:
                            live.pop(dropped.key, None)
                        group.messages[:0] = [m for g in provisional for m in g.messages]
                        group.token_count += sum(g.token_count for g in provisional)
                        provisional = []
                    open_tool = group
                    add(group)
                elif message.is_summary:
                    open_tool = None
                    if provisional:
                        provisional = []
                    origin = str(message.additional_properties.get(SUMMARY_SOURCE_PROPERTY, "summarization"))
                    add(MessageGroup(summary_kind, [message], _summary_turn(message, turn), tokens, origin=origin))
                elif contents and all(type(c) is ReasoningContent for c in contents):
                    group = MessageGroup(text_kind, [message], turn, tokens)
                    provisional.append(group)
                    add(group)
                else:
                    open_tool = None
                    if provisional:
                        provisional = []
                    add(MessageGroup(text_kind, [message], turn, tokens))
            else:  # system
                open_tool = None
                if provisional:
                    provisional = []
                add(MessageGroup(system_kind, [message], None, tokens))
        self._open_tool = open_tool
        self._provisional = provisional
        self._turn = self.total_turns = turn
        self._tally(groups[start:], 1, admit=True)
        self._source.extend(new)

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
        del self._live[group.key]
        return True

    def exclude_many(self, groups: Sequence[MessageGroup], reason: str) -> list[MessageGroup]:
        """Exclude several groups in one pass; returns those that were not already excluded."""
        fresh = [g for g in groups if not g.excluded]
        self._tally(fresh, -1, totals=False)
        live = self._live
        for group in fresh:
            group.excluded = True
            group.exclusion_reason = reason
            del live[group.key]
        return fresh

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
        out: list[MessageGroup] = []
        for message, turn, tokens, source in zip(messages, turns, counts, replaces):
            group = MessageGroup(GroupKind.SUMMARY, [message], turn, tokens)
            group.origin = origin
            group.replaces = source
            out.append(group)
        return out

    def make_summary_group(
        self, message: Message, *, turn: int | None, origin: str, replaces: tuple[MessageGroup, ...]
    ) -> MessageGroup:
        """A summary group for ``message``, counted with this index's tokenizer, not yet inserted."""
        tokens = self.tokenizer.count_messages([message])[0]
        return MessageGroup(GroupKind.SUMMARY, [message], turn, tokens, origin=origin, replaces=replaces)

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
        messages_delta = tokens_delta = added_tokens = tool_calls_delta = 0
        odd: list[tuple[MessageGroup, MessageGroup]] = []
        for original, replacement in pairs:
            if original.excluded:
                raise CompactionError("replace_many: only included groups can be replaced")
            if original.turn != replacement.turn or original.kind is GroupKind.SYSTEM or len(replacement.messages) != 1:
                odd.append((original, replacement))
                continue
            # The usual case, netted in one step: same turn, one non-system group for another.
            messages_delta += 1 - len(original.messages)
            tokens_delta += replacement.token_count - original.token_count
            added_tokens += replacement.token_count
            tool_calls_delta += (replacement.kind is GroupKind.TOOL_CALL) - (original.kind is GroupKind.TOOL_CALL)
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
            pending.setdefault(id(original), []).append(replacement)
            replacement._live_key = original.key
            live[original.key] = replacement

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
        out: list[Message] = []
        for group in self._live.values():
            out.extend(group.messages)
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
