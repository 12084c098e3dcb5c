"""Plain Python functions as tools a model can call.

A tool is described to the model from its signature and docstring, so the code
a developer already wrote is the single source of truth: no schema to keep in
step by hand.  Arguments the model sends are checked against that schema
before the function runs, because models do send wrong types and missing
fields, and a clear error sent back to the model lets it try again.
"""

from __future__ import annotations

import enum
import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, overload

from contextledger.exceptions import ToolError

__all__ = ["FunctionTool", "tool"]

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_PRIMITIVES: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema(hint: Any, where: str) -> dict[str, Any]:
    """JSON schema for a type hint; only what JSON can carry is accepted."""
    description = None
    if get_origin(hint) is typing.Annotated:
        hint, *metadata = get_args(hint)
        description = next((m for m in metadata if isinstance(m, str)), None)
    schema = _plain_schema(hint, where)
    if description:
        schema = {**schema, "description": description}
    return schema


def _plain_schema(hint: Any, where: str) -> dict[str, Any]:
    if hint is inspect.Parameter.empty or hint is Any:
        return {}
    if hint is None or hint is type(None):
        return {"type": "null"}
    if hint in _PRIMITIVES:
        return {"type": _PRIMITIVES[hint]}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        values = [member.value for member in hint]
        return {"enum": values}
    origin = get_origin(hint)
    if origin is Literal:
        return {"enum": list(get_args(hint))}
    if origin in (Union, types.UnionType):
        options = [_schema(arg, where) for arg in get_args(hint)]
        return {"anyOf": options}
    if origin in (list, tuple, set, frozenset, Sequence) or hint in (list, tuple):
        args = get_args(hint)
        items = _schema(args[0], where) if args and args[0] is not Ellipsis else {}
        return {"type": "array", "items": items}
    if origin in (dict, Mapping) or hint is dict:
        args = get_args(hint)
        if args and args[0] is not str:
            raise ToolError(f"{where}: dict keys must be str to be sent as JSON, got {args[0]!r}")
        return {"type": "object", "additionalProperties": _schema(args[1], where) if args else {}}
    raise ToolError(
        f"{where}: type {hint!r} cannot be described to a model; use str, int, float, bool, None, "
        "Literal, an Enum, list[...] or dict[str, ...] (optionally in Annotated[..., 'description'])"
    )


def _matches(value: Any, schema: Mapping[str, Any]) -> bool:
    """Whether a decoded JSON value fits a schema built by :func:`_schema` (a strict, small subset)."""
    if "anyOf" in schema:
        return any(_matches(value, option) for option in schema["anyOf"])
    if "enum" in schema:
        # JSON true equals 1 in Python; a boolean must not pass for an integer value, nor the reverse.
        return any(value == option and isinstance(value, bool) == isinstance(option, bool) for option in schema["enum"])
    kind = schema.get("type")
    if kind is None:
        return True
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, list) and all(_matches(item, schema.get("items", {})) for item in value)
    if kind == "object":
        inner = schema.get("additionalProperties", {})
        return isinstance(value, dict) and all(_matches(item, inner) for item in value.values())
    return True


def _convert(value: Any, hint: Any) -> Any:
    """Turn checked JSON into the Enum members ``hint`` names, wherever they sit (Optional, unions, lists, dicts)."""
    if get_origin(hint) is typing.Annotated:
        hint = get_args(hint)[0]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        # The first option the value fits is the one it is taken as, as the schema's anyOf reads.
        option = next((arg for arg in get_args(hint) if _matches(value, _schema(arg, ""))), None)
        return value if option is None else _convert(value, option)
    args = get_args(hint)
    if isinstance(value, list) and args and args[0] is not Ellipsis:
        return [_convert(item, args[0]) for item in value]
    if isinstance(value, dict) and len(args) == 2:
        return {key: _convert(item, args[1]) for key, item in value.items()}
    return value


def _has_enum(hint: Any) -> bool:
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return True
    return any(_has_enum(arg) for arg in get_args(hint) if arg is not Ellipsis)


def _first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    return inspect.cleandoc(doc).split("\n\n", 1)[0].replace("\n", " ").strip()


@dataclass(frozen=True)
class FunctionTool:
    """A Python function the model may call, with the schema it was described by.

    Build one with :func:`tool`, or pass the function itself to an agent.
    """

    function: Callable[..., Any]
    name: str
    description: str
    parameters: Mapping[str, Any]
    # Annotations of the parameters whose values hold Enum members, to build them from the JSON values.
    _enums: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def to_openai(self) -> dict[str, Any]:
        """The tool as an OpenAI ``tools`` entry, which every OpenAI-compatible server understands."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": dict(self.parameters)},
        }

    def check_arguments(self, raw: str) -> dict[str, Any]:
        """Decode and check the model's argument text; a :class:`ToolError` says what the model got wrong."""
        try:
            arguments = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as error:
            raise ToolError(f"arguments for {self.name} are not valid JSON ({error.msg}): {raw[:200]!r}") from None
        if not isinstance(arguments, dict):
            raise ToolError(f"arguments for {self.name} must be a JSON object, got {raw[:200]!r}")
        properties: Mapping[str, Any] = self.parameters.get("properties", {})
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            raise ToolError(f"{self.name} has no parameter {', '.join(unknown)}; it takes {', '.join(properties)}")
        missing = [name for name in self.parameters.get("required", ()) if name not in arguments]
        if missing:
            raise ToolError(f"{self.name} needs {', '.join(missing)}")
        for name, value in arguments.items():
            if not _matches(value, properties[name]):
                raise ToolError(
                    f"{self.name}: {name}={json.dumps(value)[:100]} does not match {json.dumps(properties[name])}"
                )
            if name in self._enums:
                arguments[name] = _convert(value, self._enums[name])
        return arguments

    async def invoke(self, raw_arguments: str) -> str:
        """Run the function on the model's arguments and return the text sent back as the tool result."""
        arguments = self.check_arguments(raw_arguments)
        result = self.function(**arguments)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, str):
            return result
        try:
            return json.dumps(result, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            return str(result)


@overload
def tool(function: Callable[..., Any], *, name: str | None = None, description: str | None = None) -> FunctionTool: ...


@overload
def tool(
    function: None = None, *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    function: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Describe ``function`` as a tool (usable as ``@tool`` or ``@tool(name=...)``).

    The description is the docstring's first paragraph unless given; each
    parameter's type comes from its annotation, and ``Annotated[T, "text"]``
    adds a description for that parameter.
    """

    def build(fn: Callable[..., Any]) -> FunctionTool:
        return _describe(fn, name=name, description=description)

    return build if function is None else build(function)


def _describe(
    function: Callable[..., Any] | FunctionTool, *, name: str | None = None, description: str | None = None
) -> FunctionTool:
    if isinstance(function, FunctionTool):
        return function
    if not callable(function):
        raise ToolError(f"a tool must be a function, got {function!r}")
    tool_name = name if name is not None else getattr(function, "__name__", "")
    if not isinstance(tool_name, str) or not tool_name or not set(tool_name) <= _NAME_CHARS or len(tool_name) > 64:
        raise ToolError(
            f"tool name {tool_name!r} is not usable: models accept 1-64 letters, digits, '_' or '-'; pass name='...'"
        )
    try:
        signature = inspect.signature(function)
        hints = get_type_hints(function, include_extras=True)
    except (TypeError, ValueError, NameError) as error:
        raise ToolError(f"cannot read the signature of tool {tool_name!r}: {error}") from None
    properties: dict[str, Any] = {}
    required: list[str] = []
    enums: dict[str, Any] = {}
    for parameter in signature.parameters.values():
        where = f"tool {tool_name!r}, parameter {parameter.name!r}"
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ToolError(f"{where}: *args and **kwargs cannot be described to a model; name each parameter")
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise ToolError(f"{where}: positional-only parameters cannot be passed by name; remove the '/'")
        hint = hints.get(parameter.name, parameter.annotation)
        properties[parameter.name] = _schema(hint, where)
        if _has_enum(hint):
            enums[parameter.name] = hint
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
    parameters: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    text = description if description is not None else _first_paragraph(function.__doc__)
    if not isinstance(text, str):
        raise ToolError(f"the description of tool {tool_name!r} must be text, got {type(text).__name__}")
    return FunctionTool(function, tool_name, text, parameters, enums)


def describe_tools(tools: Sequence[Callable[..., Any] | FunctionTool]) -> dict[str, FunctionTool]:
    """Tools by name; two tools with one name would make the model's choice ambiguous, so that is refused."""
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence):
        raise ToolError(f"tools must be a list of functions, got {tools!r}")
    described: dict[str, FunctionTool] = {}
    for item in tools:
        built = _describe(item)
        if built.name in described:
            raise ToolError(f"two tools are named {built.name!r}; give one of them another name with tool(name=...)")
        described[built.name] = built
    return described
