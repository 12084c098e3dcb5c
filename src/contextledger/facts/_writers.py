"""Writers propose facts from the current user message; only the host decides what is admitted.

A writer sees one user message and nothing else: no session, no earlier turn, no injected
context, so it cannot promote an assistant reply, a question or a stale statement.  Whatever it
proposes goes through the store's ``apply``, which compares it with the message's own
declarations; a writer that paraphrases, adds or drops a key gets the whole batch refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from contextledger._tracing import traced_fact_extraction
from contextledger.clients import ChatClient, ChatResponse, OfflineModel, Usage
from contextledger.clients._offline import FACT_WRITER_MARKER
from contextledger.exceptions import FactRejectedError
from contextledger.facts._diagnostics import diagnose
from contextledger.facts._parse import check_user_text, parse_assertions, rejection
from contextledger.facts._records import Admission, Candidate, Ticket
from contextledger.facts._schema import DEFAULT_SCHEMA, FactSchema
from contextledger.facts._store import FactMemory
from contextledger.messages import Message

__all__ = [
    "WRITER_INSTRUCTIONS",
    "FactWriter",
    "ModelWriter",
    "Proposal",
    "RuleWriter",
    "StoreCall",
    "directly",
    "extract",
    "propose",
    "writer_instructions",
]


@dataclass(frozen=True, slots=True)
class Proposal:
    """A writer's candidates and what producing them cost: ``usage`` as the provider reported
    it (``None`` when unknown or when no model was called) over ``model_calls`` calls."""

    candidates: tuple[Candidate, ...]
    usage: Usage | None = None
    model_calls: int = 0


@runtime_checkable
class FactWriter(Protocol):
    """Anything that turns the current user message into candidate facts."""

    async def propose(self, user_text: str) -> Proposal: ...


class RuleWriter:
    """The default writer: reads the declarations itself, with no model call and no cost."""

    def __init__(self, schema: FactSchema = DEFAULT_SCHEMA) -> None:
        self.schema = schema

    def __repr__(self) -> str:
        return "RuleWriter()"

    async def propose(self, user_text: str) -> Proposal:
        """The message's declarations; :class:`FactRejectedError` when they are invalid."""
        return Proposal(parse_assertions(user_text, self.schema))


def writer_instructions(schema: FactSchema = DEFAULT_SCHEMA) -> str:
    """The model writer's system prompt for ``schema``'s keys and bound."""
    return f"""{FACT_WRITER_MARKER}
You copy explicit key=value declarations from one user message into JSON. You do not answer the message.
- A declaration is key=value. Declarations are separated by ";" or by a line break. Split on the first "=".
  A declaration may follow prose: in "Sorry: database=SQL Server 2022" the declaration is "database=SQL Server 2022".
  After a declaration, a comma followed by an allowed key and "=" starts the next one:
  "database=Postgres, module=Billing" declares database "Postgres" and module "Billing".
- Allowed keys: {schema.listed_keys}. Write keys in lower case.
- value: the text after "=", trimmed, copied character for character (keep inner spaces; never translate,
  correct, complete or paraphrase it).
- evidence: the declaration exactly as the user wrote it, trimmed, for example "database=SQL Server 2022".
- If a key is declared twice, keep only the last declaration. At most {schema.max_facts} facts.
- Questions, requests and prose without "=" are not declarations. Never infer a fact.
Reply with one JSON object and nothing else:
{{"facts": [{{"key": "module", "value": "Billing", "evidence": "module=Billing"}}]}}
If the message declares nothing, reply {{"facts": []}}."""


WRITER_INSTRUCTIONS = writer_instructions()
"""The writer's system prompt for the seed's schema; it starts with the marker the built-in offline model answers to."""

_ALLOWED_KEYS = re.compile(r"Allowed keys: ([A-Za-z0-9_, ]+)\.")
_KEY_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def _transcribe_declarations(text: str, instructions: str) -> str:
    """The offline model's answer to the writer: the message's declarations as JSON, read as the
    writer's instructions describe them (``Allowed keys: ...`` decides which word after prose
    starts one), the last of a key winning.  It copies; whether a declaration is admitted is the
    host's job.  It lives here, with the grammar it reads by, and is taught to the model below,
    so the clients never reach up into the facts."""
    listed = _ALLOWED_KEYS.search(instructions)
    keys = frozenset(_KEY_WORD.findall(listed.group(1))) if listed else frozenset({"key"})
    schema = FactSchema(keys, max_message_chars=len(text) + 1 if len(text) >= 4096 else 4096)
    found: dict[str, dict[str, str]] = {}
    for seen in diagnose(text, schema=schema):  # one per '=', in order
        if seen.outcome != "prose" and seen.key is not None:
            found.pop(seen.key, None)
            found[seen.key] = {"key": seen.key, "value": seen.value or "", "evidence": seen.evidence or ""}
    return json.dumps({"facts": list(found.values())}, ensure_ascii=False)


OfflineModel.learn_role(FACT_WRITER_MARKER, _transcribe_declarations)

_T = TypeVar("_T")
_FENCE = re.compile(r"```(?:json)?[ \t]*\r?\n(.*?)\r?\n?```", re.DOTALL)


def _excerpt(text: str, limit: int = 120) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def read_writer_reply(text: str) -> tuple[Candidate, ...]:
    """The candidates in a model's JSON reply, or :class:`FactRejectedError` saying what is
    wrong with it.  A single Markdown code fence around the JSON is tolerated; nothing else is
    repaired or guessed."""
    what = "the model writer's proposal"
    body = text.strip()
    fenced = _FENCE.fullmatch(body)
    if fenced is not None:
        body = fenced.group(1).strip()
    try:
        data: Any = json.loads(body)
    except ValueError as error:
        raise rejection([f"the model's reply is not valid JSON ({error}): {_excerpt(text)}"], what=what) from None
    if not isinstance(data, dict) or not isinstance(data.get("facts"), list):
        raise rejection(
            [f'the model\'s reply must be a JSON object {{"facts": [...]}}, got {_excerpt(body)}'], what=what
        )
    problems: list[str] = []
    candidates: list[Candidate] = []
    for number, item in enumerate(data["facts"], 1):
        fields = item if isinstance(item, dict) else {}
        missing = [name for name in ("key", "value", "evidence") if not isinstance(fields.get(name), str)]
        if missing:
            lacking = ", ".join(missing)
            problems.append(f"fact {number} of the model's reply lacks a text {lacking}: {_excerpt(str(item))}")
            continue
        candidates.append(Candidate(fields["key"], fields["value"], fields["evidence"]))
    if problems:
        raise rejection(problems, what=what)
    return tuple(candidates)


class ModelWriter:
    """Asks a chat model for the declarations as JSON, from the current user message alone.

    Each call sends exactly two messages, :data:`WRITER_INSTRUCTIONS` and the user message;
    never a session.  ``call_usage`` keeps the usage of every call made, rejected ones
    included, so the cost of extraction is never lost.  ``json_mode=True`` also asks the
    endpoint for a JSON response (``response_format``), for clients that accept options.
    """

    def __init__(self, client: ChatClient, *, json_mode: bool = False, schema: FactSchema = DEFAULT_SCHEMA) -> None:
        self.client = client
        self.schema = schema
        self.instructions = writer_instructions(schema)
        self.json_mode = json_mode
        self.call_usage: list[Usage | None] = []

    def __repr__(self) -> str:
        return f"ModelWriter({self.client!r})"

    async def propose(self, user_text: str) -> Proposal:
        """The model's candidates; :class:`FactRejectedError` when its reply is unreadable.

        A failing model call raises the client's own error (:class:`ModelError`);
        :func:`extract` reports it as a rejected extraction.
        """
        problems = check_user_text(user_text, self.schema)
        if problems:
            raise rejection(problems, what="the model writer's input")
        messages = [Message.system(self.instructions), Message.user(user_text)]
        options: dict[str, Any] = {"response_format": {"type": "json_object"}} if self.json_mode else {}
        # The protocol's signature has no options; clients that take them accept keywords.
        ask: Callable[..., Awaitable[ChatResponse]] = self.client.get_response
        response = await ask(messages, **options)
        self.call_usage.append(response.usage)
        return Proposal(read_writer_reply(response.text), response.usage, 1)


class StoreCall(Protocol):
    """How a host calls its fact store: directly by default, or (the proxy) off the event loop."""

    def __call__(self, operation: Callable[[], _T]) -> Awaitable[_T]: ...


async def directly(operation: Callable[[], _T]) -> _T:
    """A :class:`StoreCall` that calls the store where it is (the default)."""
    return operation()


@traced_fact_extraction
async def extract(store: FactMemory, writer: FactWriter, ticket: Ticket, *, call: StoreCall | None = None) -> Admission:
    """Propose from the ticket's message, then apply: the whole batch or nothing.

    Any failure of the writer (invalid declarations, an unreadable reply, a model error, a bug)
    becomes a :class:`FactRejectedError`, recorded in the store's trail and nothing else; a
    stale ticket raises :class:`StaleTicketError` from ``apply``.  Cancellation propagates.
    ``call``, if given, is how the store is called (a store doing network I/O off the loop).
    """
    run: StoreCall = directly if call is None else call
    proposed = await propose(writer, ticket)
    if not isinstance(proposed, FactRejectedError):
        admission: Admission = await run(lambda: store.apply(ticket, proposed))
        return admission
    await run(lambda: store.reject(ticket, proposed))
    raise proposed


async def propose(writer: FactWriter, ticket: Ticket) -> Sequence[Candidate] | FactRejectedError:
    """The writer's candidates for the ticket's message, or the refusal any failure of the
    writer becomes (invalid declarations, an unreadable reply, a model error, a bug)."""
    try:
        candidates: Sequence[Candidate] = (await writer.propose(ticket.user_text)).candidates
    except FactRejectedError as error:
        return error
    except Exception as error:
        refused = rejection(
            [f"the fact writer {writer!r} failed: {type(error).__name__}: {error}"],
            what=f"the extraction for turn {ticket.number}",
        )
        refused.__cause__ = error
        return refused
    return candidates
