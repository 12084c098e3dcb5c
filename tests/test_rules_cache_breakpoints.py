"""OpenAI's explicit cache breakpoints in the request rules: a ``prompt_cache_breakpoint`` is taken on
the content parts of system, developer, user and tool messages (Responses: their items and call
outputs), refused on an assistant's, and a body may write at most four cache entries, the
provider's own breakpoint among them unless ``prompt_cache_options`` asks for explicit mode.
Checked at N-1, N and N+1 marks, whole and fed item by item."""

from __future__ import annotations

from typing import Any

import pytest

from contextledger.messages import chat_problems, responses_problems
from contextledger.messages._rules import item_rules

MARK = {"mode": "explicit"}


def part(text: str, kind: str = "text", marked: bool = True) -> dict[str, Any]:
    return {"type": kind, "text": text, **({"prompt_cache_breakpoint": MARK} if marked else {})}


def chat_body(marks: int, **extra: Any) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": [part("rules", marked=marks > 0)]}]
    for n in range(1, max(marks, 1) + 1):
        messages.append({"role": "user", "content": [part(f"question {n}", marked=n < marks)]})
        messages.append({"role": "assistant", "content": f"answer {n}"})
    messages.append({"role": "user", "content": "and now?"})
    return {"model": "gpt-5.6", "messages": messages, **extra}


def responses_body(marks: int, **extra: Any) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"role": "developer", "content": [part("rules", "input_text", marks > 0)]}]
    for n in range(1, max(marks, 1) + 1):
        items.append({"type": "function_call", "call_id": f"c{n}", "name": "lookup", "arguments": "{}"})
        output = [part(f"row {n}", "input_text", n < marks)]
        items.append({"type": "function_call_output", "call_id": f"c{n}", "output": output})
    items.append({"role": "user", "content": "and now?"})
    return {"model": "gpt-5.6", "input": items, **extra}


def codes(problems: list[Any]) -> list[str]:
    return [problem.code for problem in problems]


@pytest.mark.parametrize(
    ("api", "make", "check"), [("chat", chat_body, chat_problems), ("responses", responses_body, responses_problems)]
)
@pytest.mark.parametrize(
    ("marks", "explicit", "refused"),
    [(3, False, False), (4, False, True), (4, True, False), (5, True, True), (0, False, False)],
)
def test_at_most_four_writes_the_providers_own_among_them(
    api: str, make: Any, check: Any, marks: int, explicit: bool, refused: bool
) -> None:
    body = make(marks, **({"prompt_cache_options": {"mode": "explicit"}} if explicit else {}))
    found = check(body)
    assert codes(found) == (["too_many_cache_breakpoints"] if refused else [])
    # Fed item by item, as the proxy checks a body that continues an earlier one: the same answer.
    rules = item_rules(api)  # type: ignore[arg-type]
    for item in body["messages" if api == "chat" else "input"]:
        rules.feed([item])
    assert codes(rules.problems(body)) == codes(found)
    assert codes(rules.copy().problems(body)) == codes(found)


def test_an_assistants_content_takes_no_breakpoint() -> None:
    chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [part("hello")]}]}
    assert codes(chat_problems(chat)) == ["breakpoint_on_assistant"]
    said = {"type": "message", "role": "assistant", "content": [part("hello", "output_text")]}
    responses = {"input": [{"role": "user", "content": "hi"}, said, {"role": "user", "content": "more"}]}
    assert codes(responses_problems(responses)) == ["breakpoint_on_assistant"]
    tool = {"role": "tool", "tool_call_id": "c1", "content": [part("row")]}
    call = {
        "role": "assistant",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }
    assert chat_problems({"messages": [{"role": "user", "content": "hi"}, call, tool]}) == []
