"""A chat client for OpenAI and OpenAI-compatible servers (Ollama, vLLM, llama.cpp, ...).

Built on the official ``openai`` SDK, which is an optional extra: it is imported
only when a client is constructed, so ``import contextledger`` works without it.
The SDK's own retries are switched off and this client retries itself, so the
number of attempts is exactly ``max_retries + 1`` and every final failure
surfaces as one of the library's :class:`~contextledger.exceptions.ModelError`
subclasses, naming the endpoint and the model so a misconfiguration is obvious.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from contextledger._extras import require_extra
from contextledger._openai_cache import DEFAULT_BREAKPOINT_MODELS, MARKABLE_ROLES, model_takes_breakpoints, with_mark
from contextledger._tracing import traced_model_call
from contextledger.clients._protocol import ChatResponse
from contextledger.clients._sdk_client import openai_sdk_client
from contextledger.clients._usage import read_usage
from contextledger.exceptions import (
    ConfigurationError,
    InvalidMessageError,
    ModelConnectionError,
    ModelError,
    ModelRateLimitError,
    ModelResponseError,
    ModelTimeoutError,
)
from contextledger.messages import Message, to_openai
from contextledger.messages._openai import message_from_openai

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["OpenAIChatClient"]

_EXCERPT_CHARS = 200


def _excerpt(text: str) -> str:
    """A short, single-line view of a response body, enough to recognise it in an error message."""
    flat = " ".join(text.split())
    return flat if len(flat) <= _EXCERPT_CHARS else flat[:_EXCERPT_CHARS] + "..."


class OpenAIChatClient:
    """Calls ``/chat/completions`` on OpenAI or any compatible server.

    ``model``, ``base_url`` and ``api_key`` fall back to ``OPENAI_MODEL``,
    ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``.  A local server needs no real
    key, so when a base URL is set and no key is found a placeholder is sent.
    ``client`` lets the caller supply a configured ``openai.AsyncOpenAI`` (a
    custom HTTP client, proxies); its retries are disabled all the same and
    ``timeout`` applies to it.

    Requests that fail with 429, a 5xx status, a timeout or a connection error
    are retried up to ``max_retries`` times, waiting ``backoff * 2**attempt``
    seconds between attempts.  Usage is read as the provider reported it, in
    OpenAI's, Anthropic's or DeepSeek's fields (cache reads and writes included,
    see :func:`~contextledger.clients.read_usage`); a count it left out, or one
    that is not a sane whole number, stays ``None`` rather than being estimated,
    and never fails the call.
    """

    provider_name: ClassVar[str] = "openai"
    """The GenAI semantic conventions' provider for traces: the OpenAI API, whoever serves it."""

    rides_prefix_cache: ClassVar[bool] = True
    """It sends a call's tools and options (``tool_choice``, ``prompt_cache_key``) as given, and
    writes the ``cache_breakpoints`` option as OpenAI's explicit breakpoints, so a
    :class:`~contextledger.compaction.SummarizationStrategy` may send it the conversation's own
    request up to its cut and read that start from the provider's cache (its default form here)."""

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
        backoff: float = 0.5,
        client: AsyncOpenAI | None = None,
        cache_breakpoint_models: Sequence[str] = DEFAULT_BREAKPOINT_MODELS,
    ) -> None:
        model = model or os.environ.get("OPENAI_MODEL") or None
        if not model:
            raise ConfigurationError(
                "OpenAIChatClient needs a model: pass model='...' or set the OPENAI_MODEL environment variable"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ConfigurationError(f"OpenAIChatClient timeout must be a positive number of seconds, got {timeout!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigurationError(f"OpenAIChatClient max_retries must be an int >= 0, got {max_retries!r}")
        if isinstance(backoff, bool) or not isinstance(backoff, (int, float)) or backoff < 0:
            raise ConfigurationError(f"OpenAIChatClient backoff must be a number >= 0, got {backoff!r}")
        if isinstance(cache_breakpoint_models, str) or not all(
            isinstance(prefix, str) and prefix for prefix in cache_breakpoint_models
        ):
            raise ConfigurationError(
                "OpenAIChatClient cache_breakpoint_models must be a list of model-name prefixes such as "
                f"['gpt-5.6'], got {cache_breakpoint_models!r}"
            )
        self.cache_breakpoint_models = tuple(cache_breakpoint_models)
        openai = require_extra("openai", extra="openai", feature="OpenAIChatClient")

        self.model: str = model
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.backoff = float(backoff)
        self._client = openai_sdk_client(
            openai,
            client,
            feature="OpenAIChatClient",
            model=model,
            api_key=api_key,
            base_url=base_url,
            timeout=self.timeout,
            max_retries=0,
        )
        self.base_url: str = str(self._client.base_url)

    def __repr__(self) -> str:
        return f"OpenAIChatClient(model={self.model!r}, base_url={self.base_url!r})"

    def _where(self) -> str:
        return f"model {self.model!r} at {self.base_url}"

    @traced_model_call
    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResponse:
        """Send ``messages`` (and ``tools``, as OpenAI tool dicts) and return the assistant's reply.

        Extra ``options`` (``temperature``, ``max_tokens``, server-specific
        keys) are merged into the request body as given, so parameters only a
        compatible server understands reach it too.  ``cache_breakpoints`` (positions in
        ``messages``) is not sent as a field: for a model named by ``cache_breakpoint_models`` it
        marks those messages with OpenAI's ``prompt_cache_breakpoint`` (system, user and tool
        messages take one; others are passed over), for any other model it is dropped, since
        earlier models refuse the field.
        """
        breakpoints = options.pop("cache_breakpoints", None)
        payload = to_openai(messages)
        if breakpoints and model_takes_breakpoints(self.model, self.cache_breakpoint_models):
            payload = self._marked(messages, payload, breakpoints)
        attempt = 0
        while True:
            try:
                return await self._attempt(payload, tools, options)
            except _Retryable as retryable:
                if attempt >= self.max_retries:
                    raise retryable.final from retryable.__cause__
                await asyncio.sleep(self.backoff * (2**attempt))
                attempt += 1

    @staticmethod
    def _marked(messages: Sequence[Message], payload: list[dict[str, Any]], positions: Any) -> list[dict[str, Any]]:
        """``payload`` with a breakpoint on the wire message that ends each message at ``positions``."""
        if isinstance(positions, (str, bytes)) or not all(
            isinstance(p, int) and not isinstance(p, bool) and 0 <= p < len(messages) for p in positions
        ):
            raise ConfigurationError(
                f"cache_breakpoints must be positions of the messages sent (0 to {len(messages) - 1}), "
                f"got {positions!r}"
            )
        marked = list(payload)
        for position in sorted(set(positions)):
            if messages[position].role not in MARKABLE_ROLES:
                continue
            end = len(to_openai(messages[: position + 1])) - 1
            written = with_mark(marked[end], ("text",))
            if written is not None:
                marked[end] = written
        return marked

    async def _attempt(
        self,
        payload: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        options: Mapping[str, Any],
    ) -> ChatResponse:
        """One request: a reply, a final error, or a :class:`_Retryable` holding the error to raise if it persists."""
        import openai  # noqa: PLC0415  (already loaded by the constructor)

        extra: dict[str, Any] = {}
        if tools is not None:
            extra["tools"] = [dict(tool) for tool in tools]
        extra.update(options)
        try:
            raw = await self._client.chat.completions.with_raw_response.create(
                model=self.model,
                messages=payload,  # type: ignore[arg-type]  # plain dicts in the documented wire format
                extra_body=extra or None,
            )
        except openai.APITimeoutError as error:
            final: ModelError = ModelTimeoutError(f"{self._where()} did not answer within {self.timeout:g} s")
            raise _Retryable(final) from error
        except openai.APIConnectionError as error:
            final = ModelConnectionError(f"could not reach {self._where()}: {error}")
            raise _Retryable(final) from error
        except openai.APIStatusError as error:
            status = error.status_code
            body = _excerpt(error.response.text)
            if status == 429:
                final = ModelRateLimitError(
                    f"{self._where()} kept answering 429 (rate limited) after {self.max_retries + 1} attempt(s): {body}"
                )
                raise _Retryable(final) from error
            final = ModelResponseError(f"{self._where()} answered HTTP {status}: {body}")
            if status >= 500:
                raise _Retryable(final) from error
            raise final from error
        return self._parse(raw.status_code, raw.text)

    def _parse(self, status: int, text: str) -> ChatResponse:
        """Turn a 2xx body into a reply, refusing anything that is not a well-formed chat completion."""

        def bad(reason: str) -> ModelResponseError:
            return ModelResponseError(f"{self._where()} returned HTTP {status} with {reason}: {_excerpt(text)}")

        try:
            body = json.loads(text)
        except ValueError as error:
            raise bad("a body that is not JSON") from error
        if not isinstance(body, dict):
            raise bad("a JSON body that is not an object")
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices:
            raise bad("no 'choices' list")
        choice = choices[0]
        if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
            raise bad("a first choice that has no 'message' object")
        data = dict(choice["message"])
        # Some compatible servers leave the role out of the reply; it can only be the assistant's.
        if data.get("role") is None:
            data["role"] = "assistant"
        if data["role"] != "assistant":
            raise bad(f"a reply whose role is {data['role']!r}, not 'assistant'")
        try:
            message = message_from_openai(data)
        except InvalidMessageError as error:
            raise bad(f"an unreadable assistant message ({error})") from error
        reasons = tuple(
            choice["finish_reason"]
            for choice in choices
            if isinstance(choice, dict) and isinstance(choice.get("finish_reason"), str)
        )
        return ChatResponse(
            text=message.text,
            messages=(message,),
            usage=read_usage(body.get("usage")),
            model=body["model"] if isinstance(body.get("model"), str) else None,
            response_id=body["id"] if isinstance(body.get("id"), str) else None,
            finish_reasons=reasons,
        )


class _Retryable(Exception):
    """Carries the error to raise if an attempt that failed transiently is not retried again."""

    def __init__(self, final: ModelError) -> None:
        super().__init__(str(final))
        self.final = final
