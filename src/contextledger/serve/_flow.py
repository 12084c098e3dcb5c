"""A session turn, whichever API it came through: the one flow both endpoints run.

Session mode (header ``X-Contextledger-Session``): the client sends only the new messages; the
proxy adds the stored history (through the request-view strategy) and the controlled-facts block,
forwards, and after a successful reply stores the turn, compacts the retained history and admits
the user's facts (:mod:`contextledger.serve._turns`).  A failed, timed-out or broken reply stores
nothing and admits nothing.  What depends on the API (how its messages are read and written, how
its reply is read, its stream's events, how a stored reply is told again) is a
:class:`TurnFormat`: ``_chat.py`` for chat completions, ``_messages_api.py`` for Anthropic's
Messages API.
"""

from __future__ import annotations

import contextlib
import functools
import json
import uuid
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from starlette.requests import Request
from starlette.responses import Response

from contextledger.agents import RequestMessages
from contextledger.compaction import compact_with_report, opened_by_user
from contextledger.exceptions import InvalidMessageError, ProxyError
from contextledger.facts import FactsHost, FactsTurn, place_facts_block
from contextledger.facts._records import Ticket
from contextledger.facts._store import FactMemory
from contextledger.history import StoredTurn
from contextledger.history._encoding import check_storable
from contextledger.messages import Message, problems_for
from contextledger.serve._config import ServeConfig
from contextledger.serve._kept import KeptSessions
from contextledger.serve._metrics import Metrics
from contextledger.serve._overflow import harder, overflow_budget, retried_said, too_long
from contextledger.serve._relay import Relay
from contextledger.serve._requests import (
    bad_request,
    open_block,
    refuse_invalid,
    rules_refusal,
    turn_id_of,
    user_text,
)
from contextledger.serve._sessions import Sessions, session_key
from contextledger.serve._stateless import COMPACTION_HEADER, compaction_said
from contextledger.serve._tenants import SESSION_HEADER, earlier_session_id, request_tenant, session_id_of
from contextledger.serve._turns import RESENT_HEADER, SessionTurn, SessionTurns, facts_headers, resent_length
from contextledger.serve._upstream import Answer, Upstream, passed_back
from contextledger.serve._usage import CostMeter
from contextledger.tokenizers import Tokenizer

__all__ = ["IDEMPOTENCY_HEADER", "SessionFlow", "TurnFormat", "unknown_session"]

IDEMPOTENCY_HEADER = "idempotency-key"


class TurnFormat(Protocol):
    """An API as session mode needs it (see the module docstring)."""

    relay: Relay
    upstream: Upstream
    keys_in_x_api_key: bool  # whether ``x-api-key`` names the tenant too
    opens_with_user: bool  # whether the API refuses a conversation another role opens
    rules: Literal["chat", "responses", "anthropic"]  # whose structural rules its bodies keep

    def read_turn(self, payload: dict[str, Any]) -> tuple[list[Message], list[Message]]:
        """The call's instructions (sent first, never stored) and the turn's new messages."""
        ...

    def upstream_payload(
        self, payload: dict[str, Any], sent: list[Message], request: Request, session: str
    ) -> tuple[dict[str, Any], bool]:
        """What goes upstream for ``sent``, and whether usage in a stream is the proxy's to keep."""
        ...

    def answer(self, upstream: Answer) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """The upstream's reply, its message and the fields a session keeps beside it (or 502)."""
        ...

    def reply_messages(self, message: dict[str, Any], meta: dict[str, Any]) -> tuple[Message, ...]:
        """The assistant messages to store for the reply's ``message`` (a Responses API response's
        output is several items: its reasoning, calls and messages)."""
        ...

    def replay(self, done: StoredTurn, streaming: bool) -> Response:
        """A stored turn's reply, told as the first answer was (JSON or a stream)."""
        ...


def unknown_session(session_id: str) -> ProxyError:
    return ProxyError(
        f"no session {session_id!r} for this key; create it first with POST /v1/contextledger/sessions",
        status=404,
        error_type="not_found_error",
        code="session_not_found",
    )


class SessionFlow:
    """Runs session turns for every endpoint (see the module docstring)."""

    def __init__(
        self,
        config: ServeConfig,
        sessions: Sessions,
        kept: KeptSessions,
        turns: SessionTurns,
        metrics: Metrics,
        cost: CostMeter,
        tokenizer: Tokenizer,
        compacts: bool,
    ) -> None:
        self.config = config
        self.sessions = sessions
        self.kept = kept
        self.turns = turns
        self.metrics = metrics
        self.cost = cost
        self.tokenizer = tokenizer
        self.compacts = compacts

    async def address(self, tenant: str, given: str) -> tuple[str, str]:
        """The session key and id that ``given`` (a header or a URL segment) names.

        An id outside the grammar is refused, unless a session created under it by an earlier
        version exists: that one stays usable, readable and deletable wherever its id can travel.
        """
        try:
            session_id = session_id_of(given)
        except ProxyError as refusal:
            earlier = earlier_session_id(given)
            if earlier is None or not await self.sessions.exists(session_key(tenant, earlier)):
                raise refusal from None
            session_id = earlier
        return session_key(tenant, session_id), session_id

    async def turn(self, form: TurnFormat, request: Request, payload: dict[str, Any]) -> Response:
        tenant = request_tenant(
            request, trust_tenant_header=self.config.trust_tenant_header, x_api_key=form.keys_in_x_api_key
        )
        key, session_id = await self.address(tenant, request.headers[SESSION_HEADER])
        given_turn_id = turn_id_of(request.headers.get(IDEMPOTENCY_HEADER))
        turn_id = given_turn_id or uuid.uuid4().hex
        instructions, new_turn = form.read_turn(payload)
        if not new_turn:
            raise bad_request(
                "a session turn needs at least one new message besides system messages", "invalid_messages"
            )
        try:
            check_storable(new_turn)  # before the model is called: a turn that cannot be kept is not paid for
        except InvalidMessageError as error:
            raise bad_request(f"the turn cannot be stored: {error}", "invalid_messages") from None
        streaming = payload.get("stream") is True
        lock = contextlib.AsyncExitStack()
        await lock.enter_async_context(self.sessions.lock(key))
        stack: contextlib.AsyncExitStack[bool | None] | None = lock
        try:
            if not await self.sessions.exists(key):
                raise unknown_session(session_id)
            if given_turn_id is not None:
                done = await self.sessions.history.load_turn(key, turn_id)
                if done is not None:
                    # A client that resends its whole history retries with it too: the turn's own
                    # messages are its last ones.
                    retried = new_turn[-len(done.inputs) :] if len(new_turn) > len(done.inputs) else new_turn
                    return self.turns.replay(done, retried, streaming, form.replay)
            kept = await self.kept.history(key)
            # Before the validity check, which would refuse the resent history's call ids as used twice.
            resent = resent_length(kept.messages, new_turn)
            if resent:
                new_turn = new_turn[resent:]
                if not new_turn:
                    raise bad_request(
                        f"the turn's {resent} messages are the session's stored history and nothing after it: in "
                        "session mode the proxy keeps the history, so send only the new messages",
                        "nothing_new",
                    )
            resent_said = {RESENT_HEADER: str(resent)} if resent else {}
            refuse_invalid(new_turn, before=open_block(kept.messages))
            traced = form.relay.traced(payload)
            try:
                with traced.shaping():  # the request view's compaction is a child of the call it shapes
                    view = await self.kept.request_view(key, kept.messages, new_turn)
                    if form.opens_with_user and self.compacts:
                        conversation = RequestMessages((kept.messages, len(kept.messages)), (new_turn, len(new_turn)))
                        opened = opened_by_user(view, conversation, tokenizer=self.tokenizer)
                        view = view if opened is None else opened
                before = self.kept.stored_tokens(key) + sum(self.tokenizer.count_messages(new_turn))
                after = before if not self.compacts else sum(self.tokenizer.count_messages(list(view)))
                store: FactMemory | None = self.sessions.facts(key) if self.config.facts else None
                ticket: Ticket | None = None
                outcome: list[FactsTurn] = []
                sent: list[Message] = [*instructions, *view]
                facts_block: Message | None = None
                if store is not None:
                    facts_block = Message.system(await self.sessions.run_facts(store.to_prompt_block))
                    sent = place_facts_block(sent, facts_block, self.config.facts_placement)
                    text = user_text(new_turn)
                    if text is not None:
                        begun = await self.sessions.run_facts(lambda: self._begin(store, text))
                        if begun is not None and begun.rejection is not None:
                            outcome.append(begun)  # refused before the call: the client hears of it too
                        ticket = None if begun is None else begun.ticket
                self.metrics.count(self.metrics.tokens_before, "session", amount=before)
                self.metrics.count(self.metrics.tokens_after, "session", amount=after)
                given = payload
                payload, hide_usage, body = _outgoing(form, given, sent, request, key)
                headers = form.upstream.headers(request.headers)
                compaction = compaction_said(after < before)
            except BaseException as error:
                traced.failed(error, type(error).__name__)
                raise

            async def finish(message: dict[str, Any], reply: dict[str, Any]) -> bool:
                turn = SessionTurn(key, turn_id, kept, new_turn, form.reply_messages(message, reply))
                return await self.turns.store(turn, store, ticket, outcome)

            def trailer() -> bytes:
                # A streamed answer's headers left before the facts were admitted: an SSE comment,
                # which clients skip, says it at the end.
                said = facts_headers(outcome[-1] if outcome else None)
                return "".join(f": {name}: {value}\n" for name, value in said.items()).encode() + b"\n" if said else b""

            async def compact_again(failure: ProxyError) -> bool:
                """Whether the request, refused as too long, was compacted harder to be sent once more."""
                nonlocal payload, hide_usage, body, sent, traced, compaction
                if not self.config.overflow_retry:
                    return False
                retry = await self._overflowed(form, failure, instructions, view, facts_block)
                if retry is None:
                    return False
                sent, compaction = retry
                payload, hide_usage, body = _outgoing(form, given, sent, request, key)
                traced = form.relay.traced(payload)
                return True

            async def stream() -> Response:
                usage = functools.partial(self.cost.answered, self.cost.expect("session", payload, sent, session=key))
                return await form.relay.stream(
                    headers,
                    body,
                    finish=finish,
                    release=lock.aclose,
                    trailer=trailer,
                    usage=usage,
                    hide_usage=hide_usage,
                    traced=traced,
                )

            if streaming:
                try:
                    streamed = await stream()
                except ProxyError as failure:
                    if not await compact_again(failure):
                        raise
                    streamed = await stream()  # once: a second refusal goes back as it came
                stack = None  # the stream releases the lock when it ends
                streamed.headers.update({**compaction, **resent_said})
                return streamed
            try:
                upstream = await form.relay.call(headers, body, traced)
            except ProxyError as failure:
                if not await compact_again(failure):
                    raise
                upstream = await form.relay.call(headers, body, traced)
            reply, message, meta = form.answer(upstream)
            # Billed whether or not the turn is then stored; counted once the answer is sent.
            counted = self.cost.after_answer("session", payload, sent, reply.get("usage"), key, reply=reply)
            try:
                stored = await finish(message, meta)
            except BaseException:
                await counted()
                raise
            if not stored:
                # Another holder stored this turn id first (its lock lease had run out): its reply stands.
                done = await self.sessions.history.load_turn(key, turn_id)
                if done is not None:
                    await counted()
                    return self.turns.replay(done, new_turn, False, form.replay)
            return Response(
                upstream.content,
                status_code=200,
                media_type=upstream.headers.get("content-type", "application/json"),
                headers={
                    **passed_back(upstream.headers),
                    **facts_headers(outcome[-1] if outcome else None),
                    **compaction,
                    **resent_said,
                },
                background=counted,
            )
        finally:
            if stack is not None:
                await stack.aclose()

    async def _overflowed(
        self,
        form: TurnFormat,
        failure: ProxyError,
        instructions: list[Message],
        view: Sequence[Message],
        block: Message | None,
    ) -> tuple[list[Message], dict[str, str]] | None:
        """What to send again for a turn the upstream refused as too long (the request view
        compacted harder, the instructions and the facts block as they were) and the compaction
        header saying so; ``None`` when the refusal is another, or nothing can be cut."""
        refused, strategy = too_long(failure), self.kept.strategy
        if refused is None or strategy is None:
            return None
        messages = list(view)
        sent = [*instructions, *messages] if block is None else [*instructions, *messages, block]
        total = sum(self.tokenizer.count_messages(sent))
        budget = overflow_budget(refused, total)
        fixed = total - sum(self.tokenizer.count_messages(messages))
        if budget - fixed < 1:
            return None
        within = harder(strategy, self.tokenizer, budget - fixed)
        result = await compact_with_report(messages, strategy=within, tokenizer=self.tokenizer)
        if not result.changed:
            return None
        cut: list[Message] = result.messages
        if form.opens_with_user:
            opened = opened_by_user(cut, messages, tokenizer=self.tokenizer)
            cut = cut if opened is None else opened
        again: list[Message] = [*instructions, *cut]
        if block is not None:
            again = place_facts_block(again, block, self.config.facts_placement)
        return again, {COMPACTION_HEADER: retried_said(refused, budget)}

    def _begin(self, store: FactMemory, text: str) -> FactsTurn | None:
        """The facts turn's ticket (the one facts host's begin); a message over the bound counts as
        rejected, and the turn goes on with the facts unchanged."""
        begun = FactsHost(store, host="the proxy").begin(text)
        if begun is not None and begun.rejection is not None:
            self.metrics.count(self.metrics.facts, "rejected")
        return begun


def _outgoing(
    form: TurnFormat, given: dict[str, Any], sent: list[Message], request: Request, key: str
) -> tuple[dict[str, Any], bool, bytes]:
    """The upstream payload for ``sent``, whether usage in its stream is the proxy's to keep, and its bytes.

    The stored history kept the API's rules until this turn: a request that breaks one now is the
    turn's doing (an empty text block, a call id the history holds), refused before the upstream is
    paid for it and before anything is stored.
    """
    payload, hide_usage = form.upstream_payload(given, sent, request, key)
    problems = problems_for(form.rules, payload)
    if problems:
        raise rules_refusal(form.rules, problems)
    return payload, hide_usage, json.dumps(payload, ensure_ascii=False).encode("utf-8")
