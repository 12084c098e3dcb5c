"""Timelines: the fixed conversations the drift lab replays, as validated JSON data files.

A timeline is data, not code, so that anyone can write one and so that every
policy is compared on exactly the same input.  A file is checked as a whole
before anything runs; the first problem found raises
:class:`~contextledger.exceptions.TimelineError` naming the file, the entry
(``turns[12].user``) and what is wrong with it.

Schema (version 1)::

    {
      "schema": 1,                                  required; the only version so far
      "name": "correction",                         required; letters, digits, '-' and '_'
      "description": "What this timeline shows.",   optional
      "instructions": "You are ...",                optional; the system prompt every policy sends
      "tools": [                                    optional; offered to the model on every turn
        {"name": "search_logs",                     a Python identifier
         "description": "Search the service logs.", required
         "default_result": "no matching lines"}     optional; the result on turns that script none
      ],
      "turns": [                                    required; at least one
        {"user": "module=Reporting; database=PostgreSQL",   required; what the user writes
         "tool_results": {"search_logs": "..."},    optional; canned results if the model calls the tool
         "assistant": "...",                        optional; a scripted reply: no model is asked this turn
         "host_commands": ["forget module"],        optional; run by the host before the user message,
                                                    never sent to a model: "forget KEY" or "forget"
         "note": "..."}                             optional; for the reader, ignored
      ],
      "questions": {"module": "Which module is affected?"}   optional; the answer probes' question for a key
    }

User messages follow the controlled-facts contract: ``key=value`` declarations
(allowed keys, at most five per message, message at most 4096 characters).  A
message whose declarations the contract would reject (``version=5.0;
colour=blue``) is replayed as written: nothing of it is admitted, and the
values it tried to declare are probed as *rejected*.  The probes are computed
from the declarations and the host commands, never written by hand, so they
cannot disagree with the timeline.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from contextledger.exceptions import FactRejectedError, TimelineError
from contextledger.facts import ALLOWED_KEYS, MAX_MESSAGE_CHARS, parse_assertions
from contextledger.lab._contract import expectations

__all__ = [
    "SCHEMA_VERSION",
    "HostCommand",
    "Timeline",
    "ToolSpec",
    "Turn",
    "load_timeline",
    "load_timelines",
    "parse_timeline",
    "shipped_timeline_paths",
]

SCHEMA_VERSION = 1
DEFAULT_INSTRUCTIONS = (
    "You are a support assistant for an internal service desk. Answer briefly, using the conversation."
)
DEFAULT_TOOL_RESULT = "no data"

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,79}")
_TOOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_SEGMENT = re.compile(r";|\r\n|\r|\n")
_TOP_KEYS = ("schema", "name", "description", "instructions", "tools", "turns", "questions")
_TOOL_KEYS = ("name", "description", "default_result")
_TURN_KEYS = ("user", "tool_results", "assistant", "host_commands", "note")


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool the model may call; its results are canned, so a run never reaches anything outside."""

    name: str
    description: str
    default_result: str = DEFAULT_TOOL_RESULT


@dataclass(frozen=True, slots=True)
class HostCommand:
    """A command the host runs between turns (``forget KEY`` or ``forget``); it never reaches a model."""

    text: str
    key: str | None  # None: forget everything


@dataclass(frozen=True, slots=True)
class Turn:
    """One user turn and what surrounds it; ``number`` starts at 1.

    ``declarations`` are what the facts contract admits from the message;
    ``rejected`` the values it tried to declare when the contract refuses the
    whole batch (then ``declarations`` is empty), with ``rejection`` saying why.
    """

    number: int
    user: str
    declarations: Mapping[str, str]
    tool_results: Mapping[str, str] = field(default_factory=dict)
    scripted_reply: str | None = None
    host_commands: tuple[HostCommand, ...] = ()
    rejected: Mapping[str, str] = field(default_factory=dict)
    rejection: str | None = None

    @property
    def forget_keys(self) -> tuple[str | None, ...]:
        return tuple(command.key for command in self.host_commands)


@dataclass(frozen=True, slots=True)
class Timeline:
    """A validated timeline; ``source`` says where it was read from (a path, or ``shipped:NAME.json``)."""

    name: str
    description: str
    instructions: str
    tools: tuple[ToolSpec, ...]
    turns: tuple[Turn, ...]
    source: str
    questions: Mapping[str, str] = field(default_factory=dict)

    def question(self, key: str) -> str:
        """The answer probes' question about ``key``: the timeline's own, or one derived from the key."""
        return self.questions.get(key) or f"What is the current {key}? Reply with the value only."

    def tool_result(self, turn: Turn, name: str) -> str:
        """What the canned tool ``name`` returns on ``turn``."""
        if name in turn.tool_results:
            return turn.tool_results[name]
        for tool in self.tools:
            if tool.name == name:
                return tool.default_result
        return f"unknown tool {name!r}"


class _Checker:
    """Walks one decoded file, raising a TimelineError that names the file and the entry."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, entry: str | None, problem: str) -> TimelineError:
        return TimelineError(problem, path=self.source, entry=entry)

    def text(self, value: object, entry: str, *, empty: bool = False) -> str:
        if not isinstance(value, str):
            raise self.fail(entry, f"must be a string, got {_kind(value)}")
        if not empty and not value.strip():
            raise self.fail(entry, "must not be empty")
        return value

    def keys(self, value: Mapping[str, Any], allowed: Sequence[str], entry: str | None) -> None:
        for key in value:
            if key not in allowed:
                where = f"{entry}.{key}" if entry else str(key)
                raise self.fail(where, f"unknown field; allowed fields here are {', '.join(allowed)}")


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def _host_command(check: _Checker, raw: object, entry: str) -> HostCommand:
    text = check.text(raw, entry)
    words = text.split()
    if words[0].lower() != "forget" or len(words) > 2:
        raise check.fail(entry, f"unknown host command {text!r}; use 'forget KEY' or 'forget'")
    if len(words) == 1:
        return HostCommand(text=text.strip(), key=None)
    key = words[1].lower()
    if key not in ALLOWED_KEYS:
        allowed = ", ".join(sorted(ALLOWED_KEYS))
        raise check.fail(entry, f"cannot forget {words[1]!r}: not a fact key; use one of {allowed}")
    return HostCommand(text=text.strip(), key=key)


def _hidden_declaration(user: str, read: Mapping[str, str]) -> str | None:
    """A segment like ``prose. key=value`` with an allowed key that the contract did not read as a declaration."""
    for segment in _SEGMENT.split(user):
        left, equals, _ = segment.partition("=")
        if equals and not left.strip().isidentifier() and "=" not in _:
            words = left.split()
            if words and words[-1].lower() in ALLOWED_KEYS and words[-1].lower() not in read:
                return segment.strip()
    return None


def _attempted(user: str) -> dict[str, str]:
    """The allowed keys a refused message tried to declare, with their values (the last of a key wins).

    Read here, segment by segment, rather than through the facts package's
    internals: the lab only needs to know which values must not become current.
    """
    found: dict[str, str] = {}
    for segment in _SEGMENT.split(user):
        key, equals, value = segment.partition("=")
        name = key.strip().lower()
        if equals and key.strip().isidentifier() and name in ALLOWED_KEYS and value.strip():
            found.pop(name, None)
            found[name] = value.strip()
    return found


def _declarations(check: _Checker, user: str, entry: str) -> tuple[dict[str, str], dict[str, str], str | None]:
    """(admitted, rejected, why rejected) for one user message."""
    if len(user) > MAX_MESSAGE_CHARS:
        raise check.fail(entry, f"is {len(user)} characters; a user message may have at most {MAX_MESSAGE_CHARS}")
    try:
        candidates = parse_assertions(user)
    except FactRejectedError as error:
        return {}, _attempted(user), "; ".join(error.problems) or str(error)
    found: dict[str, str] = {}
    for candidate in candidates:
        found.pop(candidate.key, None)  # the last declaration of a key wins
        found[candidate.key] = candidate.value
    hidden = _hidden_declaration(user, found)
    if hidden is not None:
        raise check.fail(
            entry,
            f"{hidden!r} reads as prose, not a declaration, because text comes before the key; "
            "put each key=value on its own line or after a ';'",
        )
    return found, {}, None


def _tools(check: _Checker, raw: object) -> tuple[ToolSpec, ...]:
    if not isinstance(raw, list):
        raise check.fail("tools", f"must be a list of tool objects, got {_kind(raw)}")
    tools: list[ToolSpec] = []
    for position, item in enumerate(raw):
        entry = f"tools[{position}]"
        if not isinstance(item, dict):
            raise check.fail(entry, f"must be an object with name and description, got {_kind(item)}")
        check.keys(item, _TOOL_KEYS, entry)
        if "name" not in item:
            raise check.fail(f"{entry}.name", "missing; give the tool a name such as search_logs")
        name = check.text(item["name"], f"{entry}.name")
        if not _TOOL_NAME.fullmatch(name):
            raise check.fail(f"{entry}.name", f"{name!r} is not a valid tool name; use letters, digits and '_'")
        if any(tool.name == name for tool in tools):
            raise check.fail(f"{entry}.name", f"tool {name!r} is declared twice")
        if "description" not in item:
            raise check.fail(f"{entry}.description", "missing; say what the tool is for")
        description = check.text(item["description"], f"{entry}.description")
        default = DEFAULT_TOOL_RESULT
        if "default_result" in item:
            default = check.text(item["default_result"], f"{entry}.default_result", empty=True)
        tools.append(ToolSpec(name=name, description=description, default_result=default))
    return tuple(tools)


def _turn(check: _Checker, raw: object, number: int, tools: Sequence[ToolSpec]) -> Turn:
    entry = f"turns[{number - 1}]"
    if not isinstance(raw, dict):
        raise check.fail(entry, f"must be an object with a 'user' message, got {_kind(raw)}")
    check.keys(raw, _TURN_KEYS, entry)
    if "user" not in raw:
        raise check.fail(f"{entry}.user", "missing; every turn has the user's message")
    user = check.text(raw["user"], f"{entry}.user")
    declarations, rejected, rejection = _declarations(check, user, f"{entry}.user")
    results: dict[str, str] = {}
    if "tool_results" in raw:
        given = raw["tool_results"]
        if not isinstance(given, dict):
            raise check.fail(f"{entry}.tool_results", f"must be an object of tool name to result, got {_kind(given)}")
        names = [tool.name for tool in tools]
        for name, result in given.items():
            if name not in names:
                known = ", ".join(names) if names else "none are declared"
                raise check.fail(f"{entry}.tool_results.{name}", f"no tool named {name!r} in 'tools' ({known})")
            results[name] = check.text(result, f"{entry}.tool_results.{name}", empty=True)
    reply = None
    if "assistant" in raw:
        reply = check.text(raw["assistant"], f"{entry}.assistant")
    commands: list[HostCommand] = []
    if "host_commands" in raw:
        given = raw["host_commands"]
        if not isinstance(given, list) or not given:
            raise check.fail(f"{entry}.host_commands", f"must be a non-empty list of commands, got {_kind(given)}")
        commands = [_host_command(check, item, f"{entry}.host_commands[{i}]") for i, item in enumerate(given)]
    if "note" in raw:
        check.text(raw["note"], f"{entry}.note", empty=True)
    return Turn(
        number=number,
        user=user,
        declarations=declarations,
        tool_results=results,
        scripted_reply=reply,
        host_commands=tuple(commands),
        rejected=rejected,
        rejection=rejection,
    )


def parse_timeline(data: object, *, source: str = "<timeline>") -> Timeline:
    """Validate decoded JSON and build a :class:`Timeline`, or raise the first problem found."""
    check = _Checker(source)
    if not isinstance(data, dict):
        raise check.fail(None, f"the file must hold one JSON object, got {_kind(data)}")
    check.keys(data, _TOP_KEYS, None)
    if "schema" not in data:
        raise check.fail("schema", f'missing; write "schema": {SCHEMA_VERSION}')
    if data["schema"] != SCHEMA_VERSION or isinstance(data["schema"], bool):
        raise check.fail("schema", f"unsupported schema {data['schema']!r}; this version reads schema {SCHEMA_VERSION}")
    if "name" not in data:
        raise check.fail("name", "missing; give the timeline a short name such as my-timeline")
    name = check.text(data["name"], "name")
    if not _NAME.fullmatch(name):
        raise check.fail("name", f"{name!r} is not a valid name; use up to 80 letters, digits, '-' and '_'")
    description = check.text(data.get("description", ""), "description", empty=True)
    instructions = check.text(data.get("instructions", DEFAULT_INSTRUCTIONS), "instructions")
    tools = _tools(check, data["tools"]) if "tools" in data else ()
    if "turns" not in data:
        raise check.fail("turns", "missing; a timeline needs a list of turns")
    raw_turns = data["turns"]
    if not isinstance(raw_turns, list) or not raw_turns:
        raise check.fail("turns", f"must be a non-empty list of turns, got {_kind(raw_turns)}")
    turns = tuple(_turn(check, item, number, tools) for number, item in enumerate(raw_turns, start=1))
    questions = _questions(check, data["questions"]) if "questions" in data else {}
    timeline = Timeline(
        name=name,
        description=description,
        instructions=instructions,
        tools=tools,
        turns=turns,
        source=source,
        questions=questions,
    )
    _check_probeable(timeline)
    return timeline


def _questions(check: _Checker, raw: object) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise check.fail("questions", f"must be an object of fact key to question, got {_kind(raw)}")
    found: dict[str, str] = {}
    for key, question in raw.items():
        if str(key).lower() not in ALLOWED_KEYS:
            allowed = ", ".join(sorted(ALLOWED_KEYS))
            raise check.fail(f"questions.{key}", f"{key!r} is not a fact key; use one of {allowed}")
        found[str(key).lower()] = check.text(question, f"questions.{key}")
    return found


def _check_probeable(timeline: Timeline) -> None:
    """Refuse a timeline whose probes could not fail or could not be told apart.

    A value the instructions already mention would always be "present"; an
    old value contained in a current one (``SQL`` and ``SQL Server``) would be
    found whenever the current one is.
    """
    declared = {value for turn in timeline.turns for value in turn.declarations.values()}
    for value in sorted(declared):
        if value in timeline.instructions:
            raise TimelineError(
                f"mentions {value!r}, a declared value the probes look for, so its probe could never fail; "
                "keep declared values out of the instructions",
                path=timeline.source,
                entry="instructions",
            )
    for expectation in expectations(timeline.turns):
        old = expectation.superseded + expectation.forgotten + expectation.evicted + expectation.rejected
        for old_key, old_value in old:
            for key, value in expectation.current:
                if old_value in value:
                    # Name the later of the two declarations: that is where the clash was written.
                    turn = max(
                        _declared_at(timeline, key, value, expectation.turn),
                        _declared_at(timeline, old_key, old_value, expectation.turn),
                    )
                    raise TimelineError(
                        f"the current {key} value {value!r} contains the old {old_key} value {old_value!r}, so a "
                        "probe could not tell them apart; choose values that do not contain one another",
                        path=timeline.source,
                        entry=f"turns[{turn - 1}].user",
                    )


def _declared_at(timeline: Timeline, key: str, value: str, last: int) -> int:
    """The number of the latest turn up to ``last`` that declared (or tried to declare) ``key=value``."""
    for turn in reversed(timeline.turns[:last]):
        if turn.declarations.get(key) == value or turn.rejected.get(key) == value:
            return turn.number
    return last


def load_timeline(path: str | Path, *, source: str | None = None) -> Timeline:
    """Read and validate one timeline file."""
    where = source if source is not None else str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise TimelineError(f"is not UTF-8 text ({error.reason})", path=where) from None
    except OSError as error:
        raise TimelineError(f"cannot be read: {error.strerror or error}", path=where) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise TimelineError(
            f"is not valid JSON: {error.msg}", path=where, entry=f"line {error.lineno}, column {error.colno}"
        ) from None
    return parse_timeline(data, source=where)


def shipped_timeline_paths() -> list[tuple[str, Path]]:
    """The timelines shipped inside the package, as (source label, path), in name order."""
    folder = resources.files("contextledger.lab").joinpath("timelines")
    found = sorted(item.name for item in folder.iterdir() if item.name.endswith(".json"))
    return [(f"shipped:{name}", Path(str(folder.joinpath(name)))) for name in found]


def load_timelines(paths: Sequence[str | Path] = ()) -> list[Timeline]:
    """Load every given file, or every shipped timeline when none is given.

    All files are validated before any is returned, so a bad file stops
    everything before a single model call is made.  Two timelines with the
    same name are refused: reports are keyed by name.
    """
    if paths:
        timelines = [load_timeline(path) for path in paths]
    else:
        timelines = [load_timeline(path, source=label) for label, path in shipped_timeline_paths()]
    return unique_timelines(timelines)


def unique_timelines(timelines: list[Timeline]) -> list[Timeline]:
    """``timelines``, once no two share a name (reports are keyed by name); else a :class:`TimelineError`."""
    seen: dict[str, str] = {}
    for timeline in timelines:
        if timeline.name in seen:
            raise TimelineError(
                f"timeline name {timeline.name!r} is already used by {seen[timeline.name]}; names must be unique",
                path=timeline.source,
                entry="name",
            )
        seen[timeline.name] = timeline.source
    return timelines
