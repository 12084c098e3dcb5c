"""Deprecated: import the triggers from :mod:`contextledger.compaction`.

This module was public in 0.1.0 and became private when the compaction package was split into one
module per concern.  A public name that moves stays importable under its old name for one minor
version, with a warning that says where it went (design.md#versions): this alias goes in 0.6.0.
"""

from __future__ import annotations

import warnings

from contextledger.compaction._triggers import (
    Not,
    Threshold,
    Trigger,
    all_of,
    always,
    any_of,
    groups_exceed,
    has_tool_calls,
    messages_exceed,
    never,
    tokens_below,
    tokens_exceed,
    turns_exceed,
)

__all__ = [
    "Not",
    "Threshold",
    "Trigger",
    "all_of",
    "always",
    "any_of",
    "groups_exceed",
    "has_tool_calls",
    "messages_exceed",
    "never",
    "tokens_below",
    "tokens_exceed",
    "turns_exceed",
]

warnings.warn(
    "contextledger.compaction.triggers is deprecated and goes in 0.6.0: import the triggers from "
    "contextledger.compaction (from contextledger.compaction import turns_exceed)",
    DeprecationWarning,
    stacklevel=2,
)
