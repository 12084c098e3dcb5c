"""Writers: the rule writer, the model writer against the offline model and scripted replies, and
``extract``, which admits a writer's proposal whole or not at all."""

from __future__ import annotations

import asyncio
import json

import pytest

from contextledger.clients import OfflineModel, ScriptedChatClient, Usage
from contextledger.clients._offline import FACT_WRITER_MARKER
from contextledger.exceptions import FactRejectedError, ModelTimeoutError, StaleTicketError
from contextledger.facts import (
    MAX_MESSAGE_CHARS,
    Admission,
    FactStore,
    FactWriter,
    ModelWriter,
    RuleWriter,
    extract,
    parse_assertions,
)
from contextledger.facts._records import Candidate
from contextledger.facts._writers import WRITER_INSTRUCTIONS, Proposal
from contextledger.messages import Message
from contextledger.tokenizers import CharacterEstimatorTokenizer
from tests.facts.support import snapshot

SEED_FIRST = "module=Reporting; database=PostgreSQL"
SEED_CORRECTION = "module=Billing; database=SQL Server 2022"


def facts_json(*facts: tuple[str, str, str]) -> str:
    return json.dumps({"facts": [{"key": k, "value": v, "evidence": e} for k, v, e in facts]})


def seeded_store() -> FactStore:
    store = FactStore()
    asyncio.run(extract(store, RuleWriter(), store.begin_turn(SEED_FIRST)))
    return store


def refused_extraction(store: FactStore, writer: FactWriter, text: str) -> FactRejectedError:
    """Run one extraction that must be refused; the store must not have moved (past the turn)."""
    ticket = store.begin_turn(text)
    before = snapshot(store)
    with pytest.raises(FactRejectedError) as caught:
        asyncio.run(extract(store, writer, ticket))
    assert snapshot(store) == before
    assert "nothing was admitted" in str(caught.value)
    assert "no fallback" in str(caught.value)
    return caught.value


def test_writers_satisfy_the_protocol() -> None:
    assert isinstance(RuleWriter(), FactWriter)
    assert isinstance(ModelWriter(OfflineModel()), FactWriter)


@pytest.mark.parametrize("text", [SEED_FIRST, SEED_CORRECTION, "Where can I find logs?", "Priority = P1\nlog=/var/log"])
def test_the_rule_writer_proposes_the_declarations_with_no_model_call(text: str) -> None:
    proposal = asyncio.run(RuleWriter().propose(text))
    assert proposal == Proposal(parse_assertions(text), None, 0)


def test_the_rule_writer_refuses_invalid_declarations() -> None:
    with pytest.raises(FactRejectedError, match="'team'"):
        asyncio.run(RuleWriter().propose("module=Billing; team=Payments"))


# The model writer against the offline model ---------------------------------------------------


@pytest.mark.parametrize("text", [SEED_FIRST, SEED_CORRECTION])
def test_the_model_writer_reads_the_seed_messages_through_the_offline_model(text: str) -> None:
    model = OfflineModel()
    writer = ModelWriter(model)
    proposal = asyncio.run(writer.propose(text))
    assert proposal.candidates == parse_assertions(text)
    assert proposal.model_calls == 1
    sent = [Message.system(WRITER_INSTRUCTIONS), Message.user(text)]
    reply = facts_json(*((c.key, c.value, c.evidence) for c in proposal.candidates))
    tokenizer = CharacterEstimatorTokenizer()
    assert proposal.usage == Usage(
        input_tokens=sum(tokenizer.count_messages(sent)),
        output_tokens=tokenizer.count_message(Message.assistant(reply)),
        is_estimate=True,
    )
    assert writer.call_usage == [proposal.usage]


def test_the_seed_sequence_with_the_model_writer_corrects_both_keys() -> None:
    store = FactStore()
    writer = ModelWriter(OfflineModel())
    first = asyncio.run(extract(store, writer, store.begin_turn(SEED_FIRST)))
    second = asyncio.run(extract(store, writer, store.begin_turn(SEED_CORRECTION)))
    assert second.replaced == first.admitted
    assert [(f.key, f.value, f.evidence, f.turn) for f in store.facts()] == [
        ("database", "SQL Server 2022", "database=SQL Server 2022", 2),
        ("module", "Billing", "module=Billing", 2),
    ]
    assert len(writer.call_usage) == 2
    assert all(usage is not None and usage.total_tokens for usage in writer.call_usage)


def test_the_offline_model_copies_unknown_keys_and_the_host_refuses_them() -> None:
    store = seeded_store()
    writer = ModelWriter(OfflineModel())
    error = refused_extraction(store, writer, "module=Billing; team=Payments")
    assert "'team'" in " ".join(error.problems)
    assert len(writer.call_usage) == 1, "the rejected call's cost is still recorded"


def test_the_offline_model_answers_a_writer_only_when_the_marker_is_there() -> None:
    model = OfflineModel()
    asked = asyncio.run(model.get_response([Message.system(FACT_WRITER_MARKER), Message.user("module = Billing ")]))
    assert json.loads(asked.text) == {"facts": [{"key": "module", "value": "Billing", "evidence": "module = Billing"}]}
    plain = asyncio.run(model.get_response([Message.system("You help."), Message.user("module=Billing")]))
    assert plain.text == "From this conversation: module: Billing."
    assert WRITER_INSTRUCTIONS.startswith(FACT_WRITER_MARKER)


def test_the_model_writer_sends_only_the_current_message() -> None:
    client = ScriptedChatClient([facts_json(), facts_json(("module", "Billing", "module=Billing"))])
    writer = ModelWriter(client)
    asyncio.run(writer.propose("Where can I find logs?"))
    asyncio.run(writer.propose("module=Billing"))
    assert client.requests == [
        [Message.system(WRITER_INSTRUCTIONS), Message.user("Where can I find logs?")],
        [Message.system(WRITER_INSTRUCTIONS), Message.user("module=Billing")],
    ]
    assert client.options == [{}, {}]


def test_json_mode_asks_the_endpoint_for_a_json_object() -> None:
    client = ScriptedChatClient([facts_json()])
    asyncio.run(ModelWriter(client, json_mode=True).propose("hello"))
    assert client.options == [{"response_format": {"type": "json_object"}}]


def test_a_fenced_json_reply_is_read() -> None:
    fenced = "```json\n" + facts_json(("module", "Billing", "module=Billing")) + "\n```"
    proposal = asyncio.run(ModelWriter(ScriptedChatClient([fenced])).propose("module=Billing"))
    assert proposal.candidates == (Candidate("module", "Billing", "module=Billing"),)


def test_unknown_usage_stays_unknown() -> None:
    client = ScriptedChatClient([facts_json()], report_usage=False)
    proposal = asyncio.run(ModelWriter(client).propose("hello"))
    assert proposal.usage is None
    assert proposal.model_calls == 1


def test_an_oversized_message_is_refused_before_any_model_call() -> None:
    client = ScriptedChatClient([facts_json()])
    with pytest.raises(FactRejectedError, match="over the limit of 4096"):
        asyncio.run(ModelWriter(client).propose("x" * (MAX_MESSAGE_CHARS + 1)))
    assert client.requests == []


# Faulty writers: every one leaves the store as it was -------------------------------------------


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        pytest.param("module=Billing; database=SQL Server 2022", "not valid JSON", id="prose"),
        pytest.param('{"facts": [{"key": "module", "value": "Billing"', "not valid JSON", id="truncated-json"),
        pytest.param("", "not valid JSON", id="empty"),
        pytest.param('[{"key": "module"}]', '{"facts": [...]}', id="list-not-object"),
        pytest.param('{"candidates": []}', '{"facts": [...]}', id="wrong-field"),
        pytest.param('{"facts": [{"key": "module", "value": "Billing"}]}', "lacks a text evidence", id="no-evidence"),
        pytest.param('{"facts": ["module=Billing"]}', "lacks a text key, value, evidence", id="string-item"),
        pytest.param(
            facts_json(("module", "Billing", "module=Billing"), ("database", "SQL Server", "database=SQL Server 2022")),
            "no paraphrase or semantic guess",
            id="paraphrase",
        ),
        pytest.param(
            facts_json(
                ("module", "Billing", "module=Billing"),
                ("database", "Microsoft SQL Server 2022", "database=SQL Server 2022"),
            ),
            "no paraphrase or semantic guess",
            id="embellishment",
        ),
        pytest.param(
            facts_json(
                ("module", "Billing", "module=Billing"),
                ("database", "SQL Server 2022", "database=SQL Server 2022"),
                ("product", "Ledger", "module=Billing"),
            ),
            "may not add a key",
            id="added-key",
        ),
        pytest.param(facts_json(("module", "Billing", "module=Billing")), "may not drop a key", id="dropped-key"),
        pytest.param(facts_json(), "may not drop a key", id="dropped-everything"),
        pytest.param(
            facts_json(
                ("module", "Billing", "module=Billing"),
                ("module", "Billing", "module=Billing"),
                ("database", "SQL Server 2022", "database=SQL Server 2022"),
            ),
            "duplicate",
            id="duplicate",
        ),
        pytest.param(
            facts_json(
                ("module", "Billing", "Billing module"), ("database", "SQL Server 2022", "database=SQL Server 2022")
            ),
            "not an exact quote",
            id="invented-evidence",
        ),
        pytest.param(
            facts_json(("module", "Billing", "module=Billing"), ("database", "SQL Server 2022", "")),
            "no evidence",
            id="empty-evidence",
        ),
        pytest.param(
            facts_json(("module", "Billing", "module=Billing"), ("database", "SQL Server 2022", "module=Billing")),
            "does not contain the value",
            id="evidence-of-another-key",
        ),
    ],
)
def test_a_faulty_model_writer_gets_the_whole_batch_refused(reply: str, expected: str) -> None:
    store = seeded_store()
    client = ScriptedChatClient([reply])
    writer = ModelWriter(client)
    error = refused_extraction(store, writer, SEED_CORRECTION)
    assert expected in " ".join(error.problems)
    assert [f.value for f in store.facts()] == ["PostgreSQL", "Reporting"]
    assert len(writer.call_usage) == 1
    assert writer.call_usage[0] is not None


def test_a_failing_model_call_is_a_rejected_extraction_with_its_cause() -> None:
    store = seeded_store()
    failure = ModelTimeoutError("the model did not answer within 30 s")
    error = refused_extraction(store, ModelWriter(ScriptedChatClient([failure])), SEED_CORRECTION)
    assert error.__cause__ is failure
    assert "ModelTimeoutError" in error.problems[0]


def test_a_writer_that_crashes_is_a_rejected_extraction() -> None:
    class Broken:
        async def propose(self, user_text: str) -> Proposal:
            raise KeyError(user_text)

    store = seeded_store()
    error = refused_extraction(store, Broken(), SEED_CORRECTION)
    assert isinstance(error.__cause__, KeyError)


def test_cancellation_propagates_and_admits_nothing() -> None:
    store = seeded_store()

    class Slow:
        async def propose(self, user_text: str) -> Proposal:
            await asyncio.sleep(60)
            return Proposal(parse_assertions(user_text))

    async def main() -> None:
        task = asyncio.create_task(extract(store, Slow(), store.begin_turn(SEED_CORRECTION)))
        await asyncio.sleep(0)
        task.cancel()
        await task

    before = [f.value for f in store.facts()]
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())
    assert [f.value for f in store.facts()] == before


def test_a_writer_that_finishes_after_the_next_turn_began_is_stale() -> None:
    store = seeded_store()

    async def main() -> Admission:
        started = asyncio.Event()

        class Waits:
            async def propose(self, user_text: str) -> Proposal:
                started.set()
                await asyncio.sleep(0.01)
                return Proposal(parse_assertions(user_text))

        task = asyncio.create_task(extract(store, Waits(), store.begin_turn(SEED_CORRECTION)))
        await started.wait()
        store.begin_turn("Where can I find logs?")
        return await task

    with pytest.raises(StaleTicketError):
        asyncio.run(main())
    assert [f.value for f in store.facts()] == ["PostgreSQL", "Reporting"]
