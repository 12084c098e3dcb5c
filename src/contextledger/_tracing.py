"""OpenTelemetry spans for compaction, agent runs, model calls and fact admissions.

Tracing costs nothing unless the application uses OpenTelemetry: each traced call first looks
whether ``opentelemetry.trace`` is already imported (one dictionary lookup).  An application that
exports traces has imported it to set its tracer provider; one that has not gets no span and no
import, so ``import contextledger`` and every call stay free of the package (the ``otel`` extra).

Span names and attributes follow the OpenTelemetry GenAI semantic conventions where they apply
(``invoke_agent {name}`` and ``chat {model}`` spans with ``gen_ai.operation.name``,
``gen_ai.agent.name``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` and
``gen_ai.usage.output_tokens``); what they have no name for (compaction, facts) is under
``contextledger.*``.  Usage a provider did not report is left unset, never guessed.

Each hook is a decorator, so a call site gains tracing with one line and keeps its own code.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

__all__ = ["TRACER_NAME", "traced_agent_run", "traced_compaction", "traced_fact_extraction", "traced_model_call"]

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


def traced_compaction(
    function: Callable[Params, Coroutine[Any, Any, Result]],
) -> Callable[Params, Coroutine[Any, Any, Result]]:
    """Trace ``compact_messages``: strategy, messages and tokens before and after, groups excluded."""

    @functools.wraps(function)
    async def traced(*args: Params.args, **kwargs: Params.kwargs) -> Result:
        tracer = _tracer()
        if tracer is None:
            return await function(*args, **kwargs)
        strategy = kwargs.get("strategy")
        name = getattr(strategy, "name", None) or ("none" if strategy is None else type(strategy).__name__)
        with _span(tracer, "contextledger.compaction", {"contextledger.compaction.strategy": name}) as span:
            result = await function(*args, **kwargs)
            before: Mapping[str, int] = getattr(result, "before", {})
            after: Mapping[str, int] = getattr(result, "after", {})
            index = getattr(result, "index", None)
            tokenizer = getattr(index, "tokenizer", None)
            _set(
                span,
                {
                    "contextledger.compaction.messages.before": before.get("included_messages"),
                    "contextledger.compaction.messages.after": after.get("included_messages"),
                    "contextledger.compaction.tokens.before": before.get("included_tokens"),
                    "contextledger.compaction.tokens.after": after.get("included_tokens"),
                    "contextledger.compaction.groups.before": before.get("included_groups"),
                    "contextledger.compaction.groups.after": after.get("included_groups"),
                    "contextledger.compaction.groups.excluded": (
                        before["included_groups"] - after["included_groups"]
                        if "included_groups" in before and "included_groups" in after
                        else None
                    ),
                    "contextledger.compaction.steps": len(getattr(result, "events", ())),
                    "contextledger.tokenizer.name": getattr(tokenizer, "name", None),
                    "contextledger.tokenizer.is_estimate": getattr(tokenizer, "is_estimate", None),
                },
            )
            return result

    return traced


def _usage_attributes(usage: Any) -> dict[str, Any]:
    return {
        "gen_ai.usage.input_tokens": getattr(usage, "input_tokens", None),
        "gen_ai.usage.output_tokens": getattr(usage, "output_tokens", None),
    }


def traced_model_call(
    function: Callable[Params, Coroutine[Any, Any, Result]],
) -> Callable[Params, Coroutine[Any, Any, Result]]:
    """Trace a chat client's ``get_response`` as a GenAI ``chat`` span."""

    @functools.wraps(function)
    async def traced(*args: Params.args, **kwargs: Params.kwargs) -> Result:
        tracer = _tracer()
        if tracer is None:
            return await function(*args, **kwargs)
        client, messages = args[0], args[1] if len(args) > 1 else kwargs.get("messages")
        model = getattr(client, "model", None)
        model = model if isinstance(model, str) else type(client).__name__
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "contextledger.request.messages": len(messages) if hasattr(messages, "__len__") else None,
        }
        with _span(tracer, f"chat {model}", {k: v for k, v in attributes.items() if v is not None}) as span:
            response = await function(*args, **kwargs)
            _set(span, _usage_attributes(getattr(response, "usage", None)))
            return response

    return traced


def traced_agent_run(
    function: Callable[Params, Coroutine[Any, Any, Result]],
) -> Callable[Params, Coroutine[Any, Any, Result]]:
    """Trace ``Agent.run`` as a GenAI ``invoke_agent`` span; model calls and compaction nest under it."""

    @functools.wraps(function)
    async def traced(*args: Params.args, **kwargs: Params.kwargs) -> Result:
        tracer = _tracer()
        if tracer is None:
            return await function(*args, **kwargs)
        agent = args[0]
        name = getattr(agent, "name", None) or type(agent).__name__
        attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
        session = kwargs.get("session")
        session_id = getattr(session, "session_id", None)
        if isinstance(session_id, str):
            attributes["gen_ai.conversation.id"] = session_id
        with _span(tracer, f"invoke_agent {name}", attributes) as span:
            response = await function(*args, **kwargs)
            _set(span, _usage_attributes(getattr(response, "usage", None)))
            _set(span, {"contextledger.agent.model_calls": len(getattr(response, "model_calls", ()))})
            return response

    return traced


def traced_fact_extraction(
    function: Callable[Params, Coroutine[Any, Any, Result]],
) -> Callable[Params, Coroutine[Any, Any, Result]]:
    """Trace one extraction (writer proposal, then admission): what was admitted, replaced,
    evicted, or why the batch was refused (the span then carries the error)."""

    @functools.wraps(function)
    async def traced(*args: Params.args, **kwargs: Params.kwargs) -> Result:
        tracer = _tracer()
        if tracer is None:
            return await function(*args, **kwargs)
        writer = args[1] if len(args) > 1 else kwargs.get("writer")
        attributes = {"contextledger.facts.writer": type(writer).__name__}
        with _span(tracer, "contextledger.facts.admission", attributes) as span:
            admission = await function(*args, **kwargs)
            _set(
                span,
                {
                    f"contextledger.facts.{field}": [fact.key for fact in getattr(admission, field, ())]
                    for field in ("admitted", "replaced", "evicted")
                },
            )
            _set(span, {"contextledger.facts.turn": getattr(admission, "turn", None)})
            return admission

    return traced
