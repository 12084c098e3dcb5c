"""Facts in Redis, for agents in several processes (or machines) sharing one memory.

Persistence is opt-in and defines what SPEC §8 asks of it:

* **owner** — every store names its owner; the owner's epoch, turn counter and facts live in
  one Redis hash, ``{namespace}:facts:{owner}`` (each id escaped, so no two owners share a
  key), and no operation touches another owner's hash.
* **expiry** — with ``ttl_seconds`` the hash expires that long after the last write (every
  ``begin_turn``, ``apply`` and ``forget`` refreshes it); without it, it never expires.
* **revocation** — ``forget`` (one key or all) on the live hash, atomically with a new epoch.
  It does not reach copies made outside this store (server snapshots, replicas' backups).

The ticket check and the write happen atomically on the server: ``begin_turn`` and ``forget``
are Lua scripts, and ``apply`` reads, checks the ticket and writes inside ``WATCH``/``MULTI``,
so it is refused if anything changed the hash in between, and the admission rules are the very
same Python code the in-memory store runs.

When an expired (or deleted) hash is created again its epoch starts from the server's clock in
microseconds, not from zero, so a ticket issued before the expiry can never match the new
store's epoch (this assumes the server's clock does not go back, and fewer than one ``forget``
per microsecond).

The API is synchronous, like :class:`FactStore`: each operation is one or two round trips to
the server.  From asyncio code, call it through ``asyncio.to_thread`` if those round trips
must not hold up the event loop.  The ``redis`` package is imported when a store is created.
"""

from __future__ import annotations

import contextlib
import json
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import ModuleType
from typing import Any, NoReturn, TypeVar

from contextledger._extras import require_extra
from contextledger._keys import storage_key
from contextledger.exceptions import ConfigurationError, FactsError
from contextledger.facts._admission import check_batch, in_order, settle
from contextledger.facts._block import describe_facts, render_prompt_block
from contextledger.facts._records import ALLOWED_KEYS, Admission, Candidate, Fact, Forgotten, Ticket
from contextledger.facts._store import Clock, begin_text, check_forget_key, recorded_now, stale_ticket, utc_clock

__all__ = ["RedisFactStore"]

_Store = TypeVar("_Store", bound="RedisFactStore")
_FACT_PREFIX = "fact:"
_MAX_ATTEMPTS = 100

# Creates the hash if it is missing, seeding its epoch from the server clock (see the module
# docstring); then the caller's steps run; then the expiry is refreshed or removed.
_SEED = """
local key = KEYS[1]
if redis.call('HEXISTS', key, 'epoch') == 0 then
  local now = redis.call('TIME')
  redis.call('HSET', key, 'epoch', now[1] .. string.sub('00000' .. now[2], -6), 'turn', '0')
end
"""
_EXPIRY = """
local ttl = tonumber(ARGV[1])
if ttl > 0 then redis.call('PEXPIRE', key, ttl) else redis.call('PERSIST', key) end
"""
_BEGIN_TURN = (
    _SEED
    + """
local turn = redis.call('HINCRBY', key, 'turn', 1)
"""
    + _EXPIRY
    + """
return {redis.call('HGET', key, 'epoch'), turn}
"""
)
_FORGET = (
    _SEED
    + """
local removed = {}
if ARGV[2] == '' then
  local fields = redis.call('HGETALL', key)
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, 5) == 'fact:' then
      removed[#removed + 1] = fields[i + 1]
      redis.call('HDEL', key, fields[i])
    end
  end
else
  local body = redis.call('HGET', key, 'fact:' .. ARGV[2])
  if body then
    removed[1] = body
    redis.call('HDEL', key, 'fact:' .. ARGV[2])
  end
end
local epoch = redis.call('HINCRBY', key, 'epoch', 1)
"""
    + _EXPIRY
    + """
return {epoch, redis.call('HGET', key, 'turn'), removed}
"""
)


def _import_redis() -> tuple[ModuleType, ModuleType, Any]:
    """``redis``, ``redis.exceptions`` and a retry policy that never retries."""
    redis = require_extra("redis", extra="redis", feature="RedisFactStore")
    import redis.exceptions as redis_exceptions  # noqa: PLC0415
    from redis.backoff import NoBackoff  # noqa: PLC0415
    from redis.retry import Retry  # noqa: PLC0415

    return redis, redis_exceptions, Retry(NoBackoff(), 0)


def _check_name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 256:
        raise ConfigurationError(f"{what} must be a non-empty str of at most 256 characters, got {value!r}")
    if any(unicodedata.category(character) in {"Cc", "Cf", "Zl", "Zp"} for character in value):
        raise ConfigurationError(f"{what} {value!r} holds control characters; use printable text")
    return value


def _text(value: object) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _encode_fact(fact: Fact) -> str:
    record = {
        "key": fact.key,
        "value": fact.value,
        "evidence": fact.evidence,
        "turn": fact.turn,
        "recorded_at": fact.recorded_at.isoformat(),
    }
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


@dataclass
class _State:
    """One consistent reading of the hash (taken by a single ``HGETALL``)."""

    epoch: int | None = None
    turn: int = 0
    facts: dict[str, Fact] = field(default_factory=dict)


class RedisFactStore:
    """The :class:`FactStore` contract with the facts in Redis (see the module docstring).

    ``url_or_client`` is a ``redis://`` URL, or a synchronous ``redis.Redis`` client that the
    store uses as configured and does not close.  The client the store creates from a URL never
    retries a command, since a retried write whose first attempt reached the server could take
    a turn number twice.  A server that cannot be reached raises :class:`FactsError`.
    """

    def __init__(
        self,
        url_or_client: Any,
        *,
        owner: str,
        ttl_seconds: float | None = None,
        namespace: str = "contextledger",
        clock: Clock = utc_clock,
        socket_timeout: float | None = 5.0,
        socket_connect_timeout: float | None = 5.0,
    ) -> None:
        self.owner = _check_name(owner, "owner")
        self.namespace = _check_name(namespace, "namespace")
        if ttl_seconds is not None and (
            isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, (int, float)) or not ttl_seconds >= 0.001
        ):
            raise ConfigurationError(f"ttl_seconds must be None or at least 0.001 seconds, got {ttl_seconds!r}")
        self.ttl_seconds = ttl_seconds
        self._ttl_ms = 0 if ttl_seconds is None else max(1, round(ttl_seconds * 1000))
        self._clock = clock
        redis, self._errors, no_retry = _import_redis()
        if isinstance(url_or_client, str):
            try:
                client = redis.Redis.from_url(
                    url_or_client,
                    socket_timeout=socket_timeout,
                    socket_connect_timeout=socket_connect_timeout,
                    retry=no_retry,
                )
            except ValueError as error:
                raise ConfigurationError(
                    f"{url_or_client!r} is not a Redis URL ({error}); use redis://host:port/db"
                ) from None
            self._owns_client = True
            self._where = f"Redis at {client.connection_pool.connection_kwargs.get('host')}:" + str(
                client.connection_pool.connection_kwargs.get("port")
            )
        elif isinstance(url_or_client, redis.Redis):
            client = url_or_client
            self._owns_client = False
            self._where = f"Redis client {client!r}"
        else:
            raise ConfigurationError(
                f"RedisFactStore needs a redis:// URL or a synchronous redis.Redis client, got "
                f"{type(url_or_client).__name__}; the store's API is synchronous like FactStore's"
            )
        self._client: Any = client
        self.key = storage_key(self.namespace, "facts", self.owner)
        """The Redis hash holding this owner's epoch, turn counter and facts."""
        self._begin_script = client.register_script(_BEGIN_TURN)
        self._forget_script = client.register_script(_FORGET)

    def __repr__(self) -> str:
        return f"RedisFactStore({self._where!r}, owner={self.owner!r}, ttl_seconds={self.ttl_seconds!r})"

    def __enter__(self: _Store) -> _Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections of a client the store created (a client passed in is left open)."""
        if self._owns_client:
            with contextlib.suppress(OSError, self._errors.RedisError):
                self._client.close()

    # Reading -----------------------------------------------------------------------------------

    def _decode(self, raw: Mapping[Any, Any]) -> _State:
        fields = {_text(name): _text(value) for name, value in raw.items()}
        state = _State()
        try:
            if "epoch" in fields:
                state.epoch = int(fields["epoch"])
                state.turn = int(fields.get("turn", "0"))
            for name, body in fields.items():
                if not name.startswith(_FACT_PREFIX):
                    continue
                state.facts[name[len(_FACT_PREFIX) :]] = self._decode_fact(body)
        except (ValueError, TypeError, KeyError) as error:
            raise FactsError(
                f"{self._where}, key {self.key!r} holds data that is not a fact store ({error}); another program "
                "uses this key, so choose another namespace or owner"
            ) from None
        return state

    def _decode_fact(self, body: str) -> Fact:
        record = json.loads(body)
        recorded_at = datetime.fromisoformat(record["recorded_at"])
        if record["key"] not in ALLOWED_KEYS or recorded_at.tzinfo is None:
            raise ValueError(f"unexpected fact record {body[:80]!r}")
        return Fact(str(record["key"]), str(record["value"]), str(record["evidence"]), int(record["turn"]), recorded_at)

    def _read(self) -> _State:
        try:
            raw = self._client.hgetall(self.key)
        except Exception as error:
            self._raise(error, "read the facts")
        return self._decode(raw)

    @property
    def epoch(self) -> int:
        """Advanced by every ``forget``; 0 until the owner's hash first exists."""
        return self._read().epoch or 0

    @property
    def turn(self) -> int:
        """The number of the latest turn begun (0 before the first, and after an expiry)."""
        return self._read().turn

    def facts(self) -> list[Fact]:
        """Oldest turn first, then by key (the eviction order), read in one step."""
        return in_order(self._read().facts)

    def get(self, key: str) -> Fact | None:
        """The fact for ``key`` (any case), or ``None``."""
        if not isinstance(key, str):
            raise FactsError(f"a fact key is a str such as 'module', got {type(key).__name__}")
        name = key.strip().lower()
        if name not in ALLOWED_KEYS:
            return None
        try:
            body = self._client.hget(self.key, _FACT_PREFIX + name)
        except Exception as error:
            self._raise(error, f"read the fact {name!r}")
        if body is None:
            return None
        try:
            return self._decode_fact(_text(body))
        except (ValueError, TypeError, KeyError) as error:
            raise FactsError(
                f"{self._where}, key {self.key!r} holds a field that is not a fact ({error}); another program "
                "uses this key, so choose another namespace or owner"
            ) from None

    def to_prompt_block(self) -> str:
        """The facts as labelled, quoted, unverified user data for a model's instructions."""
        return render_prompt_block(self.facts())

    def describe(self) -> str:
        """The listing a person reads (``mem``): key, value, turn, recorded time, evidence."""
        return describe_facts(self.facts())

    # Writing -----------------------------------------------------------------------------------

    def begin_turn(self, user_text: str) -> Ticket:
        """Start a user turn (atomically numbered on the server); see :meth:`FactStore.begin_turn`."""
        text = begin_text(user_text)
        try:
            epoch, turn = self._begin_script(keys=[self.key], args=[self._ttl_ms])
        except Exception as error:
            self._raise(error, "begin a turn")
        return Ticket(int(_text(epoch)), int(turn), text)

    def apply(self, ticket: Ticket, candidates: Sequence[Candidate]) -> Admission:
        """Admit the whole batch or nothing; see :meth:`FactStore.apply`.

        The ticket is checked and the facts written in one ``WATCH``/``MULTI`` transaction: if
        anything changes the hash in between, the transaction is dropped and the ticket checked
        again, so a write never lands after a newer turn or a ``forget``.
        """
        batch = check_batch(ticket, candidates)
        recorded_at = recorded_now(self._clock)
        for _ in range(_MAX_ATTEMPTS):
            try:
                with self._client.pipeline(transaction=True) as transaction:
                    transaction.watch(self.key)
                    state = self._decode(transaction.hgetall(self.key))
                    if ticket.epoch != state.epoch or ticket.number != state.turn:
                        raise stale_ticket(ticket, state.epoch, state.turn)
                    if not batch:
                        return Admission()
                    facts, admission = settle(state.facts, batch, ticket.number, recorded_at)
                    transaction.multi()
                    gone = [fact.key for fact in admission.evicted if fact.key not in facts]
                    if gone:
                        transaction.hdel(self.key, *(_FACT_PREFIX + key for key in gone))
                    transaction.hset(
                        self.key, mapping={_FACT_PREFIX + fact.key: _encode_fact(fact) for fact in admission.admitted}
                    )
                    self._refresh_expiry(transaction)
                    transaction.execute()
                    return admission
            except self._errors.WatchError:
                continue
            except FactsError:
                raise
            except Exception as error:
                self._raise(error, f"apply the extraction for turn {ticket.number}")
        raise FactsError(
            f"could not apply the extraction for turn {ticket.number}: {self._where}, key {self.key!r} kept "
            f"changing during {_MAX_ATTEMPTS} attempts; nothing was admitted"
        )

    def forget(self, key: str | None = None) -> Forgotten:
        """Remove one key (any case) or every fact, and start a new epoch, in one server-side step."""
        name = None if key is None else check_forget_key(key)
        try:
            epoch, turn, bodies = self._forget_script(keys=[self.key], args=[self._ttl_ms, name or ""])
        except Exception as error:
            self._raise(error, "forget " + (repr(name) if name else "every fact"))
        try:
            removed = [self._decode_fact(_text(body)) for body in bodies]
        except (ValueError, TypeError, KeyError) as error:
            raise FactsError(
                f"{self._where}, key {self.key!r} held a field that is not a fact ({error}); it was removed with "
                "the others and the epoch advanced"
            ) from None
        return Forgotten(in_order({fact.key: fact for fact in removed}), epoch=int(epoch), turn=int(_text(turn)))

    def _refresh_expiry(self, transaction: Any) -> None:
        if self._ttl_ms:
            transaction.pexpire(self.key, self._ttl_ms)
        else:
            transaction.persist(self.key)

    def _raise(self, error: Exception, action: str) -> NoReturn:
        """Turn a client error into :class:`FactsError`; anything unexpected propagates as is."""
        errors = self._errors
        if isinstance(error, errors.ResponseError) and "WRONGTYPE" in str(error):
            raise FactsError(
                f"cannot {action}: {self._where}, key {self.key!r} holds something other than a fact store; "
                "another program uses this key, so choose another namespace or owner"
            ) from error
        if isinstance(error, (errors.ConnectionError, errors.TimeoutError, OSError)):
            raise FactsError(
                f"cannot {action}: {self._where} is unreachable ({type(error).__name__}: {error}); check that the "
                "server is running and the URL is right. A write whose connection dropped was applied whole or "
                "not at all; read the facts to see which"
            ) from error
        if isinstance(error, errors.RedisError):
            raise FactsError(f"cannot {action}: {self._where} refused it ({type(error).__name__}: {error})") from error
        raise error
