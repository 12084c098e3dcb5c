"""Context policies: the ways of deciding what each model call sends, as pluggable agent configurations.

Every built-in policy is the same :class:`~contextledger.agents.Agent` (same
instructions, same tools, same tool loop) with different providers around it,
so the figures differ only because the policy differs.  A policy is anything
that follows :class:`ContextPolicy`; register a factory with
:func:`register_policy` and the lab and its command line can run it by name.

A policy sends everything through ``setup.client`` (and extra calls through
``setup.extra_client(kind)``) so the lab can record exactly what reached the
model; it never needs to report its own figures.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from contextledger.agents import (
    Agent,
    CompactionProvider,
    ContextProvider,
    FactsProvider,
    ReducedHistoryProvider,
    RunContext,
    Session,
    use_context_providers,
)
from contextledger.clients import ChatClient, OfflineCompactor
from contextledger.compaction import (
    MessageIndex,
    PipelineStrategy,
    ProviderCompactionStrategy,
    SlidingWindowStrategy,
    ToolResultCompactionStrategy,
    always,
    turns_exceed,
)
from contextledger.exceptions import ConfigurationError, LabError, SummaryGuardError
from contextledger.facts import Fact, FactStore, ModelWriter, RuleWriter
from contextledger.history import HistoryProvider, InMemoryHistoryProvider
from contextledger.lab._calls import RecordingClient, ToolBox
from contextledger.lab._timeline import HostCommand, Timeline, Turn
from contextledger.messages import Message

__all__ = [
    "SESSION_ID",
    "SUMMARY_LABEL",
    "SUMMARY_LIMIT",
    "AgentPolicy",
    "ContextPolicy",
    "FactsView",
    "LabProvider",
    "PolicySetup",
    "PolicySpec",
    "SummaryView",
    "get_policy",
    "policy_names",
    "register_policy",
    "sliding_window",
    "unregister_policy",
]

SUMMARY_LIMIT = 700
"""The longest generated summary the lab accepts, in characters; a longer or empty one stops the comparison."""

WINDOW_TURNS = 3
SUMMARY_PROMPT = (
    "You summarise a support conversation for an assistant that will continue it. Keep every key=value fact "
    "with its latest value, and every rule or prohibition, word for word. Write plain text of at most "
    f"{SUMMARY_LIMIT} characters."
)
SUMMARY_LABEL = "[Summary, generated and unverified]"
SESSION_ID = "lab"


@dataclass(frozen=True)
class PolicySetup:
    """What a policy factory receives for one run of one timeline.

    ``client`` is the lab's model behind a recorder; ``extra_client(kind)``
    returns the same model behind a recorder that files the calls as extra
    calls of that kind (``writer``, ``summariser``).  ``writer`` chooses how
    the bounded-facts policy extracts: ``model`` (a structured-output call to
    the model, counted as an extra call) or ``rules`` (parsing, no call).
    """

    timeline: Timeline
    client: RecordingClient
    extra_client: Callable[[str], ChatClient]
    tools: ToolBox
    writer: Literal["model", "rules"] = "model"
    summary_every: int = 4


@runtime_checkable
class ContextPolicy(Protocol):
    """One policy's state over one timeline.

    ``run_turn`` answers a user turn; ``host_command`` applies a ``forget``
    (a policy with no memory of facts may ignore it: the probes then show
    what survived); ``ask`` answers a question without keeping any trace of
    it, for the answer probes; ``take_notes`` returns and clears what the
    policy wants shown beside the turn (a refused extraction, say);
    ``kept`` is what the policy retains between turns (its stored history),
    shown beside what it sends.  ``wording`` lists the fixed labels the
    policy writes itself, which the probes never count as a value.
    """

    wording: tuple[str, ...]

    async def run_turn(self, turn: Turn) -> str: ...

    async def kept(self) -> list[Message]: ...

    async def host_command(self, command: HostCommand) -> None: ...

    async def ask(self, question: str) -> str: ...

    def take_notes(self) -> list[str]: ...


@dataclass(frozen=True)
class PolicySpec:
    """A registered policy: its name, what it does in one sentence, and how to build it."""

    name: str
    description: str
    factory: Callable[[PolicySetup], ContextPolicy]


_REGISTRY: dict[str, PolicySpec] = {}
_POLICY_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")


def register_policy(
    name: str, factory: Callable[[PolicySetup], ContextPolicy], *, description: str, replace: bool = False
) -> PolicySpec:
    """Make a policy available to the lab under ``name`` (lower case, digits and '-')."""
    if not isinstance(name, str) or not _POLICY_NAME.fullmatch(name):
        raise ConfigurationError(f"policy name must be lower-case letters, digits and '-', got {name!r}")
    if not callable(factory):
        raise ConfigurationError(f"policy {name!r}: factory must be callable with a PolicySetup, got {factory!r}")
    if not isinstance(description, str) or not description.strip():
        raise ConfigurationError(f"policy {name!r}: give a one-sentence description of what it sends")
    if name in _REGISTRY and not replace:
        raise ConfigurationError(f"a policy named {name!r} is already registered; pass replace=True to replace it")
    spec = PolicySpec(name, description.strip(), factory)
    _REGISTRY[name] = spec
    return spec


def unregister_policy(name: str) -> None:
    """Remove a registered policy (built-in ones included); unknown names raise :class:`LabError`."""
    get_policy(name)
    del _REGISTRY[name]


def policy_names() -> tuple[str, ...]:
    """Registered policy names, in registration order (the order reports use)."""
    return tuple(_REGISTRY)


def get_policy(name: str) -> PolicySpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise LabError(f"unknown policy {name!r}; choose from {', '.join(_REGISTRY)}") from None


# Providers the built-in policies put around the agent ------------------------------------------


class LabProvider(ContextProvider):
    """A provider that can be frozen: while the lab asks a probe question it must change nothing."""

    frozen = False


class LastTurnsView(LabProvider):
    """Sends only the last ``turns`` user turns (the current one included) of the conversation."""

    source_id = "last_turns"

    def __init__(self, turns: int) -> None:
        self.turns = turns

    async def prepare_request(self, messages: Sequence[Message], context: RunContext | None) -> Sequence[Message]:
        if context is None:
            return messages
        head = len(context.context_messages)
        starts = [i for i in range(head, len(messages)) if messages[i].role == "user"]
        if len(starts) <= self.turns:
            return messages
        return [*messages[:head], *messages[starts[-self.turns] :]]


class SummaryView(LabProvider):
    """Replaces older turns by a generated summary, refreshed every ``every`` turns.

    The summary is the summariser's text, labelled unverified; nothing checks
    it against the conversation.  An empty summary or one longer than
    :data:`SUMMARY_LIMIT` characters raises :class:`SummaryGuardError`: the
    comparison stops rather than send a summary the lab would have to invent.
    The stored history stays complete; only the request is shortened.
    """

    source_id = "summary"

    def __init__(self, summariser: ChatClient, every: int, where: str) -> None:
        self.summariser = summariser
        self.every = every
        self.where = where
        self.summary: str | None = None
        self.covered = 0  # stored messages the summary stands for
        self._pending: tuple[str, int] | None = None

    async def before_run(self, context: RunContext) -> None:
        self._pending = None
        if self.frozen:
            return
        history = context.messages_from("history")
        uncovered = history[self.covered :]
        if sum(1 for message in uncovered if message.role == "user") < self.every:
            return
        turn = sum(1 for message in history if message.role == "user") + 1
        self._pending = (await self._summarise(uncovered, turn), len(history))

    async def _summarise(self, messages: Sequence[Message], turn: int) -> str:
        lines = [f"Summary so far: {self.summary}"] if self.summary else []
        for message in messages:
            if message.text:
                lines.append(f"{message.role}: {message.text}")
            for call in message.function_calls:
                lines.append(f"{message.role} called {call.name}({call.arguments})")
        request = [Message.system(SUMMARY_PROMPT), Message.user("\n".join(lines))]
        response = await self.summariser.get_response(request)
        summary = response.text.strip()
        if not summary:
            raise SummaryGuardError(
                f"{self.where}, turn {turn}: the summariser returned an empty summary; the comparison stopped "
                "(no fallback text is ever sent in its place). Check the summariser model"
            )
        if len(summary) > SUMMARY_LIMIT:
            raise SummaryGuardError(
                f"{self.where}, turn {turn}: the summariser returned a summary of {len(summary)} characters, more "
                f"than the {SUMMARY_LIMIT} allowed; the comparison stopped (nothing is cut or replaced). "
                "Use a summariser that respects the limit"
            )
        return summary

    async def prepare_request(self, messages: Sequence[Message], context: RunContext | None) -> Sequence[Message]:
        summary, covered = self._pending if self._pending is not None else (self.summary, self.covered)
        if context is None or summary is None:
            return messages
        head = len(context.context_messages)
        return [*messages[:head], Message.assistant(f"{SUMMARY_LABEL} {summary}"), *messages[head + covered :]]

    async def after_run(self, context: RunContext) -> None:
        if self._pending is not None and not self.frozen:
            self.summary, self.covered = self._pending
        self._pending = None


class CurrentMessageOnly(LabProvider):
    """Sends the run's own input and nothing of the history (context messages, if any, are kept)."""

    source_id = "current_message_only"

    async def prepare_request(self, messages: Sequence[Message], context: RunContext | None) -> Sequence[Message]:
        if context is None:
            return messages
        return [*context.context_messages, *context.input_messages]


class FactsView(FactsProvider):
    """The facts provider, made freezable: a probe question sees the block but begins no turn and extracts nothing.

    Refused extractions are copied to the policy's notes, so they show beside the turn.
    """

    frozen = False

    def __init__(self, setup: PolicySetup, notes: list[str]) -> None:
        writer = ModelWriter(setup.extra_client("writer")) if setup.writer == "model" else RuleWriter()
        super().__init__(FactStore(), writer, placement="start")  # the instructions: what the policies measure
        self.notes = notes

    async def before_run(self, context: RunContext) -> None:
        if self.frozen:
            context.add_instructions(self.store.to_prompt_block())
            return
        await super().before_run(context)

    async def after_run(self, context: RunContext) -> None:
        if self.frozen:
            return
        self.last_turn = None
        await super().after_run(context)
        rejection = self.last_turn.rejection if self.last_turn is not None else None
        if rejection is not None:
            problems = getattr(rejection, "problems", ()) or (str(rejection),)
            self.notes.append("extraction refused, facts unchanged: " + "; ".join(problems))

    def forget(self, key: str | None) -> list[Fact]:
        """Forget one key or everything; return the facts removed."""
        forgotten = self.store.forget() if key is None else self.store.forget(key)
        return list(forgotten)


# Policies -------------------------------------------------------------------------------------------


@dataclass
class AgentPolicy:
    """A policy that is an agent configuration; subclasses say which providers surround the agent.

    ``stored`` is the in-memory store at the bottom of the history, restored
    exactly after a probe question so that asking leaves no trace.
    """

    setup: PolicySetup
    stored: InMemoryHistoryProvider = field(default_factory=InMemoryHistoryProvider)
    notes: list[str] = field(default_factory=list)
    wording: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.providers: list[LabProvider | FactsView] = []
        self.agent = self.build()
        self.session = Session(SESSION_ID)

    def build(self) -> Agent:
        return self.agent_with()

    def agent_with(
        self,
        *,
        client: ChatClient | None = None,
        history: HistoryProvider | None = None,
        providers: Sequence[ContextProvider] = (),
    ) -> Agent:
        # The lab's own providers are frozen while a probe is asked; any other keeps its state in
        # the session, which a probe question runs on a copy of.
        self.providers.extend(p for p in providers if isinstance(p, (LabProvider, FactsView)))
        return Agent(
            client if client is not None else self.setup.client,
            name="assistant",
            instructions=self.setup.timeline.instructions,
            tools=self.setup.tools.functions,
            history=history if history is not None else self.stored,
            context_providers=list(providers),
        )

    async def run_turn(self, turn: Turn) -> str:
        response = await self.agent.run(turn.user, session=self.session)
        return response.text

    async def host_command(self, command: HostCommand) -> None:
        """Policies without a facts memory have nothing to forget; the probes show what stays."""

    async def kept(self) -> list[Message]:
        """The stored history (after any reduction): what the next turn starts from."""
        return await self.stored.load(SESSION_ID)

    async def ask(self, question: str) -> str:
        kept = await self.stored.load(SESSION_ID)
        for provider in self.providers:
            provider.frozen = True
        try:
            response = await self.agent.run(question, session=Session.from_json(self.session.to_json()))
        finally:
            for provider in self.providers:
                provider.frozen = False
            await self.stored.replace(SESSION_ID, kept)
        return response.text

    def take_notes(self) -> list[str]:
        taken, self.notes[:] = list(self.notes), []
        return taken


def sliding_window() -> SlidingWindowStrategy:
    """The window the request-view, reduced-history and combined policies share."""
    return SlidingWindowStrategy(turns_exceed(WINDOW_TURNS), minimum_preserved_turns=WINDOW_TURNS)


RECALL_CHARS = 4_000
"""The most a recall returns in the collapse-and-recall policy: what it brings back is sent again
with every call until it is collapsed in turn."""


def collapse_then_window() -> PipelineStrategy:
    """What the collapse-and-recall policy's request view does: older tool results collapsed to one
    line each, then the shared sliding window."""
    # The floor is the two newest groups, not the newest tool group: a recall's result is read in
    # its own turn and collapsed in the next, rather than sent again until another tool is called.
    collapse = ToolResultCompactionStrategy(always(), minimum_preserved=2, stable_step=1)
    return PipelineStrategy(collapse, sliding_window())


class FullHistoryPolicy(AgentPolicy):
    pass


def register_collapse_recall() -> None:
    """Register the collapse-and-recall policy; the package calls it after the combined policy is
    registered, so the earlier policies keep their place in reports."""
    register_policy(
        "collapse-recall",
        CollapseRecallPolicy,
        description=(
            "the request view collapses older tool results and sets aside turns beyond the same sliding window, "
            "each with a reference the model may recall (recall_context); recalls are model calls and counted"
        ),
    )


class CollapseRecallPolicy(AgentPolicy):
    """The request view of :func:`collapse_then_window`, with the model's own tools
    (``agent_tools=True``): every collapsed line and notice of turns set aside carries a reference,
    and the model calls ``recall_context`` when it needs what one stands for.  Each recall is one
    more model call of the turn (or of the probe question), so its tokens are in the figures."""

    def build(self) -> Agent:
        compaction = CompactionProvider(collapse_then_window(), agent_tools=True, recall_limit=RECALL_CHARS)
        return self.agent_with(providers=[compaction])

    async def run_turn(self, turn: Turn) -> str:
        response = await self.agent.run(turn.user, session=self.session)
        recalls = sum(1 for m in response.messages for c in m.function_calls if c.name == "recall_context")
        if recalls:
            self.notes.append(f"the model recalled {recalls} set-aside group(s): one more model call each, counted")
        return response.text


class LastTurnsPolicy(AgentPolicy):
    def build(self) -> Agent:
        return self.agent_with(providers=[LastTurnsView(WINDOW_TURNS)])


class SummaryPolicy(AgentPolicy):
    def build(self) -> Agent:
        self.wording = (SUMMARY_LABEL,)
        where = f"timeline {self.setup.timeline.name!r}"
        view = SummaryView(self.setup.extra_client("summariser"), self.setup.summary_every, where)
        return self.agent_with(providers=[view])


class BoundedFactsPolicy(AgentPolicy):
    def build(self) -> Agent:
        self.facts = FactsView(self.setup, self.notes)
        return self.agent_with(providers=[self.facts, CurrentMessageOnly()])

    async def host_command(self, command: HostCommand) -> None:
        self.facts.forget(command.key)


class RequestViewPolicy(AgentPolicy):
    def build(self) -> Agent:
        compaction = CompactionProvider(before_strategy=sliding_window())
        return self.agent_with(client=use_context_providers(self.setup.client, compaction))


class ReducedHistoryPolicy(AgentPolicy):
    def build(self) -> Agent:
        return self.agent_with(history=ReducedHistoryProvider(self.stored, sliding_window()))


def _window_turns_left(index: MessageIndex) -> bool:
    """The provider-compaction policy's target: no more turns than the window keeps."""
    return index.included_turns <= WINDOW_TURNS


class ProviderCompactionPolicy(AgentPolicy):
    """The provider compacts the stored history, as a provider's own compaction does: once it holds
    more than ``WINDOW_TURNS + summary_every - 1`` turns, the oldest go into one compaction item
    (the earlier item with them) until ``WINDOW_TURNS`` are left, and the item replaces them in
    the store.  Offline the offline model plays the provider's compactor (an extra call of kind
    ``compactor``, so its cost shows); the model then reads the item's summary in their place."""

    def build(self) -> Agent:
        compactor = OfflineCompactor(self.setup.extra_client("compactor"), opening_stays=False)
        every = WINDOW_TURNS + self.setup.summary_every - 1
        strategy = ProviderCompactionStrategy(compactor, turns_exceed(every), target=_window_turns_left)
        return self.agent_with(history=ReducedHistoryProvider(self.stored, strategy))


register_policy("full-history", FullHistoryPolicy, description="every earlier message is sent again on every turn")
register_policy(
    "last-3-turns",
    LastTurnsPolicy,
    description="only the current turn and the two before it are sent; older turns are left out",
)
register_policy(
    "summary",
    SummaryPolicy,
    description=(
        f"older turns are replaced by a generated, unverified summary (refreshed every few turns, at most "
        f"{SUMMARY_LIMIT} characters)"
    ),
)
register_policy(
    "bounded-facts",
    BoundedFactsPolicy,
    description="only the controlled facts block (at most 5 facts, with evidence) and the current message are sent",
)
register_policy(
    "request-view",
    RequestViewPolicy,
    description=(
        "a sliding window (turns_exceed(3), 3 preserved turns) compacts each request before every model call; "
        "the stored history stays complete"
    ),
)
register_policy(
    "reduced-history",
    ReducedHistoryPolicy,
    description="the same sliding window reduces the stored history after every append; what it drops is gone",
)
register_policy(
    "provider-compaction",
    ProviderCompactionPolicy,
    description=(
        "the provider's own compaction (played offline by the model) replaces older turns in the stored history "
        "with its compaction item once more than a few turns are kept, leaving the last 3"
    ),
)
