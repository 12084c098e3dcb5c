"""Storing a session turn: what the proxy does once the upstream has answered, and the answer to a
retried one.

The turn goes through the one turn writer (:func:`~contextledger.history.write_turn`, by way of
:class:`~contextledger.serve._kept.KeptSessions`, which keeps the session's copy current): the
turn id, the client's new messages, the reply and the retained history's reduction in one
atomic write, exactly once per ``Idempotency-Key``.  Then the user's facts are admitted.  A
retried turn gets the stored reply, with no upstream call and no fact admitted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from contextledger._extras import require_extra
from contextledger._forgotten import same_contents, same_input

require_extra("starlette", extra="serve", feature="contextledger serve")

from starlette.responses import Response  # noqa: E402

from contextledger.exceptions import (  # noqa: E402
    FactsError,
    HistoryError,
    InvalidMessageError,
    LeaseLostError,
    ProxyError,
    TurnOutcomeUnknownError,
)
from contextledger.facts import FactsHost, FactsTurn  # noqa: E402
from contextledger.facts._records import Ticket  # noqa: E402
from contextledger.facts._store import FactMemory  # noqa: E402
from contextledger.history import KeptHistory, StoredTurn, Turn  # noqa: E402
from contextledger.messages import Message  # noqa: E402
from contextledger.serve._errors import store_failure  # noqa: E402
from contextledger.serve._kept import KeptSessions  # noqa: E402
from contextledger.serve._metrics import Metrics  # noqa: E402
from contextledger.serve._sessions import Sessions  # noqa: E402

__all__ = [
    "FACTS_ADMITTED_HEADER",
    "FACTS_REJECTED_HEADER",
    "RESENT_HEADER",
    "SessionTurn",
    "SessionTurns",
    "facts_headers",
    "resent_length",
]

RESENT_HEADER = "x-contextledger-resent"
"""The answer header saying how many of a session turn's messages repeated the stored history
(and were therefore neither sent again nor stored again)."""


def resent_length(stored: Sequence[Message], given: Sequence[Message]) -> int:
    """How many of ``given``'s first messages repeat the session's stored history: all of it when
    ``given`` begins with every stored message (same role, same contents, as the API's reader made
    them), else 0.

    A client adopting session mode often keeps sending its whole conversation; forwarded after
    the stored history, every earlier message would reach the model twice, and twice more each
    turn.  Only role and contents are compared: ids, names and fields the API has no place for
    travel differently in a reply than in a request.  A stored message a ``forget`` rewrote still
    matches the client's copy, which holds the value: the resend is known, and the value is
    neither forwarded nor stored again.
    """
    if not stored or len(given) < len(stored):
        return 0
    return len(stored) if all(map(same_contents, stored, given)) else 0


@dataclass(frozen=True, slots=True)
class SessionTurn:
    """A turn about to be stored: the session key, its id, the history it was built on, the
    turn's input messages and the reply."""

    key: str
    turn_id: str
    before: KeptHistory
    inputs: list[Message]
    reply: tuple[Message, ...]


class SessionTurns:
    """Stores session turns and answers retried ones (see the module docstring)."""

    def __init__(self, sessions: Sessions, kept: KeptSessions, metrics: Metrics) -> None:
        self.sessions = sessions
        self.kept = kept
        self.metrics = metrics

    def replay(
        self, done: StoredTurn, new_turn: list[Message], streaming: bool, tell: Callable[[StoredTurn, bool], Response]
    ) -> Response:
        """The stored reply to a retried turn (told by ``tell``, in the API the turn came through),
        without calling the upstream or touching the facts."""
        if not same_input(done.inputs, new_turn):  # equal, or equal but for what a forget took out
            raise ProxyError(
                f"Idempotency-Key {done.turn_id!r} was already used for a turn with other messages; a key names one "
                "turn, so give each new turn a new key",
                status=422,
                code="idempotency_key_reused",
            )
        self.metrics.count(self.metrics.turns, "replayed")
        told = tell(done, streaming)
        told.headers["x-contextledger-replayed"] = "true"
        return told

    async def store(
        self,
        turn: SessionTurn,
        store: FactMemory | None,
        ticket: Ticket | None,
        told: list[FactsTurn] | None = None,
    ) -> bool:
        """Store the turn under its id (at most once) with the retained history's reduction and
        the user's facts admitted, in one atomic write where the store holds both (every built-in
        session store does), so that a crash leaves both or neither.

        ``False`` when the turn id was already stored (nothing written, nothing admitted).  A store
        failure becomes a :class:`ProxyError`: 503 saying nothing was stored, or saying the outcome
        is unknown and the retry that settles it (the same ``Idempotency-Key``); a lost hold on the
        session (the store refused the write as fenced), 409 saying nothing was stored.
        """
        host = None if store is None else FactsHost(store, host="the proxy", call=self.sessions.run_facts)
        try:
            # The writer proposes before the turn is written; what it proposes is admitted with the turn.
            facts = None if host is None or ticket is None else await host.prepare(FactsTurn(ticket))
            outcome = await self.kept.store_turn(
                Turn(turn.key, turn.turn_id, tuple(turn.inputs), turn.reply), turn.before, facts
            )
        except TurnOutcomeUnknownError:
            self.metrics.count(self.metrics.turns, "unknown")
            raise ProxyError(
                f"the turn was sent to the session store but not confirmed: it is stored once or not at all. Retry "
                f"with the header Idempotency-Key: {turn.turn_id} to get the stored reply, or run it if it was not",
                status=503,
                error_type="server_error",
                code="turn_outcome_unknown",
            ) from None
        except LeaseLostError:
            self.metrics.count(self.metrics.turns, "failed")
            raise ProxyError(
                "the turn ran longer than this proxy could keep its hold on the session (its lock's lease ran out "
                "and another request may have run meanwhile), so it was not stored and no fact was admitted; "
                f"retry with the header Idempotency-Key: {turn.turn_id}",
                status=409,
                error_type="conflict_error",
                code="session_lock_lost",
            ) from None
        except InvalidMessageError as error:  # the input was checked before the call: the reply is the upstream's
            self.metrics.count(self.metrics.turns, "failed")
            raise ProxyError(
                f"the upstream's reply cannot be stored ({error}); nothing was stored",
                status=502,
                error_type="upstream_error",
                code="upstream_invalid_response",
            ) from None
        except (HistoryError, FactsError) as error:  # the facts' store, before anything was written
            self.metrics.count(self.metrics.turns, "failed")
            raise store_failure(error, "the turn could not be stored and nothing was stored") from None
        if not outcome.stored:
            return False
        self.metrics.count(self.metrics.turns, "stored")
        finished = None if host is None else host.settled(facts)
        if finished is not None:
            self.count_facts(finished)
            if told is not None:
                told.append(finished)  # what the answer tells the client (``facts_headers``)
        return True

    def count_facts(self, facts: FactsTurn) -> None:
        if facts.admission is not None:
            self.metrics.count(self.metrics.facts, "admitted", amount=len(facts.admission.admitted))
        elif facts.rejection is not None:
            problems = getattr(facts.rejection, "problems", ()) or (str(facts.rejection),)
            self.metrics.count(self.metrics.facts, "rejected", amount=len(problems))


FACTS_ADMITTED_HEADER = "x-contextledger-facts-admitted"
FACTS_REJECTED_HEADER = "x-contextledger-facts-rejected"
_HEADER_LIMIT = 1024
_HEADER_SAFE = " !#$&'()*+,-./:;<=>?@[]^_`{|}~"


def facts_headers(facts: FactsTurn | None) -> dict[str, str]:
    """What a turn did to the facts, as response headers that leave an OpenAI client's body alone:
    the keys admitted, and each rejection with its reason (keys and reasons only, never a value;
    percent-encoded where a header could not carry it, and cut at 1 KiB with a mark)."""
    if facts is None:
        return {}
    admitted = [d.key for d in facts.diagnostics if d.outcome == "admitted" and d.key]
    if not admitted and facts.admission is not None:
        admitted = [fact.key for fact in facts.admission.admitted]
    rejected = [f"{d.key or '='}: {d.reason}" for d in facts.diagnostics if d.outcome == "rejected"]
    if facts.rejection is not None and not rejected:
        rejected = [str(facts.rejection)]
    headers = {}
    if admitted:
        headers[FACTS_ADMITTED_HEADER] = _header_text(", ".join(admitted))
    if rejected:
        headers[FACTS_REJECTED_HEADER] = _header_text("; ".join(rejected))
    return headers


def _header_text(text: str) -> str:
    encoded = quote(" ".join(text.split()), safe=_HEADER_SAFE)
    return encoded if len(encoded) <= _HEADER_LIMIT else encoded[: _HEADER_LIMIT - 3].rsplit("%", 1)[0] + "..."
