"""A client learns what its message did to the facts without a change to the body an OpenAI client
parses: response headers on an answer, an SSE comment at the end of a stream."""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest
from tests.serve.conftest import StartProxy

KEY = "sk-fact-headers-tenant-6"


def turn(root: str, text: str, stream: bool = False) -> tuple[int, dict[str, str], bytes]:
    host, port = root.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    body = json.dumps({"model": "fake", "messages": [{"role": "user", "content": text}], "stream": stream})
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json", "X-Contextledger-Session": "told"}
    connection.request("POST", "/v1/chat/completions", body.encode(), headers)
    reply = connection.getresponse()
    raw = reply.read()
    connection.close()
    return reply.status, {k.lower(): v for k, v in reply.getheaders()}, raw


CASES: list[tuple[str, list[str], list[str]]] = [
    ("module=Billing; database=SQL Server 2022", ["module", "database"], []),
    ("flavour=vanilla", [], ["flavour"]),
    ("module=" + "x" * 500, [], ["module"]),
    ("Which module do we use?", [], []),
]


@pytest.mark.parametrize("stream", [False, True])
def test_admitted_keys_and_rejections_are_told_beside_the_answer(start_proxy: StartProxy, stream: bool) -> None:
    with start_proxy() as proxy:
        proxy.create_session("told", KEY)
        for text, admitted, rejected in CASES:
            status, headers, raw = turn(proxy.root, text, stream)
            assert status == 200, raw
            if stream:
                comments = [line[2:] for line in raw.decode().splitlines() if line.startswith(": ")]
                told = dict(line.split(": ", 1) for line in comments)
                assert raw.decode().rstrip().endswith("data: [DONE]")
            else:
                told = headers
                body: Any = json.loads(raw)
                assert body["choices"][0]["message"]["content"] == f"echo: {text}"  # the body as the upstream's
            said = told.get("x-contextledger-facts-admitted", "")
            assert [key for key in said.split(", ") if key] == admitted, (text, told)
            reasons = told.get("x-contextledger-facts-rejected", "")
            for key in rejected:
                assert reasons.startswith(f"{key}: ") or f"; {key}: " in reasons, (text, reasons)
            if not rejected:
                assert not reasons, (text, reasons)
            assert "vanilla" not in reasons  # reasons name keys, never values
            assert all(ord(c) < 128 for c in said + reasons)
