"""``contextledger facts``: inspect and manage a persistent fact store from the command line.

    contextledger facts list    --store PATH|redis://... [--owner NAME]
    contextledger facts history --store PATH|redis://... [--owner NAME]
    contextledger facts revoke  --store ... [--owner NAME] (KEY | --all) --reason TEXT
    contextledger facts expire  --store ... [--owner NAME]

``--store`` is a SQLite file (created if missing) or a ``redis://`` URL.  The facts package is
imported only when one of these commands runs, so the other commands start without it.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from contextledger.exceptions import ConfigurationError

__all__ = ["open_store", "register_facts_command"]


def open_store(
    spec: str | None, *, owner: str, schema_file: str | None = None, ttl_seconds: float | None = None
) -> Any:
    """The fact store ``spec`` names: in memory (``None``), a ``redis://`` URL, or a SQLite file path."""
    from contextledger.facts import DEFAULT_SCHEMA, FactSchema, FactStore, RedisFactStore, SQLiteFactStore  # noqa: PLC0415

    schema = DEFAULT_SCHEMA if schema_file is None else FactSchema.from_file(schema_file)
    if spec is None:
        return FactStore(schema=schema, ttl_seconds=ttl_seconds)
    if spec.startswith(("redis://", "rediss://", "unix://")):
        return RedisFactStore(spec, owner=owner, schema=schema, ttl_seconds=ttl_seconds)
    path = spec.removeprefix("sqlite:")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ConfigurationError(f"cannot open the fact store {path}: the folder {folder} does not exist")
    return SQLiteFactStore(path, owner=owner, schema=schema, ttl_seconds=ttl_seconds)


def _store(args: argparse.Namespace) -> Any:
    return open_store(args.store, owner=args.owner, schema_file=args.schema)


def _list(args: argparse.Namespace) -> int:
    store = _store(args)
    print(f"owner {store.owner!r} in {args.store}:")
    print(store.describe())
    return 0


def _history(args: argparse.Namespace) -> int:
    events = _store(args).review()
    if not events:
        print(f"owner {args.owner!r} in {args.store}: the review trail is empty")
        return 0
    print(f"owner {args.owner!r} in {args.store}: {len(events)} event(s), oldest first")
    for event in events:
        print(event.describe())
    return 0


def _revoke(args: argparse.Namespace) -> int:
    if (args.key is None) == (not args.all):
        raise ConfigurationError("give one KEY to revoke, or --all to revoke every fact of the owner")
    store = _store(args)
    removed = store.revoke(None if args.all else args.key, reason=args.reason)
    what = "every fact" if args.all else repr(args.key.strip().lower())
    print(f"revoked {what} of owner {store.owner!r}: {len(removed)} fact(s) removed; the trail keeps that it happened")
    return 0


def _expire(args: argparse.Namespace) -> int:
    store = _store(args)
    expired = store.expire()
    names = ", ".join(fact.key for fact in expired) or "none"
    print(f"owner {store.owner!r}: {len(expired)} expired fact(s) removed ({names})")
    return 0


def register_facts_command(commands: Any) -> None:
    """Add ``facts`` and its four sub-commands to the command line's sub-parsers."""
    facts = commands.add_parser(
        "facts",
        help="inspect and manage a persistent fact store (list, history, revoke, expire)",
        description="Inspect and manage the facts a persistent store keeps for one owner.",
    )
    actions = facts.add_subparsers(dest="facts_command", metavar="ACTION", required=True)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(name, help=help_text, description=help_text)
        parser.add_argument("--store", required=True, metavar="PATH|URL", help="a SQLite file or a redis:// URL")
        parser.add_argument("--owner", default="chat", help="whose facts (default: chat, as contextledger chat)")
        parser.add_argument("--schema", metavar="FILE", help="the JSON schema the facts were written with")
        return parser

    action("list", "the owner's live facts with their evidence, turn and times").set_defaults(run=_list)
    trail = "the owner's review trail: every admission, rejection, correction, forget and expiry"
    action("history", trail).set_defaults(run=_history)
    revoke = action("revoke", "remove a fact (or all) as an operator, with a reason kept in the trail")
    revoke.add_argument("key", nargs="?", metavar="KEY")
    revoke.add_argument("--all", action="store_true", help="revoke every fact of the owner")
    revoke.add_argument("--reason", required=True, help="why, kept in the review trail")
    revoke.set_defaults(run=_revoke)
    action("expire", "remove the facts whose expiry has passed, recording each in the trail").set_defaults(run=_expire)
