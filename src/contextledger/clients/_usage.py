"""Reading the ``usage`` object an OpenAI-compatible server returns, whichever vendor's shape it has.

What a user pays depends on how many input tokens the provider read from its prompt cache, and
servers spell that differently:

- OpenAI chat completions: ``prompt_tokens`` (every input token) with
  ``prompt_tokens_details.cached_tokens``; the Responses API says ``input_tokens`` and
  ``input_tokens_details.cached_tokens``, with the same meaning;
- Anthropic, and servers that copy its fields: ``input_tokens`` counts only the tokens neither
  read from nor written to the cache, beside ``cache_read_input_tokens`` and
  ``cache_creation_input_tokens``;
- DeepSeek: ``prompt_cache_hit_tokens`` and ``prompt_cache_miss_tokens`` (adding up to
  ``prompt_tokens``).

:func:`read_usage` turns any of them into one :class:`Usage` whose ``input_tokens`` always means
every input token sent.  An upstream is not trusted: a count that is not a whole number from 0 to
2**53 (a string, a float, ``true``, a negative or absurd number) is read as not reported, and so
is a cache count larger than the input it is part of; nothing in a ``usage`` can make it raise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contextledger.clients._protocol import Usage

__all__ = ["read_usage"]

# Beyond this a count cannot be a real token count, and would lose precision as a float metric.
_LARGEST_COUNT = 2**53


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _LARGEST_COUNT:
        return None
    return value


def _first(*values: object) -> int | None:
    for value in values:
        count = _count(value)
        if count is not None:
            return count
    return None


def _details(raw: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    details = raw.get(name)
    return details if isinstance(details, Mapping) else {}


def read_usage(raw: object) -> Usage | None:
    """The counts in a response's ``usage`` (``None`` when it is not an object); see the module docstring."""
    if not isinstance(raw, Mapping):
        return None
    details = _details(raw, "prompt_tokens_details") or _details(raw, "input_tokens_details")
    anthropic_read = _count(raw.get("cache_read_input_tokens"))
    anthropic_write = _count(raw.get("cache_creation_input_tokens"))
    read = _first(details.get("cached_tokens"), raw.get("cache_read_input_tokens"), raw.get("prompt_cache_hit_tokens"))
    write = _first(raw.get("cache_creation_input_tokens"), details.get("cache_write_tokens"))
    output = _first(raw.get("completion_tokens"), raw.get("output_tokens"))

    inputs = _count(raw.get("prompt_tokens"))
    if inputs is None:
        partial = _count(raw.get("input_tokens"))
        anthropic_shape = not details and ("cache_read_input_tokens" in raw or "cache_creation_input_tokens" in raw)
        if partial is not None and anthropic_shape:
            # Anthropic's input_tokens leaves out what was read from or written to the cache.
            inputs = partial + (anthropic_read or 0) + (anthropic_write or 0)
        elif partial is not None:
            inputs = partial
        else:
            hit, miss = _count(raw.get("prompt_cache_hit_tokens")), _count(raw.get("prompt_cache_miss_tokens"))
            inputs = None if hit is None or miss is None else hit + miss
    if inputs is not None:
        if read is not None and read > inputs:
            read = None  # a part larger than its whole: the report contradicts itself
        if write is not None and (read or 0) + write > inputs:
            write = None
    return Usage(input_tokens=inputs, output_tokens=output, cache_read_tokens=read, cache_write_tokens=write)
