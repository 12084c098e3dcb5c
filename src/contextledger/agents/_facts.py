"""Controlled facts around the agent runtime's model calls, in the two styles the seed shows.

They live here, beside :class:`CompactionProvider`, because they plug into :class:`Agent`;
the memory itself (:mod:`contextledger.facts`) knows nothing of agents, and each turn goes
through its :class:`~contextledger.facts.FactsHost`, as every other host's does.

provider
    :class:`FactsProvider` is a context provider: each call carries the facts block as a system
    message just before the newest user message (or, asked, in the run's instructions), never in
    a stored message, so it is never kept in the history; and after a
    *successful* call it extracts from the run's external user messages only.  Injected context,
    loaded history and generated replies are never read, so nothing the library or the model
    wrote can become a fact.
manual
    :func:`run_with_facts` prepends the block to the user's message, runs the agent, then
    extracts from the user's own text.  The stored copy of that message is put back to the
    user's text alone: the block is a snapshot of memory at send time, and keeping snapshots in
    the history would keep a corrected value in view after its correction, the very drift this
    memory exists to stop.

In both styles the turn's ticket is taken *before* the model call, so a ``forget`` that happens
while the model is answering makes the extraction stale and it is refused.  A refused
extraction never fails the run (the reply is real and already stored) and is never silent: it
is kept on the :class:`FactsTurn` the caller gets back, and on the provider's
``last_turn``/``last_rejection``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from contextledger.agents._agent import Agent
from contextledger.agents._context import ContextProvider, RunContext
from contextledger.agents._session import Session
from contextledger.exceptions import ConfigurationError, FactsError
from contextledger.facts import Admission, FactsHost, FactsPlacement, FactsTurn, FactWriter, place_facts_block
from contextledger.facts._store import FactMemory
from contextledger.messages import Message

__all__ = ["MANUAL_BLOCK_PROPERTY", "FactsProvider", "external_user_text", "run_with_facts"]

MANUAL_BLOCK_PROPERTY = "_contextledger_facts_block"
"""Marks (in ``additional_properties``, which no model sees) a message the manual helper sent
with the facts block in front; its stored copy is put back to the user's text."""


def external_user_text(context: RunContext) -> str | None:
    """The run's own user text: the external user messages with text, joined by line breaks
    (a line break separates declarations, so joining never merges two of them), or ``None``."""
    texts = [message.text for message in context.messages_from("external") if message.role == "user"]
    texts = [text for text in texts if text.strip()]
    return "\n".join(texts) if texts else None


class FactsProvider(ContextProvider):
    """Controlled facts as a context provider (the seed's provider style).

    The block (``store.to_prompt_block()``) goes just before the newest user message of each model
    call (``placement="latest_user"``, the default: it changes whenever a fact does, and a provider
    caches a request only up to its first change) or into the instructions (``"start"``);
    ``before_run`` begins the turn from the external user messages; ``after_run`` (called only
    after a successful run) has ``writer`` propose from that text and applies it with the turn's ticket.  A failed model
    call therefore admits nothing.  Each run's outcome is kept on ``last_turn``; the same
    provider may serve several agents and concurrent runs, since tickets are kept per run.
    """

    def __init__(
        self,
        store: FactMemory,
        writer: FactWriter | None = None,
        *,
        source_id: str = "facts",
        placement: FactsPlacement = "latest_user",
    ) -> None:
        if placement not in ("latest_user", "start"):
            raise ConfigurationError(f"placement must be 'latest_user' or 'start', got {placement!r}")
        self._host = FactsHost(store, writer, host="FactsProvider")
        self.placement: FactsPlacement = placement
        if not isinstance(source_id, str) or not source_id:
            raise ConfigurationError(f"source_id must be a non-empty string, got {source_id!r}")
        self.store = store
        self.writer: FactWriter = self._host.writer
        self.source_id = source_id

    def __repr__(self) -> str:
        return f"FactsProvider(store={self.store!r}, writer={self.writer!r}, source_id={self.source_id!r})"

    @property
    def last_turn(self) -> FactsTurn | None:
        """The outcome of the latest run that finished (its admission or refusal and its diagnostics)."""
        return self._host.last_turn

    @last_turn.setter
    def last_turn(self, turn: FactsTurn | None) -> None:
        self._host.last_turn = turn

    @property
    def last_admission(self) -> Admission | None:
        return None if self.last_turn is None else self.last_turn.admission

    @property
    def last_rejection(self) -> FactsError | None:
        return None if self.last_turn is None else self.last_turn.rejection

    async def before_run(self, context: RunContext) -> None:
        if self.placement == "start":
            context.add_instructions(self._host.block())
        self._host.begin_run(context, external_user_text(context))

    async def prepare_request(self, messages: Sequence[Message], context: RunContext | None) -> Sequence[Message]:
        if self.placement == "start":
            return messages
        return place_facts_block(messages, Message.system(self._host.block()))

    async def after_run(self, context: RunContext) -> None:
        await self._host.finish_run(context, context.response)


async def _store_user_text(agent: Agent, session: Session, sent: Message, text: str) -> None:
    """Put the stored copy of ``sent`` back to the user's own text in every history of ``agent``."""
    for history in agent.history_providers.values():
        stored = await history.load(session.session_id)
        rewritten = [
            Message.user(text, message_id=message.message_id, author_name=message.author_name)
            if message.role == "user" and message.message_id == sent.message_id
            else message
            for message in stored
        ]
        if any(new is not old for new, old in zip(rewritten, stored)):
            await history.replace(session.session_id, rewritten)


async def run_with_facts(
    agent: Agent, store: FactMemory, text: str, session: Session, writer: FactWriter | None = None
) -> FactsTurn:
    """One turn in the manual style: the block in front of the message, the run, then extraction.

    The ticket is taken before the run; a failed run raises and admits nothing.  After a
    successful run the history keeps ``text`` alone (see the module docstring) and the writer
    proposes from ``text`` alone, so the block itself is never read as declarations.
    """
    if not isinstance(agent, Agent):
        raise ConfigurationError(f"run_with_facts needs an Agent, got {agent!r}")
    host = FactsHost(store, writer, host="run_with_facts")
    if not isinstance(text, str) or not text.strip():
        raise ConfigurationError(f"run_with_facts needs the user's text, got {text!r}")
    sent = Message.user(
        f"{host.block()}\n\n{text}",
        message_id=f"facts-{uuid.uuid4().hex}",
        additional_properties={MANUAL_BLOCK_PROPERTY: True},
    )
    begun = host.begin(text)
    response = await agent.run(sent, session=session)
    await _store_user_text(agent, session, sent, text)
    turn = await host.finish(begun, response)
    assert turn is not None
    return turn
