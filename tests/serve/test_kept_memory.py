"""What a proxy keeps of its sessions between turns is bounded by bytes, not by a count of
sessions: many sessions of large distinct turns leave it within its bound (``--kept-session-bytes``),
through a real ``contextledger serve`` (``benchmarks/kept_sessions.py`` measures 1 GiB over 1,000
sessions with the default settings); and the bound's accounting stays true turn by turn."""

from __future__ import annotations

import asyncio
import http.client
import json
from pathlib import Path
from urllib.parse import urlsplit

from tests.optional_imports import try_import
from tests.serve.conftest import FakeUpstream, StartProxy
from tests.serve.test_memory import proxy_pid, resident_bytes

from contextledger.history import SQLiteHistoryProvider, Turn
from contextledger.messages import Message
from contextledger.tokenizers import CharacterEstimatorTokenizer

with try_import("serve") as serve_extra:
    from contextledger.serve._kept import KeptSessions, held_bytes

pytestmark = serve_extra.skip

MIB = 1024 * 1024
KEY = "sk-kept-memory-0123456789"
SESSIONS = 40
KEPT = 4 * MIB
# The reader's 32 MiB of remembered messages, the kept sessions' 4, the buffers of the request in
# flight and the allocator's slack (measured: 50-60 MiB; before the bound, 40 sessions of a 1 MiB
# turn and its 1 MiB echo were all kept: 140 MiB and more).
GROWTH_BOUND = 88 * MIB


def test_many_sessions_of_large_turns_stay_within_the_bound(
    start_proxy: StartProxy, fake_upstream: FakeUpstream
) -> None:
    with start_proxy("--kept-session-bytes", str(KEPT)) as proxy:
        pid = proxy_pid(proxy)
        connection = http.client.HTTPConnection("127.0.0.1", urlsplit(proxy.root).port, timeout=60)
        filler = "x" * (MIB - 32)

        def post(path: str, body: dict[str, object], session: str | None = None) -> None:
            headers = {"content-type": "application/json", "authorization": f"Bearer {KEY}"}
            if session is not None:
                headers["x-contextledger-session"] = session
            connection.request("POST", path, json.dumps(body).encode(), headers)
            reply = connection.getresponse()
            content = reply.read()
            assert reply.status < 300, content[:300]

        def turn(session: str) -> None:
            message = {"role": "user", "content": f"{session}: {filler}"}
            post("/v1/chat/completions", {"model": "fake-bulk", "messages": [message]}, session)

        for warm in range(3):
            post("/v1/contextledger/sessions", {"id": f"warm-{warm}"})
            turn(f"warm-{warm}")
        for number in range(SESSIONS):
            post("/v1/contextledger/sessions", {"id": f"s{number}"})
        before = peak = resident_bytes(pid)
        for number in range(SESSIONS):
            turn(f"s{number}")
            peak = max(peak, resident_bytes(pid))
        connection.close()
        fake_upstream.clear()
    growth = peak - before
    print(f"\n{SESSIONS} sessions of a 1 MiB turn (and its 1 MiB echo): the proxy grew by {growth / MIB:.0f} MiB")
    assert growth <= GROWTH_BOUND, f"{SESSIONS} sessions of a 1 MiB turn grew the proxy by {growth / MIB:.0f} MiB"


def test_the_kept_bytes_are_counted_true_and_within_the_limit(tmp_path: Path) -> None:
    """Turn after turn over many sessions, what is counted is what the kept histories hold, and
    it stays within the limit but for the one session in use."""

    async def run() -> None:
        history = SQLiteHistoryProvider(str(tmp_path / "h.db"))
        limit = 64 * 1024
        kept = KeptSessions(history, None, CharacterEstimatorTokenizer(), limit=limit)
        for number in range(60):
            key = f"s{number % 12}"
            stored = await kept.history(key)
            text = "y" * (1000 * (number % 7 + 1))
            turn = Turn(key, f"t{number}", (Message.user(text),), (Message.assistant("ok"),))
            await kept.store_turn(turn, stored)
            entries = kept._sessions.values()
            assert kept.held == sum(entry.bytes for entry in entries)
            for entry in entries:
                assert entry.history is not None
                assert entry.bytes == held_bytes(entry.history.messages)
            assert kept.held <= limit or len(kept) == 1
        await history.close()

    asyncio.run(run())
