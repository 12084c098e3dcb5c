"""Reading a transcript file for ``compact`` and ``validate``: any of the three forms users have.

JSONL (one message per line), a JSON array of messages, or a JSON object with a ``"messages"``
array, from a file or from standard input (``-``).  Errors name the form found and what to write
instead, and never quote more than a short excerpt of the input.
"""

from __future__ import annotations

import sys

from contextledger._json import UnwritableJSONError, strict_loads
from contextledger.cli._common import STANDARD_STREAM
from contextledger.exceptions import ContextLedgerError, TranscriptError
from contextledger.messages import Message, from_openai, load_jsonl

__all__ = ["read_transcript", "transcript_label"]


def transcript_label(path: str) -> str:
    """How a transcript argument is named in reports: the path, or ``<stdin>`` for ``-``."""
    return "<stdin>" if path == STANDARD_STREAM else path


def _shorten(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_transcript(path: str) -> list[Message]:
    """Messages from a file of OpenAI messages (``-`` for standard input), in any of the three forms."""
    label = transcript_label(path)
    if path == STANDARD_STREAM:
        text = sys.stdin.read()
    else:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except FileNotFoundError:
            raise TranscriptError("no such file; check the path", path=label) from None
        except UnicodeDecodeError as error:
            raise TranscriptError(f"not UTF-8 text ({error.reason})", path=label) from None
    start = text.lstrip()[:1]
    if start in ("[", "{"):
        try:
            data = strict_loads(text)
        except UnwritableJSONError as error:
            raise TranscriptError(f"not JSON that can be written back: {error}", path=label) from None
        except ValueError:
            data = None  # not one JSON document: read it as JSONL, which names the bad line
        if isinstance(data, dict) and "messages" in data:
            data = data["messages"]
            if not isinstance(data, list):
                raise TranscriptError('"messages" must be an array of message objects', path=label)
        if isinstance(data, list):
            try:
                return from_openai(data)
            except ContextLedgerError as error:
                raise TranscriptError(_shorten(str(error)), path=label) from None
        if isinstance(data, dict) and "role" not in data:
            keys = ", ".join(sorted(map(str, data))[:8])
            raise TranscriptError(
                f"a JSON object with keys {keys}, not a transcript; write JSONL (one message per line), a JSON "
                'array of messages, or an object with a "messages" array',
                path=label,
            )
    try:
        return load_jsonl(text.splitlines(), path=label)
    except TranscriptError as error:
        raise TranscriptError(_shorten(str(error))) from None
