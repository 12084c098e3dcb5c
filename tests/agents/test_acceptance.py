"""The agent runtime's promises across backends and failures.

* A 50-turn conversation with a sliding window before each call and tool-result collapse after
  it sends identical requests whichever store keeps the history (memory, SQLite, Redis).
* A request view keeps the full, serialisable source history; a reduced retained history stores
  only the reduced list.
* A model that times out, answers 500 or answers garbage raises a specific error and leaves the
  session and the history exactly as they were before the turn.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from contextledger import to_openai, validate
from contextledger.agents import Agent, CompactionProvider, ReducedHistoryProvider, Session
from contextledger.clients import OfflineModel
from contextledger.clients.openai import OpenAIChatClient
from contextledger.compaction import SlidingWindowStrategy, ToolResultCompactionStrategy, turns_exceed
from contextledger.exceptions import ModelResponseError, ModelTimeoutError
from contextledger.history import (
    HistoryProvider,
    InMemoryHistoryProvider,
    RedisHistoryProvider,
    SQLiteHistoryProvider,
)
from contextledger.messages import Message
from tests.history.support import RedisServer
from tests.optional_imports import try_import

with try_import("openai") as openai_extra:
    import openai  # noqa: F401  (OpenAIChatClient's SDK)


def lookup_stock(item: str) -> str:
    """How many of an item are in stock, with the warehouse's long report."""
    return f"{item}: {len(item) * 7} in stock. " + "Warehouse report line. " * 30


def _turn(i: int) -> str:
    if i % 3 == 0:
        return f"Check the stock of item{i}"
    if i % 3 == 1:
        return f"version=v{i}; environment=env{i}"
    return f"What is the version now, after turn {i}?"


async def _fifty_turns(history: HistoryProvider) -> tuple[list[list[dict[str, Any]]], list[Message]]:
    compaction = CompactionProvider(
        before_strategy=SlidingWindowStrategy(turns_exceed(6), minimum_preserved_turns=4),
        after_strategy=ToolResultCompactionStrategy(keep_last_tool_call_groups=1),
        history_source_id=history.source_id,
    )
    agent = Agent(
        OfflineModel(),
        name="stock",
        instructions="Answer from the context.",
        tools=[lookup_stock],
        context_providers=[history, compaction],
    )
    session = Session("fifty-turns")
    views: list[list[dict[str, Any]]] = []
    for i in range(50):
        response = await agent.run(_turn(i), session=session)
        for call in response.model_calls:
            assert validate(list(call.request)) == []
            views.append(to_openai(call.request))
    stored = await history.load(session.session_id)
    await history.close()
    return views, stored


def test_fifty_turns_send_identical_requests_on_every_backend(tmp_path: Path, redis_server: RedisServer) -> None:
    backends: dict[str, Callable[[], HistoryProvider]] = {
        "memory": InMemoryHistoryProvider,
        "sqlite": lambda: SQLiteHistoryProvider(tmp_path / "history.sqlite3"),
        "redis": lambda: RedisHistoryProvider(redis_server.url, namespace="fifty-turns"),
    }
    results = {name: asyncio.run(_fifty_turns(make())) for name, make in backends.items()}
    views, stored = results["memory"]
    assert len(views) == 50 + 17  # one call per turn, a second one after each of the 17 tool calls
    # The window really acted: late requests hold far fewer turns than the stored history.
    assert sum(1 for m in views[-1] if m["role"] == "user") <= 7
    assert sum(1 for m in stored if m.role == "user") == 50
    # after_strategy really acted on the retained history: one raw tool result left.
    assert sum(1 for m in stored if m.role == "tool") == 1
    for name in ("sqlite", "redis"):
        other_views, other_stored = results[name]
        assert other_views == views, f"{name} sent different requests from memory"
        assert other_stored == stored, f"{name} stored a different history from memory"


def test_request_view_keeps_full_history_reduced_history_keeps_only_the_reduced_list() -> None:
    def strategy() -> SlidingWindowStrategy:
        return SlidingWindowStrategy(turns_exceed(3), minimum_preserved_turns=3)

    async def scenario() -> None:
        view_history = InMemoryHistoryProvider()
        view_agent = Agent(
            OfflineModel(),
            name="view",
            context_providers=[view_history, CompactionProvider(strategy(), history_source_id="in_memory")],
        )
        reduced_history = ReducedHistoryProvider(InMemoryHistoryProvider(), strategy())
        reduced_agent = Agent(OfflineModel(), name="reduced", history=reduced_history)
        view_session, reduced_session = Session("view"), Session("reduced")
        turns = [f"customer=C{i}; symptom=S{i}" if i % 2 else f"What is the symptom at turn {i}?" for i in range(20)]
        for text in turns:
            view_reply = await view_agent.run(text, session=view_session)
            reduced_reply = await reduced_agent.run(text, session=reduced_session)
            # Both send a short window to the model: the view compacts the request to 3 turns, the
            # reducer stored 3 turns after the previous run and the new input makes a fourth...
            view_sent = view_reply.model_calls[0].request
            reduced_sent = reduced_reply.model_calls[0].request
            assert sum(1 for m in view_sent if m.role == "user") <= 3
            assert sum(1 for m in reduced_sent if m.role == "user") <= 4
            assert view_sent[-1].text == reduced_sent[-1].text == text

        # ...but the request view kept every turn in the store, serialisable and complete,
        full = await view_history.load("view")
        assert [m.text for m in full if m.role == "user"] == turns
        assert len(full) == 40
        restored = Session.from_json(view_session.to_json())
        assert restored.session_id == "view"
        assert json.loads(json.dumps(to_openai(full))) == to_openai(full)

        # ...while the reduced history holds only the reduced list: the first turns are gone.
        kept = await reduced_history.load("reduced")
        assert [m.text for m in kept if m.role == "user"] == turns[-3:]
        assert len(kept) == 6

    asyncio.run(scenario())


class _Endpoint:
    """An OpenAI-compatible server on 127.0.0.1 whose behaviour each test switches."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.requests = 0
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                json.loads(self.rfile.read(length))
                endpoint.requests += 1
                if endpoint.mode == "slow":
                    time.sleep(1.5)
                if endpoint.mode == "500":
                    self._send(500, b'{"error": {"message": "boom"}}')
                elif endpoint.mode == "garbage":
                    self._send(200, b"{not json at all")
                else:
                    body = {
                        "id": "x",
                        "object": "chat.completion",
                        "created": 0,
                        "model": "m",
                        "choices": [
                            {"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}
                        ],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
                    }
                    self._send(200, json.dumps(body).encode())

            def _send(self, status: int, body: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()


@pytest.fixture
def endpoint() -> Iterator[_Endpoint]:
    server = _Endpoint()
    yield server
    server.server.shutdown()
    server.server.server_close()


@openai_extra.skip
@pytest.mark.parametrize(
    ("mode", "error"),
    [("slow", ModelTimeoutError), ("500", ModelResponseError), ("garbage", ModelResponseError)],
)
def test_a_failed_model_call_leaves_session_and_history_as_before(
    endpoint: _Endpoint, tmp_path: Path, mode: str, error: type[Exception]
) -> None:
    async def scenario() -> None:
        client = OpenAIChatClient("m", base_url=endpoint.url, api_key="k", timeout=0.5, max_retries=1, backoff=0.01)
        history = SQLiteHistoryProvider(tmp_path / "h.sqlite3")
        compaction = CompactionProvider(
            SlidingWindowStrategy(turns_exceed(2), minimum_preserved_turns=2),
            ToolResultCompactionStrategy(keep_last_tool_call_groups=1),
            history_source_id=history.source_id,
        )
        agent = Agent(client, name="a", instructions="Be brief.", context_providers=[history, compaction])
        session = agent.create_session()
        for i in range(4):
            assert (await agent.run(f"turn {i}", session=session)).text == "fine"
        stored_before = await history.load(session.session_id)
        session_before = session.to_json()
        requests_before = endpoint.requests

        endpoint.mode = mode
        with pytest.raises(error):
            await agent.run("the turn that fails", session=session)
        assert endpoint.requests > requests_before  # the endpoint was really called (and retried)
        assert await history.load(session.session_id) == stored_before
        assert session.to_json() == session_before

        # The session goes on as if the failed turn never happened.
        endpoint.mode = "ok"
        reply = await agent.run("turn 4", session=session)
        assert reply.text == "fine"
        stored = await history.load(session.session_id)
        assert [m.text for m in stored if m.role == "user"] == [f"turn {i}" for i in range(5)]
        assert "the turn that fails" not in {m.text for c in reply.model_calls for m in c.request}
        await history.close()

    asyncio.run(scenario())
