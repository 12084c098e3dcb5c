"""The proxy as an ASGI application: OpenAI's chat-completions API in front of any compatible upstream.

Stateless mode (no session header): the client sends its whole history; the configured strategy
compacts it and the projection goes upstream; nothing is kept.  Session mode (header
``X-Contextledger-Session``): the client sends only the new messages; the proxy adds the stored
history (through the request-view strategy) and the controlled-facts block, forwards, and after
a successful reply stores the turn, compacts the retained history and admits the user's facts.
A failed, timed-out or broken reply stores nothing and admits nothing.

System messages a client sends in session mode are the instructions for that call: they are put
first in the request and not stored, so a client that sends its system prompt every time (as
OpenAI clients do) does not pile up copies of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from contextledger._extras import require_extra

require_extra("starlette", extra="serve", feature="contextledger serve")
require_extra("httpx", extra="serve", feature="contextledger serve")

from starlette.applications import Starlette  # noqa: E402
from starlette.convertors import Convertor, register_url_convertor  # noqa: E402
from starlette.exceptions import HTTPException  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, PlainTextResponse, Response  # noqa: E402
from starlette.routing import Route  # noqa: E402

from contextledger.compaction import compact_with_report, resolve_tokenizer  # noqa: E402
from contextledger.cost import price_profile  # noqa: E402
from contextledger.exceptions import (  # noqa: E402
    FactsError,
    HistoryError,
    ProxyError,
)
from contextledger.facts import (  # noqa: E402
    FactMemory,
    FactsHost,
    FactsTurn,
    Ticket,
    forget_facts,
    history_target,
    place_facts_block,
)
from contextledger.messages import Message, to_openai  # noqa: E402
from contextledger.serve._config import ServeConfig  # noqa: E402
from contextledger.serve._errors import UnexpectedErrors, http_error  # noqa: E402
from contextledger.serve._health import Readiness, metrics_refusal  # noqa: E402
from contextledger.serve._kept import KeptSessions  # noqa: E402
from contextledger.serve._metrics import Metrics  # noqa: E402
from contextledger.serve._relay import Relay, completion  # noqa: E402
from contextledger.serve._replies import reply_message  # noqa: E402
from contextledger.serve._requests import (  # noqa: E402
    MessageReader,
    bad_request,
    json_object,
    open_block,
    parse_payload,
    refuse_invalid,
    turn_id_of,
    user_text,
    without_metadata,
)
from contextledger.serve._responses import ResponsesRoute  # noqa: E402
from contextledger.serve._sessions import Sessions, open_sessions, session_key  # noqa: E402
from contextledger.serve._tenants import SESSION_HEADER, earlier_session_id, session_id_of, tenant_of  # noqa: E402
from contextledger.serve._turns import SessionTurn, SessionTurns, facts_headers  # noqa: E402
from contextledger.serve._upstream import (  # noqa: E402
    Upstream,
    error_body,
    passed_back,
    upstream_error,
)
from contextledger.serve._usage import CostMeter, with_usage_requested  # noqa: E402

__all__ = ["Proxy", "create_app"]

IDEMPOTENCY_HEADER = "idempotency-key"


def _error_response(error: ProxyError | HistoryError | FactsError) -> JSONResponse:
    """The answer to a refused request; a failing session store (history or facts) is a 503."""
    if not isinstance(error, ProxyError):
        error = ProxyError(
            f"the session store failed: {error}", status=503, error_type="server_error", code="store_unavailable"
        )
    return JSONResponse(
        error_body(str(error), error.error_type, error.code), status_code=error.status, headers=error.headers
    )


class Proxy:
    """The proxy's state (configuration, upstream client, session store, metrics) and its handlers."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.strategy = config.strategy.build()
        self.retain = config.retain.build()
        self.tokenizer = resolve_tokenizer(self.strategy, None)
        self.metrics = Metrics()
        self.upstream = Upstream(
            config.upstream_base, timeout=config.upstream_timeout, upstream_key=config.upstream_key
        )
        self.relay = Relay(self.upstream, self.metrics)
        self.cost = CostMeter(self.metrics, price_profile(config.price_profile), self.tokenizer)
        self.sessions: Sessions = open_sessions(
            config.store,
            namespace=config.namespace,
            lock_timeout=config.lock_timeout,
            lock_lease=config.lock_lease,
            schema=config.fact_schema(),
        )
        self.reader = MessageReader()
        self.kept = KeptSessions(self.sessions.history, self.strategy, self.tokenizer, self.retain)
        self.turns = SessionTurns(self.sessions, self.kept, self.metrics)
        self.readiness = Readiness(self.sessions, self.upstream, check_upstream=config.ready_checks_upstream)
        self.responses_route = ResponsesRoute(self.upstream, self.metrics, self.strategy, self.tokenizer, config)

    async def close(self) -> None:
        await self.upstream.close()
        await self.sessions.close()

    # Endpoints --------------------------------------------------------------------------------

    async def chat_completions(self, request: Request) -> Response:
        mode = "session" if SESSION_HEADER in request.headers else "stateless"
        try:
            body = await self._read_body(request)
            payload = parse_payload(body)
            if mode == "session":
                response = await self._session_turn(request, payload)
            else:
                response = await self._stateless(request, payload, body)
        except (ProxyError, HistoryError, FactsError) as error:
            response = _error_response(error)
        self.metrics.count(self.metrics.requests, "chat_completions", mode, str(response.status_code))
        return response

    async def responses(self, request: Request) -> Response:
        """``POST /v1/responses``, stateless (see ``_responses.py``)."""
        try:
            body = await self._read_body(request)
            upstream_headers = self.upstream.headers(request.headers)
            response = await self.responses_route.answer(request.headers, body, upstream_headers)
        except (ProxyError, HistoryError, FactsError) as error:
            response = _error_response(error)
        self.metrics.count(self.metrics.requests, "responses", "stateless", str(response.status_code))
        return response

    async def models(self, request: Request) -> Response:
        try:
            started = time.perf_counter()
            upstream = await self.upstream.send(
                "GET", "/models", self.upstream.headers(request.headers), None, stream=False
            )
            self.metrics.observe(self.metrics.upstream_seconds, time.perf_counter() - started, "models", "answered")
            if upstream.status_code >= 400:
                raise upstream_error(upstream.status_code, upstream.content, upstream.headers)
            response: Response = Response(
                upstream.content,
                status_code=upstream.status_code,
                media_type=upstream.headers.get("content-type", "application/json"),
                headers=passed_back(upstream.headers),
            )
        except ProxyError as error:
            response = _error_response(error)
        self.metrics.count(self.metrics.requests, "models", "stateless", str(response.status_code))
        return response

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        return await self.readiness.answer()

    async def metrics_text(self, request: Request) -> Response:
        refusal = metrics_refusal(request.headers, self.config.metrics_token)
        if refusal is not None:
            return refusal
        return PlainTextResponse(self.metrics.render(), media_type="text/plain; version=0.0.4")

    # Session resources ------------------------------------------------------------------------

    async def create_session(self, request: Request) -> Response:
        async def create(tenant: str) -> Response:
            body = await self._read_body(request)
            data = json_object(body, 'a JSON object such as {"id": "support-42"}')
            session_id = session_id_of(data.get("id", uuid.uuid4().hex))
            if not await self.sessions.create(session_key(tenant, session_id)):
                raise ProxyError(
                    f"session {session_id!r} already exists",
                    status=409,
                    error_type="conflict_error",
                    code="session_exists",
                )
            return JSONResponse({"id": session_id, "object": "contextledger.session"}, status_code=201)

        return await self._resource(request, "create_session", create)

    async def session_info(self, request: Request) -> Response:
        async def info(tenant: str) -> Response:
            key, session_id = await self._known(request, tenant)
            messages = await self.sessions.history.load(key)
            facts = await self.sessions.run_facts(self.sessions.facts(key).facts)
            return JSONResponse(
                {"id": session_id, "object": "contextledger.session", "messages": len(messages), "facts": len(facts)}
            )

        return await self._resource(request, "session", info)

    async def session_messages(self, request: Request) -> Response:
        async def messages(tenant: str) -> Response:
            key, _ = await self._known(request, tenant)
            stored = await self.sessions.history.load(key)
            return JSONResponse({"object": "list", "data": to_openai(stored)})

        return await self._resource(request, "session_messages", messages)

    async def session_facts(self, request: Request) -> Response:
        """``mem``: each fact with its provenance (evidence, turn, recorded time), and the listing a person reads."""

        async def facts(tenant: str) -> Response:
            key, _ = await self._known(request, tenant)
            store = self.sessions.facts(key)
            held = await self.sessions.run_facts(store.facts)
            text = await self.sessions.run_facts(store.describe)
            data = [
                {
                    "key": f.key,
                    "value": f.value,
                    "evidence": f.evidence,
                    "turn": f.turn,
                    "recorded_at": f.recorded_at.isoformat(),
                }
                for f in held
            ]
            return JSONResponse({"object": "list", "data": data, "text": text})

        return await self._resource(request, "session_facts", facts)

    async def session_forget(self, request: Request) -> Response:
        """``forget KEY`` / ``forget``: the facts go, and so does every statement of them in the history."""

        async def forget(tenant: str) -> Response:
            body = await self._read_body(request)
            name = json_object(body, 'a JSON object such as {"key": "module"}, or {} to forget all').get("key")
            allowed = self.sessions.schema.keys
            if name is not None and (not isinstance(name, str) or name.strip().lower() not in allowed):
                raise bad_request(
                    f"cannot forget {name!r}: use one of {', '.join(sorted(allowed))}, or no "
                    "key to forget every fact; nothing was changed",
                    "invalid_fact_key",
                )
            key, _ = await self._known(request, tenant)
            async with self.sessions.lock(key):
                # The session's messages and its turn records (an Idempotency-Key retry must not
                # hand the value back), through the library's one forget.
                target = history_target(self.sessions.history, key, "session")
                try:
                    report = await forget_facts(
                        self.sessions.facts(key), name, histories=[target], run=self.sessions.run_facts
                    )
                finally:
                    self.kept.rewritten(key)  # the next turn reads the store, whatever was rewritten
            return JSONResponse(
                {
                    "object": "contextledger.forget",
                    "forgotten": [{"key": f.key, "value": f.value} for f in report.forgotten],
                    "messages_changed": report.changed_messages.get("session", 0),
                    "turns_changed": report.changed_turns.get("session", 0),
                }
            )

        return await self._resource(request, "session_forget", forget)

    async def delete_session(self, request: Request) -> Response:
        async def delete(tenant: str) -> Response:
            key, session_id = await self._address(tenant, request.path_params["session_id"])
            async with self.sessions.lock(key):
                self.kept.rewritten(key)
                existed = await self.sessions.delete(key)
                if not existed:
                    raise self._unknown(session_id)
            return JSONResponse({"id": session_id, "object": "contextledger.session", "deleted": True})

        return await self._resource(request, "delete_session", delete)

    async def _resource(
        self, request: Request, endpoint: str, handle: Callable[[str], Awaitable[Response]]
    ) -> Response:
        try:
            tenant = tenant_of(request.headers, trust_tenant_header=self.config.trust_tenant_header)
            response = await handle(tenant)
        except (ProxyError, HistoryError, FactsError) as error:
            response = _error_response(error)
        self.metrics.count(self.metrics.requests, endpoint, "session", str(response.status_code))
        return response

    async def _known(self, request: Request, tenant: str) -> tuple[str, str]:
        key, session_id = await self._address(tenant, request.path_params["session_id"])
        if not await self.sessions.exists(key):
            raise self._unknown(session_id)
        return key, session_id

    async def _address(self, tenant: str, given: str) -> tuple[str, str]:
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

    @staticmethod
    def _unknown(session_id: str) -> ProxyError:
        return ProxyError(
            f"no session {session_id!r} for this key; create it first with POST /v1/contextledger/sessions",
            status=404,
            error_type="not_found_error",
            code="session_not_found",
        )

    # Reading the request ----------------------------------------------------------------------

    async def _read_body(self, request: Request) -> bytes:
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length")
        too_big = ProxyError(
            f"the request body is larger than the proxy's limit of {limit} bytes; send a shorter history, or use a "
            "session so only the new messages travel",
            status=413,
            code="request_too_large",
        )
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_big
        chunks: list[bytes] = []

        async def read() -> None:
            size = 0
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_big
                chunks.append(chunk)

        try:
            await asyncio.wait_for(read(), self.config.read_timeout)
        except asyncio.TimeoutError:
            raise ProxyError(
                f"the request body did not arrive within {self.config.read_timeout:g} seconds; send it at once",
                status=408,
                code="request_timeout",
                headers={"connection": "close"},  # the rest of the body may still come: not another request
            ) from None
        return b"".join(chunks)

    # Stateless mode ---------------------------------------------------------------------------

    async def _stateless(self, request: Request, payload: dict[str, Any], body: bytes) -> Response:
        # Every message is read, strategy or not, so a malformed one is refused here and not upstream
        # (the reader remembers what it has read: a repeated history costs little).  With no strategy
        # the body then goes as it came.
        incoming = self.reader.read(payload["messages"])
        refuse_invalid(incoming)
        plain = without_metadata(payload["messages"])
        if plain is not None:
            payload = {**payload, "messages": plain}
            body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        keyed, hide_usage = with_usage_requested(self._cache_key(payload, request, None))
        if keyed is not payload:
            payload = keyed
            body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        if self.strategy is not None:
            result = await compact_with_report(incoming, strategy=self.strategy, tokenizer=self.tokenizer)
            incoming = result.messages
            self.metrics.count(self.metrics.tokens_before, "stateless", amount=result.before["included_tokens"])
            self.metrics.count(self.metrics.tokens_after, "stateless", amount=result.after["included_tokens"])
            if result.changed:
                messages = to_openai(result.messages)
                body = json.dumps({**payload, "messages": messages}, ensure_ascii=False).encode("utf-8")
        expected = self.cost.expect("stateless", payload, incoming)
        headers = self.upstream.headers(request.headers)
        if payload.get("stream") is True:
            usage = functools.partial(self.cost.answered, expected)
            return await self.relay.stream(headers, body, finish=None, release=None, usage=usage, hide_usage=hide_usage)
        upstream = await self.relay.call(headers, body)
        reply, _ = completion(upstream)  # one rule in both modes: a 200 that is no completion is the upstream's fault
        self.cost.answered(expected, reply.get("usage"))
        return Response(
            upstream.content,
            status_code=upstream.status_code,
            media_type=upstream.headers.get("content-type", "application/json"),
            headers=passed_back(upstream.headers),
        )

    def _cache_key(self, payload: dict[str, Any], request: Request, session: str | None) -> dict[str, Any]:
        """``payload`` with a ``prompt_cache_key`` as ``--prompt-cache-key`` asks, unless the client
        set one: OpenAI routes requests with one key to the same cache, so a session's or a
        conversation's requests find their prefix (some compatible servers refuse fields they do
        not know, hence off by default).  ``session``: a hash of the tenant and session; ``prefix``:
        a hash of the conversation's first messages (its instructions and first user message), the
        same for every request of one conversation.  Keys are hashes: nothing of the tenant's key
        or text is sent."""
        mode = self.config.prompt_cache_key
        if mode == "off" or "prompt_cache_key" in payload:
            return payload
        if mode == "session" and session is not None:
            seed = "session\0" + session
        else:
            messages = [m for m in payload["messages"] if isinstance(m, dict)]
            lead = next((i for i, m in enumerate(messages) if m.get("role") != "system"), len(messages))
            first_user = next((m for m in messages if m.get("role") == "user"), None)
            try:
                tenant = tenant_of(request.headers, trust_tenant_header=self.config.trust_tenant_header)
            except ProxyError:  # a keyless stateless client: the conversation alone names the key
                tenant = ""
            # The instructions and the first user message: what every request of the conversation
            # starts with, whatever was cut or placed (a facts block) after them.
            seed = "prefix\0" + tenant + json.dumps([*messages[:lead], first_user], sort_keys=True)
        digest = hashlib.sha256(seed.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return {**payload, "prompt_cache_key": "cl-" + digest}

    # Session mode -----------------------------------------------------------------------------

    async def _session_turn(self, request: Request, payload: dict[str, Any]) -> Response:
        tenant = tenant_of(request.headers, trust_tenant_header=self.config.trust_tenant_header)
        key, session_id = await self._address(tenant, request.headers[SESSION_HEADER])
        given_turn_id = turn_id_of(request.headers.get(IDEMPOTENCY_HEADER))
        turn_id = given_turn_id or uuid.uuid4().hex
        incoming = self.reader.read(payload["messages"])
        instructions = [message for message in incoming if message.role == "system"]
        new_turn = [message for message in incoming if message.role != "system"]
        if not new_turn:
            raise bad_request(
                "a session turn needs at least one new message besides system messages", "invalid_messages"
            )
        streaming = payload.get("stream") is True
        lock = contextlib.AsyncExitStack()
        await lock.enter_async_context(self.sessions.lock(key))
        stack: contextlib.AsyncExitStack[bool | None] | None = lock
        try:
            if not await self.sessions.exists(key):
                raise self._unknown(session_id)
            if given_turn_id is not None:
                done = await self.sessions.history.load_turn(key, turn_id)
                if done is not None:
                    return self.turns.replay(done, new_turn, streaming)
            kept = await self.kept.history(key)
            refuse_invalid(new_turn, before=open_block(kept.messages))
            view = await self.kept.request_view(key, kept.messages, new_turn)
            before = self.kept.stored_tokens(key) + sum(self.tokenizer.count_messages(new_turn))
            after = before if self.strategy is None else sum(self.tokenizer.count_messages(list(view)))
            store: FactMemory | None = self.sessions.facts(key) if self.config.facts else None
            ticket: Ticket | None = None
            outcome: list[FactsTurn] = []
            sent: list[Message] = [*instructions, *view]
            if store is not None:
                block = await self.sessions.run_facts(store.to_prompt_block)
                sent = place_facts_block(sent, Message.system(block), self.config.facts_placement)
                text = user_text(new_turn)
                if text is not None:
                    begun = await self.sessions.run_facts(lambda: self._begin(store, text))
                    if begun is not None and begun.rejection is not None:
                        outcome.append(begun)  # refused before the call: the client hears of it too
                    ticket = None if begun is None else begun.ticket
            self.metrics.count(self.metrics.tokens_before, "session", amount=before)
            self.metrics.count(self.metrics.tokens_after, "session", amount=after)
            payload = self._cache_key({**payload, "messages": to_openai(sent)}, request, key)
            payload, hide_usage = with_usage_requested(payload)
            expected = self.cost.expect("session", payload, sent, session=key)
            body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            headers = self.upstream.headers(request.headers)

            async def finish(message: dict[str, Any], reply: dict[str, Any]) -> bool:
                turn = SessionTurn(key, turn_id, kept, new_turn, reply_message(message, reply))
                return await self.turns.store(turn, store, ticket, outcome)

            def trailer() -> bytes:
                # A streamed answer's headers left before the facts were admitted: an SSE comment,
                # which clients skip, says it at the end.
                said = facts_headers(outcome[-1] if outcome else None)
                return "".join(f": {name}: {value}\n" for name, value in said.items()).encode() + b"\n" if said else b""

            if streaming:
                stack = None  # the stream releases the lock when it ends
                usage = functools.partial(self.cost.answered, expected)
                return await self.relay.stream(
                    headers,
                    body,
                    finish=finish,
                    release=lock.aclose,
                    trailer=trailer,
                    usage=usage,
                    hide_usage=hide_usage,
                )
            upstream = await self.relay.call(headers, body)
            reply, message = completion(upstream)
            self.cost.answered(expected, reply.get("usage"))
            meta = {name: reply.get(name) for name in ("id", "model", "created", "usage", "system_fingerprint")}
            meta["finish_reason"] = reply["choices"][0].get("finish_reason")
            if not await finish(message, meta):
                # Another holder stored this turn id first (its lock lease had run out): its reply stands.
                done = await self.sessions.history.load_turn(key, turn_id)
                if done is not None:
                    return self.turns.replay(done, new_turn, streaming=False)
            return Response(
                upstream.content,
                status_code=200,
                media_type=upstream.headers.get("content-type", "application/json"),
                headers={**passed_back(upstream.headers), **facts_headers(outcome[-1] if outcome else None)},
            )
        finally:
            if stack is not None:
                await stack.aclose()

    def _begin(self, store: FactMemory, text: str) -> FactsTurn | None:
        """The facts turn's ticket (the one facts host's begin); a message over the bound counts as
        rejected, and the turn goes on with the facts unchanged."""
        begun = FactsHost(store, host="the proxy").begin(text)
        if begun is not None and begun.rejection is not None:
            self.metrics.count(self.metrics.facts, "rejected")
        return begun


class _AnyText(Convertor[str]):
    """A URL part that may hold anything, ``/`` and line breaks included (``path`` stops at a line
    break): whatever a client put where a session id goes reaches the handler, which refuses it in
    words rather than as "no such endpoint"."""

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("contextledger_id", _AnyText())


def create_app(config: ServeConfig) -> Starlette:
    """The ASGI application for ``config``; its ``state.proxy`` is the :class:`Proxy` behind it."""
    proxy = Proxy(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        try:
            yield
        finally:
            await proxy.close()

    sessions = "/v1/contextledger/sessions"
    session = sessions + "/{session_id:contextledger_id}"

    app = Starlette(
        middleware=[Middleware(UnexpectedErrors)],
        exception_handlers={HTTPException: http_error},
        routes=[
            Route("/v1/chat/completions", proxy.chat_completions, methods=["POST"]),
            Route("/v1/responses", proxy.responses, methods=["POST"]),
            Route("/v1/models", proxy.models, methods=["GET"]),
            Route("/healthz", proxy.healthz, methods=["GET"]),
            Route("/readyz", proxy.readyz, methods=["GET"]),
            Route("/metrics", proxy.metrics_text, methods=["GET"]),
            Route(sessions, proxy.create_session, methods=["POST"]),
            # Most specific first: an id holding "/messages" must not be read as the messages of another.
            Route(session + "/messages", proxy.session_messages, methods=["GET"]),
            Route(session + "/facts", proxy.session_facts, methods=["GET"]),
            Route(session + "/forget", proxy.session_forget, methods=["POST"]),
            Route(session, proxy.session_info, methods=["GET"]),
            Route(session, proxy.delete_session, methods=["DELETE"]),
        ],
        lifespan=lifespan,
    )
    app.state.proxy = proxy
    return app
