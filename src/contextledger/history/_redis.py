"""History in Redis, for conversations shared by several processes or machines.

The ``redis`` package is imported when a provider is created, never when contextledger is
imported, so the core keeps working without the ``redis`` extra installed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from contextledger._redis import RedisConnection, RedisFailures, open_redis
from contextledger.exceptions import (
    ConfigurationError,
    HistoryCorruptError,
    HistoryUnavailableError,
    LeaseLostError,
    TurnOutcomeUnknownError,
)
from contextledger.history._encoding import (
    RecentEncodings,
    check_name,
    check_session_id,
    check_start,
    check_turn_id,
    decode_message,
    decode_turn,
    encode_messages,
    encode_rewritten_turn,
    encode_turn,
    encode_turns,
)
from contextledger.history._protocol import HistoryVersion, RedisTurnFacts, StoredTurn, TurnFacts, TurnWrite
from contextledger.messages import Message

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["RedisHistoryProvider"]

# Each turn script below runs after one of these two headers and then _FACTS.  The fenced one is
# for a writer that holds a lock on the session (see ``fence`` in RedisHistoryProvider): the
# lock's key comes after the script's other keys and the holder's token after its arguments, and
# the script writes nothing and answers -1 unless the lock still holds that token, so a writer
# whose lease ran out and passed to another holder can never store a turn beside the new holder's.
_UNFENCED = "local tail = 0\n"
_FENCED = "if redis.call('GET', KEYS[#KEYS]) ~= ARGV[#ARGV] then return -1 end\nlocal tail = 1\n"
_LOCK_LOST = -1

# The turn's facts (a RedisTurnFacts), written by the turn's own script.  Before the tail, the
# last argument counts the facts' arguments (0 for none) that precede it; ``last`` is the index of
# the turn's own last argument.  The facts' arguments: the owner hash's key index, the epoch and
# turn it must hold, the trail's key index and the length it must have, then each command as its
# argument count, name, key index and arguments.  facts_hold() reads first (a key of another type
# fails the script there, before anything is written) and says whether the owner is where the
# plan saw it; if not, the script answers -2 and writes nothing, and the writer plans again.
_FACTS = """
local nf = tonumber(ARGV[#ARGV - tail])
local last = #ARGV - tail - 1 - nf
local function facts_hold()
  if nf == 0 then return true end
  local at = last + 1
  local owner = KEYS[tonumber(ARGV[at])]
  if (redis.call('HGET', owner, 'epoch') or '') ~= ARGV[at + 1] then return false end
  if (redis.call('HGET', owner, 'turn') or '') ~= ARGV[at + 2] then return false end
  if redis.call('LLEN', KEYS[tonumber(ARGV[at + 3])]) ~= tonumber(ARGV[at + 4]) then return false end
  local reads = {HSET = 'HLEN', HDEL = 'HLEN', SADD = 'SCARD', SREM = 'SCARD', RPUSH = 'LLEN'}
  at = at + 5
  while at <= last + nf do
    local read = reads[ARGV[at + 1]]
    if read then redis.call(read, KEYS[tonumber(ARGV[at + 2])]) end
    at = at + 3 + tonumber(ARGV[at])
  end
  return true
end
local function facts_write()
  local at = last + 6
  while at <= last + nf do
    local count = tonumber(ARGV[at])
    redis.call(ARGV[at + 1], KEYS[tonumber(ARGV[at + 2])], unpack(ARGV, at + 3, at + 2 + count))
    at = at + 3 + count
  end
end
"""
_FACTS_MOVED = -2
_FACTS_ATTEMPTS = 100

# KEYS: the session's message list, its hash of turn records.  ARGV: turn id, record, bodies.
# The check and both writes run as one script, which Redis executes atomically.  The reads come
# first, so a key holding another type fails before anything is written.
_APPEND_TURN = """
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 0 end
if not facts_hold() then return -2 end
redis.call('LLEN', KEYS[1])
for first = 3, last, 500 do
  redis.call('RPUSH', KEYS[1], unpack(ARGV, first, math.min(first + 499, last)))
end
facts_write()
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
"""

# KEYS: list, turns hash, generation.  ARGV: turn id, record, expected generation, expected
# length, start, how many bodies the rewrite puts after ``start``, those bodies, the turn's bodies.
# The turn as _APPEND_TURN writes it, after a rewrite as _REWRITE writes it if the version is the
# one expected; reads first, as there.  Returns 0 (turn recorded already), {1} (turn appended,
# no rewrite) or {1, generation, length} (both).
_REWRITE_AND_APPEND_TURN = """
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 0 end
if not facts_hold() then return -2 end
local length = redis.call('LLEN', KEYS[1])
local generation = tonumber(redis.call('GET', KEYS[3]) or '0')
local rewrite = generation == tonumber(ARGV[3]) and length == tonumber(ARGV[4])
local count = tonumber(ARGV[6])
if rewrite then
  local start = tonumber(ARGV[5])
  if start == 0 then redis.call('DEL', KEYS[1]) else redis.call('LTRIM', KEYS[1], 0, start - 1) end
  for first = 7, 6 + count, 500 do
    redis.call('RPUSH', KEYS[1], unpack(ARGV, first, math.min(first + 499, 6 + count)))
  end
  generation = redis.call('INCR', KEYS[3])
end
for first = 7 + count, last, 500 do
  redis.call('RPUSH', KEYS[1], unpack(ARGV, first, math.min(first + 499, last)))
end
facts_write()
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if rewrite then return {1, generation, redis.call('LLEN', KEYS[1])} end
return {1}
"""

# KEYS: the session's hash of turn records.  ARGV: turn id, record, turn id, record, ...  Only
# turns still recorded are written, all in one atomic step.
_REWRITE_TURNS = """
for index = 1, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[1], ARGV[index]) == 1 then redis.call('HSET', KEYS[1], ARGV[index], ARGV[index + 1]) end
end
return 1
"""

# KEYS: generation, list.
_VERSION = "return {redis.call('GET', KEYS[1]) or '0', redis.call('LLEN', KEYS[2])}"

# KEYS: list, generation.  ARGV: expected generation, expected length, start, then the bodies.
_REWRITE = """
local generation = tonumber(redis.call('GET', KEYS[2]) or '0')
if generation ~= tonumber(ARGV[1]) or redis.call('LLEN', KEYS[1]) ~= tonumber(ARGV[2]) then return false end
local start = tonumber(ARGV[3])
if start == 0 then redis.call('DEL', KEYS[1]) else redis.call('LTRIM', KEYS[1], 0, start - 1) end
for first = 4, #ARGV, 500 do
  redis.call('RPUSH', KEYS[1], unpack(ARGV, first, math.min(first + 499, #ARGV)))
end
return {redis.call('INCR', KEYS[2]), redis.call('LLEN', KEYS[1])}
"""

# KEYS: list, turns hash, generation.  ARGV: turn id, then the turn's bodies.  Forgets the turn
# id and removes the last contiguous copy of the bodies from the list.
_UNDO_TURN = """
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('INCR', KEYS[3])
local size = #ARGV - 1
if size == 0 then return 0 end
local all = redis.call('LRANGE', KEYS[1], 0, -1)
for start = #all - size + 1, 1, -1 do
  local same = true
  for offset = 1, size do
    if all[start + offset - 1] ~= ARGV[offset + 1] then same = false break end
  end
  if same then
    redis.call('DEL', KEYS[1])
    for position = 1, #all do
      if position < start or position >= start + size then redis.call('RPUSH', KEYS[1], all[position]) end
    end
    return 1
  end
end
return 0
"""


def _facts_arguments(facts: RedisTurnFacts, before: int) -> tuple[tuple[str, ...], list[Any]]:
    """The keys and arguments of ``facts`` in a turn script whose own keys are the first ``before``
    (see _FACTS): each key given once, named by its index."""
    keys: dict[str, int] = {}

    def index(key: str) -> int:
        return keys.setdefault(key, before + len(keys) + 1)

    arguments: list[Any] = [index(facts.key), facts.epoch, facts.turn, index(facts.trail_key), facts.length]
    for name, key, *rest in facts.commands:
        arguments.extend((len(rest), name, index(key), *rest))
    return tuple(keys), arguments


class RedisHistoryProvider:
    """Each session's messages as one Redis list under ``{namespace}:history:{session_id}``,
    each id escaped (see :mod:`contextledger._keys`) so that no two sessions share a key.  Given a
    ``redis+cluster://`` URL or a cluster client, the session id is the keys' hash tag, so every
    key of a session (and the proxy's lock beside them) is in one slot and each script below runs
    on one node of a Redis Cluster.

    An append is a single ``RPUSH`` of the whole batch, which Redis applies atomically, so turns
    from several processes interleave whole and in order; ``replace`` runs ``DEL`` and ``RPUSH``
    in one ``MULTI``/``EXEC`` transaction, so no reader sees half of it.  A turn
    (:meth:`append_turn`) is recorded in the hash ``{namespace}:turns:{session_id}`` by the same
    Lua script that pushes its messages, after checking that its turn id is not there yet.

    The client this provider creates never retries a command: a retried ``RPUSH`` whose first
    attempt did reach the server would store the turn twice.  A dropped connection therefore
    surfaces as :class:`HistoryUnavailableError`; if it dropped after the command was sent, the
    batch was stored whole or not at all, and ``load`` tells which; for a turn,
    :class:`TurnOutcomeUnknownError` says so and a retry with the same turn id settles it.  A ``client`` passed in
    takes the place of ``url`` and the timeouts: it is used as configured (check its retry policy
    for the same reason) and is not closed by :meth:`close`.

    ``fence``, for writers that serialise a session's turns with a lock kept in the same Redis
    (as ``contextledger serve`` does): given a session id, the lock's key and the token this
    writer holds it with, or ``None`` when it holds none.  A turn is then stored only if the lock
    still holds that token, checked by the same script that writes it; otherwise nothing is
    written and :class:`~contextledger.exceptions.LeaseLostError` is raised.
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        namespace: str = "contextledger",
        source_id: str = "redis",
        client: Redis | None = None,
        *,
        socket_timeout: float | None = 5.0,
        socket_connect_timeout: float | None = 5.0,
        fence: Callable[[str], tuple[str, str] | None] | None = None,
        replicas: int | None = None,
        replica_timeout: float = 1.0,
    ) -> None:
        self.source_id: str = check_name(source_id, "source_id")
        self._fence = fence
        # A rewrite writes again messages this history has just stored: encoded once, not twice.
        self._encoded = RecentEncodings()
        self.namespace: str = check_name(namespace, "namespace")
        self._connection = open_redis(
            url if client is None else client,
            feature="RedisHistoryProvider",
            asynchronous=True,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_connect_timeout,
        )
        self._where = self._connection.where
        self._socket_timeout, self._socket_connect_timeout = socket_timeout, socket_connect_timeout
        self._failures = RedisFailures(
            self._connection,
            unavailable=HistoryUnavailableError,
            foreign=HistoryCorruptError,
            holds="a list of messages",
            remedy="choose another namespace",
        )
        self._client: Redis = self._connection.client
        if replicas is None:
            replicas = 1 if self._connection.cluster else 0
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise ConfigurationError(f"replicas must be a whole number of replicas, 0 or more; got {replicas!r}")
        if isinstance(replica_timeout, bool) or not isinstance(replica_timeout, (int, float)) or replica_timeout <= 0:
            raise ConfigurationError(f"replica_timeout must be a number of seconds above 0, got {replica_timeout!r}")
        self.replicas = replicas
        self._replica_timeout_ms = max(1, round(replica_timeout * 1000))
        self._nodes: dict[str, RedisConnection] = {}  # on a cluster: a client per master, for WAIT

    def __repr__(self) -> str:
        return f"RedisHistoryProvider({self._where!r}, namespace={self.namespace!r}, source_id={self.source_id!r})"

    def key(self, session_id: str) -> str:
        """The Redis key that holds a session's list (for inspection and operations tooling)."""
        return self._connection.key(self.namespace, "history", session=check_session_id(session_id))

    def generation_key(self, session_id: str) -> str:
        """The Redis key of the counter that moves on whenever a session's list is rewritten."""
        return self._connection.key(self.namespace, "generation", session=check_session_id(session_id))

    def turns_key(self, session_id: str) -> str:
        """The Redis key of the hash that records a session's turn ids (turn id -> the turn)."""
        return self._connection.key(self.namespace, "turns", session=check_session_id(session_id))

    async def load(self, session_id: str) -> list[Message]:
        key = self.key(session_id)
        with self._failures.mapped(f"load session {session_id!r}", key):
            bodies = await self._client.lrange(key, 0, -1)
        return [
            decode_message(body, session_id=session_id, position=position, store=f"{self._where}, key {key!r}")
            for position, body in enumerate(bodies)
        ]

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        checked, bodies, _ = encode_messages(session_id, messages, "append to", self._encoded)
        if not bodies:
            return
        key = self.key(checked)
        with self._failures.mapped(f"append to session {checked!r}", key):
            await self._client.rpush(key, *bodies)

    async def replace(self, session_id: str, messages: Sequence[Message]) -> None:
        checked, bodies, _ = encode_messages(session_id, messages, "replace", self._encoded)
        key = self.key(checked)
        with self._failures.mapped(f"replace session {checked!r}", key):
            async with self._client.pipeline(transaction=True) as transaction:
                transaction.delete(key)
                if bodies:
                    transaction.rpush(key, *bodies)
                transaction.incr(self.generation_key(checked))
                await transaction.execute()

    def beside(self, facts: TurnFacts, session_id: str) -> bool:
        """Whether ``facts`` live on this server (a ``RedisFactStore`` on the same URL; on a
        cluster, owned by the session, so that its keys share the session's slot): a turn's
        script then writes them too (:class:`FactsBesideTurns`)."""
        same_slot = not self._connection.cluster or facts.owner == session_id
        return same_slot and facts.lives_in("redis", self._connection.location)

    async def append_turn(
        self,
        session_id: str,
        turn_id: str,
        inputs: Sequence[Message],
        reply: Sequence[Message],
        *,
        facts: TurnFacts | None = None,
    ) -> bool:
        """See :meth:`HistoryProvider.append_turn`: one Lua script checks the turn id and writes,
        the facts too when given (see :meth:`beside`).

        A failure to connect means the script was never sent: ``HistoryUnavailableError``,
        nothing stored.  Any failure after that (no answer within ``socket_timeout``, a dropped
        connection) leaves the outcome to the server: ``TurnOutcomeUnknownError``.
        """
        checked, turn, bodies, _, record = encode_turn(session_id, turn_id, inputs, reply, self._encoded)
        key, turns = self.key(checked), self.turns_key(checked)
        stored = await self._turn_script(checked, turn, _APPEND_TURN, (key, turns), (turn, record, *bodies), facts)
        return bool(stored)

    async def rewrite_and_append_turn(
        self,
        session_id: str,
        start: int,
        messages: Sequence[Message],
        expected: HistoryVersion,
        turn_id: str,
        inputs: Sequence[Message],
        reply: Sequence[Message],
        *,
        facts: TurnFacts | None = None,
    ) -> TurnWrite:
        """See :meth:`TurnRewriter.rewrite_and_append_turn`: one Lua script, failing as ``append_turn``'s."""
        checked, turn, bodies, record, suffix, _ = encode_rewritten_turn(
            session_id, start, messages, expected, turn_id, inputs, reply, self._encoded
        )
        key = self.key(checked)
        keys = (key, self.turns_key(checked), self.generation_key(checked))
        counts = (expected.generation, expected.length, start, len(suffix))
        result = await self._turn_script(
            checked, turn, _REWRITE_AND_APPEND_TURN, keys, (turn, record, *counts, *suffix, *bodies), facts
        )
        if not result:
            return TurnWrite(False, None)
        return TurnWrite(True, HistoryVersion(int(result[1]), int(result[2])) if len(result) == 3 else None)

    async def _turn_script(
        self,
        session_id: str,
        turn: str,
        script: str,
        keys: tuple[str, ...],
        arguments: tuple[Any, ...],
        facts: TurnFacts | None = None,
    ) -> Any:
        """Run a script that records ``turn`` (and ``facts``), fenced by the writer's lock when
        there is one: a failure before it reached the server is a ``HistoryError`` (nothing
        stored), any later one a ``TurnOutcomeUnknownError``; a lock held by another is a
        ``LeaseLostError``.  Facts that moved since they were planned are planned again."""
        for _ in range(_FACTS_ATTEMPTS):
            if facts is None:
                result = await self._run_turn_script(session_id, turn, script, keys, (*arguments, 0))
            else:
                planned = await facts.plan_redis()
                extra_keys, extra = _facts_arguments(planned, len(keys))
                result = await self._run_turn_script(
                    session_id, turn, script, (*keys, *extra_keys), (*arguments, *extra, len(extra))
                )
            if result != _FACTS_MOVED:
                return result
        raise HistoryUnavailableError(
            f"turn {turn!r} of session {session_id!r} was not stored: its facts kept changing during "
            f"{_FACTS_ATTEMPTS} attempts (nothing was written); run the turn again"
        )

    async def _run_turn_script(
        self, session_id: str, turn: str, script: str, keys: tuple[str, ...], arguments: tuple[Any, ...]
    ) -> Any:
        held = None if self._fence is None else self._fence(session_id)
        if held is None:
            script, fence_key = _UNFENCED + _FACTS + script, None
        else:
            fence_key, token = held
            script, keys, arguments = _FENCED + _FACTS + script, (*keys, fence_key), (*arguments, token)

        def outcome_unknown(error: Exception) -> TurnOutcomeUnknownError:
            return TurnOutcomeUnknownError(
                f"turn {turn!r} of session {session_id!r}: {self._where} took the write but did not confirm it "
                f"({type(error).__name__}: {error}); it is stored once or not at all. Retry with the same "
                f"turn_id={turn!r}: a stored turn is returned as it is, a missing one is run again",
                turn_id=turn,
                session_id=session_id,
            )

        action = f"append turn {turn!r} to session {session_id!r} (nothing was stored)"
        with self._failures.mapped(action, keys[0], outcome_unknown=outcome_unknown):
            if self.replicas:
                result, acknowledged = await self._acknowledged(script, keys, arguments)
            else:
                result, acknowledged = await self._client.eval(script, len(keys), *keys, *arguments), 0
        if self.replicas and result and result not in (_LOCK_LOST, _FACTS_MOVED) and acknowledged < self.replicas:
            raise outcome_unknown(
                TimeoutError(
                    f"{acknowledged} of the {self.replicas} replicas asked for confirmed the write within "
                    f"{self._replica_timeout_ms} ms, so a failover could still lose it"
                )
            )
        if result == _LOCK_LOST:
            raise LeaseLostError(
                f"turn {turn!r} of session {session_id!r} was not stored: the lock {fence_key!r} no longer holds "
                "this writer's token (its lease ran out and another writer may have taken it); nothing was "
                "written, so run the turn again under the lock"
            )
        return result

    async def _acknowledged(self, script: str, keys: tuple[str, ...], arguments: tuple[Any, ...]) -> tuple[Any, int]:
        """Run a turn's script and ``WAIT`` for ``replicas`` in one pipeline, on one connection
        (``WAIT`` counts the writes of the connection it is sent on).  On a cluster the pipeline
        goes to the master of the keys' slot through a client of its own; a ``MOVED`` answer, which
        proves the script did not run there, refreshes the cluster's layout and runs it once more
        where the slot now is."""
        for attempt in range(2):
            client = await self._master_of(keys[0]) if self._connection.cluster else self._client
            try:
                async with client.pipeline(transaction=False) as pipeline:
                    pipeline.eval(script, len(keys), *keys, *arguments)
                    pipeline.execute_command("WAIT", self.replicas, self._replica_timeout_ms)
                    result, acknowledged = await pipeline.execute()
            except self._connection.errors.ResponseError as error:
                if not self._connection.cluster or attempt or not str(error).startswith(("MOVED", "ASK")):
                    raise
                await self._forget_masters()
                continue
            except (self._connection.errors.ConnectionError, self._connection.errors.TimeoutError, OSError):
                if self._connection.cluster:
                    await self._forget_masters()  # the master may have failed over: ask again next time
                raise
            except RuntimeError as error:  # a pooled connection whose transport closed: nothing was sent
                if "closed" not in str(error):
                    raise
                if self._connection.cluster:
                    await self._forget_masters()
                raise self._connection.errors.ConnectionError(f"Error connecting to the master: {error}") from error
            return result, int(acknowledged)
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _master_of(self, key: str) -> Any:
        """A client of the master serving ``key``'s slot, made once per master."""
        cluster: Any = self._client
        await cluster.initialize()
        node = cluster.get_node_from_key(key)
        known = self._nodes.get(node.name)
        if known is None:
            known = open_redis(
                f"redis://{node.host}:{node.port}/0",
                feature="RedisHistoryProvider",
                asynchronous=True,
                socket_timeout=self._socket_timeout,
                socket_connect_timeout=self._socket_connect_timeout,
            )
            self._nodes[node.name] = known
        return known.client

    async def _forget_masters(self) -> None:
        """Drop the per-master clients and have the cluster client read the layout again."""
        nodes, self._nodes = self._nodes, {}
        for connection in nodes.values():
            await connection.aclose()
        cluster: Any = self._client
        await cluster.nodes_manager.initialize()

    async def load_turn(self, session_id: str, turn_id: str) -> StoredTurn | None:
        turns, turn = self.turns_key(session_id), check_turn_id(turn_id)
        with self._failures.mapped(f"load turn {turn!r} of session {session_id!r}", turns):
            record = await self._client.hget(turns, turn)
        if record is None:
            return None
        return decode_turn(record, session_id=session_id, turn_id=turn, store=f"{self._where}, key {turns!r}")

    async def load_turns(self, session_id: str) -> list[StoredTurn]:
        turns = self.turns_key(session_id)
        with self._failures.mapped(f"load the turns of session {session_id!r}", turns):
            records = await self._client.hgetall(turns)
        store = f"{self._where}, key {turns!r}"
        result: list[StoredTurn] = []
        for turn, record in records.items():
            turn_id = turn.decode("utf-8", "replace") if isinstance(turn, bytes) else str(turn)
            result.append(decode_turn(record, session_id=session_id, turn_id=turn_id, store=store))
        return result

    async def rewrite_turns(self, session_id: str, turns: Sequence[StoredTurn]) -> None:
        """See :meth:`HistoryProvider.rewrite_turns`: one Lua script, so all or none are written."""
        checked, records, _ = encode_turns(session_id, turns)
        if not records:
            return
        key = self.turns_key(checked)
        arguments = [part for record in records for part in record]
        with self._failures.mapped(f"rewrite the turns of session {checked!r}", key):
            await self._client.eval(_REWRITE_TURNS, 1, key, *arguments)

    async def undo_turn(self, session_id: str, turn_id: str, messages: Sequence[Message]) -> None:
        turn = check_turn_id(turn_id)
        checked, bodies, _ = encode_messages(session_id, messages, "undo a turn in")
        key, turns = self.key(checked), self.turns_key(checked)
        with self._failures.mapped(f"undo turn {turn!r} of session {checked!r}", key):
            await self._client.eval(_UNDO_TURN, 3, key, turns, self.generation_key(checked), turn, *bodies)

    async def version(self, session_id: str) -> HistoryVersion:
        key = self.key(session_id)
        with self._failures.mapped(f"read the version of session {session_id!r}", key):
            # One script, one command: both read in the same atomic step.
            generation, length = await self._client.eval(_VERSION, 2, self.generation_key(session_id), key)
        return HistoryVersion(int(generation or 0), int(length))

    async def rewrite(
        self, session_id: str, start: int, messages: Sequence[Message], expected: HistoryVersion
    ) -> HistoryVersion | None:
        """See :meth:`HistoryProvider.rewrite`: one Lua script checks the version and writes.

        A failure after the script was sent leaves it done or not done; :meth:`version` tells.
        """
        checked, bodies, _ = encode_messages(session_id, messages, "rewrite", self._encoded)
        check_start(start, expected)
        key = self.key(checked)
        with self._failures.mapped(f"rewrite session {checked!r}", key):
            result = await self._client.eval(
                _REWRITE, 2, key, self.generation_key(checked), expected.generation, expected.length, start, *bodies
            )
        if not result:
            return None
        return HistoryVersion(int(result[0]), int(result[1]))

    async def clear(self, session_id: str) -> None:
        key = self.key(session_id)
        with self._failures.mapped(f"clear session {session_id!r}", key):
            async with self._client.pipeline(transaction=True) as transaction:
                transaction.delete(key, self.turns_key(session_id))
                # Moved on, never reset: a reader's old version must not match a new history.
                transaction.incr(self.generation_key(session_id))
                await transaction.execute()

    async def close(self) -> None:
        for connection in self._nodes.values():
            await connection.aclose()
        self._nodes = {}
        await self._connection.aclose()
