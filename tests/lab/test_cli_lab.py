"""``contextledger lab``: the main command, its reports, its errors, and live mode over HTTP on 127.0.0.1."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from contextledger.cli import main
from contextledger.lab import load_timelines
from contextledger.lab.terminal import _HEADINGS, print_report
from tests.lab.model_server import model_server
from tests.lab.support import VERDICT_WORDS, small, write
from tests.optional_imports import try_import

with try_import("openai") as openai_extra:
    import openai  # noqa: F401  (the live model is an OpenAIChatClient)

SCRIPT = Path(sys.executable).with_name("contextledger")
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "contextledger.cli"]
POLICIES = [
    "full-history",
    "last-3-turns",
    "summary",
    "bounded-facts",
    "request-view",
    "reduced-history",
    "provider-compaction",
    "combined",
    "collapse-recall",
]


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The README's main command: every shipped timeline, offline, with the HTML report."""
    folder = tmp_path_factory.mktemp("lab")
    html, report = folder / "lab-report.html", folder / "lab-report.json"
    capture = folder / "stdout.txt"
    with capture.open("w", encoding="utf-8") as out:
        result = subprocess.run(
            [*COMMAND, "lab", "--html", str(html), "--json", str(report)],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
            cwd=folder,
        )
    return {
        "code": result.returncode,
        "stderr": result.stderr,
        "stdout": capture.read_text(encoding="utf-8"),
        "html": html,
        "json": report,
    }


def test_the_main_command_runs_every_shipped_timeline_and_writes_the_reports(offline_run: dict[str, Any]) -> None:
    assert offline_run["code"] == 0, offline_run["stderr"]
    data = json.loads(offline_run["json"].read_text(encoding="utf-8"))
    assert [t["name"] for t in data["timelines"]] == [t.name for t in load_timelines()]
    for item in data["timelines"]:
        assert [p["name"] for p in item["policies"]] == POLICIES
        assert item["name"] in offline_run["stdout"]
    for name in POLICIES:
        assert name in offline_run["stdout"]
    assert "estimate" in offline_run["stdout"]
    assert f"HTML report written to {offline_run['html']}" in offline_run["stdout"]
    assert not VERDICT_WORDS.search(offline_run["stdout"])


def test_two_command_runs_write_identical_json(tmp_path: Path, offline_run: dict[str, Any]) -> None:
    again = tmp_path / "again.json"
    assert main(["lab", "--json", str(again)]) == 0
    assert again.read_bytes() == offline_run["json"].read_bytes()


def test_the_html_report_is_self_contained(offline_run: dict[str, Any]) -> None:
    text = offline_run["html"].read_text(encoding="utf-8")
    assert "<script" not in text
    assert text.count("What each policy sent on its last model call") == len(load_timelines())
    assert " src=" not in text
    assert " href=" not in text
    assert "@import" not in text
    assert "url(" not in text


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("contextledger: error: ")
    return err[0]


def test_a_malformed_timeline_stops_everything_before_any_model_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    good = write(tmp_path / "good.json", small())
    broken = small(name="broken")
    broken["turns"][4]["host_commands"] = ["forget everything"]
    bad = write(tmp_path / "bad.json", broken)
    html, report = tmp_path / "r.html", tmp_path / "r.json"
    with model_server() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        code = main(
            ["lab", str(good), str(bad), "--model", "openai:test-model", "--html", str(html), "--json", str(report)]
        )
        assert server.requests == []
    assert code == 2
    line = _error_line(capsys)
    assert f"{bad}, turns[4].host_commands[0]: cannot forget 'everything'" in line
    assert not html.exists()
    assert not report.exists()


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (["--policies", "full-history,everything"], "unknown policy 'everything'"),
        (["--policies", "full-history", "--policies", "other.json"], "looks like a timeline file"),
        (["--replicates", "0"], "--replicates must be 1 or more"),
        (["--model", "gpt"], "model must be one of"),
        (["--model", "openai:"], "openai needs a model name"),
    ],
)
def test_bad_options_are_one_line_errors(
    arguments: list[str], problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    timeline = write(tmp_path / "t.json", small())
    assert main(["lab", str(timeline), *arguments, "--html", str(tmp_path / "r.html")]) == 2
    assert problem in _error_line(capsys)
    assert not (tmp_path / "r.html").exists()


def test_a_timeline_after_policies_is_read_as_a_timeline(tmp_path: Path) -> None:
    timeline = write(tmp_path / "t.json", small(name="after"))
    report = tmp_path / "r.json"
    assert main(["lab", "--policies", "full-history", str(timeline), "--json", str(report)]) == 0
    data = json.loads(report.read_text(encoding="utf-8"))
    assert [t["name"] for t in data["timelines"]] == ["after"]
    assert [p["name"] for p in data["timelines"][0]["policies"]] == ["full-history"]


def test_policies_may_be_chosen_and_ordered(tmp_path: Path) -> None:
    timeline = write(tmp_path / "t.json", small())
    report = tmp_path / "r.json"
    assert main(["lab", str(timeline), "--policies", "bounded-facts,full-history", "--json", str(report)]) == 0
    data = json.loads(report.read_text(encoding="utf-8"))
    assert [p["name"] for p in data["timelines"][0]["policies"]] == ["bounded-facts", "full-history"]


@openai_extra.skip
def test_a_summariser_over_the_limit_stops_the_command_with_no_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    timeline = write(tmp_path / "t.json", small())
    html = tmp_path / "r.html"
    with model_server(summary="x" * 701) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        code = main(["lab", str(timeline), "--model", "openai:test-model", "--writer", "rules", "--html", str(html)])
    assert code == 2
    line = _error_line(capsys)
    assert "701 characters, more than the 700 allowed" in line
    assert "the comparison stopped" in line
    assert not html.exists()


@openai_extra.skip
@pytest.mark.parametrize("report_usage", [True, False])
def test_live_mode_asks_probe_questions_over_replicates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, report_usage: bool
) -> None:
    timeline = write(tmp_path / "t.json", small())
    report = tmp_path / "r.json"
    with model_server(report_usage=report_usage) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        code = main(["lab", str(timeline), "--model", "openai:test-model", "--replicates", "3", "--json", str(report)])
        kinds = server.kinds()
    assert code == 0
    out = capsys.readouterr().out
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["settings"]["answer_probes"] is True
    item = data["timelines"][0]
    current = {"customer": "Contoso", "database": "SQL Server 2022", "module": "Billing"}
    # 3 keys x 3 replicates x 7 policies questions reached the server, each answered.
    assert kinds.count("question") == len(current) * 3 * len(POLICIES)
    by_policy = {p["name"]: {q["key"]: q for q in p["answers"]["questions"]} for p in item["policies"]}
    for _name, questions in by_policy.items():
        assert {key: q["value"] for key, q in questions.items()} == current
        for question in questions.values():
            assert question["replicates"] == 3
            assert len(question["replies"]) == 3
            hits = sum(question["value"] in reply for reply in question["replies"])
            assert question["answers_with_current_value"] == hits
    # The full history still holds every value; three turns back, module=Billing is out of sight.
    assert all(q["answers_with_current_value"] == 3 for q in by_policy["full-history"].values())
    assert all(q["answers_with_current_value"] == 3 for q in by_policy["bounded-facts"].values())
    assert by_policy["last-3-turns"]["module"]["answers_with_current_value"] == 0
    assert "answers to probe questions" in out
    assert all(q["right"] == 3 for q in by_policy["bounded-facts"].values())
    assert by_policy["last-3-turns"]["module"]["right"] == 0
    # The writer asked the server: its calls are extra calls, counted in the totals.
    facts = next(p for p in item["policies"] if p["name"] == "bounded-facts")
    assert facts["totals"]["extra_calls"] == {"writer": 6}
    assert kinds.count("writer") == 12  # six turns, for bounded-facts and for combined
    totals = facts["totals"]
    if report_usage:
        assert isinstance(totals["reported_input"], int)
        assert totals["reported_input"] > totals["extra"]["reported_input"] > 0
        assert "unknown" not in out.split("answers to probe questions")[0]
    else:
        assert totals["reported_input"] == "unknown"
        assert totals["extra"]["reported_input"] == "unknown"
        assert "unknown" in out


def _interruptible() -> None:
    """Give the child a terminal's SIGINT (a shell running the suite in the background starts it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_a_run_ends_it_with_one_line_and_status_130(tmp_path: Path) -> None:
    timeline = write(tmp_path / "t.json", small())
    with socket.create_server(("127.0.0.1", 0)) as model:  # a model that takes the call and never answers
        model.settimeout(120)
        environment = {
            **os.environ,
            "OPENAI_BASE_URL": f"http://127.0.0.1:{model.getsockname()[1]}/v1",
            "OPENAI_API_KEY": "sk-test",
        }
        child = subprocess.Popen(
            [*COMMAND, "lab", str(timeline), "--model", "openai:test-model", "--json", str(tmp_path / "r.json")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
            cwd=tmp_path,
            preexec_fn=_interruptible,  # noqa: PLW1509  (the suite starts no threads that could deadlock here)
        )
        try:
            connection, _ = model.accept()  # the lab is inside its run, waiting on the model: press Ctrl-C
            with connection:
                child.send_signal(signal.SIGINT)
                _, err = child.communicate(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert child.returncode == 130, err
    [line] = err.strip().splitlines()
    assert line.startswith("contextledger: interrupted: ")
    assert f"nothing was written (the JSON report {tmp_path / 'r.json'}" in line
    assert "Traceback" not in err
    assert "KeyboardInterrupt" not in err
    assert not (tmp_path / "r.json").exists()


def test_dash_writes_a_report_to_stdout_and_reads_a_timeline_from_stdin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(small(name="piped"))))
    assert main(["lab", "-", "--policies", "full-history", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)  # stdout holds the report alone; the table went to stderr
    assert [t["name"] for t in data["timelines"]] == ["piped"]
    assert data["timelines"][0]["source"] == "<stdin>"
    assert "full-history" in err
    assert not (tmp_path / "-").exists()
    assert main(["lab", "-", "--json", "-", "--html", "-"]) == 2
    assert "only one of --json and --html" in capsys.readouterr().err


def test_the_terminal_tables_never_break_a_heading_word(offline_run: dict[str, Any]) -> None:
    data = json.loads(offline_run["json"].read_text(encoding="utf-8"))
    words = {word for _, heading in _HEADINGS for word in heading.split()}
    words |= {
        word for timeline in data["timelines"] for word in f"{timeline['name']} ({timeline['turns']} turns)".split()
    }
    words |= {"policy"}
    for width in range(80, 201, 8):
        console = Console(width=width, record=True, file=io.StringIO(), highlight=False)
        print_report(data, console)
        lines = console.export_text().splitlines()
        headers = [
            line
            for start, border in enumerate(lines)
            if border.startswith("┏")
            for line in lines[start + 1 : next(i for i in range(start, len(lines)) if lines[i].startswith("┡"))]
        ]
        assert headers
        for line in headers:
            for cell in line.strip("┃").split("┃"):
                for word in cell.split():
                    assert word in words, f"a heading broken at {width} columns: {word!r} in {line!r}"
