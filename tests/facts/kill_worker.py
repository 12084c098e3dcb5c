"""A writer for the kill test: declares a new value every turn and prints ``ack TURN KEY VALUE`` after
each ``apply`` returns, until it is killed (``python -m tests.facts.kill_worker URL|PATH OWNER``)."""

from __future__ import annotations

import sys

from contextledger.facts import parse_assertions
from tests.facts.fact_worker import open_store

KEYS = ["product", "module", "priority", "database", "customer"]  # five: nothing is ever evicted


def main() -> None:
    location, owner = sys.argv[1], sys.argv[2]
    with open_store(location, owner) as store:
        number = 0
        while True:
            key = KEYS[number % len(KEYS)]
            text = f"Update: {key}=value {number}"
            ticket = store.begin_turn(text)
            store.apply(ticket, parse_assertions(text))
            print(f"ack {ticket.number} {key} value {number}", flush=True)
            number += 1


if __name__ == "__main__":
    main()
