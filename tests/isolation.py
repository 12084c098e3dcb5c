"""A crash is one failed test, and what the tests started dies with the run.

Two failures used to end a run with no summary and leave servers behind:

- **Native code that crashes.** The local model runs llama.cpp inside the test's process; a
  segfault there killed pytest itself.  Every test marked ``local_model`` now runs in a forked
  child that sends its reports back through a pipe: a crash fails that test, naming the signal
  and showing what the test wrote before it, and the run goes on.
- **Servers outliving the run.** A Redis or Postgres server a test started is stopped by the
  fixture that started it, which a killed or crashed pytest never reaches.  At start-up the run
  starts a reaper in a session of its own, holding the read end of a pipe, which notes every
  process below pytest twice a second.  When pytest ends, however it ends, the pipe closes
  and the reaper stops each noted process still running (SIGTERM, then SIGKILL after a grace
  period), saying which.  A process that lived less than half a second before the run
  died can escape the notes; one that kept the run's token in its environment (every process
  the run starts inherits it) is stopped all the same.

Loaded by ``tests/conftest.py``; a run of its own can load it with ``-p tests.isolation``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from _pytest.runner import runtestprotocol

__all__ = ["RUN_VARIABLE", "pytest_configure", "pytest_runtest_protocol", "pytest_unconfigure"]

RUN_VARIABLE = "CONTEXTLEDGER_TEST_RUN"
"""Names the run whose processes the reaper stops; each pytest process sets its own."""

_GRACE_SECONDS = 5.0
_WATCH_SECONDS = 0.5


class _Reaper:
    """This pytest process's reaper and the write end of the pipe it waits on."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.pipe: int | None = None

    def start(self) -> None:
        if self.process is not None or not Path("/proc/self/environ").exists():
            return  # configured twice in one process, or no /proc to find processes by (not Linux)
        token = uuid.uuid4().hex
        os.environ[RUN_VARIABLE] = token
        read_end, self.pipe = os.pipe()  # neither end is inherited by the processes tests start
        try:
            self.process = subprocess.Popen(
                [sys.executable, __file__, token, str(os.getpid())],
                stdin=read_end,
                start_new_session=True,  # a Ctrl-C to the run's process group leaves the reaper to finish
            )
        finally:
            os.close(read_end)

    def finish(self) -> None:
        if self.pipe is not None:
            os.close(self.pipe)
            self.pipe = None
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=_GRACE_SECONDS * 3)
            self.process = None


_REAPER = _Reaper()


def pytest_configure(config: pytest.Config) -> None:
    """Start this run's reaper (once per pytest process)."""
    _REAPER.start()


def pytest_unconfigure(config: pytest.Config) -> None:
    """A run that ends normally has stopped its servers already; the reaper checks and says if not."""
    _REAPER.finish()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """A ``local_model`` test runs in a forked child, whose reports come back through a pipe."""
    if item.get_closest_marker("local_model") is None:
        return None
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for report in _forked_reports(item, nextitem):
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _forked_reports(item: pytest.Item, nextitem: pytest.Item | None) -> list[pytest.TestReport]:
    config = item.config
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child runs the test, sends its reports, and never returns into pytest
        status = 1
        try:
            os.close(read_end)
            reports = runtestprotocol(item, nextitem=nextitem, log=False)
            sent = [config.hook.pytest_report_to_serializable(config=config, report=report) for report in reports]
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(json.dumps(sent).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        payload = pipe.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and payload:
        return [config.hook.pytest_report_from_serializable(config=config, data=data) for data in json.loads(payload)]
    return [_crash_report(item, status)]


def _crash_report(item: pytest.Item, status: int) -> pytest.TestReport:
    """A failed report naming how the child died, with what it wrote before (still in the capture files)."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        how = f"crashed with signal {number} ({signal.Signals(number).name})"
    else:
        how = f"exited with status {os.WEXITSTATUS(status)} before reporting"
    text = f"the test's process {how}; the run goes on without it"
    capture = item.config.pluginmanager.getplugin("capturemanager")
    sections = []
    if capture is not None and capture.is_globally_capturing():
        out, err = capture.read_global_capture()
        sections = [(f"Captured {name} call", value) for name, value in (("stdout", out), ("stderr", err)) if value]
    return pytest.TestReport(
        item.nodeid,
        item.location,
        dict.fromkeys(item.keywords, 1),
        "failed",
        text,
        "call",
        sections,
    )


def _stat(pid: int | str) -> tuple[int, str] | None:
    """A running process's parent and start time (which tells it from a later one given its pid)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    if len(fields) < 20 or fields[0] == "Z":  # gone, or a zombie no one has reaped yet
        return None
    return int(fields[1]), fields[19]


def _descendants(root: int) -> dict[int, str]:
    """Every running process below ``root``, with its start time."""
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(entry.name)) is not None:
            children.setdefault(stat[0], []).append((int(entry.name), stat[1]))
    found: dict[int, str] = {}
    below = [root]
    while below:
        for pid, started in children.get(below.pop(), []):
            if pid not in found:
                found[pid] = started
                below.append(pid)
    return found


def _carrying(token: str) -> dict[int, str]:
    """Processes whose environment still holds this run's token (servers that rewrite their
    process title clear it, which is why descendants are also watched while the run lives)."""
    needle = f"{RUN_VARIABLE}={token}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environment = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if needle in environment.split(b"\0") and (stat := _stat(entry.name)) is not None:
            found[int(entry.name)] = stat[1]
    return found


def _running(processes: dict[int, str]) -> dict[int, str]:
    return {pid: started for pid, started in processes.items() if (stat := _stat(pid)) and stat[1] == started}


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def _reap(token: str, run: int) -> None:
    """Watch the run's processes until it ends (the pipe on stdin closes), then stop what is left."""
    seen: dict[int, str] = {}
    while not select.select([sys.stdin.buffer], [], [], _WATCH_SECONDS)[0]:
        seen.update(_descendants(run))
    sys.stdin.buffer.read()
    left = _running(seen) | _carrying(token)
    left.pop(os.getpid(), None)
    if not left:
        return
    names = ", ".join(f"{_name(pid)} ({pid})" for pid in sorted(left))
    print(f"tests/isolation.py: stopping {len(left)} process(es) the test run left running: {names}", file=sys.stderr)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + _GRACE_SECONDS
    while time.monotonic() < deadline and (left := _running(left)):
        time.sleep(0.1)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    _reap(sys.argv[1], int(sys.argv[2]))
