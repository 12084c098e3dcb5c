"""How much ``contextledger serve`` grows when clients fill many sessions with large distinct turns.

    python benchmarks/kept_sessions.py                  # 1 GiB of turns over 1,000 sessions
    python benchmarks/kept_sessions.py --total-mib 128 --sessions 125   # a quicker run
    python benchmarks/kept_sessions.py --kept-session-bytes 8388608      # another bound

Two processes on 127.0.0.1 besides this client: an upstream that answers every chat completion
at once with a short reply, and the proxy (``contextledger serve`` with its default settings,
a SQLite store in a temporary folder).  The client creates the sessions, then sends their turns
round-robin (every session's first turn, then every second turn...), each turn one user message
of distinct text, so that no session is still kept when its next turn comes and the proxy's
memory meets the worst order for a cache of recent sessions.

The proxy's resident size (``VmRSS``) is read after a warm-up (a session's worth of turns on
sessions of their own) and after each quarter of the volume.  The report gives the growth over
the warm proxy, the growth in the first and in the last quarter (memory that keeps growing with
the volume would show in the last), and what the proxy says it keeps (``/metrics`` is not asked:
the figures are the process's own).  Goal (the README states it): at most 128 MiB of growth for
1 GiB over 1,000 sessions with the default settings; exit status 1 when a run's growth is over
``--bound-mib``.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-kept-sessions-benchmark"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def resident_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def serve_fake_upstream(port: int) -> None:
    """A chat-completions upstream answering at once, with a short reply (a real model's reply is
    short beside the large turns this benchmark sends)."""
    import uvicorn  # noqa: PLC0415

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        reply = {
            "id": "chatcmpl-kept",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "fake",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "noted"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        body = json.dumps(reply).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def _wait_until_up(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: the process exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer within 60 s")


@contextlib.contextmanager
def started(command: list[str], health: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as sink:
        process = subprocess.Popen(command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
    try:
        _wait_until_up(health, process)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Client:
    """One keep-alive connection to the proxy."""

    def __init__(self, port: int) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def post(self, path: str, body: dict[str, Any], session: str | None = None) -> int:
        headers = {"content-type": "application/json", "authorization": f"Bearer {KEY}"}
        if session is not None:
            headers["x-contextledger-session"] = session
        self.connection.request("POST", path, json.dumps(body).encode(), headers)
        reply = self.connection.getresponse()
        content = reply.read()
        if reply.status >= 300:
            raise RuntimeError(f"POST {path} answered {reply.status}: {content[:300]!r}")
        return reply.status


def measure(total_mib: int, sessions: int, turns: int, flags: list[str]) -> dict[str, Any]:
    turn_chars = total_mib * MIB // (sessions * turns)
    filler = "x" * turn_chars
    with tempfile.TemporaryDirectory(prefix="contextledger-kept-") as folder:
        upstream_port, proxy_port = free_port(), free_port()
        upstream = [sys.executable, __file__, "--fake-upstream", str(upstream_port)]
        proxy = [sys.executable, "-m", "contextledger.cli", "serve", "--port", str(proxy_port)]
        proxy += ["--upstream", f"http://127.0.0.1:{upstream_port}/v1", "--store", f"sqlite:{folder}/sessions.db"]
        proxy += flags
        with (
            started(upstream, f"http://127.0.0.1:{upstream_port}/", Path(folder) / "upstream.log"),
            started(proxy, f"http://127.0.0.1:{proxy_port}/healthz", Path(folder) / "proxy.log") as running,
        ):
            client = Client(proxy_port)

            def turn(session: str, number: int) -> None:
                text = f"{session} turn {number}: {filler}"
                body = {"model": "fake", "messages": [{"role": "user", "content": text}]}
                client.post("/v1/chat/completions", body, session)

            for number in range(turns):  # warm-up, on sessions of its own
                for warm in range(4):
                    if number == 0:
                        client.post("/v1/contextledger/sessions", {"id": f"warm-{warm}"})
                    turn(f"warm-{warm}", number)
            names = [f"s{number:05d}" for number in range(sessions)]
            for name in names:
                client.post("/v1/contextledger/sessions", {"id": name})
            before = resident_bytes(running.pid)
            started_at = time.monotonic()
            total = sessions * turns
            quarters: list[int] = []
            peak = before
            sent = 0
            for number in range(turns):
                for name in names:
                    turn(name, number)
                    sent += 1
                    if sent % 32 == 0:
                        peak = max(peak, resident_bytes(running.pid))
                    if (sent * 4 % total == 0 or sent == total) and len(quarters) < 4:
                        quarters.append(resident_bytes(running.pid))
            seconds = time.monotonic() - started_at
            after = resident_bytes(running.pid)
    marks = [before, *quarters]
    return {
        "total_mib": total_mib,
        "sessions": sessions,
        "turns_per_session": turns,
        "turn_bytes": turn_chars,
        "flags": flags,
        "resident_before_mib": round(before / MIB, 1),
        "resident_after_mib": round(after / MIB, 1),
        "growth_mib": round((max(peak, after) - before) / MIB, 1),
        "quarter_growth_mib": [round((marks[i + 1] - marks[i]) / MIB, 1) for i in range(len(marks) - 1)],
        "seconds": round(seconds, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-mib", type=int, default=1024, help="distinct turn content sent in all (default 1024)")
    parser.add_argument("--sessions", type=int, default=1000, help="sessions it is spread over (default 1000)")
    parser.add_argument("--turns", type=int, default=4, help="turns per session (default 4)")
    parser.add_argument("--kept-session-bytes", type=int, help="the proxy's bound (default: the proxy's own)")
    parser.add_argument("--bound-mib", type=float, default=128.0, help="the growth the run must stay within")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--fake-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fake_upstream is not None:
        serve_fake_upstream(args.fake_upstream)
        return 0
    flags = [] if args.kept_session_bytes is None else ["--kept-session-bytes", str(args.kept_session_bytes)]
    figures = measure(args.total_mib, args.sessions, args.turns, flags)
    if args.json:
        print(json.dumps(figures))
    else:
        print(
            f"{figures['total_mib']} MiB of session turns over {figures['sessions']} sessions "
            f"({figures['turns_per_session']} turns of {figures['turn_bytes'] / 1024:.0f} KiB each, round-robin), "
            f"{' '.join(flags) or 'default settings'}, {figures['seconds']:.0f} s:\n"
            f"  resident {figures['resident_before_mib']:.0f} MiB warm -> {figures['resident_after_mib']:.0f} MiB; "
            f"growth {figures['growth_mib']:.0f} MiB (bound {args.bound_mib:.0f} MiB)\n"
            f"  growth per quarter of the volume: "
            + ", ".join(f"{growth:.0f} MiB" for growth in figures["quarter_growth_mib"])
        )
    return 0 if figures["growth_mib"] <= args.bound_mib else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
