"""``validate`` reports each provider's rules, and ``compact`` refuses to compact what breaks them
unless told to."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contextledger.cli import main

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "support-session.jsonl"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


NO_CONTENT = [{"role": "user"}, {"role": "assistant", "content": "Hi."}]


def test_validate_reports_a_user_message_without_content(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "validate", str(jsonl(tmp_path / "in.jsonl", NO_CONTENT)))
    assert code == 1
    assert "message 0: no_content: a user message needs content" in out
    assert "1 problem(s) in 2 messages" in out


def test_validate_reads_a_whole_anthropic_body(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = tmp_path / "body.json"
    use = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
    body.write_text(
        json.dumps(
            {
                "model": "claude",
                "max_tokens": 100,
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": [use]},
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "x"}, {"type": "tool_result", "tool_use_id": "toolu_1"}],
                    },
                ],
            }
        )
    )
    code, out, _ = run(capsys, "validate", "--format", "anthropic", str(body))
    assert code == 1
    assert f"{body}: message 2: tool_result_not_first: " in out
    assert "1 problem(s) in 3 messages" in out


def test_validate_reads_a_whole_responses_body(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = tmp_path / "body.json"
    items = [{"role": "user", "content": "hi"}, {"type": "function_call_output", "call_id": "call_1", "output": "x"}]
    body.write_text(json.dumps({"model": "gpt", "input": items}))
    code, out, _ = run(capsys, "validate", "--format", "responses", str(body))
    assert code == 1
    assert "item 1: output_without_call: " in out
    assert "1 problem(s) in 2 items" in out
    body.write_text(json.dumps({"model": "gpt", "input": items, "previous_response_id": "resp_1"}))
    code, out, _ = run(capsys, "validate", "--format", "responses", str(body))
    assert code == 0
    assert out == f"{body}: 2 items, valid\n"


def test_validate_names_a_body_level_problem_as_the_body(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"input": []}))
    code, out, _ = run(capsys, "validate", "--format", "responses", str(body))
    assert code == 1
    assert f"{body}: body: empty_input: " in out


@pytest.mark.parametrize("text", ["[1, 2]", "not json", '{"input": NaN}'])
def test_a_body_that_is_not_an_object_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    body = tmp_path / "body.json"
    body.write_text(text)
    code, _, err = run(capsys, "validate", "--format", "anthropic", str(body))
    assert code == 2
    assert err.startswith(f"contextledger: error: {body}:")
    assert len(err.strip().splitlines()) == 1


def test_validate_chat_is_the_default_and_accepts_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "validate", str(EXAMPLE))[:2] == (0, f"{EXAMPLE}: 49 messages, valid\n")
    assert run(capsys, "validate", "--format", "chat", str(EXAMPLE))[:2] == (0, f"{EXAMPLE}: 49 messages, valid\n")


def test_compact_refuses_an_invalid_transcript_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = jsonl(tmp_path / "in.jsonl", [*NO_CONTENT, {"role": "tool", "tool_call_id": "ghost", "content": "x"}])
    out_file = tmp_path / "out.jsonl"
    code, out, err = run(capsys, "compact", str(source), "--budget", "100", "-o", str(out_file))
    assert code == 1
    assert out == ""
    assert "message 0: no_content" in err
    assert "message 2: orphan_tool_result" in err
    assert "2 problem(s)" in err
    assert "--force" in err
    assert not out_file.exists()


def test_compact_refuses_before_printing_a_transcript(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = jsonl(tmp_path / "in.jsonl", NO_CONTENT)
    code, out, _ = run(capsys, "compact", str(source), "--budget", "100", "-o", "-")
    assert code == 1
    assert out == ""


def test_compact_force_warns_and_writes_as_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = jsonl(tmp_path / "in.jsonl", NO_CONTENT)
    out_file = tmp_path / "out.jsonl"
    code, out, err = run(capsys, "compact", str(source), "--budget", "100", "-o", str(out_file), "--force")
    assert code == 0
    assert "warning: " in err
    assert "no_content" in err
    assert f"wrote 2 messages to {out_file}" in out
    assert [json.loads(line) for line in out_file.read_text().splitlines()] == NO_CONTENT


def test_compact_of_a_valid_transcript_is_unchanged_by_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain, forced = tmp_path / "plain.jsonl", tmp_path / "forced.jsonl"
    assert run(capsys, "compact", str(EXAMPLE), "--budget", "2000", "-o", str(plain))[0] == 0
    assert run(capsys, "compact", str(EXAMPLE), "--budget", "2000", "-o", str(forced), "--force")[0] == 0
    assert plain.read_text() == forced.read_text()
