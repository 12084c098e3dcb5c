"""History in Redis, for conversations shared by several processes or machines.

The ``redis`` package is imported when a provider is created, never when contextledger is
imported, so the core keeps working without the ``redis`` extra installed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

from contextledger._extras import require_extra
from contextledger._keys import storage_key
from contextledger.exceptions import (
    ConfigurationError,
    HistoryCorruptError,
    HistoryUnavailableError,
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
from contextledger.history._protocol import HistoryVersion, StoredTurn, TurnWrite
from contextledger.messages import Message

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["RedisHistoryProvider"]

# KEYS: the session's message list, its hash of turn records.  ARGV: turn id, record, bodies.
# The check and both writes run as one script, which Redis executes atomically.  The reads come
# first, so a key holding another type fails before anything is written.
_APPEND_TURN = """
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 0 end
redis.call('LLEN', KEYS[1])
for first = 3, #ARGV, 500 do
  redis.call('RPUSH', KEYS[1], unpack(ARGV, first, math.min(first + 499, #ARGV)))
end
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
for first = 7 + count, #ARGV, 500 do
  redis.call('RPUSH', KEYS[1], unpack(ARGV, first, math.min(first + 499, #ARGV)))
end
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


def _import_redis() -> tuple[ModuleType, ModuleType, Any]:
    """``redis.asyncio``, ``redis.exceptions`` and a retry policy that never retries."""
    require_extra("redis", extra="redis", feature="RedisHistoryProvider")
    import redis.asyncio as redis_asyncio  # noqa: PLC0415
    import redis.exceptions as redis_exceptions  # noqa: PLC0415
    from redis.asyncio.retry import Retry  # noqa: PLC0415
    from redis.backoff import NoBackoff  # noqa: PLC0415

    return redis_asyncio, redis_exceptions, Retry(NoBackoff(), 0)


def _redact(url: str) -> str:
    """The URL without its password, fit for an error message or a log."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.hostname or ""
        if parts.port is not None:
            host = f"{host}:{parts.port}"
        user = f"{parts.username}:***@" if parts.username else ":***@"
        return urlunsplit((parts.scheme, user + host, parts.path, parts.query, parts.fragment))
    except ValueError:
        return "<unparseable URL>"


class RedisHistoryProvider:
    """Each session's messages as one Redis list under ``{namespace}:history:{session_id}``,
    each id escaped (see :mod:`contextledger._keys`) so that no two sessions share a key.

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
    ) -> None:
        self.source_id: str = check_name(source_id, "source_id")
        # A rewrite writes again messages this history has just stored: encoded once, not twice.
        self._encoded = RecentEncodings()
        self.namespace: str = check_name(namespace, "namespace")
        redis_asyncio, self._errors, no_retry = _import_redis()
        if client is None:
            url = check_name(url, "url")
            try:
                client = redis_asyncio.Redis.from_url(
                    url,
                    socket_timeout=socket_timeout,
                    socket_connect_timeout=socket_connect_timeout,
                    retry=no_retry,
                )
            except ValueError as error:
                raise ConfigurationError(
                    f"url {_redact(url)!r} is not a Redis URL ({error}); use redis://host:port/db"
                ) from None
            self._owns_client = True
            self._where = f"Redis at {_redact(url)}"
        else:
            self._owns_client = False
            self._where = f"Redis client {client!r}"
        self._client: Redis = client

    def __repr__(self) -> str:
        return f"RedisHistoryProvider({self._where!r}, namespace={self.namespace!r}, source_id={self.source_id!r})"

    def key(self, session_id: str) -> str:
        """The Redis key that holds a session's list (for inspection and operations tooling)."""
        return storage_key(self.namespace, "history", check_session_id(session_id))

    def generation_key(self, session_id: str) -> str:
        """The Redis key of the counter that moves on whenever a session's list is rewritten."""
        return storage_key(self.namespace, "generation", check_session_id(session_id))

    def turns_key(self, session_id: str) -> str:
        """The Redis key of the hash that records a session's turn ids (turn id -> the turn)."""
        return storage_key(self.namespace, "turns", check_session_id(session_id))

    async def load(self, session_id: str) -> list[Message]:
        key = self.key(session_id)
        try:
            bodies = await self._client.lrange(key, 0, -1)
        except Exception as error:
            self._raise(error, f"load session {session_id!r}", key)
        return [
            decode_message(body, session_id=session_id, position=position, store=f"{self._where}, key {key!r}")
            for position, body in enumerate(bodies)
        ]

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        checked, bodies, _ = encode_messages(session_id, messages, "append to", self._encoded)
        if not bodies:
            return
        key = self.key(checked)
        try:
            await self._client.rpush(key, *bodies)
        except Exception as error:
            self._raise(error, f"append to session {checked!r}", key)

    async def replace(self, session_id: str, messages: Sequence[Message]) -> None:
        checked, bodies, _ = encode_messages(session_id, messages, "replace", self._encoded)
        key = self.key(checked)
        try:
            async with self._client.pipeline(transaction=True) as transaction:
                transaction.delete(key)
                if bodies:
                    transaction.rpush(key, *bodies)
                transaction.incr(self.generation_key(checked))
                await transaction.execute()
        except Exception as error:
            self._raise(error, f"replace session {checked!r}", key)

    async def append_turn(
        self, session_id: str, turn_id: str, inputs: Sequence[Message], reply: Sequence[Message]
    ) -> bool:
        """See :meth:`HistoryProvider.append_turn`: one Lua script checks the turn id and writes.

        A failure to connect means the script was never sent: ``HistoryUnavailableError``,
        nothing stored.  Any failure after that (no answer within ``socket_timeout``, a dropped
        connection) leaves the outcome to the server: ``TurnOutcomeUnknownError``.
        """
        checked, turn, bodies, _, record = encode_turn(session_id, turn_id, inputs, reply, self._encoded)
        key, turns = self.key(checked), self.turns_key(checked)
        stored = await self._turn_script(checked, turn, key, _APPEND_TURN, 2, key, turns, turn, record, *bodies)
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
    ) -> TurnWrite:
        """See :meth:`TurnRewriter.rewrite_and_append_turn`: one Lua script, failing as ``append_turn``'s."""
        checked, turn, bodies, record, suffix, _ = encode_rewritten_turn(
            session_id, start, messages, expected, turn_id, inputs, reply, self._encoded
        )
        key = self.key(checked)
        keys = (key, self.turns_key(checked), self.generation_key(checked))
        counts = (expected.generation, expected.length, start, len(suffix))
        result = await self._turn_script(
            checked, turn, key, _REWRITE_AND_APPEND_TURN, 3, *keys, turn, record, *counts, *suffix, *bodies
        )
        if not result:
            return TurnWrite(False, None)
        return TurnWrite(True, HistoryVersion(int(result[1]), int(result[2])) if len(result) == 3 else None)

    async def _turn_script(self, session_id: str, turn: str, key: str, script: str, *arguments: Any) -> Any:
        """Run a script that records ``turn``: a failure before it reached the server is a
        ``HistoryError`` (nothing stored), any later one a ``TurnOutcomeUnknownError``."""
        try:
            return await self._client.eval(script, *arguments)
        except Exception as error:
            if self._never_sent(error):
                self._raise(error, f"append turn {turn!r} to session {session_id!r} (nothing was stored)", key)
            raise TurnOutcomeUnknownError(
                f"turn {turn!r} of session {session_id!r}: {self._where} took the write but did not confirm it "
                f"({type(error).__name__}: {error}); it is stored once or not at all. Retry with the same "
                f"turn_id={turn!r}: a stored turn is returned as it is, a missing one is run again",
                turn_id=turn,
                session_id=session_id,
            ) from error

    async def load_turn(self, session_id: str, turn_id: str) -> StoredTurn | None:
        turns, turn = self.turns_key(session_id), check_turn_id(turn_id)
        try:
            record = await self._client.hget(turns, turn)
        except Exception as error:
            self._raise(error, f"load turn {turn!r} of session {session_id!r}", turns)
        if record is None:
            return None
        return decode_turn(record, session_id=session_id, turn_id=turn, store=f"{self._where}, key {turns!r}")

    async def load_turns(self, session_id: str) -> list[StoredTurn]:
        turns = self.turns_key(session_id)
        try:
            records = await self._client.hgetall(turns)
        except Exception as error:
            self._raise(error, f"load the turns of session {session_id!r}", turns)
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
        try:
            await self._client.eval(_REWRITE_TURNS, 1, key, *arguments)
        except Exception as error:
            self._raise(error, f"rewrite the turns of session {checked!r}", key)

    async def undo_turn(self, session_id: str, turn_id: str, messages: Sequence[Message]) -> None:
        turn = check_turn_id(turn_id)
        checked, bodies, _ = encode_messages(session_id, messages, "undo a turn in")
        key, turns = self.key(checked), self.turns_key(checked)
        try:
            await self._client.eval(_UNDO_TURN, 3, key, turns, self.generation_key(checked), turn, *bodies)
        except Exception as error:
            self._raise(error, f"undo turn {turn!r} of session {checked!r}", key)

    async def version(self, session_id: str) -> HistoryVersion:
        key = self.key(session_id)
        try:
            # One script, one command: both read in the same atomic step.
            generation, length = await self._client.eval(_VERSION, 2, self.generation_key(session_id), key)
        except Exception as error:
            self._raise(error, f"read the version of session {session_id!r}", key)
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
        try:
            result = await self._client.eval(
                _REWRITE, 2, key, self.generation_key(checked), expected.generation, expected.length, start, *bodies
            )
        except Exception as error:
            self._raise(error, f"rewrite session {checked!r}", key)
        if not result:
            return None
        return HistoryVersion(int(result[0]), int(result[1]))

    async def clear(self, session_id: str) -> None:
        key = self.key(session_id)
        try:
            async with self._client.pipeline(transaction=True) as transaction:
                transaction.delete(key, self.turns_key(session_id))
                # Moved on, never reset: a reader's old version must not match a new history.
                transaction.incr(self.generation_key(session_id))
                await transaction.execute()
        except Exception as error:
            self._raise(error, f"clear session {session_id!r}", key)

    def _never_sent(self, error: Exception) -> bool:
        """Whether ``error`` proves the command never reached the server (it failed to connect,
        or the server refused it before running it)."""
        if isinstance(error, self._errors.ResponseError):
            return True  # the script did not run (NOSCRIPT, WRONGTYPE on the first reads, OOM)
        unsent = (self._errors.ConnectionError, self._errors.TimeoutError, OSError)
        return isinstance(error, unsent) and "connecting to" in str(error)

    async def close(self) -> None:
        if not self._owns_client:
            return
        # The connections are gone even if closing one raised, which is all close() promises.
        with contextlib.suppress(OSError, self._errors.RedisError):
            await self._client.aclose()

    def _raise(self, error: Exception, action: str, key: str) -> NoReturn:
        """Turn a client error into the project's exceptions; anything unexpected propagates as is."""
        errors = self._errors
        if isinstance(error, errors.ResponseError) and "WRONGTYPE" in str(error):
            raise HistoryCorruptError(
                f"cannot {action}: {self._where}, key {key!r} holds something other than a list of messages; "
                "another program uses this key, so choose another namespace"
            ) from error
        if isinstance(error, (errors.ConnectionError, errors.TimeoutError, OSError, asyncio.TimeoutError)):
            raise HistoryUnavailableError(
                f"cannot {action}: {self._where} is unreachable ({type(error).__name__}: {error}); "
                "check that the server is running and the URL is right"
            ) from error
        if isinstance(error, errors.RedisError):
            raise HistoryUnavailableError(
                f"cannot {action}: {self._where} refused the command ({type(error).__name__}: {error})"
            ) from error
        raise error
