"""A SQLite history that cannot be used says why and where, and leaves the file as it was."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from contextledger.exceptions import ConfigurationError, HistoryCorruptError, HistoryUnavailableError
from contextledger.history import SQLiteHistoryProvider
from contextledger.messages import Message

MESSAGES = [Message.user("hello", message_id="1"), Message.assistant("hi", message_id="2")]

Operation = Callable[[SQLiteHistoryProvider], Awaitable[Any]]
OPERATIONS: list[Any] = [
    pytest.param(lambda history: history.load("s"), id="load"),
    pytest.param(lambda history: history.append("s", MESSAGES), id="append"),
    pytest.param(lambda history: history.replace("s", MESSAGES), id="replace"),
    pytest.param(lambda history: history.clear("s"), id="clear"),
]


def run(history: SQLiteHistoryProvider, operation: Operation) -> Any:
    async def main() -> Any:
        try:
            return await operation(history)
        finally:
            await history.close()

    return asyncio.run(main())


@pytest.mark.parametrize("operation", OPERATIONS)
def test_missing_directory_is_unavailable(tmp_path: Path, operation: Operation) -> None:
    path = tmp_path / "no-such-directory" / "history.sqlite3"
    with pytest.raises(HistoryUnavailableError, match="no-such-directory") as caught:
        run(SQLiteHistoryProvider(path), operation)
    assert "check that the directory exists" in str(caught.value)
    assert not path.parent.exists()


def test_a_directory_as_path_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(HistoryUnavailableError, match=str(tmp_path)):
        run(SQLiteHistoryProvider(tmp_path), lambda history: history.append("s", MESSAGES))


@pytest.mark.root_only
@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0,
    reason="root_only: test_unwritable_directory_is_unavailable needs a non-root user (root can write anywhere)",
)
def test_unwritable_directory_is_unavailable(tmp_path: Path) -> None:
    locked = tmp_path / "read-only"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(HistoryUnavailableError, match="read-only"):
            run(SQLiteHistoryProvider(locked / "history.sqlite3"), lambda history: history.append("s", MESSAGES))
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o700)


@pytest.mark.parametrize("operation", OPERATIONS[1:])
def test_write_lock_held_elsewhere_is_unavailable_and_changes_nothing(tmp_path: Path, operation: Operation) -> None:
    path = tmp_path / "history.sqlite3"
    run(SQLiteHistoryProvider(path), lambda history: history.append("s", MESSAGES[:1]))
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process in the middle of a write
        with pytest.raises(HistoryUnavailableError, match=r"busy_timeout=0\.2s") as caught:
            run(SQLiteHistoryProvider(path, busy_timeout=0.2), operation)
        assert str(path) in str(caught.value)
        other.execute("ROLLBACK")
    finally:
        other.close()
    assert run(SQLiteHistoryProvider(path), lambda history: history.load("s")) == MESSAGES[:1]


def test_provider_recovers_once_the_lock_is_released(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    history = SQLiteHistoryProvider(path, busy_timeout=0.1)

    async def scenario() -> None:
        await history.append("s", MESSAGES[:1])
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(HistoryUnavailableError):
                await history.append("s", MESSAGES[1:])
            assert await history.load("s") == MESSAGES[:1]  # readers are not blocked by a writer in WAL mode
        finally:
            other.close()
        await history.append("s", MESSAGES[1:])
        assert await history.load("s") == MESSAGES
        await history.close()

    asyncio.run(scenario())


def test_a_file_that_is_not_a_database_is_corrupt_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    content = b"these are my notes, not a database\n" * 200
    path.write_bytes(content)
    with pytest.raises(HistoryCorruptError, match="not a readable database"):
        run(SQLiteHistoryProvider(path), lambda history: history.append("s", MESSAGES))
    assert path.read_bytes() == content


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("{not json", "not valid JSON"),
        ('{"role": "wizard", "content": "x"}', "not a readable message"),
        ('["a", "list"]', "not a readable message"),
        (b"\xff\xfe", "not UTF-8 text"),
        (7, "not a readable message"),  # TEXT affinity stores it as "7"
    ],
)
def test_unreadable_row_is_corrupt_naming_session_and_position(tmp_path: Path, body: object, problem: str) -> None:
    path = tmp_path / "history.sqlite3"
    run(SQLiteHistoryProvider(path), lambda history: history.append("s", MESSAGES))
    with sqlite3.connect(path) as connection:
        connection.execute("INSERT INTO contextledger_history VALUES ('s', 2, ?)", (body,))
    with pytest.raises(HistoryCorruptError, match=f"session 's', message 2 .*{problem}"):
        run(SQLiteHistoryProvider(path), lambda history: history.load("s"))


@pytest.mark.parametrize(
    "arguments",
    [
        {"path": ""},
        {"path": 3},
        {"path": "x.sqlite3", "synchronous": "SOMETIMES"},
        {"path": "x.sqlite3", "busy_timeout": -1},
        {"path": "x.sqlite3", "busy_timeout": "10"},
        {"path": "x.sqlite3", "source_id": ""},
    ],
)
def test_bad_configuration_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arguments: dict[str, Any]
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError):
        SQLiteHistoryProvider(**arguments)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("synchronous", ["off", "NORMAL", "full", "EXTRA"])
def test_every_synchronous_level_works(tmp_path: Path, synchronous: str) -> None:
    path = tmp_path / "history.sqlite3"
    run(SQLiteHistoryProvider(path, synchronous=synchronous), lambda history: history.append("s", MESSAGES))
    assert run(SQLiteHistoryProvider(path), lambda history: history.load("s")) == MESSAGES


def test_file_is_in_wal_mode_and_shared_by_providers(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"

    async def scenario() -> None:
        first, second = SQLiteHistoryProvider(path), SQLiteHistoryProvider(path, source_id="other")
        await first.append("s", MESSAGES[:1])
        await second.append("s", MESSAGES[1:])
        assert await first.load("s") == MESSAGES
        await first.close()
        await second.close()

    asyncio.run(scenario())
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
