"""Each provider's structural rules for a request body, checked on the body as it goes on the wire.

A body that breaks one of these rules is refused by the provider with a 400, after the request
has crossed the network and, for a proxy, after the client has waited for it.  Checking the body
here lets the proxy answer at once with the same refusal and lets compaction prove that what it
sends still keeps the rules.  The checks are written from each API's reference, one rule each;
every :class:`Problem` names the rule by a stable ``code`` and says what to change.

Only structure is refused: the pairing of calls with their results, the order of roles, empty
texts, duplicate ids, limits.  Fields, block types and item types not named here pass through
unchecked, because providers add them every month and refusing one would break a client that is
right.  No check raises: any JSON value, however malformed, gives a list of problems.

Each function makes one pass over its body, so the proxy can run it on every request.
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import attrgetter
from typing import Any, Literal

from contextledger.messages._validate import Problem

__all__ = ["anthropic_problems", "chat_problems", "problems_for", "responses_problems"]

BODY = -1
"""The position given to a problem of the whole body rather than of one message or item."""

MAX_CACHE_BREAKPOINTS = 4
"""Anthropic allows at most four ``cache_control`` marks in one request."""


def problems_for(api: Literal["chat", "responses", "anthropic"], payload: Mapping[str, Any]) -> list[Problem]:
    """The problems of a body for the API it is sent to, so a caller holding the API's name needs
    no table of its own."""
    if api == "anthropic":
        return anthropic_problems(payload)
    if api == "responses":
        return responses_problems(payload)
    return chat_problems(payload)


def _sorted(problems: list[Problem]) -> list[Problem]:
    problems.sort(key=attrgetter("index"))  # stable: problems at one position keep the order they were found in
    return problems


def _not_a_body(payload: object) -> list[Problem]:
    return [Problem(BODY, "malformed_body", f"the body must be a JSON object, got {type(payload).__name__}")]


def _present(value: object) -> bool:
    """Whether an optional field was given: absent, ``null`` and ``""`` all mean it was not."""
    return value is not None and value != ""


# Anthropic Messages --------------------------------------------------------------------------------------


def anthropic_problems(payload: Mapping[str, Any]) -> list[Problem]:
    """What Anthropic's Messages API would refuse in a request body (``messages``, ``system``,
    ``tools``).

    The rules, from the API reference and its tool-use guide:

    - ``messages`` holds at least one message, and the first is the user's.
    - A role is ``user`` or ``assistant``; instructions go in the top-level ``system``.
    - Consecutive messages of one role are joined by the API into one turn, so every rule below
      reads a run of same-role messages as one turn.
    - Every ``tool_use`` of an assistant turn is answered by a ``tool_result`` with its id in the
      very next turn, which is the user's; those results open that turn, before any other block.
    - A ``tool_result`` answers a ``tool_use`` of the assistant turn just before it.
    - ``tool_use`` ids are unique in the request.
    - Every message has content (not ``""``, not ``[]``) except an optional final assistant
      message, which the model continues; no text block is empty.
    - At most four ``cache_control`` breakpoints, counted over ``tools``, ``system`` blocks and
      message blocks (those inside a tool result too).

    Thinking blocks must reach the API exactly as the model wrote them; one body cannot show an
    edit, so that rule is left to the code that keeps the history.
    """
    if not isinstance(payload, Mapping):
        return _not_a_body(payload)
    problems: list[Problem] = []
    marks = _marks_in(payload.get("tools")) + _system_marks(payload.get("system"), problems)
    if marks > MAX_CACHE_BREAKPOINTS:
        problems.append(_too_many_marks(BODY, marks, "tools and system"))
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        problems.append(
            Problem(BODY, "no_messages", "the body has no messages; send a list with at least one user message")
            if messages is None or messages == []
            else Problem(BODY, "malformed_body", '"messages" must be a list of message objects')
        )
        return _sorted(problems)

    last = len(messages) - 1
    turn_role: object = None
    used_ids: set[str] = set()
    asked: dict[str, int] = {}  # tool_use ids of the current assistant turn -> message index
    awaited: dict[str, int] = {}  # ids the current user turn must answer -> index of the tool_use
    answered: set[str] = set()  # ids answered in the current user turn
    results_may_come = False  # the current user turn holds only tool results so far

    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            problems.append(Problem(index, "malformed_message", "a message must be an object with a role and content"))
            continue
        role = message.get("role")
        if role not in ("user", "assistant"):  # a tuple: a role that is a list must not be hashed
            detail = f"role {_shown(role)} is not 'user' or 'assistant'; put instructions in the top-level system"
            problems.append(Problem(index, "unknown_role", detail))
            continue
        if index == 0 and role != "user":
            problems.append(
                Problem(index, "first_message_not_user", "the first message must be the user's; start with a user turn")
            )
        if role != turn_role:
            if role == "assistant":
                _unanswered(awaited, problems)
                asked = {}
            else:
                awaited, asked = asked, {}
                answered = set()
                results_may_come = True
            turn_role = role
        content = message.get("content")
        if isinstance(content, str):
            if content:
                results_may_come = False
            elif not (index == last and role == "assistant"):
                problems.append(_empty_content(index))
            continue
        if not isinstance(content, list):
            problems.append(Problem(index, "malformed_message", "content must be a string or a list of content blocks"))
            continue
        if not content and not (index == last and role == "assistant"):
            problems.append(_empty_content(index))
        for block in content:
            if not isinstance(block, Mapping):
                problems.append(Problem(index, "malformed_message", "a content block must be an object with a type"))
                continue
            if block.get("cache_control") is not None:
                marks += 1
                if marks == MAX_CACHE_BREAKPOINTS + 1:
                    problems.append(_too_many_marks(index, marks, "the body"))
            kind = block.get("type")
            if kind == "tool_result":
                marks = _tool_result_content(block.get("content"), index, marks, problems)
                if role != "user":
                    problems.append(Problem(index, "misplaced_tool_block", "a tool_result belongs in a user message"))
                    continue
                _answer(block.get("tool_use_id"), index, results_may_come, awaited, answered, used_ids, problems)
                continue
            results_may_come = False
            if kind == "text":
                if block.get("text") == "":
                    problems.append(_empty_text(index))
            elif kind == "tool_use":
                if role != "assistant":
                    problems.append(
                        Problem(index, "misplaced_tool_block", "a tool_use belongs in an assistant message")
                    )
                    continue
                _ask(block.get("id"), index, asked, used_ids, problems)
    _unanswered(awaited if turn_role == "user" else asked, problems)
    return _sorted(problems)


def _ask(tool_use_id: object, index: int, asked: dict[str, int], used: set[str], problems: list[Problem]) -> None:
    if not isinstance(tool_use_id, str) or not tool_use_id:
        problems.append(Problem(index, "malformed_tool_use", "a tool_use needs a non-empty string id"))
    elif tool_use_id in used:
        problems.append(
            Problem(index, "duplicate_tool_use_id", f"tool_use id {tool_use_id!r} is used twice; give each its own")
        )
    else:
        used.add(tool_use_id)
        asked[tool_use_id] = index


def _answer(
    tool_use_id: object,
    index: int,
    results_may_come: bool,
    awaited: dict[str, int],
    answered: set[str],
    used: set[str],
    problems: list[Problem],
) -> None:
    if not results_may_come:
        detail = "tool_result blocks must open the user turn, before any text or other block; move them first"
        problems.append(Problem(index, "tool_result_not_first", detail))
    if not isinstance(tool_use_id, str):
        problems.append(Problem(index, "malformed_tool_result", "a tool_result needs the tool_use_id it answers"))
    elif tool_use_id in awaited:
        del awaited[tool_use_id]
        answered.add(tool_use_id)
    elif tool_use_id in answered:
        problems.append(
            Problem(index, "duplicate_tool_result", f"tool_use {tool_use_id!r} is answered twice; keep one result")
        )
    elif tool_use_id in used:
        problems.append(
            Problem(
                index,
                "orphan_tool_result",
                f"tool_use {tool_use_id!r} is not in the assistant turn just before; "
                "a result must directly follow its call",
            )
        )
    else:
        detail = f"no tool_use has id {tool_use_id!r}; drop the result or keep the call it answers"
        problems.append(Problem(index, "orphan_tool_result", detail))


def _unanswered(waiting: dict[str, int], problems: list[Problem]) -> None:
    for tool_use_id, index in waiting.items():
        detail = f"tool_use {tool_use_id!r} has no tool_result opening the next user turn; answer it or drop it"
        problems.append(Problem(index, "tool_use_unanswered", detail))


def _tool_result_content(content: object, index: int, marks: int, problems: list[Problem]) -> int:
    """Count the breakpoints inside a tool result and refuse its empty texts, as the API reads its
    blocks like any other."""
    if not isinstance(content, list):
        return marks
    for block in content:
        if not isinstance(block, Mapping):
            continue
        if block.get("cache_control") is not None:
            marks += 1
            if marks == MAX_CACHE_BREAKPOINTS + 1:
                problems.append(_too_many_marks(index, marks, "the body"))
        if block.get("type") == "text" and block.get("text") == "":
            problems.append(_empty_text(index))
    return marks


def _marks_in(blocks: object) -> int:
    if not isinstance(blocks, list):
        return 0
    return sum(1 for block in blocks if isinstance(block, Mapping) and block.get("cache_control") is not None)


def _system_marks(system: object, problems: list[Problem]) -> int:
    if not isinstance(system, list):
        return 0
    for block in system:
        if isinstance(block, Mapping) and block.get("type") == "text" and block.get("text") == "":
            problems.append(Problem(BODY, "empty_text_block", "a system text block is empty; drop it or give it text"))
    return _marks_in(system)


def _too_many_marks(index: int, marks: int, where: str) -> Problem:
    return Problem(
        index,
        "too_many_cache_breakpoints",
        f"more than {MAX_CACHE_BREAKPOINTS} cache_control marks ({marks} so far in {where}); "
        "keep at most four, on the blocks whose prefix should be cached",
    )


def _empty_content(index: int) -> Problem:
    return Problem(
        index,
        "empty_content",
        "the message has empty content; only a final assistant message may, so drop it or give it a block",
    )


def _empty_text(index: int) -> Problem:
    return Problem(index, "empty_text_block", 'a text block has text ""; drop the block or give it text')


def _shown(value: object) -> str:
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


def responses_problems(payload: Mapping[str, Any]) -> list[Problem]:
    """What the Responses API would refuse in a request body's ``input``.

    The rules, from the API reference and its function-calling guide:

    - ``input`` is a string (always valid) or a non-empty list of items.
    - A call the client runs (``function_call``, ``custom_tool_call``, ``computer_call``,
      ``local_shell_call``, ``shell_call``, ``apply_patch_call``) is answered by its output item
      (``<type>_output``) with the same ``call_id``, after it; an output answers a call.  An
      ``mcp_approval_response`` answers the ``mcp_approval_request`` whose ``id`` it names.
    - Call ids are unique among calls, and item ``id``\\ s among items.
    - A ``reasoning`` item is followed by the item it reasoned for, so it is never last.
    - Message items have the role ``user``, ``assistant``, ``system`` or ``developer``.

    With ``previous_response_id`` or ``conversation`` the earlier items are held upstream, so an
    output whose call is not in this input is expected.  A ``compaction`` item stands for the
    items before it in the same way: items before the newest one are held by it, so neither a call
    before it without its output nor an output without its call is a fault.  An approval request
    left unanswered is the client declining to answer, not a fault.
    """
    if not isinstance(payload, Mapping):
        return _not_a_body(payload)
    items = payload.get("input")
    if items is None or isinstance(items, str):
        return []  # a string is one user message; no input at all is for the API to judge with `prompt`
    if not isinstance(items, list):
        return [Problem(BODY, "malformed_body", '"input" must be a string or a list of items')]
    if not items:
        return [Problem(BODY, "empty_input", "the input list is empty; send at least one item, or a string")]
    held_upstream = _present(payload.get("previous_response_id")) or _present(payload.get("conversation"))
    problems: list[Problem] = []
    call_ids: set[str] = set()
    item_ids: set[str] = set()
    waiting: dict[str, int] = {}  # calls after the newest compaction item awaiting output -> index
    early: dict[str, int] = {}  # outputs whose call has not come (yet) -> index
    requests: set[str] = set()
    early_responses: dict[str, int] = {}
    kind: object = None

    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            problems.append(Problem(index, "malformed_item", "an input item must be an object"))
            kind = None
            continue
        kind = item.get("type")
        if not isinstance(kind, str):
            kind = None  # a type that is a list or an object is no type we know, and must not be hashed
        item_id = item.get("id")
        if isinstance(item_id, str) and kind != "local_shell_call_output":  # that output's id is its call's
            if item_id in item_ids:
                problems.append(
                    Problem(index, "duplicate_item_id", f"item id {item_id!r} is used twice; send each item once")
                )
            else:
                item_ids.add(item_id)
        if kind in _OUTPUT_OF_CALL:
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                problems.append(Problem(index, "malformed_item", f"a {kind} needs a non-empty string call_id"))
            elif call_id in call_ids:
                problems.append(
                    Problem(index, "duplicate_call_id", f"call_id {call_id!r} is used by two calls; give each its own")
                )
            else:
                call_ids.add(call_id)
                if call_id in early:
                    problems.append(_output_before_call(early.pop(call_id), call_id))
                else:
                    waiting[call_id] = index
        elif kind in _OUTPUTS:
            call_id = item.get("call_id")
            if kind == "local_shell_call_output" and not isinstance(call_id, str):
                call_id = item.get("id")  # older clients name the call by `id`
            if not isinstance(call_id, str) or not call_id:
                problems.append(Problem(index, "malformed_item", f"a {kind} needs the string call_id of its call"))
            elif call_id in waiting:
                del waiting[call_id]
            elif call_id not in call_ids:
                early.setdefault(call_id, index)
        elif kind == "mcp_approval_request":
            if isinstance(item_id, str):
                requests.add(item_id)
                if item_id in early_responses:
                    problems.append(_output_before_call(early_responses.pop(item_id), item_id))
        elif kind == "mcp_approval_response":
            request_id = item.get("approval_request_id")
            if not isinstance(request_id, str):
                problems.append(
                    Problem(index, "malformed_item", "an mcp_approval_response needs the approval_request_id to answer")
                )
            elif request_id not in requests:
                early_responses.setdefault(request_id, index)
        elif kind == "compaction":
            waiting.clear()  # held by the compaction item from here on
            held_upstream = True
        elif kind == "message" or (kind is None and "role" in item):
            role = item.get("role")
            if not isinstance(role, str) or role not in _RESPONSES_ROLES:
                problems.append(
                    Problem(
                        index,
                        "unknown_role",
                        f"role {_shown(role)} is not one of user, assistant, system, developer",
                    )
                )
    if kind == "reasoning":
        problems.append(
            Problem(
                len(items) - 1,
                "reasoning_last",
                "a reasoning item is last; keep the item it reasoned for after it, or drop it",
            )
        )
    for call_id, index in waiting.items():
        problems.append(
            Problem(
                index,
                "call_without_output",
                f"call {call_id!r} has no output item; add its output after it or drop the call",
            )
        )
    if not held_upstream:
        for call_id, index in (*early.items(), *early_responses.items()):
            problems.append(
                Problem(
                    index,
                    "output_without_call",
                    f"nothing in the input is call {call_id!r}; keep the call it answers, or continue "
                    "with previous_response_id",
                )
            )
    return _sorted(problems)


def _output_before_call(index: int, call_id: str) -> Problem:
    return Problem(
        index, "output_before_call", f"the output of call {call_id!r} comes before the call; put the call first"
    )


# Chat completions ----------------------------------------------------------------------------------------

_CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_ASSISTANT_SAYS = ("content", "tool_calls", "function_call", "audio", "refusal")
"""What an assistant message may hold instead of ``content``: with any of them, a null content is fine."""


def chat_problems(payload: Mapping[str, Any]) -> list[Problem]:
    """What a chat-completions API would refuse in a request body's ``messages``, read as it goes
    on the wire.

    The rules, from the Chat Completions reference and its function-calling guide:

    - ``messages`` holds at least one message, each with a known role (``system``,
      ``developer``, ``user``, ``assistant``, ``tool``, or the older ``function``).
    - A message has content: ``content`` may be missing or null only on an assistant message that
      has ``tool_calls`` (or the older ``function_call``, or ``audio`` or a ``refusal``).
    - A tool call has a non-empty string ``id``; a ``function`` call (the type when none is given)
      names its function with a non-empty string and gives its ``arguments`` as a string.
    - Every tool call is answered by a ``tool`` message with its ``tool_call_id`` before the next
      message that is not a tool message; a tool message answers a call of the assistant message
      its run of tool messages follows.
    - Call ids are unique in the request.

    Tool call types other than ``function`` pass through with only their ``id`` checked.
    """
    if not isinstance(payload, Mapping):
        return _not_a_body(payload)
    messages = payload.get("messages")
    if messages is None or messages == []:
        return [Problem(BODY, "no_messages", "the body has no messages; send a list with at least one message")]
    if not isinstance(messages, list):
        return [Problem(BODY, "malformed_body", '"messages" must be a list of message objects')]
    problems: list[Problem] = []
    call_ids: set[str] = set()
    waiting: dict[str, int] = {}  # calls of the assistant message before this run of tool messages
    answered: set[str] = set()

    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            problems.append(Problem(index, "malformed_message", "a message must be an object with a role"))
            continue
        role = message.get("role")
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            problems.append(Problem(index, "malformed_message", "content must be a string, a list of parts or null"))
        if role == "tool":
            if content is None:
                problems.append(_no_content(index, "a tool message needs content: the call's result"))
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                problems.append(
                    Problem(index, "malformed_message", "a tool message needs the string tool_call_id it answers")
                )
            elif call_id in waiting:
                del waiting[call_id]
                answered.add(call_id)
            elif call_id in answered:
                problems.append(
                    Problem(index, "duplicate_tool_result", f"call {call_id!r} is answered twice; keep one result")
                )
            elif call_id in call_ids:
                problems.append(
                    Problem(
                        index,
                        "misplaced_tool_result",
                        f"call {call_id!r} is not in the assistant message before this run of tool messages; "
                        "a result must directly follow its call",
                    )
                )
            else:
                problems.append(
                    Problem(
                        index,
                        "orphan_tool_result",
                        f"no preceding call has id {call_id!r}; drop the result or keep its call",
                    )
                )
            continue
        _close(waiting, problems)
        answered.clear()
        if not isinstance(role, str) or role not in _CHAT_ROLES:
            problems.append(
                Problem(
                    index,
                    "unknown_role",
                    f"role {_shown(role)} is not one of system, developer, user, assistant, tool",
                )
            )
            continue
        if role != "assistant":
            if content is None:
                problems.append(_no_content(index, f"a {role} message needs content"))
            continue
        tool_calls = message.get("tool_calls")
        if tool_calls is not None and not isinstance(tool_calls, list):
            problems.append(Problem(index, "malformed_tool_call", "tool_calls must be a list of calls"))
        elif tool_calls:
            for call in tool_calls:
                _check_call(call, index, call_ids, waiting, problems)
        if content is None and not tool_calls and not any(message.get(key) for key in _ASSISTANT_SAYS):
            problems.append(_no_content(index, "an assistant message needs content or tool_calls"))
    _close(waiting, problems)
    return _sorted(problems)


def _check_call(call: object, index: int, call_ids: set[str], waiting: dict[str, int], problems: list[Problem]) -> None:
    if not isinstance(call, Mapping):
        problems.append(Problem(index, "malformed_tool_call", "a tool call must be an object with an id"))
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
            problems.append(
                Problem(
                    index,
                    "malformed_tool_call",
                    f"tool call {_shown(call_id)} needs a function object with a non-empty name and string arguments",
                )
            )
    elif not isinstance(kind, str):
        problems.append(Problem(index, "malformed_tool_call", f"tool call {_shown(call_id)}: type must be text"))
    if not isinstance(call_id, str) or not call_id:
        problems.append(Problem(index, "malformed_tool_call", "a tool call needs a non-empty string id"))
    elif call_id in call_ids:
        problems.append(Problem(index, "duplicate_call_id", f"call id {call_id!r} is used twice; give each its own"))
    else:
        call_ids.add(call_id)
        waiting[call_id] = index


def _close(waiting: dict[str, int], problems: list[Problem]) -> None:
    for call_id, index in waiting.items():
        problems.append(
            Problem(
                index,
                "missing_tool_result",
                f"tool call {call_id!r} has no tool message before the next message; answer it or drop the call",
            )
        )
    waiting.clear()


def _no_content(index: int, what: str) -> Problem:
    return Problem(index, "no_content", f"{what}; give it content (text or parts)")
