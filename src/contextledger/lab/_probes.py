"""Deterministic probes: does the text a model received on a turn hold each expected value?

The expectations come from :mod:`contextledger.lab._contract`; this module
reads what was sent and checks it.  Two rules keep a probe honest:

- it reads what the model receives *after decoding*: a facts block's quoted
  values are unescaped (``\\u003capp\\u003e`` is ``<app>``), and a payload that
  is a JSON document (tool arguments, a JSON tool result) is read as its
  decoded strings;
- it never matches the library's own wording: from a facts block only the
  value fields are read (not its preamble, labels or evidence), and the fixed
  labels a policy writes (:data:`LIBRARY_WORDING`, plus any a policy
  declares) are removed before looking.  A superseded value ``evidence`` is
  therefore not "found" in the block's word *evidence*.

Presence is then an exact, case-sensitive substring match.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from contextledger.facts._block import EMPTY_BLOCK
from contextledger.lab._contract import Expectation, Pair
from contextledger.messages import Message

__all__ = ["ProbeOutcome", "check_context", "decoded_text", "is_present"]

_BLOCK = re.compile(r"<user_facts>.*?</user_facts>", re.DOTALL)
# One fact line of the block: "N. key = "value" (turn T; evidence: "...")"; the value is the first quoted string.
_VALUE_FIELD = re.compile(r'^\s*\d+\.\s*\S+\s*=\s*("(?:[^"\\]|\\.)*")', re.MULTILINE)
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)", re.DOTALL)
_SHORT = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\", "/": "/"}


def _unquote(quoted: str) -> str:
    """A block value back to the text the user wrote (the block's escapes are JSON's, plus ``\\UXXXXXXXX``)."""

    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if code[0] in "uU" and len(code) > 1:
            return chr(int(code[1:], 16))
        return _SHORT.get(code, code)

    return _ESCAPE.sub(one, quoted[1:-1])


def _block_values(block: str) -> str:
    return "\n".join(_unquote(match.group(1)) for match in _VALUE_FIELD.finditer(block))


def _json_strings(value: object) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _json_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _json_strings(item)


def _decoded(text: str, wording: Sequence[str]) -> str:
    text = text.replace(EMPTY_BLOCK, "\n")
    text = _BLOCK.sub(lambda match: "\n" + _block_values(match.group(0)) + "\n", text)
    for label in wording:
        if label:
            text = text.replace(label, "\n")
    stripped = text.strip()
    if stripped[:1] in ("{", "[", '"'):
        try:
            document = json.loads(stripped)
        except ValueError:
            return text
        return "\n".join(_json_strings(document))
    return text


def decoded_text(requests: Iterable[Iterable[Message]], wording: Sequence[str] = ()) -> str:
    """Everything the model read on a turn, decoded and without the library's wording, one payload a line."""
    return "\n".join(
        _decoded(text, wording) for request in requests for message in request for text in message.payload_texts()
    )


def is_present(value: str, text: str) -> bool:
    """Exact, case-sensitive presence of ``value`` in decoded ``text``."""
    return value in text


@dataclass(frozen=True, slots=True)
class ProbeOutcome:
    """The probes of one turn's context: which expected pairs were found in it."""

    current_present: tuple[Pair, ...]
    current_missing: tuple[Pair, ...]
    superseded_present: tuple[Pair, ...]
    forgotten_present: tuple[Pair, ...]
    evicted_present: tuple[Pair, ...]
    rejected_present: tuple[Pair, ...]
    prohibition_present: bool | None  # None: no prohibition is in force on this turn

    def to_json(self, expectation: Expectation) -> dict[str, object]:
        def pairs(items: Iterable[Pair]) -> list[list[str]]:
            return [[key, value] for key, value in items]

        return {
            "current": {
                "expected": len(expectation.current),
                "present": pairs(self.current_present),
                "missing": pairs(self.current_missing),
            },
            "superseded": {"expected": len(expectation.superseded), "present": pairs(self.superseded_present)},
            "prohibition": None if self.prohibition_present is None else self.prohibition_present,
            "forgotten": {"expected": len(expectation.forgotten), "present": pairs(self.forgotten_present)},
            "evicted": {"expected": len(expectation.evicted), "present": pairs(self.evicted_present)},
            "rejected": {"expected": len(expectation.rejected), "present": pairs(self.rejected_present)},
        }


def check_context(expectation: Expectation, text: str) -> ProbeOutcome:
    """Probe the decoded text of a turn's requests against its expectation."""

    def present(pairs: Iterable[Pair]) -> tuple[Pair, ...]:
        return tuple(pair for pair in pairs if is_present(pair[1], text))

    current_present = present(expectation.current)
    prohibition = expectation.prohibition
    return ProbeOutcome(
        current_present=current_present,
        current_missing=tuple(pair for pair in expectation.current if pair not in current_present),
        superseded_present=present(expectation.superseded),
        forgotten_present=present(expectation.forgotten),
        evicted_present=present(expectation.evicted),
        rejected_present=present(expectation.rejected),
        prohibition_present=None if prohibition is None else is_present(prohibition, text),
    )
