"""What a session turn costs in round trips to its store: counted by a relay between a real
``contextledger serve`` and a real Postgres or Redis, and held to the figures docs/guides/stores.md gives.

A turn with facts on is, on Postgres: take the session's lock, check the session exists, read the
history's version (the kept copy is current, so no message is read), read the facts for the block,
begin the facts turn (a pipeline: take the owner's row and read, then write and commit: two),
store the turn with the admitted fact (a pipeline again: the turn's statement and the facts' reads,
then their writes and the commit: two), release the lock: nine.  Without facts, five.  On Redis,
ten with facts (its fact-store operations take more round trips) and five without.
"""

from __future__ import annotations

import pytest
from tests.history.support import RedisServer
from tests.postgres_server import PostgresServer
from tests.round_trip_relay import RoundTripRelay
from tests.serve.conftest import StartProxy

KEY = "sk-round-trips-7a1e"
TURN_WITH_FACTS = 9
TURN_WITHOUT_FACTS = 5
REDIS_TURN_WITH_FACTS = 10
REDIS_TURN_WITHOUT_FACTS = 5
# A lease renewed every 20 s, not 3: its renewal is a round trip of its own, timed, not the turn's.
LONG_LEASE = ("--lock-lease", "60")
# Turns after which every statement of a turn is prepared on every connection it runs on (the facts'
# pool takes two connections in turn, so each of its statements runs there every other turn).
PREPARED_AFTER = 12


def _turn(proxy_call: object, text: str, session: str = "counted") -> None:
    assert callable(proxy_call)
    body = {"model": "fake", "messages": [{"role": "user", "content": text}]}
    status, answer = proxy_call("POST", "/v1/chat/completions", body, KEY, {"X-Contextledger-Session": session})
    assert status == 200, answer


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("facts", "most"), [(True, TURN_WITH_FACTS), (False, TURN_WITHOUT_FACTS)], ids=["facts", "plain"]
)
def test_a_session_turn_costs_a_few_round_trips_to_postgres(
    start_proxy: StartProxy, postgres_server: PostgresServer, facts: bool, most: int
) -> None:
    database = postgres_server.fresh_database()
    with RoundTripRelay(postgres_server.port, protocol="postgres") as relay:
        url = database.replace(f":{postgres_server.port}/", f":{relay.port}/")
        flags = () if facts else ("--no-facts",)
        with start_proxy("--store", url, *flags, *LONG_LEASE) as proxy:
            proxy.create_session("counted", KEY)
            # psycopg prepares a statement on a connection the fifth time it runs there, which costs
            # a round trip once: the first turns open the pools and cross that line.
            for number in range(PREPARED_AFTER):
                _turn(proxy.call, f"warming turn {number}")
            counts = []
            for number in range(5):
                relay.reset()
                _turn(proxy.call, f"turn {number}: customer=Acme {number}")
                counts.append(relay.round_trips())
            if facts:
                assert proxy.facts("counted", KEY) == {"customer": "Acme 4"}
    print(f"\nround trips to Postgres per session turn ({'facts on' if facts else 'no facts'}): {counts}")
    # Once the statements are prepared every turn costs the same, but a pool may still open a
    # connection in any turn (three more: the encryption request, the startup, the password) when
    # a loaded machine makes a turn wait for one: the figure is the median of five.
    assert sorted(counts)[2] <= most, counts
    assert max(counts) <= 2 * most, counts


@pytest.mark.redis
@pytest.mark.parametrize(
    ("facts", "most"), [(True, REDIS_TURN_WITH_FACTS), (False, REDIS_TURN_WITHOUT_FACTS)], ids=["facts", "plain"]
)
def test_a_session_turn_costs_a_few_round_trips_to_redis(
    start_proxy: StartProxy, redis_server: RedisServer, facts: bool, most: int
) -> None:
    with RoundTripRelay(redis_server.port) as relay:
        flags = () if facts else ("--no-facts",)
        with start_proxy("--store", f"redis://127.0.0.1:{relay.port}/13", *flags, *LONG_LEASE) as proxy:
            proxy.create_session(f"counted-{facts}", KEY)
            _turn(proxy.call, "first turn: opens the connections", f"counted-{facts}")
            counts = []
            for number in range(5):
                relay.reset()
                _turn(proxy.call, f"turn {number}: customer=Acme {number}", f"counted-{facts}")
                counts.append(relay.round_trips())
            if facts:
                assert proxy.facts(f"counted-{facts}", KEY) == {"customer": "Acme 4"}
    print(f"\nround trips to Redis per session turn ({'facts on' if facts else 'no facts'}): {counts}")
    assert sorted(counts)[2] <= most, counts
    assert max(counts) <= 2 * most, counts
