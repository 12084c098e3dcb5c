"""The counting relay the round-trip figures rest on: a Postgres client's waits are counted the
same however its bytes are cut into packets and however fast the server answers, checked against
psycopg talking to the real Postgres the suite starts."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.postgres_server import PostgresServer, postgres_extra
from tests.round_trip_relay import PostgresWaits, RoundTripRelay

if postgres_extra.installed:
    import psycopg


def _message(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack("!i", 4 + len(body)) + body


STARTUP = struct.pack("!ii", 8 + 9, 196608) + b"user\0me\0\0"
SSL_REQUEST = struct.pack("!ii", 8, 80877103)
# A query sent unprepared, one sent in a pipeline and fetched, then the pipeline's sync and flush.
STREAM = (
    SSL_REQUEST
    + STARTUP
    + _message(b"p", b"secret\0")
    + _message(b"P", b"\0SELECT 1\0\0\0")
    + _message(b"B", b"\0\0\0\0\0\0\0\0")
    + _message(b"D", b"P\0")
    + _message(b"E", b"\0\0\0\0\0")
    + _message(b"S")
    + _message(b"P", b"\0BEGIN\0\0\0")
    + _message(b"B", b"\0\0\0\0\0\0\0\0")
    + _message(b"E", b"\0\0\0\0\0")
    + _message(b"H")
    + _message(b"E", b"\0\0\0\0\0")
    + _message(b"S")
    + _message(b"H")
    + _message(b"X")
)
# The SSL request, the startup packet, the password, the sync, the mid-pipeline flush, and the
# final sync with the flush that follows it counted once.
STREAM_WAITS = 6


@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), unique=True, max_size=30))
def test_the_waits_do_not_depend_on_how_the_stream_is_cut(cuts: list[int]) -> None:
    waits = PostgresWaits()
    edges = [0, *sorted(cuts), len(STREAM)]
    assert sum(waits.feed(STREAM[start:end]) for start, end in itertools.pairwise(edges)) == STREAM_WAITS


def test_a_message_not_yet_whole_counts_when_its_last_byte_arrives() -> None:
    waits = PostgresWaits()
    assert waits.feed(SSL_REQUEST + STARTUP) == 2
    sync = _message(b"S")
    assert waits.feed(sync[:3]) == 0
    assert waits.feed(sync[3:]) == 1


@pytest.mark.postgres
@postgres_extra.skip
def test_psycopg_waits_are_counted_as_it_waits(postgres_server: PostgresServer) -> None:
    """Twenty times over (a fast server answers a pipeline's first statements before the last
    leave the client, which a count of who spoke last would see as extra round trips)."""
    with RoundTripRelay(postgres_server.port, protocol="postgres") as relay:
        url = postgres_server.url.replace(f":{postgres_server.port}/", f":{relay.port}/")
        with psycopg.connect(url, autocommit=True, prepare_threshold=None) as connection:
            seen = []
            for _ in range(20):
                relay.reset()
                connection.execute("SELECT 1").fetchone()
                single = relay.round_trips()
                relay.reset()
                with connection.pipeline():
                    connection.execute("BEGIN")
                    connection.execute("SELECT 1")
                    connection.execute("SELECT 2")
                    connection.execute("COMMIT")
                one_pipeline = relay.round_trips()
                relay.reset()
                with connection.pipeline():
                    connection.execute("BEGIN")
                    taken = connection.execute("SELECT 1")
                    assert taken.fetchone() == (1,)  # the client waits here for the first answers
                    connection.execute("SELECT 2")
                    connection.execute("COMMIT")
                fetched_midway = relay.round_trips()
                seen.append((single, one_pipeline, fetched_midway))
    assert set(seen) == {(1, 1, 2)}, seen
