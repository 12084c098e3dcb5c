"""A chat client for OpenAI's Responses API that can also ask OpenAI to compact a conversation.

Built on the official ``openai`` SDK (the ``openai`` extra), imported only when a client is built.
Messages go out as Responses input items (:func:`~contextledger.messages.to_responses`) and the
output items come back as messages (:func:`~contextledger.messages.from_responses`), parsed from
the body's text so that each item is kept exactly as OpenAI sent it.

Two ways of having OpenAI compact, both described in OpenAI's compaction guide:

- :meth:`OpenAIResponsesClient.compact` calls ``POST /responses/compact`` with the messages as
  ``input``; the answer (``"object": "response.compaction"``) carries an ``output`` list, the
  compacted window: the user messages OpenAI chose to keep and an opaque
  ``{"type": "compaction", "encrypted_content": ...}`` item standing for everything else.  The guide
  asks for that output to be sent on as it is, so it is returned whole, and its ``usage`` is the
  pass's cost.  This is what :class:`~contextledger.compaction.ProviderCompactionStrategy` calls.
- ``compact_threshold=N`` sets ``context_management: [{"type": "compaction", "compact_threshold":
  N}]`` on every ``POST /responses``: OpenAI compacts during the call once the rendered context
  passes N tokens and returns the compaction item among the output items, which the reply's
  messages then hold (a history that stores them keeps the boundary).

A conversation holding a compaction item may drop what precedes the newest one (the guide says the
item carries what is needed); the library's strategies keep the newest one whenever anything after
it is sent.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from contextledger._extras import require_extra
from contextledger._tracing import traced_model_call
from contextledger.clients._compactor import ProviderCompaction
from contextledger.clients._protocol import ChatResponse
from contextledger.clients._sdk_client import openai_sdk_client
from contextledger.clients._sdk_errors import excerpt, model_error, parse_object
from contextledger.clients._usage import read_reply_usage
from contextledger.exceptions import ConfigurationError, InvalidMessageError, ModelResponseError
from contextledger.messages import Message, from_responses, to_responses

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["OpenAIResponsesClient", "responses_tools"]


def responses_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tool definitions in the Responses API's shape: a chat-completions function tool
    (``{"type": "function", "function": {...}}``) is flattened to ``{"type": "function", "name",
    "description", "parameters"}``; anything else (a hosted tool, an already flat one) is sent as it is."""
    converted: list[dict[str, Any]] = []
    for tool in tools:
        function = tool.get("function")
        if tool.get("type") == "function" and isinstance(function, Mapping):
            converted.append({"type": "function", **dict(function)})
        else:
            converted.append(dict(tool))
    return converted


def _count(value: object, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(f"OpenAIResponsesClient {what} must be an int >= {minimum}, got {value!r}")
    return value


class OpenAIResponsesClient:
    """Calls ``POST /responses`` (and ``POST /responses/compact``) on OpenAI or a compatible server.

    ``model``, ``base_url`` and ``api_key`` fall back to ``OPENAI_MODEL``, ``OPENAI_BASE_URL`` and
    ``OPENAI_API_KEY``; with a base URL and no key a placeholder is sent, as a local server needs
    none.  ``client`` lets the caller supply a configured ``openai.AsyncOpenAI``.  The SDK retries
    429, 5xx, timeouts and connection errors ``max_retries`` times with its own back-off; what
    still fails is raised as one of the library's :class:`~contextledger.exceptions.ModelError`
    subclasses naming the endpoint and the model.

    Requests are sent with ``store: false`` (the history is the caller's, sent whole each time)
    unless ``store=True``; ``compact_threshold`` turns on OpenAI's server-side compaction (see the
    module docstring).  Usage is read as reported, with the compaction items the reply returned
    counted in ``Usage.compactions``.
    """

    provider_name: ClassVar[str] = "openai"
    opening_stays: bool = False
    """The Responses API lets a compaction item open the input (see :class:`ProviderCompactor`)."""

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        client: AsyncOpenAI | None = None,
        compact_threshold: int | None = None,
        store: bool = False,
    ) -> None:
        model = model or os.environ.get("OPENAI_MODEL") or None
        if not model:
            raise ConfigurationError(
                "OpenAIResponsesClient needs a model: pass model='...' or set the OPENAI_MODEL environment variable"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ConfigurationError(
                f"OpenAIResponsesClient timeout must be a positive number of seconds, got {timeout!r}"
            )
        self.max_retries = _count(max_retries, "max_retries", 0)
        self.compact_threshold = (
            None if compact_threshold is None else _count(compact_threshold, "compact_threshold", 1)
        )
        if not isinstance(store, bool):
            raise ConfigurationError(f"OpenAIResponsesClient store must be True or False, got {store!r}")
        self.store = store
        openai = require_extra("openai", extra="openai", feature="OpenAIResponsesClient")
        self.model: str = model
        self.timeout = float(timeout)
        self._client = openai_sdk_client(
            openai,
            client,
            feature="OpenAIResponsesClient",
            model=model,
            api_key=api_key,
            base_url=base_url,
            timeout=self.timeout,
            max_retries=self.max_retries,
        )
        self.base_url: str = str(self._client.base_url)

    def __repr__(self) -> str:
        return f"OpenAIResponsesClient(model={self.model!r}, base_url={self.base_url!r})"

    def _where(self, path: str) -> str:
        return f"model {self.model!r} at {self.base_url.rstrip('/')}{path}"

    @traced_model_call
    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResponse:
        """Send ``messages`` as Responses input and return every output item as messages.

        Extra ``options`` (``temperature``, ``reasoning``, ``include``...) are merged into the body as
        given."""
        extra: dict[str, Any] = {"store": self.store}
        if tools:
            extra["tools"] = responses_tools(tools)
        if self.compact_threshold is not None:
            extra["context_management"] = [{"type": "compaction", "compact_threshold": self.compact_threshold}]
        extra.update(options)
        body = await self._post("/responses", messages, extra)
        output = self._output(body, "/responses")
        texts = [m.text for m in output if m.role == "assistant" and m.text]
        status = body.get("status")
        return ChatResponse(
            text="".join(texts),
            messages=output,
            usage=read_reply_usage(body),
            model=body["model"] if isinstance(body.get("model"), str) else None,
            response_id=body["id"] if isinstance(body.get("id"), str) else None,
            finish_reasons=(status,) if isinstance(status, str) else (),
        )

    async def compact(self, messages: Sequence[Message], *, instructions: str | None = None) -> ProviderCompaction:
        """Ask OpenAI to compact ``messages`` (``POST /responses/compact``); the output window is
        returned whole, as OpenAI sent it (see the module docstring).  ``instructions`` is sent as
        the body's ``instructions``."""
        extra: dict[str, Any] = {}
        if instructions is not None:
            extra["instructions"] = instructions
        body = await self._post("/responses/compact", messages, extra)
        output = self._output(body, "/responses/compact")
        return ProviderCompaction(
            output,
            read_reply_usage(body),
            body["model"] if isinstance(body.get("model"), str) else None,
            body["id"] if isinstance(body.get("id"), str) else None,
        )

    async def _post(self, path: str, messages: Sequence[Message], extra: dict[str, Any]) -> dict[str, Any]:
        import openai  # noqa: PLC0415  (already loaded by the constructor)

        items = to_responses(messages)
        responses = self._client.responses.with_raw_response
        send = getattr(responses, "compact", None) if path.endswith("/compact") else responses.create
        if send is None:
            raise ConfigurationError(
                f"the installed openai SDK ({openai.__version__}) has no responses.compact; "
                "upgrade it (pip install -U openai) to have OpenAI compact"
            )
        try:
            raw = await send(model=self.model, input=items, extra_body=extra or None)  # type: ignore[arg-type]
        except openai.OpenAIError as error:
            mapped = model_error(openai, error, self._where(path), timeout=self.timeout, attempts=self.max_retries + 1)
            if mapped is None:
                raise
            raise mapped from error
        return parse_object(raw.text, raw.status_code, self._where(path))

    def _output(self, body: Mapping[str, Any], path: str) -> tuple[Message, ...]:
        output = body.get("output")
        if not isinstance(output, list) or not all(isinstance(item, dict) for item in output):
            raise ModelResponseError(f"{self._where(path)} returned no 'output' list of items: {excerpt(str(body))}")
        try:
            return tuple(from_responses(output))
        except InvalidMessageError as error:
            raise ModelResponseError(
                f"{self._where(path)} returned output items that cannot be read: {error}"
            ) from error
