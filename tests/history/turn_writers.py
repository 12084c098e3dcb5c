"""Every host that writes a turn, behind one small interface, for the turn-writer conformance suite.

A writer stores a turn (a user's text and a reply it makes up or gets from its model) under a
turn id in a session, and answers (stored now, the reply text the session holds for that id).
Each is built on a :class:`Counted` history, which counts what the host asks of the store, so a
test can tell one atomic write from two, and a turn that read the whole history from one that
did not.  The writers: the agent runtime, the proxy (its ASGI app in this process, in front of
an upstream on 127.0.0.1 that answers at once), the Agent Framework history adapter, and
:class:`ReducedHistoryProvider`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import pytest

from contextledger.agents import Agent, CompactionProvider, ReducedHistoryProvider, Session
from contextledger.clients import ChatResponse
from contextledger.compaction import CompactionStrategy, SlidingWindowStrategy
from contextledger.history import HistoryProvider
from contextledger.messages import Message

__all__ = ["WRITERS", "Counted", "Writer", "make_writer", "retain_strategy"]

WRITES = ("append", "replace", "append_turn", "rewrite", "rewrite_and_append_turn", "undo_turn", "clear")
KEY = "sk-turn-writers-tenant"
RETAIN_GROUPS = 3
"""The retained window: three groups of plain user/assistant turns cut a turn in two every time,
so each reduction would leave a history starting mid-turn if nothing dropped the remnant."""


def retain_strategy() -> CompactionStrategy:
    return SlidingWindowStrategy(keep_last_groups=RETAIN_GROUPS, stable_step=1)


class Counted:
    """A history that records what is asked of it and otherwise is the store it wraps."""

    def __init__(self, inner: HistoryProvider) -> None:
        self.inner = inner
        self.source_id = inner.source_id
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if not callable(method):
            return method

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return await method(*args, **kwargs)

        return counted

    def writes(self) -> list[str]:
        return [call for call in self.calls if call in WRITES]

    def loads(self) -> int:
        return self.calls.count("load")


class Writer(Protocol):
    name: str
    history: Counted

    def key(self, session_id: str) -> str:
        """The session's id in the store (the proxy's carries the tenant)."""
        ...

    async def turn(self, session_id: str, turn_id: str, text: str) -> tuple[bool, str]:
        """Store a turn; (stored now, the reply stored under ``turn_id``)."""
        ...

    async def close(self) -> None: ...


class _Model:
    """Answers ``answer N: TEXT`` to the Nth call."""

    def __init__(self) -> None:
        self.calls = 0

    async def get_response(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None, **options: Any
    ) -> ChatResponse:
        self.calls += 1
        text = f"answer {self.calls}: {messages[-1].text}"
        return ChatResponse(text, (Message.assistant(text),))


class AgentWriter:
    name = "agent"

    def __init__(self, history: Counted, retain: bool) -> None:
        self.history = history
        self.model = _Model()
        providers: list[Any] = [history]
        if retain:
            providers.append(CompactionProvider(after_strategy=retain_strategy(), history_source_id=history.source_id))
        self.agent = Agent(self.model, context_providers=providers)
        self.sessions: dict[str, Session] = {}

    def key(self, session_id: str) -> str:
        return session_id

    async def turn(self, session_id: str, turn_id: str, text: str) -> tuple[bool, str]:
        session = self.sessions.setdefault(session_id, Session(session_id))
        response = await self.agent.run(text, session=session, turn_id=turn_id)
        return not response.replayed, response.text

    async def close(self) -> None:
        await self.history.inner.close()


class ReducedWriter:
    name = "reduced"

    def __init__(self, history: Counted, retain: bool) -> None:
        self.history = history
        self.model = _Model()
        # Without a retained window: one so wide it never drops anything.
        strategy = retain_strategy() if retain else SlidingWindowStrategy(keep_last_groups=10**6)
        self.store = ReducedHistoryProvider(history, strategy)

    def key(self, session_id: str) -> str:
        return session_id

    async def turn(self, session_id: str, turn_id: str, text: str) -> tuple[bool, str]:
        reply = (await self.model.get_response([Message.user(text)])).messages
        stored = await self.store.append_turn(session_id, turn_id, [Message.user(text)], reply)
        recorded = await self.store.load_turn(session_id, turn_id)
        assert recorded is not None
        return stored, recorded.reply[-1].text

    async def close(self) -> None:
        await self.history.inner.close()


class MafWriter:
    name = "maf"

    def __init__(self, history: Counted, retain: bool) -> None:
        pytest.importorskip(
            "agent_framework", reason="the maf extra is not installed: pip install 'contextledger[maf]'"
        )
        from contextledger.integrations.maf import ContextLedgerHistoryProvider  # noqa: PLC0415

        self.history = history
        self.model = _Model()
        self.adapter = ContextLedgerHistoryProvider(history, reducer=retain_strategy() if retain else None)

    def key(self, session_id: str) -> str:
        return session_id

    async def turn(self, session_id: str, turn_id: str, text: str) -> tuple[bool, str]:
        reply = (await self.model.get_response([Message.user(text)])).messages
        outcome = await self.adapter.save_turn(session_id, turn_id, [Message.user(text)], reply)
        if outcome.stored:
            return True, reply[-1].text
        assert outcome.earlier is not None
        return False, outcome.earlier.reply[-1].text

    async def close(self) -> None:
        await self.history.inner.close()


class ProxyWriter:
    """The proxy's ASGI app, driven in this process; its session store's history is ``history``,
    its upstream a server on 127.0.0.1 in this process's event loop, started with the first turn."""

    name = "proxy"

    def __init__(self, history: Counted, retain: bool, registry: str) -> None:
        pytest.importorskip("starlette", reason="the serve extra is not installed: pip install 'contextledger[serve]'")
        import httpx  # noqa: PLC0415

        from contextledger.serve import ServeConfig, StrategySpec, create_app  # noqa: PLC0415
        from contextledger.serve._kept import KeptSessions  # noqa: PLC0415
        from contextledger.serve._sessions import session_key  # noqa: PLC0415
        from contextledger.serve._tenants import tenant_of  # noqa: PLC0415
        from contextledger.serve._turns import SessionTurns  # noqa: PLC0415

        self.history = history
        self.model = _Model()
        retained = (
            StrategySpec("sliding-window", (f"keep_last_groups={RETAIN_GROUPS}", "stable_step=1"))
            if retain
            else StrategySpec()
        )
        config = ServeConfig(
            upstream="http://upstream.test/v1",
            store=registry,
            retain=retained,
            facts=False,
            namespace=f"turn-writers-{uuid.uuid4().hex[:8]}",
        )
        self.app = create_app(config)
        proxy = self.proxy = self.app.state.proxy
        # The session store's history is the one under test (memory, SQLite or Redis), counted.
        proxy.sessions.history = history
        proxy.kept = KeptSessions(history, proxy.strategy, proxy.tokenizer, proxy.retain)
        proxy.turns = SessionTurns(proxy.sessions, proxy.kept, proxy.metrics)
        proxy.flow.kept, proxy.flow.turns = proxy.kept, proxy.turns  # every endpoint's session turns run here
        self._runner: Any = None
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://proxy.test")
        self.headers = {"authorization": f"Bearer {KEY}"}
        self.tenant = tenant_of(self.headers, trust_tenant_header=False)
        self._session_key = session_key
        self.created: set[str] = set()

    async def _start_upstream(self) -> None:
        from aiohttp import web  # noqa: PLC0415

        application = web.Application()
        application.router.add_post("/v1/chat/completions", self._completion)
        self._runner = web.AppRunner(application, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.proxy.upstream.base_url = f"http://127.0.0.1:{port}/v1"

    async def _completion(self, request: Any) -> Any:
        from aiohttp import web  # noqa: PLC0415

        messages = json.loads(await request.read())["messages"]
        reply = await self.model.get_response([Message.user(str(messages[-1]["content"]))])
        completion = {
            "id": f"chatcmpl-{self.model.calls}",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "fake",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.text}, "finish_reason": "stop"}],
        }
        return web.json_response(completion)

    def key(self, session_id: str) -> str:
        key: str = self._session_key(self.tenant, session_id)
        return key

    async def turn(self, session_id: str, turn_id: str, text: str) -> tuple[bool, str]:
        if self._runner is None:
            await self._start_upstream()
        if session_id not in self.created:
            created = await self.client.post(
                "/v1/contextledger/sessions", json={"id": session_id}, headers=self.headers
            )
            assert created.status_code == 201, created.text
            self.created.add(session_id)
        headers = {**self.headers, "x-contextledger-session": session_id, "idempotency-key": turn_id}
        answer = await self.client.post(
            "/v1/chat/completions",
            json={"model": "fake", "messages": [{"role": "user", "content": text}]},
            headers=headers,
        )
        assert answer.status_code == 200, answer.text
        replayed = answer.headers.get("x-contextledger-replayed") == "true"
        return not replayed, answer.json()["choices"][0]["message"]["content"]

    async def close(self) -> None:
        await self.client.aclose()
        await self.proxy.close()
        if self._runner is not None:
            await self._runner.cleanup()
        await self.history.inner.close()


WRITERS = ("agent", "proxy", "maf", "reduced")


def make_writer(name: str, history: HistoryProvider, *, retain: bool, registry: str) -> Writer:
    """The writer ``name`` on ``history`` (``registry``: the proxy's session store, for its sessions)."""
    counted = Counted(history)
    if name == "agent":
        return AgentWriter(counted, retain)
    if name == "reduced":
        return ReducedWriter(counted, retain)
    if name == "maf":
        return MafWriter(counted, retain)
    return ProxyWriter(counted, retain, registry)
