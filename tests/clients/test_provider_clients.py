"""OpenAIResponsesClient and AnthropicChatClient against a real HTTP server on 127.0.0.1 that plays
each provider and refuses what it would refuse (tests/clients/provider_fakes.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from contextledger.clients import ProviderCompactor
from contextledger.exceptions import ConfigurationError, ModelRateLimitError, ModelResponseError
from contextledger.messages import Message, OpaqueContent, from_anthropic, from_responses, to_anthropic
from tests.clients.provider_fakes import API_KEY, BETA, Provider, serving
from tests.optional_imports import try_import

with try_import("openai") as openai_extra:
    import openai  # noqa: F401

    from contextledger.clients.openai_responses import OpenAIResponsesClient, responses_tools

with try_import("anthropic") as anthropic_extra:
    import anthropic  # noqa: F401

    from contextledger.clients.anthropic import AnthropicChatClient, anthropic_tools

pytestmark = [openai_extra.skip, anthropic_extra.skip]

TOOL = {
    "type": "function",
    "function": {"name": "lookup", "description": "Look a value up.", "parameters": {"type": "object"}},
}
LONG = "x" * 220_000  # about 55,000 tokens at four characters a token: past Anthropic's lowest trigger


@pytest.fixture
def provider() -> Iterator[Provider]:
    with serving() as fake:
        yield fake


def responses_client(provider: Provider, **options: Any) -> OpenAIResponsesClient:
    options.setdefault("max_retries", 0)
    return OpenAIResponsesClient("gpt-test", base_url=f"{provider.url}/v1", api_key=API_KEY, **options)


def anthropic_client(provider: Provider, **options: Any) -> AnthropicChatClient:
    options.setdefault("max_retries", 0)
    return AnthropicChatClient("claude-test", base_url=provider.url, api_key=API_KEY, **options)


def conversation(*texts: str) -> list[Message]:
    messages = [Message.system("Be brief.")]
    for number, text in enumerate(texts):
        messages.append(Message.user(text) if number % 2 == 0 else Message.assistant(text))
    return messages


# Responses ----------------------------------------------------------------------------------------


def test_responses_reply_tools_and_usage(provider: Provider) -> None:
    client = responses_client(provider)
    response = asyncio.run(client.get_response(conversation("color=blue", "ok", "what color?"), tools=[TOOL]))
    assert response.text == "echo: what color?"
    assert response.model == "gpt-test"
    assert response.response_id == "resp_1"
    assert response.usage is not None
    assert response.usage.input_tokens is not None
    assert response.usage.input_tokens > 0
    (body,) = provider.bodies("/v1/responses")
    assert body["store"] is False
    assert body["tools"] == [
        {"type": "function", "name": "lookup", "description": "Look a value up.", "parameters": {"type": "object"}}
    ]
    assert body["input"][0]["role"] == "system"
    assert provider.refused == []


def test_responses_tools_flat_and_other_tools_as_given() -> None:
    hosted = {"type": "web_search"}
    assert responses_tools([TOOL, hosted]) == [
        {"type": "function", "name": "lookup", "description": "Look a value up.", "parameters": {"type": "object"}},
        hosted,
    ]


def test_responses_compact_returns_the_window_as_sent(provider: Provider) -> None:
    client = responses_client(provider)
    assert isinstance(client, ProviderCompactor)
    result = asyncio.run(client.compact(conversation("color=blue", "ok", "size=9", "noted")))
    (body,) = provider.bodies("/v1/responses/compact")
    assert set(body) == {"model", "input"}
    assert [m.role for m in result.messages] == ["user", "user", "assistant"]
    item = result.messages[-1]
    assert item.is_provider_compaction
    (content,) = item.contents
    assert isinstance(content, OpaqueContent)
    assert content.data["type"] == "compaction"
    assert content.data["encrypted_content"].startswith("gAAA")
    assert result.usage is not None
    assert result.usage.compactions == 1
    assert result.usage.output_tokens == 120
    assert provider.refused == []


def test_responses_compaction_item_goes_back_byte_for_byte(provider: Provider) -> None:
    client = responses_client(provider)
    result = asyncio.run(client.compact(conversation("color=blue", "ok", "size=9", "noted")))
    follow = [*result.messages, Message.user("what color?")]
    asyncio.run(client.get_response(follow))
    sent = provider.bodies("/v1/responses")[0]["input"]
    returned = provider.bodies("/v1/responses/compact")  # what the fake answered is recomputed below
    assert returned
    assert sent[-2]["type"] == "compaction"
    assert sent[-2] == dict(result.messages[-1].contents[0].data)  # type: ignore[union-attr]
    assert provider.read[-1][0]["type"] == "compaction"  # the fake read from the item on
    assert provider.refused == []


def test_responses_compact_threshold_sets_context_management(provider: Provider) -> None:
    client = responses_client(provider, compact_threshold=1_000)
    response = asyncio.run(client.get_response(conversation("a" * 8_000)))
    (body,) = provider.bodies("/v1/responses")
    assert body["context_management"] == [{"type": "compaction", "compact_threshold": 1_000}]
    assert response.messages[0].is_provider_compaction
    assert response.usage is not None
    assert response.usage.compactions == 1
    assert response.text == "echo: " + "a" * 8_000


def test_responses_errors_are_model_errors(provider: Provider) -> None:
    client = responses_client(provider)
    provider.fail["/v1/responses/compact"] = 500
    with pytest.raises(ModelResponseError, match="answered HTTP 500"):
        asyncio.run(client.compact(conversation("hi")))
    provider.fail["/v1/responses"] = 429
    with pytest.raises(ModelRateLimitError, match="429"):
        asyncio.run(client.get_response(conversation("hi")))


def test_responses_refused_body_is_a_model_error(provider: Provider) -> None:
    client = responses_client(provider)
    # A call output whose call is nowhere: the API (and the fake) refuses the input.
    orphan = from_responses([{"type": "function_call_output", "call_id": "call_9", "output": "1"}])
    with pytest.raises(ModelResponseError, match="HTTP 400"):
        asyncio.run(client.compact([Message.user("hi"), *orphan]))
    assert provider.refused


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"compact_threshold": 0}, "compact_threshold"),
        ({"max_retries": -1}, "max_retries"),
        ({"timeout": 0}, "timeout"),
    ],
)
def test_responses_bad_settings(provider: Provider, options: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        responses_client(provider, **options)


# Anthropic ----------------------------------------------------------------------------------------


def test_anthropic_reply_system_tools_and_no_beta(provider: Provider) -> None:
    client = anthropic_client(provider)
    response = asyncio.run(client.get_response(conversation("color=blue", "ok", "what color?"), tools=[TOOL]))
    assert response.text == "echo: what color?"
    assert response.finish_reasons == ("end_turn",)
    (body,) = provider.bodies("/v1/messages")
    (headers,) = provider.headers("/v1/messages")
    assert body["system"] == [{"type": "text", "text": "Be brief."}]
    assert body["max_tokens"] == 4096
    assert body["tools"] == [{"name": "lookup", "description": "Look a value up.", "input_schema": {"type": "object"}}]
    assert BETA not in headers.get("anthropic-beta", "")
    assert provider.refused == []


def test_anthropic_tools_shape() -> None:
    bare = {"type": "function", "function": {"name": "now"}}
    assert anthropic_tools([bare, {"type": "web_search_20250305", "name": "web_search"}]) == [
        {"name": "now", "input_schema": {"type": "object", "properties": {}}},
        {"type": "web_search_20250305", "name": "web_search"},
    ]


def test_anthropic_compact_returns_the_block_and_bills_the_iteration(provider: Provider) -> None:
    client = anthropic_client(provider)
    assert isinstance(client, ProviderCompactor)
    assert client.opening_stays
    result = asyncio.run(client.compact(conversation(LONG, "noted")))
    (body,) = provider.bodies("/v1/messages")
    (headers,) = provider.headers("/v1/messages")
    assert BETA in headers["anthropic-beta"]
    assert body["context_management"] == {
        "edits": [
            {
                "type": "compact_20260112",
                "trigger": {"type": "input_tokens", "value": 50_000},
                "pause_after_compaction": True,
            }
        ]
    }
    assert body["messages"][-1] == {
        "role": "user",
        "content": [{"type": "text", "text": "Continue."}],
    }  # the API wants a user turn last
    (message,) = result.messages
    assert message.is_provider_compaction
    assert message.role == "assistant"
    assert result.usage is not None
    assert result.usage.compactions == 1
    assert result.usage.compaction is not None
    assert result.usage.compaction.output_tokens == 300
    assert provider.refused == []


def test_anthropic_block_is_sent_back_byte_for_byte_with_the_beta(provider: Provider) -> None:
    client = anthropic_client(provider)
    result = asyncio.run(client.compact(conversation(LONG, "noted")))
    follow = [Message.user("start"), *result.messages, Message.user("what now?")]
    response = asyncio.run(client.get_response(follow))
    assert response.text == "echo: what now?"
    body = provider.bodies("/v1/messages")[-1]
    headers = provider.headers("/v1/messages")[-1]
    assert BETA in headers["anthropic-beta"]  # the fake refuses a compaction block without it
    _, wire = to_anthropic(result.messages)
    assert body["messages"][1] == wire[0]
    assert provider.read[-1][0]["content"][0]["type"] == "compaction"  # read from the block on
    assert provider.refused == []


def test_anthropic_compact_below_the_trigger_raises(provider: Provider) -> None:
    client = anthropic_client(provider)
    with pytest.raises(ModelResponseError, match="without compacting"):
        asyncio.run(client.compact(conversation("short", "noted", "more")))


def test_anthropic_compact_trigger_on_every_call(provider: Provider) -> None:
    client = anthropic_client(provider, compact_trigger=50_000)
    response = asyncio.run(client.get_response(conversation(LONG, "noted", "go on")))
    body = provider.bodies("/v1/messages")[-1]
    assert body["context_management"]["edits"][0]["pause_after_compaction"] is False
    (reply,) = response.messages
    assert reply.is_provider_compaction
    assert response.text == "echo: go on"
    assert response.usage is not None
    assert response.usage.compactions == 1
    blocks = from_anthropic([{"role": "assistant", "content": [{"type": "compaction", "content": "x"}]}])
    assert blocks[0].is_provider_compaction


def test_anthropic_errors_are_model_errors(provider: Provider) -> None:
    client = anthropic_client(provider)
    provider.fail["/v1/messages"] = 500
    with pytest.raises(ModelResponseError, match="answered HTTP 500"):
        asyncio.run(client.compact(conversation(LONG)))
    provider.fail["/v1/messages"] = 429
    with pytest.raises(ModelRateLimitError):
        asyncio.run(client.get_response(conversation("hi")))


@pytest.mark.parametrize(
    ("options", "match"),
    [({"compact_trigger": 49_999}, "compact_trigger"), ({"max_tokens": 0}, "max_tokens"), ({"timeout": -1}, "timeout")],
)
def test_anthropic_bad_settings(provider: Provider, options: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        anthropic_client(provider, **options)


def test_no_model_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_MODEL", raising=False)
    monkeypatch.delenv("ANTHROPIC_MODEL", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_MODEL"):
        OpenAIResponsesClient(base_url="http://127.0.0.1:9")
    with pytest.raises(ConfigurationError, match="ANTHROPIC_MODEL"):
        AnthropicChatClient(base_url="http://127.0.0.1:9", api_key="k")
