"""Test modules that need an optional extra still import without it, and say which extra to install.

A contributor with only the core installed should be able to run ``pytest`` and see every test
that could not run, named with the extra it needs, instead of a wall of collection errors.  A
test module imports what it needs from an extra inside :func:`try_import`, and marks itself
with the result::

    with try_import("openai") as openai_extra:
        import openai

    pytestmark = openai_extra.skip

Each of its tests is then collected and skipped (``-rs`` names the extra) when ``openai`` is
missing.  A module whose own top level uses the extra (a hypothesis strategy built from one of
its classes) skips itself instead, right after the block::

    if not openai_extra.installed:
        pytest.skip(openai_extra.reason, allow_module_level=True)

Under ``CI=true`` these skips fail like any other (``tests/ci_skips.py``): CI installs every
extra, so a skip there would only hide a test that never ran.

Only a missing *package* is forgiven: an import of ours that fails (a renamed name in
``contextledger``, a broken test helper) raises as it always did.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from contextledger.exceptions import MissingExtraError

# Our own packages: a failing import of one of these is a bug to see, never a missing extra.
_OURS = ("contextledger", "tests")


@dataclass
class OptionalImport:
    """What :func:`try_import` found: ``missing`` is the module that could not be imported, if any."""

    extra: str
    missing: str | None = None

    @property
    def installed(self) -> bool:
        return self.missing is None

    @property
    def reason(self) -> str:
        return f"needs the {self.extra!r} extra ({self.missing} is not installed): pip install -e '.[{self.extra}]'"

    @property
    def skip(self) -> pytest.MarkDecorator:
        """A mark that skips a test, or a whole module as ``pytestmark``, when the extra is missing."""
        return pytest.mark.skipif(not self.installed, reason=self.reason if not self.installed else "")


@contextmanager
def try_import(extra: str) -> Iterator[OptionalImport]:
    """Run the imports of an optional ``extra``; a missing package is recorded, not raised."""
    found = OptionalImport(extra)
    try:
        yield found
    except MissingExtraError as error:  # one of our modules asked for the extra itself
        found.missing = error.name or error.extra
    except ModuleNotFoundError as error:
        if error.name is None or error.name.partition(".")[0] in _OURS:
            raise
        found.missing = error.name
