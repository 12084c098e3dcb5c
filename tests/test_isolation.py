"""A test that crashes its process fails alone, and a run that dies leaves no server behind.

Each check runs a throwaway test file in a pytest of its own, loaded with ``tests.isolation`` as
the suite loads it, so the crash or the death is real and the outer run survives to look.  The
suite runs spread over pytest-xdist's workers (``./dev test``), so the crash and the death are
checked in a worker too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.history.conftest import redis_binary

ROOT = Path(__file__).resolve().parent.parent

CRASHING = """
import os
import pytest

@pytest.mark.local_model
def test_native_code_that_crashes():
    print("about to crash")
    os.abort()

def test_the_run_goes_on():
    pass
"""


WORKERS = [pytest.param((), id="one-process"), pytest.param(("-n", "2"), id="xdist-workers")]
"""How the throwaway run runs: in one process, or spread over two xdist workers as the suite is."""


def run_throwaway(tmp_path: Path, source: str, options: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    sample = tmp_path / "test_throwaway.py"
    sample.write_text(source, encoding="utf-8")
    environment = {key: value for key, value in os.environ.items() if key != "CI"}
    environment["PYTHONPATH"] = str(ROOT)
    command = [sys.executable, "-m", "pytest", "-p", "tests.isolation", "-p", "no:cacheprovider", "-q", *options]
    command += ["-o", "markers=local_model: x", "--rootdir", str(tmp_path), str(sample)]
    return subprocess.run(
        command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120, check=False
    )


def gone_within(pid: int, seconds: float = 10) -> bool:
    """Whether the process ``pid`` stops running within ``seconds``."""
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def alive(pid: int) -> bool:
    """Running: a zombie no parent has reaped yet counts as gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.parametrize("options", WORKERS)
def test_a_test_that_crashes_its_process_fails_alone_and_the_run_reaches_its_summary(
    tmp_path: Path, options: tuple[str, ...]
) -> None:
    result = run_throwaway(tmp_path, CRASHING, options)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed, 1 passed" in result.stdout
    assert "crashed with signal 6 (SIGABRT)" in result.stdout  # what killed it, named in the failure
    assert "about to crash" in result.stdout  # and what it printed first


DYING_WITH_A_CHILD = """
import os
import subprocess
import sys
from pathlib import Path

def test_starts_a_server_then_the_whole_run_dies():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    Path("child.pid").write_text(str(child.pid))
    os.abort()
"""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="the reaper finds processes through /proc (Linux)")
@pytest.mark.parametrize("options", WORKERS)
def test_a_run_that_dies_stops_the_processes_it_started(tmp_path: Path, options: tuple[str, ...]) -> None:
    # Under xdist the process that dies is the worker: its own reaper stops what it started.
    result = run_throwaway(tmp_path, DYING_WITH_A_CHILD, options)
    assert result.returncode != 0
    assert gone_within(int((tmp_path / "child.pid").read_text())), "the child of a dead run is still running"
    assert "stopping 1 process(es) the test run left running: python" in result.stderr


DYING_WITH_REDIS = """
import os
import time
from pathlib import Path

from tests.history.conftest import started_redis

def test_a_redis_server_then_the_whole_run_dies(tmp_path):
    with started_redis(tmp_path) as (server, process):
        Path("redis.pid").write_text(str(process.pid))
        time.sleep(1)  # a server lives a while: the reaper notes what runs below pytest every 0.5 s
        os.abort()
"""


@pytest.mark.redis
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="the reaper finds processes through /proc (Linux)")
def test_a_run_that_dies_stops_the_redis_server_its_fixture_started(tmp_path: Path) -> None:
    redis_binary()  # skips without redis-server (a failure under CI=true)
    result = run_throwaway(tmp_path, DYING_WITH_REDIS)
    assert result.returncode != 0
    assert gone_within(int((tmp_path / "redis.pid").read_text())), "the dead run's redis-server is still running"
    assert "redis-server" in result.stderr


def test_a_run_that_ends_normally_has_nothing_to_stop(tmp_path: Path) -> None:
    result = run_throwaway(tmp_path, "def test_plain():\n    pass\n")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "left running" not in result.stderr
