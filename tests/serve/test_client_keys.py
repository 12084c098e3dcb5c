"""Client keys, their limits and the start-up check, in-process: the keys file read line by line, a
reload that keeps the keys in force when the file is bad, the token bucket and the count of
requests under way at every bound, and the gate answering every route in the caller's protocol."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.optional_imports import try_import
from tests.sizes import examples

from contextledger.cli import _parser, main
from contextledger.exceptions import ConfigurationError
from contextledger.serve import ServeConfig
from contextledger.serve._client_keys import MAX_TENANT_NAME, ClientKeys, parse_client_keys, presented_key
from contextledger.serve._client_limits import ClientLimits, Limited
from contextledger.serve._command import config_from_args
from contextledger.serve._tenants import named_tenant, tenant_of

with try_import("serve") as serve_extra:
    import httpx
    from starlette.types import Message, Receive, Scope, Send

pytestmark = pytest.mark.skipif(not serve_extra.installed, reason=serve_extra.reason)

UPSTREAM = "http://127.0.0.1:9/v1"


def sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def bearer_tenant(key: str) -> str:
    return tenant_of({"authorization": f"Bearer {key}"}, trust_tenant_header=False)


# The keys file ---------------------------------------------------------------------------------


def test_a_key_a_line_in_either_form_with_or_without_a_name() -> None:
    text = "\n".join(
        [
            "# the proxy's clients",
            "sk-plain",
            f"sha256:{sha256('sk-hashed').upper()}   # the key itself is not in this file",
            "sk-named   acme corp",
            "sk-rotated acme corp",
            "",
            "   ",
            "sk-with#hash  # a '#' inside a key is part of it",
        ]
    )
    keys = parse_client_keys(text, "keys.txt")
    tenants = {entry.line: entry.tenant for entry in keys.values()}
    assert tenants == {
        2: bearer_tenant("sk-plain"),  # the tenant the key named before client keys existed
        3: bearer_tenant("sk-hashed"),
        4: named_tenant("acme corp"),
        5: named_tenant("acme corp"),  # a rotated key keeps its tenant's sessions
        8: bearer_tenant("sk-with#hash"),
    }
    assert named_tenant("acme corp") not in {
        bearer_tenant("acme corp"),
        tenant_of({"x-contextledger-tenant": "acme corp"}, trust_tenant_header=True),
    }


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("sha256:" + "a" * 63, "64 hexadecimal digits, got 63"),
        ("sha256:" + "a" * 65, "64 hexadecimal digits, got 65"),
        ("sha256:" + "g" * 64, "64 hexadecimal digits"),
        ("sha256:", "got 0 characters"),
        ("sk-caf\u00e9", "printable ASCII"),
        ("sk-fine name\twith a tab", "printable characters"),
        ("sk-fine " + "n" * (MAX_TENANT_NAME + 1), f"1 to {MAX_TENANT_NAME} printable characters (got 129)"),
    ],
)
def test_a_malformed_line_is_refused_by_file_and_line_without_showing_it(line: str, problem: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        parse_client_keys(f"sk-good\n# note\n{line}\n", "/etc/keys")
    message = str(refused.value)
    assert message.startswith("client keys file /etc/keys, line 3: "), message
    assert problem in message
    assert line.split(maxsplit=1)[0] not in message or line.split(maxsplit=1)[0] == "sha256:"


def test_a_tenant_name_of_the_longest_length_is_kept() -> None:
    (entry,) = parse_client_keys("sk-fine " + "n" * MAX_TENANT_NAME, "keys").values()
    assert entry.tenant == named_tenant("n" * MAX_TENANT_NAME)


def test_a_key_given_twice_in_any_form_is_refused_naming_both_lines() -> None:
    with pytest.raises(ConfigurationError, match="line 3: this key is already on line 1"):
        parse_client_keys(f"sk-twice a\nsk-other\nsha256:{sha256('sk-twice')} b\n", "keys")


_KEY = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40).filter(
    lambda key: not key.startswith(("#", "sha256:"))
)
_NAME = st.one_of(
    st.none(),
    st.text(st.characters(categories=("L", "N", "P", "S")), min_size=1, max_size=30).filter(
        lambda name: not name.startswith("#")
    ),
)


@settings(max_examples=examples(200), deadline=None)
@given(
    entries=st.dictionaries(_KEY, st.tuples(_NAME, st.booleans(), st.booleans()), min_size=1, max_size=8),
    stranger=_KEY,
)
def test_every_listed_key_is_admitted_to_its_tenant_and_no_other_key_is(
    entries: dict[str, tuple[str | None, bool, bool]], stranger: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    lines = ["# generated"]
    for key, (name, hashed, commented) in entries.items():
        written = f"sha256:{sha256(key)}" if hashed else key
        lines.append(written + (f" {name}" if name else "") + (" # a comment" if commented else ""))
    path = tmp_path_factory.mktemp("keys") / "keys"
    path.write_text("\n".join(lines), encoding="utf-8")
    keys = ClientKeys(str(path))
    assert len(keys) == len(entries)
    for key, (name, _, _) in entries.items():
        admitted = keys.admit(key)
        assert admitted is not None
        assert admitted.tenant == (named_tenant(name.strip()) if name else bearer_tenant(key))
    if stranger not in entries:
        assert keys.admit(stranger) is None
    assert keys.admit(None) is None
    assert keys.admit("") is None


def test_the_key_is_the_bearer_token_else_x_api_key() -> None:
    assert presented_key({"authorization": "Bearer sk-a", "x-api-key": "sk-b"}) == "sk-a"
    assert presented_key({"authorization": "bearer   sk-a  "}) == "sk-a"
    assert presented_key({"authorization": "Basic c2s=", "x-api-key": " sk-b "}) == "sk-b"
    assert presented_key({"authorization": "Bearer "}) is None
    assert presented_key({}) is None


def test_a_reload_takes_the_new_file_and_a_bad_one_keeps_the_keys_in_force(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "keys"
    path.write_text("sk-first\nsk-second\n")
    keys = ClientKeys(str(path))
    path.write_text("sk-second\nsk-third\n")
    assert keys.reload()
    assert keys.admit("sk-first") is None
    assert keys.admit("sk-third") is not None

    path.write_text("sk-fourth\nsha256:nothex\n")
    with caplog.at_level(logging.INFO, logger="uvicorn.error"):
        assert not keys.reload()
    assert keys.admit("sk-third") is not None
    assert keys.admit("sk-fourth") is None
    (record,) = caplog.records
    assert "the 2 keys in force are kept" in record.getMessage()
    assert "line 2" in record.getMessage()
    assert "sk-" not in record.getMessage()

    path.unlink()
    assert not keys.reload()
    assert keys.admit("sk-second") is not None


def test_an_unreadable_or_undecodable_file_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"cannot read client keys file .*missing"):
        ClientKeys(str(tmp_path / "missing"))
    (tmp_path / "latin").write_bytes(b"sk-caf\xe9\n")
    with pytest.raises(ConfigurationError, match="is not UTF-8 text"):
        ClientKeys(str(tmp_path / "latin"))


# Limits ----------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_key_may_send_its_minute_at_once_then_one_each_sixtieth_of_a_minute() -> None:
    clock = Clock()
    limits = ClientLimits(per_minute=4, at_once=None, clock=clock)
    for _ in range(4):  # N-1 and N pass
        assert limits.admit(b"a") is None
        limits.release(b"a")
    assert limits.admit(b"a") == Limited("rate", 15)  # N+1: one more in 60/4 seconds
    assert limits.admit(b"b") is None  # another key has its own bucket
    clock.now += 14.0
    assert limits.admit(b"a") == Limited("rate", 1)
    clock.now += 1.0
    assert limits.admit(b"a") is None
    clock.now += 3600.0  # a long pause refills the bucket to one minute's worth, not more
    for _ in range(4):
        assert limits.admit(b"a") is None
    assert limits.admit(b"a") is not None


def test_a_key_may_have_n_requests_under_way_and_each_that_ends_frees_one() -> None:
    limits = ClientLimits(per_minute=None, at_once=3)
    for _ in range(3):
        assert limits.admit(b"a") is None
    assert limits.admit(b"a") == Limited("concurrency", 1)
    assert limits.admit(b"b") is None
    limits.release(b"a")
    assert limits.under_way(b"a") == 2
    assert limits.admit(b"a") is None
    limits.keep_only([b"b"])  # "a" was revoked: forgotten, its requests end uncounted
    assert limits.under_way(b"a") == 0
    limits.release(b"a")
    assert limits.under_way(b"a") == 0


def test_a_refused_request_takes_no_token_and_no_slot() -> None:
    clock = Clock()
    limits = ClientLimits(per_minute=2, at_once=1, clock=clock)
    assert limits.admit(b"a") is None
    assert limits.admit(b"a") == Limited("concurrency", 1)  # the bucket keeps its second token
    limits.release(b"a")
    assert limits.admit(b"a") is None
    limits.release(b"a")
    assert limits.admit(b"a") == Limited("rate", 30)
    assert limits.under_way(b"a") == 0


@pytest.mark.parametrize("value", [0, -1, True, 1.5])
def test_limits_are_whole_numbers_of_requests(value: object) -> None:
    with pytest.raises(ConfigurationError, match=f"got {value!r}"):
        ClientLimits(per_minute=value, at_once=None)  # type: ignore[arg-type]


# Configuration and the start-up check ------------------------------------------------------------


def keys_file(tmp_path: Path, text: str = "sk-client-1 alpha\n") -> str:
    path = tmp_path / "clients.keys"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "proxy.internal"])
def test_a_server_key_off_loopback_without_client_keys_refuses_to_start_in_one_line(
    host: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CONTEXTLEDGER_UPSTREAM_KEY", "sk-server-secret")
    assert main(["serve", "--upstream", UPSTREAM, "--host", host]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    for option in ("--client-keys FILE", "$CONTEXTLEDGER_CLIENT_KEYS", "127.0.0.1", "--trust-tenant-header", host):
        assert option in err
    assert "sk-server-secret" not in err


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST"])
def test_a_server_key_on_loopback_needs_no_client_keys(host: str) -> None:
    made = ServeConfig(UPSTREAM, host=host, upstream_key="sk-server")
    assert "anyone reaching" in made.describe()


def test_off_loopback_a_trusted_gateway_or_client_keys_or_clients_own_keys_may_start(tmp_path: Path) -> None:
    ServeConfig(UPSTREAM, host="0.0.0.0", upstream_key="sk-server", trust_tenant_header=True)
    ServeConfig(UPSTREAM, host="0.0.0.0")  # each client brings its own upstream key: as before
    made = ServeConfig(
        UPSTREAM,
        host="0.0.0.0",
        upstream_key="sk",
        client_keys=keys_file(tmp_path),
        client_rpm=60,
        client_concurrency=4,
    )
    assert "only keys in" in made.describe()
    assert "60 requests a minute and 4 at once" in made.describe()


def test_client_keys_need_the_server_key_and_limits_need_client_keys(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="set \\$CONTEXTLEDGER_UPSTREAM_KEY, or drop --client-keys"):
        ServeConfig(UPSTREAM, client_keys=keys_file(tmp_path))
    with pytest.raises(ConfigurationError, match="give --client-keys FILE too"):
        ServeConfig(UPSTREAM, upstream_key="sk", client_rpm=10)
    with pytest.raises(ConfigurationError, match="client_concurrency must be a whole number"):
        ServeConfig(UPSTREAM, upstream_key="sk", client_keys=keys_file(tmp_path), client_concurrency=0)


def test_a_malformed_keys_file_stops_the_command_naming_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CONTEXTLEDGER_UPSTREAM_KEY", "sk-server")
    path = keys_file(tmp_path, "sk-good\nsha256:abc\n")
    assert main(["serve", "--upstream", UPSTREAM, "--client-keys", path]) == 2
    assert f"client keys file {path}, line 2:" in capsys.readouterr().err


def test_the_keys_file_comes_from_a_flag_the_environment_or_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTEXTLEDGER_UPSTREAM_KEY", "sk-server")
    for name in ("flagged", "environment", "filed"):
        (tmp_path / name).mkdir()
    flagged, environment, filed = (keys_file(tmp_path / name) for name in ("flagged", "environment", "filed"))
    settings = tmp_path / "serve.json"
    settings.write_text(f'{{"client_keys": "{filed}", "client_rpm": 5, "client_concurrency": 2}}')

    def made(*argv: str) -> ServeConfig:
        return config_from_args(_parser().parse_args(["serve", "--upstream", UPSTREAM, *argv]))

    assert made("--config", str(settings)).client_keys == filed
    assert made("--config", str(settings)).client_rpm == 5
    monkeypatch.setenv("CONTEXTLEDGER_CLIENT_KEYS", environment)
    assert made("--config", str(settings)).client_keys == environment
    assert made("--config", str(settings), "--client-keys", flagged, "--client-concurrency", "9").client_keys == flagged
    assert made("--client-concurrency", "9").client_concurrency == 9


# The gate, in-process ------------------------------------------------------------------------------

ROUTES = [
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/responses"),
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages/count_tokens"),
    ("GET", "/v1/models"),
    ("POST", "/v1/contextledger/sessions"),
    ("GET", "/v1/contextledger/sessions/s1"),
    ("GET", "/v1/contextledger/sessions/s1/messages"),
    ("GET", "/v1/contextledger/sessions/s1/facts"),
    ("POST", "/v1/contextledger/sessions/s1/forget"),
    ("DELETE", "/v1/contextledger/sessions/s1"),
    ("GET", "/v1/no-such-route"),
]


def test_every_api_route_refuses_a_missing_or_unknown_key_in_the_callers_shape(tmp_path: Path) -> None:
    from contextledger.serve import create_app  # noqa: PLC0415

    config = ServeConfig(
        UPSTREAM,
        anthropic_upstream="http://127.0.0.1:9",
        store=f"sqlite:{tmp_path / 's.db'}",
        upstream_key="sk-server",
        client_keys=keys_file(tmp_path),
    )
    app = create_app(config)

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
            for method, path in ROUTES:
                for headers, code in (
                    ({}, "missing_api_key"),
                    ({"authorization": "Bearer sk-unknown"}, "invalid_api_key"),
                    ({"x-api-key": "sk-unknown"}, "invalid_api_key"),
                    ({"authorization": "Basic c2stY2xpZW50LTE="}, "missing_api_key"),
                ):
                    answer = await client.request(method, path, headers=headers, content=b"{}")
                    assert answer.status_code == 401, (method, path, answer.text)
                    body = answer.json()
                    shape = {"type", "error"} if path.startswith("/v1/messages") else {"error"}
                    assert set(body) == shape, body
                    assert body["error"]["type"] == "authentication_error", body
                    assert body["error"]["code"] == code
                    assert "sk-" not in answer.text
            assert (await client.get("/healthz")).status_code == 200
            metrics = (await client.get("/metrics")).text
            assert f'contextledger_client_refused_total{{reason="missing_key"}} {2 * len(ROUTES)}' in metrics
            assert f'contextledger_client_refused_total{{reason="unknown_key"}} {2 * len(ROUTES)}' in metrics
            assert "sk-" not in metrics
            await app.state.proxy.close()

    asyncio.run(run())


def test_a_streamed_answer_holds_its_slot_until_its_last_chunk_and_a_failure_frees_it(tmp_path: Path) -> None:
    """The count of requests under way ends with the answer's last byte, not with the handler."""
    from contextledger.serve._client_gate import ClientGate, Doorkeeper  # noqa: PLC0415
    from contextledger.serve._metrics import Metrics  # noqa: PLC0415
    from contextledger.serve._tenants import ADMITTED_TENANT  # noqa: PLC0415

    keys = ClientKeys(keys_file(tmp_path, "sk-client-1 alpha\nsk-client-2\n"))
    door = Doorkeeper(keys, ClientLimits(per_minute=None, at_once=1), Metrics())
    more, streaming_started = asyncio.Event(), asyncio.Event()
    tenants: list[object] = []

    async def streaming(scope: Scope, receive: Receive, send: Send) -> None:
        tenants.append(scope.get(ADMITTED_TENANT))
        if scope["path"] == "/fail":
            raise RuntimeError("the handler failed")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        streaming_started.set()
        await more.wait()
        await send({"type": "http.response.body", "body": b"last", "more_body": False})

    gate = ClientGate(streaming, door)
    digest = hashlib.sha256(b"sk-client-1").digest()

    async def call(path: str, key: str) -> list[Message]:
        sent: list[Message] = []

        async def receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Message) -> None:
            sent.append(message)

        headers = [(b"authorization", f"Bearer {key}".encode())]
        await gate({"type": "http", "path": path, "method": "POST", "headers": headers}, receive, send)
        return sent

    async def run() -> None:
        first = asyncio.ensure_future(call("/v1/chat/completions", "sk-client-1"))
        await streaming_started.wait()
        refused = await call("/v1/chat/completions", "sk-client-1")
        assert refused[0]["status"] == 429
        assert (b"retry-after", b"1") in refused[0]["headers"]
        other = asyncio.ensure_future(call("/v1/chat/completions", "sk-client-2"))  # another key is served
        await asyncio.sleep(0.01)
        assert door.limits.under_way(digest) == 1  # still streaming
        more.set()
        await first
        await other
        assert door.limits.under_way(digest) == 0
        with pytest.raises(RuntimeError):
            await call("/fail", "sk-client-1")
        assert door.limits.under_way(digest) == 0

    asyncio.run(run())
    assert tenants[0] == named_tenant("alpha")
    assert tenants[1] == bearer_tenant("sk-client-2")


def test_the_docs_keys_file_reads_as_it_says() -> None:
    guide = Path(__file__).resolve().parents[2] / "docs" / "guides" / "proxy.md"
    section = guide.read_text(encoding="utf-8")[guide.read_text(encoding="utf-8").index("## Client keys") :]
    start = section.index("```text\n") + len("```text\n")
    example = section[start : section.index("```", start)]
    entries = sorted(parse_client_keys(example, "proxy.md").values(), key=lambda entry: entry.line)
    assert [entry.tenant for entry in entries] == [
        named_tenant("support desk"),
        bearer_tenant("password"),  # the digest shown is of "password"
    ]
