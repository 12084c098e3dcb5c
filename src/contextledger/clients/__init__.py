"""Chat clients: the protocol every model plugs into, deterministic clients that need no network,
and ``OpenAIChatClient`` for OpenAI-compatible endpoints (its SDK is imported only when one is built).

``FACT_WRITER_MARKER`` starts the fact writer's instructions: the offline model answers a request
carrying it as a fact writer would."""

from typing import TYPE_CHECKING, Any

from contextledger.clients._offline import FACT_WRITER_MARKER, OfflineModel
from contextledger.clients._protocol import ChatClient, ChatResponse, Usage
from contextledger.clients._resolve import MODEL_SPECS, resolve_client
from contextledger.clients._scripted import ScriptedChatClient

if TYPE_CHECKING:
    from contextledger.clients.openai import OpenAIChatClient

__all__ = [
    "FACT_WRITER_MARKER",
    "MODEL_SPECS",
    "ChatClient",
    "ChatResponse",
    "OfflineModel",
    "OpenAIChatClient",
    "ScriptedChatClient",
    "Usage",
    "resolve_client",
]


def __getattr__(name: str) -> Any:
    # The module itself imports no SDK, but keeping it out of the package import keeps
    # ``import contextledger.clients`` as light as the core.
    if name == "OpenAIChatClient":
        from contextledger.clients.openai import OpenAIChatClient  # noqa: PLC0415

        return OpenAIChatClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
