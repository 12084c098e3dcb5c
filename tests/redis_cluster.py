"""A throwaway Redis Cluster on 127.0.0.1 for the tests, started as the single redis-server is.

A cluster is several ``redis-server`` processes in cluster mode, each in a folder of its own
(every node rewrites its own ``nodes.conf``), joined by ``redis-cli --cluster create`` into
masters with replicas.  No node persists anything: a test kills processes, never the machine.
Each node also listens on its cluster-bus port, its client port plus 10000, so a port is only
taken when that one is free too (and below 65536).  ``--cluster-node-timeout 2000`` keeps a
failover short: a killed master is marked failed after about two seconds and its replica
promoted within a few more, which is what the failover tests wait for.

Without ``redis-server`` and ``redis-cli`` (Debian's ``redis-server`` package brings both) a
test skips on a developer's machine and fails under ``CI=true`` (``tests/ci_skips.py``), where a
skip would hide that the cluster tests never ran.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.history.support import free_port
from tests.optional_imports import try_import

with try_import("redis") as redis_extra:
    import redis

__all__ = ["ClusterNode", "RedisCluster", "parse_cluster_nodes", "redis_cluster_binaries", "started_redis_cluster"]

SLOTS = 16384
"""Every key hashes to one of these slots; the cluster is whole when live masters serve them all."""

_BUS_OFFSET = 10000  # Redis's default: the cluster bus listens on the client port + 10000
_START_ATTEMPTS = 3
_START_TIMEOUT = 10.0
_FORM_TIMEOUT = 30.0
_NODE_TIMEOUT_MS = 2000


@dataclass(frozen=True)
class ClusterNode:
    """One line of ``CLUSTER NODES``: who a node is, what it does, and which slots it serves."""

    node_id: str
    port: int
    flags: frozenset[str]
    master_id: str | None
    slots: tuple[tuple[int, int], ...]

    @property
    def is_master(self) -> bool:
        return "master" in self.flags

    @property
    def failed(self) -> bool:
        """Marked failed by the cluster (``fail``), or only suspected by the node asked (``fail?``)."""
        return "fail" in self.flags or "fail?" in self.flags

    def serves(self, slot: int) -> bool:
        return any(first <= slot <= last for first, last in self.slots)


@dataclass
class RedisCluster:
    """A Redis Cluster the tests started for themselves on 127.0.0.1, one process per port."""

    ports: list[int]
    processes: dict[int, subprocess.Popen[bytes]] = field(repr=False)
    folder: Path = field(repr=False)
    killed: set[int] = field(default_factory=set)

    @property
    def url(self) -> str:
        """The URL our code takes for cluster mode: any node seeds the client, the first is as good as any."""
        return f"redis+cluster://127.0.0.1:{self.ports[0]}/0"

    @property
    def seed_url(self) -> str:
        """The same seed node as plain ``redis://``, the form redis-py's ``RedisCluster.from_url`` takes."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    @property
    def alive(self) -> list[int]:
        """The ports whose process the tests have not killed."""
        return [port for port in self.ports if port not in self.killed]

    def nodes(self, port: int | None = None) -> list[ClusterNode]:
        """``CLUSTER NODES`` as the node on ``port`` (by default the first one alive) sees the cluster."""
        asked = self.alive[0] if port is None else port
        with _client(asked) as client:
            return parse_cluster_nodes(str(client.execute_command("CLUSTER", "NODES")))

    def masters(self) -> list[int]:
        """The ports of the masters the cluster counts on right now, failed ones left out."""
        return sorted(node.port for node in self.nodes() if node.is_master and not node.failed)

    def master_of(self, key: str) -> int:
        """The port of the master serving ``key``'s slot (a hash tag ``{...}`` picks the slot)."""
        with _client(self.alive[0]) as client:
            slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
        for node in self.nodes():
            if node.is_master and not node.failed and node.serves(slot):
                return node.port
        raise LookupError(f"no live master serves slot {slot} (key {key!r})")

    def kill(self, port: int) -> None:
        """SIGKILL the node on ``port``: no shutdown, no goodbye to the others, as a crash would go."""
        process = self.processes[port]
        process.kill()
        process.wait()
        self.killed.add(port)

    def wait_until_ok(self, timeout: float = _FORM_TIMEOUT) -> None:
        """Wait until every node alive says ``cluster_state:ok`` *and* sees every slot served by a
        live master.  The second half matters right after a kill: the others keep saying ``ok`` for
        the two seconds before they notice, and only a promoted replica makes the cluster whole."""
        deadline = time.monotonic() + timeout
        problem = _whole(self.alive, set(self.killed))
        while problem is not None and time.monotonic() < deadline:
            time.sleep(0.1)
            problem = _whole(self.alive, set(self.killed))
        if problem is not None:
            raise TimeoutError(f"the cluster was not ok after {timeout:.0f} s: {problem}")

    def wait_until_replicated(self, replicas: int, timeout: float = _FORM_TIMEOUT) -> None:
        """Wait until every live master has ``replicas`` replicas with their link up, so that a
        test's kill of a master right after has a replica in sync to promote."""
        deadline = time.monotonic() + timeout
        problem = _replicated(self.masters(), replicas)
        while problem is not None and time.monotonic() < deadline:
            time.sleep(0.1)
            problem = _replicated(self.masters(), replicas)
        if problem is not None:
            raise TimeoutError(f"the replicas were not attached after {timeout:.0f} s: {problem}")


def parse_cluster_nodes(text: str) -> list[ClusterNode]:
    """The lines of ``CLUSTER NODES``: ``id ip:port@bus[,host] flags master ping pong epoch link slot...``.

    Slots being imported or migrated (``[slot->-id]``) are left out: they still belong to the
    node that serves them."""
    nodes = []
    for line in text.splitlines():
        if not line.strip():
            continue
        node_id, address, flags, master, _ping, _pong, _epoch, _link, *slots = line.split()
        port = int(address.split("@")[0].rsplit(":", 1)[1])
        ranges = []
        for entry in slots:
            if entry.startswith("["):
                continue
            first, _, last = entry.partition("-")
            ranges.append((int(first), int(last or first)))
        nodes.append(
            ClusterNode(node_id, port, frozenset(flags.split(",")), None if master == "-" else master, tuple(ranges))
        )
    return nodes


def redis_cluster_binaries() -> tuple[str, str]:
    """``redis-server`` and ``redis-cli``; a skip without them (or without the ``redis`` extra that
    talks to them), which ``tests/ci_skips.py`` turns into a failure under ``CI=true``."""
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        missing = "redis-server" if server is None else "redis-cli"
        pytest.skip(
            f"{missing} is not installed; the Redis Cluster tests start their own cluster "
            "(apt-get install redis-server, which brings redis-cli too)"
        )
    if not redis_extra.installed:
        pytest.skip(redis_extra.reason)
    return server, cli


def _client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=2, decode_responses=True)


def _answers_ping(port: int) -> bool:
    try:
        with _client(port) as client:
            return bool(client.ping())
    except redis.RedisError:
        return False


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_node_port(taken: set[int]) -> int:
    """A free port whose cluster-bus port (+10000) is free too and still a port (below 65536):
    ephemeral ports run up to 60999, so about one in five has no bus port at all."""
    while True:
        port = free_port()
        bus = port + _BUS_OFFSET
        if port not in taken and bus not in taken and bus < 65536 and _bindable(bus):
            return port


def _cluster_info(port: int) -> dict[str, str]:
    """``CLUSTER INFO`` as text pairs, asked as two words so that redis-py hands back the text."""
    with _client(port) as client:
        text = str(client.execute_command("CLUSTER", "INFO"))
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {name: value.strip() for name, value in pairs}


def _whole(alive: list[int], killed: set[int]) -> str | None:
    """Why the cluster is not whole as each live node sees it, or None when it is."""
    for port in alive:
        try:
            state = _cluster_info(port).get("cluster_state")
            if state != "ok":
                return f"127.0.0.1:{port} says cluster_state:{state}"
            with _client(port) as client:
                nodes = parse_cluster_nodes(str(client.execute_command("CLUSTER", "NODES")))
        except redis.RedisError as error:
            return f"127.0.0.1:{port} did not answer: {error!r}"
        served = 0
        for node in nodes:
            if node.is_master and node.slots:
                if node.port in killed or node.failed:
                    return f"127.0.0.1:{port} still counts on master {node.port}, killed or failed"
                served += sum(last - first + 1 for first, last in node.slots)
        if served != SLOTS:
            return f"127.0.0.1:{port} sees {served} of {SLOTS} slots served"
    return None


def _replicated(masters: list[int], replicas: int) -> str | None:
    """Which master lacks a replica with its link up, or None when none does."""
    for port in masters:
        try:
            with _client(port) as client:
                replication: dict[str, Any] = client.info("replication")
        except redis.RedisError as error:
            return f"master 127.0.0.1:{port} did not answer: {error!r}"
        # redis-py parses each ``slaveN:ip=...,state=online,...`` line into a dict
        states = [
            value.get("state")
            for name, value in replication.items()
            if name.startswith("slave") and isinstance(value, dict)
        ]
        online = states.count("online")
        if online < replicas:
            return f"master 127.0.0.1:{port} has {online} of {replicas} replicas online (states {states})"
    return None


def _start_node(binary: str, folder: Path, taken: set[int]) -> tuple[int, subprocess.Popen[bytes]]:
    """One cluster-mode redis-server answering PING, retried on a new port if another process
    took its port (or bus port) between the probe and the bind."""
    log = folder / "redis.log"
    for _ in range(_START_ATTEMPTS):
        port = _free_node_port(taken)
        command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        command += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        command += ["--cluster-node-timeout", str(_NODE_TIMEOUT_MS), "--dir", str(folder), "--logfile", str(log)]
        command += ["--repl-diskless-sync-delay", "0"]  # a replica syncs at once, not after 5 s
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + _START_TIMEOUT
        while process.poll() is None and time.monotonic() < deadline and not _answers_ping(port):
            time.sleep(0.02)
        if process.poll() is None and _answers_ping(port):
            taken.update((port, port + _BUS_OFFSET))
            return port, process
        _kill(process)
        (folder / "nodes.conf").unlink(missing_ok=True)  # a node id meant for a port it never got
    details = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
    pytest.fail(f"a cluster redis-server did not start on 127.0.0.1 after {_START_ATTEMPTS} attempts:\n{details}")


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGCONT)  # harmless unless a test paused it, and then needed
        process.kill()
    process.wait()


@contextlib.contextmanager
def started_redis_cluster(masters: int = 3, replicas: int = 1) -> Iterator[RedisCluster]:
    """A Redis Cluster of ``masters`` masters with ``replicas`` replicas each, on 127.0.0.1, whole
    and replicated when it is yielded; every process killed and every folder removed after.

    ``redis-cli --cluster create`` refuses fewer than three masters: a failover needs a majority
    of masters to vote for the promoted replica."""
    server, cli = redis_cluster_binaries()
    folder = Path(tempfile.mkdtemp(prefix="contextledger-redis-cluster-"))
    processes: dict[int, subprocess.Popen[bytes]] = {}
    try:
        taken: set[int] = set()
        for index in range(masters * (1 + replicas)):
            node_folder = folder / f"node-{index}"
            node_folder.mkdir()
            port, process = _start_node(server, node_folder, taken)
            processes[port] = process
        ports = list(processes)
        create = [cli, "--cluster", "create", *(f"127.0.0.1:{port}" for port in ports)]
        create += ["--cluster-replicas", str(replicas), "--cluster-yes"]
        made = subprocess.run(create, capture_output=True, timeout=_FORM_TIMEOUT, check=False, stdin=subprocess.DEVNULL)
        if made.returncode != 0:
            output = (made.stdout + made.stderr).decode(errors="replace")[-3000:]
            pytest.fail(f"redis-cli --cluster create failed:\n{output}", pytrace=False)
        cluster = RedisCluster(ports, processes, folder)
        cluster.wait_until_ok()
        cluster.wait_until_replicated(replicas)
        yield cluster
    finally:
        for process in processes.values():
            _kill(process)
        shutil.rmtree(folder, ignore_errors=True)
