"""Facts in Redis, for agents in several processes (or machines) sharing one memory.

The same opt-in persistence as :class:`SQLiteFactStore` (owner, expiry, revocation, review
trail; see its module), for stores that several machines share.  Each owner has two keys, built
with :func:`~contextledger._keys.storage_key` so that no two owners or namespaces share one:
``{namespace}:facts:{owner}``, a hash of the epoch, the turn counter and the facts, and
``{namespace}:facts-trail:{owner}``, the review trail as a list of events whose values and
evidence are kept apart, in one hash per key (``{namespace}:facts-trail-values:{owner}:{key}``,
listed in the set ``{namespace}:facts-trail-keys:{owner}``), so that forgetting a key deletes
one hash and never has to read the whole trail.

Every operation reads both keys under ``WATCH``, runs the very same rules as the in-memory
store, and writes its changes in one ``MULTI``: if anything changed either key in between, the
transaction is dropped and the operation runs again on what is there now, so a write never
lands after a newer turn or a ``forget``.  Expiry follows the store's clock (each fact carries
its expiry time), not Redis's key expiry, so the trail outlives the facts it describes.  An
owner's hash created anew (the first time, or after someone deleted it) starts its epoch from
the server's clock in microseconds, so a ticket issued before the deletion never matches again.

The API is synchronous, like :class:`FactStore`: each operation is a few round trips to the
server.  From asyncio code, call it through ``asyncio.to_thread`` if those round trips must not
hold up the event loop.  The ``redis`` package is imported when a store is created.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from contextledger._keys import slot_key, storage_key
from contextledger._redis import RedisFailures, open_redis
from contextledger.exceptions import FactsError
from contextledger.facts._schema import DEFAULT_SCHEMA, FactSchema
from contextledger.facts._store import ALL_KEYS, Clock, LedgerStore, State, check_name, utc_clock
from contextledger.facts._trail import ReviewEvent, decode_event, decode_fact, encode_event, encode_fact, erase
from contextledger.history._protocol import RedisTurnFacts

__all__ = ["RedisFactStore"]

_T = TypeVar("_T")
_Self = TypeVar("_Self", bound="RedisFactStore")
_FACT_PREFIX = "fact:"
_MAX_ATTEMPTS = 1000


def _text(value: object) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


_TIME = "return redis.call('TIME')"


class RedisFactStore(LedgerStore):
    """The fact store contract with one owner's facts and trail in Redis (see the module docstring).

    ``url_or_client`` is a ``redis://`` URL, or a synchronous ``redis.Redis`` client that the
    store uses as configured and does not close.  The client the store creates from a URL never
    retries a command, since a retried write whose first attempt reached the server could take
    a turn number twice; for the same reason a write whose reply was lost is not run again but
    raises :class:`FactsError` saying so (read the facts to see whether it was applied).  A server
    that cannot be reached raises :class:`FactsError` too.
    """

    def __init__(
        self,
        url_or_client: Any,
        *,
        owner: str,
        schema: FactSchema = DEFAULT_SCHEMA,
        ttl_seconds: float | None = None,
        namespace: str = "contextledger",
        clock: Clock = utc_clock,
        socket_timeout: float | None = 5.0,
        socket_connect_timeout: float | None = 5.0,
    ) -> None:
        super().__init__(schema=schema, owner=owner, ttl_seconds=ttl_seconds, clock=clock)
        self.namespace = check_name(namespace, "namespace")
        self._connection = open_redis(
            url_or_client,
            feature="RedisFactStore",
            asynchronous=False,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_connect_timeout,
        )
        self._where = self._connection.where
        self._failures = RedisFailures(
            self._connection,
            unavailable=FactsError,
            foreign=FactsError,
            holds="a fact store",
            remedy="choose another namespace or owner",
        )
        self._client: Any = self._connection.client
        # On a Redis Cluster the owner is the keys' hash tag: a transaction over them runs on one node.
        self.key = self._connection.key(self.namespace, "facts", session=self.owner)
        """The Redis hash holding this owner's epoch, turn counter and facts."""
        self.trail_key = self._connection.key(self.namespace, "facts-trail", session=self.owner)
        """The Redis list holding this owner's review trail (events without their values)."""
        self.valued_keys = self._connection.key(self.namespace, "facts-trail-keys", session=self.owner)
        """The Redis set of the keys whose trail values are kept, each in a hash of its own."""

    @property
    def location(self) -> str:
        """The server or cluster the facts are on (a history there can write them with a turn)."""
        return self._connection.location

    def __repr__(self) -> str:
        return f"RedisFactStore({self._where!r}, owner={self.owner!r})"

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections of a client the store created (a client passed in is left open)."""
        self._connection.close()

    # The backend -------------------------------------------------------------------------------

    def _decode(self, raw: Mapping[Any, Any]) -> State:
        fields = {_text(name): _text(value) for name, value in raw.items()}
        try:
            state = State(int(fields.get("epoch", "0")), int(fields.get("turn", "0")), {})
            for name, body in fields.items():
                if name.startswith(_FACT_PREFIX):
                    state.facts[name[len(_FACT_PREFIX) :]] = decode_fact(body)
        except (ValueError, TypeError, KeyError) as error:
            raise FactsError(
                f"{self._where}, key {self.key!r} holds data that is not a fact store ({error}); another program "
                "uses this key, so choose another namespace or owner"
            ) from None
        return state

    def _values_key(self, key: str) -> str:
        if self._connection.cluster:
            return slot_key(self.namespace, "facts-trail-values", key, tag=self.owner)
        return storage_key(self.namespace, "facts-trail-values", self.owner, key)

    def _transact(self, step: Callable[[State], _T]) -> _T:
        for _ in range(_MAX_ATTEMPTS):
            try:
                with (
                    self._failures.mapped("write the facts", self.key),
                    self._client.pipeline(transaction=True) as transaction,
                ):
                    transaction.watch(self.key, self.trail_key)
                    raw = transaction.hgetall(self.key)
                    before = self._decode(raw) if raw else self._new_owner(transaction)
                    state = State(before.epoch, before.turn, dict(before.facts))
                    result = step(state)
                    erased = self._erased(state, transaction)
                    position = transaction.llen(self.trail_key) if state.events else 0
                    transaction.multi()
                    for command in self._commands(bool(raw), before, state, erased, position):
                        transaction.execute_command(*command)
                    with self._failures.mapped("write the facts", self.key, outcome_unknown=self._unconfirmed):
                        transaction.execute()
                    return result
            except self._connection.errors.WatchError:
                continue  # a watched key changed: run the step again on what is there now
        raise FactsError(
            f"could not write the facts: {self._where}, key {self.key!r} kept changing during {_MAX_ATTEMPTS} "
            "attempts; nothing was changed"
        )

    def plan(self, step: Callable[[State], _T]) -> tuple[RedisTurnFacts, _T]:
        """``step`` run on the owner's facts as they are now, and the commands that write its
        changes if they are still as they are now: what a history's turn script checks and runs
        in its own atomic step (the owner's keys share the session's hash tag on a cluster).
        The guard is the owner's epoch, turn and trail length, one of which every change moves."""
        with (
            self._failures.mapped("read the facts", self.key),
            self._client.pipeline(transaction=False) as pipeline,
        ):
            pipeline.hgetall(self.key)
            pipeline.llen(self.trail_key)
            raw, length = pipeline.execute()
            before = self._decode(raw) if raw else self._new_owner(self._client)
            state = State(before.epoch, before.turn, dict(before.facts))
            result = step(state)
            erased = self._erased(state, self._client)
        fields = {_text(name): _text(value) for name, value in raw.items() if _text(name) in ("epoch", "turn")}
        commands = self._commands(bool(raw), before, state, erased, int(length))
        guard = RedisTurnFacts(
            self.key, self.trail_key, fields.get("epoch", ""), fields.get("turn", ""), int(length), tuple(commands)
        )
        return guard, result

    def _new_owner(self, client: Any) -> State:
        """A new (or deleted) owner starts its epoch from the server's clock, not from 0, so no
        ticket issued before a deletion can match it again."""
        # A cluster's transaction takes only its keys' commands: the clock is read apart, by a
        # script on the key's own node.
        seconds, micros = self._client.eval(_TIME, 1, self.key) if self._connection.cluster else client.time()
        return State(int(seconds) * 1_000_000 + int(micros), 0, {})

    def _erased(self, state: State, client: Any) -> list[str]:
        """The keys whose trail values the step's forget takes out."""
        if state.erase == ALL_KEYS:
            return [_text(key) for key in client.smembers(self.valued_keys)]
        return [] if state.erase is None else [state.erase]

    def _commands(
        self, existed: bool, before: State, state: State, erased: list[str], position: int
    ) -> list[tuple[Any, ...]]:
        """The commands that write what ``step`` changed: the counters, the facts, the erased
        values and the new trail events (their values apart, one hash per key, so that forgetting
        a key deletes one hash instead of reading the whole trail)."""
        commands: list[tuple[Any, ...]] = []
        gone = [_FACT_PREFIX + key for key in before.facts if key not in state.facts]
        changed = [
            part
            for key, fact in state.facts.items()
            if before.facts.get(key) != fact
            for part in (_FACT_PREFIX + key, encode_fact(fact))
        ]
        # A step that only adds to the trail leaves a missing hash missing.
        if (state.epoch, state.turn) != (before.epoch, before.turn) or (changed and not existed):
            commands.append(("HSET", self.key, "epoch", state.epoch, "turn", state.turn))
        if gone:
            commands.append(("HDEL", self.key, *gone))
        if changed:
            commands.append(("HSET", self.key, *changed))
        for key in erased:
            commands.append(("DEL", self._values_key(key)))
            commands.append(("SREM", self.valued_keys, key))
        if state.events:
            bodies = []
            for offset, event in enumerate(state.events):
                detached = event.key is not None and (event.value is not None or event.evidence is not None)
                bodies.append(encode_event(erase(event) if detached else event, detached=detached))
                if detached and event.key is not None:
                    details = json.dumps({"value": event.value, "evidence": event.evidence}, ensure_ascii=False)
                    commands.append(("HSET", self._values_key(event.key), str(position + offset), details))
                    commands.append(("SADD", self.valued_keys, event.key))
            commands.append(("RPUSH", self.trail_key, *bodies))
        return commands

    def _unconfirmed(self, error: Exception) -> FactsError:
        """The error for a transaction the server may have run without its reply arriving:
        running it again could apply it twice, so the caller is told to look instead."""
        return FactsError(
            f"cannot write the facts: {self._where} took the write but did not confirm it "
            f"({type(error).__name__}: {error}); it was applied whole or not at all, read the facts to see which"
        )

    def _peek(self) -> State:
        with self._failures.mapped("read the facts", self.key):
            raw = self._client.hgetall(self.key)
        return self._decode(raw)

    def _trail(self) -> list[ReviewEvent]:
        with (
            self._failures.mapped("read the review trail", self.trail_key),
            self._client.pipeline(transaction=True) as transaction,
        ):
            transaction.lrange(self.trail_key, 0, -1)
            transaction.smembers(self.valued_keys)
            bodies, keys = transaction.execute()
            names = sorted(_text(key) for key in keys)
            for name in names:
                transaction.hgetall(self._values_key(name))
            values = dict(zip(names, transaction.execute())) if names else {}
        try:
            events = []
            for position, body in enumerate(bodies):
                event, detached = decode_event(_text(body), with_detached=True)
                if detached and event.key is not None:
                    stored = values.get(event.key, {}).get(str(position).encode()) or values.get(event.key, {}).get(
                        str(position)
                    )
                    if stored is not None:
                        details = json.loads(_text(stored))
                        event = replace(event, value=details["value"], evidence=details["evidence"], erased=False)
                events.append(event)
            return events
        except (ValueError, TypeError, KeyError) as error:
            raise FactsError(
                f"{self._where}, key {self.trail_key!r} holds data that is not a review trail ({error})"
            ) from None
