"""A client that misses every route learns, from the 404 alone, what the proxy serves and, for the
commonest miss (a base URL ending in ``/v1`` given to an SDK that adds its own), how to fix it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tests.optional_imports import try_import

from contextledger.serve import ServeConfig

with try_import("serve") as serve_extra:
    import httpx

    from contextledger.serve import create_app

pytestmark = serve_extra.skip

SERVED = [
    "POST /v1/chat/completions",
    "POST /v1/responses",
    "POST /v1/messages",
    "POST /v1/messages/count_tokens",
    "GET /v1/models",
    "GET /healthz",
    "GET /readyz",
    "GET /metrics",
    "POST /v1/contextledger/sessions",
    "GET /v1/contextledger/sessions/{session_id}/messages",
    "GET /v1/contextledger/sessions/{session_id}/facts",
    "POST /v1/contextledger/sessions/{session_id}/forget",
    "GET DELETE /v1/contextledger/sessions/{session_id}",
]


def answer(tmp_path: Path, method: str, path: str) -> httpx.Response:
    app = create_app(ServeConfig("http://127.0.0.1:9/v1", store=f"sqlite:{tmp_path / 's.db'}"))

    async def run() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
            response = await client.request(method, path, json={} if method == "POST" else None)
        await app.state.proxy.close()
        return response

    return asyncio.run(run())


def anthropic_message(body: Any) -> str:
    assert body["type"] == "error"
    assert body["error"]["type"] == "not_found_error"
    message: str = body["error"]["message"]
    return message


def openai_message(body: Any) -> str:
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["code"] == "unknown_url"
    message: str = body["error"]["message"]
    return message


@pytest.mark.parametrize(("method", "path"), [("POST", "/v1/chat/complete"), ("GET", "/"), ("POST", "/v2/responses")])
def test_a_404_names_every_endpoint_the_proxy_serves(tmp_path: Path, method: str, path: str) -> None:
    response = answer(tmp_path, method, path)
    assert response.status_code == 404
    message = openai_message(response.json())
    assert f"no such endpoint: {method} {path}" in message
    for endpoint in SERVED:
        assert endpoint in message
    assert "/v1 twice" not in message


def test_the_anthropic_sdk_given_a_base_url_ending_in_v1_is_told_to_drop_it(tmp_path: Path) -> None:
    response = answer(tmp_path, "POST", "/v1/v1/messages")
    assert response.status_code == 404
    message = anthropic_message(response.json())
    assert "/v1 twice" in message
    assert "without /v1" in message
    assert "/v1/messages" in message
    for endpoint in SERVED:
        assert endpoint in message


def test_count_tokens_under_a_doubled_prefix_is_answered_in_anthropic_shape(tmp_path: Path) -> None:
    response = answer(tmp_path, "POST", "/v1/v1/messages/count_tokens")
    assert response.status_code == 404
    assert "/v1 twice" in anthropic_message(response.json())


def test_an_openai_client_with_a_doubled_prefix_is_told_to_drop_one(tmp_path: Path) -> None:
    response = answer(tmp_path, "POST", "/v1/v1/chat/completions")
    assert response.status_code == 404
    message = openai_message(response.json())
    assert "drop one /v1" in message
    assert "it will call /v1/chat/completions" in message
