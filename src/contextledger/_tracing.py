"""OpenTelemetry spans for compaction, agent runs, model calls, the proxy's upstream calls and fact
admissions.

Tracing costs nothing unless the application uses OpenTelemetry: each traced call first looks
whether ``opentelemetry.trace`` is already imported (one dictionary lookup).  An application that
exports traces has imported it to set its tracer provider; one that has not gets no span and no
import, so ``import contextledger`` and every call stay free of the package (the ``otel`` extra).

Model calls and agent runs are spans of the OpenTelemetry GenAI semantic conventions, so backends
that group, cost and chart by them read ours as they read any instrumented SDK's:

- a model call is a CLIENT span ``chat {model}`` with ``gen_ai.operation.name``,
  ``gen_ai.provider.name`` (the client's ``provider_name``), ``gen_ai.request.model``, the request
  settings it was sent with, ``server.address`` and ``server.port`` for a client over the network,
  and from the answer ``gen_ai.response.model``, ``gen_ai.response.id``,
  ``gen_ai.response.finish_reasons`` and the usage the provider reported (its prompt cache as
  ``gen_ai.usage.cache_read.input_tokens`` and ``gen_ai.usage.cache_creation.input_tokens``, both
  part of the input tokens as the conventions ask);
- an agent run is an ``invoke_agent {name}`` span with the agent's name, its client's provider and
  model, and ``gen_ai.conversation.id`` (the session), which every span under it carries too;
- counts we estimated rather than were told (the offline model's) are under
  ``contextledger.usage.estimated.*``, never under ``gen_ai.usage.*``: a backend that prices
  reported usage must not price a guess.  Usage nobody reported is left unset.

What the conventions have no name for (compaction, facts) is under ``contextledger.*``.

A host that shapes a request before sending it (an agent whose providers compact, a client wrapped
with its providers) opens the call's span first, with :func:`traced_model_request`, so the
compaction is a child of the call it shaped; the traced client then fills that span in instead of
opening its own.
"""

from __future__ import annotations

import functools
import sys
import urllib.parse
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sized
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar

__all__ = [
    "ESTIMATED_INPUT_TOKENS",
    "ESTIMATED_OUTPUT_TOKENS",
    "PROVIDER_COMPACTIONS",
    "PROVIDER_COMPACTION_INPUT_TOKENS",
    "PROVIDER_COMPACTION_OUTPUT_TOKENS",
    "TRACER_NAME",
    "ModelCallTrace",
    "trace_written_admission",
    "traced_agent_run",
    "traced_compaction",
    "traced_fact_extraction",
    "traced_index_compaction",
    "traced_model_call",
    "traced_model_request",
]

TRACER_NAME = "contextledger"
"""The instrumentation scope every span is recorded under."""

ESTIMATED_INPUT_TOKENS = "contextledger.usage.estimated.input_tokens"
"""Input tokens a client counted itself (an estimate), kept apart from the provider's reported usage."""

ESTIMATED_OUTPUT_TOKENS = "contextledger.usage.estimated.output_tokens"
"""Output tokens a client counted itself (an estimate)."""

PROVIDER_COMPACTIONS = "contextledger.usage.provider_compactions"
"""How many times the provider compacted the conversation on its servers during the call (the
GenAI conventions name no such figure)."""

PROVIDER_COMPACTION_INPUT_TOKENS = "contextledger.usage.provider_compaction.input_tokens"
"""Input tokens the provider's own compaction read and billed apart from the call's
``gen_ai.usage.input_tokens`` (Anthropic's ``usage.iterations`` of type ``compaction``)."""

PROVIDER_COMPACTION_OUTPUT_TOKENS = "contextledger.usage.provider_compaction.output_tokens"
"""Output tokens (the summary) the provider's own compaction wrote and billed apart."""

_CONVERSATION_ID = "gen_ai.conversation.id"

Params = ParamSpec("Params")
Result = TypeVar("Result")

# The conversation of the span being recorded, handed to every span started under it.
_conversation: ContextVar[str | None] = ContextVar("contextledger_trace_conversation", default=None)


def _tracer() -> Any | None:
    """The tracer, or None when the application has not loaded OpenTelemetry (then nothing is traced)."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    return trace.get_tracer(TRACER_NAME)


def _failed(span: Any, error: BaseException, error_type: str | None = None) -> None:
    from opentelemetry.trace import Status, StatusCode  # noqa: PLC0415  (loaded: _tracer checked)

    span.record_exception(error)
    span.set_attribute("error.type", error_type or type(error).__qualname__)
    span.set_status(Status(StatusCode.ERROR, str(error)))


def _present(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes that have a value, with the conversation of the span they are recorded under."""
    present = {key: value for key, value in attributes.items() if value is not None}
    conversation = present.get(_CONVERSATION_ID) or _conversation.get()
    if conversation is not None:
        present[_CONVERSATION_ID] = conversation
    return present


@contextmanager
def _span(tracer: Any, name: str, attributes: Mapping[str, Any], *, client: bool = False) -> Iterator[Any]:
    """A current span that records an exception (and an error status) before letting it through;
    the spans started under it carry its conversation."""
    from opentelemetry.trace import SpanKind  # noqa: PLC0415  (loaded: _tracer checked)

    recorded = _present(attributes)
    kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
    with tracer.start_as_current_span(
        name, kind=kind, attributes=recorded, record_exception=False, set_status_on_exception=False
    ) as span:
        token = _conversation.set(recorded.get(_CONVERSATION_ID))
        try:
            yield span
        except BaseException as error:
            _failed(span, error)
            raise
        finally:
            _conversation.reset(token)


def _set(span: Any, attributes: Mapping[str, Any]) -> None:
    for key, value in attributes.items():
        if value is not None:
            span.set_attribute(key, value)


Describe = Callable[[tuple[Any, ...], Mapping[str, Any]], tuple[str, dict[str, Any]]]
Outcome = Callable[[Any], Mapping[str, Any]]


def _traced(
    describe: Describe, outcome: Outcome
) -> Callable[[Callable[Params, Coroutine[Any, Any, Result]]], Callable[Params, Coroutine[Any, Any, Result]]]:
    """A decorator that wraps an async call in an internal span: ``describe`` names it from the
    call's arguments, ``outcome`` adds attributes read from its result (``None`` values are left unset)."""

    def decorate(
        function: Callable[Params, Coroutine[Any, Any, Result]],
    ) -> Callable[Params, Coroutine[Any, Any, Result]]:
        @functools.wraps(function)
        async def traced(*args: Params.args, **kwargs: Params.kwargs) -> Result:
            tracer = _tracer()
            if tracer is None:
                return await function(*args, **kwargs)
            name, attributes = describe(args, kwargs)
            with _span(tracer, name, attributes) as span:
                result = await function(*args, **kwargs)
                _set(span, outcome(result))
                return result

        return traced

    return decorate


# What the attributes say -------------------------------------------------------------------------


def _usage(usage: Any) -> dict[str, Any]:
    """A call's or a run's usage: the provider's report under the conventions' names, an estimate
    under ours (and only its totals: an estimate has no cache to report)."""
    if usage is None:
        return {}
    if getattr(usage, "is_estimate", False):
        return {
            ESTIMATED_INPUT_TOKENS: getattr(usage, "input_tokens", None),
            ESTIMATED_OUTPUT_TOKENS: getattr(usage, "output_tokens", None),
        }
    compaction = getattr(usage, "compaction", None)
    return {
        "gen_ai.usage.input_tokens": getattr(usage, "input_tokens", None),
        "gen_ai.usage.output_tokens": getattr(usage, "output_tokens", None),
        "gen_ai.usage.cache_read.input_tokens": getattr(usage, "cache_read_tokens", None),
        "gen_ai.usage.cache_creation.input_tokens": getattr(usage, "cache_write_tokens", None),
        PROVIDER_COMPACTIONS: getattr(usage, "compactions", None),
        PROVIDER_COMPACTION_INPUT_TOKENS: getattr(compaction, "input_tokens", None),
        PROVIDER_COMPACTION_OUTPUT_TOKENS: getattr(compaction, "output_tokens", None),
    }


def _identity(client: object) -> tuple[str, str | None]:
    """A client's provider (its ``provider_name``; a client of the application's own that names none
    is known by its class) and its model, if it names one."""
    provider = getattr(client, "provider_name", None)
    model = getattr(client, "model", None)
    return (
        provider if isinstance(provider, str) and provider else type(client).__name__,
        model if isinstance(model, str) and model else None,
    )


def _server(base_url: object) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of a client's base URL (the scheme's port if it names none)."""
    if not isinstance(base_url, str):
        return {}
    parts = urllib.parse.urlsplit(base_url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname:
        return {}
    if port is None:
        port = {"https": 443, "http": 80}.get(parts.scheme)
    return {"server.address": parts.hostname, "server.port": port}


_NUMERIC_SETTINGS = (
    ("max_tokens", "gen_ai.request.max_tokens"),
    ("max_completion_tokens", "gen_ai.request.max_tokens"),
    ("max_output_tokens", "gen_ai.request.max_tokens"),
    ("temperature", "gen_ai.request.temperature"),
    ("top_p", "gen_ai.request.top_p"),
    ("top_k", "gen_ai.request.top_k"),
    ("seed", "gen_ai.request.seed"),
    ("frequency_penalty", "gen_ai.request.frequency_penalty"),
    ("presence_penalty", "gen_ai.request.presence_penalty"),
)
_JSON_FORMATS = frozenset({"json_object", "json_schema"})


def _request_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The conventions' request attributes for the settings a request was sent with (an option of a
    client's call, or a field of a body the proxy forwards), in any API's spelling; a value of
    the wrong type is left out rather than recorded as something it is not."""
    attributes: dict[str, Any] = {}
    for option, attribute in _NUMERIC_SETTINGS:
        value = settings.get(option)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            attributes[attribute] = value
    stop = settings.get("stop", settings.get("stop_sequences"))
    if isinstance(stop, str):
        stop = [stop]
    if isinstance(stop, list) and stop and all(isinstance(item, str) for item in stop):
        attributes["gen_ai.request.stop_sequences"] = stop
    choices = settings.get("n")
    if isinstance(choices, int) and not isinstance(choices, bool) and choices != 1:
        attributes["gen_ai.request.choice.count"] = choices
    text = settings.get("text")
    requested = settings.get("response_format") or (text.get("format") if isinstance(text, Mapping) else None)
    kind = requested.get("type") if isinstance(requested, Mapping) else None
    if kind in _JSON_FORMATS:
        attributes["gen_ai.output.type"] = "json"
    elif kind == "text":
        attributes["gen_ai.output.type"] = "text"
    return attributes


def _model_call(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    client, messages = args[0], args[1] if len(args) > 1 else kwargs.get("messages")
    provider, model = _identity(client)
    sent = getattr(client, "request_settings", None)
    settings = {**(sent if isinstance(sent, Mapping) else {}), **kwargs}
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
        **_server(getattr(client, "base_url", None)),
        **_request_settings(settings),
        "contextledger.request.messages": len(messages) if isinstance(messages, Sized) else None,
    }
    return ("chat" if model is None else f"chat {model}"), attributes


def _answer(response: Any) -> dict[str, Any]:
    """What a chat client's answer says about itself: the model that answered, its id, why it stopped."""
    model = getattr(response, "model", None)
    response_id = getattr(response, "response_id", None)
    reasons = getattr(response, "finish_reasons", None)
    return {
        "gen_ai.response.model": model if isinstance(model, str) and model else None,
        "gen_ai.response.id": response_id if isinstance(response_id, str) and response_id else None,
        "gen_ai.response.finish_reasons": list(reasons) if reasons else None,
        **_usage(getattr(response, "usage", None)),
    }


def _compaction(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    strategy = kwargs.get("strategy")
    name = getattr(strategy, "name", None) or ("none" if strategy is None else type(strategy).__name__)
    return "contextledger.compaction", {"contextledger.compaction.strategy": name}


def _compaction_outcome(result: Any) -> dict[str, Any]:
    return _compacted(
        getattr(result, "before", {}),
        getattr(result, "after", {}),
        getattr(getattr(result, "index", None), "tokenizer", None),
        len(getattr(result, "events", ())),
    )


def _compacted(before: Mapping[str, int], after: Mapping[str, int], tokenizer: Any, steps: int) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    for metric, label in (
        ("included_messages", "messages"),
        ("included_tokens", "tokens"),
        ("included_groups", "groups"),
    ):
        attributes[f"contextledger.compaction.{label}.before"] = before.get(metric)
        attributes[f"contextledger.compaction.{label}.after"] = after.get(metric)
    if "included_groups" in before and "included_groups" in after:
        attributes["contextledger.compaction.groups.excluded"] = before["included_groups"] - after["included_groups"]
    attributes["contextledger.compaction.steps"] = steps
    attributes["contextledger.tokenizer.name"] = getattr(tokenizer, "name", None)
    attributes["contextledger.tokenizer.is_estimate"] = getattr(tokenizer, "is_estimate", None)
    return attributes


def _agent_run(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    agent = args[0]
    name = getattr(agent, "name", None) or type(agent).__name__
    provider, model = _identity(getattr(agent, "client", None))
    session_id = getattr(kwargs.get("session"), "session_id", None)
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": provider,
        "gen_ai.agent.name": name,
        "gen_ai.request.model": model,
        _CONVERSATION_ID: session_id if isinstance(session_id, str) else None,
    }
    return f"invoke_agent {name}", attributes


def _agent_outcome(response: Any) -> dict[str, Any]:
    return {
        **_usage(getattr(response, "usage", None)),
        "contextledger.agent.model_calls": len(getattr(response, "model_calls", ())),
    }


def _extraction(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    writer = args[1] if len(args) > 1 else kwargs.get("writer")
    return "contextledger.facts.admission", {"contextledger.facts.writer": type(writer).__name__}


def _admission(admission: Any) -> dict[str, Any]:
    return {
        f"contextledger.facts.{field}": [fact.key for fact in getattr(admission, field, ())]
        for field in ("admitted", "replaced", "evicted")
    }


# Decorators and hooks -----------------------------------------------------------------------------

traced_compaction = _traced(_compaction, _compaction_outcome)
"""Trace ``compact_with_report``: strategy, messages, tokens and groups before and after, groups excluded."""

traced_agent_run = _traced(_agent_run, _agent_outcome)
"""Trace ``Agent.run`` as a GenAI ``invoke_agent {name}`` span; model calls and compaction nest under it."""

traced_fact_extraction = _traced(_extraction, _admission)
"""Trace one extraction (writer proposal, then admission): the keys admitted, replaced and evicted,
or the refusal (the span then carries the error)."""


async def traced_index_compaction(strategy: Any, index: Any) -> None:
    """Run ``strategy`` on an index a host keeps between calls (an agent's request view), traced as
    :data:`traced_compaction` traces a compaction of a message list."""
    tracer = _tracer()
    if tracer is None:
        await strategy.compact(index)
        return
    name, attributes = _compaction((), {"strategy": strategy})
    before, steps = index.metrics(), len(index.events)
    with _span(tracer, name, attributes) as span:
        await strategy.compact(index)
        _set(span, _compacted(before, index.metrics(), index.tokenizer, len(index.events) - steps))


class ModelCallTrace:
    """A model call whose span a host opened before shaping its request (see :func:`traced_model_request`).

    The call is sent with :meth:`answer`: the first traced client called from there fills this
    span in; a client that traces nothing leaves it to :meth:`answer`, which records what its
    response says.
    """

    def __init__(self, span: Any | None) -> None:
        self.span = span
        self.sending = False  # the request is shaped: the next traced client call is this call
        self.filled = False

    async def answer(self, pending: Awaitable[Result]) -> Result:
        """Await the client's call, the request now shaped; the response as it came."""
        self.sending = True
        try:
            response = await pending
        finally:
            self.sending = False
        if self.span is not None and not self.filled:
            self.filled = True
            _set(self.span, _answer(response))
        return response


# The call a host opened and has not sent yet, for the client it sends it with to fill in.
_opened_call: ContextVar[ModelCallTrace | None] = ContextVar("contextledger_trace_model_call", default=None)


@contextmanager
def traced_model_request(client: object) -> Iterator[ModelCallTrace]:
    """The span of the model call about to be made with ``client``, opened now so the work that
    shapes its request (a compaction) is traced as its child.  Inside another host's open call (a
    client wrapped with its providers, called by an agent) it is that call, shaped some more."""
    opened = _opened_call.get()
    if opened is not None and opened.sending:
        opened.sending = False
        yield opened
        return
    tracer = _tracer()
    if tracer is None:
        yield ModelCallTrace(None)
        return
    name, attributes = _model_call((client,), {})
    with _span(tracer, name, attributes, client=True) as span:
        call = ModelCallTrace(span)
        token = _opened_call.set(call)
        try:
            yield call
        finally:
            _opened_call.reset(token)


def traced_model_call(
    function: Callable[Params, Coroutine[Any, Any, Result]],
) -> Callable[Params, Coroutine[Any, Any, Result]]:
    """Trace a chat client's ``get_response`` as a GenAI ``chat {model}`` CLIENT span (see the module
    docstring); called to send a call a host opened, it fills that span in."""

    @functools.wraps(function)
    async def traced(*args: Params.args, **kwargs: Params.kwargs) -> Result:
        tracer = _tracer()
        if tracer is None:
            return await function(*args, **kwargs)
        name, attributes = _model_call(args, kwargs)
        opened = _opened_call.get()
        if opened is not None and opened.sending and opened.span is not None:
            opened.sending = False
            opened.filled = True
            opened.span.update_name(name)
            _set(opened.span, attributes)
            response = await function(*args, **kwargs)  # a failure is recorded by the span's opener
            _set(opened.span, _answer(response))
            return response
        with _span(tracer, name, attributes, client=True) as span:
            response = await function(*args, **kwargs)
            _set(span, _answer(response))
            return response

    return traced


def trace_written_admission(writer: object, started_ns: int, admission: Any, problem: BaseException | None) -> None:
    """The span of an admission written in its turn's own atomic step (the writer asked before the
    turn, the facts written with it): named and described as :data:`traced_fact_extraction`'s,
    from ``started_ns`` (``time.time_ns()`` when the writer was asked) to now."""
    tracer = _tracer()
    if tracer is None:
        return
    name, attributes = _extraction((None, writer), {})
    span = tracer.start_span(name, attributes=_present(attributes), start_time=started_ns)
    try:
        if problem is None:
            _set(span, _admission(admission))
        else:
            _failed(span, problem)
    finally:
        span.end()
