"""Spans for compaction, agent runs, model calls and fact admissions, read back from OpenTelemetry's
in-memory exporter; and no OpenTelemetry at all for an application that does not load it."""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the 'otel' extra")

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes, server_attributes
from opentelemetry.trace import SpanKind, StatusCode

from tests.spans import spans

__all__ = ["spans"]  # the fixture, for the tests below

from contextledger._tracing import ESTIMATED_INPUT_TOKENS, ESTIMATED_OUTPUT_TOKENS
from contextledger.agents import Agent, CompactionProvider, FactsProvider, use_context_providers
from contextledger.clients import OfflineModel
from contextledger.compaction import SlidingWindowStrategy, compact_with_report
from contextledger.exceptions import FactRejectedError, ModelResponseError
from contextledger.facts import FactsHost, FactStore, RuleWriter, SQLiteFactStore, extract
from contextledger.history import SQLiteHistoryProvider, Turn, write_turn
from contextledger.history._turns import TurnTarget
from contextledger.messages import FunctionCallContent, Message
from tests.loopback import json_endpoint
from tests.optional_imports import try_import
from tests.tools import lookup_price

with try_import("openai") as openai_extra:
    from contextledger.clients.openai import OpenAIChatClient

with try_import("maf") as maf_extra:
    import agent_framework as maf

    from contextledger.integrations.maf import ContextLedgerChatClient


def conversation(turns: int) -> list[Message]:
    messages = [Message.system("Be brief.")]
    for turn in range(turns):
        call = FunctionCallContent(f"call-{turn}", "lookup", json.dumps({"turn": turn}))
        messages += [
            Message.user(f"question {turn}"),
            Message.assistant(calls=[call]),
            Message.tool(call.call_id, "x" * 200),
            Message.assistant(f"answer {turn}"),
        ]
    return messages


def named(exported: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exported.get_finished_spans() if span.name == name]


def test_a_compaction_span_says_what_the_strategy_removed(spans: InMemorySpanExporter) -> None:
    messages = conversation(6)
    result = asyncio.run(compact_with_report(messages, strategy=SlidingWindowStrategy(keep_last_groups=4)))
    (span,) = named(spans, "contextledger.compaction")
    attributes = dict(span.attributes or {})
    assert attributes["contextledger.compaction.strategy"] == "sliding_window"
    assert attributes["contextledger.compaction.messages.before"] == len(messages) == 25
    assert attributes["contextledger.compaction.messages.after"] == len(result.messages) < 25
    assert attributes["contextledger.compaction.tokens.before"] == result.before["included_tokens"]
    assert attributes["contextledger.compaction.tokens.after"] == result.after["included_tokens"]
    assert attributes["contextledger.compaction.tokens.after"] < attributes["contextledger.compaction.tokens.before"]
    excluded = sum(1 for group in result.index.groups if group.excluded)
    assert attributes["contextledger.compaction.groups.excluded"] == excluded > 0
    assert attributes["contextledger.tokenizer.is_estimate"] is True


def test_an_agent_run_is_an_invoke_agent_span_over_its_model_calls_and_compaction(
    spans: InMemorySpanExporter,
) -> None:
    compaction = CompactionProvider(before_strategy=SlidingWindowStrategy(keep_last_groups=2))
    agent = Agent(OfflineModel(), name="shop", tools=[lookup_price], context_providers=[compaction])
    session = agent.create_session("s-1")
    response = asyncio.run(agent.run("What is the lookup_price of a laptop?", session=session))
    (run,) = named(spans, "invoke_agent shop")
    chats = [span for span in spans.get_finished_spans() if span.name.startswith("chat ")]
    assert len(chats) == len(response.model_calls) == 2
    assert all(chat.parent is not None and chat.parent.span_id == run.context.span_id for chat in chats)
    assert dict(chats[0].attributes or {})["gen_ai.operation.name"] == "chat"
    attributes = dict(run.attributes or {})
    assert attributes["gen_ai.operation.name"] == "invoke_agent"
    assert attributes["gen_ai.agent.name"] == "shop"
    assert attributes["gen_ai.conversation.id"] == "s-1"
    assert response.usage.is_estimate
    assert attributes[ESTIMATED_INPUT_TOKENS] == response.usage.input_tokens
    assert "gen_ai.usage.input_tokens" not in attributes
    assert attributes["contextledger.agent.model_calls"] == 2


def test_fact_admissions_and_refusals_are_spans(spans: InMemorySpanExporter) -> None:
    store = FactStore()
    asyncio.run(extract(store, RuleWriter(), store.begin_turn("module=Reporting; database=PostgreSQL")))
    asyncio.run(extract(store, RuleWriter(), store.begin_turn("module=Billing; database=SQL Server 2022")))
    with pytest.raises(FactRejectedError):
        asyncio.run(extract(store, RuleWriter(), store.begin_turn("colour=blue")))
    first, second, refused = named(spans, "contextledger.facts.admission")
    assert dict(first.attributes or {})["contextledger.facts.admitted"] == ("module", "database")
    assert dict(second.attributes or {})["contextledger.facts.replaced"] == ("module", "database")
    assert refused.status.status_code is StatusCode.ERROR
    assert dict(refused.attributes or {})["error.type"] == "FactRejectedError"


def test_an_admission_written_with_its_turn_is_a_span_too(spans: InMemorySpanExporter, tmp_path: Path) -> None:
    """A host that writes the facts in the turn's own atomic step (the proxy, ``write_turn``'s
    ``facts``) reports the same span as one that extracts after the turn: its keys, or its refusal."""
    path = str(tmp_path / "store.sqlite3")
    history, store = SQLiteHistoryProvider(path), SQLiteFactStore(path, owner="session")

    async def turn(turn_id: str, text: str) -> None:
        host = FactsHost(store)
        write = await host.prepare(host.begin(text))
        turn = Turn("session", turn_id, (Message.user(text),), (Message.assistant("Noted."),))
        assert (await write_turn(turn, [TurnTarget(history)], facts=write)).stored
        host.settled(write)

    before = time.time_ns()
    asyncio.run(turn("turn-1", "module=Reporting; database=PostgreSQL"))
    asyncio.run(turn("turn-2", "module=Billing"))
    asyncio.run(turn("turn-3", "colour=blue"))
    first, second, refused = named(spans, "contextledger.facts.admission")
    assert dict(first.attributes or {})["contextledger.facts.admitted"] == ("module", "database")
    assert dict(second.attributes or {})["contextledger.facts.replaced"] == ("module",)
    assert refused.status.status_code is StatusCode.ERROR
    assert dict(refused.attributes or {})["error.type"] == "FactRejectedError"
    assert before <= (first.start_time or 0) <= (first.end_time or 0) <= time.time_ns()
    assert store.get("module").value == "Billing"  # type: ignore[union-attr]


def test_without_opentelemetry_loaded_nothing_imports_it() -> None:
    """An application that never loads OpenTelemetry runs compaction, agents and facts without it."""
    script = (
        "import asyncio, sys\n"
        "sys.modules['opentelemetry'] = None\n"  # as if the extra were not installed
        "from contextledger.agents import Agent\n"
        "from contextledger.clients import OfflineModel\n"
        "from contextledger.compaction import SlidingWindowStrategy, apply_compaction\n"
        "from contextledger.facts import FactStore, RuleWriter, extract\n"
        "from contextledger.messages import Message\n"
        "messages = [Message.user(f'q{i}') for i in range(30)]\n"
        "out = asyncio.run(apply_compaction(messages, strategy=SlidingWindowStrategy(keep_last_groups=3)))\n"
        "assert len(out) == 3\n"
        "assert asyncio.run(Agent(OfflineModel()).run('hello')).text\n"
        "store = FactStore()\n"
        "asyncio.run(extract(store, RuleWriter(), store.begin_turn('module=Billing')))\n"
        "print(sorted(name for name in sys.modules if name.startswith('opentelemetry') and sys.modules[name]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


# On the GenAI semantic conventions -------------------------------------------------------------


def registered(module: ModuleType) -> set[str]:
    """The attribute names ``module`` of opentelemetry-semantic-conventions defines, read from its
    source with the note under each, less those the conventions replaced or removed."""
    tree = ast.parse(inspect.getsource(module))
    names: set[str] = set()
    body = tree.body
    for position, node in enumerate(body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Constant)):
            continue
        value = node.value.value
        after = body[position + 1] if position + 1 < len(body) else None
        note = after.value.value if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) else ""
        if isinstance(value, str) and "Replaced by" not in str(note) and "Removed" not in str(note):
            names.add(value)
    return names


@pytest.fixture(scope="module")
def conventions() -> set[str]:
    names = registered(gen_ai_attributes) | registered(server_attributes)
    assert {"gen_ai.provider.name", "gen_ai.response.finish_reasons", "server.port"} <= names
    assert "gen_ai.system" not in names, "replaced by gen_ai.provider.name"
    return names


def known_providers() -> set[str]:
    with warnings.catch_warnings():  # the enum is marked as moved to the GenAI conventions' own repository
        warnings.simplefilter("ignore")
        return {member.value for member in gen_ai_attributes.GenAiProviderNameValues}


@dataclass
class ChatServer:
    """An OpenAI-compatible server on 127.0.0.1 answering each request with the next scripted reply."""

    url: str
    replies: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    state = ChatServer("")

    def respond(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        state.requests.append(body)
        return state.replies.pop(0)

    with json_endpoint(respond) as url:
        state.url = url
        yield state


def completion(serial: int, message: dict[str, Any], finish: str) -> tuple[int, dict[str, Any]]:
    usage = {
        "prompt_tokens": 40 + serial,
        "completion_tokens": 5 + serial,
        "prompt_tokens_details": {"cached_tokens": 32},
    }
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
    return 200, {"id": f"chatcmpl-{serial}", "model": "served-model-0613", "choices": [choice], "usage": usage}


def spans_named(exported: InMemorySpanExporter, operation: str) -> list[ReadableSpan]:
    return [
        s for s in exported.get_finished_spans() if dict(s.attributes or {}).get("gen_ai.operation.name") == operation
    ]


@openai_extra.skip
def test_inference_and_agent_spans_carry_what_the_conventions_require(
    spans: InMemorySpanExporter, chat_server: ChatServer, conventions: set[str]
) -> None:
    """Agent runs on the offline model and on the OpenAI-compatible client (a real server on
    127.0.0.1), a failing call, a fact admission and a MAF agent on our client: every inference span
    is a CLIENT ``chat {model}`` span with its provider, every agent span has its provider and
    conversation, reported usage is the server's and estimates are ours, and every ``gen_ai.*``
    name is one the conventions register."""
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup_price", "arguments": '{"item": "laptop"}'}}
    chat_server.replies = [
        completion(1, {"content": None, "tool_calls": [call]}, "tool_calls"),
        completion(2, {"content": "999 EUR."}, "stop"),
        (400, {"error": {"message": "no such model", "type": "invalid_request_error"}}),
    ]
    client = OpenAIChatClient("gpt-test", base_url=chat_server.url, max_retries=0)
    store = FactStore()
    offline = Agent(
        OfflineModel(),
        name="shop",
        tools=[lookup_price],
        context_providers=[CompactionProvider(before_strategy=SlidingWindowStrategy(keep_last_groups=2))],
    )
    remote = Agent(
        use_context_providers(client, CompactionProvider(before_strategy=SlidingWindowStrategy(keep_last_groups=4))),
        name="desk",
        tools=[lookup_price],
        context_providers=[FactsProvider(store, RuleWriter())],
    )

    async def runs() -> None:
        await offline.run("What is the lookup_price of a laptop?", session=offline.create_session("s-offline"))
        await remote.run(
            "module=Billing. What is the lookup_price of a laptop?", session=remote.create_session("s-remote")
        )
        with pytest.raises(ModelResponseError):
            await remote.run("And a phone?", session=remote.create_session("s-failing"))

    asyncio.run(runs())
    chats, agents = spans_named(spans, "chat"), spans_named(spans, "invoke_agent")
    assert len(chats) == 5
    assert len(agents) == 3

    conversation_of = {run.context.span_id: dict(run.attributes or {})["gen_ai.conversation.id"] for run in agents}
    assert sorted(map(str, conversation_of.values())) == ["s-failing", "s-offline", "s-remote"]
    for run in agents:
        attributes = dict(run.attributes or {})
        assert run.kind is SpanKind.INTERNAL
        assert run.name == f"invoke_agent {attributes['gen_ai.agent.name']}"
        remote_run = attributes["gen_ai.agent.name"] == "desk"
        assert attributes["gen_ai.provider.name"] == ("openai" if remote_run else "contextledger")
        assert attributes["gen_ai.request.model"] == ("gpt-test" if remote_run else "offline")
        assert ("error.type" in attributes) is (run.status.status_code is StatusCode.ERROR)
    for chat in chats:
        attributes = dict(chat.attributes or {})
        assert chat.kind is SpanKind.CLIENT
        assert chat.name == f"chat {attributes['gen_ai.request.model']}"
        assert chat.parent is not None
        assert attributes["gen_ai.conversation.id"] == conversation_of[chat.parent.span_id]
        assert ("error.type" in attributes) is (chat.status.status_code is StatusCode.ERROR)
        if attributes["gen_ai.provider.name"] == "openai":
            assert attributes["gen_ai.provider.name"] in known_providers()
            assert (attributes["server.address"], attributes["server.port"]) == (
                "127.0.0.1",
                int(chat_server.url.split(":")[2].split("/")[0]),
            )
    offline_chats = [c for c in chats if dict(c.attributes or {})["gen_ai.provider.name"] == "contextledger"]
    answered = [c for c in chats if dict(c.attributes or {}).get("gen_ai.response.id")]
    failed = [c for c in chats if c.status.status_code is StatusCode.ERROR]
    assert len(offline_chats) == 2
    assert len(answered) == 2
    assert len(failed) == 1

    # The provider's answer: its model, id, finish reasons and usage, as the server sent them.
    for serial, chat in enumerate(answered, start=1):
        attributes = dict(chat.attributes or {})
        assert attributes["gen_ai.response.model"] == "served-model-0613"
        assert attributes["gen_ai.response.id"] == f"chatcmpl-{serial}"
        assert attributes["gen_ai.response.finish_reasons"] == (("tool_calls",) if serial == 1 else ("stop",))
        assert attributes["gen_ai.usage.input_tokens"] == 40 + serial
        assert attributes["gen_ai.usage.output_tokens"] == 5 + serial
        assert attributes["gen_ai.usage.cache_read.input_tokens"] == 32
        assert not any(name.startswith("contextledger.usage.estimated") for name in attributes)
    # The offline model's counts are estimates: ours, never the provider's.
    for chat in offline_chats:
        attributes = dict(chat.attributes or {})
        estimated = attributes[ESTIMATED_INPUT_TOKENS], attributes[ESTIMATED_OUTPUT_TOKENS]
        assert all(isinstance(count, int) and count > 0 for count in estimated)
        assert not any(name.startswith("gen_ai.usage.") for name in attributes)
        assert attributes["gen_ai.response.finish_reasons"] in (("tool_calls",), ("stop",))

    # Compaction is a child of the call it shaped; the fact admission is in its run's conversation.
    by_id = {chat.context.span_id: chat for chat in chats}
    compactions = named(spans, "contextledger.compaction")
    assert len(compactions) == 1 + 3  # once before the offline run's first call, before every remote call
    for compaction in compactions:
        assert compaction.parent is not None
        assert compaction.parent.span_id in by_id
    (admission,) = named(spans, "contextledger.facts.admission")
    assert dict(admission.attributes or {})["gen_ai.conversation.id"] == "s-remote"

    emitted = {name for span in spans.get_finished_spans() for name in dict(span.attributes or {})}
    ours = {name for name in emitted if name.startswith(("gen_ai.", "server."))}
    assert ours - conventions == set()


@maf_extra.skip
def test_a_maf_agent_on_our_client_gives_one_conventional_inference_span_per_call(
    spans: InMemorySpanExporter, conventions: set[str]
) -> None:
    agent = maf.Agent(client=ContextLedgerChatClient(OfflineModel()), name="shop", tools=[lookup_price])

    async def run() -> None:
        await agent.run("What is the lookup_price of a laptop?")

    asyncio.run(run())
    ours = [
        span
        for span in spans.get_finished_spans()
        if span.instrumentation_scope and span.instrumentation_scope.name == "contextledger"
    ]
    assert [span.name for span in ours] == ["chat offline", "chat offline"]
    for span in ours:
        attributes = dict(span.attributes or {})
        assert span.kind is SpanKind.CLIENT
        assert attributes["gen_ai.provider.name"] == "contextledger"
        assert attributes["gen_ai.request.model"] == "offline"
        assert {name for name in attributes if name.startswith("gen_ai.")} <= conventions
