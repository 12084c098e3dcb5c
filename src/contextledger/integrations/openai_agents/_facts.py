"""Controlled facts around OpenAI Agents SDK runs, with a forget that rewrites sessions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents.run_config import CallModelData, ModelInputData

from agents import Agent, RunConfig, Runner, RunResult
from contextledger.exceptions import ConfigurationError
from contextledger.facts import FactWriter, ForgetReport
from contextledger.facts._forget import HistoryTarget, history_target
from contextledger.facts._store import FactMemory
from contextledger.integrations._shared import HostedFacts, converted_history
from contextledger.integrations.openai_agents._sessions import ContextLedgerSession
from contextledger.messages import from_responses, to_responses
from contextledger.messages._responses import item_dict

__all__ = ["AgentsFacts"]


def _input_text(value: str | Sequence[Any]) -> str | None:
    """The run's own user text: the input string, or the text of its user message items."""
    if isinstance(value, str):
        return value if value.strip() else None
    texts = [m.text for m in from_responses([item_dict(item) for item in value]) if m.role == "user"]
    texts = [text for text in texts if text.strip()]
    return "\n".join(texts) if texts else None


class AgentsFacts(HostedFacts):
    """contextledger's controlled facts around OpenAI Agents SDK runs.

    ``await facts.run(agent, "module=Billing", session=session)`` takes the turn's ticket from the
    run's own input, runs ``Runner.run`` with the facts block added to the instructions of every
    model call (through ``call_model_input_filter``, so neither the agent nor the session ever
    holds it), and after a successful run has ``writer`` propose from that input and the store
    admit or refuse the whole batch.  A run that raises admits nothing; a refusal never fails a
    run that succeeded and is kept on ``last_turn``.
    """

    def __init__(self, store: FactMemory, writer: FactWriter | None = None) -> None:
        self._host_facts(store, writer, host="AgentsFacts")

    def __repr__(self) -> str:
        return f"AgentsFacts(store={self.store!r}, writer={self.writer!r})"

    async def input_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """A ``call_model_input_filter``: the model's instructions with the facts block after them."""
        block = self._facts.block()
        instructions = data.model_data.instructions
        joined = f"{instructions}\n\n{block}" if instructions and instructions.strip() else block
        return ModelInputData(input=data.model_data.input, instructions=joined)

    async def run(
        self,
        agent: Agent[Any],
        input: str | list[Any],
        *,
        run_config: RunConfig | None = None,
        **kwargs: Any,
    ) -> RunResult:
        """``Runner.run(agent, input, **kwargs)`` with the facts around it (see the class docstring)."""
        if run_config is not None and run_config.call_model_input_filter is not None:
            raise ConfigurationError(
                "run_config already has a call_model_input_filter; call facts.input_filter from yours instead"
            )
        config = RunConfig() if run_config is None else run_config
        config.call_model_input_filter = self.input_filter
        begun = self._facts.begin(_input_text(input))
        result = await Runner.run(agent, input, run_config=config, **kwargs)
        await self._facts.finish(begun, result)
        return result

    async def forget(self, key: str | None = None, *, sessions: Sequence[Any] = ()) -> ForgetReport:
        """Forget ``key`` (or every fact) in the store and in each session's stored items.

        :func:`contextledger.facts.forget_facts` does the work (the store first, so no extraction
        in flight can bring a fact back; then each history scrubbed).  A
        :class:`ContextLedgerSession` replaces its stored history at once; any other SDK session is
        cleared and refilled.
        """
        targets = [_session_history(session) for session in sessions]
        return await self._forget(key, targets)


def _session_history(session: Any) -> HistoryTarget:
    """An Agents SDK session as a history ``forget`` can rewrite."""
    if isinstance(session, ContextLedgerSession):
        # A contextledger store (maybe shared with an Agent that keeps turn records): all of it.
        return history_target(session.history, session.session_id, session.session_id)

    async def read() -> list[Any]:
        return [item_dict(item) for item in await session.get_items()]

    async def refill(items: list[Any]) -> None:
        await session.clear_session()
        await session.add_items(items)

    return converted_history(str(getattr(session, "session_id", "session")), read, refill, from_responses, to_responses)
