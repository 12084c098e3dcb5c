"""Summarisation: replace older groups with one summary written by a separate chat model."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from contextledger.clients import ChatClient, Usage
from contextledger.compaction._arguments import UNSET, Unset, one_of, summarization_style
from contextledger.compaction._base import SYSTEM, CompactionStrategy, grid_step, newest, stable_limit, threshold_of
from contextledger.compaction._index import MessageIndex
from contextledger.compaction._summary_cache import (
    InMemorySummaryCache,
    SummaryCache,
    summarizer_identity,
    summary_key,
)
from contextledger.compaction._table import CompactionEvent, GroupKind, MessageGroup
from contextledger.compaction._triggers import Trigger
from contextledger.exceptions import ConfigurationError, SummarizationError, SummaryCacheError
from contextledger.messages import SUMMARY_PROPERTY, FunctionCallContent, FunctionResultContent, Message, TextContent
from contextledger.messages._message import SUMMARY_SOURCE_PROPERTY
from contextledger.tokenizers import Tokenizer

__all__ = [
    "DEFAULT_SUMMARIZATION_PROMPT",
    "FAILURES_BEFORE_ERROR",
    "RIDING_INSTRUCTION",
    "SUMMARY_PREFIX",
    "SummarizationStrategy",
]

logger = logging.getLogger("contextledger.compaction")

SUMMARY = GroupKind.SUMMARY

DEFAULT_SUMMARIZATION_PROMPT = (
    "You summarise the earlier part of a conversation between a user and an assistant so that the "
    "assistant can continue it without the original messages. Keep every fact the user stated, every "
    "decision, every preference and every constraint or prohibition exactly as stated, the outcome of "
    "each tool call, and anything still unresolved. When the user corrected a value, keep only the "
    "corrected value. Write plain prose, no preamble."
)

SUMMARY_PREFIX = "[Summary] "

RIDING_INSTRUCTION = (
    "Stop the conversation here. Do not call any tool and do not answer the last message: write a "
    "summary of everything above instead, following these instructions. "
)
"""What the cache-riding form sends after the conversation, before the strategy's prompt."""

SummaryForm = Literal["transcript", "conversation"]


def _transcript(groups: Iterable[Sequence[Message]]) -> str:
    """The groups' messages (each group's list in turn) as plain text for the summariser."""
    lines: list[str] = []
    for messages in groups:
        for message in messages:
            if message.is_summary:
                lines.append(f"(earlier summary) {message.text}")
                continue
            for c in message.contents:
                if isinstance(c, TextContent) and c.text:
                    lines.append(f"{message.role}: {c.text}")
                elif isinstance(c, FunctionCallContent):
                    lines.append(f"assistant called {c.name}({c.arguments})")
                elif isinstance(c, FunctionResultContent):
                    lines.append(f"tool result: {c.result}")
    return "\n".join(lines)


FAILURES_BEFORE_ERROR = 3
"""Summariser failures in a row after which :class:`SummarizationStrategy` logs once at ERROR."""


class SummarizationStrategy(CompactionStrategy):
    """Replace older groups with one ``[Summary]`` message written by a separate chat model.

    Keyword style: triggers when included non-system messages exceed
    ``target_count + threshold`` (4 + 2) and keeps the newest groups holding at
    least ``target_count`` messages.  Trigger style: excludes the oldest groups
    until the target is met, keeping ``minimum_preserved`` newest non-system
    groups (default 4), then summarises what it excluded.

    It fails closed: if the model raises or replies with nothing, every group it
    had excluded is restored, nothing is inserted, the failure is logged and
    recorded as an event (and raised as :class:`SummarizationError` with
    ``on_error="raise"``).  Cancellation restores and propagates.  Input is
    bounded by ``max_input_tokens`` (MAF spells it ``max_summary_input_tokens``):
    older groups that do not fit wait for a later round, and a group too large to
    fit on its own is left as it is while the groups after it are summarised, so
    one huge message never stalls summarisation.  After
    :data:`FAILURES_BEFORE_ERROR` failures in a row it logs once at ERROR level.

    Summaries do not change (design.md#stable-summaries).  Before calling its model it looks the run it chose up in
    ``cache`` (a :class:`SummaryCache`; by default an :class:`InMemorySummaryCache` of its own),
    keyed by the run's messages, the prompt and the summariser (:func:`summary_key`, with
    ``summarizer_id`` or else :func:`summarizer_identity` of the client); a hit inserts the same
    summary message byte for byte and calls no model.  With ``prefix_stable`` (the default) the
    run it chooses only changes in whole steps: applied afresh to each request of a growing
    conversation, it summarises the oldest messages ``threshold`` at a time (keyword style) or
    ``trigger - target`` at a time (a trigger and a threshold target on one measure), counted
    from the oldest, as truncation cuts.  So the model is called once per step, not per request,
    and the requests between two steps share their start.  A cache that fails is logged and
    passed over: the model is asked instead.
    """

    name = "summarization"
    calls_model = True

    def __init__(
        self,
        client: ChatClient | None = None,
        trigger: Trigger | None = None,
        minimum_preserved: int | None = None,
        *,
        chat_client: ChatClient | None = None,
        target: Trigger | None = None,
        target_count: int | None = None,
        threshold: int | None = None,
        prompt: str | None = None,
        summarization_prompt: str | None = None,
        max_input_tokens: int | Unset | None = UNSET,
        max_summary_input_tokens: int | Unset | None = UNSET,
        tokenizer: Tokenizer | None = None,
        on_error: Literal["report", "raise"] = "report",
        cache: SummaryCache | None = None,
        summarizer_id: str | None = None,
        prefix_stable: bool = True,
        form: SummaryForm | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        prompt_cache_key: str | None = None,
    ) -> None:
        client = one_of("SummarizationStrategy", ("client", client), ("chat_client", chat_client))
        if client is None or not callable(getattr(client, "get_response", None)):
            raise ConfigurationError(
                f"SummarizationStrategy needs a chat client with an async get_response(messages), got {client!r}"
            )
        prompt = one_of("SummarizationStrategy", ("prompt", prompt), ("summarization_prompt", summarization_prompt))
        if prompt is not None and (not isinstance(prompt, str) or not prompt.strip()):
            raise ConfigurationError(f"SummarizationStrategy prompt must be non-empty text, got {prompt!r}")
        trigger, target, self.minimum_preserved, self.target_count, self.threshold, budget = summarization_style(
            trigger, target, minimum_preserved, target_count, threshold, max_input_tokens, max_summary_input_tokens
        )
        super().__init__(trigger, target, prefix_stable=prefix_stable)
        self.client = client
        self.prompt = prompt or DEFAULT_SUMMARIZATION_PROMPT
        self.max_input_tokens = budget
        # Counts the summariser's input (and, like every strategy's tokenizer, the index).
        self.tokenizer = tokenizer
        self._failures = 0  # in a row
        if on_error not in ("report", "raise"):
            raise ConfigurationError(f"on_error must be 'report' or 'raise', got {on_error!r}")
        self.on_error = on_error
        self.last_usage: Usage | None = None
        if cache is None:
            cache = InMemorySummaryCache()
        elif not callable(getattr(cache, "get", None)) or not callable(getattr(cache, "put", None)):
            raise ConfigurationError(
                f"SummarizationStrategy cache must be a SummaryCache (async get and put), got {cache!r}"
            )
        self.cache: SummaryCache = cache
        if summarizer_id is not None and (not isinstance(summarizer_id, str) or not summarizer_id):
            raise ConfigurationError(f"summarizer_id must be non-empty text, got {summarizer_id!r}")
        self.summarizer_id = summarizer_id if summarizer_id is not None else summarizer_identity(client)
        if form is None:
            form = "conversation" if getattr(client, "rides_prefix_cache", False) is True else "transcript"
        if form not in ("transcript", "conversation"):
            raise ConfigurationError(f"SummarizationStrategy form must be 'transcript' or 'conversation', got {form!r}")
        self.form: SummaryForm = form
        if tools is not None and (isinstance(tools, (str, bytes)) or not all(isinstance(t, Mapping) for t in tools)):
            raise ConfigurationError(f"tools must be the conversation's tool definitions (dicts), got {tools!r}")
        self.tools = None if tools is None else [dict(tool) for tool in tools]
        if prompt_cache_key is not None and (not isinstance(prompt_cache_key, str) or not prompt_cache_key):
            raise ConfigurationError(f"prompt_cache_key must be non-empty text, got {prompt_cache_key!r}")
        self.prompt_cache_key = prompt_cache_key

    def riding_request(self, index: MessageIndex, groups: Sequence[int]) -> list[Message]:
        """The cache-riding form's request: the conversation as it is sent up to the cut (its
        system messages, then the included groups being summarised, in order, earlier summaries
        among them), then one user message asking for the summary.  Its start is the start of the
        requests the conversation already sent, which the provider has cached."""
        kind_of = index.columns.kind
        system = [m for g in index.live_ids() if kind_of[g] is SYSTEM for m in index.messages_of(g)]
        run = [m for g in groups for m in index.messages_of(g)]
        return [*system, *run, Message.user(RIDING_INSTRUCTION + self.prompt)]

    def next_cut(self, messages: Sequence[Message]) -> int | None:
        """Where the next step of this strategy will cut ``messages`` (a history it keeps
        compacted, as a session does): the position of the last message it will summarise, or
        None when that is not known yet (the history has not reached it) or not fixed (no grid).

        A prefix-stable cut moves in whole steps (trigger minus target) counted from the oldest
        group, so the next one is known before the history reaches the trigger.  A caller that
        marks a cache breakpoint there (``cache_breakpoints`` of ``OpenAIChatClient``) makes the
        provider keep an entry ending where the cache-riding summariser's request will end, which
        is what the GPT-5.6 rules need to read it (an entry is read only where a breakpoint wrote
        it)."""
        threshold = threshold_of(self.target, self.trigger) if self.target_count is None else None
        if not self.prefix_stable or threshold is None:
            return None
        metric, limit = threshold
        step = grid_step(limit, metric, threshold_of(None, self.trigger))
        if step is None or metric not in ("included_tokens", "included_messages", "included_non_system_messages"):
            return None
        index = MessageIndex(messages, tokenizer=self.tokenizer)
        column = index.columns.tokens if metric == "included_tokens" else index.columns.size
        kind_of = index.columns.kind
        kept = newest(index, max(self.minimum_preserved, 1))
        pinned = getattr(index, "pinned_ids", ())
        gathered = 0
        for group in index.live_ids():
            if kind_of[group] is SYSTEM:
                continue
            if group in kept or group in pinned or group in index.columns.unit:
                return None
            gathered += column[group]
            if gathered >= step:
                last = index.messages_of(group)[-1]
                return next(n for n, message in enumerate(messages) if message is last)
        return None

    async def _ask(self, index: MessageIndex, groups: list[int], request: list[Message]) -> Any:
        """The summariser's reply.  In the riding form the conversation's tools stay declared (so
        its start is byte for byte what was cached) and are not to be called: a reply that calls
        one is asked once more, then the transcript form is sent instead.  The last message of the
        conversation that takes a cache breakpoint is named in the ``cache_breakpoints`` option
        (a client that can, such as OpenAIChatClient on a model that takes them, marks it), so the
        next step's summary, whose run starts with this one's, reads it from the cache too."""
        if self.form == "conversation":
            riding = self.riding_request(index, groups)
            options: dict[str, Any] = {}
            markable = [n for n, m in enumerate(riding[:-1]) if m.role in ("system", "user", "tool")]
            if markable:
                options["cache_breakpoints"] = [markable[-1]]
            if self.tools:
                options["tool_choice"] = "none"
            if self.prompt_cache_key is not None:
                options["prompt_cache_key"] = self.prompt_cache_key
            for _ in range(2):
                response = await self.client.get_response(riding, tools=self.tools, **options)
                if not any(isinstance(c, FunctionCallContent) for m in response.messages for c in m.contents):
                    return response
            logger.warning("the summariser called a tool twice in the cache-riding form; sending the transcript")
        return await self.client.get_response(request)

    def _key_messages(self, index: MessageIndex, groups: list[int]) -> list[Message]:
        """What the summary depends on: the run summarised and, in the riding form, the system
        messages it is sent after (the tools and the form go into the key's prompt)."""
        run = [message for group in groups for message in index.messages_of(group)]
        if self.form == "transcript":
            return run
        kind_of = index.columns.kind
        return [*(m for g in index.live_ids() if kind_of[g] is SYSTEM for m in index.messages_of(g)), *run]

    def _key_prompt(self) -> str:
        if self.form == "transcript":
            return self.prompt
        tools = json.dumps(self.tools, sort_keys=True, default=repr) if self.tools else ""
        return f"{self.prompt}\0form=conversation\0tools={tools}"

    def _request(self, groups: Iterable[MessageGroup]) -> list[Message]:
        return self._request_for(group.messages for group in groups)

    def _request_for(self, groups: Iterable[Sequence[Message]]) -> list[Message]:
        return [Message.system(self.prompt), Message.user(_transcript(groups))]

    def _select(self, index: MessageIndex) -> tuple[list[int], bool]:
        """Groups to summarise, oldest first, excluded as they are chosen; and whether the input
        budget (rather than the floor or the target) is what stopped the choice."""
        chosen: list[int] = []
        over = False
        budget = self.max_input_tokens
        tokenizer = index.tokenizer
        kind_of, sizes = index.columns.kind, index.columns.size
        spent = sum(tokenizer.count_messages(self._request_for([])))
        if self.target_count is not None:
            kept: set[int] = set()
            retained = 0
            for group in index.newest_ids():
                if kind_of[group] is SYSTEM:
                    continue
                if retained >= self.target_count and kept:
                    break
                kept.add(group)
                retained += sizes[group]
        else:
            kept = newest(index, max(self.minimum_preserved, 1))
        pinned = index.pinned_ids  # a provider's compaction item is never summarised
        candidates = [g for g in index.live_ids() if kind_of[g] is not SYSTEM and g not in kept and g not in pinned]
        grid = self._grid(index)
        for group in candidates:
            if group in index.columns.unit:
                break  # a call whose results sit apart: summarising it would move them; stop before it
            if grid is not None:
                if getattr(index, grid[0]) <= grid[1]:
                    break
            elif self.target_count is None and self.target_met(index):
                break
            if budget is not None:
                cost = tokenizer.count_text(_transcript([index.messages_of(group)]) + "\n")
                if spent + cost > budget:
                    if chosen:
                        return chosen, True
                    over = True  # too large on its own: left as it is, the groups after it go on
                    continue
                spent += cost
            chosen.extend(index.exclude_ids([group], "summarized"))
        return chosen, over and not chosen

    def _grid(self, index: MessageIndex) -> tuple[str, int] | None:
        """(measure, limit) to summarise down to, on the prefix-stable grid; None when there is no
        grid (not prefix-stable, or a target that is not a threshold on the trigger's measure)."""
        if not self.prefix_stable:
            return None
        if self.target_count is not None:
            metric = "included_non_system_messages"
            ceiling = self.target_count + (self.threshold or 0)
            return metric, stable_limit(index, metric, self.target_count, (metric, ceiling))
        threshold = threshold_of(self.target, self.trigger)
        if threshold is None:
            return None
        metric, limit = threshold
        return metric, stable_limit(index, metric, limit, threshold_of(None, self.trigger))

    async def _cached(self, key: str) -> str | None:
        try:
            found = await self.cache.get(key)
        except SummaryCacheError as error:
            logger.warning("summary cache unreadable, asking the summariser: %s", error)
            return None
        return found if isinstance(found, str) and found.strip() else None

    async def _remember(self, key: str, text: str) -> None:
        try:
            await self.cache.put(key, text)
        except SummaryCacheError as error:
            logger.warning("summary cache not written, the next request asks the summariser again: %s", error)

    def _restore(self, index: MessageIndex, groups: list[int]) -> None:
        index.include_ids(groups)

    def _fail(self, index: MessageIndex, groups: list[int], why: str) -> bool:
        self._restore(index, groups)
        index.events.append(CompactionEvent(self.name, "failed", detail=f"{why}; nothing was replaced"))
        logger.warning("summarization skipped: %s; the history is unchanged", why)
        self._failures += 1
        if self._failures == FAILURES_BEFORE_ERROR:  # once per run of failures, as MAF does
            logger.error(
                "summarization has failed %d times in a row; the history is no longer being summarised",
                self._failures,
            )
        if self.on_error == "raise":
            raise SummarizationError(f"summarization failed: {why}; the history is unchanged")
        return False

    def _succeeded(self, usage: Usage | None) -> None:
        """A round that replaced groups (a strategy built on this one reports its own this way):
        the failures in a row start again from none, and ``last_usage`` is its call's usage
        (``None`` when a kept summary was reused and nothing was called)."""
        self.last_usage = usage
        self._failures = 0

    async def _run(self, index: MessageIndex) -> bool:
        groups, over_budget = self._select(index)
        request = self._request_for(map(index.messages_of, groups))
        if groups and self.max_input_tokens is not None:
            # The per-group estimate above is close; the request as sent is what must fit.
            while len(groups) > 1 and sum(index.tokenizer.count_messages(request)) > self.max_input_tokens:
                index.include_ids([groups.pop()])
                request = self._request_for(map(index.messages_of, groups))
            if sum(index.tokenizer.count_messages(request)) > self.max_input_tokens:
                index.include_ids(groups)
                groups, over_budget = [], True
        if not groups:
            if over_budget:
                why = "every group that could be summarised exceeds max_input_tokens on its own; nothing was replaced"
                index.events.append(CompactionEvent(self.name, "failed", detail=why))
                logger.warning("summarization skipped: every group exceeds max_input_tokens on its own")
            return False
        key = summary_key(self._key_messages(index, groups), prompt=self._key_prompt(), summarizer=self.summarizer_id)
        try:
            text = await self._cached(key)
        except asyncio.CancelledError:
            self._restore(index, groups)
            raise
        reused = text is not None
        if text is None:
            try:
                response = await self._ask(index, groups, request)
            except asyncio.CancelledError:
                self._restore(index, groups)
                raise
            except Exception as error:  # any client failure fails closed
                return self._fail(index, groups, f"the summariser raised {type(error).__name__}: {error}")
            text = getattr(response, "text", None)
            if not isinstance(text, str) or not text.strip():
                return self._fail(index, groups, "the summariser replied with no text")
            text = text.strip()
            if not text.startswith(SUMMARY_PREFIX.strip()):
                text = SUMMARY_PREFIX + text
            self.last_usage = getattr(response, "usage", None)
            try:
                await self._remember(key, text)
            except asyncio.CancelledError:
                self._restore(index, groups)
                raise
        else:
            self.last_usage = None  # no call was made
        self._failures = 0
        summary = Message(
            "assistant",
            (TextContent(text),),
            additional_properties={SUMMARY_PROPERTY: True, SUMMARY_SOURCE_PROPERTY: "summarization"},
        )
        replacement = index.insert_summary(groups[0], summary, replaces=groups, origin="summarization")
        tokens = index.columns.tokens
        index.events.append(
            CompactionEvent(
                self.name,
                "summarized",
                SUMMARY.value,
                None,
                sum(map(index.columns.size.__getitem__, groups)),
                sum(map(tokens.__getitem__, groups)),
                f"{len(groups)} groups -> {tokens[replacement]} tokens" + (" (summary reused)" if reused else ""),
                usage=self.last_usage,
            )
        )
        return True

    def __repr__(self) -> str:
        if self.target_count is not None:
            return f"SummarizationStrategy(target_count={self.target_count}, threshold={self.threshold})"
        return f"SummarizationStrategy(trigger={self.trigger!r}, minimum_preserved={self.minimum_preserved})"
