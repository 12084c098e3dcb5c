"""A throwaway Postgres server on 127.0.0.1 for the tests, started as the Redis tests start theirs.

``initdb`` makes a cluster in a temporary folder and ``postgres`` serves it on a free port, with
no password (``trust`` on the loopback only) and no fsync: a test kills processes, never the
machine.  The binaries are found on ``PATH`` or where Debian's ``postgresql`` package puts them
(``/usr/lib/postgresql/VERSION/bin``).  Postgres refuses to run as root, and CI runs as root:
then the cluster belongs to the ``postgres`` user the package creates (or ``nobody``), and the
server is started as that user, in a folder outside pytest's root-only temporary tree.

Without the binaries a test skips on a developer's machine and fails under ``CI=true``, where a
skip would hide that the Postgres tests never ran (``.ci/run`` installs the package).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.history.support import free_port
from tests.optional_imports import try_import

with try_import("postgres") as postgres_extra:
    import psycopg  # noqa: F401  (what every Postgres store here talks through)
    import psycopg_pool  # noqa: F401

__all__ = ["PostgresServer", "postgres_binaries", "postgres_extra", "started_postgres"]

_START_ATTEMPTS = 3
_START_TIMEOUT = 30.0
_USER = "contextledger"


@dataclass(frozen=True)
class PostgresServer:
    """A Postgres server the tests started for themselves on 127.0.0.1 (database ``postgres``)."""

    port: int
    pid: int

    @property
    def url(self) -> str:
        return self.database_url("postgres")

    def database_url(self, database: str) -> str:
        return f"postgresql://{_USER}@127.0.0.1:{self.port}/{database}"

    def fresh_database(self) -> str:
        """The URL of a new, empty database on this server, for a test that reads the store's tables."""
        import psycopg  # noqa: PLC0415

        name = f"test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {name}")
        return self.database_url(name)


def postgres_binaries() -> Path:
    """The folder holding ``initdb`` and ``postgres``; a skip without them (or without the
    ``postgres`` extra), a failure under ``CI=true``."""
    found = shutil.which("initdb")
    folder = Path(found).resolve().parent if found else None
    if folder is None or not (folder / "postgres").exists():
        versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda path: int(path.split("/")[4]))
        folder = Path(versions[-1]).parent if versions else None
    if folder is None:
        reason = "Postgres is not installed; the Postgres tests start their own server (apt-get install postgresql)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must run the Postgres tests, not skip them", pytrace=False)
        pytest.skip(reason)
    if not postgres_extra.installed:
        pytest.skip(postgres_extra.reason)  # tests/ci_skips.py fails it under CI=true
    return folder


def _server_user() -> pwd.struct_passwd | None:
    """Who runs the server: the current user, or (as root, whom Postgres refuses) an ordinary one."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    pytest.fail("running as root with neither a 'postgres' nor a 'nobody' user to run Postgres as", pytrace=False)


def _run_as(user: pwd.struct_passwd | None) -> dict[str, object]:
    return {} if user is None else {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGCONT)  # a test that paused it must not hang the stop
        process.send_signal(signal.SIGINT)  # "fast" shutdown: roll back, disconnect, stop
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _answers(port: int) -> bool:
    import psycopg  # noqa: PLC0415

    try:
        with psycopg.connect(f"postgresql://{_USER}@127.0.0.1:{port}/postgres", connect_timeout=2) as connection:
            connection.execute("SELECT 1")
            return True
    except psycopg.Error:
        return False


@contextlib.contextmanager
def started_postgres() -> Iterator[tuple[PostgresServer, subprocess.Popen[bytes]]]:
    """A Postgres server on 127.0.0.1 in a temporary folder, removed with everything in it after."""
    binaries = postgres_binaries()
    user = _server_user()
    folder = Path(tempfile.mkdtemp(prefix="contextledger-postgres-"))
    try:
        if user is not None:
            os.chown(folder, user.pw_uid, user.pw_gid)
        data, log = folder / "data", folder / "postgres.log"
        initdb = [str(binaries / "initdb"), "-D", str(data), "-U", _USER, "--auth=trust", "--no-sync"]
        initdb += ["-E", "UTF8", "--locale=C.UTF-8"]
        made = subprocess.run(initdb, capture_output=True, check=False, **_run_as(user))  # type: ignore[call-overload]
        if made.returncode != 0:
            pytest.fail(f"initdb failed:\n{made.stderr.decode(errors='replace')[-2000:]}", pytrace=False)
        for _ in range(_START_ATTEMPTS):
            port = free_port()
            command = [str(binaries / "postgres"), "-D", str(data), "-p", str(port), "-c", "listen_addresses=127.0.0.1"]
            command += ["-c", f"unix_socket_directories={folder}", "-c", "fsync=off", "-c", "max_connections=300"]
            with log.open("ab") as sink:
                process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, **_run_as(user))  # type: ignore[call-overload]
            try:
                deadline = time.monotonic() + _START_TIMEOUT
                while process.poll() is None and time.monotonic() < deadline and not _answers(port):
                    time.sleep(0.05)
                if process.poll() is None and _answers(port):
                    yield PostgresServer(port, process.pid), process
                    return
            finally:
                _stop(process)
        details = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
        pytest.fail(f"postgres did not start on 127.0.0.1 after {_START_ATTEMPTS} attempts:\n{details}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
