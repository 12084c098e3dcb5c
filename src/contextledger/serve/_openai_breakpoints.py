"""Explicit OpenAI cache breakpoints (``prompt_cache_breakpoint``) the proxy places for the models that take them.

From the GPT-5.6 family on, OpenAI writes a cache entry only where a breakpoint stands: one it
places itself near the newest user or tool message, and those a request marks on its content blocks
(``"prompt_cache_breakpoint": {"mode": "explicit"}`` on a text part of a system, developer, user
or tool message, never an assistant's), at most four writes a request with the provider's own among
them.  An entry is read only whole, so a request whose start is stable but whose later part changed
(a compaction cut that moved, a new question after a long system prompt) reads nothing unless a
breakpoint sits where its stable part ends; and every write costs 1.25x the input price.  Earlier
models refuse the field, so it is sent only to models whose name starts with one of the configured
prefixes (``ServeConfig.cache_breakpoint_models``, ``serve --cache-breakpoint-models``;
``gpt-5.6`` by default).

Where: the end of the stable prefix, that is the last text part of the last system or developer
message before the conversation (after it come only the messages a compaction may cut), so a
request whose cut moved still reads its instructions and tools.  The provider's own breakpoint
already covers the end of the request, which the next request of a growing conversation reads; a
mark there adds nothing, nor does one further back (``benchmarks/cache.py`` prices the candidates
under the ``gpt-5.6`` profile, and this is the cheapest).  A Responses request whose instructions
are only the top-level ``instructions`` string has no content block there to mark and is left to
the provider's breakpoint.

Never: for another model; when the client marked any block itself (its marks are neither moved nor
joined); when the client set ``prompt_cache_options`` to ``explicit`` mode (it chose its writes).
The proxy adds one mark at most, so with the provider's own a request makes at most two writes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from contextledger._openai_cache import BREAKPOINT_FIELD, DEFAULT_BREAKPOINT_MODELS, model_takes_breakpoints, with_mark

__all__ = [
    "BREAKPOINT_FIELD",
    "DEFAULT_BREAKPOINT_MODELS",
    "chat_with_breakpoint",
    "responses_with_breakpoint",
    "takes_breakpoints",
]

_INSTRUCTION_ROLES = ("system", "developer")
_MARKER = BREAKPOINT_FIELD.encode("ascii")


def takes_breakpoints(payload: dict[str, Any], prefixes: Sequence[str]) -> bool:
    """Whether the proxy may mark ``payload``: its model is one the prefixes name, the client chose
    no explicit cache mode, and nothing in the top-level fields marks a block already."""
    if not model_takes_breakpoints(payload.get("model"), prefixes):
        return False
    options = payload.get("prompt_cache_options")
    return not (isinstance(options, dict) and options.get("mode") == "explicit")


def _marked(value: Any) -> bool:
    """Whether ``value`` (a message or item, as bytes or as its JSON value) holds a breakpoint."""
    if isinstance(value, bytes):
        return _MARKER in value
    if isinstance(value, dict):
        return BREAKPOINT_FIELD in value or any(_marked(item) for item in value.values())
    if isinstance(value, list):
        return any(_marked(item) for item in value)
    return False


def _value(item: Any) -> Any:
    return json.loads(item) if isinstance(item, bytes) else item


def _mark_instructions(messages: list[Any], text_types: tuple[str, ...]) -> list[Any] | None:
    """``messages`` (bytes or values, each kept as it came unless marked) with the last leading
    system or developer message marked, written back in the form it came in; None if none takes it."""
    last = None
    for position, item in enumerate(messages):
        value = _value(item)
        if not isinstance(value, dict) or value.get("role") not in _INSTRUCTION_ROLES:
            break
        if value.get("type", "message") != "message":
            break
        last = position, item, value
    if last is None:
        return None
    position, item, value = last
    marked = with_mark(value, text_types)
    if marked is None:
        return None
    written: Any = json.dumps(marked, ensure_ascii=False).encode("utf-8") if isinstance(item, bytes) else marked
    return [*messages[:position], written, *messages[position + 1 :]]


def chat_with_breakpoint(payload: dict[str, Any], messages: list[Any], prefixes: Sequence[str]) -> list[Any] | None:
    """A chat completions request's ``messages`` (each as bytes or as its value) with the proxy's
    breakpoint at the end of its instructions, or None when the request is left as it is (see the
    module docstring)."""
    if not takes_breakpoints(payload, prefixes) or any(map(_marked, messages)):
        return None
    return _mark_instructions(messages, ("text",))


def responses_with_breakpoint(payload: dict[str, Any], items: list[Any], prefixes: Sequence[str]) -> list[Any] | None:
    """A Responses request's ``input`` items (each as bytes or as its value) with the proxy's
    breakpoint at the end of its leading system or developer items, or None when the request is
    left as it is (see the module docstring)."""
    if not takes_breakpoints(payload, prefixes) or any(map(_marked, items)):
        return None
    return _mark_instructions(items, ("input_text", "text"))
