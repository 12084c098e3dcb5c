"""Compaction around an agent: the request view and the retained history.

Two different promises, and the drift lab exists to compare them:

* the *request view* (``before_strategy``) changes only what a model call
  sends; the stored history stays complete and serialisable, and what was
  excluded stays excluded on the next call of the session;
* the *retained history* (``after_strategy``, or :class:`ReducedHistoryProvider`)
  rewrites what is stored, so later turns start smaller and whatever was
  dropped is gone for good.

The request view kept per session lives in ``_view.py``; the retained history's reducer, and
the stateless :class:`ReducedHistoryProvider`, in ``_retained.py``.  With ``agent_tools=True`` the
model gets its own controls (``recall_context``, ``compact_context``): references and recall live
in ``_recall.py``.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

from contextledger._tracing import traced_index_compaction
from contextledger.agents._context import (
    INSTRUCTIONS_PROPERTY,
    AgentView,
    ContextProvider,
    RequestMessages,
    RunContext,
    current_run,
)
from contextledger.agents._history import kept_history, session_history
from contextledger.agents._recall import (
    COMPACT_DESCRIPTION,
    COMPACT_TOOL,
    RECALL_DESCRIPTION,
    RECALL_LIMIT,
    RECALL_TOOL,
    References,
    annotated_projection,
    compacted_text,
    recall_text,
)
from contextledger.agents._retained import HistoryReducer, check_strategy
from contextledger.agents._session import Session
from contextledger.agents._tools import FunctionTool, tool
from contextledger.agents._view import RequestView, fingerprint, same_count
from contextledger.compaction import CompactionStrategy, MessageIndex
from contextledger.compaction._apply import resolve_tokenizer
from contextledger.exceptions import ConfigurationError
from contextledger.history import HistoryVersion, RetainedRewrite
from contextledger.messages import Message
from contextledger.tokenizers import Tokenizer

__all__ = ["CompactionProvider"]


# Leading excluded messages worth moving out of a request view's index: small enough that the
# index stays near the size of what is sent, large enough that rebuilding it is rare.
_FREEZE_AT = 32
# Whether a view built again (the history changed under it) leaves out the excluded turns it
# starts with at once; off only to check that doing so changes no request.
_FREEZE_ON_REBUILD = True


class CompactionProvider(ContextProvider):
    """Runs compaction strategies around an agent's model calls (see the module docstring).

    ``before_strategy`` compacts the request view.  Registered in an agent's
    ``context_providers`` it runs once per run, before the first model call;
    wrapped around the client with :func:`use_context_providers` it runs
    before every call of the tool loop.  ``after_strategy`` compacts the
    stored history of the provider named ``history_source_id`` as each
    successful run leaves it, and stores the reduced list: in the same atomic
    write as the turn when that history is the agent's only one and a
    :class:`~contextledger.history.TurnRewriter` (the built-in ones are), else
    right after the turn is stored.

    ``agent_tools=True`` hands the model two tools, offered in every call of
    the run (and the request view is then made before every call, as on the
    client): ``recall_context(ref, query?)`` returns what a collapsed line or a
    notice of messages set aside stands for, as the history stores it now
    (at most ``recall_limit`` characters, cut with a marker that says so),
    and ``compact_context(note?)`` applies ``before_strategy`` at the call
    boundary as though its trigger had fired, answering with the tokens
    before and after.  Collapsed lines and notices then carry ``ref="..."``;
    without it nothing the strategies write changes.
    """

    def __init__(
        self,
        before_strategy: CompactionStrategy | None = None,
        after_strategy: CompactionStrategy | None = None,
        *,
        history_source_id: str = "in_memory",
        tokenizer: Tokenizer | None = None,
        source_id: str = "compaction",
        agent_tools: bool = False,
        recall_limit: int = RECALL_LIMIT,
    ) -> None:
        self.before_strategy = check_strategy(before_strategy, "before_strategy")
        self.after_strategy = check_strategy(after_strategy, "after_strategy")
        if self.before_strategy is None and self.after_strategy is None:
            raise ConfigurationError("CompactionProvider needs before_strategy, after_strategy or both")
        if not isinstance(history_source_id, str) or not history_source_id:
            raise ConfigurationError(f"history_source_id must be a non-empty string, got {history_source_id!r}")
        if not isinstance(source_id, str) or not source_id:
            raise ConfigurationError(f"source_id must be a non-empty string, got {source_id!r}")
        self.history_source_id = history_source_id
        self.source_id = source_id
        self._before_tokenizer = resolve_tokenizer(self.before_strategy, tokenizer) if self.before_strategy else None
        self._after_tokenizer = resolve_tokenizer(self.after_strategy, tokenizer) if self.after_strategy else None
        self._loose_view: RequestView | None = None  # for calls made outside any agent run
        self._state_key = f"compaction:{source_id}"
        if not isinstance(agent_tools, bool):
            raise ConfigurationError(f"agent_tools must be True or False, got {agent_tools!r}")
        if agent_tools and self.before_strategy is None:
            raise ConfigurationError(
                "agent_tools=True needs a before_strategy: the tools recall what the request view set aside "
                "and compact that view"
            )
        if isinstance(recall_limit, bool) or not isinstance(recall_limit, int) or recall_limit < 200:
            raise ConfigurationError(f"recall_limit must be an int of at least 200 characters, got {recall_limit!r}")
        self.agent_tools = agent_tools
        self.recall_limit = recall_limit
        self._refs_key = f"compaction:{source_id}:refs"
        self._loose_refs: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
        self._tools: tuple[FunctionTool, ...] = (
            (
                tool(self.recall_context, name=RECALL_TOOL, description=RECALL_DESCRIPTION),
                tool(self.compact_context, name=COMPACT_TOOL, description=COMPACT_DESCRIPTION),
            )
            if agent_tools
            else ()
        )

    def __repr__(self) -> str:
        return (
            f"CompactionProvider(before_strategy={self.before_strategy!r}, after_strategy={self.after_strategy!r}, "
            f"history_source_id={self.history_source_id!r})"
        )

    def bind(self, agent: AgentView) -> None:
        if self.after_strategy is not None and self.history_source_id not in agent.history_providers:
            known = ", ".join(repr(k) for k in agent.history_providers)
            raise ConfigurationError(
                f"CompactionProvider compacts history {self.history_source_id!r} after each run, but agent "
                f"{agent.name!r} has no history provider with that source_id (it has {known}); "
                "pass history_source_id=history.source_id"
            )

    # The request view ------------------------------------------------------------------------

    async def prepare_request(self, messages: Sequence[Message], context: RunContext | None) -> Sequence[Message]:
        if self.before_strategy is None:
            return messages
        head = 0
        while head < len(messages) and messages[head].additional_properties.get(INSTRUCTIONS_PROPERTY) is True:
            head += 1
        base = head  # where the conversation starts, after the instructions and the providers' messages
        if context is not None:
            added = context.context_messages
            if len(added) <= len(messages) - head and all(
                a is b for a, b in zip(added, messages[head : head + len(added)])
            ):
                base = head + len(added)
        view = self._view(messages, head, base, context)
        if context is not None and context.session.cache(self).pop("force", False):
            # The model asked for it (compact_context) and its request is the next one: this one.
            await self.before_strategy.compact(view.index, force=True)
        await traced_index_compaction(self.before_strategy, view.index)
        if self.agent_tools:
            projection = annotated_projection(view, messages, base, self._references(context))
        else:
            projection = view.index.projection()
        view.freeze_dropped_prefix(self._before_tokenizer, _FREEZE_AT)
        return [*messages[:head], *projection]

    # The model's own controls (agent_tools=True) ------------------------------------------------

    def model_tools(self) -> tuple[FunctionTool, ...]:
        return self._tools

    def _references(self, context: RunContext | None) -> References:
        if context is None:
            return References(*self._loose_refs)
        state = context.session.state.setdefault(self._refs_key, {})
        return References(state, context.session.cache(self))

    async def recall_context(self, ref: str, query: str | None = None) -> str:
        """What ``ref`` stands for, as the stored history holds it now (see the class docstring);
        with ``query``, only the messages under it that best match the query's words."""
        context = current_run.get()
        if context is None:
            return "Error: recall_context answers inside an agent run only; nothing was recalled."
        return recall_text(ref, context.conversation, self._references(context), self.recall_limit, query)

    async def compact_context(self, note: str | None = None) -> str:
        """Apply ``before_strategy`` now, at the boundary before the run's next call, as though its
        trigger had fired; the request of the call that asked is already sent and stays as it was."""
        context = current_run.get()
        assert self.before_strategy is not None
        view: RequestView | None = context.session.cache(self).get("view") if context is not None else None
        if context is None or view is None:
            return "Error: compact_context answers inside an agent run, after its first call; nothing was compacted."
        # Forced again when the next request is made (harmless: what is done stays done), so the
        # compaction holds even where this view cannot be brought up to the run's messages here.
        context.session.cache(self)["force"] = True
        before = view.index.included_tokens
        conversation = [*view.context, *context.conversation]
        if not view.follows(conversation, len(view.context)):
            # Another provider shapes this provider's input (a facts block, say): the figures are
            # for the request view as the last call sent it.
            await self.before_strategy.compact(view.index, force=True)
            return compacted_text(self.before_strategy, before, view.index, note)
        # Bring the view up to what the next call sends (this reply's call included), then force.
        view.index.update([*view.context, *conversation[len(view.context) + view.frozen_count :]])
        before = view.index.included_tokens
        await self.before_strategy.compact(view.index, force=True)
        return compacted_text(self.before_strategy, before, view.index, note)

    def _view(self, messages: Sequence[Message], head: int, base: int, context: RunContext | None) -> RequestView:
        """The session's view, brought up to ``messages``; positions are offsets, so that no
        call copies or compares the whole history."""
        extra = list(messages[head:base])
        cache: dict[str, Any] | None = context.session.cache(self) if context is not None else None
        old: RequestView | None = cache.get("view") if cache is not None else self._loose_view
        if old is not None and old.follows(messages, base):
            old.index.update([*extra, *messages[base + old.frozen_count :]])  # exclusions made earlier stay
            return old
        # The history changed after the frozen prefix (a reduction, new context): index again
        # what follows the prefix.  The part that did not change keeps its exclusions, and the
        # turns excluded from its start are frozen now, since the index is built anew anyway:
        # after a reduction every turn, the index stays the size of what is sent.
        keep = old is not None and old.keeps_frozen(messages, base)
        skip = old.frozen_count if old is not None and keep else 0
        ends = old.frozen_ends if old is not None and keep else None
        carried: list[list[int]] = []  # exclusions of the unchanged part, in conversation positions
        if old is not None and keep:
            indexed = old.indexed_conversation
            unchanged = skip + same_count(indexed, messages[base + skip : base + skip + len(indexed)])
            cut = old.dropped_prefix() if _FREEZE_ON_REBUILD else 0
            cut = cut if skip + cut <= unchanged else 0
            if old.index.total_messages - old.index.included_messages > cut:  # more excluded than is frozen now
                carried = [run for run in old.excluded_runs() if run[1] <= unchanged]
            if cut:
                first = ends[0] if ends else messages[base + skip]
                skip += cut
                ends = (first, messages[base + skip - 1])
        view = RequestView(
            MessageIndex([*extra, *messages[base + skip :]], tokenizer=self._before_tokenizer), extra, skip, ends
        )
        if carried:
            # Conversation runs only, clipped to what is still indexed: the context is new.
            clipped = [[max(start, skip), end] for start, end in carried if end > skip]
            view.apply_runs(clipped, skip + len(messages), offset=skip)
        elif old is None and context is not None:
            record = context.session.state.get(self._state_key)
            if isinstance(record, dict) and self._record_matches(record, messages, base):
                view.apply_runs(record.get("excluded", []), int(record["length"]))
        if cache is not None:
            cache["view"] = view
        else:
            self._loose_view = view
        return view

    @staticmethod
    def _record_matches(record: Mapping[str, Any], messages: Sequence[Message], base: int) -> bool:
        length = record.get("length")
        if not isinstance(length, int) or length <= 0 or length > len(messages) - base:
            return False
        return record.get("last") == fingerprint(messages[base + length - 1])

    # The retained history, reduced with each turn ------------------------------------------------

    async def before_store(self, context: RunContext) -> None:
        """Reduce the retained history as it will be once this turn is stored, and ask for the
        reduction to be written with the turn: one store operation a turn instead of two."""
        if self.after_strategy is None:
            return
        history = context.agent.history_providers[self.history_source_id]
        # Only the history this run was built on has a copy checked against the store this run;
        # another one (a mirror) is read and reduced in after_run, as before.
        copy = kept_history(context.session, history) if history is context.agent.history else None
        if copy is None:
            return
        turn = [*context.input_messages, *context.generated]
        stored = copy.messages
        full = RequestMessages((stored, len(stored)), (turn, len(turn)))
        plan = await self._reducer(context.session).plan(full, copy.version.generation)
        cache = context.session.cache(self)
        cache["reduced"] = True
        if plan is None:
            return
        cache["plan"] = plan
        start, suffix, size = plan.start, plan.messages, len(turn)
        if start <= len(stored) and len(suffix) >= size and all(map(operator.is_, suffix[len(suffix) - size :], turn)):
            # The turn's own messages are stored as they are: the reduction is of what came before.
            context.rewrite_with_turn(history.source_id, start, suffix[: len(suffix) - size])

    async def after_run(self, context: RunContext) -> None:
        await self._reduce_retained(context)
        # The view's record is written once every provider is done, for the history as it then
        # stands (another provider may have reduced it): a session restored from its state (after
        # a failed run, or from JSON) keeps the exclusions this view carries into its next call,
        # and sends what a session that never failed sends.
        context.after_every_provider(lambda: self._save_view(context))

    async def _save_view(self, context: RunContext) -> None:
        session = context.session
        view: RequestView | None = session.cache(self).get("view")
        if view is None or not (view.frozen_count or len(view.index.source_messages) > len(view.context)):
            return
        # Cheap: the view's index holds little more than what is still sent (see RequestView).
        copy = kept_history(session, context.agent.history)
        session.state[self._state_key] = view.record() if copy is None else _carried_record(view, copy.messages)

    async def _reduce_retained(self, context: RunContext) -> list[Message] | None:
        """Reduce the retained history after a run; the history as it now stands if it was rewritten."""
        session = context.session
        cache = session.cache(self)
        if self.after_strategy is None:
            return None
        history = context.agent.history_providers[self.history_source_id]
        reducer = self._reducer(session)
        copy = kept_history(session, history)
        reduced = cache.pop("reduced", False)
        plan: RetainedRewrite | None = cache.pop("plan", None)
        written: HistoryVersion | None = None
        if reduced and copy is not None:
            written = context.rewritten_with_turn(history.source_id)
        else:
            # Not reduced before the store (not the history this run was built on): read it now.
            copy = copy or await session_history(session, history)
            plan = await reducer.plan(copy.messages, copy.version.generation)
        if plan is None:
            reducer.written(None, copy.version.generation, copy.messages)
            return None
        if written is None:  # not written with the turn: write it now
            try:
                written = await history.rewrite(session.session_id, plan.start, plan.messages, copy.version)
            except BaseException:
                reducer.reset()  # the index holds a reduction the store may not have
                raise
            if written is None:  # the store changed under this run: read it again next time
                reducer.reset()
                session.cache(history).pop("history", None)
                return None
            context._keep_history_from(plan.start)
            copy.rewritten(plan.start, plan.messages, written)
        reducer.written(plan, written.generation, copy.messages)
        return copy.messages

    def _reducer(self, session: Session) -> HistoryReducer:
        """The session's retained-history reducer (kept in its cache: a failed run drops it)."""
        assert self.after_strategy is not None
        assert self._after_tokenizer is not None
        cache = session.cache(self)
        reducer: HistoryReducer | None = cache.get("after")
        if reducer is None:
            reducer = cache["after"] = HistoryReducer(self.after_strategy, self._after_tokenizer)
        return reducer


def _carried_record(view: RequestView, history: Sequence[Message]) -> dict[str, Any]:
    """The view's record as its next call will see it, once the retained history was rewritten:
    the exclusions inside the part of the conversation that did not change, as ``_view`` carries
    them over, or nothing when the frozen prefix itself was rewritten."""
    if not view.keeps_frozen(history, 0):
        return {}
    skip = view.frozen_count
    indexed = view.indexed_conversation
    unchanged = skip + same_count(indexed, history[skip : skip + len(indexed)])
    if not unchanged:
        return {}
    runs = [run for run in view.excluded_runs() if run[1] <= unchanged]
    return {"length": unchanged, "last": fingerprint(history[unchanged - 1]), "excluded": runs}
