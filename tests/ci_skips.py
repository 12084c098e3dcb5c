"""Under ``CI=true`` a skipped test fails, so a green CI run is one where every test ran.

A test may skip on a developer's machine when a server or browser is missing (redis-server,
chromium, an optional package), but CI installs all of them: a skip there would only hide a
test that never ran.  The one exception is marked ``@pytest.mark.root_only``: it checks what a
read-only directory does to an ordinary user, which root cannot be, and its skip stays a skip,
named in the run's summary (``-rs``).  Loaded by ``tests/conftest.py``.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if os.environ.get("CI") != "true" or not report.skipped or hasattr(report, "wasxfail"):
        return
    if item.get_closest_marker("root_only") is not None:
        return
    _fail(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    """A whole module skipped while it is collected (``allow_module_level=True``) fails too."""
    outcome = yield
    report: pytest.CollectReport = outcome.get_result()
    if os.environ.get("CI") == "true" and report.skipped:
        _fail(report)


def _fail(report: pytest.TestReport | pytest.CollectReport) -> None:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    report.outcome = "failed"
    report.longrepr = f"skipped under CI=true, where every test must run: {reason}"
