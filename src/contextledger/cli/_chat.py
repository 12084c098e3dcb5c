"""``contextledger chat``: the two-agent desk of :mod:`contextledger.demo` in a terminal or a pipe.

The agent runtime and the demo are imported only when the command runs, so the other commands
start without them.  The chat reads standard input, so its ``--schema`` cannot be ``-``.
"""

from __future__ import annotations

import argparse
import sys

from contextledger.cli._common import STANDARD_STREAM, UsageError
from contextledger.cli._facts import open_store

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chat = commands.add_parser(
        "chat",
        help="talk to two agents that share controlled facts (mem, forget KEY, forget, quit)",
        description=(
            "An interactive desk: a main agent and a logs agent with separate sessions share one store of "
            "key=value facts. Commands are handled here and never sent to a model. Runs offline by default."
        ),
    )
    chat.add_argument("--mode", default="provider", choices=["provider", "manual"], help="how facts reach the model")
    chat.add_argument("--model", default="offline", help="offline (default), local, or openai:MODEL")
    chat.add_argument(
        "--writer",
        default="rules",
        choices=["rules", "model"],
        help="how facts are extracted: parsing rules (default, no model call) or a structured-output model call",
    )
    chat.add_argument(
        "--schema", metavar="FILE", help='a JSON schema of keys and bounds: {"keys": [...], "max_facts": 5}'
    )
    chat.add_argument(
        "--store",
        metavar="PATH|URL",
        help="keep facts in a SQLite file (created if missing) or a redis:// URL (default: in memory, gone when "
        "the chat ends)",
    )
    chat.add_argument("--owner", default="chat", help="whose facts, in a --store shared by several (default: chat)")
    chat.add_argument("--ttl", type=float, metavar="SECONDS", help="facts expire this long after they are recorded")
    chat.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from contextledger.demo import ChatLoop, build_desk  # noqa: PLC0415

    if args.schema == STANDARD_STREAM:
        raise UsageError("chat reads its messages from standard input, so --schema cannot be '-'; give a file")
    store = open_store(args.store, owner=args.owner, schema_file=args.schema, ttl_seconds=args.ttl)
    desk = build_desk(mode=args.mode, model=args.model, writer=args.writer, store=store)
    return ChatLoop(desk, sys.stdout).run(sys.stdin)
