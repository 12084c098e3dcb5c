"""Names that left a package's public surface keep working for one minor version, with a warning."""

from __future__ import annotations

import importlib
import warnings

import pytest

import contextledger.messages
from contextledger.messages._responses import item_dict

PACKAGES = ["messages", "compaction", "history", "facts", "cost", "clients", "agents"]


def test_a_name_made_internal_still_imports_from_its_old_place_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match=r"contextledger\.messages\.item_dict is internal"):
        from contextledger.messages import item_dict as old  # type: ignore[attr-defined]  # noqa: PLC0415
    assert old is item_dict


def test_the_warning_points_at_the_callers_line() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        contextledger.messages.item_dict  # type: ignore[attr-defined]  # noqa: B018
    assert [w.filename for w in caught] == [__file__]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_moved_name_resolves_and_is_no_longer_public(package: str) -> None:
    module = importlib.import_module(f"contextledger.{package}")
    moved = module._MOVED
    assert moved, f"contextledger.{package} moved nothing"
    for name, where in moved.items():
        assert name not in module.__all__
        assert name in importlib.import_module(where).__all__
        with pytest.warns(DeprecationWarning, match=rf"contextledger\.{package}\.{name} is internal"):
            assert getattr(module, name) is getattr(importlib.import_module(where), name)


def test_a_name_that_never_was_there_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'item_dikt'"):
        contextledger.messages.item_dikt  # type: ignore[attr-defined]  # noqa: B018
