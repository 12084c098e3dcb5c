"""contextledger inside LangChain v1 agents and LangGraph graphs (the ``langchain`` extra).

- **Messages** convert both ways without loss (:func:`from_langchain`, :func:`to_langchain`):
  ``SystemMessage``, ``HumanMessage``, ``AIMessage`` with ``tool_calls`` (parallel ones too),
  ``ToolMessage``, content blocks, ids, names and metadata.  What contextledger has no field for
  (``additional_kwargs``, ``response_metadata``, ``usage_metadata``, ``invalid_tool_calls``, a tool
  message's ``status`` and ``artifact``...) travels in the reserved property
  :data:`LANGCHAIN_PROPERTY`; what LangChain has no field for (contextledger's
  ``additional_properties``, such as the summary mark) travels in ``response_metadata`` under
  :data:`METADATA_KEY`, which LangChain never sends to a model.
- **Compaction** where LangChain users put ``trim_messages``: :func:`compaction_runnable` is a
  runnable from a message list to the list a strategy would send; :class:`CompactionMiddleware`
  compacts each model call of a ``create_agent`` agent; :func:`pre_model_hook` is a LangGraph
  pre-model hook (``create_react_agent(pre_model_hook=...)`` or a node of a hand-built graph).
  All three change only what the model sees: the graph state keeps the full history, and the
  messages kept are the caller's own objects.
- **Controlled facts**: :class:`FactsMiddleware` puts the facts block into the system message of
  each model call (never into the state), takes the turn's ticket from the run's new user
  messages before the agent starts, extracts after the agent finished successfully, and forgets
  from the store and from the graph's stored state.

LangChain v1's ``before_model`` hook can only update the state, so the request view is made in
``wrap_model_call``, the hook that changes what one model call sends; ``before_model`` would
rewrite the history itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from contextledger._extras import require_extra

require_extra("langchain_core", extra="langchain", feature="contextledger.integrations.langchain")
require_extra("langgraph", extra="langchain", feature="contextledger.integrations.langchain")
require_extra("langchain.agents", extra="langchain", feature="contextledger.integrations.langchain")

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse  # noqa: E402
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableLambda  # noqa: E402
from langgraph.graph.message import REMOVE_ALL_MESSAGES  # noqa: E402

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
)
from contextledger.integrations._shared import plain  # noqa: E402
from contextledger.messages import (  # noqa: E402
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
    "LANGCHAIN_PROPERTY",
    "METADATA_KEY",
    "CompactionMiddleware",
    "FactsMiddleware",
    "compact_langchain",
    "compaction_runnable",
    "from_langchain",
    "from_langchain_message",
    "pre_model_hook",
    "to_langchain",
    "to_langchain_message",
]

LANGCHAIN_PROPERTY = "_langchain"
"""``additional_properties`` key holding what a LangChain message had that contextledger has no field for."""

METADATA_KEY = "contextledger"
"""``response_metadata`` key holding what a contextledger message had that LangChain has no field for."""

_ROLES = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}
Returned = TypeVar("Returned")


# Messages ------------------------------------------------------------------------------------


def _block_content(block: Any, position: int, where: str, typed: bool = True, tools: Mapping[str, str] = {}) -> Content:
    if isinstance(block, str):
        return TextContent(block)
    if not isinstance(block, Mapping):
        raise InvalidMessageError(f"{where}: content block {position} is {block!r}; blocks are strings or dicts")
    hosted = _hosted_content(block, tools) if typed else None  # a tool result holds no calls
    if hosted is not None:
        return hosted
    keys = set(block)
    if keys == {"type", "text"} and block["type"] == "text" and isinstance(block["text"], str):
        return TextContent(block["text"])
    if typed and keys == {"type", "reasoning"} and block["type"] == "reasoning" and isinstance(block["reasoning"], str):
        return ReasoningContent(block["reasoning"])
    return OpaqueContent(block)


def _hosted_content(block: Mapping[str, Any], tools: Mapping[str, str]) -> Content | None:
    """A server-side tool call or result block as a hosted content (the block's other fields in ``data``)."""
    kind = block.get("type")
    if kind == "server_tool_call":
        call_id, name, args = block.get("id"), block.get("name"), block.get("args")
        if isinstance(call_id, str) and call_id and isinstance(name, str) and name and isinstance(args, Mapping):
            data = {key: value for key, value in block.items() if key not in ("type", "id", "name", "args")}
            return HostedCallContent(call_id, name, name, json.dumps(args, ensure_ascii=False), data)
    if kind == "server_tool_result":
        call_id = block.get("tool_call_id")
        if isinstance(call_id, str) and call_id:
            output = block.get("output")
            text = output if isinstance(output, str) else "" if output is None else json.dumps(output, default=str)
            data = {key: value for key, value in block.items() if key not in ("type", "tool_call_id")}
            return HostedResultContent(call_id, tools.get(call_id, "server_tool"), text, data)
    return None


def _hosted_block(content: HostedCallContent | HostedResultContent) -> dict[str, Any]:
    if isinstance(content, HostedCallContent):
        args = json.loads(content.arguments) if content.arguments.strip() else {}
        return {"type": "server_tool_call", "id": content.call_id, "name": content.name or content.tool, "args": args}
    block = {"type": "server_tool_result", "tool_call_id": content.call_id, **plain(content.data)}
    block.setdefault("status", "success")
    if "output" not in content.data and content.output:
        block["output"] = content.output
    return block


def _content_out(parts: Sequence[Content], strings: Sequence[int], as_list: bool) -> str | list[str | dict[str, Any]]:
    """LangChain's ``content`` for these parts: one text as a string, otherwise a list of blocks."""
    if not as_list and not strings:
        if not parts:
            return ""
        if len(parts) == 1 and isinstance(parts[0], TextContent) and parts[0].text:
            return parts[0].text  # an empty text stays a block: "" is how LangChain says "no content"
    blocks: list[str | dict[str, Any]] = []
    for position, part in enumerate(parts):
        if isinstance(part, TextContent):
            blocks.append(part.text if position in strings else {"type": "text", "text": part.text})
        elif isinstance(part, ReasoningContent):
            blocks.append({"type": "reasoning", "reasoning": part.text})
        elif isinstance(part, OpaqueContent):
            blocks.append(plain(part.data))
        elif isinstance(part, HostedCallContent):
            blocks.append({**_hosted_block(part), **plain(part.data)})
        elif isinstance(part, HostedResultContent):
            blocks.append(_hosted_block(part))
        else:  # approvals: LangChain asks for them by interrupting the graph, not in messages
            raise InvalidMessageError(
                f"{type(part).__name__} has no LangChain content block; resolve the approval before converting"
            )
    return blocks


def _content_in(content: Any, where: str, kept: dict[str, Any], typed: bool = True) -> list[Content]:
    """Parts of a LangChain ``content``; records in ``kept`` what the parts alone would not give back."""
    if isinstance(content, str):
        return [TextContent(content)] if content else []
    if not isinstance(content, list):
        raise InvalidMessageError(f"{where}: content must be a string or a list, got {type(content).__name__}")
    tools = {
        block["id"]: block["name"]
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "server_tool_call" and isinstance(block.get("name"), str)
    }
    parts = [_block_content(block, position, where, typed, tools) for position, block in enumerate(content)]
    strings = [position for position, block in enumerate(content) if isinstance(block, str)]
    if strings:
        kept["string_blocks"] = strings
    if _content_out(parts, strings, False) != content:
        kept["content_list"] = True
    return parts


def from_langchain_message(message: BaseMessage, *, position: int | None = None) -> Message:
    """One LangChain message as contextledger's; :func:`to_langchain_message` gives back an equal one."""
    where = "LangChain message" if position is None else f"LangChain message {position}"
    if not isinstance(message, BaseMessage):
        raise InvalidMessageError(f"{where} is {type(message).__name__}, not a langchain_core BaseMessage")
    role = _ROLES.get(message.type)
    if role is None:
        raise InvalidMessageError(
            f"{where} has type {message.type!r}; contextledger converts system, human, ai and tool messages "
            "(convert a ChatMessage or chunk to one of those first)"
        )
    kept: dict[str, Any] = {}
    metadata = dict(message.response_metadata)
    ours = metadata.pop(METADATA_KEY, None) or {}
    if not isinstance(ours, Mapping):
        raise InvalidMessageError(f"{where}: response_metadata[{METADATA_KEY!r}] must be a dict, got {ours!r}")
    if metadata:
        kept["response_metadata"] = metadata
    if message.additional_kwargs:
        kept["additional_kwargs"] = dict(message.additional_kwargs)
    contents: list[Content]
    if isinstance(message, ToolMessage):
        if not message.tool_call_id:
            raise InvalidMessageError(f"{where}: a ToolMessage needs the tool_call_id of the call it answers")
        if isinstance(message.content, str):
            contents = [FunctionResultContent(message.tool_call_id, message.content)]
        else:
            parts = _content_in(message.content, where, kept, typed=False)
            kept.pop("content_list", None)
            blocks = tuple(
                {"type": "text", "text": part.text} if isinstance(part, TextContent) else plain(part.data)  # type: ignore[union-attr]
                for part in parts
            )
            text = "".join(part.text for part in parts if isinstance(part, TextContent))
            contents = [FunctionResultContent(message.tool_call_id, text, blocks)]
        if message.status != "success":
            kept["status"] = message.status
        if message.artifact is not None:
            kept["artifact"] = message.artifact
    else:
        contents = _content_in(message.content, where, kept)
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if not call.get("id"):
                    raise InvalidMessageError(
                        f"{where}: tool call {call.get('name')!r} has no id; a call needs one so its result can follow"
                    )
                arguments = json.dumps(call["args"], ensure_ascii=False)
                contents.append(FunctionCallContent(str(call["id"]), call["name"], arguments))
            if message.invalid_tool_calls:
                kept["invalid_tool_calls"] = [dict(call) for call in message.invalid_tool_calls]
            if message.usage_metadata is not None:
                kept["usage_metadata"] = dict(message.usage_metadata)
    properties = dict(ours.get("additional_properties") or {})
    if kept:
        properties[LANGCHAIN_PROPERTY] = kept
    return Message(
        role,  # type: ignore[arg-type]
        tuple(contents),
        author_name=message.name,
        message_id=message.id,
        additional_properties=properties,
        extra=ours.get("extra") or {},
        content_form=ours.get("content_form"),
    )


def to_langchain_message(message: Message) -> BaseMessage:
    """One contextledger message as LangChain's.

    An assistant message's text, reasoning and other parts become its ``content`` and its calls
    its ``tool_calls`` (LangChain keeps them apart, so calls come back after the content).
    """
    if not isinstance(message, Message):
        raise InvalidMessageError(f"expected a contextledger Message, got {type(message).__name__}")
    kept: Mapping[str, Any] = message.additional_properties.get(LANGCHAIN_PROPERTY) or {}
    properties = {k: v for k, v in message.additional_properties.items() if k != LANGCHAIN_PROPERTY}
    ours: dict[str, Any] = {}
    if properties:
        ours["additional_properties"] = plain(properties)
    if message.extra:
        ours["extra"] = plain(message.extra)
    if message.content_form is not None:
        ours["content_form"] = message.content_form
    common: dict[str, Any] = {
        "response_metadata": {**plain(kept.get("response_metadata") or {}), **({METADATA_KEY: ours} if ours else {})},
        "additional_kwargs": plain(kept.get("additional_kwargs") or {}),
        "name": message.author_name,
        "id": message.message_id,
    }
    strings = list(kept.get("string_blocks") or ())
    as_list = bool(kept.get("content_list"))
    calls = [c for c in message.contents if isinstance(c, FunctionCallContent)]
    results = [c for c in message.contents if isinstance(c, FunctionResultContent)]
    parts = [c for c in message.contents if not isinstance(c, (FunctionCallContent, FunctionResultContent))]
    if message.role == "tool":
        if len(results) != 1 or parts or calls:
            raise InvalidMessageError(
                f"a LangChain ToolMessage holds exactly one tool result; message {message.message_id!r} has "
                f"{len(results)} results and {len(parts) + len(calls)} other contents"
            )
        result = results[0]
        content: Any = result.result
        if result.parts is not None:
            content = [
                part["text"] if position in strings else plain(part) for position, part in enumerate(result.parts)
            ]
        extra_fields: dict[str, Any] = {}
        if "artifact" in kept:
            extra_fields["artifact"] = plain(kept["artifact"])
        return ToolMessage(
            content=content,
            tool_call_id=result.call_id,
            status=kept.get("status", "success"),
            **extra_fields,
            **common,
        )
    if results or (calls and message.role != "assistant"):
        raise InvalidMessageError(
            f"a {message.role} message cannot carry tool calls or results in LangChain; "
            f"message {message.message_id!r} does"
        )
    content = _content_out(parts, strings, as_list)
    if message.role == "system":
        return SystemMessage(content=content, **common)
    if message.role == "user":
        return HumanMessage(content=content, **common)
    tool_calls = []
    for call in calls:
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except json.JSONDecodeError as error:
            raise InvalidMessageError(
                f"tool call {call.call_id!r} has arguments that are not JSON ({error.msg}); "
                "LangChain keeps a call's arguments as a dict"
            ) from None
        if not isinstance(arguments, dict):
            raise InvalidMessageError(f"tool call {call.call_id!r} has arguments {call.arguments!r}, not a JSON object")
        tool_calls.append({"name": call.name, "args": arguments, "id": call.call_id, "type": "tool_call"})
    return AIMessage(
        content=content,
        tool_calls=tool_calls,
        invalid_tool_calls=plain(kept.get("invalid_tool_calls") or []),
        usage_metadata=plain(kept["usage_metadata"]) if "usage_metadata" in kept else None,
        **common,
    )


def from_langchain(messages: Sequence[BaseMessage]) -> list[Message]:
    """LangChain messages as contextledger's; the first one that cannot be converted raises, naming its position."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidMessageError(f"expected a list of LangChain messages, got {type(messages).__name__}")
    return [from_langchain_message(message, position=position) for position, message in enumerate(messages)]


def to_langchain(messages: Sequence[Message]) -> list[BaseMessage]:
    """contextledger messages as LangChain's."""
    return [to_langchain_message(message) for message in messages]


# Compaction ----------------------------------------------------------------------------------


def _check_strategy(strategy: object) -> CompactionStrategy:
    if not isinstance(strategy, CompactionStrategy):
        raise ConfigurationError(f"strategy must be a contextledger CompactionStrategy, got {strategy!r}")
    return strategy


async def compact_langchain(
    messages: Sequence[BaseMessage], *, strategy: CompactionStrategy, tokenizer: Tokenizer | None = None
) -> list[BaseMessage]:
    """The LangChain messages ``strategy`` would send: kept messages are the caller's own objects,
    summaries are new ones; ``messages`` is not changed."""
    originals = list(messages)
    ours = from_langchain(originals)
    result = await compact_with_report(ours, strategy=_check_strategy(strategy), tokenizer=tokenizer)
    back = {id(converted): original for converted, original in zip(ours, originals)}
    return [back.get(id(message)) or to_langchain_message(message) for message in result.messages]


def _run_sync(coroutine: Coroutine[Any, Any, Returned]) -> Returned:
    """Run a coroutine from synchronous code, also when that code is called inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def compaction_runnable(
    strategy: CompactionStrategy, *, tokenizer: Tokenizer | None = None
) -> RunnableLambda[Any, Any]:
    """A runnable from a list of LangChain messages to the list ``strategy`` would send.

    It goes where ``trim_messages(...)`` goes in a chain (``compaction_runnable(strategy) | model``),
    sync or async; unlike trimming it never separates a tool call from its results.
    """
    chosen = _check_strategy(strategy)

    async def compact(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        return await compact_langchain(_as_messages(messages), strategy=chosen, tokenizer=tokenizer)

    def compact_sync(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        return _run_sync(compact(messages))

    return RunnableLambda(compact_sync, afunc=compact, name=f"contextledger_{chosen.name}")


def _as_messages(value: Any) -> list[BaseMessage]:
    """A message list from what a chain hands on: a list, a prompt value, or a state with ``messages``."""
    if hasattr(value, "to_messages"):
        return list(value.to_messages())
    if isinstance(value, Mapping) and "messages" in value:
        return list(value["messages"])
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return list(value)
    raise InvalidMessageError(f"expected a list of LangChain messages, got {type(value).__name__}")


def pre_model_hook(strategy: CompactionStrategy, *, tokenizer: Tokenizer | None = None) -> RunnableLambda[Any, Any]:
    """A LangGraph pre-model hook: from the graph state to ``{"llm_input_messages": projection}``.

    LangGraph sends ``llm_input_messages`` to the model and leaves ``messages`` (the state's
    history) as it was, so the model sees the projection and the state keeps everything.  Use it
    as ``create_react_agent(..., pre_model_hook=pre_model_hook(strategy))`` or as a node of a
    hand-built graph whose model node reads ``llm_input_messages``.
    """
    chosen = _check_strategy(strategy)

    async def hook(state: Any) -> dict[str, Any]:
        messages = _as_messages(state)
        return {"llm_input_messages": await compact_langchain(messages, strategy=chosen, tokenizer=tokenizer)}

    def hook_sync(state: Any) -> dict[str, Any]:
        return _run_sync(hook(state))

    return RunnableLambda(hook_sync, afunc=hook, name="contextledger_pre_model_hook")


class CompactionMiddleware(AgentMiddleware):
    """Compacts what each model call of a LangChain v1 agent (``create_agent``) sends.

    ``create_agent(model, tools, middleware=[CompactionMiddleware(strategy)])``: every model call
    sends the projection of the agent's messages; the agent state, and so the checkpointer, keep
    the full history.  The system prompt is never compacted (LangChain keeps it apart).
    """

    def __init__(self, strategy: CompactionStrategy, *, tokenizer: Tokenizer | None = None) -> None:
        super().__init__()
        self.strategy = _check_strategy(strategy)
        self.tokenizer = tokenizer

    def __repr__(self) -> str:
        return f"CompactionMiddleware({self.strategy!r})"

    async def _request(self, request: ModelRequest) -> ModelRequest:
        messages = await compact_langchain(request.messages, strategy=self.strategy, tokenizer=self.tokenizer)
        return request.override(messages=messages)  # type: ignore[arg-type]

    def wrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], ModelResponse],
    ) -> ModelResponse:
        return handler(_run_sync(self._request(request)))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        return await handler(await self._request(request))


# Controlled facts ----------------------------------------------------------------------------


def _new_user_text(messages: Sequence[BaseMessage]) -> tuple[str | None, str | None]:
    """The run's own user text (the human messages after the last non-human one) and the id of the
    last of them, which marks the run; text injected by the library is never among them."""
    texts: list[str] = []
    last_id: str | None = None
    for message in reversed(messages):
        if not isinstance(message, HumanMessage):
            break
        if last_id is None:
            last_id = message.id
        if message.text.strip():
            texts.append(message.text)
    return ("\n".join(reversed(texts)) if texts else None), last_id


class FactsMiddleware(AgentMiddleware):
    """contextledger's controlled facts as LangChain v1 agent middleware.

    ``before_agent`` takes the turn's ticket from the run's new user messages (never from
    replies, tool results or the block itself); each model call gets the facts block appended to
    its system message, which is never written to the state; ``after_agent``, reached only when
    the agent finished without an error, has ``writer`` propose from that text and the store
    admit or refuse the whole batch with the ticket.  A refusal never fails the run: it is kept
    on ``last_turn``.  :meth:`aforget` forgets in the store and rewrites the graph's stored
    messages so the old statement is no longer in front of the model.
    """

    def __init__(self, store: FactMemory, writer: FactWriter | None = None) -> None:
        super().__init__()
        if not isinstance(store, FactMemory):
            raise ConfigurationError(f"FactsMiddleware needs a fact store (FactStore or RedisFactStore), got {store!r}")
        if writer is not None and not isinstance(writer, FactWriter):
            raise ConfigurationError(f"writer must have async propose(user_text), got {writer!r}")
        self.store = store
        self.writer: FactWriter = writer if writer is not None else RuleWriter()
        self.last_turn: FactsTurn | None = None
        self._turns: dict[str, FactsTurn] = {}

    def __repr__(self) -> str:
        return f"FactsMiddleware(store={self.store!r}, writer={self.writer!r})"

    # The three steps, usable on their own in a hand-built graph.

    def begin(self, messages: Sequence[BaseMessage]) -> None:
        """Start the turn of the run whose input ends ``messages``."""
        text, marker = _new_user_text(messages)
        if text is None or marker is None:
            return
        try:
            self._turns[marker] = FactsTurn(self.store.begin_turn(text))
        except FactsError as error:  # a message over the bound: the run goes on, the facts cannot change
            self._turns[marker] = FactsTurn(None, rejection=error)

    def system_message(self, system: SystemMessage | None) -> SystemMessage:
        """``system`` with the facts block after it (or the block alone)."""
        block = self.store.to_prompt_block()
        if system is None or (isinstance(system.content, str) and not system.content.strip()):
            return SystemMessage(content=block)
        if isinstance(system.content, list):  # blocks (cache marks...) kept as they are, the facts after them
            return system.model_copy(update={"content": [*system.content, {"type": "text", "text": block}]})
        return system.model_copy(update={"content": f"{system.content}\n\n{block}"})

    async def finish(self, messages: Sequence[BaseMessage]) -> FactsTurn | None:
        """After a successful run: extract with the ticket taken by :meth:`begin`.

        The run is the newest user message of ``messages`` that began a turn; turns begun by
        older messages of the same history belong to runs that failed, and are dropped.
        """
        marked = [m.id for m in messages if isinstance(m, HumanMessage) and m.id is not None and m.id in self._turns]
        begun = self._turns.pop(marked[-1]) if marked else None
        for stale in marked[:-1]:
            self._turns.pop(stale, None)
        if begun is None:
            return None
        if begun.ticket is None:
            self.last_turn = begun
            return begun
        try:
            self.last_turn = FactsTurn(begun.ticket, await extract(self.store, self.writer, begun.ticket))
        except FactsError as error:  # refused or stale: reported, never raised into a run that succeeded
            self.last_turn = FactsTurn(begun.ticket, rejection=error)
        return self.last_turn

    # The middleware hooks.

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        self.begin(state["messages"])
        return None

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        self.begin(state["messages"])
        return None

    def wrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], ModelResponse],
    ) -> ModelResponse:
        return handler(request.override(system_message=self.system_message(request.system_message)))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        return await handler(request.override(system_message=self.system_message(request.system_message)))

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        _run_sync(self.finish(state["messages"]))
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        await self.finish(state["messages"])
        return None

    # Forgetting.

    async def aforget(self, key: str | None = None, *, graphs: Sequence[tuple[Any, Any]] = ()) -> ForgetReport:
        """Forget ``key`` (or every fact) in the store and in each ``(graph, config)``'s stored messages.

        :func:`contextledger.facts.forget_facts` does the work (the store first, so no extraction
        in flight can bring a fact back; then each history scrubbed); a graph's messages are read
        with ``aget_state`` and written back whole through ``aupdate_state``.
        """
        targets = [_graph_history(graph, config, position) for position, (graph, config) in enumerate(graphs)]
        return await forget_facts(self.store, key, histories=targets)

    def forget(self, key: str | None = None, *, graphs: Sequence[tuple[Any, Any]] = ()) -> ForgetReport:
        """:meth:`aforget` for synchronous code."""
        return _run_sync(self.aforget(key, graphs=graphs))


def _graph_history(graph: Any, config: Any, position: int) -> HistoryTarget:
    """A LangGraph graph's stored ``messages`` for one thread, as a history ``forget`` can rewrite."""

    async def load() -> list[Message]:
        snapshot = await graph.aget_state(config)
        return from_langchain(list(snapshot.values.get("messages", [])))

    async def replace(messages: list[Message]) -> None:
        await graph.aupdate_state(
            config, {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *to_langchain(messages)]}
        )

    return HistoryTarget(f"graph {position}", load, replace)
