"""The command line in operation: a busy port, Ctrl-C in a long lab run, a mistyped owner, a
shipped timeline given by name.  Each runs the installed command, as a user would."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from contextledger.lab import shipped_timeline_paths

SCRIPT = Path(sys.executable).parent / "contextledger"


def console(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        timeout=120,
    )


def interruptible() -> None:  # a shell running the suite in the background starts children with SIGINT ignored
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_serve_on_a_busy_port_is_one_line_and_status_2(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        completed = console(
            "serve",
            "--upstream",
            "http://127.0.0.1:9/v1",
            "--port",
            str(port),
            "--store",
            f"sqlite:{tmp_path / 's.db'}",
        )
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.splitlines() == [
        f"contextledger: error: cannot listen on 127.0.0.1:{port}: another process holds that address; choose "
        "another port with --port, or stop what holds it"
    ]
    assert not (tmp_path / "s.db").exists()


def test_ctrl_c_stops_a_running_lab_at_once_and_says_nothing_was_written(tmp_path: Path) -> None:
    # Twenty copies of the longest shipped timeline: a run of half a minute or more, interrupted early.
    long_session = dict(shipped_timeline_paths())["shipped:long-session.json"]
    data = json.loads(long_session.read_text(encoding="utf-8"))
    files = []
    for number in range(20):
        data["name"] = f"long-session-{number}"
        files.append(tmp_path / f"long-{number}.json")
        files[-1].write_text(json.dumps(data), encoding="utf-8")
    report = tmp_path / "report.json"
    child = subprocess.Popen(
        [str(SCRIPT), "lab", *map(str, files), "--json", str(report)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,  # noqa: PLW1509  (the suite starts no threads that could deadlock here)
    )
    try:
        time.sleep(4)  # the timelines are loaded and the first is running
        assert child.poll() is None, child.communicate()
        child.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        _, err = child.communicate(timeout=15)
        waited = time.monotonic() - interrupted
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 130, err
    assert waited < 5, f"the lab went on for {waited:.1f} s after Ctrl-C"
    assert f"nothing was written (the JSON report {report}" in err.splitlines()[-1]
    assert "Traceback" not in err
    assert not report.exists()


def test_facts_list_for_an_unknown_owner_is_status_1(tmp_path: Path) -> None:
    store = tmp_path / "facts.sqlite3"
    chat = subprocess.run(
        [str(SCRIPT), "chat", "--store", str(store), "--owner", "ada"],
        input="module=Billing\nquit\n",
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert chat.returncode == 0, chat.stderr
    assert console("facts", "list", "--store", str(store), "--owner", "ada").returncode == 0
    unknown = console("facts", "list", "--store", str(store), "--owner", "Ada")
    assert unknown.returncode == 1
    assert unknown.stdout == ""
    assert len(unknown.stderr.splitlines()) == 1
    assert unknown.stderr.startswith(f"contextledger: no owner 'Ada' in {store}:")


def test_lab_takes_a_shipped_timeline_by_name(tmp_path: Path) -> None:
    for given in ("correction", "correction.json"):
        completed = console("lab", given, "--json", "report.json", cwd=tmp_path)
        assert completed.returncode == 0, completed.stderr
        report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
        assert [timeline["source"] for timeline in report["timelines"]] == ["shipped:correction.json"]


def test_a_file_wins_over_a_shipped_timeline_of_the_same_name(tmp_path: Path) -> None:
    correction = dict(shipped_timeline_paths())["shipped:correction.json"]
    data = json.loads(correction.read_text(encoding="utf-8"))
    data["name"] = "my-correction"
    (tmp_path / "correction").write_text(json.dumps(data), encoding="utf-8")
    completed = console("lab", "correction", "--json", "report.json", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert [timeline["name"] for timeline in report["timelines"]] == ["my-correction"]


def test_an_unknown_timeline_lists_the_shipped_names(tmp_path: Path) -> None:
    completed = console("lab", "corection", cwd=tmp_path)
    assert completed.returncode == 2
    names = ", ".join(label.removeprefix("shipped:").removesuffix(".json") for label, _ in shipped_timeline_paths())
    assert completed.stderr.splitlines() == [
        "contextledger: error: no timeline 'corection': no such file, and no shipped timeline has that name; "
        f"give a timeline JSON file or a shipped name: {names}"
    ]
