"""Helpers for the MAF tests: a shopping conversation a real MAF agent holds with the test server, and
the comparison of what the server received with what contextledger computes on its own."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai
from agent_framework.openai import OpenAIChatCompletionClient

from contextledger.compaction import DEFAULT_SUMMARIZATION_PROMPT
from contextledger.messages import Content, Message, from_openai
from tests.integrations.conftest import ChatServer, completion, tool_call
from tests.tools import PriceList

INSTRUCTIONS = "You are a helpful shopping assistant."
AGENT_NAME = "ShoppingAssistant"
CUSTOM_PROMPT = "Summarize the key decisions and user preferences only."
SUMMARY_PROMPTS = frozenset({DEFAULT_SUMMARIZATION_PROMPT, CUSTOM_PROMPT})
ITEMS = ("laptop", "phone", "tablet", "monitor", "keyboard", "mouse", "printer", "camera", "speaker", "router")

Sent = list[tuple[str, tuple[Content, ...], str | None]]


def maf_client(server: ChatServer) -> OpenAIChatCompletionClient:
    """MAF's own OpenAI chat-completions client, pointed at the test server (no retries: a scripted
    failure should fail at once)."""
    sdk = openai.AsyncOpenAI(base_url=server.url, api_key="test-key", max_retries=0)
    return OpenAIChatCompletionClient(model="test-model", async_client=sdk)


def summary_for(transcript: str) -> str:
    """The summariser's answer, a function of what it was asked, so both sides can compute it."""
    return f"Earlier the user asked about {transcript.count('lookup_price')} items; {transcript[:48]!r}"


def summary_reply(messages: Sequence[Message]) -> str:
    """:func:`summary_for` as a scripted contextledger client computes it from its request."""
    return summary_for(messages[-1].text)


@dataclass
class Shop:
    """Answers the agent like a model that looks every item up once: a tool call, then text.

    Summariser requests (recognised by their system prompt) get :func:`summary_for`.
    ``usage`` is reported on every reply.
    """

    result_chars: int = 2_000
    calls: itertools.count[int] = field(default_factory=itertools.count)

    def tool(self) -> Callable[[str], str]:
        return PriceList(detail_chars=self.result_chars).lookup_price

    def respond(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request["messages"]
        usage = {"prompt_tokens": len(json.dumps(messages)) // 4, "completion_tokens": 7}
        if messages[0]["role"] == "system" and messages[0]["content"] in SUMMARY_PROMPTS:
            return completion(summary_for(messages[-1]["content"]), usage=usage)
        last = messages[-1]
        if last["role"] == "user":
            item = last["content"].rstrip("?").split()[-1]
            call = tool_call(f"call-{next(self.calls)}", "lookup_price", {"item": item})
            return completion(None, tool_calls=[call], usage=usage)
        return completion(f"That is listed at 999 EUR ({len(messages)} messages seen).", usage=usage)


def question(number: int) -> str:
    return f"What's the price of a {ITEMS[number % len(ITEMS)]}?"


def is_agent_request(request: dict[str, Any]) -> bool:
    first: dict[str, Any] = request["messages"][0]
    content = first.get("content")
    return first["role"] == "system" and isinstance(content, str) and content.startswith(INSTRUCTIONS)


def sent(request: dict[str, Any]) -> Sent:
    """What the model received, in contextledger's terms (role, contents, author name)."""
    return [(m.role, m.contents, m.author_name) for m in from_openai(request["messages"])]


def expected(messages: Sequence[Message]) -> Sent:
    """``messages`` as :func:`sent` would see them on the wire; MAF's OpenAI client sends no name
    on a tool message (the API has no such field), so that one is left out."""
    return [(m.role, m.contents, None if m.role == "tool" else m.author_name) for m in messages]


def difference(actual: Sent, wanted: Sent) -> str:
    """The first position where two sent lists differ, shortened enough to read."""

    def short(item: object) -> str:
        text = repr(item)
        return text if len(text) <= 300 else text[:150] + " ... " + text[-150:]

    for position, (left, right) in enumerate(zip(actual, wanted)):
        if left != right:
            return f"position {position}:\n  sent     {short(left)}\n  expected {short(right)}"
    return f"lengths differ: sent {len(actual)}, expected {len(wanted)}"
