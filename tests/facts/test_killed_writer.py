"""A process killed in the middle of writing loses no fact it had been told was stored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.facts.fact_worker import open_store

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("acknowledged", [1, 37, 150])
def test_a_writer_killed_mid_write_loses_no_acknowledged_fact(persistent_location: str, acknowledged: int) -> None:
    owner = f"killed-{uuid.uuid4().hex[:8]}"
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")])),
    }
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.facts.kill_worker", persistent_location, owner],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )
    latest: dict[str, tuple[int, str]] = {}
    try:
        assert child.stdout is not None
        for _ in range(acknowledged):
            line = child.stdout.readline()
            assert line.startswith("ack "), child.stderr.read() if child.stderr else line
            _, number, key, value = line.rstrip("\n").split(" ", 3)
            latest[key] = (int(number), value)
        # The child is writing its next turn right now; kill it without warning.
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        assert child.stdout is not None
        for line in child.stdout.read().splitlines():  # acknowledgements printed before the kill landed
            _, number, key, value = line.split(" ", 3)
            latest[key] = (int(number), value)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    with open_store(persistent_location, owner) as store:
        held = {fact.key: fact for fact in store.facts()}
        for key, (turn, value) in latest.items():
            fact = held.get(key)
            assert fact is not None, f"the acknowledged {key}={value} was lost"
            # The fact is the acknowledged one, or a later one whose write completed before the kill.
            assert fact.turn >= turn, (fact, turn, value)
            if fact.turn == turn:
                assert fact.value == value
        # The store still works after the kill.
        ticket = store.begin_turn("module=after the kill")
        assert ticket.number > max(turn for turn, _ in latest.values())
