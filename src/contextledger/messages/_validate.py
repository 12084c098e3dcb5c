"""Checking a message list before it is sent: what a chat-completions API would reject.

The rules are the pairing rules of design.md#compaction-groups as chat-completions payloads need them: a tool call's
results follow it before any other non-tool message, no result without its call, no call id used
twice.  Compaction never makes a list fail this check that passed it (the property tests hold it
to that), so users and tests run it on what compaction sends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextledger.exceptions import InvalidMessageError, UnknownRoleError
from contextledger.messages._contents import FunctionCallContent, FunctionResultContent
from contextledger.messages._message import Message
from contextledger.messages._openai import message_from_openai


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason a message list would be rejected by a chat-completions API."""

    index: int
    code: str
    detail: str

    def __str__(self) -> str:
        return f"message {self.index}: {self.code}: {self.detail}"


def validate(messages: Sequence[Message | Mapping[str, Any]]) -> list[Problem]:
    """Report what makes a message list invalid to send: orphan tool results, calls without all
    their results, duplicate call ids, unknown roles or malformed dicts.

    A tool call's results must follow it, before any other non-tool message
    (reasoning-only assistant messages may sit between them).  An empty list of
    problems means the list is safe to send.
    """
    problems: list[Problem] = []
    pending: dict[str, int] = {}  # call id -> index of the message that made the call
    seen_calls: set[str] = set()
    answered: set[str] = set()

    def close_block() -> None:
        for call_id, where in pending.items():
            problems.append(
                Problem(where, "missing_tool_result", f"tool call {call_id!r} has no result before the next message")
            )
        pending.clear()

    for index, item in enumerate(messages):
        if isinstance(item, Message):
            message = item
        else:
            try:
                message = message_from_openai(item, position=index)
            except InvalidMessageError as error:
                code = "unknown_role" if isinstance(error, UnknownRoleError) else "malformed_message"
                problems.append(Problem(index, code, str(error)))
                continue
        contents = message.contents
        if message.role == "tool":
            for result in contents:
                if not isinstance(result, FunctionResultContent):
                    continue
                if result.call_id in pending:
                    del pending[result.call_id]
                    answered.add(result.call_id)
                elif result.call_id in answered:
                    problems.append(
                        Problem(index, "duplicate_tool_result", f"call {result.call_id!r} was already answered")
                    )
                elif result.call_id in seen_calls:
                    problems.append(
                        Problem(
                            index,
                            "misplaced_tool_result",
                            f"result for call {result.call_id!r} does not directly follow its call",
                        )
                    )
                else:
                    problems.append(
                        Problem(index, "orphan_tool_result", f"no preceding call has id {result.call_id!r}")
                    )
            continue
        if pending and message.is_reasoning_only:
            continue
        if pending:
            close_block()
        for call in contents:
            if not isinstance(call, FunctionCallContent):
                continue
            if call.call_id in seen_calls:
                problems.append(Problem(index, "duplicate_call_id", f"call id {call.call_id!r} is used twice"))
                continue
            seen_calls.add(call.call_id)
            pending[call.call_id] = index
    close_block()
    problems.sort(key=lambda p: p.index)
    return problems
