"""How each model client gets its provider SDK's client: one rule for the three of them.

A client handed in is reused with the library's timeout and retry count.  Otherwise the SDK's
client is built from the arguments, else the provider's environment variables.  A local server
needs no key, so a base URL without one gets a placeholder.  The SDK's refusal to build becomes a
:class:`ConfigurationError` naming the client, the model and what to pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from contextledger.exceptions import ConfigurationError

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["openai_sdk_client", "sdk_client"]

_OPENAI_PLACEHOLDER_KEY = "not-needed"

_Client = TypeVar("_Client")


def sdk_client(
    given: _Client | None,
    make: Callable[..., _Client],
    refused: type[Exception],
    *,
    feature: str,
    model: str,
    api_key: str | None,
    base_url: str | None,
    key_variable: str,
    url_variable: str,
    timeout: float,
    max_retries: int,
    placeholder_key: str | None = None,
    hint: str,
) -> _Client:
    """The SDK client ``feature`` sends ``model``'s requests through (see the module docstring)."""
    if given is not None:
        return cast(_Client, cast(Any, given).with_options(max_retries=max_retries, timeout=timeout))
    base_url = base_url or os.environ.get(url_variable) or None
    api_key = api_key or os.environ.get(key_variable) or None
    if api_key is None and base_url is not None and placeholder_key is not None:
        api_key = placeholder_key
    try:
        return make(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries)
    except refused as error:
        raise ConfigurationError(f"{feature} could not be configured for model {model!r}: {error}; {hint}") from error


def openai_sdk_client(
    openai: Any,
    given: AsyncOpenAI | None,
    *,
    feature: str,
    model: str,
    api_key: str | None,
    base_url: str | None,
    timeout: float,
    max_retries: int,
) -> AsyncOpenAI:
    """:func:`sdk_client` for the two clients on OpenAI's SDK (``openai``, the imported module):
    its environment variables, and a placeholder key for a local server at a base URL."""
    return sdk_client(
        given,
        cast("Callable[..., AsyncOpenAI]", openai.AsyncOpenAI),
        openai.OpenAIError,
        feature=feature,
        model=model,
        api_key=api_key,
        base_url=base_url,
        key_variable="OPENAI_API_KEY",
        url_variable="OPENAI_BASE_URL",
        timeout=timeout,
        max_retries=max_retries,
        placeholder_key=_OPENAI_PLACEHOLDER_KEY,
        hint="pass api_key='...' or set OPENAI_API_KEY (or base_url for a local server)",
    )
