"""The proxy as an ASGI application: its endpoints, and the session resources beside them.

``/v1/chat/completions`` (``_chat.py``) and ``/v1/messages`` (``_messages_api.py``, Anthropic's
Messages API, with ``--anthropic-upstream``) compact statelessly, or run session turns through the
one session flow (``_flow.py``), and so does ``/v1/responses`` (``_responses.py``).  The session
resources (create, read, facts, forget, delete) are the same whichever API a session's turns
came through.  With client keys (``_client_gate.py``) every API route answers only the clients
the keys file names, and ``SIGHUP`` reads the file again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from contextledger._extras import require_extra

require_extra("starlette", extra="serve", feature="contextledger serve")
require_extra("aiohttp", extra="serve", feature="contextledger serve")

from starlette.applications import Starlette  # noqa: E402
from starlette.convertors import Convertor, register_url_convertor  # noqa: E402
from starlette.exceptions import HTTPException  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, PlainTextResponse, Response  # noqa: E402
from starlette.routing import Route  # noqa: E402

from contextledger.compaction._apply import resolve_tokenizer  # noqa: E402
from contextledger.cost import price_profile  # noqa: E402
from contextledger.exceptions import (  # noqa: E402
    FactsError,
    HistoryError,
    ProxyError,
)
from contextledger.facts import forget_facts  # noqa: E402
from contextledger.facts._forget import history_target  # noqa: E402
from contextledger.messages import to_openai  # noqa: E402
from contextledger.serve._chat import ChatFormat  # noqa: E402
from contextledger.serve._client_gate import ClientGate, Doorkeeper  # noqa: E402
from contextledger.serve._client_keys import ClientKeys  # noqa: E402
from contextledger.serve._client_limits import ClientLimits  # noqa: E402
from contextledger.serve._config import ServeConfig  # noqa: E402
from contextledger.serve._errors import UnexpectedErrors, http_error, store_failure  # noqa: E402
from contextledger.serve._flow import SessionFlow, unknown_session  # noqa: E402
from contextledger.serve._health import Readiness, metrics_refusal  # noqa: E402
from contextledger.serve._kept import KeptSessions  # noqa: E402
from contextledger.serve._messages_api import (  # noqa: E402
    MessagesFormat,
    anthropic_error_response,
    parse_messages_payload,
)
from contextledger.serve._metrics import Metrics  # noqa: E402
from contextledger.serve._relay import Relay  # noqa: E402
from contextledger.serve._requests import (  # noqa: E402
    bad_request,
    json_object,
    parse_payload,
)
from contextledger.serve._responses import ResponsesFormat, parse_responses_payload  # noqa: E402
from contextledger.serve._sessions import Sessions, open_sessions, session_key  # noqa: E402
from contextledger.serve._stateless import StatelessFlow  # noqa: E402
from contextledger.serve._tenants import SESSION_HEADER, request_tenant, session_id_of  # noqa: E402
from contextledger.serve._turns import SessionTurns  # noqa: E402
from contextledger.serve._upstream import (  # noqa: E402
    Upstream,
    error_body,
    passed_back,
    upstream_error,
)
from contextledger.serve._usage import CostMeter  # noqa: E402

__all__ = ["Proxy", "create_app"]

IDEMPOTENCY_HEADER = "idempotency-key"
_log = logging.getLogger("uvicorn.error")


def _error_response(error: ProxyError | HistoryError | FactsError) -> JSONResponse:
    """The answer to a refused request; a failing session store (history or facts) is a 503."""
    if not isinstance(error, ProxyError):
        error = store_failure(error, "the session store failed")
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
        self.doorkeeper: Doorkeeper | None = None
        if config.client_keys is not None:
            limits = ClientLimits(config.client_rpm, config.client_concurrency)
            self.doorkeeper = Doorkeeper(ClientKeys(config.client_keys), limits, self.metrics)
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
            redis_replicas=config.redis_replicas,
            schema=config.fact_schema(),
        )
        self.kept = KeptSessions(
            self.sessions.history, self.strategy, self.tokenizer, self.retain, limit=config.kept_session_bytes
        )
        self.turns = SessionTurns(self.sessions, self.kept, self.metrics)
        self.flow = SessionFlow(
            config,
            self.sessions,
            self.kept,
            self.turns,
            self.metrics,
            self.cost,
            self.tokenizer,
            self.strategy is not None,
        )
        self.stateless = StatelessFlow(
            self.metrics, self.cost, self.strategy, self.tokenizer, overflow_retry=config.overflow_retry
        )
        self.chat = ChatFormat(config, self.upstream, self.relay)
        self.anthropic: MessagesFormat | None = None
        if config.anthropic_upstream is not None:
            anthropic = Upstream(
                config.anthropic_upstream,
                timeout=config.upstream_timeout,
                upstream_key=config.upstream_key,
                anthropic=True,
            )
            self.anthropic = MessagesFormat(config, anthropic, self.metrics)
        self.readiness = Readiness(self.sessions, self.upstream, check_upstream=config.ready_checks_upstream)
        self.responses_api = ResponsesFormat(config, self.upstream, self.metrics)

    async def close(self) -> None:
        await self.upstream.close()
        if self.anthropic is not None:
            await self.anthropic.upstream.close()
        await self.sessions.close()

    # Endpoints --------------------------------------------------------------------------------

    async def chat_completions(self, request: Request) -> Response:
        mode = "session" if SESSION_HEADER in request.headers else "stateless"
        try:
            body = await self._read_body(request)
            if mode == "session":
                response = await self.flow.turn(self.chat, request, parse_payload(body))
            else:
                response = await self.stateless.request(self.chat, request, body)
        except (ProxyError, HistoryError, FactsError) as error:
            response = _error_response(error)
        self.metrics.count(self.metrics.requests, "chat_completions", mode, str(response.status_code))
        return response

    async def messages(self, request: Request) -> Response:
        """``POST /v1/messages``: Anthropic's Messages API (``_messages_api.py``), through the same flows."""
        mode = "session" if SESSION_HEADER in request.headers else "stateless"
        try:
            form = self._anthropic()
            body = await self._read_body(request)
            if mode == "session":
                response = await self.flow.turn(form, request, parse_messages_payload(body))
            else:
                response = await self.stateless.request(form, request, body)
        except (ProxyError, HistoryError, FactsError) as error:
            response = anthropic_error_response(error)
        self.metrics.count(self.metrics.requests, "messages", mode, str(response.status_code))
        return response

    async def count_tokens(self, request: Request) -> Response:
        """``POST /v1/messages/count_tokens``, passed through."""
        try:
            form = self._anthropic()
            response = await form.count_tokens(request, await self._read_body(request))
        except ProxyError as error:
            response = anthropic_error_response(error)
        self.metrics.count(self.metrics.requests, "count_tokens", "stateless", str(response.status_code))
        return response

    def _anthropic(self) -> MessagesFormat:
        if self.anthropic is None:
            raise ProxyError(
                "this proxy has no Anthropic upstream: start it with --anthropic-upstream URL to serve /v1/messages",
                status=404,
                error_type="not_found_error",
                code="no_anthropic_upstream",
            )
        return self.anthropic

    async def responses(self, request: Request) -> Response:
        """``POST /v1/responses``: OpenAI's Responses API (``_responses.py``), through the same flows."""
        mode = "session" if SESSION_HEADER in request.headers else "stateless"
        try:
            body = await self._read_body(request)
            if mode == "session":
                response = await self.flow.turn(self.responses_api, request, parse_responses_payload(body))
            else:
                response = await self.stateless.request(self.responses_api, request, body)
        except (ProxyError, HistoryError, FactsError) as error:
            response = _error_response(error)
        self.metrics.count(self.metrics.requests, "responses", mode, str(response.status_code))
        return response

    async def models(self, request: Request) -> Response:
        try:
            started = time.perf_counter()
            upstream = await self.upstream.send("GET", "/models", self.upstream.headers(request.headers), None)
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
            key, session_id = await self.flow.address(tenant, request.path_params["session_id"])
            async with self.sessions.lock(key):
                self.kept.rewritten(key)
                existed = await self.sessions.delete(key)
                if not existed:
                    raise unknown_session(session_id)
            return JSONResponse({"id": session_id, "object": "contextledger.session", "deleted": True})

        return await self._resource(request, "delete_session", delete)

    async def _resource(
        self, request: Request, endpoint: str, handle: Callable[[str], Awaitable[Response]]
    ) -> Response:
        try:
            # Bearer or x-api-key, as on /v1/messages: Anthropic's clients send their key so, and one
            # key is one tenant whichever header carries it.
            tenant = request_tenant(request, trust_tenant_header=self.config.trust_tenant_header, x_api_key=True)
            response = await handle(tenant)
        except (ProxyError, HistoryError, FactsError) as error:
            response = _error_response(error)
        self.metrics.count(self.metrics.requests, endpoint, "session", str(response.status_code))
        return response

    async def _known(self, request: Request, tenant: str) -> tuple[str, str]:
        key, session_id = await self.flow.address(tenant, request.path_params["session_id"])
        if not await self.sessions.exists(key):
            raise unknown_session(session_id)
        return key, session_id

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
            await _within(self.config.read_timeout, read())
        except asyncio.TimeoutError:
            raise ProxyError(
                f"the request body did not arrive within {self.config.read_timeout:g} seconds; send it at once",
                status=408,
                code="request_timeout",
                headers={"connection": "close"},  # the rest of the body may still come: not another request
            ) from None
        return b"".join(chunks)


async def _within(seconds: float, work: Coroutine[Any, Any, None]) -> None:
    """Await ``work`` for at most ``seconds`` (``asyncio.TimeoutError`` after), in the caller's
    task where Python allows: ``wait_for`` runs it as a task of its own, which every request
    would pay for in a task made and a turn of the event loop."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            await work
    else:
        await asyncio.wait_for(work, seconds)


def _on_sighup(reload: Callable[[], None]) -> bool:
    """Run ``reload`` on ``SIGHUP`` in the serving loop; ``False`` where signals cannot be caught
    there (Windows, a loop outside the main thread), which the log says: the keys then change only
    with a restart."""
    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload)
    except (NotImplementedError, RuntimeError, ValueError, AttributeError):
        _log.warning("client keys are read once: this process cannot catch SIGHUP to read them again")
        return False
    return True


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
        reloading = proxy.doorkeeper is not None and _on_sighup(proxy.doorkeeper.reload)
        try:
            yield
        finally:
            if reloading:
                asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
            await proxy.close()

    sessions = "/v1/contextledger/sessions"
    session = sessions + "/{session_id:contextledger_id}"

    gate = [] if proxy.doorkeeper is None else [Middleware(ClientGate, doorkeeper=proxy.doorkeeper)]
    app = Starlette(
        middleware=[Middleware(UnexpectedErrors), *gate],
        exception_handlers={HTTPException: http_error},
        routes=[
            Route("/v1/chat/completions", proxy.chat_completions, methods=["POST"]),
            Route("/v1/responses", proxy.responses, methods=["POST"]),
            Route("/v1/messages", proxy.messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", proxy.count_tokens, methods=["POST"]),
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
