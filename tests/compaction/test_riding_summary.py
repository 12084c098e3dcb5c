"""The summariser that rides the cache: the conversation's own request up to the cut, then one
instruction, with the conversation's tools declared (not to be called) and its prompt_cache_key;
a reply that calls a tool is asked once more, then the transcript form is sent; summaries are still
written once per run (content-addressed keys).  Against a scripted model, and through
OpenAIChatClient against a local server recording what it was sent."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from contextledger import Message
from contextledger.clients import ScriptedChatClient
from contextledger.compaction import SummarizationStrategy, compact_with_report, tokens_below, tokens_exceed
from contextledger.compaction._summarization import RIDING_INSTRUCTION
from contextledger.exceptions import ConfigurationError
from contextledger.messages import FunctionCallContent, FunctionResultContent
from contextledger.tokenizers import CharacterEstimatorTokenizer
from tests.optional_imports import try_import

with try_import("openai") as openai_extra:
    from contextledger.clients.openai import OpenAIChatClient

TOKENIZER = CharacterEstimatorTokenizer()
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}]


def conversation(turns: int) -> list[Message]:
    messages = [Message.system("You help with the shop's catalogue. " * 20)]
    for n in range(turns):
        call = FunctionCallContent(f"call_{n}", "lookup", json.dumps({"item": n}))
        messages += [
            Message.user(f"question {n}: " + "what does the catalogue say? " * 10),
            Message.assistant(calls=[call]),
            Message("tool", (FunctionResultContent(f"call_{n}", "row " * 60),)),
            Message.assistant(f"answer {n}: " + "it says so. " * 10),
        ]
    return messages


def strategy(client: Any, **options: Any) -> SummarizationStrategy:
    return SummarizationStrategy(
        client,
        trigger=tokens_exceed(2_000),
        target=tokens_below(1_000),
        tokenizer=TOKENIZER,
        max_input_tokens=None,
        **options,
    )


def compact(made: SummarizationStrategy, messages: list[Message]) -> list[Message]:
    return list(asyncio.run(compact_with_report(messages, strategy=made)).messages)


def test_the_riding_form_sends_the_conversation_up_to_the_cut_then_one_instruction() -> None:
    client = ScriptedChatClient(["[Summary] the user asked about items 0 to 3."])
    made = strategy(client, form="conversation", tools=TOOLS, prompt_cache_key="cl-conversation")
    history = conversation(12)
    sent = compact(made, history)
    assert client.calls == 1
    (request,) = client.requests
    summary = next(m for m in sent if m.is_summary)
    replaced = history[: history.index(sent[sent.index(summary) + 1])]  # what the summary stands for, system first
    assert request[:-1] == replaced  # the very messages, in order: the start the conversation sent
    assert request[-1].role == "user"
    assert request[-1].text == RIDING_INSTRUCTION + made.prompt
    assert client.tools == [TOOLS]
    # The last message that takes a cache breakpoint (not an assistant's) is named.
    last = max(n for n, m in enumerate(request[:-1]) if m.role in ("system", "user", "tool"))
    assert all(m.role == "assistant" for m in request[last + 1 : -1])
    assert client.options == [
        {"tool_choice": "none", "prompt_cache_key": "cl-conversation", "cache_breakpoints": [last]}
    ]


def test_a_summary_is_written_once_per_run_and_its_key_names_the_form() -> None:
    client = ScriptedChatClient(["[Summary] items 0 to 3."])
    made = strategy(client, form="conversation", tools=TOOLS)
    history = conversation(12)
    first = compact(made, history)
    again = compact(made, [*history, Message.user("one more question")])
    assert client.calls == 1  # the same run: read from the summary cache, byte for byte
    assert next(m for m in again if m.is_summary) == next(m for m in first if m.is_summary)
    plain = strategy(client, cache=made.cache)  # the transcript form shares the cache, not the key
    compact(plain, history)
    assert client.calls == 2


def test_a_reply_calling_a_tool_is_asked_again_once_then_the_transcript_is_sent() -> None:
    calling = Message.assistant(calls=[FunctionCallContent("call_x", "lookup", "{}")])
    client = ScriptedChatClient([calling, calling, "[Summary] from the transcript."])
    made = strategy(client, form="conversation", tools=TOOLS)
    sent = compact(made, conversation(12))
    assert client.calls == 3
    assert client.requests[0] == client.requests[1]  # asked once more, the same way
    transcript = client.requests[2]
    assert [m.role for m in transcript] == ["system", "user"]  # the fresh-prompt form
    assert transcript[0].text == made.prompt
    assert client.tools[2] == []
    assert next(m for m in sent if m.is_summary).text == "[Summary] from the transcript."


def test_a_reply_calling_a_tool_once_is_answered_by_the_second_ask() -> None:
    calling = Message.assistant(calls=[FunctionCallContent("call_x", "lookup", "{}")])
    client = ScriptedChatClient([calling, "[Summary] second time."])
    sent = compact(strategy(client, form="conversation", tools=TOOLS), conversation(12))
    assert client.calls == 2
    assert next(m for m in sent if m.is_summary).text == "[Summary] second time."


def test_the_form_defaults_to_riding_where_the_client_can() -> None:
    assert strategy(ScriptedChatClient(["x"])).form == "transcript"

    class Riding(ScriptedChatClient):
        rides_prefix_cache = True

    assert strategy(Riding(["x"])).form == "conversation"
    assert strategy(Riding(["x"]), form="transcript").form == "transcript"
    with pytest.raises(ConfigurationError, match="form must be"):
        strategy(Riding(["x"]), form="replay")
    with pytest.raises(ConfigurationError, match="tools"):
        strategy(Riding(["x"]), tools="lookup")
    with pytest.raises(ConfigurationError, match="prompt_cache_key"):
        strategy(Riding(["x"]), prompt_cache_key="")


# Through the OpenAI-compatible client, against a local server -----------------------------------


@pytest.fixture
def server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0")))))
            reply = {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": "gpt-5.6",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "items 0 to 3"}, "finish_reason": "stop"}
                ],
                "usage": {
                    "prompt_tokens": 900,
                    "completion_tokens": 5,
                    "prompt_tokens_details": {"cached_tokens": 850},
                },
            }
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", received
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@openai_extra.skip
def test_through_the_openai_client_the_request_starts_as_the_conversation_did(
    server: tuple[str, list[dict[str, Any]]],
) -> None:
    url, received = server
    client = OpenAIChatClient(model="gpt-5.6", base_url=url, api_key="sk-local")
    made = strategy(client, tools=TOOLS, prompt_cache_key="cl-conversation")
    assert made.form == "conversation"  # the default for this client
    history = conversation(12)
    sent = compact(made, history)
    (body,) = received
    assert body["tools"] == TOOLS
    assert body["tool_choice"] == "none"
    assert body["prompt_cache_key"] == "cl-conversation"
    summary = next(m for m in sent if m.is_summary)
    replaced = history[: history.index(sent[sent.index(summary) + 1])]
    from contextledger.messages import to_openai  # noqa: PLC0415

    def unmarked(message: dict[str, Any]) -> dict[str, Any]:
        content = message.get("content")
        if isinstance(content, list) and len(content) == 1 and "prompt_cache_breakpoint" in content[0]:
            return {**message, "content": content[0]["text"]}  # the mark is metadata, not text
        return message

    # The conversation's start, as it is written on the wire (one message carrying a breakpoint).
    assert [unmarked(m) for m in body["messages"][:-1]] == to_openai(replaced)
    assert body["messages"][-1] == {"role": "user", "content": RIDING_INSTRUCTION + made.prompt}
    assert summary.text == "[Summary] items 0 to 3"
    assert "cache_breakpoints" not in body  # an option of the client, never a field


@openai_extra.skip
@pytest.mark.parametrize("model", ["gpt-5.6", "gpt-4.1"])
def test_the_client_marks_the_end_of_the_conversation_only_for_models_that_take_breakpoints(
    server: tuple[str, list[dict[str, Any]]], model: str
) -> None:
    url, received = server
    client = OpenAIChatClient(model=model, base_url=url, api_key="sk-local")
    compact(strategy(client, tools=TOOLS), conversation(12))
    (body,) = received
    marked = [n for n, m in enumerate(body["messages"]) if "prompt_cache_breakpoint" in json.dumps(m)]
    if model == "gpt-5.6":
        (where,) = marked
        assert body["messages"][where]["role"] in ("user", "tool")  # the last one before the instruction taking one
        assert all(m["role"] == "assistant" for m in body["messages"][where + 1 : -1])
        assert body["messages"][where]["content"][0]["prompt_cache_breakpoint"] == {"mode": "explicit"}
    else:
        assert marked == []
    with pytest.raises(ConfigurationError, match="model-name prefixes"):
        OpenAIChatClient(model=model, base_url=url, api_key="sk-local", cache_breakpoint_models="gpt-5.6")


def test_next_cut_names_where_the_next_summary_of_a_kept_history_will_end() -> None:
    from contextledger.agents import ReducedHistoryProvider  # noqa: PLC0415
    from contextledger.history import InMemoryHistoryProvider  # noqa: PLC0415

    client = ScriptedChatClient(["[Summary] so far."])
    made = strategy(client, form="conversation")
    reducer = ReducedHistoryProvider(InMemoryHistoryProvider(), made, tokenizer=TOKENIZER)
    full = conversation(40)
    kept = full[:1]
    predicted: int | None = None
    checked = 0
    for turn in range(40):
        before = [*kept, *full[1 + 4 * turn : 5 + 4 * turn]]
        calls = client.calls
        kept = asyncio.run(reducer.reduce(before))
        if client.calls > calls:  # a summary: its run ends where next_cut said
            assert predicted is not None
            assert client.requests[-1][-2] is before[predicted]
            checked += 1
        predicted = made.next_cut(kept)
    assert checked >= 3
    assert strategy(client, prefix_stable=False).next_cut(kept) is None  # no grid, no fixed cut
