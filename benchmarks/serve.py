"""What ``contextledger serve`` adds to a request, against calling the upstream directly.

    python benchmarks/serve.py            # 400 requests per measurement, 3 interleaved rounds
    python benchmarks/serve.py --quick    # a smoke run
    python benchmarks/serve.py --retain   # session turns with a retain strategy as well
    python benchmarks/serve.py --endpoint responses   # one endpoint (default: all three)
    python benchmarks/serve.py --store sqlite --store redis --store redis-cluster --store postgres
    python benchmarks/serve.py --against ../other-checkout   # another revision's proxy beside this one

Three processes on 127.0.0.1 (four with the bare forwarder, below): a fake upstream that
answers at once (a bare ASGI app under uvicorn, speaking chat completions, the Responses API and
Anthropic's Messages API), the proxy (``contextledger serve``, SQLite store), and this client
(``httpx``, asyncio).  They share the
machine's cores, as they would on a small host.  Every workload runs on each endpoint the proxy
serves: ``/v1/chat/completions``, ``/v1/responses`` and ``/v1/messages``, the same conversation
written in each API's shape.

Workloads:
- stateless: a 201-message history (50 turns, each with a 1-2 KB tool result) that the proxy
  compacts with a sliding window before forwarding, the same body every request;
- stateless, growing: what a stateless agent sends, each request its previous one and a turn
  more (4 messages), from 161 to 241 messages, then a new conversation; each client its own;
- session: one new user message per request to a session that already stores 1,000 turns
  (4,000 messages); the proxy loads the history, takes the request view (a sliding window),
  adds the facts block, forwards, and stores the turn.  Each client has its own session.
  With ``--retain`` the proxy also keeps each session's stored history to a window
  (``--retain-strategy sliding-window``, cut back to 1,000 turns when it passes 1,010): each turn
  is stored with the window's rewrite of the retained history, so the proxy's copy of a session
  must stay valid across a reduction for a turn not to read the history again.

For each workload and concurrency (1 and 32 clients), the same requests are sent to the upstream
directly (the baseline) and through the proxy, in alternating rounds; the report gives median
and p99 latency of each, the latency the proxy adds (proxy minus direct, per percentile), and the
request rates.  A stateless workload also goes through a bare forwarder (a fourth process, under
uvicorn, posting each body on with aiohttp and reading nothing): ``hop p50`` is what it adds, the
part of the proxy's figure that any proxy in Python pays on this machine for the extra hop.

A second table runs the client, the upstream and the proxy in this process (each
server under uvicorn on its own loopback socket) and reports CPU time per request, directly and
through the proxy: the proxy's own work, which a busy machine's load does not inflate the way it
inflates wall-clock latency.

With ``--store`` the run compares session stores instead: for each store named, a proxy on that
store (SQLite in a file; a ``redis-server``, a Redis Cluster of 3 masters and 3 replicas, and a
Postgres the run starts on 127.0.0.1, reached through relays that count round trips; the
cluster's nodes announce their relay's port) takes session turns at 1 and 32 clients, and the table
gives the latency it adds beside the store round trips a turn costs (every wait on the store's
answer, counted at the socket; SQLite is in the proxy's process and has none).

Goals (reported, not asserted): <= 2 ms median and <= 10 ms p99 added at 1 client; at 32
clients, at least half the rate the upstream reaches alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from pathlib import Path
from typing import Any

import httpx

from contextledger import from_openai
from contextledger.history import SQLiteHistoryProvider
from contextledger.messages import to_anthropic, to_responses
from contextledger.serve import ServeConfig, StrategySpec, create_app
from contextledger.serve._sessions import open_sessions, session_key
from contextledger.serve._tenants import tenant_of
from workloads import messages, turn

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-benchmark-tenant"
STORED_TURNS = 1_000
RETAIN = StrategySpec(
    "sliding-window", (f"trigger=turns_exceed({STORED_TURNS + 10})", f"target=turns_exceed({STORED_TURNS})")
)

_REPLIES = {
    "/v1/chat/completions": {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    },
    "/v1/responses": {
        "id": "resp_bench",
        "object": "response",
        "created_at": 1700000000,
        "model": "bench",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": "msg_bench",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "ok", "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
    },
    "/v1/messages": {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": "bench",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    },
}
_REPLY_BYTES = {path: json.dumps(reply).encode() for path, reply in _REPLIES.items()}
_SERIAL = [0]
ENDPOINTS = ("chat", "responses", "messages")
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}


async def fake_upstream(scope: MutableMapping[str, Any], receive: Callable[[], Awaitable[Any]], send: Any) -> None:
    """A bare ASGI upstream: reads the request, answers its API's same reply at once."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    reply = _REPLY_BYTES.get(scope["path"], _REPLY_BYTES["/v1/chat/completions"])
    # Each reply's ids its own, as a provider's are: a session keeps the replies, and a request
    # holding one item id twice is one the Responses API refuses.
    _SERIAL[0] += 1
    reply = reply.replace(b"_bench", b"_%d" % _SERIAL[0])
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": reply})


def bare_forwarder(upstream: str) -> Callable[..., Awaitable[None]]:
    """The least a proxy can do, as a baseline: read the request, post its body to the upstream
    with ``aiohttp`` (as the proxy does), answer with the upstream's reply.  No JSON is read and
    nothing is checked: what it adds is what the extra hop itself costs on this machine."""
    import aiohttp  # noqa: PLC0415  (in the serve extra, which the proxy needs anyway)

    client: list[aiohttp.ClientSession] = []

    async def app(scope: MutableMapping[str, Any], receive: Callable[[], Awaitable[Any]], send: Any) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        if not client:
            client.append(aiohttp.ClientSession())
        headers = {"content-type": "application/json"}
        async with client[0].post(upstream + scope["path"], data=b"".join(chunks), headers=headers) as answer:
            reply = await answer.read()
            status = answer.status
        start = {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
        await send(start)
        await send({"type": "http.response.body", "body": reply})

    return app


def constant(body: bytes) -> Callable[[int], bytes]:
    """The same body for every client."""
    return lambda _: body


def bodies_for(endpoint: str, count: int = 201) -> tuple[bytes, bytes]:
    """The ``count``-message history and a session turn's question, written in ``endpoint``'s API."""
    history = messages(count)
    if endpoint == "responses":
        items = to_responses(from_openai(history))
        question: dict[str, Any] = {"model": "bench", "input": "and item 7?"}
        return json.dumps({"model": "bench", "input": items}).encode(), json.dumps(question).encode()
    if endpoint == "messages":
        system, written = to_anthropic(from_openai(history))
        whole = {"model": "bench", "max_tokens": 64, "system": system, "messages": written}
        question = {"model": "bench", "max_tokens": 64, "messages": [{"role": "user", "content": "and item 7?"}]}
        return json.dumps(whole).encode(), json.dumps(question).encode()
    question = {"model": "bench", "messages": [{"role": "user", "content": "and item 7?"}]}
    return json.dumps({"model": "bench", "messages": history}).encode(), json.dumps(question).encode()


GROWTH = (161, 241)  # a growing conversation's first and last lengths: 201 messages on average
SYSTEM_MARK = b"You are a helpful shopping assistant."  # in every history's system prompt


def growing_for(endpoint: str) -> Callable[[int], bytes]:
    """Bodies of stateless conversations as agents send them: each request continues its client's
    previous one by a turn (4 messages), from 161 to 241 messages, then a new conversation starts
    (its system prompt names it, so nothing of it was seen before).  Per client, in order."""
    parts = [bodies_for(endpoint, count)[0].partition(SYSTEM_MARK) for count in range(GROWTH[0], GROWTH[1] + 1, 4)]
    sent: dict[int, int] = {}

    def body(client: int) -> bytes:
        step = sent[client] = sent.get(client, -1) + 1
        head, mark, tail = parts[step % len(parts)]
        return b"".join((head, mark, f" (client {client}, conversation {step // len(parts)})".encode(), tail))

    return body


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start(command: list[str], url: str, log: Path, source: Path | None = None) -> subprocess.Popen[bytes]:
    """``command`` started and answering ``url``; ``source``: a source tree (its ``src``) whose
    contextledger the command imports instead of this one."""
    environment = None if source is None else {**os.environ, "PYTHONPATH": str(source / "src")}
    with log.open("wb") as sink:
        process = subprocess.Popen(command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, env=environment)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{command[:4]} exited:\n{log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return process
        except urllib.error.HTTPError:
            return process  # it answers, even if not 200
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def measure(
    url: str, bodies: Callable[[int], bytes], headers: Callable[[int], dict[str, str]], clients: int, total: int
) -> tuple[list[float], float]:
    """Send ``total`` requests from ``clients`` concurrent clients; latencies (ms) and requests per second."""
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        counter = iter(range(total))

        async def worker(number: int) -> None:
            for _ in counter:
                started = time.perf_counter()
                response = await client.post(url, content=bodies(number), headers=headers(number))
                latencies.append((time.perf_counter() - started) * 1000)
                if response.status_code != 200:
                    raise SystemExit(f"{url} answered {response.status_code}: {response.text[:300]}")

        # Not measured: one request per client warms the connections and the proxy's per-session state.
        counter = iter(range(clients))
        await asyncio.gather(*(worker(number) for number in range(clients)))
        latencies.clear()
        counter = iter(range(total))
        began = time.perf_counter()
        await asyncio.gather(*(worker(number) for number in range(clients)))
        elapsed = time.perf_counter() - began
    return latencies, total / elapsed


def fill_sessions(store: Path, proxy: str, count: int) -> None:
    """Create ``count`` sessions through the proxy, then write 1,000 turns into each directly."""
    tenant = tenant_of({"authorization": f"Bearer {KEY}"}, trust_tenant_header=False)
    rng = random.Random(11)
    history_turns = [from_openai(turn(number, rng)) for number in range(1, STORED_TURNS + 1)]
    flat = [message for one in history_turns for message in one]

    async def fill() -> None:
        history = SQLiteHistoryProvider(store, source_id="serve")
        for number in range(count):
            await history.append(session_key(tenant, f"bench-{number}"), flat)
        await history.close()

    for number in range(count):
        request = urllib.request.Request(
            proxy + "/v1/contextledger/sessions",
            data=json.dumps({"id": f"bench-{number}"}).encode(),
            headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"},
        )
        urllib.request.urlopen(request, timeout=10).close()
    asyncio.run(fill())


async def serving(app: Any) -> tuple[Any, asyncio.Task[None], str]:
    """``app`` under uvicorn on 127.0.0.1 in this event loop: the server, its task and its URL."""
    import uvicorn  # noqa: PLC0415

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            raise SystemExit(f"the in-process server did not start: {task.exception()!r}")
        await asyncio.sleep(0.01)
    return server, task, f"http://127.0.0.1:{port}"


async def cpu_per_request(
    url: str, bodies: Callable[[int], bytes], headers: dict[str, str], total: int
) -> tuple[float, float]:
    """Median and p99 CPU milliseconds per request to ``url``, served in this process."""
    import aiohttp  # noqa: PLC0415

    async with aiohttp.ClientSession() as client:
        for _ in range(5):
            async with client.post(url, data=bodies(0), headers=headers) as response:
                await response.read()
        samples: list[float] = []
        for _ in range(total):
            body = bodies(0)
            started = time.process_time()
            async with client.post(url, data=body, headers=headers) as response:
                text = await response.read()
            samples.append((time.process_time() - started) * 1000)
            if response.status != 200:
                raise SystemExit(f"in-process {url} answered {response.status}: {text[:300]!r}")
    return statistics.median(samples), percentile(samples, 0.99)


async def in_process(workdir: Path, endpoints: list[str], total: int, rounds: int, retain: bool) -> None:
    """The proxy's own work per request in CPU time (threads included), what the machine's load
    cannot inflate: the client, the proxy and the upstream in one process, each server on its own
    loopback socket, so a request through the proxy costs what a request to the upstream costs
    (the client's side and the upstream's) plus all that the proxy adds (its server, its handling
    and its call upstream)."""
    upstream_server, upstream_task, upstream = await serving(fake_upstream)
    app = create_app(
        ServeConfig(
            upstream=upstream + "/v1",
            anthropic_upstream=upstream,
            store=f"sqlite:{workdir / 'in-process.db'}",
            strategy=StrategySpec("sliding-window", ("trigger=turns_exceed(20)",)),
            retain=RETAIN if retain else StrategySpec(),
        )
    )
    proxy = app.state.proxy
    proxy_server, proxy_task, proxied = await serving(app)
    plain = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    async with httpx.AsyncClient(base_url=proxied) as client:
        await client.post("/v1/contextledger/sessions", json={"id": "cpu"}, headers=plain)
    tenant = tenant_of(plain, trust_tenant_header=False)
    rng = random.Random(11)
    stored = [message for number in range(1, STORED_TURNS + 1) for message in from_openai(turn(number, rng))]
    await proxy.sessions.history.append(session_key(tenant, "cpu"), stored)
    session = {**plain, "x-contextledger-session": "cpu"}
    print("\nCPU time per request, client, proxy and upstream in one process (loopback sockets); ms")
    print(
        f"{'workload':34} {'endpoint':>9} {'upstream p50':>12} {'p99':>7} {'proxy p50':>10} {'p99':>7}"
        f" {'added p50':>10} {'p99':>7}"
    )
    for endpoint in endpoints:
        history, question = bodies_for(endpoint)
        path = PATHS[endpoint]
        measured: list[tuple[str, Callable[[], Callable[[int], bytes]], dict[str, str]]] = [
            ("stateless, 201 messages", functools.partial(constant, history), plain),
            ("stateless, growing 161-241", functools.partial(growing_for, endpoint), plain),
            ("session turn", functools.partial(constant, question), session),
        ]
        for name, bodies, headers in measured:
            bare: list[tuple[float, float]] = []
            through: list[tuple[float, float]] = []
            for _ in range(rounds):
                bare.append(await cpu_per_request(upstream + path, bodies(), plain, total))
                through.append(await cpu_per_request(proxied + path, bodies(), headers, total))
            b50, b99 = (statistics.median(run[i] for run in bare) for i in (0, 1))
            t50, t99 = (statistics.median(run[i] for run in through) for i in (0, 1))
            print(
                f"{name:34} {endpoint:>9} {b50:>12.2f} {b99:>7.2f} {t50:>10.2f} {t99:>7.2f} {t50 - b50:>10.2f}"
                f" {t99 - b99:>7.2f}"
            )
    for server in (proxy_server, upstream_server):
        server.should_exit = True
    await asyncio.gather(proxy_task, upstream_task)
    await proxy.close()


def run_loop(work: Coroutine[Any, Any, None]) -> None:
    """``work`` on the event loop the proxy runs on (uvloop where installed), as ``serve`` runs it."""
    try:
        import uvloop  # noqa: PLC0415
    except ImportError:
        asyncio.run(work)
    else:
        uvloop.run(work)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(timeout=10)


def started_redis(workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return process, port
        time.sleep(0.05)
    raise SystemExit("redis-server did not come up")


class Relays:
    """The round-trip relays of a cluster's nodes, counted together."""

    def __init__(self, relays: dict[int, Any]) -> None:
        self.relays = relays
        self.first = next(iter(relays.values())).port

    def reset(self) -> None:
        for relay in self.relays.values():
            relay.reset()

    def round_trips(self) -> int:
        return sum(relay.round_trips() for relay in self.relays.values())


@contextlib.contextmanager
def relayed_cluster() -> Any:
    """A Redis Cluster (3 masters, 3 replicas, as the tests start it) whose nodes announce a
    round-trip relay's port instead of their own, so a client that follows the cluster's layout
    talks to every node through a relay; the nodes' own traffic (the bus, replication, set up
    before the announcement changed) goes around the relays and is not counted."""
    import redis  # noqa: PLC0415
    from tests.redis_cluster import started_redis_cluster  # noqa: PLC0415  (the tests' cluster)
    from tests.round_trip_relay import RoundTripRelay  # noqa: PLC0415

    with started_redis_cluster() as cluster, contextlib.ExitStack() as stack:
        relays = {port: stack.enter_context(RoundTripRelay(port)) for port in cluster.ports}
        for port, relay in relays.items():
            with redis.Redis(host="127.0.0.1", port=port) as client:
                client.config_set("cluster-announce-bus-port", port + 10_000)
                client.config_set("cluster-announce-port", relay.port)
        wanted = {relay.port for relay in relays.values()}
        deadline = time.monotonic() + 30
        while True:  # until every node tells the relays' ports for every slot
            announced: set[int] = set()
            for port in cluster.ports:
                with redis.Redis(host="127.0.0.1", port=port) as client:
                    for _first, _last, *nodes in client.execute_command("CLUSTER", "SLOTS"):
                        announced.update(int(node[1]) for node in nodes)
            if announced <= wanted:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"the cluster still announces {sorted(announced - wanted)} after 30 s")
            time.sleep(0.2)
        yield relays


def fill_store(url: str, proxy: str, count: int) -> None:
    """Create ``count`` sessions through the proxy, then write 1,000 turns into each through the
    store the proxy uses (its own backend, opened as the proxy opens it)."""
    tenant = tenant_of({"authorization": f"Bearer {KEY}"}, trust_tenant_header=False)
    if url.startswith("sqlite:"):  # one process holds a SQLite file: write it as the default run does
        fill_sessions(Path(url.removeprefix("sqlite:")), proxy, count)
        return
    rng = random.Random(11)
    flat = [m for number in range(1, STORED_TURNS + 1) for m in from_openai(turn(number, rng))]
    for number in range(count):
        request = urllib.request.Request(
            proxy + "/v1/contextledger/sessions",
            data=json.dumps({"id": f"bench-{number}"}).encode(),
            headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"},
        )
        urllib.request.urlopen(request, timeout=10).close()

    async def fill() -> None:
        defaults = ServeConfig(upstream="http://unused.invalid/v1")
        sessions = open_sessions(
            url, namespace=defaults.namespace, lock_timeout=defaults.lock_timeout, lock_lease=defaults.lock_lease
        )
        for number in range(count):
            await sessions.history.append(session_key(tenant, f"bench-{number}"), flat)
        await sessions.close()

    asyncio.run(fill())


def compare_stores(stores: list[str], total: int, rounds: int) -> None:
    """Session turns through a proxy on each store: added latency and round trips per turn."""
    sys.path.insert(0, str(ROOT))
    from tests.round_trip_relay import RoundTripRelay  # noqa: PLC0415  (the tests' counting relay)

    workdir = Path(tempfile.mkdtemp(prefix="serve-stores-"))
    upstream_port = free_port()
    upstream = f"http://127.0.0.1:{upstream_port}"
    fake = start([sys.executable, __file__, "--fake-upstream", str(upstream_port)], upstream + "/", workdir / "up.log")
    plain = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    question = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "and item 7?"}]}).encode()
    print(f"session turns on each store, {STORED_TURNS:,} turns stored ({os.cpu_count()} cores); latency in ms")
    print(
        f"{'store':10} {'clients':>7} {'direct p50':>10} {'proxy p50':>10} {'p99':>7} {'added p50':>10}"
        f" {'proxy/s':>8} {'round trips/turn':>17}"
    )
    with contextlib.ExitStack() as stack:
        stack.callback(stop, fake)
        for store in stores:
            relay: Any = None
            if store == "sqlite":
                url = f"sqlite:{workdir / 'sessions.db'}"
            elif store == "redis":
                server, port = started_redis(workdir)
                stack.callback(stop, server)
                relay = stack.enter_context(RoundTripRelay(port))
                url = f"redis://127.0.0.1:{relay.port}/0"
            elif store == "redis-cluster":
                relay = Relays(stack.enter_context(relayed_cluster()))
                url = f"redis+cluster://127.0.0.1:{relay.first}/0"
            else:
                from tests.postgres_server import started_postgres  # noqa: PLC0415

                postgres, _ = stack.enter_context(started_postgres())
                relay = stack.enter_context(RoundTripRelay(postgres.port, protocol="postgres"))
                url = postgres.fresh_database().replace(f":{postgres.port}/", f":{relay.port}/")
            proxy_port = free_port()
            proxy = f"http://127.0.0.1:{proxy_port}"
            command = [sys.executable, "-m", "contextledger.cli", "serve", "--upstream", upstream + "/v1"]
            command += ["--port", str(proxy_port), "--store", url, "--strategy", "sliding-window"]
            command += ["--param", "trigger=turns_exceed(20)"]
            process = start(command, proxy + "/healthz", workdir / f"proxy-{store}.log")
            stack.callback(stop, process)
            fill_store(url, proxy, 32)
            for clients in (1, 32):
                direct_runs: list[list[float]] = []
                proxy_runs: list[list[float]] = []
                rates: list[float] = []
                trips: list[float] = []
                for _ in range(rounds):
                    latencies, _ = asyncio.run(
                        measure(upstream + "/v1/chat/completions", constant(question), lambda _: plain, clients, total)
                    )
                    direct_runs.append(latencies)
                    if relay is not None:
                        relay.reset()
                    latencies, rate = asyncio.run(
                        measure(
                            proxy + "/v1/chat/completions",
                            constant(question),
                            lambda number: {**plain, "x-contextledger-session": f"bench-{number}"},
                            clients,
                            total,
                        )
                    )
                    proxy_runs.append(latencies)
                    rates.append(rate)
                    if relay is not None:  # the warm-up requests (one per client) are counted too
                        trips.append(relay.round_trips() / (total + clients))
                d50 = statistics.median(statistics.median(run) for run in direct_runs)
                p50 = statistics.median(statistics.median(run) for run in proxy_runs)
                p99 = statistics.median(percentile(run, 0.99) for run in proxy_runs)
                counted = f"{statistics.median(trips):.1f}" if trips else "none"
                print(
                    f"{store:10} {clients:>7} {d50:>10.2f} {p50:>10.2f} {p99:>7.2f} {p50 - d50:>10.2f}"
                    f" {statistics.median(rates):>8.0f} {counted:>17}"
                )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="requests per measurement (default 400)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating direct/proxy rounds (default 3)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 60 requests, 1 round")
    parser.add_argument("--retain", action="store_true", help="the proxy keeps a window of each session (see above)")
    parser.add_argument(
        "--endpoint", choices=ENDPOINTS, action="append", help="an endpoint to measure (repeatable; default: all)"
    )
    parser.add_argument(
        "--store",
        choices=("sqlite", "redis", "redis-cluster", "postgres"),
        action="append",
        help="compare session turns on these stores instead (repeatable; see above)",
    )
    parser.add_argument(
        "--against",
        type=Path,
        metavar="DIR",
        help="also measure the proxy of another source tree (a checkout of another revision, e.g. made with "
        "`git worktree add DIR REV`), interleaved in the same rounds; its added latency is printed beside",
    )
    parser.add_argument("--fake-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--bare-forwarder", nargs=2, metavar=("PORT", "UPSTREAM"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fake_upstream or args.bare_forwarder:
        import uvicorn  # noqa: PLC0415  (only the servers' processes run a server)

        app, port = (
            (fake_upstream, args.fake_upstream)
            if args.fake_upstream
            else (bare_forwarder(args.bare_forwarder[1]), int(args.bare_forwarder[0]))
        )
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
        return 0
    total, rounds = (60, 1) if args.quick else (args.requests, args.rounds)
    if args.store:
        compare_stores(args.store, total, rounds)
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    upstream_port, proxy_port, bare_port = free_port(), free_port(), free_port()
    upstream = f"http://127.0.0.1:{upstream_port}"
    proxy = f"http://127.0.0.1:{proxy_port}"
    bare = f"http://127.0.0.1:{bare_port}"
    store = workdir / "sessions.db"
    retain_flags = ["--retain-strategy", RETAIN.name or ""]
    for param in RETAIN.params:
        retain_flags += ["--retain-param", param]

    def serve_command(port: int, sessions: Path) -> list[str]:
        command = [sys.executable, "-m", "contextledger.cli", "serve", "--upstream", upstream + "/v1"]
        command += ["--anthropic-upstream", upstream, "--port", str(port), "--store", f"sqlite:{sessions}"]
        command += ["--strategy", "sliding-window", "--param", "trigger=turns_exceed(20)"]
        return command + (retain_flags if args.retain else [])

    processes = [
        start(
            [sys.executable, __file__, "--fake-upstream", str(upstream_port)],
            upstream + "/",
            workdir / "upstream.log",
        ),
        start(serve_command(proxy_port, store), proxy + "/healthz", workdir / "proxy.log"),
        start(
            [sys.executable, __file__, "--bare-forwarder", str(bare_port), upstream],
            bare + "/",
            workdir / "bare.log",
        ),
    ]
    against = None
    if args.against is not None:
        against_port = free_port()
        against = f"http://127.0.0.1:{against_port}"
        against_store = workdir / "against.db"
        processes.append(
            start(
                serve_command(against_port, against_store), against + "/healthz", workdir / "against.log", args.against
            )
        )
    env_note = f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {total} requests x {rounds} rounds"
    if args.retain:
        env_note += ", retain strategy on"
    endpoints = args.endpoint or list(ENDPOINTS)
    try:
        fill_sessions(store, proxy, 32)
        if against is not None:
            fill_sessions(against_store, against, 32)
        plain = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
        headers_of = Callable[[int], dict[str, str]]
        workloads: list[tuple[str, str, Callable[[int], bytes], headers_of, headers_of]] = []
        for endpoint in endpoints:
            history, question = bodies_for(endpoint)
            workloads += [
                (endpoint, "stateless, 201 messages", constant(history), lambda _: plain, lambda _: plain),
                (endpoint, "stateless, growing 161-241", growing_for(endpoint), lambda _: plain, lambda _: plain),
                (
                    endpoint,
                    f"session turn, {STORED_TURNS:,} turns stored",
                    constant(question),
                    lambda _: plain,
                    lambda number: {**plain, "x-contextledger-session": f"bench-{number}"},
                ),
            ]
        print(f"contextledger serve vs the upstream alone ({env_note}); latency in ms")
        header = f"{'workload':34} {'endpoint':>9} {'clients':>7} {'direct p50':>10} {'p99':>7} {'proxy p50':>10}"
        header += f" {'p99':>7} {'added p50':>10} {'p99':>7} {'hop p50':>8} {'direct/s':>9} {'proxy/s':>8} {'ratio':>6}"
        if against is not None:
            header += f" {'against: added p50':>18} {'p99':>7} {'ratio':>6}"
        print(header)
        for endpoint, name, body, direct_headers, proxy_headers in workloads:
            path = PATHS[endpoint]
            stateless = name.startswith("stateless")
            for clients in (1, 32):
                direct: list[list[float]] = []
                proxied: list[list[float]] = []
                hop: list[list[float]] = []
                other: list[list[float]] = []
                direct_rates: list[float] = []
                proxy_rates: list[float] = []
                for _ in range(rounds):
                    latencies, rate = asyncio.run(measure(upstream + path, body, direct_headers, clients, total))
                    direct.append(latencies)
                    direct_rates.append(rate)
                    latencies, rate = asyncio.run(measure(proxy + path, body, proxy_headers, clients, total))
                    proxied.append(latencies)
                    proxy_rates.append(rate)
                    if against is not None:  # the other revision's proxy, in the same round
                        other.append(asyncio.run(measure(against + path, body, proxy_headers, clients, total))[0])
                    if stateless:  # the same body through a forwarder that does nothing else
                        hop.append(asyncio.run(measure(bare + path, body, direct_headers, clients, total))[0])
                d50 = statistics.median(statistics.median(run) for run in direct)
                d99 = statistics.median(percentile(run, 0.99) for run in direct)
                p50 = statistics.median(statistics.median(run) for run in proxied)
                p99 = statistics.median(percentile(run, 0.99) for run in proxied)
                h50 = f"{statistics.median(statistics.median(run) for run in hop) - d50:>8.2f}" if hop else f"{'':>8}"
                drate, prate = statistics.median(direct_rates), statistics.median(proxy_rates)
                line = (
                    f"{name:34} {endpoint:>9} {clients:>7} {d50:>10.2f} {d99:>7.2f} {p50:>10.2f} {p99:>7.2f}"
                    f" {p50 - d50:>10.2f} {p99 - d99:>7.2f} {h50} {drate:>9.0f} {prate:>8.0f} {prate / drate:>6.2f}"
                )
                if other:
                    o50 = statistics.median(statistics.median(run) for run in other)
                    o99 = statistics.median(percentile(run, 0.99) for run in other)
                    added = (p50 - d50) / (o50 - d50) if o50 > d50 else float("nan")
                    line += f" {o50 - d50:>18.2f} {o99 - d99:>7.2f} {added:>6.2f}"
                print(line)
        run_loop(in_process(workdir, endpoints, total, rounds, args.retain))
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
