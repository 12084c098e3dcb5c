"""An OpenAI-compatible chat endpoint on 127.0.0.1 that answers from the request it receives.

It behaves like a small, literal model: it transcribes declarations when asked by
the fact writer, writes a short summary when asked to summarise, and answers
"What is the current KEY?" with the last value of KEY it can read in the
context.  Usage is reported or left out, as the test chooses, so the lab's
handling of both can be checked over a real HTTP round trip.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from contextledger.clients._offline import FACT_WRITER_MARKER
from contextledger.facts import parse_assertions
from tests.loopback import json_endpoint

_QUESTION = re.compile(r"What is the current (\w+)\?")


@dataclass
class ModelServer:
    url: str = ""
    report_usage: bool = True
    summary: str | None = None  # a fixed summariser reply, to exercise the summary guard
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def kinds(self) -> list[str]:
        return [self.kind(body) for body in self.requests]

    @staticmethod
    def kind(body: dict[str, Any]) -> str:
        system = " ".join(m.get("content") or "" for m in body["messages"] if m["role"] == "system")
        last = body["messages"][-1].get("content") or ""
        if FACT_WRITER_MARKER in system:
            return "writer"
        if "summarise" in system:
            return "summariser"
        if _QUESTION.search(last):
            return "question"
        return "turn"

    def answer(self, body: dict[str, Any]) -> str:
        messages = body["messages"]
        last = messages[-1].get("content") or ""
        kind = self.kind(body)
        if kind == "writer":
            facts = [{"key": c.key, "value": c.value, "evidence": c.evidence} for c in parse_assertions(last)]
            return json.dumps({"facts": facts})
        if kind == "summariser":
            if self.summary is not None:
                return self.summary
            found = re.findall(r"\b\w+=[^;\n]+", last)
            return ("Summary: " + "; ".join(found))[:600]
        question = _QUESTION.search(last)
        if question is not None:
            key = question.group(1)
            context = "\n".join(m.get("content") or "" for m in messages[:-1] if isinstance(m.get("content"), str))
            values = re.findall(rf"\b{key}\s*=\s*\"?([^;\n\"]+)", context)
            return values[-1].strip() if values else "I do not know."
        return "Noted."


@contextmanager
def model_server(**options: Any) -> Iterator[ModelServer]:
    state = ModelServer(**options)

    def respond(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with state.lock:
            state.requests.append(body)
        text = state.answer(body)
        reply: dict[str, Any] = {
            "id": "chatcmpl-lab",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "test-model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        }
        if state.report_usage:
            sent = len(json.dumps(body["messages"]))
            reply["usage"] = {"prompt_tokens": sent // 4, "completion_tokens": len(text) // 4 + 1}
        return 200, reply

    with json_endpoint(respond) as url:
        state.url = url
        yield state
