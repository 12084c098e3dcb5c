"""Stateless bodies read as their messages' bytes: the same messages, the same refusals, and what
goes upstream the same JSON as reading the body whole gives.

The proxy finds where each message starts and ends (``split_array``), reads strictly what is not a
message and each message it has not seen before, and forwards the messages kept as the bytes that
came in (``joined``).  The properties hold that against reading the whole body; the hostile cases
are the ones a byte-level shortcut could get wrong: a key written with escapes (the library's
private key, a client's ``cache_control``), a key named twice at the top, nesting that is within
bounds for a message alone but not for the body, the same array bytes twice in one body.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st
from tests.conversations import conversations
from tests.optional_imports import try_import
from tests.serve.conftest import FakeUpstream, Proxy, StartProxy
from tests.serve.test_requests import json_values, messages
from tests.sizes import examples

from contextledger import from_openai
from contextledger._json import MAX_DEPTH
from contextledger.compaction import SlidingWindowStrategy, compact_with_report
from contextledger.exceptions import InvalidMessageError
from contextledger.messages import Message, from_anthropic, from_responses, to_anthropic, to_openai, to_responses
from contextledger.messages._responses import joins_calls
from contextledger.serve._bodies import BodyMemo, SplitBody, joined, split_array
from contextledger.serve._requests import MessageReader

with try_import("serve") as serve_extra:
    import msgspec  # noqa: F401  (what finds the messages in a body)

    from contextledger.serve._chat import _as_sent
    from contextledger.serve._messages_api import _has_breakpoint, _whole_items

pytestmark = serve_extra.skip

KEY = "sk-split-bodies"
formats = st.sampled_from(
    [
        {"ensure_ascii": False},
        {"ensure_ascii": True},
        {"indent": 2},
        {"separators": (",", ":")},
        {"separators": (" , ", " : "), "ensure_ascii": True},
    ]
)


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(messages, min_size=1, max_size=8),
    st.dictionaries(st.sampled_from(["temperature", "tools", "user", "metadata"]), json_values, max_size=3),
    formats,
    st.integers(1, 6),
)
def test_reading_a_body_apart_gives_what_reading_it_whole_gives(
    sent: list[dict[str, Any]], extra: dict[str, Any], style: dict[str, Any], keep: int
) -> None:
    document = {"model": "m", **extra, "messages": sent}
    body = json.dumps(document, **style).encode()
    split = split_array(body, "messages")
    assert split is not None
    assert split.payload == {**document, "messages": []}
    assert [json.loads(item) for item in split.items] == sent
    reader = MessageReader()
    read = reader.read_raw(split.items)
    assert read == from_openai(sent)
    again = reader.read_raw(split.items)
    assert again is not None
    assert all(first is second for first, second in zip(read, again))  # looked up, not read again
    # Nothing compacted: the body written again is the same JSON value, in the same key order.
    assert list(json.loads(joined(split.payload, "messages", split.items))) == list(document)
    assert json.loads(joined(split.payload, "messages", split.items)) == document
    # Compacted: each message kept goes as the bytes it came in, what the strategy made as written anew.
    kept = asyncio.run(compact_with_report(read, strategy=SlidingWindowStrategy(keep_last_groups=keep))).messages
    forwarded = [json.loads(item) for item in _as_sent(list(kept), read, split.items)]
    came = {id(message): original for message, original in zip(read, sent)}
    assert forwarded == [came.get(id(message)) or to_openai([message])[0] for message in kept]


LONG_SYSTEM = {"role": "system", "content": "You answer questions about the catalogue. " * 8}  # past the first bytes


def _same_split(one: SplitBody | None, other: SplitBody | None) -> bool:
    if one is None or other is None:
        return one is other
    return one.payload == other.payload and one.items == other.items


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(messages, min_size=1, max_size=6),
    st.lists(messages, max_size=4),
    st.dictionaries(st.sampled_from(["temperature", "user"]), json_values, max_size=2),
    st.dictionaries(st.sampled_from(["tools", "metadata"]), json_values, max_size=2),
    st.dictionaries(st.sampled_from(["tools", "metadata"]), json_values, max_size=2),
    formats,
)
def test_a_body_continuing_a_remembered_one_splits_as_it_does_alone(
    sent: list[dict[str, Any]],
    added: list[dict[str, Any]],
    head: dict[str, Any],
    tail: dict[str, Any],
    later_tail: dict[str, Any],
    style: dict[str, Any],
) -> None:
    reader = MessageReader()
    first = json.dumps({"model": "m", **head, "messages": [LONG_SYSTEM, *sent], **tail}, **style).encode()
    then = json.dumps({"model": "m", **head, "messages": [LONG_SYSTEM, *sent, *added], **later_tail}, **style).encode()
    before = reader.split(first, "messages")
    assert before is not None
    assert _same_split(before, split_array(first, "messages"))
    after = reader.split(then, "messages")
    assert after is not None
    assert _same_split(after, split_array(then, "messages"))
    # What it repeats was compared, not scanned again: the same bytes objects (hashed once).
    assert all(one is other for one, other in zip(before.items, after.items))
    assert (after.memo is before.memo) == (not added)  # what the messages made is theirs alone


@settings(max_examples=examples(2000), deadline=None)
@given(
    st.lists(messages, min_size=1, max_size=4),
    st.lists(
        st.sampled_from(
            [
                b",",
                b"]",
                b"}",
                b"[",
                b"{",
                b" ",
                b"\n",
                b"1",
                b"3",
                b'"',
                b":",
                b'"messages"',
                b"null",
                b"\\",
                b'{"role": "user", "content": "x"}',
                b'"model": "n"',
                b"\xff",
                b"\xc3\xa9",
                b"[]",
                b"{}",
            ]
        ),
        max_size=6,
    ),
    st.sampled_from([b"", b"1", b" ,", b",", b", "]),
    st.sampled_from([b"", b"]}", b" ] }", b'], "model": "n"}', b'], "messages": []}', b'], "stream": true}', b"]"]),
)
def test_any_continuation_of_a_remembered_body_splits_as_it_does_alone(
    sent: list[dict[str, Any]], tokens: list[bytes], cut: bytes, closing: bytes
) -> None:
    """Near-valid bodies that start as a remembered one did: a number that goes on, a comma before
    the bracket, a key named twice after the array, bytes that are not text, an array never
    closed.  Reading them against the remembered body refuses or splits each as reading it alone does."""
    reader = MessageReader()
    first = json.dumps({"model": "m", "messages": [LONG_SYSTEM, *sent, 12]}).encode()
    assert reader.split(first, "messages") is not None
    end = first.rindex(b"12]") + 2
    body = first[:end] + cut + b"".join(tokens) + closing
    alone = split_array(body, "messages")
    event("split" if alone is not None else "refused")
    assert _same_split(reader.split(body, "messages"), alone)


def test_the_bodies_a_reader_keeps_stay_within_its_limit() -> None:
    reader = MessageReader(limit=4 * 1024 * 1024)
    for number in range(60):  # distinct conversations, each with a 20 KB history
        history = [LONG_SYSTEM, *({"role": "user", "content": f"{number}:{part}" * 2000} for part in range(2))]
        assert reader.split(json.dumps({"model": "m", "messages": history}).encode(), "messages") is not None
        assert reader.held_bytes <= reader.limit
    # One body larger than a quarter of the limit is split, and not kept.
    large = json.dumps({"model": "m", "messages": [LONG_SYSTEM, {"role": "user", "content": "y" * 2**20}]}).encode()
    held = reader.held_bytes
    once = reader.split(large, "messages")
    again = reader.split(large, "messages")
    assert once is not None
    assert again is not None
    assert once.memo is not again.memo
    assert reader.held_bytes <= held


def test_a_memo_gives_back_only_for_the_very_same_messages() -> None:
    memo = BodyMemo()
    messages = from_openai([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    assert memo.recall(messages) is None
    memo.keep(messages, "made")
    assert memo.recall(list(messages)) == "made"
    assert memo.recall(from_openai([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])) is None
    assert memo.recall(messages[:1]) is None


def _kept_and_forwarded(wire: list[dict[str, Any]], keep: int) -> tuple[list[Message], Any] | None:
    """A Messages API body's messages read apart and compacted to ``keep`` groups: what was kept,
    and what goes as the client's bytes (None when it is written anew); None when the body is not
    a valid Messages API conversation."""
    body = json.dumps({"model": "m", "max_tokens": 8, "messages": wire}).encode()
    split = split_array(body, "messages")
    assert split is not None
    reader = MessageReader()
    raw = reader.read_raw_runs(split.items, None, from_anthropic, marks=_has_breakpoint)
    if raw is None:
        return None
    again = reader.read_raw_runs(split.items, None, from_anthropic, marks=_has_breakpoint)  # looked up
    assert again is not None
    assert all(one is other for one, other in zip(again.messages, raw.messages, strict=True))
    assert raw.marked == again.marked == any(map(_has_breakpoint, wire))
    kept = asyncio.run(compact_with_report(raw.messages, strategy=SlidingWindowStrategy(keep_last_groups=keep)))
    return list(kept.messages), _whole_items(kept.messages, raw)


@settings(max_examples=examples(300), deadline=None)
@given(conversations(), st.integers(1, 8))
def test_a_compacted_messages_body_sent_as_its_bytes_is_what_writing_it_anew_sends(
    conversation: list[Message], keep: int
) -> None:
    try:
        _, wire = to_anthropic(conversation)
    except InvalidMessageError:
        assume(False)
    assume(wire)
    compacted = _kept_and_forwarded(wire, keep)
    assume(compacted is not None)
    assert compacted is not None
    kept, whole = compacted
    event("sent as the client's bytes" if whole is not None else "written anew")
    if whole is not None:
        items, values = whole
        assert [json.loads(item) for item in items] == values == to_anthropic(kept)[1]


def test_a_long_tool_loop_compacted_goes_as_the_clients_bytes() -> None:
    wire: list[dict[str, Any]] = []
    for number in range(40):
        call = {"type": "tool_use", "id": f"toolu_{number}", "name": "lookup", "input": {"item": number}}
        wire += [
            {"role": "user", "content": f"question {number}"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}, call]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{number}", "content": "r"}]},
            {"role": "assistant", "content": [{"type": "text", "text": f"answer {number}"}]},
        ]
    compacted = _kept_and_forwarded(wire, 6)
    assert compacted is not None
    kept, whole = compacted
    assert whole is not None
    assert 0 < len(whole[0]) < len(wire)
    assert whole[1] == to_anthropic(kept)[1] == wire[-len(whole[0]) :]
    # A window that keeps the text a client sent beside a tool result, but not the result (it goes
    # with its call): that message cannot go as the client sent it, and is written anew.
    mixed = [
        wire[0],
        wire[1],
        {"role": "user", "content": [wire[2]["content"][0], {"type": "text", "text": "and now?"}]},
        {"role": "assistant", "content": "done"},
    ]
    compacted = _kept_and_forwarded(mixed, 2)
    assert compacted is not None
    kept, whole = compacted
    assert [message.text for message in kept] == ["and now?", "done"]
    assert whole is None


def test_what_a_body_read_apart_refuses_or_hands_back() -> None:
    # Not an object, no such array, an array of something else: read whole instead (None).
    for body in (b"[1]", b'{"model": "m"}', b'{"messages": "hi"}', b'{"messages": [1,', b"\xff"):
        assert split_array(body, "messages") is None
    # A key named twice at the top: the strict reading of the rest sees it.
    assert split_array(b'{"messages": [], "messages": [{"role": "user", "content": "x"}]}', "messages") is None
    # The same array bytes twice: the first copy is blanked, and the check sees the other one is not.
    twice = b'{"copy": [{"role": "user", "content": "x"}], "messages": [{"role": "user", "content": "x"}]}'
    split = split_array(twice, "messages")
    assert split is None or split.payload == {"copy": [{"role": "user", "content": "x"}], "messages": []}
    # A message nested within bounds alone but not inside the body: the reader refuses it.
    nested: Any = "x"
    for _ in range(MAX_DEPTH - 2):
        nested = [nested]
    body = json.dumps({"messages": [{"role": "user", "content": "x", "extra": nested}]}).encode()
    split = split_array(body, "messages")
    assert split is not None
    assert MessageReader().read_raw(split.items) is None
    # The library's private key, even written with escapes, sends the body the whole way round.
    private = b'{"messages": [{"role": "user", "content": "x", "_cont\\u0065xtledger": {"id": "m1"}}]}'
    split = split_array(private, "messages")
    assert split is not None
    assert MessageReader().read_raw(split.items) is None


def _send(proxy: Proxy, path: str, body: bytes) -> tuple[int, Any]:
    return proxy.call("POST", "/v1" + path, body, KEY, headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"})


@pytest.fixture(scope="module")
def running(start_proxy_module: StartProxy, fake_upstream: FakeUpstream) -> Any:
    root = fake_upstream.base_url.removesuffix("/v1")
    args = ("--anthropic-upstream", root, "--strategy", "sliding-window", "--param", "keep_last_groups=2")
    with start_proxy_module(*args) as started:
        yield started


def _history(turns: int) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = []
    for number in range(turns):
        history += [{"role": "user", "content": f"question {number} é"}, {"role": "assistant", "content": f"a{number}"}]
    return [*history, {"role": "user", "content": "last"}]


def test_an_escaped_private_key_never_goes_upstream(running: Proxy, fake_upstream: FakeUpstream) -> None:
    body = json.dumps({"model": "m", "messages": _history(4)}, ensure_ascii=True).encode()
    escaped = body.replace(b'"content": "last"}', b'"content": "last", "_cont\\u0065xtledger": {"id": "m9"}}')
    for _ in range(2):  # the second time, every other message is looked up
        status, answer = _send(running, "/chat/completions", escaped)
        assert status == 200, answer
        forwarded = fake_upstream.last_body()["messages"]
        assert all("_contextledger" not in message for message in forwarded)
        assert forwarded[-1] == {"role": "user", "content": "last"}


def test_the_same_body_twice_goes_upstream_the_same(running: Proxy, fake_upstream: FakeUpstream) -> None:
    body = json.dumps({"model": "m", "messages": _history(6), "temperature": 0.5}).encode()
    sent = []
    for _ in range(2):
        status, answer = _send(running, "/chat/completions", body)
        assert status == 200, answer
        sent.append(fake_upstream.last_body())
    assert sent[0] == sent[1]
    assert sent[0]["temperature"] == 0.5
    assert sent[0]["messages"][-1] == {"role": "user", "content": "last"}
    assert len(sent[0]["messages"]) < len(_history(6))  # compacted


@pytest.mark.parametrize("path", ["/chat/completions", "/responses", "/messages"])
def test_a_key_named_twice_at_the_top_is_refused(running: Proxy, path: str) -> None:
    field = "input" if path == "/responses" else "messages"
    body = b'{"model": "m", "%s": [{"role": "user", "content": "a"}], "%s": [{"role": "user", "content": "b"}]}' % (
        field.encode(),
        field.encode(),
    )
    status, answer = _send(running, path, body)
    assert status == 400, answer


def test_nesting_past_the_bound_is_refused_and_within_it_taken(running: Proxy) -> None:
    def body(depth: int) -> bytes:
        nested: Any = 1
        for _ in range(depth - 3):  # the body's object, its messages array and the message hold it
            nested = [nested]
        return json.dumps({"model": "m", "messages": [{"role": "user", "content": "x", "extra": nested}]}).encode()

    assert _send(running, "/chat/completions", body(MAX_DEPTH))[0] == 200
    assert _send(running, "/chat/completions", body(MAX_DEPTH + 1))[0] == 400


def test_a_client_breakpoint_written_with_escapes_is_the_only_one(running: Proxy, fake_upstream: FakeUpstream) -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "q0", "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": "a0"},
        {"role": "user", "content": "q1"},
    ]
    body = json.dumps({"model": "m", "max_tokens": 10, "messages": messages}).encode()
    # The key with some or all of its letters escaped, in either case: the same key once read.
    escapes = (
        b'"cache\\u005fcontrol"',
        b'"\\u0063ache_contro\\u006C"',
        json.dumps("cache_control", ensure_ascii=True).encode().replace(b"c", b"\\u0063"),
    )
    for sent in (body, *(body.replace(b'"cache_control"', key) for key in escapes)):
        assert json.loads(sent)["messages"][0]["content"][0]["cache_control"]
        status, answer = _send(running, "/messages", sent)
        assert status == 200, answer
        forwarded = json.dumps(fake_upstream.last_body())
        assert forwarded.count("cache_control") == 1, forwarded
    # No breakpoint of the client's: the proxy places one, on the last message.
    unmarked = [{"role": "user", "content": "q0"}, *messages[1:]]
    plain = json.dumps({"model": "m", "max_tokens": 10, "messages": unmarked}).encode()
    status, answer = _send(running, "/messages", plain)
    assert status == 200, answer
    last = fake_upstream.last_body()["messages"][-1]
    assert last["content"][-1]["cache_control"] == {"type": "ephemeral"}


def test_a_client_breakpoint_compacted_away_leaves_the_proxy_to_place_one(
    running: Proxy, fake_upstream: FakeUpstream
) -> None:
    marked = {"role": "user", "content": [{"type": "text", "text": "q0", "cache_control": {"type": "ephemeral"}}]}
    messages = [marked, *_history(5)[1:]]  # the window keeps the last two groups: the marked one goes
    status, answer = _send(
        running, "/messages", json.dumps({"model": "m", "max_tokens": 10, "messages": messages}).encode()
    )
    assert status == 200, answer
    forwarded = fake_upstream.last_body()
    assert len(forwarded["messages"]) < len(messages)
    assert json.dumps(forwarded).count("cache_control") == 1
    assert forwarded["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


@pytest.mark.parametrize("path", ["/chat/completions", "/responses", "/messages"])
def test_a_growing_stateless_conversation_goes_upstream_as_each_body_alone(
    running: Proxy, fake_upstream: FakeUpstream, path: str
) -> None:
    """Each body continues the one before (the proxy reads only what it adds); what goes upstream
    is what compacting that body alone gives, and the same body again sends the same."""
    history = [LONG_SYSTEM, *_history(3)]
    window = SlidingWindowStrategy(keep_last_groups=2)
    for turn in range(6):
        history = [*history, {"role": "assistant", "content": f"reply {turn}"}, {"role": "user", "content": f"q{turn}"}]
        messages = from_openai(history)
        kept = asyncio.run(compact_with_report(messages, strategy=window)).messages
        if path == "/chat/completions":
            body: dict[str, Any] = {"model": "m", "messages": history}
            expected: Any = to_openai(kept)
        elif path == "/responses":
            body = {"model": "m", "input": to_responses(messages)}
            expected = to_responses(kept)
        else:
            system, wire = to_anthropic(messages)
            body = {"model": "m", "max_tokens": 8, "system": system, "messages": wire}
            expected = to_anthropic(kept)[1]
        sent = []
        for _ in range(2):
            status, answer = _send(running, path, json.dumps(body).encode())
            assert status == 200, answer
            sent.append(fake_upstream.last_body())
        assert sent[0] == sent[1]
        forwarded = sent[0]["input" if path == "/responses" else "messages"]
        if path == "/messages":  # the proxy's breakpoint on the last message
            forwarded[-1]["content"][-1].pop("cache_control")
            if expected[-1]["content"] != forwarded[-1]["content"] and isinstance(expected[-1]["content"], str):
                expected[-1]["content"] = [{"type": "text", "text": expected[-1]["content"]}]
        assert forwarded == expected


def _read_alone(reader_of: Any, body: bytes, field: str, how: tuple[Any, ...]) -> Any:
    split = split_array(body, field)
    assert split is not None
    return reader_of(MessageReader()).read_raw_runs(split.items, *how)


@settings(max_examples=examples(300), deadline=None)
@given(conversations(), st.integers(0, 40), st.sampled_from(["responses", "messages"]))
def test_a_continued_body_is_read_past_what_was_read_as_reading_it_alone_reads(
    conversation: list[Message], cut: int, api: str
) -> None:
    """Reading only past the body continued (from its last run, which may go on) gives the values,
    messages, runs and marks reading the whole body gives: a reasoning item and the call after it
    across the cut, a breakpoint on either side."""
    how: tuple[Any, Any]
    marks: Any
    if api == "responses":
        field, how = "input", (joins_calls, from_responses)
        wire = to_responses(conversation)
        marks = None
    else:
        field, how = "messages", (None, from_anthropic)
        try:
            wire = to_anthropic(conversation)[1]
        except InvalidMessageError:
            assume(False)
        marks = _has_breakpoint
    cut = min(cut, len(wire))
    assume(cut >= 1)
    if marks is not None and cut % 3 != 2:  # a client's breakpoint, before the cut or after it
        at = 0 if cut % 3 == 0 else len(wire) - 1
        wire = [*wire[:at], {**wire[at], "cache_control": {"type": "ephemeral"}}, *wire[at + 1 :]]
    reader = MessageReader()
    pad = [{"type": "message", "role": "system", "content": LONG_SYSTEM["content"]}] if api == "responses" else []
    system = LONG_SYSTEM["content"] if api == "messages" else None

    def body(items: list[Any]) -> bytes:
        return json.dumps({"model": "m", "system": system, field: [*pad, *items]}).encode()

    first = reader.split(body(wire[:cut]), field)
    assert first is not None
    before = reader.read_split_runs(first, how[0], how[1], marks=marks)
    assume(before is not None)
    then = reader.split(body(wire), field)
    assert then is not None
    assert (then.memo if cut == len(wire) else then.before) is first.memo
    read = reader.read_split_runs(then, how[0], how[1], marks=marks)
    alone = _read_alone(lambda fresh: fresh, body(wire), field, (*how, marks))
    assert (read is None) == (alone is None)
    if read is not None:
        assert read.values == alone.values
        assert read.messages == alone.messages
        assert read.spans == alone.spans
        assert (read.one_each, read.marked) == (alone.one_each, alone.marked)
        assert reader.read_split_runs(then, how[0], how[1], marks=marks) is read  # the same body: given again
