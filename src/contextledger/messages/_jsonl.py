"""JSONL transcripts: one OpenAI-format message object per line, with ids and properties kept.

A malformed line raises :class:`~contextledger.exceptions.TranscriptError` naming the file and the
line, and a transcript is written atomically, so a crash never leaves half a file behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from contextledger._json import UnwritableJSONError, strict_loads
from contextledger.exceptions import InvalidMessageError, TranscriptError
from contextledger.messages._message import Message
from contextledger.messages._openai import message_from_openai, message_to_openai


def load_jsonl(lines: Iterable[str], *, path: str | None = None) -> list[Message]:
    """Parse OpenAI-format JSONL (one message object per line; blank lines ignored)."""
    messages: list[Message] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = strict_loads(line)
        except json.JSONDecodeError as error:
            raise TranscriptError(
                f"not valid JSON ({error.msg} at column {error.colno})", path=path, line=number
            ) from None
        except UnwritableJSONError as error:
            raise TranscriptError(f"not JSON that can be written back: {error}", path=path, line=number) from None
        try:
            messages.append(message_from_openai(data))
        except InvalidMessageError as error:
            raise TranscriptError(str(error), path=path, line=number) from None
    return messages


def read_jsonl(path: str | os.PathLike[str]) -> list[Message]:
    """Read a JSONL transcript file; a malformed line raises :class:`TranscriptError` naming it."""
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as handle:
            return load_jsonl(handle, path=name)
    except FileNotFoundError:
        raise TranscriptError("no such file; check the path", path=name) from None
    except UnicodeDecodeError as error:
        raise TranscriptError(f"not UTF-8 text ({error.reason})", path=name) from None


def dump_jsonl(messages: Iterable[Message]) -> str:
    """Serialise messages as JSONL text, keeping ids and additional properties."""
    return "".join(json.dumps(message_to_openai(m, metadata=True), ensure_ascii=False) + "\n" for m in messages)


def write_jsonl(path: str | os.PathLike[str], messages: Iterable[Message]) -> None:
    """Write a transcript atomically: the file appears complete or not at all."""
    text = dump_jsonl(messages)
    target = Path(path)
    try:
        mode = target.stat().st_mode & 0o777  # replacing a file keeps its permissions
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or Path("."))
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
