"""Run the OpenAI Agents SDK's own session and Runner tests with our session in place of theirs.

The SDK's source distribution carries its tests.  This script unpacks them into a temporary
folder, adds a pytest plugin that puts our session in place of the SDK's sessions --
``agents.SQLiteSession`` becomes a
:class:`~contextledger.integrations.openai_agents.ContextLedgerSession` over a
:class:`~contextledger.history.SQLiteHistoryProvider` (same constructor, same file), and the
in-memory session of its test helpers (``tests/utils/simple_session.py``) one over an
:class:`~contextledger.history.InMemoryHistoryProvider` -- and runs the test files that store
items through a session.  Nothing of the SDK's is kept in this repository.

    pip download openai-agents==0.24.0 --no-binary :all: --no-deps -d /tmp/agents-sdist
    python scripts/agents_sdk_suite.py --sdist /tmp/agents-sdist/openai_agents-0.24.0.tar.gz \\
        --python VENV/bin/python --compare

The Python given must have the SDK release, its test dependencies (pytest, pytest-asyncio,
pytest-mock, inline-snapshot, cryptography, httpx) and contextledger installed (or on
``PYTHONPATH``).  The report is pytest's, then a table by file: the tests run, how many of them
built our session (*reached* it), and of those how many passed and failed.  With ``--compare`` the
same files run first with the SDK's own sessions, and a reached test that fails there too is
counted apart: it fails for a reason of the environment, not of our session.  Every other failure
is listed by name; docs/guides/adapters.md names each kind and its reason.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, cast

# The test files that reach a session: the session suites, and the Runner suites that build a
# SQLiteSession.
FILES = (
    "tests/memory/test_session.py",
    "tests/memory/test_session_limit.py",
    "tests/memory/test_compaction_model_visibility.py",
    "tests/memory/test_compaction_suffix.py",
    "tests/deferred_session_writes",
    "tests/test_agent_runner.py",
    "tests/test_agent_runner_streamed.py",
    "tests/test_max_turns.py",
    "tests/test_soft_cancel.py",
    "tests/test_tool_batch_failure_history.py",
    "tests/test_native_tool_failure_history.py",
    "tests/test_tool_failure_boundaries.py",
    "tests/test_run_impl_resume_paths.py",
    "tests/test_programmatic_tool_calling.py",
    "tests/extensions/memory/test_encrypt_session.py",
    # Runner suites whose sessions are the SDK's in-memory test session (SimpleListSession).
    "tests/test_cancel_streaming.py",
    "tests/test_error_logging_redaction.py",
    "tests/test_handoff_history_duplication.py",
    "tests/test_hitl_session_scenario.py",
    "tests/test_invalid_final_output_handler.py",
    "tests/test_prompt_cache_key.py",
    "tests/test_run_state_pending_input.py",
    "tests/test_runner_guardrail_resume.py",
    "tests/test_runner_tracing_disabled.py",
    "tests/test_runtime_symmetry_contract.py",
)

PLUGIN_NAME = "contextledger_in_place"

PLUGIN = '''
"""Our session in place of the SDK's SQLiteSession and of its in-memory test session, and a record
of each test's outcome and of whether it built our session (a pytest plugin written by
contextledger's scripts/agents_sdk_suite.py; with CONTEXTLEDGER_SDK_THEIRS set it only records)."""

import asyncio
import concurrent.futures
import itertools
import json
import os
import tempfile
from pathlib import Path

import pytest

_CURRENT = [None]  # the node id of the test running now
_REACHED = set()
_OUTCOMES = {}

if not os.environ.get("CONTEXTLEDGER_SDK_THEIRS"):
    import agents
    import agents.memory
    import agents.memory.sqlite_session

    # EncryptedSession pops through a private method of the SDK's own SQLiteSession when it wraps
    # one; over any other session it calls pop_item.  Imported before the swap, it keeps the SDK's
    # class for that check, so it treats our session as the other session it is.
    import agents.extensions.memory.encrypt_session  # noqa: F401
    from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit

    from contextledger.history import InMemoryHistoryProvider, SQLiteHistoryProvider
    from contextledger.integrations.openai_agents import ContextLedgerSession

    _FOLDER = Path(tempfile.mkdtemp(prefix="contextledger-sdk-"))
    _NUMBERS = itertools.count()
    _HISTORIES = {}

    class LedgerSQLiteSession(ContextLedgerSession):
        def __init__(self, session_id, db_path=":memory:", sessions_table="agent_sessions",
                     messages_table="agent_messages", session_settings=None):
            if _CURRENT[0] is not None:
                _REACHED.add(_CURRENT[0])
            if str(db_path) == ":memory:":
                db_path = _FOLDER / f"memory-{next(_NUMBERS)}.db"  # each in-memory session a file of its own
            path = str(db_path)
            history = _HISTORIES.get(path)
            if history is None:
                history = _HISTORIES[path] = SQLiteHistoryProvider(path)
            super().__init__(history, session_id)
            self.db_path = db_path
            settings = SessionSettings() if session_settings is None else coerce_session_settings(session_settings)
            self.session_settings = settings

        async def get_items(self, limit=None):
            return await super().get_items(resolve_session_limit(limit, self.session_settings))

        def close(self):
            pass

    def _now(coroutine):
        """Run ``coroutine`` to the end from synchronous code, inside a running loop or not."""
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, coroutine).result()

    class LedgerListSession(ContextLedgerSession):
        """In place of the SDK's in-memory test session: our session over our in-memory history,
        with the list the tests read (``saved_items``) read from it."""

        def __init__(self, session_id="test", history=None):
            if _CURRENT[0] is not None:
                _REACHED.add(_CURRENT[0])
            super().__init__(InMemoryHistoryProvider(), session_id)
            self._ignore_ids_for_matching = False
            if history:
                _now(self.add_items(list(history)))

        @property
        def saved_items(self):
            return _now(self.all_items())

        _items = saved_items

    agents.SQLiteSession = LedgerSQLiteSession
    agents.memory.SQLiteSession = LedgerSQLiteSession
    agents.memory.sqlite_session.SQLiteSession = LedgerSQLiteSession


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _CURRENT[0] = item.nodeid
    try:
        return (yield)
    finally:
        _CURRENT[0] = None


def pytest_runtest_logreport(report):
    outcome = _OUTCOMES.get(report.nodeid, "passed")
    if report.failed:
        outcome = "failed"
    elif report.skipped and outcome != "failed":
        outcome = "skipped"
    _OUTCOMES[report.nodeid] = outcome


def pytest_sessionfinish(session):
    record = {"outcomes": _OUTCOMES, "reached": sorted(_REACHED)}
    Path(os.environ["CONTEXTLEDGER_SDK_REPORT"]).write_text(json.dumps(record), encoding="utf-8")
'''

COLUMNS = ("tests", "reached", "passed", "failed", "failed with theirs too")


def _run(root: Path, python: str, files: list[str], extra: list[str], *, theirs: bool) -> dict[str, Any]:
    """One pytest run over ``files``; the plugin's record of it."""
    report = root / ("theirs.json" if theirs else "ours.json")
    environment = {**os.environ, "CONTEXTLEDGER_SDK_REPORT": str(report)}
    if theirs:
        environment["CONTEXTLEDGER_SDK_THEIRS"] = "1"
    command = [python, "-m", "pytest", "-p", PLUGIN_NAME, "-p", "no:cacheprovider", "-q", "-rfE"]
    subprocess.call([*command, *files, *extra], cwd=root, env=environment)
    return cast("dict[str, Any]", json.loads(report.read_text(encoding="utf-8")))


def _table(ours: dict[str, Any], theirs: dict[str, Any] | None) -> dict[str, Any]:
    """Counts by file: the tests, those that built our session, and how those came out."""
    reached = set(ours["reached"])
    rows: dict[str, Counter[str]] = {}
    failures: dict[str, list[str]] = {"ours": [], "theirs too": []}
    for nodeid, outcome in ours["outcomes"].items():
        row = rows.setdefault(nodeid.split("::")[0], Counter())
        row["tests"] += 1
        if nodeid not in reached:
            continue
        row["reached"] += 1
        row[outcome] += 1
        if outcome == "failed":
            also = theirs is not None and theirs["outcomes"].get(nodeid) == "failed"
            row["failed with theirs too"] += also
            failures["theirs too" if also else "ours"].append(nodeid)
    total: Counter[str] = Counter()
    for row in rows.values():
        total.update(row)
    return {"files": {name: dict(rows[name]) for name in sorted(rows)}, "total": dict(total), "failed": failures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sdist", required=True, type=Path, help="the SDK's source distribution (.tar.gz)")
    parser.add_argument("--python", default=sys.executable, help="the Python to run the tests with")
    parser.add_argument("--compare", action="store_true", help="run the tests with the SDK's sessions first")
    parser.add_argument("--json", type=Path, help="also write the table and the failed tests here")
    parser.add_argument("pytest_args", nargs="*", help="more arguments for pytest (after --)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="agents-sdk-suite-") as folder:
        with tarfile.open(args.sdist) as archive:
            archive.extractall(folder, filter="data")
        (root,) = [p for p in Path(folder).iterdir() if p.is_dir()]
        (root / f"{PLUGIN_NAME}.py").write_text(PLUGIN, encoding="utf-8")
        files = [f for f in FILES if (root / f).exists()]
        theirs = _run(root, args.python, files, args.pytest_args, theirs=True) if args.compare else None
        # The SDK's in-memory test session becomes ours, its subclasses in that file with it.
        helper = root / "tests" / "utils" / "simple_session.py"
        text = helper.read_text(encoding="utf-8")
        ours_import = f"from {PLUGIN_NAME} import LedgerListSession as SimpleListSession\n\n\nclass CountingSession("
        helper.write_text(text.replace("class CountingSession(", ours_import, 1), encoding="utf-8")
        table = _table(_run(root, args.python, files, args.pytest_args, theirs=False), theirs)
    print("\ncontextledger in place of the SDK's sessions (passed and failed count reached tests only)")
    print(f"{'file':52}" + "".join(f"{c:>10}" if c != COLUMNS[-1] else f"  {c}" for c in COLUMNS))
    for name, row in [*table["files"].items(), ("total", table["total"])]:
        print(f"{name:52}" + "".join(f"{row.get(c, 0):>10}" for c in COLUMNS[:-1]) + f"  {row.get(COLUMNS[-1], 0):>10}")
    for nodeid in table["failed"]["ours"]:
        print(f"failed with ours only: {nodeid}")
    if args.json is not None:
        args.json.write_text(json.dumps(table, indent=1), encoding="utf-8")
    return 1 if table["failed"]["ours"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
