"""The proxy's cost meter in process: the estimate prices a request from the previous one of its
conversation, what it remembers stays within its bounds whatever clients send, and a usage chunk
the proxy asked for on a client's behalf is kept from that client."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.sizes import examples

from contextledger.cost import ANTHROPIC, NO_CACHE, OPENAI, PrefixCacheSimulator, request_blocks
from contextledger.messages import Message
from contextledger.serve._metrics import Metrics
from contextledger.serve._stream import StreamAssembler
from contextledger.serve._usage import CostMeter, with_usage_requested
from contextledger.tokenizers import CharacterEstimatorTokenizer

TOKENIZER = CharacterEstimatorTokenizer()
SYSTEM = Message.system("Answer from the price list. " * 300)  # about 2,000 tokens


def conversation(turns: int, topic: str = "") -> list[Message]:
    messages = [SYSTEM, Message.user(f"{topic} question 0")]
    for turn in range(1, turns):
        messages += [Message.assistant(f"answer {turn - 1}"), Message.user(f"question {turn}")]
    return messages


def estimate(text: str, name: str, **labels: str) -> float:
    wanted = name + "{" + ",".join(f'{key}="{value}"' for key, value in labels.items()) + "}"
    for line in text.splitlines():
        if line.startswith(wanted + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_the_estimate_prices_each_request_from_the_previous_one_as_the_simulator_does() -> None:
    metrics = Metrics()
    meter = CostMeter(metrics, OPENAI, TOKENIZER)
    simulator = PrefixCacheSimulator(OPENAI)
    payload = {"model": "m"}
    for turns in (1, 2, 3):
        messages = conversation(turns)
        meter.answered(meter.expect("stateless", payload, messages), {"prompt_tokens": 1, "completion_tokens": 2})
        simulator.send(request_blocks(messages, tokenizer=TOKENIZER), output_tokens=2)
    totals = simulator.totals()
    text = metrics.render()
    labels = {"mode": "stateless", "profile": "openai"}
    assert estimate(text, "contextledger_estimated_input_tokens_total", **labels) == totals.sent
    assert estimate(text, "contextledger_estimated_cache_read_tokens_total", **labels) == totals.cache_read > 0
    assert estimate(text, "contextledger_estimated_uncached_input_tokens_total", **labels) == totals.uncached
    assert estimate(text, "contextledger_estimated_cost_total", **labels) == pytest.approx(totals.cost)


def test_conversations_are_told_apart_by_their_start_and_their_model_or_by_their_session() -> None:
    meter = CostMeter(Metrics(), ANTHROPIC, TOKENIZER)
    first = meter.expect("stateless", {"model": "m"}, conversation(1, "a"))
    assert first.conversation == meter.expect("stateless", {"model": "m"}, conversation(4, "a")).conversation
    assert first.conversation != meter.expect("stateless", {"model": "m"}, conversation(4, "b")).conversation
    assert first.conversation != meter.expect("stateless", {"model": "n"}, conversation(1, "a")).conversation
    one = meter.expect("session", {"model": "m"}, conversation(1, "a"), session="t/s1").conversation
    assert one == meter.expect("session", {"model": "m"}, conversation(3, "z"), session="t/s1").conversation
    assert one != meter.expect("session", {"model": "m"}, conversation(1, "a"), session="t/s2").conversation


def test_a_conversation_it_no_longer_remembers_is_priced_as_a_first_request() -> None:
    metrics = Metrics()
    meter = CostMeter(metrics, OPENAI, TOKENIZER, conversations=2)
    for topic in ("a", "b", "c"):  # "a" is dropped when "c" comes
        meter.answered(meter.expect("stateless", {}, conversation(1, topic)), None)
    assert len(meter._previous) == 2
    meter.answered(meter.expect("stateless", {}, conversation(2, "a")), None)
    labels = {"mode": "stateless", "profile": "openai"}
    assert estimate(metrics.render(), "contextledger_estimated_cache_read_tokens_total", **labels) == 0
    meter.answered(meter.expect("stateless", {}, conversation(3, "a")), None)
    assert estimate(metrics.render(), "contextledger_estimated_cache_read_tokens_total", **labels) > 1024


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(1, 40)), min_size=1, max_size=60))
def test_what_it_remembers_stays_within_its_bounds(requests: list[tuple[int, int]]) -> None:
    """Many conversations, long ones, and requests over the whole budget: never past either bound."""
    meter = CostMeter(Metrics(), ANTHROPIC, TOKENIZER, conversations=8, held_bytes=4096)
    for topic, turns in requests:
        meter.answered(meter.expect("stateless", {}, conversation(turns, str(topic))), None)
        assert len(meter._previous) <= 8
        assert meter.held_bytes <= 4096
        assert meter.held_bytes == sum(previous.size for previous in meter._previous.values())


def test_blocks_are_remembered_by_message_within_their_byte_bound() -> None:
    """A repeated message is serialised once; the memo holds no more than its bound, and a message
    larger than the bound is priced all the same without being kept."""
    meter = CostMeter(Metrics(), OPENAI, TOKENIZER, block_bytes=20_000)
    messages = conversation(5)
    first = meter.expect("stateless", {}, messages).blocks
    assert meter.expect("stateless", {}, messages).blocks == first == request_blocks(messages, tokenizer=TOKENIZER)
    assert meter._blocks[id(messages[-1])][0] is messages[-1]
    huge = [Message.user("x" * 50_000)]
    assert meter.expect("stateless", {}, huge).blocks == request_blocks(huge, tokenizer=TOKENIZER)
    assert meter._blocks_held <= 20_000
    assert id(huge[0]) not in meter._blocks
    for turn in range(300):
        meter.expect("stateless", {}, [Message.user(f"distinct {turn} " * 20)])
        assert meter._blocks_held == sum(entry[2] for entry in meter._blocks.values()) <= 20_000


def test_without_a_cache_nothing_is_remembered() -> None:
    meter = CostMeter(Metrics(), NO_CACHE, TOKENIZER)
    for turns in (1, 2, 3):
        meter.answered(meter.expect("session", {}, conversation(turns), session="s"), None)
    assert meter.held_bytes == 0


def test_tools_that_are_not_a_list_of_objects_are_left_out_not_refused() -> None:
    meter = CostMeter(Metrics(), OPENAI, TOKENIZER)
    messages = conversation(1)
    bare = meter.expect("stateless", {}, messages)
    assert meter.expect("stateless", {"tools": "x"}, messages).blocks == bare.blocks
    assert meter.expect("stateless", {"tools": [1, {}]}, messages).blocks == bare.blocks
    tool = {"type": "function", "function": {"name": "lookup"}}
    assert len(meter.expect("stateless", {"tools": [tool]}, messages).blocks) == len(bare.blocks) + 1


def test_a_stream_asks_for_usage_unless_the_client_did() -> None:
    assert with_usage_requested({"stream": False}) == ({"stream": False}, False)
    asked = {"stream": True, "stream_options": {"include_usage": True}}
    assert with_usage_requested(asked) == (asked, False)
    payload, hide = with_usage_requested({"stream": True, "stream_options": {"include_usage": False, "x": 1}})
    assert payload["stream_options"] == {"include_usage": True, "x": 1}
    assert hide is True
    payload, hide = with_usage_requested({"stream": True, "stream_options": "junk"})
    assert payload["stream_options"] == {"include_usage": True}
    assert hide is True


def chunk(body: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(body).encode() + b"\n\n"


@pytest.mark.parametrize("hide", [True, False])
def test_the_usage_chunk_is_read_and_passed_on_only_if_the_client_asked(hide: bool) -> None:
    usage = {"prompt_tokens": 5, "completion_tokens": 1}
    assembler = StreamAssembler(hide_usage=hide)
    stream = [
        chunk({"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}),
        chunk({"choices": [], "usage": usage}),
        b"data: [DONE]\n\n",
    ]
    forwarded = assembler.feed(b"".join(stream))
    assert forwarded == (stream[:1] if hide else stream[:2])
    assert assembler.usage == usage
    assert assembler.complete
