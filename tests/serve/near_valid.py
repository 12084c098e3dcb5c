"""Near-valid chat-completions bodies: valid requests with one to three things wrong, as raw bytes.

A seeded generator (the same seed gives the same bodies) so a failure names a body that can be
sent again.  The mutations are what clients and attackers send: wrong types, deep nesting, odd
and broken unicode, huge strings, NaN and overflowing numbers, duplicate keys, missing fields,
tool results without their calls, the proxy's own metadata key.  Bodies are written by
:func:`dump`, which can write what ``json.dumps`` refuses to (duplicate keys, raw fragments).
"""

from __future__ import annotations

import http.client
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from contextledger.messages import chat_problems, validate


@dataclass(frozen=True)
class Raw:
    """A JSON fragment written as it is (``NaN``, ``1e400``, nesting deeper than ``json`` writes)."""

    text: str


@dataclass(frozen=True)
class Pairs:
    """An object written from its pairs, so a key may appear twice."""

    items: tuple[tuple[str, Any], ...]


def dump(value: Any) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Pairs):
        return "{" + ", ".join(f"{json.dumps(k)}: {dump(v)}" for k, v in value.items) + "}"
    if isinstance(value, dict):
        return dump(Pairs(tuple(value.items())))
    if isinstance(value, list):
        return "[" + ", ".join(dump(item) for item in value) + "]"
    return json.dumps(value)  # a lone surrogate is written as its \\ud800 escape


def _conversation(rng: random.Random) -> list[dict[str, Any]]:
    call_id = f"call_{rng.randint(0, 999)}"
    shapes = [
        [{"role": "user", "content": "module=Billing"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}],
        [
            {"role": "user", "content": "what does item 4 cost?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "price", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": call_id, "content": "12 EUR"},
            {"role": "user", "content": "and item 5?"},
        ],
        [{"role": "developer", "content": "Be exact."}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "answer", "name": "bot"},
            {"role": "user", "content": "second"},
        ],
    ]
    return json.loads(json.dumps(rng.choice(shapes)))  # type: ignore[no-any-return]


def _base(rng: random.Random) -> dict[str, Any]:
    body: dict[str, Any] = {"model": rng.choice(["fake", "gpt-4o-mini"]), "messages": _conversation(rng)}
    if rng.random() < 0.3:
        body["stream"] = True
    if rng.random() < 0.3:
        body["temperature"] = rng.choice([0, 0.7, 1])
    if rng.random() < 0.2:
        body["tools"] = [{"type": "function", "function": {"name": "price", "parameters": {"type": "object"}}}]
    return body


def _odd_value(rng: random.Random) -> Any:
    depth = rng.choice([3, 40, 200, 1200, 5000, 50_000])
    choices: list[Any] = [
        None,
        True,
        0,
        -1,
        2**70,
        3.5,
        "",
        [],
        {},
        ["user"],
        {"role": "user"},
        Raw("NaN"),
        Raw("Infinity"),
        Raw("-Infinity"),
        Raw("1e400"),
        Raw("-1e999"),
        "\ud800",
        "a\udfffb",
        "\ud83d\ude00 emoji as a pair",
        "\u202eright-to-left\u200b\u0000nul",
        "x" * rng.choice([1_000, 100_000, 1_500_000]),
        Raw("[" * depth + "]" * depth),
        Raw('{"a":' * depth + "1" + "}" * depth),
        Raw("9" * 5000),
    ]
    return rng.choice(choices)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def _mutate(rng: random.Random, body: dict[str, Any]) -> Any:
    """One thing wrong with ``body`` (changed in place where it can be; the new body is returned)."""
    paths = list(_paths(body))[1:]
    path = rng.choice(paths)
    parent = _at(body, path[:-1])
    kind = rng.randrange(10)
    if kind <= 2:  # a value of the wrong type, size or number
        parent[path[-1]] = _odd_value(rng)
    elif kind == 3 and isinstance(parent, dict):  # a missing field
        del parent[path[-1]]
    elif kind == 4 and isinstance(parent, dict):  # a key written twice, the second with another value
        items = list(parent.items())
        items.insert(rng.randrange(len(items) + 1), (path[-1], _odd_value(rng)))
        replacement: Any = Pairs(tuple(items))
        if not path[:-1]:
            return replacement
        _at(body, path[:-2])[path[-2]] = replacement
    elif kind == 5:  # a role nobody has
        messages = body.get("messages")
        message = rng.choice(messages) if isinstance(messages, list) and messages else None
        if isinstance(message, dict):
            message["role"] = rng.choice([["user"], {"r": "user"}, "wizard", "tool", 7, None, "developer"])
    elif kind == 6 and isinstance(body.get("messages"), list):  # a tool result without its call
        at = rng.randrange(len(body["messages"]) + 1)
        body["messages"].insert(at, {"role": "tool", "tool_call_id": f"call_{rng.randint(0, 9)}", "content": "x"})
    elif kind == 7 and isinstance(body.get("messages"), list) and body["messages"]:  # our metadata key
        message = rng.choice(body["messages"])
        if isinstance(message, dict):
            message["_contextledger"] = rng.choice(
                [{"message_id": "m1"}, {"additional_properties": {"k": "v"}}, {"message_id": 5}, "x", []]
            )
    elif kind == 8:  # the model, the messages or the whole body of another shape
        target = rng.choice(["model", "messages", "stream", None])
        if target is None:
            return rng.choice([[], "text", 5, None, Raw("[" * 3000)])
        body[target] = _odd_value(rng)
    elif isinstance(parent, dict):  # a key the API does not have
        parent[rng.choice(["extra", "", "\ud800", "x" * 300])] = _odd_value(rng)
    return body


def near_valid_bodies(count: int, seed: int) -> Iterator[bytes]:
    """``count`` bodies, each a valid request with one to three mutations (a tenth left valid)."""
    rng = random.Random(seed)
    for _ in range(count):
        body: Any = _base(rng)
        if rng.random() >= 0.1:
            for _ in range(rng.choice([1, 1, 2, 3])):
                if not isinstance(body, dict) or not body:
                    break
                body = _mutate(rng, body)
        yield dump(body).encode("utf-8", "surrogatepass")


def strict_refusal(received: dict[str, Any]) -> str | None:
    """Why a strict upstream would refuse a request the fake upstream recorded, or ``None``: not
    strict JSON (its own check), no string ``model``, no messages, messages ``validate()``
    rejects or that break the API's structural rules (``chat_problems``), or the proxy's
    ``_contextledger`` metadata key."""
    if received.get("strict"):
        return str(received["strict"])
    body = received["body"]
    if not isinstance(body.get("model"), str) or not body["model"]:
        return f"model is {body.get('model')!r}"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "no messages"
    if any(isinstance(m, dict) and "_contextledger" in m for m in messages):
        return "the _contextledger key went upstream"
    problems = validate(messages) or chat_problems(body)  # the pairing, then the API's structural rules
    return "; ".join(str(p) for p in problems)[:300] if problems else None


FUZZ_KEY = "sk-fuzz-tenant-8"


class Client:
    """One keep-alive connection; ``broken`` counts the answers after which it was unusable, and
    ``answer_headers`` holds the last answer's headers."""

    def __init__(self, root: str, headers: dict[str, str], path: str = "/v1/chat/completions") -> None:
        self.path = path
        host, port = root.removeprefix("http://").split(":")
        self.address = (host, int(port))
        self.headers = {"authorization": f"Bearer {FUZZ_KEY}", "content-type": "application/json", **headers}
        self.http = self._open()
        self.broken = 0
        self.answer_headers: dict[str, str] = {}

    def _open(self) -> http.client.HTTPConnection:
        connection = http.client.HTTPConnection(*self.address, timeout=60)
        connection.auto_open = False
        connection.connect()
        return connection

    def post(self, body: bytes) -> tuple[int, bytes]:
        """The status and the body; a connection the server closed saying so is opened again."""
        try:
            self.http.request("POST", self.path, body, self.headers)
            reply = self.http.getresponse()
            raw = reply.read()
            self.answer_headers = {name.lower(): value for name, value in reply.getheaders()}
        except (http.client.HTTPException, OSError):
            self.broken += 1  # the previous answer left the connection unusable without saying so
            self.http.close()
            self.http = self._open()
            return self.post(body)
        if (reply.getheader("connection") or "").lower() == "close":
            self.http.close()
            self.http = self._open()
        return reply.status, raw
