"""Anthropic's rules, resumable like the others in ``_rule_state.py``: what they remember between
the messages of a body."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contextledger.messages._rule_state import BODY, in_order, not_a_body, shown
from contextledger.messages._validate import Problem

MAX_CACHE_BREAKPOINTS = 4
"""Anthropic allows at most four ``cache_control`` marks in one request."""


class AnthropicRules:
    """Anthropic's rules over ``messages``, a run of same-role messages read as one turn.

    The count of cache marks starts from ``system`` and ``tools``, which only the payload
    holds, so the first message marks are kept with the place their problem would take, and the
    one that goes past four is chosen when problems are asked for.
    """

    __slots__ = (
        "_answered",
        "_asked",
        "_awaited",
        "_count",
        "_empty_reply",
        "_found",
        "_marks",
        "_results_may_come",
        "_turn_role",
        "_used_ids",
    )

    def __init__(self) -> None:
        self._found: list[Problem] = []
        self._count = 0
        self._turn_role: object = None
        self._used_ids: set[str] = set()
        self._asked: dict[str, int] = {}  # tool_use ids of the current assistant turn -> message index
        self._awaited: dict[str, int] = {}  # ids the current user turn must answer -> index of the tool_use
        self._answered: set[str] = set()  # ids answered in the current user turn
        self._results_may_come = False  # the current user turn holds only tool results so far
        self._empty_reply = -1  # an assistant message without content, fine only if nothing follows it
        self._marks: list[tuple[int, int]] = []  # the first message marks: (message index, place in _found)

    def copy(self) -> AnthropicRules:
        other = AnthropicRules()
        other._found = self._found.copy()
        other._count = self._count
        other._turn_role = self._turn_role
        other._used_ids = self._used_ids.copy()
        other._asked = self._asked.copy()
        other._awaited = self._awaited.copy()
        other._answered = self._answered.copy()
        other._results_may_come = self._results_may_come
        other._empty_reply = self._empty_reply
        other._marks = self._marks.copy()
        return other

    def feed(self, items: Sequence[Any]) -> None:
        found, used_ids, answered, marks = self._found, self._used_ids, self._answered, self._marks
        asked, awaited, turn_role = self._asked, self._awaited, self._turn_role
        results_may_come, empty_reply = self._results_may_come, self._empty_reply
        for index, message in enumerate(items, self._count):
            if empty_reply >= 0:  # it was not the last message after all
                found.append(_empty_content(empty_reply))
                empty_reply = -1
            if not isinstance(message, Mapping):
                found.append(Problem(index, "malformed_message", "a message must be an object with a role and content"))
                continue
            role = message.get("role")
            if role not in ("user", "assistant"):  # a tuple: a role that is a list must not be hashed
                detail = f"role {shown(role)} is not 'user' or 'assistant'; put instructions in the top-level system"
                found.append(Problem(index, "unknown_role", detail))
                continue
            if index == 0 and role != "user":
                detail = "the first message must be the user's; start with a user turn"
                found.append(Problem(index, "first_message_not_user", detail))
            if role != turn_role:
                if role == "assistant":
                    if awaited:
                        found.extend(_unanswered(awaited))
                        awaited.clear()
                else:
                    awaited, asked = asked, awaited  # the calls just made are this turn's to answer; `awaited` is empty
                    answered.clear()
                    results_may_come = True
                turn_role = role
            content = message.get("content")
            if isinstance(content, str):
                if content:
                    results_may_come = False
                elif role == "assistant":
                    empty_reply = index
                else:
                    found.append(_empty_content(index))
                continue
            if not isinstance(content, list):
                detail = "content must be a string or a list of content blocks"
                found.append(Problem(index, "malformed_message", detail))
                continue
            if not content:
                if role == "assistant":
                    empty_reply = index
                else:
                    found.append(_empty_content(index))
            for block in content:
                if not isinstance(block, Mapping):
                    found.append(Problem(index, "malformed_message", "a content block must be an object with a type"))
                    continue
                if block.get("cache_control") is not None and len(marks) <= MAX_CACHE_BREAKPOINTS:
                    marks.append((index, len(found)))
                kind = block.get("type")
                if kind == "tool_result":
                    _tool_result_content(block.get("content"), index, marks, found)
                    if role != "user":
                        found.append(Problem(index, "misplaced_tool_block", "a tool_result belongs in a user message"))
                        continue
                    _answer(block.get("tool_use_id"), index, results_may_come, awaited, answered, used_ids, found)
                    continue
                results_may_come = False
                if kind == "text":
                    if block.get("text") == "":
                        found.append(_empty_text(index))
                elif kind == "tool_use":
                    if role != "assistant":
                        detail = "a tool_use belongs in an assistant message"
                        found.append(Problem(index, "misplaced_tool_block", detail))
                        continue
                    _ask(block.get("id"), index, asked, used_ids, found)
        self._count += len(items)
        self._turn_role, self._results_may_come, self._empty_reply = turn_role, results_may_come, empty_reply
        self._asked, self._awaited = asked, awaited

    def problems(self, payload: Mapping[str, Any]) -> list[Problem]:
        if not isinstance(payload, Mapping):
            return not_a_body(payload)
        problems, marks = anthropic_payload_problems(payload)
        if not self._count:
            problems.append(
                Problem(BODY, "no_messages", "the body has no messages; send a list with at least one user message")
            )
            return problems
        found = self._found.copy()
        over = MAX_CACHE_BREAKPOINTS - marks  # the message mark that is one too many, counted from 0
        if 0 <= over < len(self._marks):
            index, place = self._marks[over]
            found.insert(place, _too_many_marks(index, MAX_CACHE_BREAKPOINTS + 1, "the body"))
        problems += found  # an empty reply still waiting is the last message, which the model continues
        problems += _unanswered(self._awaited if self._turn_role == "user" else self._asked)
        return in_order(problems)


def anthropic_payload_problems(payload: Mapping[str, Any]) -> tuple[list[Problem], int]:
    """The problems of ``system`` and ``tools``, and the cache marks they hold, with which the
    count over the messages starts."""
    problems: list[Problem] = []
    system = payload.get("system")
    if isinstance(system, list):
        for block in system:
            if isinstance(block, Mapping) and block.get("type") == "text" and block.get("text") == "":
                problems.append(
                    Problem(BODY, "empty_text_block", "a system text block is empty; drop it or give it text")
                )
    marks = _marks_in(payload.get("tools")) + _marks_in(system)
    if marks > MAX_CACHE_BREAKPOINTS:
        problems.append(_too_many_marks(BODY, marks, "tools and system"))
    return problems, marks


def _ask(tool_use_id: object, index: int, asked: dict[str, int], used: set[str], found: list[Problem]) -> None:
    if not isinstance(tool_use_id, str) or not tool_use_id:
        found.append(Problem(index, "malformed_tool_use", "a tool_use needs a non-empty string id"))
    elif tool_use_id in used:
        found.append(
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
    found: list[Problem],
) -> None:
    if not results_may_come:
        detail = "tool_result blocks must open the user turn, before any text or other block; move them first"
        found.append(Problem(index, "tool_result_not_first", detail))
    if not isinstance(tool_use_id, str):
        found.append(Problem(index, "malformed_tool_result", "a tool_result needs the tool_use_id it answers"))
    elif tool_use_id in awaited:
        del awaited[tool_use_id]
        answered.add(tool_use_id)
    elif tool_use_id in answered:
        found.append(
            Problem(index, "duplicate_tool_result", f"tool_use {tool_use_id!r} is answered twice; keep one result")
        )
    elif tool_use_id in used:
        detail = (
            f"tool_use {tool_use_id!r} is not in the assistant turn just before; a result must directly follow its call"
        )
        found.append(Problem(index, "orphan_tool_result", detail))
    else:
        detail = f"no tool_use has id {tool_use_id!r}; drop the result or keep the call it answers"
        found.append(Problem(index, "orphan_tool_result", detail))


def _unanswered(waiting: dict[str, int]) -> list[Problem]:
    return [
        Problem(
            index,
            "tool_use_unanswered",
            f"tool_use {tool_use_id!r} has no tool_result opening the next user turn; answer it or drop it",
        )
        for tool_use_id, index in waiting.items()
    ]


def _tool_result_content(content: object, index: int, marks: list[tuple[int, int]], found: list[Problem]) -> None:
    """Keep the breakpoints inside a tool result and refuse its empty texts, as the API reads its
    blocks like any other."""
    if not isinstance(content, list):
        return
    for block in content:
        if not isinstance(block, Mapping):
            continue
        if block.get("cache_control") is not None and len(marks) <= MAX_CACHE_BREAKPOINTS:
            marks.append((index, len(found)))
        if block.get("type") == "text" and block.get("text") == "":
            found.append(_empty_text(index))


def _marks_in(blocks: object) -> int:
    if not isinstance(blocks, list):
        return 0
    return sum(1 for block in blocks if isinstance(block, Mapping) and block.get("cache_control") is not None)


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
