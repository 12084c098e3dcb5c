"""Reading JSON that the library can write back as it was read, from a proxy client or a file.

Python's ``json`` takes more than JSON: ``NaN`` and ``Infinity`` (which it would write back,
making text no other parser takes), numbers that overflow to infinity (``1e400``), lone
surrogates (``"\\ud800"``, text that cannot be written as UTF-8, so it fails only later, when a
reply or a store writes it), nesting deep enough to exhaust the stack (``RecursionError``), and
an object naming a key twice (it keeps the last, while a reader passed the raw text, such as an
upstream behind the proxy, may keep the first: the two would not see the same request).
:func:`strict_loads` refuses each of them up front with :class:`UnwritableJSONError`, a
``ValueError`` whose message says what was wrong, so callers turn it into their own error (a 400
in the proxy, a transcript error in the command line).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["MAX_DEPTH", "UnwritableJSONError", "strict_loads"]

MAX_DEPTH = 128
"""The deepest nesting of arrays and objects taken (a chat message nests a few levels; the
library's readers and writers recurse)."""


class UnwritableJSONError(ValueError):
    """Syntactically JSON (or close to it) but not a value the library can write back."""


def _no_constant(name: str) -> Any:
    raise UnwritableJSONError(f"{name} is not a JSON number; send numbers as finite decimals")


def _finite(literal: str) -> float:
    number = float(literal)
    if not math.isfinite(number):
        raise UnwritableJSONError(f"the number {literal[:40]} is out of range (a double holds at most about 1.8e308)")
    return number


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        names = [name for name, _ in pairs]
        twice = next(name for position, name in enumerate(names) if name in names[:position])
        raise UnwritableJSONError(f"an object names the key {twice!r} twice; send each key once")
    return value


# A surrogate can only reach a decoded string through a ``\\uD800``-``\\uDFFF`` escape (UTF-8 input
# cannot carry one), and a lone one only through an escape that is not half of a pair, so text
# without such an escape (an emoji escaped as a pair, as ``json.dumps`` writes it, is fine) needs
# no look at its strings.  A match may be an escaped backslash followed by ``u``: the exact check
# over the strings then decides.
_HIGH_TAIL = r"[89abAB][0-9a-fA-F]{2}"
_LOW_TAIL = r"[c-fC-F][0-9a-fA-F]{2}"
_PREFIX = r"\\u[dD]"  # first, so the scan looks for a literal and is as fast as a substring search
_LONE_ESCAPE = re.compile(
    f"{_PREFIX}(?:{_HIGH_TAIL}(?!{_PREFIX}{_LOW_TAIL})|(?<!{_PREFIX}{_HIGH_TAIL}{_PREFIX}){_LOW_TAIL})"
)
_LONE_ESCAPE_BYTES = re.compile(_LONE_ESCAPE.pattern.encode())


def strict_loads(text: str | bytes, *, depth: int = MAX_DEPTH) -> Any:
    """``json.loads``, refusing what RFC 8259 or UTF-8 cannot carry (see the module docstring).

    A syntax error is ``json.JSONDecodeError`` as usual; everything this module adds is
    :class:`UnwritableJSONError`.  Its checks ride on the parser (numbers, keys) or look only
    where a problem can be (nesting, escapes), so a large body costs little more than ``json.loads``.
    ``depth``: the nesting taken, less than :data:`MAX_DEPTH` for a value read apart from the
    document it sits in (an item of a body's array, two levels down).
    """
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite, object_pairs_hook=_unique)
    except RecursionError:
        raise UnwritableJSONError(f"it nests arrays and objects deeper than {MAX_DEPTH} levels") from None
    if (type(value) is dict or type(value) is list) and _too_deep(value, depth):
        raise UnwritableJSONError(f"it nests arrays and objects deeper than {MAX_DEPTH} levels")
    escaped = _LONE_ESCAPE_BYTES.search(text) if isinstance(text, bytes) else _LONE_ESCAPE.search(text)
    if escaped is not None:
        problem = _lone_surrogate(value)
        if problem is not None:
            raise UnwritableJSONError(problem)
    return value


def _too_deep(value: Any, depth: int) -> bool:
    """Whether ``value`` nests containers more than ``depth`` levels, one level at a time
    (``json.loads`` makes only plain dicts and lists, hence the exact type tests, three times
    faster than ``isinstance`` on a large body)."""
    level = [value]
    for _ in range(depth):
        below: list[Any] = []
        keep = below.append
        for item in level:
            for child in item.values() if type(item) is dict else item:
                kind = type(child)
                if kind is dict or kind is list:
                    keep(child)
        if not below:
            return False
        level = below
    return True


def _lone_surrogate(value: Any) -> str | None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and not item.isascii():
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as error:
                return f"a string holds a lone surrogate {item[error.start]!r}, which is not Unicode text"
    return None
