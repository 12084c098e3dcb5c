"""How big the suite's long checks run: one setting, read here and nowhere else.

``CONTEXTLEDGER_TEST_SIZE=small``, the default (``./dev test``), runs every check, each at a size
that keeps the whole suite within minutes on two cores: fewer hypothesis examples, shorter
fixed-size robustness runs, a slice of the stress run.  ``full`` (``./dev test --full``, which CI
runs) gives the sizes the checks were written for: every example, the robustness runs whole, and
the 100,000-case stress run.  Nothing is left out at either size; only how many cases each check
draws changes.

A check states both of its sizes where it is written, ``sized(full=2_000, small=200)``, so a
reader sees what CI runs; ``examples(n)`` is the same for a hypothesis test's ``max_examples``.
The hypothesis profiles ``full`` and ``small`` (registered and loaded by ``tests/conftest.py``) do
it for the tests that name no ``max_examples`` of their own.
"""

from __future__ import annotations

import os

__all__ = ["FULL", "SIZE", "SIZES", "STRESS_SHAPES", "VARIABLE", "examples", "sized", "small_examples"]

VARIABLE = "CONTEXTLEDGER_TEST_SIZE"
SIZES = ("small", "full")


def _read() -> str:
    value = os.environ.get(VARIABLE, "").strip().lower() or "small"
    if value not in SIZES:
        raise ValueError(f"{VARIABLE}={os.environ[VARIABLE]!r} is not a size: use 'small' (the default) or 'full'")
    return value


SIZE = _read()
"""``small`` or ``full``, from the environment (the processes a run starts inherit it)."""

FULL = SIZE == "full"

STRESS_SHAPES = "stress run shapes"
"""The name under which each part of the stress run reports the conversation shapes it generated
(a test report's ``user_properties``); the run prints their sum at its end."""

_SMALL_EXAMPLES_SHARE = 4
_SMALL_EXAMPLES_FLOOR = 10


def sized(full: int, small: int) -> int:
    """``full`` in a full-size run, ``small`` otherwise."""
    if not 0 < small <= full:
        raise ValueError(f"a check's small size must be from 1 to its full size ({full}), got {small}")
    return full if FULL else small


def small_examples(full: int) -> int:
    """The small size of a hypothesis test that draws ``full`` examples at the full size: a
    quarter of them, at least 10 (never more than ``full``)."""
    return min(full, max(_SMALL_EXAMPLES_FLOOR, full // _SMALL_EXAMPLES_SHARE))


def examples(full: int) -> int:
    """A hypothesis test's ``max_examples``: ``full`` in a full-size run, :func:`small_examples`
    otherwise."""
    return sized(full, small_examples(full))
