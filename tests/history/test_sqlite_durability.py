"""A SQLite history keeps every acknowledged turn, whole, when its process is killed mid-burst,
and two processes appending to one session file lose and reorder nothing."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
from pathlib import Path

import pytest

from contextledger.history import SQLiteHistoryProvider
from contextledger.messages import Message
from tests.history.support import (
    append_together,
    appender_command,
    assert_each_turn_once,
    kill_mid_burst,
    run_to_the_end,
    running,
    turn_number,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")

TURN_SIZE = 2


def load(path: Path, session: str) -> list[Message]:
    async def read() -> list[Message]:
        history = SQLiteHistoryProvider(path)
        try:
            return await history.load(session)
        finally:
            await history.close()

    return asyncio.run(read())


@pytest.mark.parametrize("attempt", range(3))
def test_sigkill_mid_burst_loses_no_acknowledged_turn(tmp_path: Path, attempt: int) -> None:
    path = tmp_path / "history.sqlite3"
    kill_after = 200 + 37 * attempt  # vary where in the burst the kill lands
    command = appender_command("sqlite", str(path), "burst", "w", turns=10_000_000, turn_size=TURN_SIZE)
    with running([command], timeout=60) as (child,):
        assert child.stdout is not None
        assert child.stderr is not None
        acknowledged: list[int] = []
        while len(acknowledged) < kill_after:
            line = child.stdout.readline()
            if not line:
                pytest.fail(f"the appender stopped before the kill:\n{child.stderr.read()}")
            acknowledged.append(int(line))
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        # Acknowledgements already in the pipe when the kill landed count too.
        acknowledged += [int(line) for line in child.stdout.read().split()]
    assert child.returncode == -signal.SIGKILL
    assert acknowledged == list(range(len(acknowledged)))

    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    stored = load(path, "burst")
    assert len(stored) % TURN_SIZE == 0, "a turn was stored in part"
    turns = [stored[index : index + TURN_SIZE] for index in range(0, len(stored), TURN_SIZE)]
    for number, turn in enumerate(turns):
        assert [m.message_id for m in turn] == [f"w-{number}-{index}" for index in range(TURN_SIZE)]
        assert [m.role for m in turn] == ["user", "assistant"]
    # Every acknowledged turn is there; at most one more (committed, killed before it printed).
    assert len(acknowledged) <= len(turns) <= len(acknowledged) + 1


def test_two_processes_append_to_one_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"  # new: both processes race to create it, too
    per_process = 500
    commands = [
        appender_command("sqlite", str(path), "shared", tag, turns=per_process, wait_for_go=True) for tag in "pq"
    ]
    append_together(commands, turns=per_process)

    stored = [turn_number(message) for message in load(path, "shared")]
    assert len(stored) == 2 * per_process
    assert len(set(stored)) == len(stored)
    for tag in "pq":
        assert [number for writer, number in stored if writer == tag] == list(range(per_process))


@pytest.mark.parametrize("attempt", range(2))
def test_a_writer_killed_and_restarted_stores_every_turn_once(tmp_path: Path, attempt: int) -> None:
    """A writer that stores with turn ids, killed mid-burst and restarted from a few turns before
    its last acknowledgement (as a writer that lost its place would be), stores nothing twice."""
    path = tmp_path / "history.sqlite3"
    kill_after = 150 + 41 * attempt
    command = appender_command("sqlite", str(path), "burst", "w", turns=10_000_000, turn_size=3, turn_ids=True)
    acknowledged = kill_mid_burst(command, kill_after)
    resend_from = max(0, len(acknowledged) - 5)  # resends acknowledged turns and the one in flight
    total = len(acknowledged) + 20
    resent = run_to_the_end(
        appender_command(
            "sqlite", str(path), "burst", "w", turns=total - resend_from, turn_size=3, turn_ids=True, start=resend_from
        )
    )
    assert resent == list(range(resend_from, total))
    assert_each_turn_once(load(path, "burst"), "w", total, 3)
    with sqlite3.connect(path) as connection:
        query = "SELECT COUNT(*) FROM contextledger_turns WHERE session_id = 'burst'"
        (recorded,) = connection.execute(query).fetchone()
    assert recorded == total
