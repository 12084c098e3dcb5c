"""``contextledger chat``: the shared-facts desk as an interactive loop.

The loop reads lines from any text stream, so a terminal, a pipe and a test's scripted input
all go through the same code.  Each line is a host command (``mem``, ``forget KEY``,
``forget``, ``quit``), handled without a model call, or a message routed to the main or the
logs agent.  After each reply the loop says what became of every ``=`` in the message.  A model
call that fails is reported and the loop goes on: the failed turn stored nothing and admitted
nothing.

Lines are read outside the event loop, so Ctrl-C at the prompt or during a turn ends the chat
at once with a one-line goodbye (exit status 130), never a traceback.
"""

from __future__ import annotations

import asyncio
from typing import TextIO

from contextledger.clients import ChatClient, resolve_client
from contextledger.demo._desk import DeskReply, FactsDesk, Mode
from contextledger.exceptions import ConfigurationError, ContextLedgerError
from contextledger.facts import FactStore, FactWriter, ModelWriter, RuleWriter
from contextledger.facts._store import FactMemory

__all__ = ["ChatLoop", "build_desk"]

PROMPT = "> "
INTERRUPTED = 130


def _banner(desk: FactsDesk) -> str:
    schema = desk.store.schema
    return (
        f"contextledger chat ({desk.mode} mode). Declare facts as key=value, separated by ';' or new lines, "
        f"alone or after prose ('Sorry: database=SQL Server 2022'); allowed keys: {schema.listed_keys}; "
        f"at most {schema.max_facts} facts.\n"
        "Commands (never sent to a model): mem, forget KEY, forget, quit. "
        "Questions about logs go to the logs agent; everything else to the main agent."
    )


def build_desk(
    *,
    mode: Mode = "provider",
    model: str = "offline",
    writer: str = "rules",
    client: ChatClient | None = None,
    store: FactMemory | None = None,
) -> FactsDesk:
    """The desk ``contextledger chat`` runs: ``client`` if given, else the one ``model`` names;
    ``writer`` is ``rules`` (no model call) or ``model`` (the same client proposes the facts)."""
    chosen_client = client if client is not None else resolve_client(model)
    if writer not in ("rules", "model"):
        raise ConfigurationError(f"writer must be 'rules' or 'model', got {writer!r}")
    if store is None:
        store = FactStore()
    fact_writer: FactWriter = (
        RuleWriter(store.schema) if writer == "rules" else ModelWriter(chosen_client, schema=store.schema)
    )
    return FactsDesk.create(chosen_client, store=store, mode=mode, writer=fact_writer)


class ChatLoop:
    """Reads lines from ``stdin`` until ``quit``, the end of the input or Ctrl-C, writing to ``stdout``.

    When the input is not a terminal each line is echoed after the prompt, so the output of a
    piped session reads as the transcript it was.
    """

    def __init__(self, desk: FactsDesk, stdout: TextIO) -> None:
        self.desk = desk
        self.stdout = stdout
        self.replies: list[DeskReply] = []

    def _say(self, text: str) -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def _show(self, reply: DeskReply) -> None:
        if reply.agent is not None:
            self._say(f"[{reply.agent}] {reply.text}")
            if reply.turn is not None:
                self._say(reply.turn.describe())
        elif reply.text:
            self._say(reply.text)

    def run(self, stdin: TextIO) -> int:
        """The loop itself; returns the exit status (0, 1 if any turn failed, 130 on Ctrl-C)."""
        loop = asyncio.new_event_loop()
        try:
            return self._run(stdin, loop)
        except KeyboardInterrupt:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._say("\nInterrupted: the turn in progress (if any) stored nothing. Bye.")
            return INTERRUPTED
        finally:
            loop.close()

    def _run(self, stdin: TextIO, loop: asyncio.AbstractEventLoop) -> int:
        interactive = stdin.isatty()
        failures = 0
        self._say(_banner(self.desk))
        while True:
            self.stdout.write(PROMPT)
            self.stdout.flush()
            line = stdin.readline()
            if not line:
                self._say("" if interactive else "(end of input)")
                return 1 if failures else 0
            if not interactive:
                self.stdout.write(line if line.endswith("\n") else line + "\n")
            try:
                reply = loop.run_until_complete(self.desk.handle(line))
            except ContextLedgerError as error:
                failures += 1
                self._say(f"error: {error}")
                if not self.desk.is_command(line):
                    self._say("The turn stored nothing and admitted nothing; the facts are as they were (see mem).")
                continue
            self.replies.append(reply)
            self._show(reply)
            if reply.quit:
                return 1 if failures else 0
