"""The stream reader: whatever way the upstream's bytes are cut, the same events go through and
the same reply is assembled; a stream that stops early is never taken for a finished one."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from contextledger.serve._stream import StreamAssembler


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"id": "c1", "model": "m", "created": 1, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def stream_of(texts: list[str], arguments: list[str]) -> list[bytes]:
    events = [chunk({"role": "assistant"})]
    events += [chunk({"content": text}) for text in texts]
    if arguments:
        events.append(
            chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "call_9", "type": "function", "function": {"name": "f", "arguments": ""}}
                    ]
                }
            )
        )
        events += [chunk({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}) for part in arguments]
    events.append(chunk({}, "tool_calls" if arguments else "stop"))
    return events


def feed(data: bytes, cuts: list[int]) -> tuple[StreamAssembler, bytes]:
    assembler = StreamAssembler()
    forwarded = b""
    points = sorted({min(cut, len(data)) for cut in cuts} | {0, len(data)})
    for start, end in itertools.pairwise(points):
        forwarded += b"".join(assembler.feed(data[start:end]))
    return assembler, forwarded


texts = st.lists(st.text(min_size=0, max_size=12), max_size=6)
cuts = st.lists(st.integers(min_value=0, max_value=4000), max_size=12)


@given(texts, st.lists(st.text(max_size=8), max_size=4), cuts, st.booleans())
def test_any_cutting_of_the_bytes_forwards_every_event_and_assembles_the_reply(
    parts: list[str], arguments: list[str], cut_at: list[int], crlf: bool
) -> None:
    events = stream_of(parts, arguments)
    data = b"".join(events) + b"data: [DONE]\n\n"
    if crlf:
        data = data.replace(b"\n", b"\r\n")
    assembler, forwarded = feed(data, cut_at)
    assert forwarded == b"".join(events)  # every event, in order, and [DONE] held back for the proxy
    assert assembler.complete
    message = assembler.message()
    assert message["content"] == ("".join(parts) if parts else None)
    if arguments:
        assert message["tool_calls"] == [
            {"id": "call_9", "type": "function", "function": {"name": "f", "arguments": "".join(arguments)}}
        ]
    assert (assembler.response_id, assembler.model) == ("c1", "m")


@given(texts, cuts, st.data())
def test_a_stream_cut_before_its_end_is_never_complete(
    parts: list[str], cut_at: list[int], data: st.DataObject
) -> None:
    events = stream_of(parts, [])
    whole = b"".join(events)
    stop = data.draw(st.integers(min_value=0, max_value=len(whole) - len(events[-1])))
    assembler, _ = feed(whole[:stop], cut_at)
    assert not assembler.complete


def test_an_error_event_or_an_unreadable_event_makes_the_stream_incomplete() -> None:
    errored = StreamAssembler()
    errored.feed(chunk({"content": "a"}) + b'data: {"error": {"message": "boom"}}\n\n' + b"data: [DONE]\n\n")
    assert errored.error == {"error": {"message": "boom"}}
    assert not errored.complete
    garbled = StreamAssembler()
    garbled.feed(b"data: {not json\n\n" + chunk({}, "stop"))
    assert not garbled.complete
