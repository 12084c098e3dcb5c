"""Chat clients: the protocol every model plugs into, deterministic clients that need no network,
and ``OpenAIChatClient`` for OpenAI-compatible endpoints (its SDK is imported only when one is built).

Where things live (the public names, those in ``__all__``, are imported from here,
``contextledger.clients``; the other names below are plumbing the library's packages share, each listed
in its own module's ``__all__``):

- the protocol, ``_protocol.py``: :class:`ChatClient` (anything with an async
  ``get_response(messages)``), the :class:`ChatResponse` it returns and the :class:`Usage` it
  reports (each count optional: many providers report none);
- reading a server's usage, ``_usage.py``: :func:`read_usage` turns the ``usage`` object of any
  vendor's OpenAI-compatible response (OpenAI, Anthropic-like or DeepSeek cache fields) into a
  :class:`Usage`, ignoring counts it cannot trust (Anthropic's ``usage.iterations`` read into the
  provider compaction's own usage), and :func:`read_reply_usage` does the same for a whole reply,
  counting the compaction items a Responses reply returned;
- the built-in offline model, ``_offline.py``: :class:`OfflineModel`, deterministic and in-process,
  for demos and the drift lab; a system prompt holding :data:`FACT_WRITER_MARKER` asks it for a
  message's declarations as JSON, as a fact writer does;
- the model double for tests and examples, ``_scripted.py``: :class:`ScriptedChatClient` replays
  scripted replies and records every request;
- choosing a client by name, ``_resolve.py``: :func:`resolve_client` turns a ``--model`` value
  (:data:`MODEL_SPECS` lists them) into a client;
- a provider's own compaction, ``_compactor.py``: :class:`ProviderCompactor` (anything with an
  async ``compact(messages)``), the :class:`ProviderCompaction` it returns (the provider's items,
  kept as they came, and the pass's usage), and :class:`OfflineCompactor`, a chat client (the
  offline model by default) playing a provider's compactor;
- real endpoints, public modules of their own because each needs an optional extra:
  ``openai.py`` (:class:`OpenAIChatClient`, the ``openai`` extra), ``openai_responses.py``
  (:class:`OpenAIResponsesClient`, the Responses API and ``/responses/compact``, the ``openai``
  extra), ``anthropic.py`` (:class:`AnthropicChatClient`, the Messages API and its compaction edit,
  the ``anthropic`` extra) and ``local.py`` (``LocalChatClient``, a small model on this machine,
  the ``local`` extra).
"""

from typing import TYPE_CHECKING, Any

from contextledger._deprecated import moved_name
from contextledger.clients._compactor import OfflineCompactor, ProviderCompaction, ProviderCompactor
from contextledger.clients._offline import (
    OfflineModel,
)
from contextledger.clients._protocol import ChatClient, ChatResponse, Usage
from contextledger.clients._resolve import MODEL_SPECS, resolve_client
from contextledger.clients._scripted import ScriptedChatClient
from contextledger.clients._usage import read_reply_usage, read_usage

if TYPE_CHECKING:
    from contextledger.clients.anthropic import AnthropicChatClient
    from contextledger.clients.openai import OpenAIChatClient
    from contextledger.clients.openai_responses import OpenAIResponsesClient

__all__ = [
    "MODEL_SPECS",
    "AnthropicChatClient",
    "ChatClient",
    "ChatResponse",
    "OfflineCompactor",
    "OfflineModel",
    "OpenAIChatClient",
    "OpenAIResponsesClient",
    "ProviderCompaction",
    "ProviderCompactor",
    "ScriptedChatClient",
    "Usage",
    "read_reply_usage",
    "read_usage",
    "resolve_client",
]


def __getattr__(name: str) -> Any:
    # The modules themselves import no SDK, but keeping them out of the package import keeps
    # ``import contextledger.clients`` as light as the core.
    if name == "OpenAIChatClient":
        from contextledger.clients.openai import OpenAIChatClient  # noqa: PLC0415

        return OpenAIChatClient
    if name == "OpenAIResponsesClient":
        from contextledger.clients.openai_responses import OpenAIResponsesClient  # noqa: PLC0415

        return OpenAIResponsesClient
    if name == "AnthropicChatClient":
        from contextledger.clients.anthropic import AnthropicChatClient  # noqa: PLC0415

        return AnthropicChatClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if not TYPE_CHECKING:
    # Names that were public here before and are internal now: still importable, with a
    # DeprecationWarning, until 0.6 (the release rule in CHANGELOG.md).
    _MOVED = {
        "FACT_WRITER_MARKER": "contextledger.clients._offline",
    }

    def __getattr__(name: str) -> object:
        return moved_name(__name__, name, _MOVED)
