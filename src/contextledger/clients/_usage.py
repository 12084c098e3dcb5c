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

The providers' own compaction is billed too.  Anthropic's ``usage.iterations`` (compaction beta
``compact-2026-01-12``) is a list with one entry per sampling iteration, each
``{"type": "compaction" | "message", "input_tokens", "output_tokens", "cache_read_input_tokens",
"cache_creation_input_tokens"}`` in Anthropic's spelling; the top-level counts leave the
``compaction`` entries out, so :func:`read_usage` sums those into ``Usage.compaction`` (billed on
top) and counts them in ``Usage.compactions``.  The list is only present when a compaction ran in
that request.  OpenAI's compaction has no usage of its own: a ``/responses/compact`` answer
(``"object": "response.compaction"``) reports the pass as its ordinary ``usage``, and a
``context_management`` compaction during ``/responses`` is inside the response's counts;
:func:`read_reply_usage` reads a whole reply and counts the compaction items it returned.

:func:`read_usage` turns any of them into one :class:`Usage` whose ``input_tokens`` always means
every input token sent.  An upstream is not trusted: a count that is not a whole number from 0 to
2**53 (a string, a float, ``true``, a negative or absurd number) is read as not reported, and so
is a cache count larger than the input it is part of; nothing in a ``usage`` can make it raise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from contextledger.clients._protocol import Usage

__all__ = ["read_reply_usage", "read_usage"]

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


def _compaction_iterations(raw: Mapping[str, Any]) -> tuple[int | None, Usage | None]:
    """Anthropic's compaction iterations: how many, and their summed usage (see the module docstring).
    An entry that is not an object, or whose counts are not counts, is skipped."""
    iterations = raw.get("iterations")
    if not isinstance(iterations, list):
        return None, None
    entries = [e for e in iterations if isinstance(e, Mapping) and e.get("type") == "compaction"]
    if not entries:
        return 0, None
    inputs = outputs = read = written = 0
    for entry in entries:
        partial = _count(entry.get("input_tokens"))
        entry_read = _count(entry.get("cache_read_input_tokens")) or 0
        entry_written = _count(entry.get("cache_creation_input_tokens")) or 0
        inputs += (partial or 0) + entry_read + entry_written
        outputs += _count(entry.get("output_tokens")) or 0
        read += entry_read
        written += entry_written
    usage = Usage(input_tokens=inputs, output_tokens=outputs, cache_read_tokens=read, cache_write_tokens=written)
    return len(entries), usage


def read_reply_usage(reply: object) -> Usage | None:
    """The usage of a whole reply body (chat completion, Responses response, Anthropic message),
    with the provider compactions it shows: Anthropic's from ``usage.iterations``; OpenAI's as the
    number of ``compaction`` items in a Responses ``output`` (a ``/responses/compact`` answer,
    ``"object": "response.compaction"``, is one pass whose usage is the reply's own).  ``None``
    when the reply has no usable ``usage`` object."""
    if not isinstance(reply, Mapping):
        return None
    usage = read_usage(reply.get("usage"))
    if usage is None or usage.compactions is not None:
        return usage
    output = reply.get("output")
    if isinstance(output, list):
        items = sum(1 for item in output if isinstance(item, Mapping) and item.get("type") == "compaction")
        if items or reply.get("object") == "response.compaction":
            return replace(usage, compactions=max(items, 1 if reply.get("object") == "response.compaction" else 0))
    return usage


def read_usage(raw: object) -> Usage | None:
    """The counts in a response's ``usage`` (``None`` when it is not an object); see the module docstring."""
    if not isinstance(raw, Mapping):
        return None
    compactions, compaction = _compaction_iterations(raw)
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
    return Usage(
        input_tokens=inputs,
        output_tokens=output,
        cache_read_tokens=read,
        cache_write_tokens=write,
        compactions=compactions,
        compaction=compaction,
    )
