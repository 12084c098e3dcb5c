"""The command line: what users see, what it writes, and how it refuses bad input."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from contextledger import from_openai, read_jsonl, to_openai, validate
from contextledger.cli import COMMANDS, main
from contextledger.facts import SQLiteFactStore

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "support-session.jsonl"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_budget_shortcut_fits_the_budget_and_writes_a_valid_transcript(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "out.jsonl"
    # 5,591 tokens; collapsing the older tool results brings them to 2,513, within 3,000.
    code, out, err = run(capsys, "compact", str(EXAMPLE), "--budget", "3000", "-o", str(out_file), "--metadata")
    assert code == 0, err
    compacted = read_jsonl(out_file)
    assert validate(compacted) == []
    assert "tokens" in out
    assert "(estimate)" in out
    after_tokens = int(next(line for line in out.splitlines() if line.startswith("tokens")).split()[2])
    assert after_tokens <= 3000
    assert "collapsed" in out
    # The system prompt survives and the summaries are marked as such in the transcript.
    assert compacted[0].role == "system"
    assert any(m.is_summary for m in compacted)


def test_strategy_with_trigger_param_keeps_the_last_turns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "out.jsonl"
    code, out, err = run(
        capsys,
        "compact",
        str(EXAMPLE),
        "--strategy",
        "sliding-window",
        "--param",
        "trigger=turns_exceed(4)",
        "-o",
        str(out_file),
    )
    assert code == 0, err
    users = [m for m in read_jsonl(out_file) if m.role == "user"]
    original_users = [m for m in read_jsonl(EXAMPLE) if m.role == "user"]
    assert users == original_users[-4:]
    assert "whole turns" in out


def test_keyword_param_is_converted_to_int(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "out.jsonl"
    code, _, err = run(
        capsys,
        "compact",
        str(EXAMPLE),
        "--strategy",
        "sliding-window",
        "--param",
        "keep_last_groups=3",
        "-o",
        str(out_file),
    )
    assert code == 0, err
    non_system = [m for m in read_jsonl(out_file) if m.role != "system"]
    assert len(non_system) == 4  # three groups: a tool group holds two messages


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--strategy", "bogus"], "unknown strategy 'bogus'"),
        (["--strategy", "truncation", "--param", "max_n=-1"], "max_n must be 1 or more, got -1"),
        (["--strategy", "truncation", "--param", "nonsense=1"], "no parameter 'nonsense'"),
        (["--strategy", "sliding-window", "--param", "trigger=explode(1)"], "cannot read trigger"),
        (["--strategy", "sliding-window", "--param", "keep_last_groups"], "is not KEY=VALUE"),
        (["--strategy", "summarization"], "needs a chat model"),
        ([], "give --strategy NAME or --budget N"),
        (["--budget", "0"], "--budget must be a positive number of tokens, got 0"),
        (
            [
                "--budget",
                "100",
                "--tokenizer",
                "estimate",
                "--strategy",
                "truncation",
                "--param",
                "max_n=10",
                "--param",
                "compact_to=20",
            ],
            "compact_to (20) must not exceed max_n (10)",
        ),
    ],
)
def test_bad_arguments_fail_in_one_line_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], fragment: str
) -> None:
    out_file = tmp_path / "out.jsonl"
    code, _out, err = run(capsys, "compact", str(EXAMPLE), "-o", str(out_file), *args)
    assert code == 2
    assert fragment in err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("contextledger: error: ")
    assert not out_file.exists()


def test_malformed_transcript_names_the_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"role": "user", "content": "hi"}) + "\n" + json.dumps({"role": "robot", "content": "x"}) + "\n"
    )
    out_file = tmp_path / "out.jsonl"
    code, _, err = run(capsys, "compact", str(bad), "--budget", "100", "-o", str(out_file))
    assert code == 2
    assert f"{bad}:2:" in err
    assert "unknown role 'robot'" in err
    assert len(err.strip().splitlines()) == 1
    assert not out_file.exists()


def test_missing_input_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "compact", str(tmp_path / "nope.jsonl"), "--budget", "100")
    assert code == 2
    assert "no such file" in err


def test_existing_output_is_untouched_when_compaction_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "out.jsonl"
    out_file.write_text("precious\n")
    code, _, _ = run(capsys, "compact", str(EXAMPLE), "-o", str(out_file), "--strategy", "bogus")
    assert code == 2
    assert out_file.read_text() == "precious\n"


def test_validate_reports_each_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.jsonl"
    rows = [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "ghost", "content": "orphan"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "user", "content": "next"},
    ]
    broken.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, _ = run(capsys, "validate", str(broken))
    assert code == 1
    assert "message 1: orphan_tool_result" in out
    assert "message 2: missing_tool_result" in out
    assert "2 problem(s) in 4 messages" in out


def test_validate_accepts_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "validate", str(EXAMPLE))
    assert code == 0
    assert "valid" in out


def test_console_script_runs() -> None:
    script = Path(sys.executable).parent / "contextledger"
    assert script.exists(), "the contextledger console script is declared in pyproject.toml"
    completed = subprocess.run([str(script), "validate", str(EXAMPLE)], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr
    assert "49 messages, valid" in completed.stdout


# Through the real console script, as a new user runs it ----------------------------------------------

SCRIPT = Path(sys.executable).parent / "contextledger"
REPOSITORY = Path(__file__).resolve().parent.parent


def console(*argv: str, stdin: str = "", cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *argv], input=stdin, capture_output=True, text=True, check=False, cwd=cwd, timeout=120
    )


def test_compact_to_stdout_writes_plain_openai_jsonl_and_the_report_to_stderr(tmp_path: Path) -> None:
    completed = console("compact", str(EXAMPLE), "--budget", "2000", "-o", "-", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert not (tmp_path / "-").exists()
    rows = [json.loads(line) for line in completed.stdout.splitlines()]
    assert rows
    assert all("_contextledger" not in row for row in rows)
    assert validate(from_openai(rows)) == []
    assert "tokens" in completed.stderr
    assert "wrote" in completed.stderr


def test_compact_files_are_plain_unless_metadata_is_asked_for(tmp_path: Path) -> None:
    plain, kept = tmp_path / "plain.jsonl", tmp_path / "kept.jsonl"
    assert console("compact", str(EXAMPLE), "--budget", "3000", "-o", str(plain)).returncode == 0
    assert console("compact", str(EXAMPLE), "--budget", "3000", "-o", str(kept), "--metadata").returncode == 0
    assert "_contextledger" not in plain.read_text()
    assert "_contextledger" in kept.read_text()
    assert [json.loads(line) for line in plain.read_text().splitlines()] == to_openai(read_jsonl(kept))


def test_compact_without_output_says_how_to_print_the_transcript() -> None:
    completed = console("compact", str(EXAMPLE), "--budget", "2000")
    assert completed.returncode == 0, completed.stderr
    assert "-o - to print it" in completed.stdout


@pytest.mark.parametrize("form", ["array", "object"])
def test_a_json_array_or_messages_object_is_accepted(tmp_path: Path, form: str) -> None:
    rows = to_openai(read_jsonl(EXAMPLE))
    path = tmp_path / f"{form}.json"
    path.write_text(json.dumps(rows if form == "array" else {"model": "x", "messages": rows}, indent=2))
    completed = console("validate", str(path))
    assert completed.returncode == 0, completed.stderr
    assert "49 messages, valid" in completed.stdout


def test_an_unrecognised_json_object_is_named_not_dumped(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"settings": "x" * 5000, "other": 1}))
    completed = console("validate", str(path))
    assert completed.returncode == 2
    assert "a JSON object with keys other, settings, not a transcript" in completed.stderr
    assert len(completed.stderr) < 400


def test_a_negative_budget_names_the_flag_and_a_missing_folder_names_the_folder(tmp_path: Path) -> None:
    completed = console("compact", str(EXAMPLE), "--budget", "-5")
    assert completed.returncode == 2
    assert "--budget must be a positive number of tokens, got -5" in completed.stderr
    assert "TokenBudgetComposedStrategy" not in completed.stderr
    missing = tmp_path / "missing" / "out.jsonl"
    completed = console("compact", str(EXAMPLE), "--budget", "2000", "-o", str(missing))
    assert completed.returncode == 2
    assert f"the folder {missing.parent} does not exist" in completed.stderr
    assert ".out.jsonl." not in completed.stderr  # no temporary file name


def test_version_shows_what_there_is() -> None:
    version = console("--version")
    assert version.returncode == 0
    assert version.stdout.startswith("contextledger 0.")


def test_a_bare_command_is_a_usage_error_with_the_usage_on_stderr() -> None:
    bare = console()
    assert bare.returncode == 2
    assert bare.stdout == ""
    assert "usage: contextledger" in bare.stderr
    for command in COMMANDS:
        assert command in bare.stderr
    assert bare.stderr.rstrip().endswith("contextledger: error: give a command")


def test_dev_help_ends_with_the_commands_not_the_shell_options() -> None:
    completed = subprocess.run([str(REPOSITORY / "dev"), "help"], capture_output=True, text=True, check=False)
    assert completed.returncode == 0
    assert "set -euo pipefail" not in completed.stdout
    assert completed.stdout.strip().splitlines()[-1].lstrip("# ").startswith("./dev help")
    assert "./dev bench" in completed.stdout


@pytest.mark.parametrize("argv", [["bogus"], []])
def test_dev_with_an_unknown_or_no_command_is_a_usage_error(argv: list[str]) -> None:
    completed = subprocess.run([str(REPOSITORY / "dev"), *argv], capture_output=True, text=True, check=False)
    assert completed.returncode == 2
    assert completed.stdout == ""
    assert "./dev test" in completed.stderr
    if argv:
        assert "unknown command 'bogus'" in completed.stderr


def _interruptible() -> None:
    """Give the child a terminal's SIGINT: a shell running this suite in the background starts it
    ignored, and Python then never turns Ctrl-C into KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_in_chat_says_goodbye_without_a_traceback() -> None:
    child = subprocess.Popen(
        [str(SCRIPT), "chat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_interruptible,  # noqa: PLW1509  (the suite starts no threads that could deadlock here)
    )
    assert child.stdin is not None
    assert child.stdout is not None
    child.stdin.write("module=Billing\n")
    child.stdin.flush()
    while "admitted module" not in child.stdout.readline():
        pass
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=30)
    assert child.returncode == 130
    assert "Interrupted" in out
    assert "Traceback" not in err
    assert "KeyboardInterrupt" not in err


def test_facts_command_lists_reviews_revokes_and_expires_a_sqlite_store(tmp_path: Path) -> None:
    store_path = tmp_path / "facts.sqlite3"
    chat = console(
        "chat",
        "--store",
        str(store_path),
        "--owner",
        "ada",
        "--ttl",
        "3600",
        stdin="Sorry, I was wrong: database=SQL Server 2022\nmodule=Billing\nquit\n",
    )
    assert chat.returncode == 0, chat.stderr
    listing = console("facts", "list", "--store", str(store_path), "--owner", "ada")
    assert listing.returncode == 0, listing.stderr
    assert 'database = "SQL Server 2022"' in listing.stdout
    assert "expires" in listing.stdout
    unknown = console("facts", "list", "--store", str(store_path), "--owner", "bob")
    assert unknown.returncode == 1
    assert "no owner 'bob'" in unknown.stderr
    revoked = console(
        "facts", "revoke", "database", "--reason", "asked by email", "--store", str(store_path), "--owner", "ada"
    )
    assert revoked.returncode == 0, revoked.stderr
    history = console("facts", "history", "--store", str(store_path), "--owner", "ada")
    assert "revoked database" in history.stdout
    assert "asked by email" in history.stdout
    assert "SQL Server 2022" not in history.stdout
    assert "admitted module='Billing'" in history.stdout
    expired = console("facts", "expire", "--store", str(store_path), "--owner", "ada")
    assert expired.returncode == 0
    assert "0 expired fact(s)" in expired.stdout
    bad = console("facts", "revoke", "--store", str(store_path), "--owner", "ada", "--reason", "x")
    assert bad.returncode == 2
    assert "give one KEY" in bad.stderr


@pytest.mark.parametrize("mode", ["provider", "manual"])
def test_the_reported_transcript_through_chat(mode: str) -> None:
    """The transcript of the report that started this work, and the customer's sentence, replayed as typed."""
    script = "\n".join(
        [
            "database=PostgreSQL 15",
            "Sorry, I was wrong: database=SQL Server 2022",
            "mem",
            "Hi, I'm calling about… customer=Acme GmbH; module=Billing",
            "set timeout=30 and see https://x.test/?version=2",
            "forget",
            "Which database am I on?",
            "quit",
        ]
    )
    completed = console("chat", "--mode", mode, stdin=script + "\n")
    assert completed.returncode == 0, completed.stderr
    turns = completed.stdout.split("\n> ")
    correction = next(turn for turn in turns if turn.startswith("Sorry, I was wrong"))
    assert (
        "admitted database='SQL Server 2022' (evidence 'database=SQL Server 2022'): corrects the value admitted at "
        "turn 1" in correction
    )
    listing = next(turn for turn in turns if turn.startswith("mem"))
    assert 'database = "SQL Server 2022"' in listing
    assert "PostgreSQL" not in listing
    customer = next(turn for turn in turns if turn.startswith("Hi, I'm calling"))
    assert "admitted customer='Acme GmbH' (evidence 'customer=Acme GmbH')" in customer
    assert "admitted module='Billing' (evidence 'module=Billing')" in customer
    prose = next(turn for turn in turns if turn.startswith("set timeout"))
    assert prose.count("'=' at ") == 2  # every '=' explained, both read as prose
    assert "prose:" in prose
    question = next(turn for turn in turns if turn.startswith("Which database"))
    assert "[main] I don't know that from this conversation." in question
    for value in ("SQL Server 2022", "PostgreSQL 15"):
        assert value not in question


# Every command at its edges: '-' is the standard stream, Ctrl-C is one line, a store must exist --------------


def test_compact_and_validate_read_standard_input_for_dash(tmp_path: Path) -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    compacted = console("compact", "-", "--budget", "2000", "-o", "-", stdin=text, cwd=tmp_path)
    assert compacted.returncode == 0, compacted.stderr
    assert not (tmp_path / "-").exists()
    rows = [json.loads(line) for line in compacted.stdout.splitlines()]
    assert 0 < len(rows) < 49
    assert "<stdin>" in compacted.stderr
    checked = console("validate", "-", stdin=text, cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout == "<stdin>: 49 messages, valid\n"


class _InterruptingBytes(io.BytesIO):
    def read(self, size: int | None = -1) -> bytes:
        raise KeyboardInterrupt


class _Interrupting(io.StringIO):
    """Standard input as a person at a terminal who presses Ctrl-C instead of typing."""

    def read(self, size: int | None = -1) -> str:
        raise KeyboardInterrupt

    readline = read  # type: ignore[assignment]

    @property
    def buffer(self) -> io.BytesIO:
        return _InterruptingBytes()


@pytest.mark.parametrize(
    "argv",
    [
        ["compact", "-", "--budget", "100"],
        ["validate", "-"],
        ["lab", "-"],
        ["facts", "list", "--store", "STORE", "--schema", "-"],
        ["serve", "--config", "-"],
        ["chat"],
    ],
    ids=lambda argv: argv[0],
)
def test_ctrl_c_ends_every_command_with_one_line_and_status_130(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "facts.sqlite3"
    SQLiteFactStore(store, owner="chat").close()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", _Interrupting())
    code = main([str(store) if item == "STORE" else item for item in argv])
    out, err = capsys.readouterr()
    assert code == 130
    if argv[0] == "chat":  # the chat says goodbye in its own transcript
        assert "Interrupted" in out
    else:
        assert err.splitlines() == ["contextledger: interrupted"]
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("action", [["list"], ["history"], ["expire"], ["revoke", "database", "--reason", "x"]])
def test_a_missing_store_is_an_error_naming_the_path_and_creates_nothing(tmp_path: Path, action: list[str]) -> None:
    typo = tmp_path / "typo.sqlite3"
    completed = console("facts", *action, "--store", str(typo))
    assert completed.returncode == 2
    assert "No facts" not in completed.stdout
    assert f"no fact store at {typo}" in completed.stderr
    assert len(completed.stderr.strip().splitlines()) == 1
    assert not typo.exists()


def test_revoke_errors_speak_of_revoking(tmp_path: Path) -> None:
    store = tmp_path / "facts.sqlite3"
    assert console("chat", "--store", str(store), stdin="module=Billing\nquit\n").returncode == 0
    bad = console("facts", "revoke", "timeout", "--reason", "x", "--store", str(store))
    assert bad.returncode == 2
    assert "cannot revoke 'timeout'" in bad.stderr
    assert "or --all to revoke every fact" in bad.stderr
    assert "forget" not in bad.stderr
    assert "module" in console("facts", "list", "--store", str(store)).stdout  # nothing was changed


HOSTILE_TRANSCRIPTS = {
    "deep nesting": '[{"role": "user", "content": "hi", "x": ' + "[" * 5000 + "]" * 5000 + "}]",
    "a role that is a list": '[{"role": ["user"], "content": "hi"}]',
    "a role that is an object": '{"role": {"name": "user"}, "content": "hi"}\n',
    "a lone surrogate": '[{"role": "user", "content": "a\\ud800"}]',
    "NaN": '{"role": "user", "content": "hi", "score": NaN}\n',
    "an overflowing number": '[{"role": "user", "content": "hi", "score": 1e400}]',
    "a lone surrogate in JSONL": '{"role": "user", "content": "ok"}\n{"role": "user", "content": "\\udfff"}\n',
}


@pytest.mark.parametrize("command", ["validate", "compact"])
@pytest.mark.parametrize("case", sorted(HOSTILE_TRANSCRIPTS))
def test_hostile_transcripts_get_one_clear_line_not_a_traceback(tmp_path: Path, command: str, case: str) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(HOSTILE_TRANSCRIPTS[case])
    argv = [str(source)] + (["--budget", "2000", "-o", str(tmp_path / "out.jsonl")] if command == "compact" else [])
    completed = subprocess.run(
        [sys.executable, "-m", "contextledger.cli", command, *argv],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 2, completed.stderr
    assert "Traceback" not in completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"contextledger: error: {source}"), lines
    assert not (tmp_path / "out.jsonl").exists()
