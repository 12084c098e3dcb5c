"""The built-in offline model: deterministic, useful enough for demos, honest about its usage."""

from __future__ import annotations

import asyncio
import json

import pytest

from contextledger import Message
from contextledger.clients import ChatResponse, OfflineModel
from contextledger.compaction import DEFAULT_SUMMARIZATION_PROMPT, SummarizationStrategy, apply_compaction
from contextledger.exceptions import ConfigurationError, InvalidMessageError
from contextledger.messages import FunctionCallContent

PRICE_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_price",
        "description": "Price of an item",
        "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
    },
}


def ask(model: OfflineModel, messages: list[Message], **kwargs: object) -> ChatResponse:
    return asyncio.run(model.get_response(messages, **kwargs))  # type: ignore[arg-type]


def test_answers_with_the_newest_value_of_a_corrected_key() -> None:
    history = [
        Message.system("You are a support assistant."),
        Message.user("module=Reporting; database=PostgreSQL"),
        Message.assistant("Noted."),
        Message.user("module=Billing; database=SQL Server 2022"),
        Message.assistant("Noted."),
        Message.user("Which database and module are we on?"),
    ]
    reply = ask(OfflineModel(), history)
    assert reply.text == "From this conversation: module: Billing; database: SQL Server 2022."
    assert "PostgreSQL" not in reply.text


def test_says_when_it_does_not_know_and_acknowledges_statements() -> None:
    assert ask(OfflineModel(), [Message.user("Where can I find logs?")]).text == (
        "I don't know that from this conversation."
    )
    assert ask(OfflineModel(), [Message.user("The build is green.")]).text == "Noted."


def test_calls_the_tool_a_question_names_then_reports_its_result() -> None:
    model = OfflineModel()
    question = [Message.user("What's the price of a laptop?")]
    first = ask(model, question, tools=[PRICE_TOOL])
    (call_message,) = first.messages
    (call,) = call_message.function_calls
    assert isinstance(call, FunctionCallContent)
    assert call.name == "lookup_price"
    assert json.loads(call.arguments) == {"item": "laptop"}
    assert first.text == ""
    second = ask(model, [*question, call_message, Message.tool(call.call_id, "999.00 EUR")], tools=[PRICE_TOOL])
    assert second.text == "lookup_price returned 999.00 EUR."


def test_does_not_call_a_tool_the_question_does_not_name() -> None:
    reply = ask(OfflineModel(), [Message.user("Hello there")], tools=[PRICE_TOOL])
    assert reply.messages[0].function_calls == ()


def test_summary_keeps_declarations_and_rules_first_within_the_limit() -> None:
    transcript = "\n".join(
        [
            "user: constraint=never delete customer data",
            "user: module=Reporting; database=PostgreSQL",
            "assistant: Noted.",
            "user: module=Billing; database=SQL Server 2022",
            *[f"user: chatter line {n} about nothing in particular" for n in range(40)],
        ]
    )
    request = [Message.system(DEFAULT_SUMMARIZATION_PROMPT), Message.user(transcript)]
    summary = ask(OfflineModel(summary_chars=200), request).text
    assert len(summary) <= 200
    assert summary.startswith("Facts: constraint=never delete customer data; module=Billing; database=SQL Server 2022.")
    assert "PostgreSQL" not in summary
    assert len(ask(OfflineModel(), request, max_chars=120).text) <= 120


def test_works_as_the_summariser_of_the_summarisation_strategy() -> None:
    messages = [Message.system("sys")] + [
        m for n in range(6) for m in (Message.user(f"key{n}=value{n}"), Message.assistant(f"ok {n}"))
    ]
    projection = asyncio.run(
        apply_compaction(messages, strategy=SummarizationStrategy(client=OfflineModel(), target_count=4, threshold=2))
    )
    summary = projection[1]
    assert summary.is_summary
    assert summary.text.startswith("[Summary] Facts: key0=value0")


def test_is_deterministic_and_labels_its_usage_an_estimate() -> None:
    history = [Message.user("database=PostgreSQL"), Message.user("Which database?")]
    first, second = ask(OfflineModel(), history), ask(OfflineModel(), history)
    assert first == second
    assert first.usage is not None
    assert first.usage.is_estimate
    assert first.usage.input_tokens == sum(OfflineModel().tokenizer.count_messages(history))
    assert first.usage.output_tokens is not None
    assert first.usage.output_tokens > 0


def test_rejects_bad_input() -> None:
    with pytest.raises(InvalidMessageError, match="no messages"):
        ask(OfflineModel(), [])
    with pytest.raises(InvalidMessageError, match="not a Message"):
        ask(OfflineModel(), [{"role": "user", "content": "hi"}])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="summary_chars"):
        OfflineModel(summary_chars=3)
    request = [Message.system("Summarise."), Message.user("a")]
    with pytest.raises(ConfigurationError, match="max_chars"):
        ask(OfflineModel(), request, max_chars="long")


def test_plays_a_role_it_is_taught_only_when_the_marker_is_there(monkeypatch: pytest.MonkeyPatch) -> None:
    # The roles are the class's; a copy keeps this test's role out of every other test.
    monkeypatch.setattr(OfflineModel, "_roles", dict(OfflineModel._roles))
    OfflineModel.learn_role("[echo]", lambda text, system: f"{text.upper()} ({len(system)})")
    model = OfflineModel()
    asked = asyncio.run(model.get_response([Message.system("[echo] say it"), Message.user("hello")]))
    assert asked.text == "HELLO (13)"  # the system prompt handed over whole
    plain = asyncio.run(model.get_response([Message.system("You help."), Message.user("hello")]))
    assert plain.text == "Noted."
    with pytest.raises(ConfigurationError, match="marker must be a non-blank string"):
        OfflineModel.learn_role(" ", lambda text, system: text)
    with pytest.raises(ConfigurationError, match="answer must be callable"):
        OfflineModel.learn_role("[x]", "not a function")  # type: ignore[arg-type]
    assert "[x]" not in OfflineModel._roles


def test_the_facts_package_teaches_the_fact_writer_role() -> None:
    # The dependency runs from the facts to the model: importing them is what teaches the role.
    from contextledger.clients._offline import FACT_WRITER_MARKER  # noqa: PLC0415
    from contextledger.facts._writers import WRITER_INSTRUCTIONS  # noqa: PLC0415

    assert WRITER_INSTRUCTIONS.startswith(FACT_WRITER_MARKER)
    assert FACT_WRITER_MARKER in OfflineModel._roles
    request = [Message.system(WRITER_INSTRUCTIONS), Message.user("module=Billing")]
    asked = asyncio.run(OfflineModel().get_response(request))
    assert json.loads(asked.text) == {"facts": [{"key": "module", "value": "Billing", "evidence": "module=Billing"}]}
