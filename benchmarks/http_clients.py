"""The proxy's call to its upstream: ``aiohttp`` (what it uses) against ``httpx``.

    python benchmarks/http_clients.py           # 2,000 calls per client, 3 interleaved rounds
    python benchmarks/http_clients.py --quick   # fewer

Every request through the proxy is a second HTTP exchange: the proxy posts the request to the
upstream and reads its answer.  This measures what that call costs the proxy, in CPU time and wall
time per call, for each client in the same process against the same upstream: a bare server on
127.0.0.1 (``asyncio`` streams, run in a child process so that its work is not counted) that
answers every request with a short chat completion.  The body posted is the 201-message history
``benchmarks/serve.py`` sends, after the proxy's sliding window: its last 80 messages.  The report
gives the median per call and the ratio against ``httpx``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import socket
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import messages

_REPLY = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    }
).encode()
_ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(_REPLY)).encode()
    + b"\r\n\r\n"
    + _REPLY
)


async def _serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Keep-alive HTTP/1.1 with content-length bodies: all the clients measured send."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            writer.write(_ANSWER)
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


def _upstream(port: int) -> None:
    async def main() -> None:
        server = await asyncio.start_server(_serve_connection, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _timed(call: Callable[[], Awaitable[bytes]], total: int) -> tuple[float, float]:
    """Median CPU and wall milliseconds per call, after a few unmeasured ones."""
    for _ in range(20):
        await call()
    cpu: list[float] = []
    wall: list[float] = []
    for _ in range(total):
        started, started_cpu = time.perf_counter(), time.process_time()
        reply = await call()
        cpu.append((time.process_time() - started_cpu) * 1000)
        wall.append((time.perf_counter() - started) * 1000)
        if reply != _REPLY:
            raise SystemExit(f"the upstream answered {reply[:200]!r}")
    return statistics.median(cpu), statistics.median(wall)


async def _measure(url: str, body: bytes, total: int, rounds: int) -> dict[str, list[tuple[float, float]]]:
    import aiohttp  # noqa: PLC0415
    import httpx  # noqa: PLC0415

    headers = {"content-type": "application/json", "authorization": "Bearer sk-bench"}
    results: dict[str, list[tuple[float, float]]] = {"httpx": [], "aiohttp": []}
    async with httpx.AsyncClient() as plain, aiohttp.ClientSession() as session:

        async def with_httpx() -> bytes:
            return (await plain.post(url, content=body, headers=headers)).content

        async def with_aiohttp() -> bytes:
            async with session.post(url, data=body, headers=headers) as response:
                return await response.read()

        for _ in range(rounds):
            results["httpx"].append(await _timed(with_httpx, total))
            results["aiohttp"].append(await _timed(with_aiohttp, total))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per client and round (default 2,000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--quick", action="store_true", help="200 calls, 1 round")
    args = parser.parse_args(argv)
    total, rounds = (200, 1) if args.quick else (args.calls, args.rounds)
    body = json.dumps({"model": "bench", "messages": messages(201)[-80:]}).encode()
    port = _free_port()
    upstream = multiprocessing.Process(target=_upstream, args=(port,), daemon=True)
    upstream.start()
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("the upstream did not start") from None
                time.sleep(0.05)
        results = asyncio.run(_measure(f"http://127.0.0.1:{port}/v1/chat/completions", body, total, rounds))
    finally:
        upstream.terminate()
        upstream.join()
    print(f"one POST of {len(body):,} bytes and its answer, {total} calls x {rounds} rounds; ms per call")
    print(f"{'client':10} {'CPU p50':>8} {'wall p50':>9} {'CPU vs httpx':>13}")
    base = statistics.median(cpu for cpu, _ in results["httpx"])
    for name, runs in results.items():
        cpu = statistics.median(run[0] for run in runs)
        wall = statistics.median(run[1] for run in runs)
        print(f"{name:10} {cpu:>8.3f} {wall:>9.3f} {cpu / base:>13.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
