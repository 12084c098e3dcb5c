"""``contextledger serve``: the sub-command, registered by the command line with one call.

Nothing here imports the ``serve`` extra: the command line starts without it, and only running
the command needs starlette, uvicorn and aiohttp (a missing one is reported with its install line).
"""

from __future__ import annotations

import argparse
import errno
import socket
import sys
from typing import Any

from contextledger._extras import require_extra
from contextledger.serve._config import (
    CLIENT_KEYS_VARIABLE,
    METRICS_TOKEN_VARIABLE,
    UPSTREAM_KEY_VARIABLE,
    ServeConfig,
    environment_settings,
    load_config_file,
    merge,
    strategy_flags,
    with_store_replicas,
)

__all__ = ["add_serve_command", "config_from_args"]

_TOKENIZERS = ["estimate", "cl100k_base", "o200k_base"]


def add_serve_command(commands: Any) -> None:
    """Add ``serve`` to the command line's sub-parsers."""
    serve = commands.add_parser(
        "serve",
        help="an OpenAI-compatible proxy that compacts and keeps facts for any client",
        description=(
            "Serve OpenAI's chat-completions API in front of any compatible upstream. Without a session header the "
            "whole history a client sends is compacted and forwarded, and nothing is stored. With "
            "X-Contextledger-Session the proxy keeps the history and the controlled facts. The upstream key is "
            f"the client's own Authorization, or ${UPSTREAM_KEY_VARIABLE} when set. With ${METRICS_TOKEN_VARIABLE} "
            "set, GET /metrics asks for it as a bearer token. With the upstream key the server's, only clients "
            "presenting a key from --client-keys are answered."
        ),
    )
    serve.add_argument("--upstream", metavar="URL", help="base URL of the upstream API, e.g. http://127.0.0.1:8000/v1")
    serve.add_argument(
        "--anthropic-upstream",
        metavar="URL",
        help="base URL of an Anthropic-compatible API for POST /v1/messages, as Anthropic's clients take it "
        "(e.g. https://api.anthropic.com); without it /v1/messages answers 404",
    )
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 8080)")
    serve.add_argument(
        "--store",
        metavar="sqlite:PATH|redis://…|postgresql://…",
        help="where sessions live (default sqlite:contextledger-serve.db); Redis or Postgres to share them",
    )
    serve.add_argument(
        "--strategy",
        metavar="NAME",
        help="compacts what is sent, as for `contextledger compact` (default: truncation max_n=32000 "
        "compact_to=16000, tokens; none sends messages as they come)",
    )
    serve.add_argument("--param", action="append", metavar="KEY=VALUE", help="a --strategy argument")
    serve.add_argument("--budget", type=int, metavar="N", help="fit what is sent in N tokens")
    serve.add_argument("--tokenizer", choices=_TOKENIZERS, help="how tokens are counted (default: estimate)")
    serve.add_argument("--retain-strategy", metavar="NAME", help="compacts what a session keeps after each turn")
    serve.add_argument("--retain-param", action="append", metavar="KEY=VALUE", help="a --retain-strategy argument")
    serve.add_argument("--retain-budget", type=int, metavar="N", help="keep a session's history within N tokens")
    serve.add_argument(
        "--facts",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="controlled facts in session mode (default: on)",
    )
    serve.add_argument(
        "--facts-schema",
        metavar="FILE",
        help='the facts\' keys and bounds as JSON: {"keys": [...], "max_facts": 5} (default: the seed\'s)',
    )
    serve.add_argument(
        "--trust-tenant-header",
        action="store_true",
        default=None,
        help="take the tenant from X-Contextledger-Tenant (only behind a gateway that authenticates)",
    )
    serve.add_argument(
        "--client-keys",
        metavar="FILE",
        help=f"the keys clients must present (bearer or x-api-key) to spend ${UPSTREAM_KEY_VARIABLE}: one a line, "
        "the key or sha256:HEX of it, then optionally a space and the tenant's name; # begins a comment; read again "
        f"on SIGHUP (or ${CLIENT_KEYS_VARIABLE}=FILE). Needed with the server's upstream key off loopback",
    )
    serve.add_argument(
        "--client-rpm", type=int, metavar="N", help="requests a minute each client key may send, then 429"
    )
    serve.add_argument(
        "--client-concurrency", type=int, metavar="N", help="requests each client key may have under way, then 429"
    )
    serve.add_argument("--max-body-bytes", type=int, metavar="N", help="largest request body (default 4 MiB)")
    serve.add_argument("--upstream-timeout", type=float, metavar="SECONDS", help="default 300")
    serve.add_argument(
        "--lock-timeout",
        type=float,
        metavar="SECONDS",
        help="how long a turn waits for the one before it in its session before 409 (default 30)",
    )
    serve.add_argument(
        "--read-timeout",
        type=float,
        metavar="SECONDS",
        help="longest a client may take to send a request's headers, and again its body, before 408 (default 30)",
    )
    serve.add_argument(
        "--max-connections",
        type=int,
        metavar="N",
        help="connections open at once; past it a new one is answered 503 and closed (default 512)",
    )
    serve.add_argument(
        "--lock-lease",
        type=float,
        metavar="SECONDS",
        help="lease of a session's Redis or Postgres lock, renewed while its turn runs: how long a proxy that died "
        "holding a session blocks it (default 10)",
    )
    serve.add_argument(
        "--redis-replicas",
        type=int,
        metavar="N",
        help="on Redis, confirm a turn only once N replicas have it (WAIT), so a failover loses no turn a client "
        "saw succeed (default 1 on a redis+cluster:// store, 0 on a single server)",
    )
    serve.add_argument(
        "--ready-checks-upstream",
        action="store_true",
        default=None,
        help="GET /readyz also asks the upstream's /models (default: the session store only)",
    )
    serve.add_argument(
        "--facts-placement",
        choices=["latest_user", "start"],
        help="where a session request carries the facts block: before the newest user message (the default, "
        "which keeps the rest of the request cached) or at the start",
    )
    serve.add_argument(
        "--prompt-cache-key",
        choices=["off", "session", "prefix"],
        help="send OpenAI's prompt_cache_key when the client sets none: a hash of the session, or of the "
        "conversation's first messages (default off: some compatible servers refuse unknown fields)",
    )
    serve.add_argument(
        "--price-profile",
        choices=["openai", "gpt-5.6", "anthropic", "none"],
        help="the provider's prompt cache the cost estimate on /metrics assumes (default: openai)",
    )
    serve.add_argument(
        "--cache-breakpoint-models",
        metavar="PREFIXES",
        help="comma-separated model-name prefixes whose OpenAI requests get an explicit prompt_cache_breakpoint at "
        "the end of their instructions (default: gpt-5.6; earlier models refuse the field; '' places none)",
    )
    serve.add_argument(
        "--overflow-retry",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a request the upstream refuses as longer than the model's context is compacted harder (to the limit "
        "the error states, else three quarters of what was sent) and sent once more (default: on; needs a strategy)",
    )
    serve.add_argument(
        "--kept-session-bytes",
        type=int,
        metavar="N",
        help="most bytes of session histories the process keeps between turns, counted as request messages are; "
        "the least recently used go first and are read from the store again (default 32 MiB)",
    )
    serve.add_argument("--config", metavar="FILE", help="settings in a JSON or TOML file; flags win over it")
    serve.set_defaults(run=_serve)


def config_from_args(args: argparse.Namespace) -> ServeConfig:
    """The configuration the flags and the config file describe (flags win)."""
    from contextledger.exceptions import ConfigurationError  # noqa: PLC0415

    settings = load_config_file(args.config) if args.config else {}
    flags: dict[str, Any] = {
        "upstream": args.upstream,
        "anthropic_upstream": args.anthropic_upstream,
        "host": args.host,
        "port": args.port,
        "store": args.store,
        "facts": args.facts,
        "facts_schema": args.facts_schema,
        "trust_tenant_header": args.trust_tenant_header,
        "client_keys": args.client_keys,
        "client_rpm": args.client_rpm,
        "client_concurrency": args.client_concurrency,
        "max_body_bytes": args.max_body_bytes,
        "upstream_timeout": args.upstream_timeout,
        "lock_timeout": args.lock_timeout,
        "read_timeout": args.read_timeout,
        "max_connections": args.max_connections,
        "lock_lease": args.lock_lease,
        "redis_replicas": args.redis_replicas,
        "ready_checks_upstream": args.ready_checks_upstream,
        "facts_placement": args.facts_placement,
        "prompt_cache_key": args.prompt_cache_key,
        "price_profile": args.price_profile,
        "cache_breakpoint_models": args.cache_breakpoint_models,
        "overflow_retry": args.overflow_retry,
        "kept_session_bytes": args.kept_session_bytes,
        "strategy": strategy_flags(args.strategy, args.param, args.budget, args.tokenizer),
        "retain": strategy_flags(args.retain_strategy, args.retain_param, args.retain_budget, args.tokenizer),
    }
    # Flags win over the environment, which wins over the file.
    merged = merge({**settings, **environment_settings()}, flags)
    if "upstream" not in merged:
        raise ConfigurationError('serve needs --upstream URL (or "upstream" in the config file)')
    return ServeConfig(**merged)


def _serve(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    uvicorn = require_extra("uvicorn", extra="serve", feature="contextledger serve")
    from contextledger.serve._app import create_app  # noqa: PLC0415
    from contextledger.serve._connections import guarded_protocol  # noqa: PLC0415

    _check_address(config.host, config.port)
    _return_large_blocks()
    config, replicas = with_store_replicas(config)
    app = create_app(config)
    print(config.describe() + (f"\n{replicas}" if replicas else ""), file=sys.stderr)
    # Not uvicorn.run, which swallows the Ctrl-C that stops the server: the command line reports
    # it (status 130) as it does for every command.
    protocol = guarded_protocol(config.read_timeout, config.max_connections)
    uvicorn.Server(uvicorn.Config(app, host=config.host, port=config.port, log_level="info", http=protocol)).run()
    return 0


def _return_large_blocks() -> None:
    """Have glibc's allocator give a large block (a long message, a request body) back to the
    system when it is freed, rather than keep it for reuse.

    By default glibc raises the size above which a block gets pages of its own each time such a
    block is freed, so after the first large messages later ones come from the heap, whose freed
    space stays in the process: a proxy fed large distinct content then holds tens of MiB more
    than what it keeps.  A fixed threshold costs a system call per large block, nothing per small
    one.  Elsewhere (no glibc), nothing is changed."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes  # noqa: PLC0415

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD: fixed, so it no longer rises
    except (OSError, AttributeError):
        return


def _check_address(host: str, port: int) -> None:
    """Refuse, in one line, an address the server could not listen on, before anything starts:
    uvicorn finds out only after the application's startup, and answers with its log and status 3.

    A probe bound and closed at once, with the option uvicorn's own socket sets (``SO_REUSEADDR``,
    so a port left in TIME_WAIT passes as it would for uvicorn); port 0 is any free port."""
    from contextledger.exceptions import ConfigurationError  # noqa: PLC0415

    if port == 0:
        return
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise ConfigurationError(
            f"cannot listen on {host}: {error.strerror}; give --host an address of this machine"
        ) from None
    for family, kind, protocol, _, address in addresses:
        with socket.socket(family, kind, protocol) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as error:
                where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
                if error.errno == errno.EADDRINUSE:
                    raise ConfigurationError(
                        f"cannot listen on {where}: another process holds that address; choose another port with "
                        "--port, or stop what holds it"
                    ) from None
                raise ConfigurationError(f"cannot listen on {where}: {error.strerror or error}") from None
