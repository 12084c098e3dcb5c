"""Names that moved stay importable for one minor version, with a warning that says where they went."""

from __future__ import annotations

import importlib
import sys

import pytest

import contextledger
from contextledger import compaction
from contextledger.compaction import _triggers


def test_the_old_triggers_module_still_imports_and_warns() -> None:
    sys.modules.pop("contextledger.compaction.triggers", None)
    with pytest.warns(DeprecationWarning, match=r"import the triggers from contextledger\.compaction"):
        old = importlib.import_module("contextledger.compaction.triggers")
    # The very objects the package exports, not copies: old and new code agree.
    for name in old.__all__:
        assert getattr(old, name) is getattr(_triggers, name)
    assert old.turns_exceed is compaction.turns_exceed


def test_the_alias_says_when_it_goes() -> None:
    sys.modules.pop("contextledger.compaction.triggers", None)
    with pytest.warns(DeprecationWarning, match=r"goes in 0\.6\.0"):
        importlib.import_module("contextledger.compaction.triggers")
    major, minor, _ = (int(part) for part in contextledger.__version__.split(".")[:3])
    assert (major, minor) < (0, 6), "the deprecated alias outlived its minor version: remove it"
