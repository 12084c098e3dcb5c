"""``contextledger facts``: inspect and manage a persistent fact store from the command line.

    contextledger facts list    --store PATH|redis://... [--owner NAME]
    contextledger facts history --store PATH|redis://... [--owner NAME]
    contextledger facts revoke  --store ... [--owner NAME] (KEY | --all) --reason TEXT
    contextledger facts expire  --store ... [--owner NAME]

``--store`` is a ``redis://`` URL or a SQLite file that must exist: these commands manage a store
that ``contextledger chat --store`` (or a program) wrote, so a mistyped path is an error naming it,
never a new empty database.  The facts package is imported only when one of these commands runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from contextledger.cli._common import STANDARD_STREAM, UsageError, read_text
from contextledger.exceptions import ConfigurationError, FactsError

__all__ = ["open_store", "register"]

_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def open_store(
    spec: str | None,
    *,
    owner: str,
    schema_file: str | None = None,
    ttl_seconds: float | None = None,
    create: bool = True,
) -> Any:
    """The fact store ``spec`` names: in memory (``None``), a ``redis://`` URL, or a SQLite file path.

    With ``create=False`` a SQLite file that does not exist is an error naming the path.
    """
    import json  # noqa: PLC0415

    from contextledger.facts import DEFAULT_SCHEMA, FactSchema, FactStore, RedisFactStore, SQLiteFactStore  # noqa: PLC0415

    if schema_file is None:
        schema = DEFAULT_SCHEMA
    elif schema_file == STANDARD_STREAM:
        try:
            schema = FactSchema.from_dict(json.loads(read_text(STANDARD_STREAM, what="schema")), where="<stdin>")
        except ValueError as error:
            raise ConfigurationError(f"schema on standard input is not valid JSON ({error})") from None
    else:
        schema = FactSchema.from_file(schema_file)
    if spec is None:
        return FactStore(schema=schema, ttl_seconds=ttl_seconds)
    if spec.startswith(_REDIS_SCHEMES):
        return RedisFactStore(spec, owner=owner, schema=schema, ttl_seconds=ttl_seconds)
    if spec == STANDARD_STREAM:
        raise UsageError("a fact store is a SQLite file or a redis:// URL, not '-' (a stream cannot hold one)")
    path = spec.removeprefix("sqlite:")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ConfigurationError(f"cannot open the fact store {path}: the folder {folder} does not exist")
    if not create and not os.path.isfile(path):
        raise ConfigurationError(
            f"no fact store at {path}: the file does not exist; check the path "
            "(a store is created by contextledger chat --store or by a program that writes facts)"
        )
    return SQLiteFactStore(path, owner=owner, schema=schema, ttl_seconds=ttl_seconds)


def _store(args: argparse.Namespace) -> Any:
    return open_store(args.store, owner=args.owner, schema_file=args.schema, create=False)


def _list(args: argparse.Namespace) -> int:
    store = _store(args)
    if not store.facts() and not store.review():
        # Every write leaves a trail event, so an owner with neither was never written: a mistyped
        # --owner, not an owner with nothing to show.
        print(
            f"contextledger: no owner {args.owner!r} in {args.store}: it holds no facts and no review trail for that "
            "name; check --owner, the name contextledger chat --owner wrote under (default chat); a proxy "
            "session's facts are read with GET /v1/contextledger/sessions/ID/facts",
            file=sys.stderr,
        )
        return 1
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
    if args.key is not None:
        # Checked here so the refusal speaks of revoking, the operator's word, not of forgetting.
        name = args.key.strip().lower()
        if name not in store.schema.keys:
            raise FactsError(
                f"cannot revoke {args.key!r}: it is not a fact key; use one of {store.schema.listed_keys}, "
                "or --all to revoke every fact; nothing was changed"
            )
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


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``facts`` and its four actions."""
    facts = commands.add_parser(
        "facts",
        help="inspect and manage a persistent fact store (list, history, revoke, expire)",
        description="Inspect and manage the facts a persistent store keeps for one owner.",
    )
    actions = facts.add_subparsers(dest="facts_command", metavar="ACTION", required=True)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(name, help=help_text, description=help_text)
        parser.add_argument(
            "--store", required=True, metavar="PATH|URL", help="an existing SQLite file or a redis:// URL"
        )
        parser.add_argument("--owner", default="chat", help="whose facts (default: chat, as contextledger chat)")
        parser.add_argument(
            "--schema", metavar="FILE", help="the JSON schema the facts were written with ('-' for standard input)"
        )
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
