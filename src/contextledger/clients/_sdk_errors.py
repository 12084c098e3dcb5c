"""One mapping from a provider SDK's errors to the library's :class:`ModelError` family.

The ``openai`` and ``anthropic`` SDKs raise errors of the same names (``APITimeoutError``,
``APIConnectionError``, ``APIStatusError`` with a ``status_code`` and the ``response``), so the
Responses and Anthropic clients share this one mapping: every final failure names the endpoint and
the model, and a caller catches :class:`ModelError` whichever provider it called.  The SDK's own
retries have run by the time an error arrives here.
"""

from __future__ import annotations

import json
from types import ModuleType

from contextledger.exceptions import (
    ModelConnectionError,
    ModelError,
    ModelRateLimitError,
    ModelResponseError,
    ModelTimeoutError,
)

__all__ = ["excerpt", "model_error", "parse_object"]

_EXCERPT_CHARS = 200


def excerpt(text: str) -> str:
    """A short, single-line view of a response body, enough to recognise it in an error message."""
    flat = " ".join(text.split())
    return flat if len(flat) <= _EXCERPT_CHARS else flat[:_EXCERPT_CHARS] + "..."


def model_error(sdk: ModuleType, error: Exception, where: str, *, timeout: float, attempts: int) -> ModelError | None:
    """The library's error for an SDK ``error`` raised calling ``where`` (``None``: not the SDK's)."""
    if isinstance(error, sdk.APITimeoutError):
        return ModelTimeoutError(f"{where} did not answer within {timeout:g} s ({attempts} attempt(s))")
    if isinstance(error, sdk.APIConnectionError):
        return ModelConnectionError(f"could not reach {where} ({attempts} attempt(s)): {error}")
    if isinstance(error, sdk.APIStatusError):
        status = error.status_code
        body = excerpt(error.response.text)
        if status == 429:
            return ModelRateLimitError(f"{where} kept answering 429 (rate limited) after {attempts} attempt(s): {body}")
        return ModelResponseError(f"{where} answered HTTP {status}: {body}")
    return None


def parse_object(text: str, status: int, where: str) -> dict[str, object]:
    """A 2xx body as a JSON object, or :class:`ModelResponseError` saying what it was instead.

    The body is parsed from its text, not from the SDK's typed model, so every item a provider
    returned is kept exactly as it sent it (a typed model would add its own defaults)."""
    try:
        body = json.loads(text)
    except ValueError as error:
        raise ModelResponseError(
            f"{where} returned HTTP {status} with a body that is not JSON: {excerpt(text)}"
        ) from error
    if not isinstance(body, dict):
        raise ModelResponseError(
            f"{where} returned HTTP {status} with a JSON body that is not an object: {excerpt(text)}"
        )
    return body
