"""contextledger inside the OpenAI Agents SDK (the ``openai-agents`` extra).

- **Items** convert both ways (:func:`from_responses`, :func:`to_responses`): Responses API input
  items (messages, ``function_call`` / ``function_call_output``, reasoning items, hosted tool
  calls) become contextledger messages and come back as the very same items.  Parallel
  ``function_call`` items become one assistant message, so compaction keeps them and all their
  outputs together; a reasoning item becomes a reasoning-only message, which joins the group of
  the item it precedes, so a reasoning item is never sent without it.  Hosted calls become
  :class:`~contextledger.messages.HostedCallContent`: a self-contained one (web or file search,
  code interpreter, image generation, an MCP call) with its outcome as a
  :class:`~contextledger.messages.HostedResultContent` in the same message, one answered by an
  output item of its own (computer, shell, local shell, apply-patch) with that output as a
  result in the next message, paired by id as function calls are; an MCP approval request and
  its response become the approval contents; a custom tool call and its output are a function
  call and result.  What contextledger has no field for (ids, status, actions, encrypted
  reasoning...) is kept in the reserved property :data:`RESPONSES_PROPERTY`.  A contextledger
  message with several kinds of content (reasoning, text and calls) becomes one item per kind,
  in order.
- **Sessions**: :class:`ContextLedgerSession` is the SDK's ``Session`` over any contextledger
  history (in memory, SQLite, Redis); :class:`CompactingSession` answers ``get_items()`` with
  the request view (what a strategy would send) while the store keeps every item.
- **Controlled facts**: :class:`AgentsFacts` puts the facts block into the instructions of each
  model call, extracts from the run's own user input after a successful run, and forgets from
  the store and from sessions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from contextledger._extras import require_extra

require_extra("agents", extra="openai-agents", feature="contextledger.integrations.openai_agents")

from agents.run_config import CallModelData, ModelInputData  # noqa: E402

from agents import Agent, RunConfig, Runner, RunResult  # noqa: E402
from contextledger.compaction import CompactionStrategy, compact_with_report  # noqa: E402
from contextledger.exceptions import ConfigurationError, FactsError, InvalidMessageError  # noqa: E402
from contextledger.facts import (  # noqa: E402
    FactMemory,
    FactsTurn,
    FactWriter,
    ForgetReport,
    HistoryTarget,
    RuleWriter,
    extract,
    forget_facts,
    history_target,
)
from contextledger.history import HistoryProvider  # noqa: E402
from contextledger.integrations._shared import plain  # noqa: E402
from contextledger.messages import (  # noqa: E402
    ApprovalRequestContent,
    ApprovalResponseContent,
    Content,
    FunctionCallContent,
    FunctionResultContent,
    HostedCallContent,
    HostedResultContent,
    Message,
    OpaqueContent,
    ReasoningContent,
    TextContent,
)
from contextledger.tokenizers import Tokenizer  # noqa: E402

__all__ = [
    "RESPONSES_PROPERTY",
    "AgentsFacts",
    "CompactingSession",
    "ContextLedgerSession",
    "from_responses",
    "to_responses",
]

RESPONSES_PROPERTY = "_responses"
"""``additional_properties`` key holding, per item a message came from, what the item had that
contextledger has no field for (``id``, ``status``, ``encrypted_content``, part annotations...)."""

Item = dict[str, Any]

# Calls answered by an output item of their own: the call's type, the key of its id, and the hosted
# tool it is (None: a client-side function-like call); each output's type, the key naming its call.
_PAIRED_CALLS: dict[str, tuple[str, str | None]] = {
    "custom_tool_call": ("call_id", None),
    "computer_call": ("call_id", "computer"),
    "local_shell_call": ("call_id", "shell"),
    "shell_call": ("call_id", "shell"),
    "apply_patch_call": ("call_id", "apply_patch"),
}
_OUTPUTS: dict[str, tuple[str, str | None]] = {
    "custom_tool_call_output": ("call_id", None),
    "computer_call_output": ("call_id", "computer"),
    "local_shell_call_output": ("id", "shell"),
    "shell_call_output": ("call_id", "shell"),
    "apply_patch_call_output": ("call_id", "apply_patch"),
}
# Hosted calls whose item carries their own outcome (no output item follows): the tool, and the
# field holding the outcome.
_SELF_CONTAINED: dict[str, tuple[str, str | None]] = {
    "web_search_call": ("web_search", None),
    "file_search_call": ("file_search", "results"),
    "code_interpreter_call": ("code_interpreter", "outputs"),
    "image_generation_call": ("image_generation", "result"),
    "mcp_call": ("mcp", "output"),
    "tool_search_call": ("tool_search", None),
}
_CALL_KINDS = (FunctionCallContent, HostedCallContent, ApprovalRequestContent)

_TEXT_TYPES = {"input_text", "output_text"}


def _text_type(role: str) -> str:
    return "output_text" if role == "assistant" else "input_text"


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


# Items to messages ---------------------------------------------------------------------------


def _message_item(item: Mapping[str, Any], where: str) -> tuple[Message, Item]:
    role = item.get("role")
    record: Item = {key: value for key, value in item.items() if key not in ("role", "content")}
    if role == "developer":
        record["role"] = "developer"
        role = "system"
    if role not in ("system", "user", "assistant"):
        raise InvalidMessageError(f"{where}: message role {role!r}; use 'system', 'developer', 'user' or 'assistant'")
    content = item.get("content")
    contents: list[Content] = []
    if isinstance(content, str):
        if content:
            contents.append(TextContent(content))
        else:
            record["empty_text"] = True
    elif isinstance(content, list):
        extras: list[Item | None] = []
        for position, part in enumerate(content):
            if not isinstance(part, Mapping):
                raise InvalidMessageError(f"{where}: content part {position} is {part!r}; parts are objects")
            if part.get("type") in _TEXT_TYPES and isinstance(part.get("text"), str):
                contents.append(TextContent(part["text"]))
                extra = {key: value for key, value in part.items() if key not in ("type", "text")}
                if part["type"] != _text_type(role):
                    extra["type"] = part["type"]
                extras.append(extra or None)
            else:
                contents.append(OpaqueContent(part))
                extras.append(None)
        if any(extras):
            record["parts"] = extras
        if _message_content(contents, role, record) != content:
            record["content_list"] = True
    else:
        raise InvalidMessageError(f"{where}: message content must be a string or a list of parts, got {content!r}")
    return Message(role, tuple(contents)), record


def _item_message(item: Any, where: str) -> tuple[Message, Item] | None:
    """One item as a message and its record, or None for a call item (merged by the caller)."""
    if not isinstance(item, Mapping):
        raise InvalidMessageError(f"{where} is {type(item).__name__}, not a Responses API item (a dict)")
    kind = item.get("type")
    if "role" in item and kind in (None, "message"):
        return _message_item(item, where)
    if kind == "function_call_output":
        call_id, output = item.get("call_id"), item.get("output")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidMessageError(f"{where}: function_call_output has no call_id; it must name its call")
        record = {key: value for key, value in item.items() if key not in ("type", "call_id", "output")}
        if isinstance(output, str):
            result = FunctionResultContent(call_id, output)
        elif isinstance(output, list):
            text = "".join(
                p.get("text", "") for p in output if isinstance(p, Mapping) and p.get("type") == "input_text"
            )
            result = FunctionResultContent(call_id, text, tuple(output))
        else:
            raise InvalidMessageError(f"{where}: function_call_output output must be text or a list, got {output!r}")
        return Message("tool", (result,)), record
    if kind in _OUTPUTS:
        key, tool = _OUTPUTS[kind]
        call_id = item.get(key)
        if not isinstance(call_id, str) or not call_id:
            raise InvalidMessageError(f"{where}: {kind} has no {key!r}; it must name the call it answers")
        output = _as_text(item.get("output"))
        if tool is None:
            return Message("tool", (FunctionResultContent(call_id, output),)), {"item": dict(item)}
        return Message("assistant", (HostedResultContent(call_id, tool, output),)), {"item": dict(item)}
    if kind == "mcp_approval_response":
        request_id = item.get("approval_request_id")
        if not isinstance(request_id, str) or not request_id:
            raise InvalidMessageError(f"{where}: mcp_approval_response has no approval_request_id")
        response = ApprovalResponseContent(request_id, item.get("approve"))  # type: ignore[arg-type]
        return Message("user", (response,)), {"item": dict(item)}
    if kind in _SELF_CONTAINED and isinstance(item.get("id"), str) and item["id"]:
        tool, outcome = _SELF_CONTAINED[kind]
        name = item.get("name")
        name = name if isinstance(name, str) else ""
        arguments = _as_text(item.get("arguments", item.get("action", item.get("code", item.get("queries", "")))))
        output = "" if outcome is None or item.get(outcome) is None else _as_text(item[outcome])
        call = HostedCallContent(item["id"], tool, name, arguments)
        return Message("assistant", (call, HostedResultContent(item["id"], tool, output))), {"item": dict(item)}
    if kind == "reasoning":
        summary = item.get("summary", [])
        if not isinstance(summary, list) or not all(
            isinstance(p, Mapping) and isinstance(p.get("text"), str) for p in summary
        ):
            raise InvalidMessageError(f"{where}: a reasoning item's summary must be a list of text parts")
        record = {key: value for key, value in item.items() if key not in ("type", "summary")}
        if not summary or any(set(p) != {"type", "text"} or p.get("type") != "summary_text" for p in summary):
            record["summary"] = list(summary)  # kept as it came; an empty summary still marks the message
        parts = [ReasoningContent(p["text"]) for p in summary] or [ReasoningContent("")]
        return Message("assistant", tuple(parts)), record
    if kind in ("function_call", "mcp_approval_request") or kind in _PAIRED_CALLS:
        return None
    if isinstance(kind, str):  # a self-contained hosted call, or an item this module does not know
        return Message("assistant", (OpaqueContent(item),)), {"hosted": True}
    raise InvalidMessageError(f"{where} has no 'type' and no 'role'; it is not a Responses API item")


def _call(item: Mapping[str, Any], where: str) -> tuple[Content, Item]:
    kind = item["type"]
    if kind == "function_call":
        call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments", "")
        if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not isinstance(arguments, str):
            raise InvalidMessageError(f"{where}: function_call needs string call_id, name and arguments, got {item!r}")
        record = {key: value for key, value in item.items() if key not in ("type", "call_id", "name", "arguments")}
        return FunctionCallContent(call_id, name, arguments), record
    if kind == "mcp_approval_request":
        request_id, name = item.get("id"), item.get("name")
        if not isinstance(request_id, str) or not request_id or not isinstance(name, str):
            raise InvalidMessageError(f"{where}: mcp_approval_request needs string id and name, got {item!r}")
        call = HostedCallContent(request_id, "mcp", name, _as_text(item.get("arguments", "")))
        return ApprovalRequestContent(request_id, call), {"item": dict(item)}
    key, tool = _PAIRED_CALLS[kind]
    call_id = item.get(key)
    if not isinstance(call_id, str) or not call_id:
        raise InvalidMessageError(f"{where}: {kind} has no {key!r}; its output could not be paired")
    if tool is None:  # a custom tool: run by the client like a function, its input free text
        name = item.get("name")
        return FunctionCallContent(call_id, name if isinstance(name, str) else kind, _as_text(item.get("input", ""))), {
            "item": dict(item)
        }
    arguments = _as_text(item.get("action", item.get("operation", "")))
    return HostedCallContent(call_id, tool, "", arguments), {"item": dict(item)}


def _with_records(message: Message, records: list[Item]) -> Message:
    if not any(records):
        return message
    return Message(message.role, message.contents, additional_properties={RESPONSES_PROPERTY: records})


def from_responses(items: Sequence[Any]) -> list[Message]:
    """Responses API input items as contextledger messages (see the module docstring for the mapping)."""
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
        raise InvalidMessageError(f"expected a list of Responses API items, got {type(items).__name__}")
    messages: list[Message] = []
    calls: list[Content] = []
    call_records: list[Item] = []

    def close_calls() -> None:
        if calls:
            messages.append(_with_records(Message("assistant", tuple(calls)), list(call_records)))
            calls.clear()
            call_records.clear()

    for position, item in enumerate(items):
        where = f"item {position}"
        converted = _item_message(item, where)
        if converted is None:
            call, record = _call(item, where)
            calls.append(call)
            call_records.append(record)
            continue
        close_calls()
        message, record = converted
        messages.append(_with_records(message, [record]))
    close_calls()
    return messages


# Messages to items ---------------------------------------------------------------------------


def _message_content(contents: Sequence[Content], role: str, record: Mapping[str, Any]) -> str | list[Item]:
    extras = list(record.get("parts") or [])
    if not record.get("content_list") and not extras:
        if not contents and record.get("empty_text"):
            return ""
        if len(contents) == 1 and isinstance(contents[0], TextContent) and contents[0].text:
            return contents[0].text
    parts: list[Item] = []
    for position, content in enumerate(contents):
        if isinstance(content, TextContent):
            extra = dict(plain(extras[position])) if position < len(extras) and extras[position] else {}
            part_type = extra.pop("type", _text_type(role))
            parts.append({"type": part_type, "text": content.text, **extra})
        elif isinstance(content, OpaqueContent):
            parts.append(plain(content.data))
        else:
            raise InvalidMessageError(f"a {role} message part cannot be {type(content).__name__} in a Responses item")
    return parts


def _message_items(message: Message) -> list[Item]:
    records: list[Mapping[str, Any]] = list(message.additional_properties.get(RESPONSES_PROPERTY) or ())
    record: Mapping[str, Any] = records[0] if len(records) == 1 else {}
    if record.get("item") is not None:
        return [plain(record["item"])]
    if record.get("hosted") and len(message.contents) == 1 and isinstance(message.contents[0], OpaqueContent):
        return [plain(message.contents[0].data)]
    if message.role == "tool":
        items = []
        for content in message.contents:
            if not isinstance(content, FunctionResultContent):
                raise InvalidMessageError(f"a tool message holds tool results only, not {type(content).__name__}")
            output: Any = content.result if content.parts is None else plain(content.parts)
            items.append({"type": "function_call_output", "call_id": content.call_id, "output": output})
        if len(items) == 1:
            items[0].update(plain(record))
        return items
    if message.role == "assistant" and message.is_reasoning_only:
        item: Item = {"type": "reasoning"}
        rest = {key: value for key, value in plain(record).items() if key != "summary"}
        if "summary" in record:
            item["summary"] = plain(record["summary"])
        else:
            item["summary"] = [{"type": "summary_text", "text": c.text} for c in message.contents]  # type: ignore[union-attr]
        if message.message_id is not None and "id" not in rest:
            item["id"] = message.message_id
        return [{**item, **rest}]
    calls = [c for c in message.contents if isinstance(c, _CALL_KINDS)]
    if calls and len(calls) == len(message.contents):
        items = []
        for position, call in enumerate(calls):
            call_record: Mapping[str, Any] = records[position] if position < len(records) else {}
            if call_record.get("item") is not None:
                items.append(plain(call_record["item"]))
                continue
            if not isinstance(call, FunctionCallContent):
                items.append(_native_item(call))
                continue
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": call.arguments,
                    **plain(call_record),
                }
            )
        return items
    if any(isinstance(c, (*_CALL_KINDS, ReasoningContent, FunctionResultContent)) for c in message.contents):
        return _split(message)
    if any(isinstance(c, (HostedResultContent, ApprovalResponseContent)) for c in message.contents):
        return [_native_item(c) for c in message.contents]
    role = "developer" if record.get("role") == "developer" else message.role
    head = {
        key: value for key, value in plain(record).items() if key not in ("role", "parts", "content_list", "empty_text")
    }
    return [{"role": role, "content": _message_content(message.contents, message.role, record), **head}]


def _split(message: Message) -> list[Item]:
    """A message with several kinds of content: one item per run of one kind, in order."""
    items: list[Item] = []
    run: list[Content] = []

    def flush() -> None:
        if run:
            items.extend(_message_items(Message(message.role, tuple(run))))
            run.clear()

    for content in message.contents:
        if isinstance(content, FunctionResultContent):
            raise InvalidMessageError(f"an {message.role} message cannot carry a tool result in a Responses item")
        if isinstance(content, (HostedResultContent, ApprovalResponseContent)):
            answers_last_call = (
                isinstance(content, HostedResultContent)
                and bool(run)
                and isinstance(run[-1], HostedCallContent)
                and run[-1].call_id == content.call_id
                and content.tool in _SELF_CONTAINED_TOOLS
            )
            if not answers_last_call:  # a self-contained hosted call's outcome travels in its call item
                flush()
                items.append(_native_item(content))
            continue
        if run and _kind(content) != _kind(run[-1]):
            flush()
        run.append(content)
    flush()
    return items


def _kind(content: Content) -> str:
    """Which item a content goes to: reasoning, a call, or a message."""
    if isinstance(content, ReasoningContent):
        return "reasoning"
    return "call" if isinstance(content, _CALL_KINDS) else "message"


_SELF_CONTAINED_TOOLS = frozenset(tool for tool, _ in _SELF_CONTAINED.values())
_HOSTED_ITEM_TYPES = {
    "computer": ("computer_call", "call_id"),
    "shell": ("shell_call", "call_id"),
    "apply_patch": ("apply_patch_call", "call_id"),
    **{tool: (kind, "id") for kind, (tool, _) in _SELF_CONTAINED.items()},
}


def _native_item(content: Content) -> Item:
    """The item for a hosted call, result or approval that did not come from a Responses item
    (from another framework, say): its type from the tool, its provider fields from ``data``."""
    if isinstance(content, HostedCallContent):
        kind, key = _HOSTED_ITEM_TYPES.get(content.tool, (f"{content.tool}_call", "call_id"))
        item: Item = {"type": kind, key: content.call_id, **plain(content.data)}
        if content.name:
            item["name"] = content.name
        if content.arguments:
            item["arguments"] = content.arguments
        return item
    if isinstance(content, HostedResultContent):
        kind, key = _HOSTED_ITEM_TYPES.get(content.tool, (f"{content.tool}_call", "call_id"))
        return {"type": f"{kind}_output", key: content.call_id, "output": content.output, **plain(content.data)}
    if isinstance(content, ApprovalRequestContent):
        return {
            "type": "mcp_approval_request",
            "id": content.request_id,
            "name": content.call.name,
            "arguments": content.call.arguments,
            **plain(content.data),
        }
    if isinstance(content, ApprovalResponseContent):
        return {
            "type": "mcp_approval_response",
            "approval_request_id": content.request_id,
            "approve": content.approved,
            **plain(content.data),
        }
    raise InvalidMessageError(f"{type(content).__name__} has no Responses API item of its own")


def to_responses(messages: Sequence[Message]) -> list[Item]:
    """contextledger messages as Responses API input items; items that came from
    :func:`from_responses` come back exactly as they were."""
    items: list[Item] = []
    for position, message in enumerate(messages):
        if not isinstance(message, Message):
            raise InvalidMessageError(f"message {position} is {type(message).__name__}, not a contextledger Message")
        items.extend(_message_items(message))
    return items


# Sessions ------------------------------------------------------------------------------------


class ContextLedgerSession:
    """The Agents SDK's ``Session`` over a contextledger history (in memory, SQLite or Redis).

    ``Runner.run(agent, input, session=ContextLedgerSession(SQLiteHistoryProvider(path), "user-1"))``:
    items are stored as contextledger messages (so the same history serves a contextledger
    agent, the drift lab or the CLI) and come back as the same items.  Each ``add_items`` is
    stored whole or not at all, as the history promises.
    """

    session_settings: Any = None

    def __init__(self, history: HistoryProvider, session_id: str) -> None:
        if not isinstance(history, HistoryProvider):
            raise ConfigurationError(f"history must be a contextledger history provider, got {history!r}")
        if not isinstance(session_id, str) or not session_id:
            raise ConfigurationError(f"session_id must be a non-empty string, got {session_id!r}")
        self.history = history
        self.session_id = session_id

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.history!r}, {self.session_id!r})"

    async def messages(self) -> list[Message]:
        """Every stored message: the full history, whatever a compacting session sends."""
        return await self.history.load(self.session_id)

    async def all_items(self) -> list[Item]:
        """Every stored item, in order."""
        return to_responses(await self.messages())

    async def get_items(self, limit: int | None = None) -> list[Item]:
        items = await self.all_items()
        return items if limit is None else items[-limit:] if limit > 0 else []

    async def add_items(self, items: list[Any]) -> None:
        if items:
            await self.history.append(self.session_id, from_responses([_plain_item(item) for item in items]))

    async def pop_item(self) -> Item | None:
        items = await self.all_items()
        if not items:
            return None
        await self.history.replace(self.session_id, from_responses(items[:-1]))
        return items[-1]

    async def clear_session(self) -> None:
        await self.history.clear(self.session_id)


def _plain_item(item: Any) -> Any:
    """An item as a plain dict (the SDK may hand over pydantic models)."""
    if hasattr(item, "model_dump"):
        return item.model_dump(exclude_unset=True)
    return item


class CompactingSession(ContextLedgerSession):
    """A session whose ``get_items()`` is the request view: what ``strategy`` would send.

    The store keeps every item (:meth:`all_items`); only what the Runner reads to build the
    model's input is compacted, so a call is never separated from its outputs and a reasoning
    item never from the item it precedes.  ``get_items(limit)`` with a limit returns the newest
    stored items as they are: the SDK reads a limited tail to check its own writes.
    """

    def __init__(
        self,
        history: HistoryProvider,
        session_id: str,
        strategy: CompactionStrategy,
        *,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        super().__init__(history, session_id)
        if not isinstance(strategy, CompactionStrategy):
            raise ConfigurationError(f"strategy must be a contextledger CompactionStrategy, got {strategy!r}")
        self.strategy = strategy
        self.tokenizer = tokenizer

    async def get_items(self, limit: int | None = None) -> list[Item]:
        if limit is not None:
            return await super().get_items(limit)
        result = await compact_with_report(await self.messages(), strategy=self.strategy, tokenizer=self.tokenizer)
        return to_responses(result.messages)


# Controlled facts ----------------------------------------------------------------------------


def _input_text(value: str | Sequence[Any]) -> str | None:
    """The run's own user text: the input string, or the text of its user message items."""
    if isinstance(value, str):
        return value if value.strip() else None
    texts = [m.text for m in from_responses([_plain_item(item) for item in value]) if m.role == "user"]
    texts = [text for text in texts if text.strip()]
    return "\n".join(texts) if texts else None


class AgentsFacts:
    """contextledger's controlled facts around OpenAI Agents SDK runs.

    ``await facts.run(agent, "module=Billing", session=session)`` takes the turn's ticket from the
    run's own input, runs ``Runner.run`` with the facts block added to the instructions of every
    model call (through ``call_model_input_filter``, so neither the agent nor the session ever
    holds it), and after a successful run has ``writer`` propose from that input and the store
    admit or refuse the whole batch.  A run that raises admits nothing; a refusal never fails a
    run that succeeded and is kept on ``last_turn``.
    """

    def __init__(self, store: FactMemory, writer: FactWriter | None = None) -> None:
        if not isinstance(store, FactMemory):
            raise ConfigurationError(f"AgentsFacts needs a fact store (FactStore or RedisFactStore), got {store!r}")
        if writer is not None and not isinstance(writer, FactWriter):
            raise ConfigurationError(f"writer must have async propose(user_text), got {writer!r}")
        self.store = store
        self.writer: FactWriter = writer if writer is not None else RuleWriter()
        self.last_turn: FactsTurn | None = None

    def __repr__(self) -> str:
        return f"AgentsFacts(store={self.store!r}, writer={self.writer!r})"

    async def input_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """A ``call_model_input_filter``: the model's instructions with the facts block after them."""
        block = self.store.to_prompt_block()
        instructions = data.model_data.instructions
        joined = f"{instructions}\n\n{block}" if instructions and instructions.strip() else block
        return ModelInputData(input=data.model_data.input, instructions=joined)

    async def run(
        self,
        agent: Agent[Any],
        input: str | list[Any],
        *,
        run_config: RunConfig | None = None,
        **kwargs: Any,
    ) -> RunResult:
        """``Runner.run(agent, input, **kwargs)`` with the facts around it (see the class docstring)."""
        if run_config is not None and run_config.call_model_input_filter is not None:
            raise ConfigurationError(
                "run_config already has a call_model_input_filter; call facts.input_filter from yours instead"
            )
        config = RunConfig() if run_config is None else run_config
        config.call_model_input_filter = self.input_filter
        text = _input_text(input)
        begun: FactsTurn | None = None
        if text is not None:
            try:
                begun = FactsTurn(self.store.begin_turn(text))
            except FactsError as error:  # a message over the bound: the run goes on, the facts cannot change
                begun = FactsTurn(None, rejection=error)
        result = await Runner.run(agent, input, run_config=config, **kwargs)
        if begun is not None:
            if begun.ticket is None:
                self.last_turn = begun
            else:
                try:
                    self.last_turn = FactsTurn(begun.ticket, await extract(self.store, self.writer, begun.ticket))
                except FactsError as error:  # refused or stale: reported, never raised into a run that succeeded
                    self.last_turn = FactsTurn(begun.ticket, rejection=error)
        return result

    async def forget(self, key: str | None = None, *, sessions: Sequence[Any] = ()) -> ForgetReport:
        """Forget ``key`` (or every fact) in the store and in each session's stored items.

        :func:`contextledger.facts.forget_facts` does the work (the store first, so no extraction
        in flight can bring a fact back; then each history scrubbed).  A
        :class:`ContextLedgerSession` replaces its stored history at once; any other SDK session is
        cleared and refilled.
        """
        targets = [_session_history(session) for session in sessions]
        return await forget_facts(self.store, key, histories=targets)


def _session_history(session: Any) -> HistoryTarget:
    """An Agents SDK session as a history ``forget`` can rewrite."""
    if isinstance(session, ContextLedgerSession):
        # A contextledger store (maybe shared with an Agent that keeps turn records): all of it.
        return history_target(session.history, session.session_id, session.session_id)

    async def load() -> list[Message]:
        return from_responses([_plain_item(item) for item in await session.get_items()])

    async def refill(messages: list[Message]) -> None:
        await session.clear_session()
        await session.add_items(to_responses(messages))

    return HistoryTarget(str(getattr(session, "session_id", "session")), load, refill)
