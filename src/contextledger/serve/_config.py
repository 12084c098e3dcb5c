"""What a proxy is configured with, from flags, a config file, or Python.

Strategies are written as for ``contextledger compact`` (a name, ``KEY=VALUE`` parameters, or a
token budget) and built by the same code, :func:`~contextledger.compaction.strategy_from_spec`,
so a strategy that works on a transcript file works in the proxy.  Everything is checked when the
configuration is made, so a mistake stops the command before it listens, never on the first
request.
"""

from __future__ import annotations

import ipaddress
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any
from urllib.parse import urlsplit

from contextledger._redis import CLUSTER_SCHEMES, replicas_available
from contextledger.compaction import CompactionStrategy, strategy_from_spec
from contextledger.cost import price_profile
from contextledger.exceptions import ConfigurationError
from contextledger.facts import DEFAULT_SCHEMA, FactSchema, FactsPlacement
from contextledger.serve._openai_breakpoints import DEFAULT_BREAKPOINT_MODELS

__all__ = [
    "CLIENT_KEYS_VARIABLE",
    "DEFAULT_STRATEGY",
    "METRICS_TOKEN_VARIABLE",
    "UPSTREAM_KEY_VARIABLE",
    "ServeConfig",
    "StrategySpec",
    "environment_settings",
    "load_config_file",
    "with_store_replicas",
]

UPSTREAM_KEY_VARIABLE = "CONTEXTLEDGER_UPSTREAM_KEY"
"""The environment variable holding a configured upstream key: never a flag, which ``ps`` would show."""
METRICS_TOKEN_VARIABLE = "CONTEXTLEDGER_METRICS_TOKEN"
"""The environment variable holding the bearer token ``/metrics`` asks for, when set (never a flag either)."""
CLIENT_KEYS_VARIABLE = "CONTEXTLEDGER_CLIENT_KEYS"
"""The environment variable naming the client keys file, as ``--client-keys`` does."""


@dataclass(frozen=True, slots=True)
class StrategySpec:
    """A strategy as ``contextledger compact`` takes it: ``name`` with ``params``, and/or ``budget``."""

    name: str | None = None
    params: tuple[str, ...] = ()
    budget: int | None = None
    tokenizer: str = "estimate"

    @property
    def empty(self) -> bool:
        return self.name is None and self.budget is None and not self.params

    @property
    def off(self) -> bool:
        """``none``: asked not to compact (the name ``--strategy none`` gives)."""
        return self.name == "none"

    def build(self) -> CompactionStrategy | None:
        """The strategy, or ``None`` when nothing was configured or ``none`` was (messages are then
        sent as they are)."""
        if self.empty or self.off:
            if self.off and (self.params or self.budget is not None):
                raise ConfigurationError("strategy 'none' takes no parameters and no budget; drop them or name one")
            return None
        return strategy_from_spec(self.name, self.params, budget=self.budget, tokenizer=self.tokenizer)

    def describe(self) -> str:
        """One line a person reads: what the strategy does, or that nothing is compacted."""
        if self.empty or self.off:
            return "nothing"
        parts = [self.name or "collapse, then drop the oldest"]
        parts += list(self.params)
        if self.budget is not None:
            parts.append(f"within {self.budget} tokens")
        return " ".join(parts) + f" (tokens counted by {self.tokenizer})"


DEFAULT_STRATEGY = StrategySpec("truncation", ("max_n=32000", "compact_to=16000"))
"""What the proxy compacts with unless told otherwise (``--strategy none`` turns it off): at
32,000 tokens the oldest groups go, 16,000 tokens at a time, so a request holds at most 32,000
and the start of what is sent stays the same between cuts (the provider's prompt cache keeps
paying; a cut that moved on every request would cost more than sending everything, design.md#prefix-stability)."""


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """Everything ``contextledger serve`` needs; see ``contextledger serve --help`` for each field.

    ``strategy`` compacts what is sent (the whole request in stateless mode, the request view in
    session mode); ``retain`` compacts what a session keeps after each turn.  ``store`` is
    ``sqlite:PATH``, a ``redis://`` or a ``postgresql://`` URL.  ``upstream_key``, when set, replaces the client's
    ``Authorization`` towards the upstream (the client's key still names its tenant).
    ``read_timeout`` bounds the time a client takes to send a request's headers, and again its
    body; ``max_connections`` the connections open at once (see ``serve._connections``).
    ``facts_schema`` is a JSON file of the facts' keys and bounds (as ``contextledger chat
    --schema`` takes it); the seed's when unset.  ``lock_lease`` is the lease of a session's Redis
    lock, renewed every third of it while the request holds it: how long a proxy that died holding
    a session keeps it from the others.  ``redis_replicas``: on Redis, a turn is confirmed to the
    client only once this many replicas have it (``WAIT``), so a master's failover loses no turn a
    client saw succeed; ``None`` asks for 1 on a Redis Cluster and 0 (no wait) on a single server.
    ``facts_placement`` puts the facts block just before the
    newest user message (``latest_user``, so what comes before it stays cached) or at the start;
    ``prompt_cache_key`` (``off``, ``session``, ``prefix``) adds OpenAI's cache-routing key when the
    client sent none.  ``ready_checks_upstream`` makes ``/readyz`` ask the
    upstream too; ``metrics_token``, when set, is the bearer token ``/metrics`` asks for.
    ``price_profile`` (``openai``, ``gpt-5.6``, ``anthropic`` or ``none``) is the provider's cache the
    estimate on ``/metrics`` assumes.  ``cache_breakpoint_models``: the model-name prefixes
    (``gpt-5.6`` by default) whose chat completions and Responses requests get an explicit
    ``prompt_cache_breakpoint`` at the end of their instructions (see ``serve._openai_breakpoints``);
    earlier models refuse the field, so no other model gets one, and an empty list places none.
    ``anthropic_upstream``, when set, is the base URL of an
    Anthropic-compatible API (as Anthropic's clients take it, without ``/v1``) that ``POST
    /v1/messages`` goes to.  ``client_keys`` is the file of the keys clients must present when
    the upstream key is the server's (``_client_keys.py``); ``client_rpm`` and
    ``client_concurrency`` bound each key's requests a minute and at once.  A server's upstream key
    on an address other than loopback needs client keys, or ``trust_tenant_header`` behind a
    gateway that authenticates: anyone reaching the port would spend it otherwise.
    ``overflow_retry``: a request the upstream refuses as longer than the model's context is
    compacted harder and sent once more (``_overflow.py``).  ``kept_session_bytes`` bounds what
    the process keeps of its sessions between turns (``_kept.py``), counted as the message reader
    counts a body's messages.
    """

    upstream: str
    host: str = "127.0.0.1"
    port: int = 8080
    store: str = "sqlite:contextledger-serve.db"
    strategy: StrategySpec = DEFAULT_STRATEGY
    retain: StrategySpec = field(default_factory=StrategySpec)
    facts: bool = True
    facts_schema: str | None = None
    trust_tenant_header: bool = False
    upstream_key: str | None = field(default=None, repr=False)
    max_body_bytes: int = 4 * 1024 * 1024
    upstream_timeout: float = 300.0
    lock_timeout: float = 30.0
    read_timeout: float = 30.0
    max_connections: int = 512
    lock_lease: float = 10.0
    redis_replicas: int | None = None
    namespace: str = "contextledger-serve"
    ready_checks_upstream: bool = False
    facts_placement: FactsPlacement = "latest_user"
    prompt_cache_key: str = "off"
    metrics_token: str | None = field(default=None, repr=False)
    price_profile: str = "openai"
    cache_breakpoint_models: tuple[str, ...] = DEFAULT_BREAKPOINT_MODELS
    anthropic_upstream: str | None = None
    client_keys: str | None = None
    client_rpm: int | None = None
    client_concurrency: int | None = None
    overflow_retry: bool = True
    kept_session_bytes: int = 32 * 1024 * 1024

    def __post_init__(self) -> None:
        parts = urlsplit(self.upstream) if isinstance(self.upstream, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigurationError(
                f"upstream must be the base URL of an OpenAI-compatible API such as http://127.0.0.1:8000/v1, "
                f"got {self.upstream!r}"
            )
        if self.anthropic_upstream is not None:
            parts = urlsplit(self.anthropic_upstream) if isinstance(self.anthropic_upstream, str) else None
            if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigurationError(
                    "anthropic_upstream must be the base URL of an Anthropic-compatible API, as Anthropic's clients "
                    f"take it (the proxy calls URL/v1/messages), such as https://api.anthropic.com; got "
                    f"{self.anthropic_upstream!r}"
                )
        schemes = ("sqlite:", "redis://", "rediss://", "unix://", "postgresql://", "postgres://", *CLUSTER_SCHEMES)
        if not self.store.startswith(schemes) or self.store == "sqlite:":
            raise ConfigurationError(
                "store must be sqlite:PATH, a redis:// URL (redis+cluster:// for a Redis Cluster) or a "
                f"postgresql:// URL, got {self.store!r}"
            )
        for name in ("max_body_bytes", "port", "max_connections", "kept_session_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "port" else 1):
                raise ConfigurationError(f"{name} must be a positive whole number, got {value!r}")
        replicas = self.redis_replicas
        if replicas is not None and (isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0):
            raise ConfigurationError(f"redis_replicas must be a whole number, 0 or more, got {replicas!r}")
        for name in ("upstream_timeout", "lock_timeout", "read_timeout", "lock_lease"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigurationError(f"{name} must be a number of seconds above 0, got {value!r}")
        if self.strategy.empty and self.strategy.tokenizer != DEFAULT_STRATEGY.tokenizer:
            # Only --tokenizer was given: the default strategy, counting with it.
            object.__setattr__(self, "strategy", replace(DEFAULT_STRATEGY, tokenizer=self.strategy.tokenizer))
        elif self.strategy.empty:
            object.__setattr__(self, "strategy", DEFAULT_STRATEGY)
        if self.facts_placement not in ("latest_user", "start"):
            raise ConfigurationError(f"facts_placement must be latest_user or start, got {self.facts_placement!r}")
        if self.prompt_cache_key not in ("off", "session", "prefix"):
            raise ConfigurationError(f"prompt_cache_key must be off, session or prefix, got {self.prompt_cache_key!r}")
        price_profile(self.price_profile)
        self._check_breakpoint_models()
        self._check_clients()
        self.strategy.build()  # a bad strategy stops here, before anything listens
        self.retain.build()
        self.fact_schema()  # and so does a schema file that cannot be read

    def _check_breakpoint_models(self) -> None:
        """The model-name prefixes OpenAI cache breakpoints are placed for, as a tuple (a config file
        gives a list, the flag a comma-separated string)."""
        given: Any = self.cache_breakpoint_models
        if isinstance(given, str):
            given = [name.strip() for name in given.split(",") if name.strip()]
        if not isinstance(given, (list, tuple)) or not all(isinstance(name, str) and name.strip() for name in given):
            raise ConfigurationError(
                'cache_breakpoint_models must be a list of model-name prefixes such as ["gpt-5.6"] (empty: '
                f"place no OpenAI cache breakpoint), got {self.cache_breakpoint_models!r}"
            )
        object.__setattr__(self, "cache_breakpoint_models", tuple(name.strip() for name in given))

    def _check_clients(self) -> None:
        """Who may spend the upstream key, checked before anything listens (see the class docstring)."""
        from contextledger.serve._client_keys import read_client_keys  # noqa: PLC0415
        from contextledger.serve._client_limits import ClientLimits  # noqa: PLC0415

        ClientLimits(self.client_rpm, self.client_concurrency)  # a bad limit stops here
        if self.client_keys is None:
            if self.client_rpm is not None or self.client_concurrency is not None:
                raise ConfigurationError(
                    "client_rpm and client_concurrency limit each client key: give --client-keys FILE too"
                )
            if self.upstream_key is not None and not self.trust_tenant_header and not _loopback(self.host):
                raise ConfigurationError(
                    f"refusing to spend ${UPSTREAM_KEY_VARIABLE} for anyone who reaches {self.host}: give "
                    f"--client-keys FILE (or ${CLIENT_KEYS_VARIABLE}) to admit only known clients, listen on "
                    "127.0.0.1, or pass --trust-tenant-header if a gateway in front authenticates every client"
                )
            return
        if not isinstance(self.client_keys, str) or not self.client_keys:
            raise ConfigurationError(f"client_keys must be the path of a file, got {self.client_keys!r}")
        if self.upstream_key is None:
            raise ConfigurationError(
                "client keys admit clients to the server's upstream key, and none is set: set "
                f"${UPSTREAM_KEY_VARIABLE}, or drop --client-keys to let each client bring its own upstream key"
            )
        read_client_keys(self.client_keys)  # a malformed file stops here, naming its line

    def describe(self) -> str:
        """What the proxy will do, in the lines it prints when it starts."""
        store = self.store.split("@")[-1] if self.uses_server else self.store
        retain = "everything" if self.retain.empty or self.retain.off else self.retain.describe()
        return "\n".join(
            [
                f"contextledger serve: http://{self.host}:{self.port}/v1 -> {self.upstream_base} (store {store})",
                *(
                    [f"  /v1/messages -> {self.anthropic_upstream.rstrip('/')}/v1/messages"]
                    if self.anthropic_upstream
                    else []
                ),
                f"  what is sent is compacted by: {self.strategy.describe()}",
                f"  a session keeps: {retain}; facts {'on' if self.facts else 'off'}",
                *([clients] if (clients := self._describe_clients()) else []),
            ]
        )

    def _describe_clients(self) -> str | None:
        if self.client_keys is not None:
            limits = [
                *([f"{self.client_rpm} requests a minute"] if self.client_rpm else []),
                *([f"{self.client_concurrency} at once"] if self.client_concurrency else []),
            ]
            each = f", each at most {' and '.join(limits)}" if limits else ", no limits per key"
            return f"  clients: only keys in {self.client_keys} (reloaded on SIGHUP){each}"
        if self.upstream_key is not None:
            behind = " behind the trusted gateway" if self.trust_tenant_header else ""
            return f"  clients: anyone reaching {self.host}{behind} spends the upstream key (no --client-keys)"
        return None

    def fact_schema(self) -> FactSchema:
        """The schema every session's facts follow: the file's, or the seed's."""
        return DEFAULT_SCHEMA if self.facts_schema is None else FactSchema.from_file(self.facts_schema)

    @property
    def upstream_base(self) -> str:
        return self.upstream.rstrip("/")

    @property
    def uses_server(self) -> bool:
        """Whether the store is a server (Redis, Postgres) named by a URL, which may carry a password."""
        return not self.store.startswith("sqlite:")

    def with_environment(self, environ: Mapping[str, str] = os.environ) -> ServeConfig:
        """This configuration with the upstream key, the metrics token and the client keys file from
        the environment, where set."""
        found = environment_settings(environ)
        return replace(
            self,
            upstream_key=found.get("upstream_key", self.upstream_key),
            metrics_token=found.get("metrics_token", self.metrics_token),
            client_keys=found.get("client_keys", self.client_keys),
        )


def with_store_replicas(
    config: ServeConfig, read: Callable[[str], int] = replicas_available
) -> tuple[ServeConfig, str | None]:
    """``config`` with the replicas a Redis store's turns wait for settled against the replicas the
    store has (``read`` asks it), and the start-up banner's line saying what a confirmed turn means.

    ``WAIT N`` on a master with fewer than N replicas never succeeds, so every session turn would
    be stored and yet answered 503.  Unset, a Redis Cluster's turns wait for one replica where
    every master has one, and for none where one has none (said in the banner).  Asked for more
    than the store has now, the proxy waits for what was asked (a cluster that has just failed
    over gets its replica back) and the banner says which turns will be answered 503 until then,
    naming the flag.  A store that cannot be asked at start keeps what was configured, and the
    banner says so.
    """
    store = config.store
    if not store.startswith(("redis://", "rediss://", "unix://", *CLUSTER_SCHEMES)):
        return config, None
    cluster = store.startswith(CLUSTER_SCHEMES)
    asked = config.redis_replicas
    if asked is None and not cluster:
        return config, None  # a single server's turns wait for no replica unless asked to
    kind = "Redis Cluster" if cluster else "Redis server"
    try:
        available = read(store)
    except ConfigurationError:
        raise
    except Exception as error:
        wait = 1 if asked is None else asked
        return replace(config, redis_replicas=wait), (
            f"  a turn is confirmed once {wait} replica(s) have it; the {kind}'s replicas could not be read at "
            f"start ({type(error).__name__}), so if it has fewer, restart with --redis-replicas 0"
        )
    if asked is not None and asked > available:
        # Asked for outright: kept (a cluster just failed over gets its replica back), and said.
        return config, (
            f"  a turn is confirmed once {asked} replica(s) have it, but the {kind} has {available} for some master "
            f"now: turns stored there answer 503 turn_outcome_unknown until replicas are added (--redis-replicas "
            f"{available} confirms {'by the master alone' if not available else 'with what it has'})"
        )
    wait = min(1, available) if asked is None else asked
    config = replace(config, redis_replicas=wait)
    if wait == 0:
        why = "no replicas" if not available else f"{available} replica(s) per master, none asked for"
        return config, (
            f"  a turn is confirmed by its master alone: the {kind} has {why} (a failover may lose a turn a client "
            "saw succeed); --redis-replicas N waits for N"
        )
    return config, f"  a turn is confirmed once {wait} replica(s) have it (WAIT; the {kind} has {available} per master)"


def environment_settings(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The settings the environment holds (the secrets, which no flag may show ``ps``), keyed like
    ``ServeConfig``; a variable set empty counts as unset."""
    names = {
        "upstream_key": UPSTREAM_KEY_VARIABLE,
        "metrics_token": METRICS_TOKEN_VARIABLE,
        "client_keys": CLIENT_KEYS_VARIABLE,
    }
    return {setting: environ[name] for setting, name in names.items() if environ.get(name)}


def _loopback(host: object) -> bool:
    """Whether only this machine can reach ``host``: ``localhost``, 127.0.0.0/8 or ``::1``."""
    if not isinstance(host, str):
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


_STRATEGY_KEYS = {"strategy": "name", "param": "params", "budget": "budget", "tokenizer": "tokenizer"}


def _spec(data: Mapping[str, Any], prefix: str, path: str) -> StrategySpec:
    values: dict[str, Any] = {}
    for key, attribute in _STRATEGY_KEYS.items():
        if prefix + key in data:
            value = data[prefix + key]
            if attribute == "params":
                if isinstance(value, str):
                    value = [value]
                if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
                    raise ConfigurationError(f"{path}: {prefix + key} must be a list of KEY=VALUE strings")
                value = tuple(value)
            values[attribute] = value
    return StrategySpec(**values)


def load_config_file(path: str) -> dict[str, Any]:
    """The settings in a JSON or TOML file (by extension; ``-`` is JSON on standard input), keyed like
    ``ServeConfig`` and the flags.

    Strategy keys are ``strategy``, ``param`` (a list), ``budget``, ``tokenizer``, and the same with
    a ``retain_`` prefix for the retained history.  An unknown key is an error, not ignored.
    """
    try:
        if path == "-":  # standard input, read as JSON (a TOML file is known by its name)
            raw = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as handle:
                raw = handle.read()
    except OSError as error:
        raise ConfigurationError(f"cannot read config file {path}: {error.strerror or error}") from None
    try:
        if path.endswith(".toml"):
            try:
                import tomllib  # noqa: PLC0415
            except ModuleNotFoundError:  # Python 3.10
                raise ConfigurationError(f"{path}: TOML config files need Python 3.11 or later; use JSON") from None
            data = tomllib.loads(raw.decode("utf-8"))
        else:
            data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise ConfigurationError(
            f"{path} is not valid {'TOML' if path.endswith('.toml') else 'JSON'}: {error}"
        ) from None
    if not isinstance(data, dict):
        raise ConfigurationError(f"{path} must hold a table of settings, got {type(data).__name__}")
    simple = {f.name for f in fields(ServeConfig)} - {"strategy", "retain", "upstream_key", "metrics_token"}
    known = simple | set(_STRATEGY_KEYS) | {"retain_" + key for key in _STRATEGY_KEYS}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigurationError(f"{path}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    settings: dict[str, Any] = {key: data[key] for key in simple if key in data}
    if any(key in data for key in _STRATEGY_KEYS):
        settings["strategy"] = _spec(data, "", path)
    if any("retain_" + key in data for key in _STRATEGY_KEYS):
        settings["retain"] = _spec(data, "retain_", path)
    return settings


def merge(file_settings: Mapping[str, Any], flags: Mapping[str, Any]) -> dict[str, Any]:
    """Flags given on the command line win over the file; both are keyed like ``ServeConfig``."""
    return {**file_settings, **{key: value for key, value in flags.items() if value is not None}}


def strategy_flags(
    name: str | None, params: Sequence[str] | None, budget: int | None, tokenizer: str | None
) -> StrategySpec | None:
    if name is None and not params and budget is None and tokenizer is None:
        return None
    return StrategySpec(name, tuple(params or ()), budget, tokenizer or "estimate")
