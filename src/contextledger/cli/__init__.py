"""The ``contextledger`` command line: one module per command, registered from one table.

    contextledger compact IN.jsonl [-o OUT.jsonl | -o -] [--metadata] [--strategy NAME] [--param KEY=VALUE ...]
                          [--budget N]
    contextledger validate IN.jsonl
    contextledger lab [TIMELINE ...] [--model offline|openai:MODEL|local] [--policies NAME[,NAME...]]
                      [--tokenizer estimate|cl100k_base|o200k_base] [--html FILE] [--json FILE] [--replicates N]
                      [--price-profile openai|gpt-5.6|anthropic|none] [--kit]
    contextledger chat [--mode provider|manual] [--model offline|openai:MODEL|local] [--writer rules|model]
                       [--schema FILE] [--store PATH|redis://...] [--owner NAME] [--ttl SECONDS]
    contextledger facts list|history|revoke|expire --store PATH|redis://... [--owner NAME]
    contextledger serve --upstream URL [...]
    contextledger --version

Where things live: :func:`main` is the entry point; :data:`COMMANDS` names each command's module;
a module's ``register(commands)``
adds its sub-parser, its arguments and the function that runs it (``_compact.py``,
``_validate.py``, ``_lab.py``, ``_chat.py``, ``_facts.py``, ``_serve.py``).  What they share is
in ``_common.py`` (the usage error, ``-`` as the standard stream) and ``_transcripts.py``
(reading a transcript).  A new command is a module and a line in the table.

Every command behaves the same way at its edges: ``-`` as a file argument is the standard stream;
a mistake is one line on stderr and exit status 2, with nothing written; a bare ``contextledger``
is a usage error (the usage on stderr, exit 2); Ctrl-C ends any command with one line and exit
status 130 (:data:`INTERRUPTED`), never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from importlib import metadata

from contextledger.cli._common import UsageError
from contextledger.exceptions import ContextLedgerError

__all__ = ["COMMANDS", "INTERRUPTED", "main"]

COMMANDS: dict[str, str] = {
    "compact": "contextledger.cli._compact",
    "validate": "contextledger.cli._validate",
    "lab": "contextledger.cli._lab",
    "chat": "contextledger.cli._chat",
    "facts": "contextledger.cli._facts",
    "serve": "contextledger.cli._serve",
}
"""Each command and the module that registers it, in the order ``contextledger --help`` lists them.

Every module is imported to build the parser (argparse needs every command's arguments), so a
module imports at its top only what its arguments need; what a command needs to run (the lab,
``rich``, the agent runtime, the proxy's extra) is imported when it runs, so every command starts
light.
"""

INTERRUPTED = 130
"""The exit status after Ctrl-C, as shells report a process ended by SIGINT."""


def _version() -> str:
    try:
        return metadata.version("contextledger")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contextledger", description="Control what an agent sends to its model.")
    parser.add_argument("--version", action="version", version=f"contextledger {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        importlib.import_module(module).register(commands)
        if name not in commands.choices:
            raise RuntimeError(f"{module}.register did not add the {name!r} command")  # a table out of step
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit status (0, 1 for a finding such as an invalid
    transcript, 2 for a usage error, 130 after Ctrl-C)."""
    try:
        parser = _parser()
        args = parser.parse_args(argv)
        if getattr(args, "run", None) is None:
            parser.print_help(sys.stderr)
            print("contextledger: error: give a command", file=sys.stderr)
            return 2
        code: int = args.run(args)
    except KeyboardInterrupt:
        print("contextledger: interrupted", file=sys.stderr)
        return INTERRUPTED
    except (UsageError, ContextLedgerError, OSError) as error:
        print(f"contextledger: error: {error}", file=sys.stderr)
        return 2
    return code
