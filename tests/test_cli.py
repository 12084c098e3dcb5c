"""The command line: what users see, what it writes, and how it refuses bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from contextledger import read_jsonl, validate
from contextledger.cli import main

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "support-session.jsonl"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_budget_shortcut_fits_the_budget_and_writes_a_valid_transcript(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "out.jsonl"
    code, out, err = run(capsys, "compact", str(EXAMPLE), "--budget", "2000", "-o", str(out_file))
    assert code == 0, err
    compacted = read_jsonl(out_file)
    assert validate(compacted) == []
    assert "tokens" in out
    assert "(estimate)" in out
    after_tokens = int(next(line for line in out.splitlines() if line.startswith("tokens")).split()[2])
    assert after_tokens <= 2000
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
        (["--budget", "0"], "token_budget must be 1 or more"),
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
