"""The seed's check sequence, end to end through the chat REPL's own input loop, in both modes."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contextledger.cli import main
from contextledger.clients import OfflineModel, ScriptedChatClient
from contextledger.demo import ChatLoop, FactsDesk, build_desk
from contextledger.exceptions import ModelTimeoutError
from contextledger.facts import FactStore
from contextledger.facts._block import EMPTY_BLOCK
from tests.facts.support import Clock

MODES = ["provider", "manual"]
COMMANDS = {"mem", "forget", "forget module", "quit"}
FIRST = "module=Reporting; database=PostgreSQL"
SECOND = "module=Billing; database=SQL Server 2022"
QUESTION = "Which module and database do we use now?"


def run_loop(desk: FactsDesk, script: str) -> tuple[ChatLoop, str, int]:
    out = io.StringIO()
    loop = ChatLoop(desk, out)
    status = loop.run(io.StringIO(script))
    return loop, out.getvalue(), status


def stored_texts(desk: FactsDesk, name: str) -> list[str]:
    return [text for message in asyncio.run(desk.history(name)) for text in message.payload_texts()]


@pytest.mark.parametrize("mode", MODES)
def test_seed_check_sequence_through_the_repl_loop(mode: str) -> None:
    model = ScriptedChatClient([OfflineModel()])  # the offline model, every request kept
    store = FactStore(clock=Clock())
    desk = build_desk(mode=mode, client=model, store=store)  # type: ignore[arg-type]

    first = "\n".join([FIRST, "mem", SECOND, "mem", "Where can I find logs?", "mem", "forget module", "mem"]) + "\n"
    loop, output, status = run_loop(desk, first)
    assert status == 0
    declared, mem1, corrected, mem2, logs, mem3, forgot, mem4 = loop.replies

    assert declared.agent == "main"
    assert declared.turn is not None
    assert declared.turn.admission is not None
    assert {fact.key: fact.value for fact in declared.turn.admission.admitted} == {
        "module": "Reporting",
        "database": "PostgreSQL",
    }
    assert 'module = "Reporting"' in mem1.text
    assert 'evidence: "module=Reporting"' in mem1.text
    assert 'database = "PostgreSQL"' in mem1.text
    assert 'evidence: "database=PostgreSQL"' in mem1.text

    # The correction replaces both keys, with the new quotes and the new turn.
    assert corrected.turn is not None
    assert corrected.turn.admission is not None
    assert {fact.key: fact.value for fact in corrected.turn.admission.replaced} == {
        "module": "Reporting",
        "database": "PostgreSQL",
    }
    facts = {fact.key: fact for fact in corrected.turn.admission.admitted}
    assert set(facts) == {"module", "database"}
    assert (facts["module"].value, facts["module"].evidence) == ("Billing", "module=Billing")
    assert (facts["database"].value, facts["database"].evidence) == ("SQL Server 2022", "database=SQL Server 2022")
    assert facts["module"].turn == facts["database"].turn == corrected.turn.admission.admitted[0].turn
    assert 'evidence: "module=Billing"' in mem2.text
    assert 'evidence: "database=SQL Server 2022"' in mem2.text
    assert "Reporting" not in mem2.text
    assert "PostgreSQL" not in mem2.text

    # The logs question goes to the other agent, which sees the same facts; mem is unchanged after it.
    assert logs.agent == "logs"
    logs_requests = [r for r in model.requests if r[0].text.startswith("You answer questions about where logs")]
    assert logs_requests, "the logs agent never called the model"
    assert 'module = "Billing"' in logs_requests[0][0].text or 'module = "Billing"' in logs_requests[0][1].text
    assert mem3.text == mem2.text

    # forget module: database kept, the old statement in neither stored history.
    assert forgot.forget is not None
    assert [fact.key for fact in forgot.forget.forgotten] == ["module"]
    assert [fact.key for fact in store.facts()] == ["database"]
    assert 'database = "SQL Server 2022"' in mem4.text
    assert "module" not in mem4.text.split("allowed keys")[0]
    for name in ("main", "logs"):
        texts = stored_texts(desk, name)
        for forgotten in ("module=", "Reporting", "Billing"):
            assert not any(forgotten in text for text in texts), (name, forgotten, texts)
    assert any("database=SQL Server 2022" in text for text in stored_texts(desk, "main"))
    assert any(text == "Where can I find logs?" for text in stored_texts(desk, "logs"))

    second = "\n".join(["forget", "mem", QUESTION, "mem", "quit", "never read"]) + "\n"
    loop2, output2, status2 = run_loop(desk, second)
    assert status2 == 0
    forgot_all, empty1, answer, empty2, bye = loop2.replies
    assert bye.quit
    assert len(loop2.replies) == 5
    assert forgot_all.forget is not None
    assert [fact.key for fact in forgot_all.forget.forgotten] == ["database"]
    assert empty1.text.startswith("No facts.")
    epoch = store.epoch
    assert answer.agent == "main"
    assert store.facts() == []
    assert empty2.text == empty1.text
    assert store.epoch == epoch
    # The question was sent with an empty block and a history that no longer states anything.
    question_request = model.requests[-1]
    assert any(EMPTY_BLOCK in message.text for message in question_request)
    for text in stored_texts(desk, "main") + stored_texts(desk, "logs"):
        for gone in ("Reporting", "Billing", "PostgreSQL", "SQL Server"):
            assert gone not in text

    # Commands were handled by the host: no model request ever carried one as a user message.
    for request in model.requests:
        for message in request:
            if message.role == "user":
                assert message.text.strip().split("\n")[-1] not in COMMANDS
    assert "> mem\n" in output
    assert "> forget\n" in output2


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_model_call_is_reported_and_the_loop_goes_on(mode: str) -> None:
    client = ScriptedChatClient(["Noted.", ModelTimeoutError("the endpoint did not answer in 30 s"), "Noted."])
    store = FactStore(clock=Clock())
    desk = build_desk(mode=mode, client=client, store=store)  # type: ignore[arg-type]
    loop, output, status = run_loop(desk, "product=Ledger\nmodule=Billing\nmem\n")
    assert status == 1
    assert "error: the endpoint did not answer in 30 s" in output
    assert "stored nothing and admitted nothing" in output
    assert [(fact.key, fact.value) for fact in store.facts()] == [("product", "Ledger")]
    assert [message.text for message in asyncio.run(desk.history("main"))] == ["product=Ledger", "Noted."]
    assert 'product = "Ledger"' in loop.replies[-1].text


def test_a_refused_declaration_is_printed_and_the_facts_stay() -> None:
    desk = build_desk(client=OfflineModel(), store=FactStore(clock=Clock()))
    _, output, _ = run_loop(desk, "product=Ledger\nproduct=Other; colour=blue\nforget colour\nmem\n")
    assert "rejected colour='blue' (evidence 'colour=blue'): 'colour' is not an allowed key" in output
    assert "rejected product='Other' (evidence 'product=Other'): not admitted: the declaration of 'colour'" in output
    assert "nothing from this message was admitted" in output
    assert "cannot forget 'colour'" in output
    assert [(fact.key, fact.value) for fact in desk.store.facts()] == [("product", "Ledger")]


SCRIPT = "\n".join([FIRST, SECOND, "Where can I find logs?", "mem", "forget module", "mem", "forget", QUESTION, "mem"])


@pytest.mark.parametrize("mode", MODES)
def test_cli_entry_point_reads_stdin(
    mode: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(SCRIPT + "\n"))
    assert main(["chat", "--mode", mode]) == 0
    output = capsys.readouterr().out
    assert f"({mode} mode)" in output
    listings = output.split("> mem\n")[1:]
    assert 'module = "Billing"' in listings[0]
    assert 'evidence: "database=SQL Server 2022"' in listings[0]
    assert 'database = "SQL Server 2022"' in listings[1]
    assert 'module = "Billing"' not in listings[1]
    assert listings[2].startswith("No facts.")
    assert "[logs] " in output
    assert "(end of input)" in output


def test_cli_in_a_subprocess_with_a_model_writer() -> None:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    done = subprocess.run(
        [sys.executable, "-m", "contextledger.cli", "chat", "--mode", "manual", "--writer", "model"],
        input=SCRIPT + "\nquit\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    listings = done.stdout.split("> mem\n")[1:]
    assert 'evidence: "module=Billing"' in listings[0]
    assert "module" not in listings[1].split("\n")[1]
    assert 'database = "SQL Server 2022"' in listings[1]
    assert listings[2].startswith("No facts.")
    assert "Bye." in done.stdout


def test_cli_rejects_an_unknown_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chat", "--model", "nonsense"]) == 2
    assert "model must be one of offline, local, or openai:MODEL" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["chat", "--mode", "automatic"])
