"""What the LangChain and OpenAI Agents SDK adapters share: turning contextledger's frozen
metadata back into the plain data (dicts and lists) a framework's own messages hold."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["plain"]


def plain(value: Any) -> Any:
    """A mutable deep copy of frozen JSON-like data (read-only mappings and tuples become dicts and
    lists), as a framework's own messages hold it."""
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value
