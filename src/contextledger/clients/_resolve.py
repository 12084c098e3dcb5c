"""Turning a model name from the command line or a config file into a chat client."""

from __future__ import annotations

import importlib
from typing import Any

from contextledger.clients._offline import OfflineModel
from contextledger.clients._protocol import ChatClient
from contextledger.exceptions import ConfigurationError

__all__ = ["MODEL_SPECS", "resolve_client"]

MODEL_SPECS = "offline, local, or openai:MODEL"


def resolve_client(spec: str, **options: Any) -> ChatClient:
    """The client a ``--model`` value names.

    ``offline`` is the built-in deterministic model; ``openai:MODEL`` talks to
    an OpenAI-compatible endpoint (``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``
    from the environment); ``local`` runs the small model shipped in the
    ``local`` extra on this machine.  Options go to the client's constructor.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigurationError(f"model must be one of {MODEL_SPECS}, got {spec!r}")
    name, _, argument = spec.strip().partition(":")
    if name == "offline" and not argument:
        return OfflineModel(**options)
    if name == "openai":
        if not argument:
            raise ConfigurationError("openai needs a model name after the colon, for example openai:gpt-4o-mini")
        from contextledger.clients.openai import OpenAIChatClient  # noqa: PLC0415  (optional extra)

        return OpenAIChatClient(argument, **options)
    if name == "local" and not argument:
        local = importlib.import_module("contextledger.clients.local")  # raises MissingExtraError without the extra
        client: ChatClient = local.LocalChatClient(**options)
        return client
    raise ConfigurationError(f"model must be one of {MODEL_SPECS}, got {spec!r}")
