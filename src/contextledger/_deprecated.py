"""Names that left a package's public surface, still importable for one minor version.

The release rule (CHANGELOG.md): a public name that moves or becomes internal keeps working from its
old place, with a :class:`DeprecationWarning` naming where it went, for one minor version, so that a
user's upgrade warns before it breaks.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping


def moved_name(package: str, name: str, moved: Mapping[str, str]) -> object:
    """The object ``package.name`` used to be, from the internal module it lives in now, with a warning.

    Called by a package's module-level ``__getattr__``, so only names the package no longer defines
    come here; anything else is the usual :class:`AttributeError`.
    """
    module = moved.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    warnings.warn(
        f"{package}.{name} is internal since contextledger 0.5 and will not be importable from "
        f"{package} from 0.6 on: it is plumbing the library shares between its packages, not part of "
        "the public API. Use the public names the package lists in __all__, or tell us what you need "
        "it for.",
        DeprecationWarning,
        stacklevel=3,
    )
    return getattr(importlib.import_module(module), name)
