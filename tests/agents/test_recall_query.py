"""How ``recall_context``'s query chooses among what a reference stands for (``agents._recall.matching``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from contextledger.agents._recall import matching
from contextledger.messages import FunctionCallContent, FunctionResultContent, Message

EXCHANGES = [
    ("the deploy region is eu-north-5", "Noted."),
    ("the budget cap is $956, never exceed it", "Noted."),
    ("the budget review is on Thursday", "Noted."),
    ("what is the weather like", "Sunny."),
]


def conversation() -> list[Message]:
    messages: list[Message] = []
    for said, answer in EXCHANGES:
        messages += [Message.user(said), Message.assistant(answer)]
    return messages


def users(messages: list[Message]) -> list[str]:
    return [message.text for message in messages if message.role == "user"]


def test_a_rare_word_outweighs_a_common_one_and_each_exchange_comes_whole() -> None:
    chosen = matching(conversation(), "What is the budget cap?")
    assert users(chosen) == ["the budget cap is $956, never exceed it"]
    assert [message.role for message in chosen] == ["user", "assistant"]  # the answer with what it answered


def test_inflections_aside_and_stored_order_kept() -> None:
    assert users(matching(conversation(), "budgets")) == [
        "the budget cap is $956, never exceed it",
        "the budget review is on Thursday",
    ]
    assert users(matching(conversation(), "when was it reviewed?")) == ["the budget review is on Thursday"]


def test_a_call_comes_back_with_its_result() -> None:
    messages = [
        Message.user("look it up"),
        Message("assistant", (FunctionCallContent("c1", "lookup_stock", '{"item": "pears"}'),)),
        Message("tool", (FunctionResultContent("c1", "pears: 12 units on shelf 4"),)),
        Message.assistant("12 units."),
        *conversation(),
    ]
    chosen = matching(messages, "how many units on the shelf")
    assert chosen == messages[:4]


def test_a_query_no_message_holds_chooses_nothing() -> None:
    assert matching(conversation(), "zebra crossings") == []
    assert matching(conversation(), "") == []
    assert matching([], "budget") == []


def test_only_the_start_of_a_long_query_is_read() -> None:
    assert matching(conversation(), "filler " * 200 + "budget") == []


@given(st.lists(st.tuples(st.text(max_size=30), st.text(max_size=30)), max_size=8), st.text(max_size=40))
def test_what_a_query_chooses_is_whole_exchanges_of_the_input_in_order(
    exchanges: list[tuple[str, str]], query: str
) -> None:
    messages = [message for said, answer in exchanges for message in (Message.user(said), Message.assistant(answer))]
    chosen = matching(messages, query)
    positions = [next(at for at, message in enumerate(messages) if message is chosen_one) for chosen_one in chosen]
    assert positions == sorted(positions)
    assert len(chosen) % 2 == 0
    for opening, answer in zip(positions[::2], positions[1::2]):
        assert messages[opening].role == "user"
        assert answer == opening + 1
