"""OpenTelemetry spans for compaction, agent runs, model calls and fact admissions.

Tracing costs nothing unless the application uses OpenTelemetry: each traced call first looks
whether ``opentelemetry.trace`` is already imported (one dictionary lookup).  An application that
exports traces has imported it to set its tracer provider; one that has not gets no span and no
import, so ``import contextledger`` and every call stay free of the package (the ``otel`` extra).

Span names and attributes follow the OpenTelemetry GenAI semantic conventions where they apply
(``invoke_agent {name}`` and ``chat {model}`` spans with ``gen_ai.operation.name``,
``gen_ai.agent.name``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens``,
``gen_ai.usage.output_tokens``, and the provider's prompt cache as
``gen_ai.usage.cache_read.input_tokens`` and ``gen_ai.usage.cache_creation.input_tokens``, both
part of the input tokens as the conventions ask); what they have no name for (compaction, facts)
is under ``contextledger.*``.  Usage a provider did not report is left unset, never guessed.

Each hook is a decorator, so a call site gains tracing with one line and keeps its own code.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sized
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

__all__ = [
    "TRACER_NAME",
    "trace_written_admission",
    "traced_agent_run",
    "traced_compaction",
    "traced_fact_extraction",
    "traced_model_call",
]

TRACER_NAME = "contextledger"
"""The instrumentation scope every span is recorded under."""

Params = ParamSpec("Params")
Result = TypeVar("Result")


def _tracer() -> Any | None:
    """The tracer, or None when the application has not loaded OpenTelemetry (then nothing is traced)."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    return trace.get_tracer(TRACER_NAME)


@contextmanager
def _span(tracer: Any, name: str, attributes: Mapping[str, Any]) -> Iterator[Any]:
    """A current span that records an exception (and an error status) before letting it through."""
    with tracer.start_as_current_span(
        name, attributes=dict(attributes), record_exception=False, set_status_on_exception=False
    ) as span:
        try:
            yield span
        except BaseException as error:
            from opentelemetry.trace import Status, StatusCode  # noqa: PLC0415  (loaded: _tracer checked)

            span.record_exception(error)
            span.set_attribute("error.type", type(error).__qualname__)
            span.set_status(Status(StatusCode.ERROR, str(error)))
            raise


def _set(span: Any, attributes: Mapping[str, Any]) -> None:
    for key, value in attributes.items():
        if value is not None:
            span.set_attribute(key, value)


Describe = Callable[[tuple[Any, ...], Mapping[str, Any]], tuple[str, dict[str, Any]]]
Outcome = Callable[[Any], Mapping[str, Any]]


def _traced(
    describe: Describe, outcome: Outcome
) -> Callable[[Callable[Params, Coroutine[Any, Any, Result]]], Callable[Params, Coroutine[Any, Any, Result]]]:
    """A decorator that wraps an async call in a span: ``describe`` names it from the call's
    arguments, ``outcome`` adds attributes read from its result (``None`` values are left unset)."""

    def decorate(
        function: Callable[Params, Coroutine[Any, Any, Result]],
    ) -> Callable[Params, Coroutine[Any, Any, Result]]:
        @functools.wraps(function)
        async def traced(*args: Params.args, **kwargs: Params.kwargs) -> Result:
            tracer = _tracer()
            if tracer is None:
                return await function(*args, **kwargs)
            name, attributes = describe(args, kwargs)
            with _span(tracer, name, {key: value for key, value in attributes.items() if value is not None}) as span:
                result = await function(*args, **kwargs)
                _set(span, outcome(result))
                return result

        return traced

    return decorate


def _compaction(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    strategy = kwargs.get("strategy")
    name = getattr(strategy, "name", None) or ("none" if strategy is None else type(strategy).__name__)
    return "contextledger.compaction", {"contextledger.compaction.strategy": name}


def _compaction_outcome(result: Any) -> dict[str, Any]:
    before: Mapping[str, int] = getattr(result, "before", {})
    after: Mapping[str, int] = getattr(result, "after", {})
    tokenizer = getattr(getattr(result, "index", None), "tokenizer", None)
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
    attributes["contextledger.compaction.steps"] = len(getattr(result, "events", ()))
    attributes["contextledger.tokenizer.name"] = getattr(tokenizer, "name", None)
    attributes["contextledger.tokenizer.is_estimate"] = getattr(tokenizer, "is_estimate", None)
    return attributes


def _usage(result: Any) -> dict[str, Any]:
    usage = getattr(result, "usage", None)
    return {
        "gen_ai.usage.input_tokens": getattr(usage, "input_tokens", None),
        "gen_ai.usage.output_tokens": getattr(usage, "output_tokens", None),
        "gen_ai.usage.cache_read.input_tokens": getattr(usage, "cache_read_tokens", None),
        "gen_ai.usage.cache_creation.input_tokens": getattr(usage, "cache_write_tokens", None),
    }


def _model_call(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    client, messages = args[0], args[1] if len(args) > 1 else kwargs.get("messages")
    model = getattr(client, "model", None)
    model = model if isinstance(model, str) else type(client).__name__
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "contextledger.request.messages": len(messages) if isinstance(messages, Sized) else None,
    }
    return f"chat {model}", attributes


def _agent_run(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    agent = args[0]
    name = getattr(agent, "name", None) or type(agent).__name__
    session_id = getattr(kwargs.get("session"), "session_id", None)
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": name,
        "gen_ai.conversation.id": session_id if isinstance(session_id, str) else None,
    }
    return f"invoke_agent {name}", attributes


def _agent_outcome(response: Any) -> dict[str, Any]:
    return {**_usage(response), "contextledger.agent.model_calls": len(getattr(response, "model_calls", ()))}


def _extraction(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    writer = args[1] if len(args) > 1 else kwargs.get("writer")
    return "contextledger.facts.admission", {"contextledger.facts.writer": type(writer).__name__}


def _admission(admission: Any) -> dict[str, Any]:
    return {
        f"contextledger.facts.{field}": [fact.key for fact in getattr(admission, field, ())]
        for field in ("admitted", "replaced", "evicted")
    }


traced_compaction = _traced(_compaction, _compaction_outcome)
"""Trace ``compact_with_report``: strategy, messages, tokens and groups before and after, groups excluded."""

traced_model_call = _traced(_model_call, _usage)
"""Trace a chat client's ``get_response`` as a GenAI ``chat {model}`` span with the reported usage."""

traced_agent_run = _traced(_agent_run, _agent_outcome)
"""Trace ``Agent.run`` as a GenAI ``invoke_agent {name}`` span; model calls and compaction nest under it."""

traced_fact_extraction = _traced(_extraction, _admission)
"""Trace one extraction (writer proposal, then admission): the keys admitted, replaced and evicted,
or the refusal (the span then carries the error)."""


def trace_written_admission(writer: object, started_ns: int, admission: Any, problem: BaseException | None) -> None:
    """The span of an admission written in its turn's own atomic step (the writer asked before the
    turn, the facts written with it): named and described as :data:`traced_fact_extraction`'s,
    from ``started_ns`` (``time.time_ns()`` when the writer was asked) to now."""
    tracer = _tracer()
    if tracer is None:
        return
    name, attributes = _extraction((None, writer), {})
    span = tracer.start_span(name, attributes=attributes, start_time=started_ns)
    try:
        if problem is None:
            _set(span, _admission(admission))
        else:
            from opentelemetry.trace import Status, StatusCode  # noqa: PLC0415  (loaded: _tracer checked)

            span.record_exception(problem)
            span.set_attribute("error.type", type(problem).__qualname__)
            span.set_status(Status(StatusCode.ERROR, str(problem)))
    finally:
        span.end()
