"""What context providers see and change around a run: instructions, messages and where each came from."""

from __future__ import annotations

import contextvars
import itertools
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, overload

from contextledger._tracing import traced_model_request
from contextledger.agents._response import AgentResponse
from contextledger.agents._session import Session
from contextledger.agents._tools import FunctionTool
from contextledger.clients import ChatClient, ChatResponse
from contextledger.exceptions import ConfigurationError, InvalidMessageError
from contextledger.history import HistoryProvider, HistoryVersion
from contextledger.messages import Message

__all__ = [
    "AgentView",
    "ContextProvider",
    "MessageSource",
    "RequestMessages",
    "RunContext",
    "SourceKind",
    "use_context_providers",
]

SourceKind = Literal["external", "history", "context", "generated"]
_KINDS: tuple[SourceKind, ...] = ("external", "history", "context", "generated")

# Marks the system message an agent builds from its instructions, so a provider registered on
# the client can tell it from history; it lives in additional_properties, which no model sees.
INSTRUCTIONS_PROPERTY = "_contextledger_instructions"

current_run: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar("contextledger_run", default=None)


class AgentView(Protocol):
    """What a provider sees of the agent it serves; :class:`~contextledger.agents.Agent` is one.

    Declared here, under the agent, so that the context machinery never depends on the agent
    module that is built on it.
    """

    @property
    def name(self) -> str: ...

    @property
    def instructions(self) -> str | None: ...

    @property
    def history(self) -> HistoryProvider:
        """The history requests are built from."""
        ...

    @property
    def history_providers(self) -> Mapping[str, HistoryProvider]:
        """Every history of the agent by ``source_id``; each stores every turn."""
        ...

    @property
    def context_providers(self) -> Sequence[object]: ...


@dataclass(frozen=True, slots=True)
class MessageSource:
    """Where a message in a request came from.

    ``external``: the caller's input for this run.  ``history``: loaded from the
    history provider named by ``source_id``.  ``context``: added by the context
    provider named by ``source_id`` (facts extraction must never read these).
    ``generated``: produced during this run (model replies and tool results).
    """

    kind: SourceKind
    source_id: str | None = None


class RequestMessages(Sequence[Message]):
    """What a model call sends, read in place from the lists the messages live in.

    The request of a turn is the providers' messages, the whole history and the input.  Built
    as one list it would copy every stored message on every turn, a cost that grows with the
    history however little a provider then reads; read in place it costs the same on turn
    10,000 as on turn 1, and a provider pays for what it reads (a slice copies only the slice).

    Each part is read up to the length it had when the request was made, so messages stored
    after it do not show.  It stands for one run: a provider that keeps the messages for later
    keeps ``list(messages)``.
    """

    __slots__ = ("_length", "_parts")

    def __init__(self, *parts: tuple[Sequence[Message], int]) -> None:
        # Each part is (messages, how many of them belong to the request).
        self._parts = tuple((messages, count) for messages, count in parts if count)
        self._length = sum(count for _, count in self._parts)

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, position: int) -> Message: ...

    @overload
    def __getitem__(self, position: slice) -> list[Message]: ...

    def __getitem__(self, position: int | slice) -> Message | list[Message]:
        if isinstance(position, slice):
            start, stop, step = position.indices(self._length)
            if step != 1:
                return [self[at] for at in range(start, stop, step)]
            out: list[Message] = []
            for messages, count in self._parts:
                if start < count and stop > 0:
                    out.extend(messages[max(start, 0) : min(stop, count)])
                start -= count
                stop -= count
            return out
        at = position + self._length if position < 0 else position
        if not 0 <= at < self._length:
            raise IndexError(f"request position {position} out of range for {self._length} messages")
        for messages, count in self._parts:
            if at < count:
                return messages[at]
            at -= count
        raise AssertionError("unreachable: the parts add up to the length")

    def __iter__(self) -> Iterator[Message]:
        for messages, count in self._parts:
            yield from (messages if len(messages) == count else itertools.islice(messages, count))

    def __repr__(self) -> str:
        return f"RequestMessages({self._length} messages)"


@dataclass(frozen=True, slots=True)
class StoredRewrite:
    """A rewrite asked to be written with the turn: keep ``start`` messages, then ``messages``."""

    start: int
    messages: tuple[Message, ...]


class RunContext:
    """One run as the providers see it.

    Providers add instructions (sent first as one system message and never
    compacted) and messages (sent before the history, and compactable), and
    read where every message came from.  ``response`` is set before the
    providers' ``after_run`` hooks are called.  ``turn_id`` is the run's turn id.
    """

    def __init__(
        self, agent: AgentView, session: Session, input_messages: Sequence[Message], turn_id: str = ""
    ) -> None:
        self.agent = agent
        self.session = session
        self.turn_id = turn_id
        self.input_messages: tuple[Message, ...] = tuple(input_messages)
        self.instructions: list[str] = []
        self.response: AgentResponse | None = None
        self._context: list[tuple[Message, MessageSource]] = []
        # The history as loaded: the session's own copy (see _history.py), read up to
        # _history_count, because the copy grows by this turn once the turn is stored.
        self._history_messages: Sequence[Message] = []
        self._history_count = 0
        self._history_source = MessageSource("history")
        self.generated: list[Message] = []
        self._sources: dict[int, MessageSource] | None = None
        # Rewrites of a history proposed to be written with the turn (see rewrite_with_turn), and
        # what the store did with each: the history's version after it, or None if not applied.
        self._rewrites: dict[str, StoredRewrite] = {}
        self._rewritten: dict[str, HistoryVersion | None] = {}
        self._last: list[Callable[[], Awaitable[None]]] = []

    def after_every_provider(self, step: Callable[[], Awaitable[None]]) -> None:
        """Run ``step`` once every provider's ``after_run`` is done (a successful run only): for
        what must see the run's final state, such as a history another provider reduced."""
        self._last.append(step)

    def add_instructions(self, text: str) -> None:
        if not isinstance(text, str):
            raise ConfigurationError(f"instructions must be text, got {type(text).__name__}")
        if text.strip():
            self.instructions.append(text)

    def add_messages(self, source_id: str, messages: Iterable[Message]) -> None:
        """Add messages from the provider ``source_id``; they are sent after instructions, before history."""
        items = list(messages)
        for position, message in enumerate(items):
            if not isinstance(message, Message):
                raise InvalidMessageError(
                    f"provider {source_id!r} added {type(message).__name__} at position {position}, not a Message"
                )
        source = MessageSource("context", source_id)
        self._context.extend((message, source) for message in items)
        self._sources = None

    def _add_history(self, source_id: str, messages: list[Message]) -> None:
        """The history requests are built from; the list is kept as it is, not copied."""
        self._history_messages = messages
        self._history_count = len(messages)
        self._history_source = MessageSource("history", source_id)
        self._sources = None

    @property
    def history_messages(self) -> list[Message]:
        """The history this run was built on (a list the caller may keep: a new one on each read)."""
        return list(self._history_messages[: self._history_count])

    def _keep_history_from(self, start: int) -> None:
        """The session's copy of the history is about to be rewritten from ``start`` on (this
        run's turn is being stored with a reduction): keep what this run was built on by holding
        the part that changes, not the whole list."""
        if start < self._history_count:
            history = self._history_messages
            tail = list(history[start : self._history_count])
            self._history_messages = RequestMessages((history, start), (tail, len(tail)))

    @property
    def entries(self) -> list[tuple[Message, MessageSource]]:
        """Every message of the run in request order, with its source."""
        external = MessageSource("external")
        generated = MessageSource("generated")
        history = self._history_source
        return [
            *self._context,
            *((message, history) for message in self.history_messages),
            *((message, external) for message in self.input_messages),
            *((message, generated) for message in self.generated),
        ]

    def messages_from(self, kind: SourceKind) -> list[Message]:
        if kind not in _KINDS:
            raise ConfigurationError(f"source kind must be one of {', '.join(_KINDS)}, got {kind!r}")
        # Straight from the part asked for: reading the input must not copy the whole history.
        if kind == "history":
            return self.history_messages
        if kind == "external":
            return list(self.input_messages)
        if kind == "generated":
            return list(self.generated)
        return self.context_messages

    def source_of(self, message: Message) -> MessageSource | None:
        """The source of a message object of this run (by identity), or None if it is not one."""
        # Rebuilt on a miss too: messages generated since the last lookup are not in it yet.
        if self._sources is None or id(message) not in self._sources:
            self._sources = {id(message): source for message, source in self.entries}
        return self._sources.get(id(message))

    @property
    def conversation(self) -> list[Message]:
        """History, input and generated messages: the part of the request that grows turn by turn."""
        return [*self._history_messages[: self._history_count], *self.input_messages, *self.generated]

    @property
    def context_messages(self) -> list[Message]:
        return [message for message, _ in self._context]

    def rewrite_with_turn(self, source_id: str, start: int, messages: Sequence[Message]) -> None:
        """Ask that history ``source_id`` keep its first ``start`` stored messages and put
        ``messages`` after them in the same atomic step that stores this turn (for a provider's
        ``before_store``).

        The rewrite is made by the turn writer (:func:`~contextledger.history.write_turn`) only
        if the history is still as this run loaded it, and only when the turn goes to this one
        history: in the same atomic step where the history is a
        :class:`~contextledger.history.TurnRewriter`, else right after the turn.
        :meth:`rewritten_with_turn` tells, in ``after_run``, whether it was.  ``start`` counts the
        messages this run loaded.
        """
        if source_id not in self.agent.history_providers:
            raise ConfigurationError(f"rewrite_with_turn: the agent has no history {source_id!r}")
        if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start <= self._history_count:
            raise ConfigurationError(
                f"rewrite_with_turn: start must be an int from 0 to the {self._history_count} messages this run "
                f"loaded, got {start!r}"
            )
        self._rewrites[source_id] = StoredRewrite(start, tuple(messages))

    def rewritten_with_turn(self, source_id: str) -> HistoryVersion | None:
        """The history's version after the turn was stored with the rewrite asked of it, or None
        if no rewrite was made with the turn (none asked, not possible, or the history had moved
        on)."""
        return self._rewritten.get(source_id)

    def _request(self, *, generated: bool = False) -> RequestMessages:
        """The providers' messages, the history and the input, as the first model call sends them
        (before any provider rewrites it), read in place (see :class:`RequestMessages`); with
        ``generated``, what the run produced so far too (a later call's request)."""
        context = self.context_messages
        inputs = self.input_messages
        made = self.generated if generated else []
        return RequestMessages(
            (context, len(context)),
            (self._history_messages, self._history_count),
            (inputs, len(inputs)),
            (made, len(made)),
        )


class ContextProvider:
    """Base class of the components that act around each run.

    Override what you need: ``before_run`` (add instructions or messages),
    ``prepare_request`` (rewrite what one model call sends; it must not touch
    stored history), ``after_run`` (only after a successful run: extract,
    store, compact what is retained).  Keep anything that must survive a
    restart in ``context.session.state``, written in ``after_run``, so a
    failed run leaves the session as it was.
    """

    source_id: str = "context"

    def bind(self, agent: AgentView) -> None:
        """Called once when an agent is built with this provider; raise ConfigurationError if it cannot work there."""

    async def before_run(self, context: RunContext) -> None:
        """Before the first model call of a run."""

    async def prepare_request(self, messages: Sequence[Message], context: RunContext | None) -> Sequence[Message]:
        """What a model call sends, without instructions; return ``messages`` unchanged to leave it alone.

        ``messages`` is a sequence, not a list: in an agent's run it reads the session's
        history in place (:class:`RequestMessages`), so a provider costs what it reads of it.
        Return a new sequence (a list) to change the request; never change ``messages``.
        """
        return messages

    def model_tools(self) -> Sequence[FunctionTool]:
        """Tools this provider offers the model in every call of a run (none by default).

        An agent with such a provider makes its request view before every call of the tool loop
        (the provider's ``prepare_request`` then sees the run's generated messages too), and runs
        these tools when the model calls them, as it runs its own."""
        return ()

    async def before_store(self, context: RunContext) -> None:
        """After the model's last reply, before the turn is stored: the place to ask for a
        rewrite of the stored history to be written with the turn
        (:meth:`RunContext.rewrite_with_turn`).  Store nothing here: the turn may still fail."""

    async def after_run(self, context: RunContext) -> None:
        """After a successful run; the run's messages are already in the history."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(source_id={self.source_id!r})"


class ProvidedClient:
    """A chat client whose providers rewrite every request before it is sent."""

    def __init__(self, client: ChatClient, providers: Sequence[ContextProvider]) -> None:
        self.client = client
        self.providers = tuple(providers)

    def __repr__(self) -> str:
        return f"use_context_providers({self.client!r}, {', '.join(map(repr, self.providers))})"

    @property
    def provider_name(self) -> str | None:
        """The wrapped client's provider, which traces name for this client's calls too."""
        name = getattr(self.client, "provider_name", None)
        return name if isinstance(name, str) else None

    @property
    def model(self) -> str | None:
        model = getattr(self.client, "model", None)
        return model if isinstance(model, str) else None

    async def get_response(self, messages: Sequence[Message], **kwargs: Any) -> ChatResponse:
        # The call's span opens before the providers shape the request: their compaction is its child.
        with traced_model_request(self) as call:
            request = messages
            context = current_run.get()
            for provider in self.providers:
                request = await provider.prepare_request(request, context)
            return await call.answer(self.client.get_response(request, **kwargs))


def use_context_providers(client: ChatClient, *providers: ContextProvider) -> ChatClient:
    """Wrap ``client`` so each provider's ``prepare_request`` runs before every call, tool loop included.

    This is the registration on the chat client: a compaction provider wrapped
    this way compacts before each model call of a run, not only the first.
    """
    if not callable(getattr(client, "get_response", None)):
        raise ConfigurationError(f"use_context_providers needs a chat client, got {client!r}")
    if not providers:
        raise ConfigurationError("use_context_providers needs at least one provider")
    for provider in providers:
        if not isinstance(provider, ContextProvider):
            raise ConfigurationError(f"{provider!r} is not a ContextProvider")
    return ProvidedClient(client, providers)
