"""The Microsoft Agent Framework (MAF) side of the side-by-side compaction benchmark.

Everything here drives ``agent_framework`` (``agent-framework-core==1.23.0``, the ``bench``
extra) exactly as an application would, so the timings and projections are MAF's own and
the contextledger side can be compared against them on the same workloads.

MAF compacts by annotating ``Message.additional_properties`` in place (group ids, token
counts, ``_excluded`` flags) and may insert summary messages into the list it is given.
A list that has been compacted once therefore no longer measures a cold run, which is why
every timed run here starts from freshly built messages.

MAF is imported lazily so this module can be imported (and :func:`available` asked) on an
interpreter without the ``bench`` extra.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The workloads live beside this file; make them importable however the benchmark is launched.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads

STRATEGY_NAMES: tuple[str, ...] = (
    "truncation_tokens",
    "truncation_messages",
    "sliding_window",
    "tool_result_collapse",
    "selective_tool_call",
    "token_budget",
    "context_window",
)

# The seed ``workloads.messages`` uses by default, so a session replays the same turns.
_SESSION_SEED = 7


# The clock both sides are timed with: benchmarks/run.py sets process CPU time under --cpu, as for its own side.
CLOCK: Callable[[], float] = time.perf_counter


def available() -> bool:
    """Whether MAF can be imported, so callers can skip this side instead of crashing."""
    try:
        import agent_framework  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def _tokenizer() -> Any:
    """MAF's 4-characters-per-token estimator, the tokenizer its own examples use."""
    from agent_framework import CharacterEstimatorTokenizer  # noqa: PLC0415

    return CharacterEstimatorTokenizer()


# --------------------------------------------------------------------------- conversion


def _to_maf_message(entry: dict[str, Any]) -> Any:
    """One OpenAI dict as one MAF ``Message``."""
    from agent_framework import Content, Message  # noqa: PLC0415

    role = entry["role"]
    if role == "tool":
        result = Content.from_function_result(entry["tool_call_id"], result=entry.get("content") or "")
        return Message(role="tool", contents=[result])
    contents: list[Any] = []
    text = entry.get("content")
    if isinstance(text, str) and text:
        contents.append(Content.from_text(text))
    for call in entry.get("tool_calls") or []:
        function = call["function"]
        contents.append(Content.from_function_call(call["id"], function["name"], arguments=function.get("arguments")))
    return Message(role=role, contents=contents)


def to_maf_messages(dicts: list[dict[str, Any]]) -> list[Any]:
    """Build fresh MAF ``Message`` objects from OpenAI Chat Completions dicts.

    Tool calls become ``function_call`` contents (call_id, name, JSON-string arguments),
    tool results become ``function_result`` contents on a ``tool`` message, and text becomes
    ``text`` contents.  No ``message_id`` is set: MAF assigns ``msg_<index>`` itself, as it
    would for messages arriving from a chat client that does not supply ids.
    """
    return [_to_maf_message(entry) for entry in dicts]


def _arguments_text(arguments: Any) -> str:
    """Function-call arguments as the JSON string the Chat Completions API carries."""
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments)


def _result_text(result: Any) -> str:
    """A function result as the string sent back to the model."""
    if result is None:
        return ""
    return result if isinstance(result, str) else str(result)


def from_maf_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """Render MAF messages as OpenAI dicts, so projections from both sides compare with ``==``.

    The shape mirrors ``workloads.turn``: ``tool_calls`` only on assistant messages that call
    tools (whose ``content`` is then ``None`` unless they also carry text), and one ``tool``
    dict per ``function_result`` content, because Chat Completions takes one result per
    message.  Summary messages MAF inserts (plain assistant text) come out as assistant text.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        texts = [content.text for content in message.contents if content.type == "text"]
        text = " ".join(t for t in texts if t) if texts else None
        if message.role == "tool":
            for content in message.contents:
                if content.type == "function_result":
                    out.append(
                        {
                            "role": "tool",
                            "tool_call_id": content.call_id,
                            "content": _result_text(content.result),
                        }
                    )
            continue
        calls = [
            {
                "id": content.call_id,
                "type": "function",
                "function": {"name": content.name, "arguments": _arguments_text(content.arguments)},
            }
            for content in message.contents
            if content.type == "function_call"
        ]
        entry: dict[str, Any] = {"role": message.role, "content": text if (text or not calls) else None}
        if calls:
            entry["tool_calls"] = calls
        out.append(entry)
    return out


# --------------------------------------------------------------------------- strategies


def _truncation_tokens() -> Any:
    from agent_framework import TruncationStrategy  # noqa: PLC0415

    return TruncationStrategy(max_n=32_000, compact_to=16_000, tokenizer=_tokenizer())


def _truncation_messages() -> Any:
    from agent_framework import TruncationStrategy  # noqa: PLC0415

    return TruncationStrategy(max_n=1_000, compact_to=500)


def _sliding_window() -> Any:
    from agent_framework import SlidingWindowStrategy  # noqa: PLC0415

    return SlidingWindowStrategy(keep_last_groups=20)


def _tool_result_collapse() -> Any:
    from agent_framework import ToolResultCompactionStrategy  # noqa: PLC0415

    return ToolResultCompactionStrategy(keep_last_tool_call_groups=1)


def _selective_tool_call() -> Any:
    from agent_framework import SelectiveToolCallCompactionStrategy  # noqa: PLC0415

    return SelectiveToolCallCompactionStrategy(keep_last_tool_call_groups=1)


def _token_budget() -> Any:
    from agent_framework import (  # noqa: PLC0415
        SlidingWindowStrategy,
        TokenBudgetComposedStrategy,
        ToolResultCompactionStrategy,
    )

    return TokenBudgetComposedStrategy(
        token_budget=16_000,
        tokenizer=_tokenizer(),
        strategies=[
            ToolResultCompactionStrategy(keep_last_tool_call_groups=1),
            SlidingWindowStrategy(keep_last_groups=20),
        ],
    )


def _context_window() -> Any:
    from agent_framework import ContextWindowCompactionStrategy  # noqa: PLC0415

    return ContextWindowCompactionStrategy(max_context_window_tokens=128_000, max_output_tokens=16_384)


_BUILDERS: dict[str, Callable[[], Any]] = {
    "truncation_tokens": _truncation_tokens,
    "truncation_messages": _truncation_messages,
    "sliding_window": _sliding_window,
    "tool_result_collapse": _tool_result_collapse,
    "selective_tool_call": _selective_tool_call,
    "token_budget": _token_budget,
    "context_window": _context_window,
}


def build_strategy(name: str) -> Any:
    """A fresh MAF strategy object for ``name`` (strategies are cheap but some hold state)."""
    try:
        builder = _BUILDERS[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; expected one of {STRATEGY_NAMES}") from None
    return builder()


# --------------------------------------------------------------------------- one-shot runs


async def _apply(messages: list[Any], strategy: Any) -> list[Any]:
    """``apply_compaction`` with the estimator tokenizer, as a user wiring it by hand would."""
    from agent_framework import apply_compaction  # noqa: PLC0415

    projected: list[Any] = await apply_compaction(messages, strategy=strategy, tokenizer=_tokenizer())
    return projected


def compact(name: str, dicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """MAF's projection of ``dicts`` under strategy ``name``, as OpenAI dicts."""
    projected = asyncio.run(_apply(to_maf_messages(dicts), build_strategy(name)))
    return from_maf_messages(projected)


async def _time_runs(name: str, dicts: list[dict[str, Any]], repeats: int) -> list[float]:
    from agent_framework import apply_compaction  # noqa: PLC0415

    seconds: list[float] = []
    for _ in range(repeats):
        # Built outside the clock: conversion is not compaction, and MAF annotates in place,
        # so reusing a list would time a warm, already-compacted history.
        messages = to_maf_messages(dicts)
        strategy = build_strategy(name)
        tokenizer = _tokenizer()
        gc.collect()
        start = CLOCK()
        await apply_compaction(messages, strategy=strategy, tokenizer=tokenizer)
        seconds.append(CLOCK() - start)
    return seconds


def time_cold(name: str, dicts: list[dict[str, Any]], repeats: int) -> list[float]:
    """Seconds per cold ``apply_compaction`` run of strategy ``name`` over ``dicts``.

    Each run gets freshly converted messages and a fresh strategy; only the
    ``await apply_compaction(...)`` call is timed, token annotation included.
    """
    return asyncio.run(_time_runs(name, dicts, repeats))


# --------------------------------------------------------------------------- sessions


async def _time_session(turns: int, name: str) -> list[float]:
    """Drive a real ``InMemoryHistoryProvider`` + ``CompactionProvider`` pair, no model involved.

    This is the pipeline ``Agent.run`` builds before each model call: a fresh
    ``SessionContext``, the history provider's ``before_run`` loading stored messages into
    it, then the compaction provider's ``before_run`` compacting them.  Only the
    compaction provider's ``before_run`` is timed.

    What carries over between calls is only what the history provider stores.  Loading
    goes through ``SessionContext.extend_messages``, which shallow-copies every message and
    its ``additional_properties``; the compaction provider annotates and excludes those
    copies, and ``CompactionProvider.after_run`` only touches stored history when an
    ``after_strategy`` is set.  With a ``before_strategy`` alone nothing persists, so every
    call regroups, re-tokenises and re-compacts the whole history.
    """
    from agent_framework import (  # noqa: PLC0415
        AgentSession,
        CompactionProvider,
        InMemoryHistoryProvider,
        SessionContext,
    )

    history: Any = InMemoryHistoryProvider()
    compaction: Any = CompactionProvider(
        before_strategy=build_strategy(name),
        tokenizer=_tokenizer(),
        history_source_id=history.source_id,
    )
    session = AgentSession()
    history_state = session.state.setdefault(history.source_id, {})
    compaction_state = session.state.setdefault(compaction.source_id, {})
    rng = random.Random(_SESSION_SEED)
    system = to_maf_messages(workloads.messages(1))  # just the workload's system message
    await history.save_messages(session.session_id, system, state=history_state)

    seconds: list[float] = []
    for number in range(1, turns + 1):
        # Storing the turn is what HistoryProvider.after_run does with the run's input and
        # response messages; save_messages is the call it makes.
        await history.save_messages(
            session.session_id, to_maf_messages(workloads.turn(number, rng)), state=history_state
        )
        context = SessionContext(session_id=session.session_id, input_messages=[])
        await history.before_run(agent=None, session=session, context=context, state=history_state)
        gc.collect()
        start = CLOCK()
        await compaction.before_run(agent=None, session=session, context=context, state=compaction_state)
        seconds.append(CLOCK() - start)
        if not context.get_messages():
            raise RuntimeError(f"MAF projected an empty context at turn {number}")
    return seconds


def time_session(turns: int, name: str = "sliding_window") -> list[float]:
    """Per-turn seconds MAF's ``CompactionProvider(before_strategy=...)`` spends over a session.

    Turn ``t`` appends that turn's four workload messages to the stored history (after the
    system message), then compacts before the model call as the provider does.
    """
    return asyncio.run(_time_session(turns, name))
