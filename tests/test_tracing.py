"""Spans for compaction, agent runs, model calls and fact admissions, read back from OpenTelemetry's
in-memory exporter; and no OpenTelemetry at all for an application that does not load it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the 'otel' extra")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from contextledger.agents import Agent, CompactionProvider
from contextledger.clients import OfflineModel
from contextledger.compaction import SlidingWindowStrategy, compact_with_report
from contextledger.exceptions import FactRejectedError
from contextledger.facts import FactsHost, FactStore, RuleWriter, SQLiteFactStore, extract
from contextledger.history import SQLiteHistoryProvider, Turn, TurnTarget, write_turn
from contextledger.messages import FunctionCallContent, Message
from tests.tools import lookup_price

_EXPORTER = InMemorySpanExporter()
_ATTACHED: list[TracerProvider] = []  # the provider the exporter was attached to, once


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The process's tracer provider (set once: OpenTelemetry allows one) exporting into memory."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # another test (the README's) may have set one already
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if not _ATTACHED:
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        _ATTACHED.append(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


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
    assert attributes["gen_ai.usage.input_tokens"] == response.usage.input_tokens
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
