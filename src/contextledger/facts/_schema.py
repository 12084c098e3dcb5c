"""The key set and the bounds of a fact memory, as one value: the seed's by default, or an application's own.

Every rule of the memory (what a declaration is, what is admitted, what is evicted, what
``forget`` may name, how the block is labelled) reads its keys and bounds from a
:class:`FactSchema`, so a schema with other keys and other bounds runs the very same code.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contextledger.exceptions import ConfigurationError

__all__ = ["DEFAULT_SCHEMA", "FactSchema"]

_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_BOUNDS = ("max_facts", "max_value_chars", "max_evidence_chars", "max_message_chars")
SEED_KEYS = frozenset(
    {"product", "module", "priority", "database", "constraint", "customer", "version", "environment", "symptom", "log"}
)


@dataclass(frozen=True, slots=True)
class FactSchema:
    """Which keys a user may declare and how much the memory holds.

    ``keys`` are words (a letter, then letters, digits or ``_``), matched case-insensitively and
    stored in lower case.  ``max_facts`` bounds the store and each extraction; the three
    character bounds apply to a value, an evidence quote and a whole user message.  Over a
    bound is refused, never truncated.  The defaults are the seed's: ten keys, 5, 256, 512, 4096.
    """

    keys: frozenset[str] = field(default=SEED_KEYS)
    max_facts: int = 5
    max_value_chars: int = 256
    max_evidence_chars: int = 512
    max_message_chars: int = 4096

    def __post_init__(self) -> None:
        keys = self.keys
        if isinstance(keys, str) or not isinstance(keys, Iterable):
            raise ConfigurationError(f"schema keys must be a collection of words, got {keys!r}")
        names: set[str] = set()
        for key in keys:
            if not isinstance(key, str) or not _KEY.match(key):
                raise ConfigurationError(
                    f"schema key {key!r} is not a word: start with a letter, then letters, digits or '_'"
                )
            names.add(key.lower())
        if not names:
            raise ConfigurationError("a schema needs at least one key")
        object.__setattr__(self, "keys", frozenset(names))
        for name in _BOUNDS:
            bound = getattr(self, name)
            if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
                raise ConfigurationError(f"schema {name} must be a positive integer, got {bound!r}")
        if self.max_value_chars > self.max_evidence_chars:
            raise ConfigurationError(
                f"schema max_value_chars ({self.max_value_chars}) exceeds max_evidence_chars "
                f"({self.max_evidence_chars}); evidence contains the value, so it cannot be shorter"
            )
        if self.max_evidence_chars > self.max_message_chars:
            raise ConfigurationError(
                f"schema max_evidence_chars ({self.max_evidence_chars}) exceeds max_message_chars "
                f"({self.max_message_chars}); evidence is quoted from the message"
            )

    @property
    def listed_keys(self) -> str:
        """The keys, sorted and comma-separated, as messages name them."""
        return ", ".join(sorted(self.keys))

    def to_dict(self) -> dict[str, Any]:
        """The schema as JSON-ready data (what :meth:`from_dict` reads)."""
        return {"keys": sorted(self.keys), **{name: getattr(self, name) for name in _BOUNDS}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "the schema") -> FactSchema:
        """A schema from ``{"keys": [...], "max_facts": 5, ...}``; a missing bound takes the seed's."""
        if not isinstance(data, Mapping):
            raise ConfigurationError(f'{where} must be a JSON object with "keys" and bounds, got {type(data).__name__}')
        unknown = sorted(set(data) - {"keys", *_BOUNDS})
        if unknown:
            raise ConfigurationError(
                f"{where} has unknown field(s) {', '.join(unknown)}; use keys, {', '.join(_BOUNDS)}"
            )
        if "keys" not in data or not isinstance(data["keys"], list):
            raise ConfigurationError(f'{where} needs "keys": a list of words such as ["product", "module"]')
        return cls(frozenset(data["keys"]), **{name: data[name] for name in _BOUNDS if name in data})

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> FactSchema:
        """A schema from a JSON file (see :meth:`from_dict`)."""
        name = os.fspath(path)
        try:
            with open(name, encoding="utf-8") as handle:
                data = json.load(handle)
        except FileNotFoundError:
            raise ConfigurationError(f"schema file {name!r} does not exist; check the path") from None
        except (ValueError, UnicodeDecodeError) as error:
            raise ConfigurationError(f"schema file {name!r} is not valid JSON ({error})") from None
        return cls.from_dict(data, where=f"schema file {name!r}")


DEFAULT_SCHEMA = FactSchema()
"""The seed's schema: ten keys, at most 5 facts, values ≤ 256, evidence ≤ 512, messages ≤ 4096 characters."""
