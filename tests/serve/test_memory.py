"""A client cannot fill the proxy's memory: 1 GiB of distinct request content (at the full size,
tests/sizes.py; 384 MiB at the small one) leaves its resident size within a stated bound (the
proxy guide, docs/guides/proxy.md, states it)."""

from __future__ import annotations

import http.client
import json
import os
import time
from pathlib import Path
from urllib.parse import urlsplit

from tests.serve.conftest import FakeUpstream, Proxy, StartProxy
from tests.sizes import sized

MIB = 1024 * 1024
# What the proxy may grow by, whatever it is sent: the message reader's 32 MiB of remembered
# messages, the buffers of the request in flight (a few copies of a 3 MiB body), and the slack
# the allocator keeps after freeing large strings (measured: 107 MiB with nothing remembered,
# 110-144 MiB with the reader's 32 MiB; the proxy before the bound grew by 1,316 MiB).
GROWTH_BOUND = 192 * MIB
# Once warm, the second half of the volume may add little: memory does not grow with volume.
SECOND_HALF_BOUND = 48 * MIB
MESSAGE_CHARS = MIB
MESSAGES_PER_REQUEST = 3
TOTAL = sized(full=1024, small=384) * MIB


def resident_bytes(pid: int) -> int:
    """VmRSS of process ``pid``, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def proxy_pid(proxy: Proxy) -> int:
    """The serving process: the child that listens on the proxy's port."""
    port = urlsplit(proxy.root).port
    assert port is not None
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":  # LISTEN
            inode = fields[9]
    assert inode is not None, f"nothing listens on port {port}"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]" for fd in os.listdir(f"/proc/{pid}/fd")):
                return int(pid)
        except OSError:
            continue
    raise AssertionError(f"no process holds the socket of port {port}")


def test_a_gibibyte_of_distinct_content_leaves_the_proxy_within_its_memory_bound(
    start_proxy: StartProxy, fake_upstream: FakeUpstream
) -> None:
    window = ("--strategy", "sliding-window", "--param", "trigger=turns_exceed(20)")
    with start_proxy(*window, "--max-body-bytes", str(8 * MIB)) as proxy:
        pid = proxy_pid(proxy)
        connection = http.client.HTTPConnection("127.0.0.1", urlsplit(proxy.root).port, timeout=60)
        filler = "x" * (MESSAGE_CHARS - 16)

        def send(number: int) -> None:
            messages = [
                {"role": "user", "content": f"{number * MESSAGES_PER_REQUEST + part:016d}{filler}"}
                for part in range(MESSAGES_PER_REQUEST)
            ]
            body = json.dumps({"model": "fake-bulk", "messages": messages}).encode()
            connection.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
            reply = connection.getresponse()
            assert reply.status == 200, reply.read()[:300]
            reply.read()

        for number in range(3):  # warm up: imports, pools, the first buffers
            send(number)
        before = resident_bytes(pid)
        requests = TOTAL // (MESSAGE_CHARS * MESSAGES_PER_REQUEST) + 1
        started = time.monotonic()
        peak = half_peak = before
        for number in range(3, 3 + requests):
            send(number)
            if number % 16 == 0:
                peak = max(peak, resident_bytes(pid))
            if number == 3 + requests // 2:
                half_peak = peak
        after = resident_bytes(pid)
        connection.close()
        sent = [r["bytes"] for r in fake_upstream.received() if "bytes" in r]
        fake_upstream.clear()
    assert sum(sent) >= TOTAL  # every request reached the upstream
    growth = max(peak, after) - before
    assert growth <= GROWTH_BOUND, (
        f"after {requests} requests ({sum(sent) / MIB:.0f} MiB, {time.monotonic() - started:.0f}s) the proxy grew "
        f"from {before / MIB:.0f} MiB by {growth / MIB:.0f} MiB"
    )
    assert max(peak, after) - half_peak <= SECOND_HALF_BOUND, (before, half_peak, peak, after)
