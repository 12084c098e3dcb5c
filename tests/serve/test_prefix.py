"""What a session sends keeps its start from one request to the next, as a provider's prompt
cache needs: the request view only grows between the strategy's cuts, and the facts block, which
changes whenever a fact does, sits just before the newest user message (not at the start, where
it would make everything after it new).  And ``--prompt-cache-key`` keys a conversation's
requests alike."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from tests.serve.conftest import FakeUpstream, Proxy, StartProxy

KEY = "sk-prefix-tenant-4"
CUTS = ("--strategy", "truncation", "--param", "max_n=600", "--param", "compact_to=300")


def shared(previous: list[Any], current: list[Any]) -> int:
    """How many messages ``current`` starts with as ``previous`` did."""
    count = 0
    for old, new in zip(previous, current):
        if old != new:
            break
        count += 1
    return count


def is_block(message: dict[str, Any]) -> bool:
    return message["role"] == "system" and "<user_facts>" in str(message["content"])


def converse(proxy: Proxy, fake_upstream: FakeUpstream, session: str, turns: int) -> list[list[dict[str, Any]]]:
    """``turns`` session turns (the sixth declares a fact); what went upstream for each."""
    proxy.create_session(session, KEY)
    sent = []
    for turn in range(turns):
        text = "module=Billing" if turn == 5 else f"question {turn}: " + "word " * 50
        body = {
            "model": "fake",
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}],
        }
        status, answer = proxy.call("POST", "/v1/chat/completions", body, KEY, {"X-Contextledger-Session": session})
        assert status == 200, answer
        sent.append(fake_upstream.last_body()["messages"])
    return sent


def test_the_request_view_only_grows_between_cuts_and_the_facts_block_rides_with_the_newest_message(
    start_proxy: StartProxy, fake_upstream: FakeUpstream
) -> None:
    with start_proxy(*CUTS) as proxy:
        sent = converse(proxy, fake_upstream, "grows", 16)
    moves = 0
    for previous, current in itertools.pairwise(sent):
        assert is_block(current[-2])  # just before the newest user message
        assert current[-1]["role"] == "user"
        assert sum(map(is_block, current)) == 1
        kept = shared(previous, current)
        if kept < len(previous) - 2:  # more changed than the block and the message it moved from
            moves += 1
            assert kept >= 1, (previous, current)  # never the instructions
    # A cut moves once the history has grown by trigger - target (300 tokens; each turn adds ~130).
    grown = sum(len(str(m["content"])) for m in sent[-1]) // 4
    assert 1 <= moves <= 16 * 130 // 300 + 1, moves
    assert moves < len(sent) - 1  # most requests extend the one before (the fact's turn included)
    assert grown > 0


@pytest.mark.parametrize("placement", ["latest_user", "start"])
def test_a_new_fact_costs_the_cache_only_what_follows_the_block(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, placement: str
) -> None:
    with start_proxy("--facts-placement", placement) as proxy:
        sent = converse(proxy, fake_upstream, f"facts-{placement}", 8)
    before, after = sent[5], sent[6]  # the request after the fact was admitted carries a new block
    assert "Billing" in str(after)
    assert "Billing" not in str([m for m in before if is_block(m)])
    kept = shared(before, after)
    if placement == "latest_user":
        assert kept == len(before) - 2  # everything but the old block and the message after it
        assert is_block(after[-2])
    else:
        assert kept == 1  # only the instructions: the whole history is new to the cache
        assert is_block(after[1])


@pytest.mark.parametrize("mode", ["session", "prefix", "off"])
def test_prompt_cache_key(start_proxy: StartProxy, fake_upstream: FakeUpstream, mode: str) -> None:
    with start_proxy("--prompt-cache-key", mode) as proxy:
        keys = []
        for session in ("one", "two"):
            proxy.create_session(session, KEY)
            for turn in range(2):
                body = {"model": "fake", "messages": [{"role": "user", "content": f"{session} {turn}"}]}
                assert (
                    proxy.call("POST", "/v1/chat/completions", body, KEY, {"X-Contextledger-Session": session})[0]
                    == 200
                )
                keys.append(fake_upstream.last_body().get("prompt_cache_key"))
        conversation = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "first"}]
        stateless = []
        for turn in range(3):
            assert (
                proxy.call("POST", "/v1/chat/completions", {"model": "fake", "messages": conversation}, KEY)[0] == 200
            )
            stateless.append(fake_upstream.last_body().get("prompt_cache_key"))
            conversation = [
                *conversation,
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": f"more {turn}"},
            ]
        other = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "another"}]
        assert proxy.call("POST", "/v1/chat/completions", {"model": "fake", "messages": other}, KEY)[0] == 200
        another = fake_upstream.last_body().get("prompt_cache_key")
        own = {"model": "fake", "messages": conversation, "prompt_cache_key": "mine"}
        assert proxy.call("POST", "/v1/chat/completions", own, KEY)[0] == 200
        assert fake_upstream.last_body()["prompt_cache_key"] == "mine"  # a client's own key is never replaced
    if mode == "off":
        assert keys == [None] * 4
        assert stateless == [None] * 3
        assert another is None
        return
    assert len(set(stateless)) == 1  # one growing conversation, one key
    assert stateless[0] is not None
    assert another not in (None, stateless[0])  # another conversation, another key
    assert KEY not in str(keys + stateless)
    if mode == "session":
        assert keys[0] == keys[1] != keys[2] == keys[3]
    else:
        assert keys[0] != keys[2]  # different first messages, different keys
