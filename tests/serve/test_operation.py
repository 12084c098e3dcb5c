"""What a team meets in its first week with the proxy: every answer says what compaction did, on
every endpoint and in both modes, and an Anthropic client manages its sessions with the key header
its SDK sends."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tests.optional_imports import try_import
from tests.serve.conftest import FakeUpstream
from tests.serve.in_process import proxy_app

from contextledger.serve import StrategySpec

with try_import("serve") as serve_extra:
    import httpx


pytestmark = serve_extra.skip


KEY = "sk-operation-0123456789"
HEADER = "x-contextledger-compaction"


def history(api: str, turns: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"question {turn}"})
        messages.append({"role": "assistant", "content": f"answer {turn}"})
    messages.append({"role": "user", "content": "and now?"})
    if api == "responses":
        return {"model": "fake", "input": messages}
    return {"model": "fake", "messages": messages, **({"max_tokens": 32} if api == "messages" else {})}


PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}


@pytest.mark.parametrize("api", sorted(PATHS))
@pytest.mark.parametrize("stream", [False, True])
def test_every_answer_says_what_compaction_did(
    api: str, stream: bool, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    window = StrategySpec("sliding-window", ("trigger=turns_exceed(2)",))
    app = proxy_app(fake_upstream, tmp_path, window)
    headers = {"authorization": f"Bearer {KEY}", "x-api-key": KEY}

    async def run() -> list[str | None]:
        said: list[str | None] = []
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
            for turns in (1, 6):  # within the window, then past it
                answer = await client.post(PATHS[api], json={**history(api, turns), "stream": stream}, headers=headers)
                assert answer.status_code == 200, answer.text
                said.append(answer.headers.get(HEADER))
            created = await client.post("/v1/contextledger/sessions", json={"id": "told"}, headers=headers)
            assert created.status_code == 201, created.text
            session = {**headers, "x-contextledger-session": "told"}
            for turn in range(5):
                body = history(api, 0)
                body["input" if api == "responses" else "messages"][-1]["content"] = f"turn {turn}"
                answer = await client.post(PATHS[api], json={**body, "stream": stream}, headers=session)
                assert answer.status_code == 200, answer.text
                said.append(answer.headers.get(HEADER))
        await app.state.proxy.close()
        return said

    said = asyncio.run(run())
    assert said[:2] == ["unchanged", "compacted"]
    assert said[2:4] == ["unchanged", "unchanged"], "a session within its window sends all it holds"
    assert said[-1] == "compacted", "a session past its window sends less than it holds"


def test_an_anthropic_client_manages_its_sessions_with_x_api_key(fake_upstream: FakeUpstream, tmp_path: Path) -> None:
    """The session routes take the key the Anthropic SDK sends, naming the same tenant as its
    /v1/messages requests; another key sees nothing of it."""
    app = proxy_app(fake_upstream, tmp_path)
    mine, other = {"x-api-key": KEY}, {"x-api-key": "sk-operation-someone-else"}

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
            created = await client.post("/v1/contextledger/sessions", json={"id": "desk"}, headers=mine)
            assert created.status_code == 201, created.text
            turn = {"model": "fake", "max_tokens": 16, "messages": [{"role": "user", "content": "hello"}]}
            answer = await client.post("/v1/messages", json=turn, headers={**mine, "x-contextledger-session": "desk"})
            assert answer.status_code == 200, answer.text
            stored = await client.get("/v1/contextledger/sessions/desk/messages", headers=mine)
            assert stored.status_code == 200, stored.text
            assert [m["role"] for m in stored.json()["data"]] == ["user", "assistant"]
            assert (await client.get("/v1/contextledger/sessions/desk", headers=other)).status_code == 404
            # The bearer form of the same key is the same tenant.
            bearer = {"authorization": f"Bearer {KEY}"}
            assert (await client.get("/v1/contextledger/sessions/desk", headers=bearer)).status_code == 200
            deleted = await client.delete("/v1/contextledger/sessions/desk", headers=mine)
            assert deleted.status_code in (200, 204), deleted.text
        await app.state.proxy.close()

    asyncio.run(run())
