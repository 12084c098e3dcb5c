"""What each provider's rules remember between the items of a body, so a check can resume.

A stateless client sends its whole history on every request, so a body repeats the one before
it and adds a few items.  Checked from the start each time, the rules would cost the proxy more
on every turn of a long conversation; kept here, the state at the end of one body's items is
copied and only the added items are fed.

What an item settles with the items before it is settled as it is fed, into a list of problems
found in the order the rules would find them in one pass.  What the rest of the body could still
change stays state and is judged only when problems are asked for: a call still waiting for its
result, an output whose call may be held upstream, whether a message is the last, and where the
cache marks of ``system`` and ``tools`` push the count past the limit.  Asking changes nothing, so
more items may follow.

Chat completions and the Responses API are here; Anthropic's Messages API, whose rules are the
longest, is in ``_anthropic_rule_state.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any

from contextledger.messages._validate import Problem

BODY = -1
"""The position given to a problem of the whole body rather than of one message or item."""


def in_order(problems: list[Problem]) -> list[Problem]:
    problems.sort(key=attrgetter("index"))  # stable: problems at one position keep the order they were found in
    return problems


def not_a_body(payload: object) -> list[Problem]:
    return [Problem(BODY, "malformed_body", f"the body must be a JSON object, got {type(payload).__name__}")]


def _present(value: object) -> bool:
    """Whether an optional field was given: absent, ``null`` and ``""`` all mean it was not."""
    return value is not None and value != ""


def shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# Responses API -------------------------------------------------------------------------------------------

_OUTPUT_OF_CALL = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "computer_call": "computer_call_output",
    "local_shell_call": "local_shell_call_output",
    "shell_call": "shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
}
"""The calls the client runs, each answered by an item of its own with the call's ``call_id``.
Hosted calls (``mcp_call``, web and file search, code interpreter, image generation) carry their
output inline and are complete alone."""

_OUTPUTS = frozenset(_OUTPUT_OF_CALL.values())
_RESPONSES_ROLES = frozenset({"user", "assistant", "system", "developer"})


class ResponsesRules:
    """The Responses API's rules over ``input``.

    An output whose call has not come may be answered by a later call (then it came too early)
    or be held upstream (``previous_response_id``, ``conversation``, a later ``compaction``
    item), so it is kept and judged only when problems are asked for.
    """

    __slots__ = (
        "_call_ids",
        "_compacted",
        "_count",
        "_early",
        "_early_responses",
        "_found",
        "_item_ids",
        "_last_kind",
        "_marks",
        "_requests",
        "_waiting",
    )

    def __init__(self) -> None:
        self._found: list[Problem] = []
        self._count = 0
        self._call_ids: set[str] = set()
        self._item_ids: set[str] = set()
        self._waiting: dict[str, int] = {}  # calls after the newest compaction item awaiting output -> index
        self._early: dict[str, int] = {}  # outputs whose call has not come (yet) -> index
        self._requests: set[str] = set()
        self._early_responses: dict[str, int] = {}
        self._compacted = False  # a compaction item holds the items before it
        self._last_kind: object = None
        self._marks = CacheMarks()

    def copy(self) -> ResponsesRules:
        other = ResponsesRules()
        other._found = self._found.copy()
        other._count = self._count
        other._call_ids = self._call_ids.copy()
        other._item_ids = self._item_ids.copy()
        other._waiting = self._waiting.copy()
        other._early = self._early.copy()
        other._requests = self._requests.copy()
        other._early_responses = self._early_responses.copy()
        other._compacted = self._compacted
        other._last_kind = self._last_kind
        other._marks = self._marks.copy()
        return other

    def feed(self, items: Sequence[Any]) -> None:
        found, call_ids, item_ids, waiting, early = (
            self._found,
            self._call_ids,
            self._item_ids,
            self._waiting,
            self._early,
        )
        requests, early_responses, kind = self._requests, self._early_responses, self._last_kind
        for index, item in enumerate(items, self._count):
            if not isinstance(item, Mapping):
                found.append(Problem(index, "malformed_item", "an input item must be an object"))
                kind = None
                continue
            kind = item.get("type")
            if not isinstance(kind, str):
                kind = None  # a type that is a list or an object is no type we know, and must not be hashed
            item_id = item.get("id")
            if isinstance(item_id, str) and kind != "local_shell_call_output":  # that output's id is its call's
                if item_id in item_ids:
                    found.append(
                        Problem(index, "duplicate_item_id", f"item id {item_id!r} is used twice; send each item once")
                    )
                else:
                    item_ids.add(item_id)
            if kind in _OUTPUT_OF_CALL:
                call_id = item.get("call_id")
                if not isinstance(call_id, str) or not call_id:
                    found.append(Problem(index, "malformed_item", f"a {kind} needs a non-empty string call_id"))
                elif call_id in call_ids:
                    found.append(
                        Problem(
                            index, "duplicate_call_id", f"call_id {call_id!r} is used by two calls; give each its own"
                        )
                    )
                else:
                    call_ids.add(call_id)
                    if call_id in early:
                        found.append(_output_before_call(early.pop(call_id), call_id))
                    else:
                        waiting[call_id] = index
            elif kind in _OUTPUTS:
                call_id = item.get("call_id")
                if kind == "local_shell_call_output" and not isinstance(call_id, str):
                    call_id = item.get("id")  # older clients name the call by `id`
                if not isinstance(call_id, str) or not call_id:
                    found.append(Problem(index, "malformed_item", f"a {kind} needs the string call_id of its call"))
                elif call_id in waiting:
                    del waiting[call_id]
                elif call_id not in call_ids:
                    early.setdefault(call_id, index)
            elif kind == "mcp_approval_request":
                if isinstance(item_id, str):
                    requests.add(item_id)
                    if item_id in early_responses:
                        found.append(_output_before_call(early_responses.pop(item_id), item_id))
            elif kind == "mcp_approval_response":
                request_id = item.get("approval_request_id")
                if not isinstance(request_id, str):
                    detail = "an mcp_approval_response needs the approval_request_id to answer"
                    found.append(Problem(index, "malformed_item", detail))
                elif request_id not in requests:
                    early_responses.setdefault(request_id, index)
            elif kind == "compaction":
                waiting.clear()  # held by the compaction item from here on
                self._compacted = True
            elif kind == "message" or (kind is None and "role" in item):
                role = item.get("role")
                if not isinstance(role, str) or role not in _RESPONSES_ROLES:
                    detail = f"role {shown(role)} is not one of user, assistant, system, developer"
                    found.append(Problem(index, "unknown_role", detail))
                self._marks.feed(index, role, item.get("content"), found)
            if kind in _OUTPUTS:
                self._marks.feed(index, "tool", item.get("output"), found)
        self._count += len(items)
        self._last_kind = kind

    def problems(self, payload: Mapping[str, Any]) -> list[Problem]:
        if not isinstance(payload, Mapping):
            return not_a_body(payload)
        if not self._count:
            return [Problem(BODY, "empty_input", "the input list is empty; send at least one item, or a string")]
        problems = self._found.copy()
        problems += self._marks.problems(payload)
        if self._last_kind == "reasoning":
            detail = "a reasoning item is last; keep the item it reasoned for after it, or drop it"
            problems.append(Problem(self._count - 1, "reasoning_last", detail))
        for call_id, index in self._waiting.items():
            detail = f"call {call_id!r} has no output item; add its output after it or drop the call"
            problems.append(Problem(index, "call_without_output", detail))
        held_upstream = (
            self._compacted or _present(payload.get("previous_response_id")) or _present(payload.get("conversation"))
        )
        if not held_upstream:
            for call_id, index in (*self._early.items(), *self._early_responses.items()):
                detail = (
                    f"nothing in the input is call {call_id!r}; keep the call it answers, or continue "
                    "with previous_response_id"
                )
                problems.append(Problem(index, "output_without_call", detail))
        return in_order(problems)


MAX_CACHE_WRITES = 4
"""OpenAI (from the GPT-5.6 family) writes at most four cache entries a request: its own breakpoint
near the newest message (unless ``prompt_cache_options`` asks for explicit mode) and the
``prompt_cache_breakpoint`` marks on content parts."""


class CacheMarks:
    """OpenAI's explicit cache breakpoints in a body: a mark on an assistant's content is refused
    (assistant output takes none), and more marks than the request may write are refused once the
    body's ``prompt_cache_options`` say whether the provider's own breakpoint is one of them.
    Whether the model takes the field at all is the upstream's to say (earlier models refuse it)."""

    __slots__ = ("_at",)

    def __init__(self) -> None:
        self._at: list[int] = []  # where the marks are, as far as the fifth

    def copy(self) -> CacheMarks:
        other = CacheMarks()
        other._at = self._at.copy()
        return other

    def feed(self, index: int, role: object, content: object, found: list[Problem]) -> None:
        if type(content) is not list:
            return
        for part in content:
            if type(part) is dict and "prompt_cache_breakpoint" in part:
                if role == "assistant":
                    detail = "an assistant's content takes no prompt_cache_breakpoint; mark a user, tool or system part"
                    found.append(Problem(index, "breakpoint_on_assistant", detail))
                elif len(self._at) <= MAX_CACHE_WRITES:
                    self._at.append(index)

    def problems(self, payload: Mapping[str, Any]) -> list[Problem]:
        options = payload.get("prompt_cache_options")
        explicit = isinstance(options, Mapping) and options.get("mode") == "explicit"
        most = MAX_CACHE_WRITES if explicit else MAX_CACHE_WRITES - 1
        if len(self._at) <= most:
            return []
        detail = (
            f"more than {most} prompt_cache_breakpoint marks: a request writes at most {MAX_CACHE_WRITES} cache "
            "entries"
            + ("" if explicit else ", the provider's own breakpoint among them")
            + "; keep the marks whose prefix should be cached"
        )
        return [Problem(self._at[most], "too_many_cache_breakpoints", detail)]


def _output_before_call(index: int, call_id: str) -> Problem:
    return Problem(
        index, "output_before_call", f"the output of call {call_id!r} comes before the call; put the call first"
    )


# Chat completions ----------------------------------------------------------------------------------------

_CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_ASSISTANT_SAYS = ("content", "tool_calls", "function_call", "audio", "refusal")
"""What an assistant message may hold instead of ``content``: with any of them, a null content is fine."""


class ChatRules:
    """The chat-completions rules over ``messages``.

    Calls of the newest assistant message stay waiting until a message that is not a tool
    message closes their run, or the body ends, which only problems know.
    """

    __slots__ = ("_answered", "_call_ids", "_count", "_found", "_marks", "_waiting")

    def __init__(self) -> None:
        self._found: list[Problem] = []
        self._count = 0
        self._call_ids: set[str] = set()
        self._waiting: dict[str, int] = {}  # calls of the assistant message before this run of tool messages
        self._answered: set[str] = set()
        self._marks = CacheMarks()

    def copy(self) -> ChatRules:
        other = ChatRules()
        other._found = self._found.copy()
        other._count = self._count
        other._call_ids = self._call_ids.copy()
        other._waiting = self._waiting.copy()
        other._answered = self._answered.copy()
        other._marks = self._marks.copy()
        return other

    def feed(self, items: Sequence[Any]) -> None:
        found, call_ids, waiting, answered = self._found, self._call_ids, self._waiting, self._answered
        for index, message in enumerate(items, self._count):
            if not isinstance(message, Mapping):
                found.append(Problem(index, "malformed_message", "a message must be an object with a role"))
                continue
            role = message.get("role")
            content = message.get("content")
            if type(content) is list:
                self._marks.feed(index, role, content, found)
            if content is not None and not isinstance(content, (str, list)):
                found.append(Problem(index, "malformed_message", "content must be a string, a list of parts or null"))
            if role == "tool":
                if content is None:
                    found.append(_no_content(index, "a tool message needs content: the call's result"))
                call_id = message.get("tool_call_id")
                if not isinstance(call_id, str) or not call_id:
                    detail = "a tool message needs the string tool_call_id it answers"
                    found.append(Problem(index, "malformed_message", detail))
                elif call_id in waiting:
                    del waiting[call_id]
                    answered.add(call_id)
                elif call_id in answered:
                    detail = f"call {call_id!r} is answered twice; keep one result"
                    found.append(Problem(index, "duplicate_tool_result", detail))
                elif call_id in call_ids:
                    detail = (
                        f"call {call_id!r} is not in the assistant message before this run of tool messages; "
                        "a result must directly follow its call"
                    )
                    found.append(Problem(index, "misplaced_tool_result", detail))
                else:
                    detail = f"no preceding call has id {call_id!r}; drop the result or keep its call"
                    found.append(Problem(index, "orphan_tool_result", detail))
                continue
            if waiting:
                found.extend(_missing_results(waiting))
                waiting.clear()
            answered.clear()
            if not isinstance(role, str) or role not in _CHAT_ROLES:
                detail = f"role {shown(role)} is not one of system, developer, user, assistant, tool"
                found.append(Problem(index, "unknown_role", detail))
                continue
            if role != "assistant":
                if content is None:
                    found.append(_no_content(index, f"a {role} message needs content"))
                continue
            tool_calls = message.get("tool_calls")
            if tool_calls is not None and not isinstance(tool_calls, list):
                found.append(Problem(index, "malformed_tool_call", "tool_calls must be a list of calls"))
            elif tool_calls:
                for call in tool_calls:
                    _check_call(call, index, call_ids, waiting, found)
            if content is None and not tool_calls and not any(message.get(key) for key in _ASSISTANT_SAYS):
                found.append(_no_content(index, "an assistant message needs content or tool_calls"))
        self._count += len(items)

    def problems(self, payload: Mapping[str, Any]) -> list[Problem]:
        if not isinstance(payload, Mapping):
            return not_a_body(payload)
        if not self._count:
            return [Problem(BODY, "no_messages", "the body has no messages; send a list with at least one message")]
        return in_order([*self._found, *_missing_results(self._waiting), *self._marks.problems(payload)])


def _check_call(call: object, index: int, call_ids: set[str], waiting: dict[str, int], found: list[Problem]) -> None:
    if not isinstance(call, Mapping):
        found.append(Problem(index, "malformed_tool_call", "a tool call must be an object with an id"))
        return
    call_id = call.get("id")
    kind = call.get("type", "function")
    if kind == "function":
        function = call.get("function")
        if not (
            isinstance(function, Mapping)
            and isinstance(function.get("name"), str)
            and function.get("name")
            and isinstance(function.get("arguments"), str)
        ):
            detail = f"tool call {shown(call_id)} needs a function object with a non-empty name and string arguments"
            found.append(Problem(index, "malformed_tool_call", detail))
    elif not isinstance(kind, str):
        found.append(Problem(index, "malformed_tool_call", f"tool call {shown(call_id)}: type must be text"))
    if not isinstance(call_id, str) or not call_id:
        found.append(Problem(index, "malformed_tool_call", "a tool call needs a non-empty string id"))
    elif call_id in call_ids:
        found.append(Problem(index, "duplicate_call_id", f"call id {call_id!r} is used twice; give each its own"))
    else:
        call_ids.add(call_id)
        waiting[call_id] = index


def _missing_results(waiting: dict[str, int]) -> list[Problem]:
    return [
        Problem(
            index,
            "missing_tool_result",
            f"tool call {call_id!r} has no tool message before the next message; answer it or drop the call",
        )
        for call_id, index in waiting.items()
    ]


def _no_content(index: int, what: str) -> Problem:
    return Problem(index, "no_content", f"{what}; give it content (text or parts)")
