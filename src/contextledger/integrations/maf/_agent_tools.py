"""The model's own compaction controls in a MAF agent: a context provider that adds them each run.

MAF lets a context provider add tools and chat middleware to a run (``SessionContext.extend_tools``,
``extend_middleware``), so :class:`AgentToolsContextProvider` does both: the middleware compacts
what every model call of the run sends (collapsed lines and notices of messages set aside carry
``ref="..."``), and ``recall_context(ref, query?)`` and ``compact_context(note?)`` are offered in every call,
reading the conversation as the middleware last saw it.  The compaction is
:class:`contextledger.agents.RecallableCompaction`'s: afresh on each call, forced again where the
model asked, so nothing is kept between calls but the references handed out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import agent_framework as maf

from contextledger.agents import (
    COMPACT_DESCRIPTION,
    COMPACT_TOOL,
    RECALL_DESCRIPTION,
    RECALL_LIMIT,
    RECALL_TOOL,
    RecallableCompaction,
)
from contextledger.compaction import CompactionStrategy
from contextledger.exceptions import ConfigurationError
from contextledger.integrations.maf._messages import from_maf_message, to_maf_message
from contextledger.messages import Message
from contextledger.tokenizers import Tokenizer

__all__ = ["AgentToolsContextProvider"]


class _Conversation:
    """What one run's model calls sent, before compaction: what the run's tools read."""

    def __init__(self) -> None:
        self.messages: list[Message] = []


class _CompactingMiddleware(maf.ChatMiddleware):
    """Replaces each call's messages with what the compaction sends (kept messages are MAF's own objects)."""

    def __init__(self, controls: RecallableCompaction, conversation: _Conversation) -> None:
        self.controls = controls
        self.conversation = conversation

    async def process(self, context: maf.ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
        originals = list(context.messages)
        ours = [from_maf_message(message, position=position) for position, message in enumerate(originals)]
        self.conversation.messages = ours
        back = {id(converted): original for converted, original in zip(ours, originals)}
        sent = await self.controls.request(ours)
        context.messages = [back.get(id(message)) or to_maf_message(message) for message in sent]
        await call_next()


class AgentToolsContextProvider(maf.ContextProvider):
    """Compacts every model call of a MAF agent's run with ``strategy`` and offers the model
    ``recall_context`` and ``compact_context`` (``Agent(..., context_providers=[...])``).

    Use it in place of a ``compaction_strategy`` on the agent or its client: it is the request
    view, and it writes the references the tools read.  MAF's history keeps every message whole.
    """

    def __init__(
        self,
        strategy: CompactionStrategy,
        *,
        tokenizer: Tokenizer | None = None,
        recall_limit: int = RECALL_LIMIT,
        source_id: str = "contextledger_agent_tools",
    ) -> None:
        if not isinstance(strategy, CompactionStrategy):
            raise ConfigurationError(f"strategy must be a contextledger CompactionStrategy, got {strategy!r}")
        super().__init__(source_id)
        self.controls = RecallableCompaction(strategy, tokenizer=tokenizer, recall_limit=recall_limit)

    def __repr__(self) -> str:
        return f"AgentToolsContextProvider({self.controls.strategy!r})"

    async def before_run(self, *, agent: Any, session: Any, context: maf.SessionContext, state: dict[str, Any]) -> None:
        conversation = _Conversation()
        controls = self.controls

        async def recall_context(ref: str, query: str | None = None) -> str:
            return await controls.recall(ref, conversation.messages, query)

        async def compact_context(note: str | None = None) -> str:
            return await controls.compact(conversation.messages, note)

        context.extend_middleware(self.source_id, [_CompactingMiddleware(controls, conversation)])
        context.extend_tools(
            self.source_id,
            [
                maf.FunctionTool(name=RECALL_TOOL, description=RECALL_DESCRIPTION, func=recall_context),
                maf.FunctionTool(name=COMPACT_TOOL, description=COMPACT_DESCRIPTION, func=compact_context),
            ],
        )
