"""What context providers see and change around a run: instructions, messages and where each came from."""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from contextledger.exceptions import ConfigurationError, InvalidMessageError
from contextledger.messages import Message

if TYPE_CHECKING:
    from contextledger.agents._agent import Agent, AgentResponse
    from contextledger.agents._session import Session

__all__ = ["ContextProvider", "MessageSource", "RunContext", "SourceKind"]

SourceKind = Literal["external", "history", "context", "generated"]
_KINDS: tuple[SourceKind, ...] = ("external", "history", "context", "generated")

# Marks the system message an agent builds from its instructions, so a provider registered on
# the client can tell it from history; it lives in additional_properties, which no model sees.
INSTRUCTIONS_PROPERTY = "_contextledger_instructions"

current_run: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar("contextledger_run", default=None)


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


class RunContext:
    """One run as the providers see it.

    Providers add instructions (sent first as one system message and never
    compacted) and messages (sent before the history, and compactable), and
    read where every message came from.  ``response`` is set before the
    providers' ``after_run`` hooks are called.  ``turn_id`` is the run's turn id.
    """

    def __init__(self, agent: Agent, session: Session, input_messages: Sequence[Message], turn_id: str = "") -> None:
        self.agent = agent
        self.session = session
        self.turn_id = turn_id
        self.input_messages: tuple[Message, ...] = tuple(input_messages)
        self.instructions: list[str] = []
        self.response: AgentResponse | None = None
        self._context: list[tuple[Message, MessageSource]] = []
        self._history: list[tuple[Message, MessageSource]] = []
        self._history_messages: list[Message] = []
        self.generated: list[Message] = []
        self._sources: dict[int, MessageSource] | None = None

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
        source = MessageSource("history", source_id)
        self._history.extend(zip(messages, [source] * len(messages)))
        self._history_messages.extend(messages)
        self._sources = None

    @property
    def entries(self) -> list[tuple[Message, MessageSource]]:
        """Every message of the run in request order, with its source."""
        external = MessageSource("external")
        generated = MessageSource("generated")
        return [
            *self._context,
            *self._history,
            *((message, external) for message in self.input_messages),
            *((message, generated) for message in self.generated),
        ]

    def messages_from(self, kind: SourceKind) -> list[Message]:
        if kind not in _KINDS:
            raise ConfigurationError(f"source kind must be one of {', '.join(_KINDS)}, got {kind!r}")
        return [message for message, source in self.entries if source.kind == kind]

    def source_of(self, message: Message) -> MessageSource | None:
        """The source of a message object of this run (by identity), or None if it is not one."""
        # Rebuilt on a miss too: messages generated since the last lookup are not in it yet.
        if self._sources is None or id(message) not in self._sources:
            self._sources = {id(message): source for message, source in self.entries}
        return self._sources.get(id(message))

    @property
    def conversation(self) -> list[Message]:
        """History, input and generated messages: the part of the request that grows turn by turn."""
        return [*self._history_messages, *self.input_messages, *self.generated]

    @property
    def context_messages(self) -> list[Message]:
        return [message for message, _ in self._context]


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

    def bind(self, agent: Agent) -> None:
        """Called once when an agent is built with this provider; raise ConfigurationError if it cannot work there."""

    async def before_run(self, context: RunContext) -> None:
        """Before the first model call of a run."""

    async def prepare_request(self, messages: list[Message], context: RunContext | None) -> list[Message]:
        """What a model call sends, without instructions; return ``messages`` unchanged to leave it alone."""
        return messages

    async def after_run(self, context: RunContext) -> None:
        """After a successful run; the run's messages are already in the history."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(source_id={self.source_id!r})"
