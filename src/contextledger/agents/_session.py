"""A conversation's identity and the small state its providers keep between turns."""

from __future__ import annotations

import copy
import json
import math
import uuid
from typing import Any

from contextledger.exceptions import SessionError

__all__ = ["Session"]

_STATE_RULE = "providers must keep only strings, numbers, booleans, None, lists and dicts in session.state"


def _state_problem(state: dict[str, Any]) -> str | None:
    try:
        return _not_json(state, "state")
    except RecursionError:
        return "state contains itself or nests too deeply"


def _not_json(value: object, path: str) -> str | None:
    """Where ``value`` stops being plain JSON, or None.

    ``json.dumps`` would quietly turn an int key into a string, a tuple into a list and write
    NaN as invalid JSON; a restored session would then differ from the one saved.
    """
    if value is None or isinstance(value, (str, bool, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path} is {value!r}"
    if isinstance(value, list):
        return next((p for i, item in enumerate(value) if (p := _not_json(item, f"{path}[{i}]"))), None)
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} has the key {key!r} ({type(key).__name__}, not a string)"
            problem = _not_json(item, f"{path}[{key!r}]")
            if problem:
                return problem
        return None
    return f"{path} is a {type(value).__name__}"


class Session:
    """One conversation: an id (the key of its stored history) and JSON state for providers.

    ``state`` is what survives serialisation; providers write to it only after
    a successful run, so a failed turn leaves it as it was.  Caches that can be
    rebuilt from the history and the state (a compaction provider's index) live
    beside it, are never serialised, and are dropped when a run fails.
    """

    __slots__ = ("_cache", "session_id", "state")

    def __init__(self, session_id: str | None = None, state: dict[str, Any] | None = None) -> None:
        if session_id is None:
            session_id = uuid.uuid4().hex
        if not isinstance(session_id, str) or not session_id:
            raise SessionError(f"session_id must be a non-empty string, got {session_id!r}")
        if state is not None and not isinstance(state, dict):
            raise SessionError(f"session state must be a dict, got {type(state).__name__}")
        self.session_id = session_id
        self.state: dict[str, Any] = {} if state is None else state
        self._cache: dict[object, dict[str, Any]] = {}

    def __repr__(self) -> str:
        return f"Session(session_id={self.session_id!r}, state_keys={sorted(self.state)})"

    def to_dict(self) -> dict[str, Any]:
        """A deep copy of what identifies the session and its state, as plain JSON values."""
        return {"session_id": self.session_id, "state": copy.deepcopy(self.state)}

    def to_json(self) -> str:
        problem = _state_problem(self.state)
        if problem is None:
            try:
                return json.dumps(self.to_dict(), ensure_ascii=False, allow_nan=False, sort_keys=True)
            except (TypeError, ValueError, RecursionError) as error:
                problem = str(error)
        raise SessionError(f"session {self.session_id!r} holds state that is not JSON ({problem}); {_STATE_RULE}")

    @classmethod
    def from_dict(cls, data: object) -> Session:
        if not isinstance(data, dict) or not isinstance(data.get("session_id"), str):
            raise SessionError(f"a session must be an object with a string 'session_id', got {data!r:.120}")
        unknown = set(data) - {"session_id", "state"}
        if unknown:
            raise SessionError(f"a session has only 'session_id' and 'state'; unexpected {sorted(unknown)}")
        state = data.get("state", {})
        if not isinstance(state, dict):
            raise SessionError(f"session 'state' must be an object, got {type(state).__name__}")
        problem = _state_problem(state)
        if problem is not None:
            raise SessionError(f"session {data['session_id']!r} has state that is not JSON ({problem}); {_STATE_RULE}")
        return cls(data["session_id"], copy.deepcopy(state))

    @classmethod
    def from_json(cls, text: str | bytes) -> Session:
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as error:
            raise SessionError(f"not a serialised session: {error}") from None
        return cls.from_dict(data)

    def cache(self, owner: object) -> dict[str, Any]:
        """``owner``'s scratch space in this session (a provider's index, a history's cursor).

        For what can be rebuilt from the history and ``state``: it is never serialised, and it
        is emptied when a run fails, so nothing in it can outlive a turn that did not happen.
        """
        space: dict[str, Any] | None = self._cache.get(owner)
        if space is None:
            space = self._cache[owner] = {}
        return space

    def drop_caches(self) -> None:
        """Empty every owner's scratch space (see :meth:`cache`); the agent does so when a run fails."""
        self._cache.clear()
