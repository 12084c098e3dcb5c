"""Recording every model call a policy makes, and the canned tools a timeline offers.

The lab measures what reached the model, not what a policy says it sent: each
policy talks to the model through a :class:`RecordingClient`, placed closest to
the model (after any request-view compaction), which keeps an exact copy of
every request, the tools offered, the reply and the usage the provider
reported.  Extra calls (the facts writer, the summariser) go through their own
recording client with their kind, so their cost is counted and shown apart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, cast

from contextledger.clients import ChatClient, ChatResponse, Usage
from contextledger.lab._timeline import Timeline, ToolSpec, Turn
from contextledger.messages import FunctionCallContent, Message

__all__ = ["MODEL", "CallLog", "CallRecord", "RecordingClient", "ToolBox"]

MODEL = "model"


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One call as the model received it; ``kind`` is ``model`` for the policy's own calls."""

    kind: str
    request: tuple[Message, ...]
    tools: tuple[Mapping[str, Any], ...]
    reply: tuple[Message, ...]
    usage: Usage | None


@dataclass
class CallLog:
    """The calls of the current turn, in order; the runner takes them once the turn is over."""

    records: list[CallRecord] = field(default_factory=list)

    def take(self) -> list[CallRecord]:
        taken, self.records = self.records, []
        return taken


class RecordingClient:
    """A chat client that records each call into a :class:`CallLog` and forwards it.

    When ``scripted_reply`` is set the model is not asked and nothing is
    recorded, since nothing was sent.  A scripted turn still runs the tools
    whose results the timeline scripts for it (``scripted_tools``): the first
    reply calls each of them, the agent runs them, and the scripted text
    follows, so a timeline's tool noise enters the conversation on scripted
    turns as on any other.
    """

    def __init__(self, inner: ChatClient, log: CallLog, kind: str = MODEL) -> None:
        self.inner = inner
        self.log = log
        self.kind = kind
        self.scripted_reply: str | None = None
        self.scripted_tools: tuple[str, ...] = ()
        self.scripted_turn = 0

    def __repr__(self) -> str:
        return f"RecordingClient({self.inner!r}, kind={self.kind!r})"

    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResponse:
        if self.scripted_reply is not None:
            if self.scripted_tools and not (messages and messages[-1].role == "tool"):
                calls = [
                    FunctionCallContent(f"scripted-{self.scripted_turn}-{name}", name, "{}")
                    for name in self.scripted_tools
                ]
                reply = Message.assistant(calls=calls)
            else:
                reply = Message.assistant(self.scripted_reply)
            return ChatResponse(text=reply.text, messages=(reply,), usage=None)
        request = tuple(messages)
        offered = tuple(tools or ())
        # The protocol only promises get_response(messages); tools and options are passed on
        # only when there are some, so a minimal client keeps working for tool-free timelines.
        if offered or options:
            forward = cast(Any, self.inner).get_response
            response: ChatResponse = await forward(request, tools=offered or None, **options)
        else:
            response = await self.inner.get_response(request)
        reply_messages = response.messages or (Message.assistant(response.text),)
        self.log.records.append(CallRecord(self.kind, request, offered, tuple(reply_messages), response.usage))
        return response


class ToolBox:
    """The timeline's tools as Python functions whose canned result depends on the current turn."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.turn: Turn | None = None
        self.functions: list[Callable[..., str]] = [self._function(spec) for spec in timeline.tools]

    def result(self, name: str) -> str:
        if self.turn is None:
            for spec in self.timeline.tools:
                if spec.name == name:
                    return spec.default_result
            return f"unknown tool {name!r}"
        return self.timeline.tool_result(self.turn, name)

    def _function(self, spec: ToolSpec) -> Callable[..., str]:
        def canned(query: Annotated[str, "what to look for"] = "") -> str:
            return self.result(spec.name)

        canned.__name__ = canned.__qualname__ = spec.name
        canned.__doc__ = spec.description
        return canned
