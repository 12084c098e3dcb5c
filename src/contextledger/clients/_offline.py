"""A deterministic chat model that runs in-process: no network, no weights, same answer every time.

It exists so that demos, tests and the drift lab run anywhere and give identical
results twice.  It is not clever, and does not pretend to be: it answers from the
``key=value`` statements it can see in its context, calls a tool when the question
names it, reports tool results, writes extractive summaries that keep
declarations and prohibitions first, and plays the roles other packages teach it:
a system prompt holding a role's marker gets that role's answer (the facts package
teaches it to transcribe a message's declarations as JSON when its fact writer asks,
so the model needs nothing from the packages above it).  Its usage is counted with
the project's tokenizer and labelled an estimate.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from contextledger._tracing import traced_model_call
from contextledger.clients._protocol import ChatResponse, Usage
from contextledger.exceptions import ConfigurationError, InvalidMessageError
from contextledger.messages import FunctionCallContent, FunctionResultContent, Message
from contextledger.tokenizers import CharacterEstimatorTokenizer, Tokenizer

__all__ = [
    "FACT_WRITER_MARKER",
    "OfflineModel",
]

FACT_WRITER_MARKER = "[contextledger fact writer]"
"""A system prompt holding this asks for the user message's key=value declarations as JSON (the
role ``contextledger.facts`` teaches the offline model)."""

Role = Callable[[str, str], str]
"""How the offline model answers in a role: ``(the last user message, the system prompt) -> reply``."""

# A value stops at a quote too, so a quoted fact in a host-written block reads as its value.
_DECLARATION = re.compile(r'\b([A-Za-z][A-Za-z0-9_]*)\s*=\s*([^;\n"]+)')
_WORD = re.compile(r"[A-Za-z0-9]+")
_TAGGED_BLOCK = re.compile(r"<([A-Za-z_][\w-]*)>.*?</\1>", re.DOTALL)
_RULE_WORDS = ("never", "must", "do not", "don't", "always", "forbidden", "prohibited")
# A reference to what a compacted request set aside, and the head of what recalling one returns
# (the two tools an agent's CompactionProvider(agent_tools=True) offers).
_REF = re.compile(r'ref="([0-9a-f]{6,64})"')
_RECALLED = re.compile(r'\A\[recalled ref="([0-9a-f]{6,64})"')
_RECALLED_ANYWHERE = re.compile(r'\[recalled ref="([0-9a-f]{6,64})"')
_RECALL_TOOL = "recall_context"
_MOST_RECALLS = 3  # a question is given up on after this many recalls
# Words a tool name shares with almost any question; they never pick a tool on their own.
_GENERIC = frozenset({"get", "lookup", "search", "find", "query", "fetch", "list", "run", "tool"})


def _call_id(messages: Sequence[Message], name: str, arguments: Mapping[str, str]) -> str:
    """An id that depends only on the request, so two runs give the same transcript, and that
    differs from every call id the request already holds, so a history stays valid across
    restarts of the model."""
    taken = {c.call_id for m in messages for c in m.contents if isinstance(c, FunctionCallContent)}
    seed = f"{len(messages)}|{name}|{json.dumps(dict(arguments), sort_keys=True)}|{messages[-1].text}"
    digest = hashlib.sha256(seed.encode("utf-8")).hexdigest()
    for width in range(12, len(digest) + 1):
        candidate = f"call_{digest[:width]}"
        if candidate not in taken:
            return candidate
    return f"call_{digest}_{len(taken)}"


def _tool_name(tool: Mapping[str, Any]) -> str | None:
    function = tool.get("function", tool)
    name = function.get("name") if isinstance(function, Mapping) else None
    return name if isinstance(name, str) else None


def _takes_query(tools: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the offered ``recall_context`` declares a ``query`` parameter."""
    for tool in tools:
        if _tool_name(tool) == _RECALL_TOOL:
            function = tool.get("function", tool)
            parameters = function.get("parameters") if isinstance(function, Mapping) else None
            properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
            return isinstance(properties, Mapping) and "query" in properties
    return False


def _recalled_texts(messages: Sequence[Message]) -> list[str] | None:
    """What ``recall_context`` brought back since the last user message, oldest first, when the
    request ends with such a result (None otherwise)."""
    texts: list[str] = []
    for message in reversed(messages):
        if message.role == "user":
            break
        if message.role == "tool":
            texts.extend(c.result for c in message.contents if isinstance(c, FunctionResultContent))
    texts.reverse()
    last = messages[-1]
    ends_with_recall = any(isinstance(c, FunctionResultContent) and _RECALLED.match(c.result) for c in last.contents)
    return [text for text in texts if _RECALLED.match(text)] if ends_with_recall else None


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def _declarations(messages: Sequence[Message]) -> dict[str, str]:
    """Every ``key=value`` the context states; a later statement of a key replaces an earlier one."""
    found: dict[str, str] = {}
    for message in messages:
        if message.role == "tool":
            continue
        # A provider's compaction block is read as the provider's model reads it: its summary.
        text = "\n".join(message.payload_texts()) if message.is_provider_compaction else message.text
        for key, value in _DECLARATION.findall(text):
            if value.strip():
                found[key.lower()] = value.strip()
    return found


class OfflineModel:
    """The built-in offline model (see the module docstring for what it does and does not do).

    ``summary_chars`` caps a summary's length; a request may lower it with
    ``max_chars=``.  Traces know it as model ``offline`` of provider ``contextledger``, and its
    counts as estimates.
    """

    provider_name: ClassVar[str] = "contextledger"
    """The GenAI provider traces name: no vendor's, the library's own model."""

    model: ClassVar[str] = "offline"
    """The name ``--model offline`` gives it on the command line."""

    _roles: ClassVar[dict[str, Role]] = {}

    @classmethod
    def learn_role(cls, marker: str, answer: Role) -> None:
        """Answer a user message with ``answer(user_text, system_prompt)`` whenever the system
        prompt holds ``marker``.  The package that writes such prompts teaches the role when it
        is imported (``contextledger.facts`` its fact writer's), so the dependency runs from it to
        the model and never back; teaching a marker again replaces its answer."""
        if not isinstance(marker, str) or not marker.strip():
            raise ConfigurationError(f"a role's marker must be a non-blank string, got {marker!r}")
        if not callable(answer):
            raise ConfigurationError(f"a role's answer must be callable (user text, system prompt), got {answer!r}")
        cls._roles[marker] = answer

    def __init__(self, *, tokenizer: Tokenizer | None = None, summary_chars: int = 600) -> None:
        if isinstance(summary_chars, bool) or not isinstance(summary_chars, int) or summary_chars < 16:
            raise ConfigurationError(f"summary_chars must be an integer of at least 16, got {summary_chars!r}")
        self.tokenizer: Tokenizer = tokenizer if tokenizer is not None else CharacterEstimatorTokenizer()
        self.summary_chars = summary_chars
        self._calls = 0

    def __repr__(self) -> str:
        return f"OfflineModel(summary_chars={self.summary_chars})"

    @traced_model_call
    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResponse:
        items = list(messages)
        for position, message in enumerate(items):
            if not isinstance(message, Message):
                raise InvalidMessageError(
                    f"OfflineModel: messages[{position}] is {type(message).__name__}, not a Message"
                )
        if not items:
            raise InvalidMessageError("OfflineModel: no messages to answer; send at least one user message")
        reply = self._reply(items, tools or (), options)
        usage = Usage(
            input_tokens=sum(self.tokenizer.count_messages(items)),
            output_tokens=self.tokenizer.count_message(reply),
            is_estimate=self.tokenizer.is_estimate,
        )
        reason = "tool_calls" if reply.function_calls else "stop"
        return ChatResponse(text=reply.text, messages=(reply,), usage=usage, model=self.model, finish_reasons=(reason,))

    # Deciding what to say ---------------------------------------------------------------------

    def _reply(
        self, messages: list[Message], tools: Sequence[Mapping[str, Any]], options: Mapping[str, Any]
    ) -> Message:
        last = messages[-1]
        if last.role == "tool":
            recalled = _recalled_texts(messages)
            if recalled is not None:  # what a recall brought back: answer the question from it, or recall more
                call = self._recall(messages, tools, recalled)
                return Message.assistant(calls=[call]) if call else self._answer_after_recall(messages, recalled)
            return Message.assistant(self._report_results(messages))
        system = " ".join(m.text for m in messages if m.role == "system")
        if last.role == "user":
            for marker, answer in self._roles.items():
                if marker in system:
                    return Message.assistant(answer(last.text, system))
        system = system.lower()
        if "summar" in system and last.role == "user":
            requested = options.get("max_chars", self.summary_chars)
            if isinstance(requested, bool) or not isinstance(requested, int) or requested < 16:
                raise ConfigurationError(f"max_chars must be an integer of at least 16, got {requested!r}")
            limit = min(self.summary_chars, requested)
            return Message.assistant(self._summarise(last.text, limit))
        if tools and last.role == "user":
            call = self._choose_tool(messages, last.text, tools) or self._recall(messages, tools, [])
            if call is not None:
                return Message.assistant(calls=[call])
        return Message.assistant(self._answer(messages, last))

    def _report_results(self, messages: list[Message]) -> str:
        names: dict[str, str] = {}
        for message in messages:
            for content in message.contents:
                if isinstance(content, FunctionCallContent):
                    names[content.call_id] = content.name
        results: list[str] = []
        for message in reversed(messages):
            if message.role != "tool":
                break
            for content in message.contents:
                if isinstance(content, FunctionResultContent):
                    results.append(f"{names.get(content.call_id, 'the tool')} returned {content.result.strip()}")
        return "; ".join(reversed(results)) + "."

    def _choose_tool(
        self, messages: list[Message], question: str, tools: Sequence[Mapping[str, Any]]
    ) -> FunctionCallContent | None:
        asked = _words(question)
        for tool in tools:
            function = tool.get("function", tool)
            name = function.get("name") if isinstance(function, Mapping) else None
            if not isinstance(name, str):
                continue
            if not (set(name.lower().split("_")) - _GENERIC) & asked:
                continue
            parameters = function.get("parameters", {}) if isinstance(function, Mapping) else {}
            properties = parameters.get("properties", {}) if isinstance(parameters, Mapping) else {}
            arguments: dict[str, str] = {}
            subject = _WORD.findall(question)
            if properties and subject:
                required = parameters.get("required") or list(properties)
                arguments[str(required[0])] = subject[-1].lower()
            self._calls += 1
            return FunctionCallContent(_call_id(messages, name, arguments), name, json.dumps(arguments))
        return None

    def _recall(
        self, messages: list[Message], tools: Sequence[Mapping[str, Any]], recalled: list[str]
    ) -> FunctionCallContent | None:
        """A ``recall_context`` call when a question asks what the context (and what was recalled
        so far) does not say, and a reference not yet recalled is in view: the newest first, with
        the question as its query where the tool takes one."""
        offered = any(_tool_name(tool) == _RECALL_TOOL for tool in tools)
        asked = next((at for at in range(len(messages) - 1, -1, -1) if messages[at].role == "user"), None)
        if not offered or asked is None or "?" not in messages[asked].text:
            return None
        # Recalled since the question, its result in view or already collapsed to a line.
        done = {ref for message in messages[asked + 1 :] for ref in _RECALLED_ANYWHERE.findall(message.text)}
        done |= {ref for text in recalled for ref in _RECALLED_ANYWHERE.findall(text[:80])}
        if len(done) >= _MOST_RECALLS:
            return None
        context = [*(Message.user(text) for text in recalled), *messages[: asked + 1]]
        if not self._answer(context, messages[asked]).startswith("I don't know"):
            return None
        # Notices of turns set aside (user messages) first, newest first: the exchanges they stand
        # for are where a declaration would be; then the collapsed lines of tool results.
        earlier = [message for message in reversed(messages[:asked]) if message.role != "tool"]
        for message in sorted(earlier, key=lambda message: message.role != "user"):
            for ref in reversed(_REF.findall(message.text)):
                if ref not in done:
                    self._calls += 1
                    arguments = {"ref": ref}
                    if _takes_query(tools):
                        arguments["query"] = _TAGGED_BLOCK.sub(" ", messages[asked].text).strip()
                    return FunctionCallContent(
                        _call_id(messages, _RECALL_TOOL, arguments), _RECALL_TOOL, json.dumps(arguments)
                    )
        return None

    def _answer_after_recall(self, messages: list[Message], recalled: list[str]) -> Message:
        asked = max(at for at in range(len(messages)) if messages[at].role == "user")
        context = [*(Message.user(text) for text in recalled), *messages[: asked + 1]]
        return Message.assistant(self._answer(context, messages[asked]))

    def _answer(self, messages: list[Message], last: Message) -> str:
        facts = _declarations(messages[:-1]) | _declarations([last])
        # A tagged block the host put in front of the question (facts, retrieved context) is
        # context to answer from, not part of what was asked.
        question = _TAGGED_BLOCK.sub(" ", last.text)
        asked = _words(question)
        relevant = [f"{key}: {value}" for key, value in facts.items() if key in asked]
        if relevant:
            return "From this conversation: " + "; ".join(relevant) + "."
        if "?" in question:
            return "I don't know that from this conversation."
        return "Noted."

    def _summarise(self, transcript: str, limit: int) -> str:
        """Keep what a later turn would need, newest statement of each key winning: declarations
        and rules first, then the most recent other lines, within ``limit`` characters."""
        lines = [line.strip() for line in transcript.splitlines() if line.strip()]
        facts = _declarations([Message.user(line) for line in lines])
        rules = [line for line in lines if any(word in line.lower() for word in _RULE_WORDS)]
        parts: list[str] = []
        if facts:
            parts.append("Facts: " + "; ".join(f"{key}={value}" for key, value in facts.items()) + ".")
        parts.extend(rules)
        parts.extend(line for line in reversed(lines) if line not in rules and "=" not in line)
        summary = ""
        for part in parts:
            candidate = f"{summary} {part}".strip()
            if len(candidate) > limit:
                break
            summary = candidate
        if not summary:  # the first part alone is too long: cut it, never return nothing
            summary = parts[0][: limit - 1].rstrip() + "…" if parts else "Nothing to summarise."
        return summary
