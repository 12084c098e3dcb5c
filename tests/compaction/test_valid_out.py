"""Valid in, valid out, in each API's own terms: whenever a body keeps its API's structural rules,
what every built-in strategy (and the proxy's default) keeps of it keeps them too, and no user
text of it holds an assistant's words.

The oracle is :func:`contextledger.messages.problems_for`, written from the providers' API
references, not from this library's message model.  Conversations are shaped as agents send them:
turns of user text, rounds of tool calls (parallel ones too) with their results, thinking or
reasoning before calls, replies, and now and then a message larger than the default trigger.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextledger.compaction import (
    CompactionStrategy,
    PipelineStrategy,
    SlidingWindowStrategy,
    TruncationStrategy,
    apply_compaction_sync,
    opened_by_user,
    strategy_from_spec,
    tokens_below,
    tokens_exceed,
    turns_exceed,
)
from contextledger.messages import (
    from_anthropic,
    from_openai,
    from_responses,
    problems_for,
    to_anthropic,
    to_openai,
    to_responses,
)
from contextledger.messages._responses import kept_as_given
from contextledger.tokenizers import CharacterEstimatorTokenizer
from tests.sizes import examples, sized

API = Literal["chat", "responses", "anthropic"]
TOKENS = CharacterEstimatorTokenizer()
HUGE = 36_000  # words: about 40,000 tokens, past the default trigger of 32,000

STRATEGIES: dict[str, CompactionStrategy] = {
    "default": strategy_from_spec("truncation", ("max_n=32000", "compact_to=16000")),
    "truncation": TruncationStrategy(trigger=tokens_exceed(3_000), target=tokens_below(1_000), minimum_preserved=2),
    "truncation-one-shot": TruncationStrategy(
        trigger=tokens_exceed(3_000), target=tokens_below(1_000), minimum_preserved=2, prefix_stable=False
    ),
    "truncation-messages": strategy_from_spec("truncation", ("max_n=6", "compact_to=3")),
    "window-groups": SlidingWindowStrategy(keep_last_groups=3),
    "window-turns": SlidingWindowStrategy(trigger=turns_exceed(2)),
    "tool-result-collapse": strategy_from_spec("tool-result-collapse", ("keep_last_tool_call_groups=1",)),
    "selective-tool-call": strategy_from_spec("selective-tool-call", ("keep_last_tool_call_groups=1",)),
    "budget": strategy_from_spec(None, (), budget=2_000),
    "pipeline": PipelineStrategy(
        strategy_from_spec("tool-result-collapse", ("keep_last_tool_call_groups=1",)),
        TruncationStrategy(trigger=tokens_exceed(2_000), target=tokens_below(1_000), minimum_preserved=2),
    ),
}


@st.composite
def scripts(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A conversation as steps, written out per API below: ``user`` (with its size), ``calls`` (a
    round of parallel calls, with or without thinking before it), ``reply``."""
    steps: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 10))):
        steps.append({"kind": "user", "words": draw(st.sampled_from([3, 30, 300, 300, HUGE]))})
        for _ in range(draw(st.integers(0, 3))):
            steps.append(
                {
                    "kind": "calls",
                    "count": draw(st.integers(1, 3)),
                    "thinking": draw(st.booleans()),
                    "words": draw(st.sampled_from([5, 50, 500])),
                }
            )
        if draw(st.booleans()):
            steps.append({"kind": "reply", "words": draw(st.sampled_from([5, 80]))})
    return steps


def text(tag: str, words: int) -> str:
    return f"{tag} " + "word " * words


def chat_body(steps: list[dict[str, Any]]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You help."}]
    call = 0
    for number, step in enumerate(steps):
        if step["kind"] == "user":
            messages.append({"role": "user", "content": text(f"user{number}", step["words"])})
        elif step["kind"] == "reply":
            messages.append({"role": "assistant", "content": text(f"assistant{number}", step["words"])})
        else:
            ids = [f"call_{call + n}" for n in range(step["count"])]
            call += len(ids)
            calls = [{"id": i, "type": "function", "function": {"name": "lookup", "arguments": "{}"}} for i in ids]
            messages.append({"role": "assistant", "content": text(f"assistant{number}", 5), "tool_calls": calls})
            messages += [{"role": "tool", "tool_call_id": i, "content": text("result", step["words"])} for i in ids]
    return {"model": "m", "messages": messages}


def responses_body(steps: list[dict[str, Any]]) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    call = 0
    for number, step in enumerate(steps):
        if step["kind"] == "user":
            items.append({"role": "user", "content": text(f"user{number}", step["words"])})
        elif step["kind"] == "reply":
            content = [{"type": "output_text", "text": text(f"assistant{number}", step["words"])}]
            items.append({"type": "message", "role": "assistant", "id": f"msg_{number}", "content": content})
        else:
            if step["thinking"]:
                summary = [{"type": "summary_text", "text": text("thinking", 20)}]
                items.append({"type": "reasoning", "id": f"rs_{number}", "summary": summary})
            ids = [f"call_{call + n}" for n in range(step["count"])]
            call += len(ids)
            items += [
                {"type": "function_call", "id": f"fc_{i}", "call_id": i, "name": "lookup", "arguments": "{}"}
                for i in ids
            ]
            items += [
                {"type": "function_call_output", "call_id": i, "output": text("result", step["words"])} for i in ids
            ]
    return {"model": "m", "instructions": "You help.", "input": items}


def anthropic_body(steps: list[dict[str, Any]]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    call = 0
    for number, step in enumerate(steps):
        if step["kind"] == "user":
            block = {"type": "text", "text": text(f"user{number}", step["words"])}
            if messages and messages[-1]["role"] == "user":
                messages[-1]["content"].append(block)  # after tool results, in the same message
            else:
                messages.append({"role": "user", "content": [block]})
        elif step["kind"] == "reply":
            reply = {"type": "text", "text": text(f"assistant{number}", step["words"])}
            messages.append({"role": "assistant", "content": [reply]})
        else:
            ids = [f"toolu_{call + n}" for n in range(step["count"])]
            call += len(ids)
            blocks: list[dict[str, Any]] = []
            if step["thinking"]:
                blocks.append({"type": "thinking", "thinking": text("thinking", 20), "signature": f"sig{number}"})
            blocks.append({"type": "text", "text": text(f"assistant{number}", 5)})
            blocks += [{"type": "tool_use", "id": i, "name": "lookup", "input": {}} for i in ids]
            messages.append({"role": "assistant", "content": blocks})
            results = [{"type": "tool_result", "tool_use_id": i, "content": text("result", step["words"])} for i in ids]
            messages.append({"role": "user", "content": results})
    if messages[-1]["role"] == "assistant":  # a request ends with what the user (or a tool) said
        messages.append({"role": "user", "content": [{"type": "text", "text": "go on"}]})
    return {"model": "m", "max_tokens": 64, "system": "You help.", "messages": messages}


def compacted(api: API, body: dict[str, Any], strategy: CompactionStrategy) -> dict[str, Any]:
    """What the strategy keeps of ``body``, written back in the API's shape."""
    if api == "chat":
        messages = from_openai(body["messages"])
        return {**body, "messages": to_openai(apply_compaction_sync(messages, strategy=strategy))}
    if api == "responses":
        messages = from_responses(body["input"])
        kept = to_responses(apply_compaction_sync(messages, strategy=strategy))
        return {**body, "input": kept_as_given(kept, body["input"])}
    messages = [*from_anthropic(body["messages"])]
    projection = apply_compaction_sync(messages, strategy=strategy)
    opened = opened_by_user(projection, messages, tokenizer=TOKENS)
    system, written = to_anthropic(projection if opened is None else opened)
    assert system is None
    return {**body, "messages": written}


def spoken(api: API, body: dict[str, Any]) -> set[str]:
    """Every text the assistant said in ``body``."""
    found: set[str] = set()
    for item in body["messages" if api != "responses" else "input"]:
        if item.get("role") != "assistant":
            continue
        content = item.get("content")
        if isinstance(content, str):
            found.add(content)
        for block in content if isinstance(content, list) else []:
            if block.get("type") in ("text", "output_text"):
                found.add(block["text"])
    return found


def user_texts(api: API, body: dict[str, Any]) -> list[str]:
    found: list[str] = []
    for item in body["messages" if api != "responses" else "input"]:
        if item.get("role") != "user":
            continue
        content = item.get("content")
        if isinstance(content, str):
            found.append(content)
        for block in content if isinstance(content, list) else []:
            if block.get("type") in ("text", "input_text"):
                found.append(block["text"])
    return found


BODIES = {"chat": chat_body, "responses": responses_body, "anthropic": anthropic_body}


@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
@settings(
    max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(steps=scripts(), name=st.sampled_from(sorted(STRATEGIES)))
def test_what_every_strategy_keeps_of_a_valid_body_is_valid(api: API, steps: list[dict[str, Any]], name: str) -> None:
    check_valid_out(api, steps, name)


def check_valid_out(api: API, steps: list[dict[str, Any]], name: str) -> None:
    body = BODIES[api](steps)
    assert problems_for(api, body) == [], "the generator writes bodies the API takes"
    before = json.dumps(body)
    out = compacted(api, body, STRATEGIES[name])
    assert problems_for(api, out) == [], (name, [str(p) for p in problems_for(api, out)])
    said = spoken(api, body)
    assert not [t for t in user_texts(api, out) if t in said], "an assistant's words sent as the user's"
    assert json.dumps(body) == before, "the client's body is never modified"


@pytest.mark.stress
@pytest.mark.parametrize("half", ["half_1", "half_2"])
@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
@settings(
    max_examples=sized(full=1_750, small=60), deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
@given(steps=scripts(), name=st.sampled_from(sorted(STRATEGIES)))
def test_stress_valid_in_valid_out(half: str, api: API, steps: list[dict[str, Any]], name: str) -> None:
    """10,500 conversations in all at the full size (1,750 per API in each half of the stress run)."""
    check_valid_out(api, steps, name)
