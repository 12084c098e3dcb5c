"""Tool results: collapse old tool-call groups into one-line summaries, or remove them.

Only tool-call groups are touched, and only whole ones: a call and its results go or stay
together.  Orphan results, calls still waiting for results, and calls whose results sit apart
(design.md#units) are never collapsed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from types import MappingProxyType

from contextledger.compaction._arguments import count, tool_style
from contextledger.compaction._base import (
    CompactionStrategy,
    grid_step,
    newest,
    newest_non_system,
    on_grid,
    stable_limit,
    stops_never,
    threshold_of,
)
from contextledger.compaction._index import MessageIndex
from contextledger.compaction._triggers import Trigger
from contextledger.exceptions import ConfigurationError
from contextledger.messages import (
    SUMMARY_PROPERTY,
    FunctionCallContent,
    FunctionResultContent,
    HostedCallContent,
    HostedResultContent,
    Message,
)
from contextledger.messages._message import SUMMARY_SOURCE_PROPERTY, assistant_text_message

__all__ = [
    "SelectiveToolCallCompactionStrategy",
    "ToolResultCompactionStrategy",
    "format_tool_results",
    "with_reference",
]


def _preview(text: str, limit: int) -> str:
    # Only the head can survive the cut, so only the head is normalised (results can be megabytes).
    head = text[: limit * 2]
    if "  " in head or "\n" in head or "\t" in head or "\r" in head:
        head = " ".join(head.split())
    else:
        head = head.strip()
    if len(head) <= limit and len(text) <= limit * 2:
        return head
    return head[: limit - 1].rstrip() + "…"


def format_tool_results(messages: Sequence[Message], *, max_result_chars: int = 80, max_chars: int = 400) -> str:
    """``[Tool results: get_weather: sunny, 18°C; search_docs: 3 documents]``, with each result
    cut to ``max_result_chars`` and the whole line to ``max_chars``: a trace of what the tools
    said, not a copy of it."""
    return _tool_result_texts((messages,), max_result_chars, max_chars)[0]


def _tool_result_texts(groups: Iterable[Sequence[Message]], max_result_chars: int, max_chars: int) -> list[str]:
    """:func:`format_tool_results` for many groups' messages in one loop (a collapse writes
    thousands per call), the usual shape decided inline."""
    out: list[str] = []
    append = out.append
    call_type, result_type = FunctionCallContent, FunctionResultContent
    for messages in groups:
        if len(messages) == 2:  # the usual shape: one call, one result
            call, result = messages[0].contents, messages[1].contents
            if (
                len(call) == 1
                and len(result) == 1
                and type(call[0]) is call_type
                and type(result[0]) is result_type
                and call[0].call_id == result[0].call_id
            ):
                preview = _preview(result[0].result, max_result_chars) or "(empty)"
                text = f"[Tool results: {call[0].name}: {preview}]"
                if len(text) <= max_chars:
                    append(text)
                    continue
        append(_any_tool_results(messages, max_result_chars, max_chars))
    return out


def _any_tool_results(messages: Sequence[Message], max_result_chars: int, max_chars: int) -> str:
    """The general case of :func:`format_tool_results`: parallel calls, missing results, a cut line."""
    names: dict[str, str] = {}
    for message in messages:
        for c in message.contents:
            if isinstance(c, FunctionCallContent):
                names[c.call_id] = c.name
            elif isinstance(c, HostedCallContent):
                names[c.call_id] = c.name or c.tool  # an MCP tool's name, else the hosted tool
    items: list[str] = []
    answered: set[str] = set()
    for message in messages:
        for c in message.contents:
            if isinstance(c, (FunctionResultContent, HostedResultContent)):
                answered.add(c.call_id)
                name = names.get(c.call_id, "tool")
                output = c.result if isinstance(c, FunctionResultContent) else c.output
                items.append(f"{name}: {_preview(output, max_result_chars) or '(empty)'}")
    for call_id, name in names.items():
        if call_id not in answered:
            items.append(f"{name}: (no result)")
    body = "; ".join(items) if items else "no results"
    text = f"[Tool results: {body}]"
    if len(text) > max_chars:
        text = text[: max(max_chars - 2, 0)].rstrip() + "…]"
    return text


def with_reference(text: str, ref: str) -> str:
    """A collapsed line (or a notice) carrying the reference ``recall_context`` takes, as
    ``ref="..."`` inside its closing bracket: ``[Tool results: get_weather: sunny; ref="1f2e3d4c5b6a"]``.

    Only a host that offers the model ``recall_context`` writes it; the reference comes from the
    group's content, so the line reads the same on every request."""
    mark = f'ref="{ref}"'
    return f"{text[:-1]}; {mark}]" if text.endswith("]") else f"{text} [{mark}]"


_TOOLS = "tool_results"
_TOOL_SUMMARY_PROPERTIES = MappingProxyType({SUMMARY_PROPERTY: True, SUMMARY_SOURCE_PROPERTY: _TOOLS})

ToolResultFormatter = Callable[[Sequence[Message]], str]


class _ToolGroupStrategy(CompactionStrategy):
    """Shared floor logic of the two strategies that act only on tool-call groups."""

    def __init__(
        self,
        trigger: Trigger | None = None,
        minimum_preserved: int | None = None,
        *,
        target: Trigger | None = None,
        keep_last_tool_call_groups: int | None = None,
        prefix_stable: bool = True,
        stable_step: int | None = None,
    ) -> None:
        trigger, target, self.keep_last_tool_call_groups, self.minimum_preserved = tool_style(
            type(self).__name__, trigger, target, minimum_preserved, keep_last_tool_call_groups
        )
        super().__init__(trigger, target, prefix_stable=prefix_stable, stable_step=stable_step)

    def default_stable_step(self) -> int:
        """A floor of ``keep_last_tool_call_groups`` moves four tool calls at a time: the start of
        the request changes once every four calls, not on each (design.md#prefix-stability), and a short history
        still has its older results collapsed."""
        return 4

    def _protected(self, index: MessageIndex, tools: list[int]) -> set[int]:
        """The newest groups the floor keeps out of reach (``tools``: the included tool groups)."""
        if self.keep_last_tool_call_groups is not None:
            keep = self.keep_last_tool_call_groups
            return set(tools[-keep:]) if keep else set()
        return newest(index, self.minimum_preserved)

    def __repr__(self) -> str:
        if self.keep_last_tool_call_groups is not None:
            return f"{type(self).__name__}(keep_last_tool_call_groups={self.keep_last_tool_call_groups})"
        return f"{type(self).__name__}(trigger={self.trigger!r}, minimum_preserved={self.minimum_preserved})"


class ToolResultCompactionStrategy(_ToolGroupStrategy):
    """Replace old tool-call groups with one short summary message each.

    The originals are excluded, not deleted, and a ``summary`` group in the
    same turn takes their place, e.g. ``[Tool results: get_weather: sunny,
    18°C]``.  Orphan results and calls still waiting for results are never
    collapsed.  Keyword style: ``keep_last_tool_call_groups`` (default 1) newest
    tool groups stay verbatim.  Trigger style: ``minimum_preserved`` newest
    non-system groups (default 2) are untouched.
    """

    name = "tool_result_collapse"

    def __init__(
        self,
        trigger: Trigger | None = None,
        minimum_preserved: int | None = None,
        *,
        target: Trigger | None = None,
        keep_last_tool_call_groups: int | None = None,
        formatter: ToolResultFormatter | None = None,
        max_result_chars: int = 80,
        max_summary_chars: int = 400,
        prefix_stable: bool = True,
        stable_step: int | None = None,
    ) -> None:
        super().__init__(
            trigger,
            minimum_preserved,
            target=target,
            keep_last_tool_call_groups=keep_last_tool_call_groups,
            prefix_stable=prefix_stable,
            stable_step=stable_step,
        )
        self.max_result_chars = count(max_result_chars, "max_result_chars", minimum=8)
        self.max_summary_chars = count(max_summary_chars, "max_summary_chars", minimum=32)
        if formatter is not None and not callable(formatter):
            raise ConfigurationError(f"formatter must be a callable from messages to text, got {formatter!r}")
        self.formatter = formatter

    def _summary_texts(self, index: MessageIndex, groups: list[int]) -> list[str]:
        messages = index.messages_of_groups(groups)
        if self.formatter is None:
            return _tool_result_texts(messages, self.max_result_chars, self.max_summary_chars)
        texts: list[str] = []
        for group in messages:
            text = self.formatter(group)
            if not isinstance(text, str) or not text.strip():
                raise ConfigurationError(f"the tool-result formatter returned {text!r}; it must return non-empty text")
            texts.append(text)
        return texts

    def _summary(self, index: MessageIndex, group: int) -> Message:
        return assistant_text_message(self._summary_texts(index, [group])[0], _TOOL_SUMMARY_PROPERTIES)

    async def _run(self, index: MessageIndex) -> bool:
        tools = index.tool_call_ids()
        protected = self._protected(index, tools)
        columns = index.columns
        orphans, waiting, units = columns.orphan, columns.unanswered, columns.unit
        pinned = index.pinned_ids  # a provider's compaction item that opens calls is never collapsed
        candidates = [
            g
            for g in tools
            if g not in protected
            and g not in pinned
            and g not in orphans
            and g not in waiting
            and g not in units  # a call whose results sit apart is left whole, never collapsed
        ]
        threshold = threshold_of(self.target, self.trigger)
        originals: list[int] = []
        replacements: list[int] = []
        if stops_never(self.target, self.trigger):
            block = self.block()
            if block > 1:
                candidates = candidates[: len(candidates) // block * block]
            originals = candidates
            texts = self._summary_texts(index, candidates)
            replacements = index.collapse_ids(
                candidates, texts, "collapsed", origin=_TOOLS, properties=_TOOL_SUMMARY_PROPERTIES
            )
        elif threshold is not None:
            # Collapse just enough groups, found with local arithmetic.
            metric, limit = threshold
            step: int | None = None
            if self.prefix_stable and self.target is not None:
                ceiling = threshold_of(None, self.trigger)
                step = grid_step(limit, metric, ceiling)
                limit = stable_limit(index, metric, limit, ceiling)
            current = remaining = getattr(index, metric)
            summaries: list[Message] = []
            saved_by: list[int] = []  # what the first i collapses save, i >= 1
            for group in candidates:
                if remaining <= limit:
                    break
                summary = self._summary(index, group)
                originals.append(group)
                summaries.append(summary)
                if metric == "included_tokens":
                    remaining -= columns.tokens[group] - index.tokenizer.count_messages([summary])[0]
                elif metric == "included_messages":
                    remaining -= columns.size[group] - 1
                saved_by.append(current - remaining)
            if remaining > limit and saved_by and step is not None:
                # The target is out of reach: the collapses stop on the grid (see on_grid).
                need = on_grid(current - limit, saved_by[-1], step)
                keep = next((n for n, saved in enumerate(saved_by, 1) if saved >= need), 0) if need > 0 else 0
                del originals[keep:], summaries[keep:]
            replacements = index.replace_ids(originals, summaries, "collapsed", origin=_TOOLS)
        else:
            # Any other target: collapse one group at a time and ask the index after each.
            for group in candidates:
                if self.target_met(index):
                    break
                replacements += index.replace_ids([group], [self._summary(index, group)], "collapsed", origin=_TOOLS)
                originals.append(group)
        tokens = columns.tokens
        saved = sum(map(tokens.__getitem__, originals)) - sum(map(tokens.__getitem__, replacements))
        return index.record(self.name, "collapsed", originals, f"replaced by one-line summaries, {saved} tokens saved")


class SelectiveToolCallCompactionStrategy(_ToolGroupStrategy):
    """Exclude old tool-call groups entirely (calls and results together), keeping the newest.

    Keyword style: ``keep_last_tool_call_groups`` (default 1; 0 removes every
    tool group but the newest group of the conversation).  Trigger style:
    ``minimum_preserved`` newest non-system groups (default 2) are untouched.
    """

    name = "selective_tool_call"

    async def _run(self, index: MessageIndex) -> bool:
        last = newest_non_system(index)
        tools = index.tool_call_ids()
        protected = self._protected(index, tools)
        candidates = [g for g in tools if g not in protected and g != last]
        # A tool group goes with its whole unit (an approval's user answer too), unless the unit
        # holds a protected group.
        keep = protected if last is None else {*protected, last}
        return self._exclude_oldest(index, candidates, "tool_call_removed", keep, block=self.block())
