"""Summaries that do not change (design.md#stable-summaries): the summary cache's stores, and summarisation applied
afresh to every request of a growing conversation calling its model once per step of its cut.

The stores are real: an SQLite file in the test's directory, the redis-server the history tests
start on 127.0.0.1.  The summariser answers each call with a new text (it counts its calls), so a
summary written twice for one run would show as two different texts.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextledger.clients import ScriptedChatClient
from contextledger.compaction import (
    GroupKind,
    InMemorySummaryCache,
    MessageIndex,
    RedisSummaryCache,
    SQLiteSummaryCache,
    SummarizationStrategy,
    SummaryCache,
    compact_with_report,
    tokens_below,
    tokens_exceed,
)
from contextledger.compaction._summary_cache import summarizer_identity, summary_key
from contextledger.exceptions import ConfigurationError, SummaryCacheError
from contextledger.messages import Message, to_openai
from contextledger.tokenizers import CharacterEstimatorTokenizer
from tests.conversations import conversations
from tests.history.conftest import redis_extra, redis_server
from tests.history.support import RedisServer
from tests.sizes import examples

__all__ = ["redis_server"]

TOKENIZER = CharacterEstimatorTokenizer()


def exchanges(count: int) -> list[Message]:
    return [Message.system("sys")] + [
        Message.user(f"question {i}") if i % 2 == 0 else Message.assistant(f"answer {i}") for i in range(count)
    ]


def counting_summariser() -> ScriptedChatClient:
    """A summariser whose every reply differs from the last: the n-th call says n."""
    client = ScriptedChatClient()
    client.replies.append(lambda request: f"summary number {client.calls}")
    return client


# The key ----------------------------------------------------------------------------------------


def test_the_key_changes_with_the_messages_the_prompt_and_the_summariser() -> None:
    run = exchanges(4)[1:]
    key = summary_key(run, prompt="p", summarizer="m")
    assert key == summary_key(list(run), prompt="p", summarizer="m")
    assert len(key) == 64
    assert key != summary_key([*run[:-1], Message.assistant("answer 3!")], prompt="p", summarizer="m")
    assert key != summary_key(run[:-1], prompt="p", summarizer="m")
    assert key != summary_key(run, prompt="p ", summarizer="m")
    assert key != summary_key(run, prompt="p", summarizer="m2")
    # Metadata is part of what is summarised: a message id makes another run.
    tagged = Message("user", run[0].contents, message_id="m-1")
    assert key != summary_key([tagged, *run[1:]], prompt="p", summarizer="m")


def test_the_summariser_is_named_by_its_class_and_model() -> None:
    class Named:
        model = "gpt-x"

    assert summarizer_identity(Named()).endswith("Named:gpt-x")
    assert summarizer_identity(ScriptedChatClient()) == "contextledger.clients._scripted.ScriptedChatClient"


# The stores -------------------------------------------------------------------------------------


async def check_store(cache: SummaryCache) -> None:
    assert isinstance(cache, SummaryCache)
    key = summary_key(exchanges(2), prompt="p", summarizer=uuid.uuid4().hex)
    assert await cache.get(key) is None
    await cache.put(key, "[Summary] é ∑ 🙂")
    assert await cache.get(key) == "[Summary] é ∑ 🙂"
    await cache.put(key, "[Summary] replaced")
    assert await cache.get(key) == "[Summary] replaced"
    assert await cache.get(key[:-1] + ("0" if key[-1] != "0" else "1")) is None
    with pytest.raises(ConfigurationError, match="non-empty text"):
        await cache.put(key, "")
    with pytest.raises(ConfigurationError, match="key"):
        await cache.get("")


def test_in_memory_hit_and_miss() -> None:
    asyncio.run(check_store(InMemorySummaryCache()))


def test_in_memory_evicts_the_least_recently_used_past_its_count() -> None:
    async def scenario() -> None:
        cache = InMemorySummaryCache(max_entries=2, max_bytes=None)
        await cache.put("a", "A")
        await cache.put("b", "B")
        assert await cache.get("a") == "A"  # now b is the least recently used
        await cache.put("c", "C")
        assert (await cache.get("a"), await cache.get("b"), await cache.get("c")) == ("A", None, "C")
        assert len(cache) == 2

    asyncio.run(scenario())


@pytest.mark.parametrize("size", [9, 10, 11])
def test_in_memory_keeps_to_its_bytes(size: int) -> None:
    """Key and text count in UTF-8; at the bound an entry fits, past it the least recently used
    go, and one larger than the bound alone is not kept."""

    async def scenario() -> None:
        cache = InMemorySummaryCache(max_entries=None, max_bytes=10)
        await cache.put("k", "x" * 4)  # 5 bytes
        await cache.put("K", "y" * (size - 1))  # size bytes
        assert cache.bytes <= 10
        assert (await cache.get("K") is not None) is (size <= 10)
        # Both do not fit together: the older goes, unless the newer was not kept at all.
        assert (await cache.get("k") is not None) is (size > 10)

    asyncio.run(scenario())


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_in_memory_bounds_must_be_whole_numbers(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="max_entries"):
        InMemorySummaryCache(max_entries=bad)  # type: ignore[arg-type]


def test_sqlite_hit_miss_and_persistence_across_instances(tmp_path: Path) -> None:
    path = tmp_path / "summaries.sqlite3"

    async def scenario() -> None:
        first = SQLiteSummaryCache(path)
        await check_store(first)
        await first.put("kept", "[Summary] across instances")
        await first.close()
        second = SQLiteSummaryCache(path)
        assert await second.get("kept") == "[Summary] across instances"
        await second.close()

    asyncio.run(scenario())


def test_sqlite_keeps_at_most_max_entries_the_least_recently_used_going_first(tmp_path: Path) -> None:
    path = tmp_path / "summaries.sqlite3"

    async def scenario() -> None:
        cache = SQLiteSummaryCache(path, max_entries=3)
        for name in ("a", "b", "c"):
            await cache.put(name, f"[Summary] {name}")
        assert await cache.get("a") == "[Summary] a"  # read: now the most recently used
        await cache.put("d", "[Summary] d")  # b, the least recently used, goes
        assert [await cache.get(name) for name in "abcd"] == ["[Summary] a", None, "[Summary] c", "[Summary] d"]
        await cache.put("c", "[Summary] c again")  # a replacement adds no entry
        await cache.put("e", "[Summary] e")  # a goes: c, d and e were used after it
        await cache.close()
        again = SQLiteSummaryCache(path, max_entries=3)
        assert [await again.get(name) for name in "acde"] == [None, "[Summary] c again", "[Summary] d", "[Summary] e"]
        await again.close()

    asyncio.run(scenario())
    with pytest.raises(ConfigurationError, match="max_entries"):
        SQLiteSummaryCache(path, max_entries=0)


def test_sqlite_that_is_not_a_database_raises_a_summary_cache_error(tmp_path: Path) -> None:
    path = tmp_path / "not-a-database"
    path.write_bytes(b"this is not SQLite" * 100)
    with pytest.raises(SummaryCacheError, match="not-a-database"):
        asyncio.run(SQLiteSummaryCache(path).get("k"))


@redis_extra.skip
@pytest.mark.redis
def test_redis_hit_miss_persistence_and_ttl(redis_server: RedisServer) -> None:
    prefix = f"test-{uuid.uuid4().hex[:12]}"

    async def scenario() -> None:
        first = RedisSummaryCache(redis_server.url, prefix=prefix)
        await check_store(first)
        await first.put("kept", "[Summary] across instances")
        await first.close()
        second = RedisSummaryCache(redis_server.url, prefix=prefix)
        assert await second.get("kept") == "[Summary] across instances"
        assert second.redis_key("kept") == f"{prefix}:summary:kept"
        other = RedisSummaryCache(redis_server.url, prefix=prefix + "-other")
        assert await other.get("kept") is None
        expiring = RedisSummaryCache(redis_server.url, prefix=prefix, ttl=0.2)
        await expiring.put("brief", "[Summary] soon gone")
        assert await expiring.get("brief") == "[Summary] soon gone"
        await asyncio.sleep(0.5)
        assert await expiring.get("brief") is None
        for cache in (second, other, expiring):
            await cache.close()

    asyncio.run(scenario())


def test_redis_down_is_a_summary_cache_error_and_the_model_is_asked() -> None:
    pytest.importorskip("redis")
    cache = RedisSummaryCache("redis://127.0.0.1:1/0", socket_timeout=0.5)
    with pytest.raises(SummaryCacheError, match="unreachable"):
        asyncio.run(cache.get("k"))
    client = counting_summariser()
    strategy = SummarizationStrategy(client, cache=cache)
    result = asyncio.run(compact_with_report(exchanges(8), strategy=strategy))
    assert client.calls == 1
    assert result.messages[1].text == "[Summary] summary number 1"


@pytest.mark.parametrize("bad", [object(), "cache"])
def test_a_cache_without_get_and_put_is_refused(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="SummaryCache"):
        SummarizationStrategy(ScriptedChatClient(["x"]), cache=bad)  # type: ignore[arg-type]


# The strategy with its cache ------------------------------------------------------------------


def test_a_hit_calls_no_model_and_inserts_the_same_message(tmp_path: Path) -> None:
    async def scenario() -> None:
        messages = exchanges(9)
        cache = SQLiteSummaryCache(tmp_path / "s.sqlite3")
        client = counting_summariser()
        first = await compact_with_report(messages, strategy=SummarizationStrategy(client, cache=cache))
        # A new strategy (another process) on the same file: the summary is read, not written again.
        again = await compact_with_report(messages, strategy=SummarizationStrategy(client, cache=cache))
        assert client.calls == 1
        assert to_openai(again.messages, metadata=True) == to_openai(first.messages, metadata=True)
        assert again.events[-1].detail.endswith("(summary reused)")
        # Another prompt, or another summariser, is another summary.
        other_prompt = SummarizationStrategy(client, cache=cache, prompt="Summarise briefly.")
        await compact_with_report(messages, strategy=other_prompt)
        assert client.calls == 2
        other_model = SummarizationStrategy(client, cache=cache, summarizer_id="another-model")
        await compact_with_report(messages, strategy=other_model)
        assert client.calls == 3
        # A changed message in the run summarised is another run.
        changed = [*messages[:2], Message.assistant("answer 1, changed"), *messages[3:]]
        await compact_with_report(changed, strategy=SummarizationStrategy(client, cache=cache))
        assert client.calls == 4
        await cache.close()

    asyncio.run(scenario())


def test_a_failed_summary_is_not_cached() -> None:
    client = ScriptedChatClient([RuntimeError("down"), "the gist"])
    strategy = SummarizationStrategy(client)
    messages = exchanges(9)
    failed = asyncio.run(compact_with_report(messages, strategy=strategy))
    assert failed.messages == messages
    recovered = asyncio.run(compact_with_report(messages, strategy=strategy))
    assert recovered.messages[1].text == "[Summary] the gist"
    assert client.calls == 2


def test_the_seed_sample_on_the_grid() -> None:
    """``SummarizationStrategy(target_count=4, threshold=2)`` by default: at 7 non-system messages
    the oldest 2 are summarised; at 8 the same 2 (no call); at 9 the oldest 4."""
    client = counting_summariser()
    strategy = SummarizationStrategy(client)
    conversation = exchanges(9)
    seven, eight, nine = (
        asyncio.run(compact_with_report(conversation[: n + 1], strategy=strategy)).messages for n in (7, 8, 9)
    )
    assert seven[1] == eight[1]
    assert seven[1].text == "[Summary] summary number 1"
    assert seven[2:] == conversation[3:8]
    assert eight[2:] == conversation[3:9]
    assert nine[1].text == "[Summary] summary number 2"
    assert nine[2:] == conversation[5:]
    assert client.calls == 2


# The key property: one model call per step of the cut, not per request --------------------------


def summarised_run(index: MessageIndex, conversation: Sequence[Message]) -> tuple[int, ...]:
    """Positions in the conversation of the messages the summary stands for (empty: none)."""
    positions = {id(m): n for n, m in enumerate(conversation)}
    summaries = [g for g in index.groups if g.kind is GroupKind.SUMMARY and g.replaces and not g.excluded]
    if not summaries:
        return ()
    (summary,) = summaries
    return tuple(positions[id(m)] for g in summary.replaces for m in g.messages)


def wire(message: Message) -> str:
    return json.dumps(to_openai([message], metadata=True), sort_keys=True)


def grow(make: Callable[[ScriptedChatClient], SummarizationStrategy], conversation: Sequence[Message]) -> None:
    client = counting_summariser()
    strategy = make(client)
    runs: list[tuple[int, ...]] = []
    summaries: list[str | None] = []
    projections: list[list[Message]] = []
    for length in range(1, len(conversation) + 1):
        request = list(conversation[:length])
        result = asyncio.run(compact_with_report(request, strategy=strategy, tokenizer=TOKENIZER))
        run = summarised_run(result.index, request)
        runs.append(run)
        summary = next((m for m in result.messages if m.is_summary and m not in request), None)
        summaries.append(None if summary is None else wire(summary))
        projections.append(result.messages)
    steps = [n for n, run in enumerate(runs) if run and (n == 0 or run != runs[n - 1])]
    distinct = {run for run in runs if run}
    # (b) one call per distinct run summarised: per step of the cut, never per request.
    assert client.calls == len(distinct) <= len(steps)
    for n in range(1, len(runs)):
        if runs[n] and runs[n] == runs[n - 1]:
            # (a) between two steps the summary is the same, byte for byte, and so is the start.
            assert summaries[n] == summaries[n - 1]
            previous = projections[n - 1]
            assert projections[n][: len(previous)] == previous
    same_run = {runs[n]: summaries[n] for n in range(len(runs)) if runs[n]}
    for n, run in enumerate(runs):
        if run:
            assert summaries[n] == same_run[run]  # a run met again is the summary written for it


def test_a_growing_chat_calls_the_summariser_once_per_step() -> None:
    """60 requests, threshold 2: the cut moves every second request past the trigger, so about
    27 calls, and each of the other requests repeats the previous one's start."""
    conversation = exchanges(60)
    grow(SummarizationStrategy, conversation)
    client = counting_summariser()
    strategy = SummarizationStrategy(client)
    for length in range(2, len(conversation) + 1):
        asyncio.run(compact_with_report(conversation[:length], strategy=strategy))
    assert client.calls == (60 - 6 + 1) // 2


GROWTH = settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@GROWTH
@given(conversation=conversations(max_blocks=16), threshold=st.integers(1, 4), target_count=st.integers(1, 5))
def test_keyword_style_summaries_do_not_change_between_steps(
    conversation: Sequence[Message], threshold: int, target_count: int
) -> None:
    grow(lambda client: SummarizationStrategy(client, target_count=target_count, threshold=threshold), conversation)


@GROWTH
@given(conversation=conversations(max_blocks=16), high=st.integers(40, 200), gap=st.integers(10, 39))
def test_trigger_style_summaries_do_not_change_between_steps(
    conversation: Sequence[Message], high: int, gap: int
) -> None:
    grow(
        lambda client: SummarizationStrategy(
            client, trigger=tokens_exceed(high), target=tokens_below(high - gap), minimum_preserved=1
        ),
        conversation,
    )
