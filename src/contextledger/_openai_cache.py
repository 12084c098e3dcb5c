"""OpenAI's explicit cache breakpoints, written on a message: shared by the proxy and the chat client.

From the GPT-5.6 family on, a request may mark the end of a prefix it wants cached with
``"prompt_cache_breakpoint": {"mode": "explicit"}`` on a text part of a system, developer, user or
tool message (an assistant's output takes none); models before that family refuse the field, so
it is written only for a model whose name starts with one of a list of prefixes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["BREAKPOINT_FIELD", "DEFAULT_BREAKPOINT_MODELS", "MARKABLE_ROLES", "model_takes_breakpoints", "with_mark"]

BREAKPOINT_FIELD = "prompt_cache_breakpoint"
DEFAULT_BREAKPOINT_MODELS = ("gpt-5.6",)
MARKABLE_ROLES = ("system", "developer", "user", "tool")


def model_takes_breakpoints(model: object, prefixes: Sequence[str]) -> bool:
    """Whether ``model`` is named by one of ``prefixes`` (case-insensitive; none names no model)."""
    return isinstance(model, str) and model.lower().startswith(tuple(p.lower() for p in prefixes if p))


def with_mark(message: dict[str, Any], text_types: tuple[str, ...], field: str = "content") -> dict[str, Any] | None:
    """``message`` with a breakpoint on the last non-empty text part of its ``field`` (a string is
    made one text part of the first of ``text_types``), or None when it has no such part."""
    content = message.get(field)
    if isinstance(content, str):
        if not content:
            return None
        return {**message, field: [{"type": text_types[0], "text": content, BREAKPOINT_FIELD: {"mode": "explicit"}}]}
    if not isinstance(content, list):
        return None
    for position in range(len(content) - 1, -1, -1):
        part = content[position]
        if isinstance(part, dict) and part.get("type") in text_types and part.get("text"):
            marked = {**part, BREAKPOINT_FIELD: {"mode": "explicit"}}
            return {**message, field: [*content[:position], marked, *content[position + 1 :]]}
    return None
