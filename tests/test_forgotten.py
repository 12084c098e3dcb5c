"""How a message a ``forget`` rewrote is still known as the one a client holds: the rule the
proxy's resent-history check and the turn retries share (``contextledger._forgotten``)."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from contextledger._forgotten import FORGOTTEN_MARKER, removed_form, same_contents
from contextledger.messages import FunctionCallContent, FunctionResultContent, Message, TextContent

texts = st.text(st.characters(codec="utf-8"), min_size=1, max_size=40)


@given(before=st.text(max_size=20), value=texts, after=st.text(max_size=20))
def test_a_user_message_whose_value_was_forgotten_matches_the_client_s_copy(
    before: str, value: str, after: str
) -> None:
    given_ = Message.user(f"{before}{value}{after}")
    stored = Message.user(f"{before}{FORGOTTEN_MARKER}{after}")
    assert same_contents(stored, given_)


def test_only_role_and_contents_count() -> None:
    stored = Message.assistant("the answer")
    sent = dataclasses.replace(Message.assistant("the answer"), message_id="msg_1", author_name="desk")
    assert same_contents(stored, sent)
    assert not same_contents(stored, Message.user("the answer"))
    assert not same_contents(stored, Message.assistant("another answer"))


def test_a_marker_does_not_match_text_that_differs_around_it() -> None:
    stored = Message.user(f"We run on {FORGOTTEN_MARKER} today")
    assert not same_contents(stored, Message.user("We run on PostgreSQL tomorrow"))
    assert not same_contents(stored, Message.user("We run on  today"))  # the marker stands for something


def test_a_reply_replaced_whole_matches_the_reply_it_replaced_calls_and_results_included() -> None:
    reply = Message.assistant("PostgreSQL 15, noted")
    assert same_contents(removed_form(reply), reply)
    call = Message("assistant", (TextContent("looking"), FunctionCallContent("c1", "lookup", '{"db": "PostgreSQL"}')))
    assert same_contents(removed_form(call), call)
    result = Message("tool", (FunctionResultContent("c1", "PostgreSQL 15"),))
    assert same_contents(removed_form(result), result)
    assert not same_contents(removed_form(result), Message("tool", (FunctionResultContent("c2", "PostgreSQL 15"),)))
