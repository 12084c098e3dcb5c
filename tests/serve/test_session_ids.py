"""Session ids through a real proxy: one grammar for the body, the header and the URL.

An id is either refused in all three places (400 ``invalid_session_id`` in OpenAI's shape, or an
HTTP layer that cannot carry it at all) or usable in all three: created by the body, used by the
header, read, forgotten and deleted by the URL.  Never created and then out of reach.  A session
an earlier version created under an id the grammar now refuses stays reachable wherever its id
can travel.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.optional_imports import try_import
from tests.serve.conftest import Proxy, StartProxy
from tests.serve.test_failures import assert_openai_error
from tests.sizes import examples

from contextledger.history import SQLiteHistoryProvider
from contextledger.messages import Message
from contextledger.serve._sessions import session_key
from contextledger.serve._tenants import tenant_of

with try_import("serve") as serve_extra:
    import httpx

pytestmark = serve_extra.skip

SESSIONS = "/v1/contextledger/sessions"
USABLE = ["ticket-42", "a.b_c-D", "9", "x..y", "Z" * 128, "0.5"]
ODD = {
    "slash": "a/b",
    "leading slash": "/a",
    "dot": ".",
    "dot-dot": "..",
    "dot-dot-slash": "../..",
    "leading dot": ".hidden",
    "percent": "50%",
    "percent escape": "a%2Fb",
    "space": "a b",
    "leading space": " desk",
    "trailing space": "desk ",
    "non-ASCII, Latin-1": "café",
    "non-ASCII, beyond Latin-1": "日本",
    "emoji": "desk-\U0001f600",
    "empty": "",
    "one over the length": "a" * 129,
    "very long": "a" * 5000,
    "tab": "a\tb",
    "line break": "a\nb",
    "NUL": "a\x00b",
    "DEL": "a\x7fb",
    "question mark": "a?b",
    "hash": "a#b",
    "colon": "a:b",
    "backslash": "a\\b",
}


@pytest.fixture(scope="module")
def proxy(start_proxy_module: StartProxy) -> Iterator[Proxy]:
    with start_proxy_module() as running:
        yield running


def outcome(
    send: httpx.Client,
    method: str,
    path: str,
    key: str,
    *,
    json: object = None,
    headers: dict[bytes, bytes] | None = None,
) -> str:
    """``usable`` (answered 2xx), ``refused`` (400 invalid_session_id, or HTTP cannot carry the
    request), or the unexpected status and code, which fails the test."""
    try:
        reply = send.request(
            method, path, json=json, headers={b"authorization": f"Bearer {key}".encode(), **(headers or {})}
        )
    except (httpx.LocalProtocolError, httpx.InvalidURL, UnicodeEncodeError, ValueError):
        return "refused"  # the client's HTTP layer will not send it: unusable there, and so refused everywhere
    if reply.status_code < 300:
        return "usable"
    try:
        body = reply.json()
    except ValueError:
        body = None
    if reply.status_code == 400 and body is None:
        return "refused"  # the server's HTTP parser refused the request before the proxy saw it
    if reply.status_code == 400 and body["error"]["code"] == "invalid_session_id":
        assert_openai_error(body, "invalid_session_id")
        assert "A-Z, a-z, 0-9" in body["error"]["message"]
        return "refused"
    return f"{reply.status_code} {body}"


def header_value(session_id: str) -> bytes:
    """What a client puts in the header: the id in UTF-8 (ASCII as it is)."""
    return session_id.encode("utf-8")


def url_segment(session_id: str) -> str:
    """The id percent-encoded, dots too: an HTTP client resolves a ``.`` or ``..`` segment itself
    before sending (so ``/sessions/../facts`` never reaches the proxy as written), encoded it
    arrives as the id."""
    return quote(session_id, safe="").replace(".", "%2E")


def places(proxy: Proxy, session_id: str) -> dict[str, str]:
    """What each place makes of ``session_id``, in a tenant of its own."""
    key = f"sk-ids-{uuid.uuid4().hex}"
    segment = url_segment(session_id)
    turn = {"model": "fake", "messages": [{"role": "user", "content": "hello"}]}
    with httpx.Client(base_url=proxy.root, timeout=30) as send:
        seen = {"body: create": outcome(send, "POST", SESSIONS, key, json={"id": session_id})}
        header = {b"X-Contextledger-Session": header_value(session_id)}
        seen["header: a turn"] = outcome(send, "POST", "/v1/chat/completions", key, json=turn, headers=header)
        for label, method, path in [
            ("URL: info", "GET", f"{SESSIONS}/{segment}"),
            ("URL: messages", "GET", f"{SESSIONS}/{segment}/messages"),
            ("URL: facts", "GET", f"{SESSIONS}/{segment}/facts"),
            ("URL: forget", "POST", f"{SESSIONS}/{segment}/forget"),
            ("URL: delete", "DELETE", f"{SESSIONS}/{segment}"),
        ]:
            seen[label] = outcome(send, method, path, key, json={} if method == "POST" else None)
    return seen


@pytest.mark.parametrize("session_id", USABLE)
def test_an_id_of_the_grammar_is_usable_in_the_body_the_header_and_the_url(proxy: Proxy, session_id: str) -> None:
    seen = places(proxy, session_id)
    assert set(seen.values()) == {"usable"}, seen


@pytest.mark.parametrize("session_id", list(ODD.values()), ids=list(ODD))
def test_an_odd_id_is_refused_in_every_place(proxy: Proxy, session_id: str) -> None:
    seen = places(proxy, session_id)
    assert set(seen.values()) == {"refused"}, seen


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(session_id=st.text(max_size=140) | st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,130}", fullmatch=True))
def test_body_header_and_url_always_agree_on_an_id(proxy: Proxy, session_id: str) -> None:
    seen = places(proxy, session_id)
    assert len(set(seen.values())) == 1, seen
    assert set(seen.values()) <= {"usable", "refused"}, seen


def test_a_session_created_under_an_earlier_id_stays_readable_and_deletable(
    start_proxy: StartProxy, tmp_path: Path
) -> None:
    key = "sk-ids-earlier-tenant"
    tenant = tenant_of({"authorization": f"Bearer {key}"}, trust_tenant_header=False)
    with start_proxy() as proxy:  # creates the file, then the earlier version's sessions go in it
        proxy.create_session("current", key)
    database = tmp_path / "sessions.db"
    earlier = ["notes 2024", "a/b", "café"]

    async def store_earlier() -> None:
        history = SQLiteHistoryProvider(database, source_id="serve")
        try:
            for session_id in earlier:
                await history.append(session_key(tenant, session_id), [Message.user(f"kept in {session_id}")])
        finally:
            await history.close()

    asyncio.run(store_earlier())
    with sqlite3.connect(database) as connection:
        connection.executemany(
            "INSERT INTO contextledger_serve_sessions (session_key, created_at) VALUES (?, '2024-01-01T00:00:00Z')",
            [(session_key(tenant, session_id),) for session_id in earlier],
        )
    connection.close()
    with start_proxy() as proxy, httpx.Client(base_url=proxy.root, timeout=30) as send:
        auth = {"authorization": f"Bearer {key}"}
        for session_id in earlier:
            segment = url_segment(session_id)
            reply = send.get(f"{SESSIONS}/{segment}/messages", headers=auth)
            assert reply.status_code == 200, reply.text
            assert [m["content"] for m in reply.json()["data"]] == [f"kept in {session_id}"]
            refused = send.post(SESSIONS, json={"id": session_id}, headers=auth)  # no new one under it
            assert refused.status_code == 400
            assert_openai_error(refused.json(), "invalid_session_id")
        turn = {"model": "fake", "messages": [{"role": "user", "content": "still here?"}]}
        reply = send.post("/v1/chat/completions", json=turn, headers={**auth, "X-Contextledger-Session": "notes 2024"})
        assert reply.status_code == 200, reply.text
        for session_id in earlier:
            reply = send.delete(f"{SESSIONS}/{url_segment(session_id)}", headers=auth)
            assert reply.status_code == 200, reply.text
            gone = send.get(f"{SESSIONS}/{url_segment(session_id)}", headers=auth)
            assert gone.status_code == 400  # once deleted, the id is simply outside the grammar
