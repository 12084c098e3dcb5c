"""Run the OpenAI Agents SDK's own session and Runner tests with our session in place of theirs.

The SDK's source distribution carries its tests.  This script unpacks them into a temporary
folder, adds a ``conftest.py`` that makes ``agents.SQLiteSession`` a
:class:`~contextledger.integrations.openai_agents.ContextLedgerSession` over a
:class:`~contextledger.history.SQLiteHistoryProvider` (same constructor, same file), and runs the
test files that store items through a session.  Nothing of the SDK's is kept in this repository.

    python scripts/agents_sdk_suite.py --sdist openai_agents-0.24.0.tar.gz --python /path/to/venv/bin/python

The Python given must have the SDK release, its test dependencies (pytest, pytest-asyncio,
pytest-mock, inline-snapshot, cryptography) and contextledger installed; ``pip download
openai-agents==0.24.0 --no-binary :all: --no-deps`` fetches the source distribution.  The report
is pytest's, per file, with the counts at the end.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

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
    "tests/extensions/memory/test_encrypt_session.py",
)

SHIM = '''
"""Our session in place of the SDK's SQLiteSession (added by contextledger's scripts/agents_sdk_suite.py)."""

import itertools
import tempfile
from pathlib import Path

import agents
import agents.memory
import agents.memory.sqlite_session
from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit

from contextledger.history import SQLiteHistoryProvider
from contextledger.integrations.openai_agents import ContextLedgerSession

_FOLDER = Path(tempfile.mkdtemp(prefix="contextledger-sdk-"))
_NUMBERS = itertools.count()
_HISTORIES = {}


class LedgerSQLiteSession(ContextLedgerSession):
    def __init__(self, session_id, db_path=":memory:", sessions_table="agent_sessions",
                 messages_table="agent_messages", session_settings=None):
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


agents.SQLiteSession = LedgerSQLiteSession
agents.memory.SQLiteSession = LedgerSQLiteSession
agents.memory.sqlite_session.SQLiteSession = LedgerSQLiteSession
'''


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sdist", required=True, type=Path, help="the SDK's source distribution (.tar.gz)")
    parser.add_argument("--python", default=sys.executable, help="the Python to run the tests with")
    parser.add_argument("pytest_args", nargs="*", help="more arguments for pytest (after --)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="agents-sdk-suite-") as folder:
        with tarfile.open(args.sdist) as archive:
            archive.extractall(folder, filter="data")
        (root,) = [p for p in Path(folder).iterdir() if p.is_dir()]
        conftest = root / "tests" / "conftest.py"
        conftest.write_text(conftest.read_text(encoding="utf-8") + "\n" + SHIM, encoding="utf-8")
        files = [f for f in FILES if (root / f).exists()]
        command = [args.python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE", *files, *args.pytest_args]
        return subprocess.call(command, cwd=root)


if __name__ == "__main__":
    raise SystemExit(main())
