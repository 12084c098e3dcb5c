"""Each policy sends what it says it sends, measured at the client, and asking a probe question leaves no trace."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from contextledger.clients import OfflineModel, ScriptedChatClient
from contextledger.exceptions import ConfigurationError, LabError, SummaryGuardError
from contextledger.lab import (
    AgentPolicy,
    LabSettings,
    PolicySetup,
    get_policy,
    policy_names,
    register_policy,
    run_lab_sync,
    unregister_policy,
)
from contextledger.lab._calls import CallLog, RecordingClient, ToolBox
from contextledger.lab._policies import SUMMARY_LIMIT, LastTurnsView
from contextledger.messages import Message
from contextledger.tokenizers import CharacterEstimatorTokenizer
from tests.lab.support import policy, run, sent, small, timeline, user_texts

TURN_TEXTS = [turn["user"] for turn in small()["turns"]]


@pytest.fixture(scope="module")
def report() -> Any:
    return run([timeline()])


def test_the_shipped_policies_are_registered_in_order() -> None:
    assert policy_names()[:8] == (
        "full-history",
        "last-3-turns",
        "summary",
        "bounded-facts",
        "request-view",
        "reduced-history",
        "provider-compaction",
        "combined",
    )


def test_full_history_sends_every_earlier_turn(report: Any) -> None:
    data = policy(report, "full-history")
    for number in range(1, 7):
        assert user_texts(sent(data, number)) == TURN_TEXTS[:number]
    assert sent(data, 6)[0]["role"] == "system"


def test_last_three_turns_sends_the_current_turn_and_the_two_before(report: Any) -> None:
    data = policy(report, "last-3-turns")
    assert user_texts(sent(data, 2)) == TURN_TEXTS[:2]
    assert user_texts(sent(data, 6)) == TURN_TEXTS[3:6]


def test_request_view_compacts_every_call_and_reduced_history_sends_the_reduced_list_plus_the_turn(
    report: Any,
) -> None:
    view = policy(report, "request-view")
    reduced = policy(report, "reduced-history")
    # turns_exceed(3) with 3 preserved turns: the request view never sends more than 3 turns ...
    assert user_texts(sent(view, 6)) == TURN_TEXTS[3:6]
    # ... while the store reduced after the last append holds 3 turns, and the new one makes 4.
    assert user_texts(sent(reduced, 6)) == TURN_TEXTS[2:6]
    # The tool loop of turn 2 made two calls; the second carries the canned result.
    assert len(view["turns"][1]["calls"]) == 2
    second = sent(view, 2, call=1)
    assert second[-1] == {
        "role": "tool",
        "content": "ERROR export timeout",
        "tool_call_id": second[-2]["tool_calls"][0]["id"],
    }


def test_bounded_facts_sends_the_block_and_the_current_message_only(report: Any) -> None:
    data = policy(report, "bounded-facts")
    for number in range(1, 7):
        messages = sent(data, number)
        assert [m["role"] for m in messages] == ["system", "user"]
        assert messages[1]["content"] == TURN_TEXTS[number - 1]
        assert "<user_facts>" in messages[0]["content"]
    block = sent(data, 4)[0]["content"]
    assert '"Billing"' in block
    assert '"SQL Server 2022"' in block
    assert "Reporting" not in block
    assert "PostgreSQL" not in block
    # One writer call per turn, filed apart from the model calls.
    assert [len(turn["extra_calls"]) for turn in data["turns"]] == [1] * 6
    assert {call["kind"] for turn in data["turns"] for call in turn["extra_calls"]} == {"writer"}


def test_summary_replaces_older_turns_with_a_labelled_summary(report: Any) -> None:
    data = policy(report, "summary")
    summariser_turns = [turn["turn"] for turn in data["turns"] if turn["extra_calls"]]
    assert summariser_turns == [5]  # every 4 turns: the summariser runs before turn 5
    messages = sent(data, 5)
    assert messages[1]["role"] == "assistant"
    assert messages[1]["content"].startswith("[Summary, generated and unverified] ")
    assert user_texts(messages) == [TURN_TEXTS[4]]
    assert user_texts(sent(data, 6)) == TURN_TEXTS[4:6]


def test_the_recorded_request_is_what_reached_the_model() -> None:
    """The agent's own record is taken before a client-side request view; the lab's is the one sent."""

    async def scenario() -> None:
        model = OfflineModel()
        log = CallLog()
        recorder = RecordingClient(model, log)
        spied: list[list[Message]] = []
        original = model.get_response

        async def spy(messages: Sequence[Message], **kwargs: Any) -> Any:
            spied.append(list(messages))
            return await original(messages, **kwargs)

        model.get_response = spy  # type: ignore[method-assign]
        item = timeline()
        setup = PolicySetup(item, recorder, lambda kind: RecordingClient(model, log, kind), ToolBox(item))
        view = get_policy("request-view").factory(setup)
        assert isinstance(view, AgentPolicy)
        for turn in item.turns:
            response = await view.agent.run(turn.user, session=view.session)
            records = log.take()
            assert [list(r.request) for r in records] == spied[-len(records) :]
            if turn.number >= 4:
                # The agent recorded the full conversation; the model got the compacted request.
                assert len(response.model_calls[0].request) > len(records[0].request)

    asyncio.run(scenario())


def _scripted_model(summary: str) -> Any:
    def reply(messages: Sequence[Message]) -> str:
        if messages and "summarise" in messages[0].text:
            return summary
        return "Noted."

    return lambda: ScriptedChatClient([reply])


@pytest.mark.parametrize("length", [SUMMARY_LIMIT - 1, SUMMARY_LIMIT])
def test_a_summary_up_to_the_limit_is_used(length: int) -> None:
    text = "s" * length
    data = policy(run([timeline()], _scripted_model(text), policies=("summary",)), "summary")
    assert any(text in m["content"] for m in sent(data, 5) if m["role"] == "assistant")


@pytest.mark.parametrize(
    ("summary", "problem"),
    [
        ("", "empty summary"),
        ("   \n", "empty summary"),
        ("s" * (SUMMARY_LIMIT + 1), f"{SUMMARY_LIMIT + 1} characters, more than the {SUMMARY_LIMIT} allowed"),
        ("s" * 5000, "5000 characters"),
    ],
)
def test_an_empty_or_too_long_summary_stops_the_comparison(summary: str, problem: str) -> None:
    calls: list[Any] = []

    def model() -> Any:
        client = _scripted_model(summary)()
        calls.append(client)
        return client

    with pytest.raises(SummaryGuardError) as caught:
        run([timeline()], model, policies=("full-history", "summary", "bounded-facts"))
    message = str(caught.value)
    assert problem in message
    assert "timeline 'small', turn 5" in message
    assert "stopped" in message
    # Nothing after the failing policy ran: bounded-facts never built a client.
    assert len(calls) == 2


def test_unknown_usage_is_reported_as_unknown_and_known_usage_is_summed() -> None:
    silent = run([timeline()], lambda: ScriptedChatClient(["Noted."], report_usage=False), policies=("summary",))
    data = policy(silent, "summary")
    assert data["totals"]["reported_input"] == "unknown"
    assert data["totals"]["reported_output"] == "unknown"
    assert all(turn["tokens"]["reported_input"] == "unknown" for turn in data["turns"])
    assert data["totals"]["input_estimate"] > 0  # the estimate is still there, labelled as such

    talking = run([timeline()], lambda: ScriptedChatClient(["Noted."]), policies=("summary",))
    data = policy(talking, "summary")
    everything = [call for turn in data["turns"] for call in (*turn["calls"], *turn["extra_calls"])]
    assert data["totals"]["reported_input"] == sum(call["reported_input"] for call in everything)


def test_writer_and_summariser_tokens_are_in_the_totals(report: Any) -> None:
    counter = CharacterEstimatorTokenizer()
    for name in policy_names()[:6]:
        data = policy(report, name)
        totals = data["totals"]
        model_tokens = extra_tokens = 0
        for turn in data["turns"]:
            for call in turn["calls"]:
                model_tokens += call["input_estimate"]
            for call in turn["extra_calls"]:
                # Recount what the extra call sent, from the recorded messages, independently.
                messages = [
                    Message.system(m["content"]) if m["role"] == "system" else Message.user(m["content"])
                    for m in (data["messages"][i] for i in call["messages"])
                ]
                assert call["input_estimate"] == sum(counter.count_messages(messages))
                extra_tokens += call["input_estimate"]
        assert totals["input_estimate"] == model_tokens + extra_tokens
        assert totals["extra"]["input_estimate"] == extra_tokens
        if name in ("bounded-facts", "summary"):
            assert extra_tokens > 0
            assert totals["extra_calls"] == {"bounded-facts": {"writer": 6}, "summary": {"summariser": 1}}[name]
        else:
            assert extra_tokens == 0


def test_scripted_replies_are_not_sent_and_enter_the_conversation() -> None:
    data = small()
    data["turns"][3]["assistant"] = "It is PostgreSQL, as before."
    report = run([timeline(data)], policies=("full-history", "bounded-facts"))
    full = policy(report, "full-history")
    assert full["turns"][3]["calls"] == []
    assert full["turns"][3]["probes"] is None
    assert full["turns"][3]["scripted_reply"] is True
    assert {"role": "assistant", "content": "It is PostgreSQL, as before."} in sent(full, 5)
    facts = policy(report, "bounded-facts")
    assert facts["turns"][3]["calls"] == []
    assert len(facts["turns"][3]["extra_calls"]) == 1  # the user's message is still read by the writer


def test_the_rule_writer_is_an_explicit_choice_with_no_extra_call() -> None:
    data = policy(run([timeline()], policies=("bounded-facts",), writer="rules"), "bounded-facts")
    assert data["totals"]["extra_calls"] == {}
    assert '"Billing"' in sent(data, 4)[0]["content"]


def test_a_refused_extraction_is_noted_and_the_facts_stay() -> None:
    def reply(messages: Sequence[Message]) -> str:
        return "not json" if "fact writer" in messages[0].text else "Noted."

    data = policy(run([timeline()], lambda: ScriptedChatClient([reply]), policies=("bounded-facts",)), "bounded-facts")
    assert all(turn["notes"] and "extraction refused" in turn["notes"][0] for turn in data["turns"])
    assert "No facts" in sent(data, 6)[0]["content"]


@pytest.mark.parametrize(
    "name",
    [
        "full-history",
        "last-3-turns",
        "summary",
        "bounded-facts",
        "request-view",
        "reduced-history",
        "provider-compaction",
    ],
)
def test_asking_a_probe_question_leaves_no_trace(name: str) -> None:
    async def scenario(ask: bool) -> tuple[list[list[Message]], list[Message], str]:
        model = OfflineModel()
        log = CallLog()
        item = timeline()
        tools = ToolBox(item)
        setup = PolicySetup(item, RecordingClient(model, log), lambda kind: RecordingClient(model, log, kind), tools)
        chosen = get_policy(name).factory(setup)
        assert isinstance(chosen, AgentPolicy)
        answer = ""
        later: list[list[Message]] = []
        for turn in item.turns:
            if turn.number == 5 and ask:
                # Asked just when a summary is due and before a new fact: any trace would show below.
                tools.turn = None
                answer = await chosen.ask("What is the current module? Reply with the value only.")
                log.take()
            tools.turn = turn
            await chosen.run_turn(turn)
            records = log.take()
            if turn.number >= 5:
                later.extend(list(r.request) for r in records)
        return later, await chosen.stored.load("lab"), answer

    plain = asyncio.run(scenario(False))
    asked = asyncio.run(scenario(True))
    assert asked[0] == plain[0]
    assert asked[1] == plain[1]
    assert asked[2]  # the question was answered


@pytest.fixture
def extra_policy() -> Iterator[str]:
    class CurrentMessageOnly(AgentPolicy):
        """Sends the instructions and the current message: no memory at all."""

        def build(self) -> Any:
            return self.agent_with(providers=[LastTurnsView(1)])

    register_policy("current-only", CurrentMessageOnly, description="only the current message is sent")
    yield "current-only"
    unregister_policy("current-only")


def test_a_user_policy_can_be_registered_and_run(extra_policy: str) -> None:
    assert extra_policy in policy_names()
    data = policy(run([timeline()], policies=(extra_policy, "full-history")), extra_policy)
    assert data["description"] == "only the current message is sent"
    assert user_texts(sent(data, 6)) == [TURN_TEXTS[5]]


def test_registration_is_checked() -> None:
    with pytest.raises(ConfigurationError, match="already registered"):
        register_policy("full-history", AgentPolicy, description="again")
    with pytest.raises(ConfigurationError, match="lower-case"):
        register_policy("Full History", AgentPolicy, description="x")
    with pytest.raises(ConfigurationError, match="description"):
        register_policy("nameless", AgentPolicy, description=" ")
    with pytest.raises(LabError, match="unknown policy 'nope'; choose from full-history"):
        get_policy("nope")
    with pytest.raises(LabError, match="listed twice"):
        run([timeline()], policies=("summary", "summary"))


def test_progress_counts_every_turn_of_every_policy() -> None:
    seen: list[tuple[int, int, str]] = []
    item = timeline()
    run_lab_sync(
        [item], OfflineModel, LabSettings(policies=("summary", "full-history")), on_progress=lambda *a: seen.append(a)
    )
    total = len(item.turns) * 2
    assert [done for done, _, _ in seen] == list(range(1, total + 1))
    assert {t for _, t, _ in seen} == {total}
    assert seen[0][2] == "small · summary"
    assert seen[-1][2] == "small · full-history"
