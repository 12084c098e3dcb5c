"""Function tools: the schema a model sees, and the checks between what it sends and the function.

A tool's schema is derived from the signature, so these tests pin the translation of every
supported annotation, the refusals (each naming the tool, the parameter and the fix), and the
argument checks a model's JSON goes through before the function runs.  Models send strings for
numbers, ``true`` for ``1`` and fields nobody declared; each of those must come back as a
:class:`ToolError` the agent can report, never reach the function.
"""

from __future__ import annotations

import asyncio
import enum
import json
from typing import Annotated, Any, Literal, Optional, Union

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger.agents import FunctionTool, tool
from contextledger.agents._tools import describe_tools
from contextledger.exceptions import AgentError, ToolError
from tests.sizes import examples


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


def parameter_schema(function: Any, name: str = "value") -> Any:
    return tool(function).parameters["properties"][name]


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


# Schemas from signatures ------------------------------------------------------------------------


def takes_str(value: str) -> None: ...
def takes_int(value: int) -> None: ...
def takes_float(value: float) -> None: ...
def takes_bool(value: bool) -> None: ...
def takes_none(value: None) -> None: ...
def takes_optional(value: Optional[int]) -> None: ...  # noqa: UP045 - the spelling under test
def takes_pipe_optional(value: int | None) -> None: ...
def takes_union(value: Union[int, str]) -> None: ...  # noqa: UP007 - the spelling under test
def takes_literal(value: Literal["fast", "slow"]) -> None: ...
def takes_enum(value: Colour) -> None: ...
def takes_int_enum(value: Level) -> None: ...
def takes_list(value: list[int]) -> None: ...
def takes_bare_list(value: list) -> None: ...  # type: ignore[type-arg]
def takes_dict(value: dict[str, float]) -> None: ...
def takes_bare_dict(value: dict) -> None: ...  # type: ignore[type-arg]
def takes_nested(value: list[dict[str, list[str]]]) -> None: ...
def takes_any(value: Any) -> None: ...
def takes_unannotated(value) -> None: ...  # type: ignore[no-untyped-def]


@pytest.mark.parametrize(
    ("function", "expected"),
    [
        (takes_str, {"type": "string"}),
        (takes_int, {"type": "integer"}),
        (takes_float, {"type": "number"}),
        (takes_bool, {"type": "boolean"}),
        (takes_none, {"type": "null"}),
        (takes_optional, {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
        (takes_pipe_optional, {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
        (takes_union, {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
        (takes_literal, {"enum": ["fast", "slow"]}),
        (takes_enum, {"enum": ["red", "blue"]}),
        (takes_int_enum, {"enum": [1, 2]}),
        (takes_list, {"type": "array", "items": {"type": "integer"}}),
        (takes_bare_list, {"type": "array", "items": {}}),
        (takes_dict, {"type": "object", "additionalProperties": {"type": "number"}}),
        (takes_bare_dict, {"type": "object", "additionalProperties": {}}),
        (
            takes_nested,
            {
                "type": "array",
                "items": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
            },
        ),
        (takes_any, {}),
        (takes_unannotated, {}),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_each_supported_annotation_has_its_json_schema(function: Any, expected: dict[str, Any]) -> None:
    assert parameter_schema(function) == expected


def test_annotated_text_becomes_the_parameter_description() -> None:
    def search(
        query: Annotated[str, "words to look for"],
        limit: Annotated[int, 42, "how many hits at most"] = 10,
        tags: Annotated[list[str], 7] = [],  # noqa: B006 - never mutated
    ) -> None: ...

    properties = tool(search).parameters["properties"]
    assert properties["query"] == {"type": "string", "description": "words to look for"}
    # The first string in the metadata is the description; other metadata is ignored.
    assert properties["limit"] == {"type": "integer", "description": "how many hits at most"}
    assert properties["tags"] == {"type": "array", "items": {"type": "string"}}


def test_parameters_with_defaults_are_not_required_and_order_is_kept() -> None:
    def book(city: str, nights: int, breakfast: bool = False, *, guests: int, note: str | None = None) -> None: ...

    parameters = tool(book).parameters
    assert list(parameters["properties"]) == ["city", "nights", "breakfast", "guests", "note"]
    assert parameters["required"] == ["city", "nights", "guests"]
    assert parameters["type"] == "object"


def test_description_is_the_docstrings_first_paragraph_on_one_line() -> None:
    def weather(city: str) -> str:
        """Today's weather for a city,
        in degrees Celsius.

        The second paragraph is for developers and is not sent.
        """
        return city

    assert tool(weather).description == "Today's weather for a city, in degrees Celsius."
    assert tool(weather, description="Given text wins.").description == "Given text wins."


def test_a_function_without_docstring_has_an_empty_description() -> None:
    def bare(city: str) -> str:
        return city

    assert tool(bare).description == ""


def test_to_openai_is_a_function_tool_entry_with_a_copy_of_the_parameters() -> None:
    def weather(city: str) -> str:
        """The weather."""
        return city

    described = tool(weather)
    entry = described.to_openai()
    assert entry == {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "The weather.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
    entry["function"]["parameters"]["extra"] = True
    assert "extra" not in described.parameters
    json.dumps(entry)  # what a client sends must be plain JSON


def test_decorator_forms_build_the_same_tool() -> None:
    @tool
    def plain(city: str) -> str:
        return city

    @tool(name="renamed", description="Renamed tool.")
    def other(city: str) -> str:
        return city

    assert isinstance(plain, FunctionTool)
    assert plain.name == "plain"
    assert isinstance(other, FunctionTool)
    assert (other.name, other.description) == ("renamed", "Renamed tool.")


# Refusals ---------------------------------------------------------------------------------------


def test_var_positional_and_var_keyword_parameters_are_refused() -> None:
    def spread(*items: str) -> None: ...
    def options(**settings: str) -> None: ...

    with pytest.raises(ToolError, match=r"tool 'spread', parameter 'items'.*\*args and \*\*kwargs"):
        tool(spread)
    with pytest.raises(ToolError, match=r"tool 'options', parameter 'settings'.*name each parameter"):
        tool(options)


def test_positional_only_parameters_are_refused() -> None:
    def only(city: str, /) -> None: ...

    with pytest.raises(ToolError, match=r"parameter 'city'.*positional-only.*remove the '/'"):
        tool(only)


@pytest.mark.parametrize("name", ["", "has space", "dot.ted", "é", "a" * 65, "semi;colon"])
def test_names_a_model_cannot_use_are_refused(name: str) -> None:
    def fine(city: str) -> None: ...

    with pytest.raises(ToolError, match=r"tool name .* is not usable.*name='\.\.\.'"):
        tool(fine, name=name)


def test_the_longest_allowed_name_and_every_allowed_character_are_accepted() -> None:
    def fine(city: str) -> None: ...

    assert tool(fine, name="a" * 64).name == "a" * 64
    assert tool(fine, name="Az09_-").name == "Az09_-"


def test_a_lambda_needs_a_name() -> None:
    with pytest.raises(ToolError, match=r"'<lambda>' is not usable"):
        tool(lambda city: city)
    assert tool(lambda city: city, name="echo").name == "echo"


@pytest.mark.parametrize("name", [5, b"bytes", ["list"]])
def test_a_name_that_is_not_text_is_a_tool_error(name: Any) -> None:
    def fine(city: str) -> None: ...

    with pytest.raises(ToolError, match=r"tool name .* is not usable"):
        tool(fine, name=name)


def test_a_description_that_is_not_text_is_a_tool_error() -> None:
    def fine(city: str) -> None: ...

    with pytest.raises(ToolError, match=r"description .* must be text"):
        tool(fine, description=3)  # type: ignore[call-overload]


class Opaque:
    pass


def takes_bytes(value: bytes) -> None: ...
def takes_object(value: Opaque) -> None: ...
def takes_int_keys(value: dict[int, str]) -> None: ...
def takes_bare_set(value: set) -> None: ...  # type: ignore[type-arg]
def takes_nested_bad(value: list[Opaque]) -> None: ...
def takes_bad_in_union(value: int | bytes) -> None: ...


@pytest.mark.parametrize(
    ("function", "named"),
    [
        (takes_bytes, "bytes"),
        (takes_object, "Opaque"),
        (takes_int_keys, "dict keys must be str"),
        (takes_bare_set, "set"),
        (takes_nested_bad, "Opaque"),
        (takes_bad_in_union, "bytes"),
    ],
    ids=lambda value: getattr(value, "__name__", str(value)),
)
def test_types_json_cannot_carry_are_refused_naming_the_parameter(function: Any, named: str) -> None:
    with pytest.raises(ToolError) as caught:
        tool(function)
    message = str(caught.value)
    assert f"tool {function.__name__!r}, parameter 'value'" in message
    assert named in message


def test_an_annotation_that_cannot_be_resolved_is_a_tool_error() -> None:
    def broken(value: NotDefinedAnywhere) -> None:  # type: ignore[name-defined]  # noqa: F821
        ...

    with pytest.raises(ToolError, match=r"cannot read the signature of tool 'broken'"):
        tool(broken)


def test_something_that_is_not_a_function_is_refused() -> None:
    with pytest.raises(ToolError, match=r"a tool must be a function"):
        describe_tools([42])  # type: ignore[list-item]


def test_two_tools_with_one_name_are_refused() -> None:
    def lookup(item: str) -> str:
        return item

    def other(item: str) -> str:
        return item

    with pytest.raises(ToolError, match=r"two tools are named 'lookup'.*tool\(name=\.\.\.\)"):
        describe_tools([lookup, tool(other, name="lookup")])
    described = describe_tools([lookup, tool(other, name="other_lookup")])
    assert list(described) == ["lookup", "other_lookup"]


def test_tools_must_be_a_list() -> None:
    def lookup(item: str) -> str:
        return item

    with pytest.raises(ToolError, match=r"tools must be a list"):
        describe_tools(lookup)  # type: ignore[arg-type]
    with pytest.raises(ToolError, match=r"tools must be a list"):
        describe_tools("lookup")  # type: ignore[arg-type]


def test_a_function_tool_is_taken_as_it_is() -> None:
    def lookup(item: str) -> str:
        return item

    built = tool(lookup, name="find")
    assert describe_tools([built])["find"] is built


def test_tool_errors_are_agent_errors_and_value_errors() -> None:
    assert issubclass(ToolError, AgentError)
    assert issubclass(ToolError, ValueError)


# Argument checks --------------------------------------------------------------------------------


def book(city: str, nights: int, breakfast: bool = False, budget: float | None = None) -> str:
    """Book a hotel."""
    return f"{city}/{nights}/{breakfast}/{budget}"


BOOK = tool(book)


def test_valid_arguments_are_decoded() -> None:
    assert BOOK.check_arguments('{"city": "Rome", "nights": 2}') == {"city": "Rome", "nights": 2}
    arguments = BOOK.check_arguments('{"city": "Rome", "nights": 2, "breakfast": true, "budget": 80}')
    assert arguments == {"city": "Rome", "nights": 2, "breakfast": True, "budget": 80}
    assert BOOK.check_arguments('{"city": "Rome", "nights": 2, "budget": null}')["budget"] is None


def test_empty_arguments_mean_no_arguments() -> None:
    def now() -> str:
        return "noon"

    assert tool(now).check_arguments("") == {}
    assert tool(now).check_arguments("  ") == {}
    with pytest.raises(ToolError, match=r"book needs city, nights"):
        BOOK.check_arguments("")


@pytest.mark.parametrize("raw", ['{"city": "Rome",', "{'city': 'Rome'}", "city=Rome", '{"city": "Rome"} x'])
def test_invalid_json_is_reported_with_what_was_sent(raw: str) -> None:
    with pytest.raises(ToolError, match=r"arguments for book are not valid JSON") as caught:
        BOOK.check_arguments(raw)
    assert repr(raw[:200]) in str(caught.value)


@pytest.mark.parametrize("raw", ["[]", '["Rome", 2]', "null", "3", '"Rome"'])
def test_arguments_must_be_an_object(raw: str) -> None:
    with pytest.raises(ToolError, match=r"arguments for book must be a JSON object"):
        BOOK.check_arguments(raw)


def test_unknown_parameters_are_named_with_the_ones_that_exist() -> None:
    with pytest.raises(ToolError) as caught:
        BOOK.check_arguments('{"city": "Rome", "nights": 2, "stars": 5, "area": "centre"}')
    message = str(caught.value)
    assert "book has no parameter area, stars" in message
    assert "it takes city, nights, breakfast, budget" in message


def test_missing_parameters_are_named() -> None:
    with pytest.raises(ToolError, match=r"^book needs nights$"):
        BOOK.check_arguments('{"city": "Rome"}')


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ('{"city": 5, "nights": 2}', "city=5"),
        ('{"city": "Rome", "nights": "2"}', 'nights="2"'),
        ('{"city": "Rome", "nights": 2.5}', "nights=2.5"),
        ('{"city": "Rome", "nights": true}', "nights=true"),
        ('{"city": "Rome", "nights": null}', "nights=null"),
        ('{"city": "Rome", "nights": 2, "breakfast": 1}', "breakfast=1"),
        ('{"city": "Rome", "nights": 2, "breakfast": "yes"}', 'breakfast="yes"'),
        ('{"city": "Rome", "nights": 2, "budget": false}', "budget=false"),
        ('{"city": "Rome", "nights": 2, "budget": "80"}', 'budget="80"'),
        ('{"city": ["Rome"], "nights": 2}', 'city=["Rome"]'),
    ],
)
def test_wrong_types_are_refused_naming_the_value_and_the_schema(raw: str, named: str) -> None:
    with pytest.raises(ToolError) as caught:
        BOOK.check_arguments(raw)
    message = str(caught.value)
    assert message.startswith("book: ")
    assert named in message
    assert "does not match" in message


def test_an_integer_is_a_number_but_a_number_is_not_an_integer() -> None:
    assert BOOK.check_arguments('{"city": "R", "nights": 1, "budget": 3}')["budget"] == 3
    assert BOOK.check_arguments('{"city": "R", "nights": 1, "budget": 3.5}')["budget"] == 3.5
    with pytest.raises(ToolError):
        BOOK.check_arguments('{"city": "R", "nights": 1.0}')


def test_items_of_lists_and_values_of_dicts_are_checked() -> None:
    def tag(labels: list[int], weights: dict[str, float]) -> None: ...

    described = tool(tag)
    assert described.check_arguments('{"labels": [1, 2], "weights": {"a": 1.5, "b": 2}}') == {
        "labels": [1, 2],
        "weights": {"a": 1.5, "b": 2},
    }
    with pytest.raises(ToolError, match=r"labels="):
        described.check_arguments('{"labels": [1, "2"], "weights": {}}')
    with pytest.raises(ToolError, match=r"labels="):
        described.check_arguments('{"labels": [1, true], "weights": {}}')
    with pytest.raises(ToolError, match=r"weights="):
        described.check_arguments('{"labels": [], "weights": {"a": "heavy"}}')
    with pytest.raises(ToolError, match=r"weights="):
        described.check_arguments('{"labels": [], "weights": [1.0]}')


def test_literal_values_are_checked_exactly() -> None:
    def speed(mode: Literal["fast", "slow"]) -> None: ...

    assert tool(speed).check_arguments('{"mode": "fast"}') == {"mode": "fast"}
    with pytest.raises(ToolError, match=r'mode="quick" does not match \{"enum": \["fast", "slow"\]\}'):
        tool(speed).check_arguments('{"mode": "quick"}')


def test_a_boolean_is_not_an_integer_literal_and_an_integer_is_not_a_boolean_literal() -> None:
    # JSON true equals Python 1: without an explicit type check, ``true`` would pass for ``1``.
    def pick(count: Literal[0, 1], flag: Literal[True] = True) -> None: ...

    described = tool(pick)
    assert described.check_arguments('{"count": 1, "flag": true}') == {"count": 1, "flag": True}
    with pytest.raises(ToolError, match=r"count=true"):
        described.check_arguments('{"count": true}')
    with pytest.raises(ToolError, match=r"count=false"):
        described.check_arguments('{"count": false}')
    with pytest.raises(ToolError, match=r"flag=1"):
        described.check_arguments('{"count": 0, "flag": 1}')


def test_enum_arguments_arrive_as_members() -> None:
    def paint(colour: Colour, level: Level = Level.LOW) -> None: ...

    arguments = tool(paint).check_arguments('{"colour": "blue", "level": 2}')
    assert arguments == {"colour": Colour.BLUE, "level": Level.HIGH}
    assert type(arguments["colour"]) is Colour
    assert type(arguments["level"]) is Level
    with pytest.raises(ToolError, match=r'colour="green"'):
        tool(paint).check_arguments('{"colour": "green"}')
    with pytest.raises(ToolError, match=r"level=true"):
        tool(paint).check_arguments('{"colour": "red", "level": true}')


def test_enum_members_are_built_wherever_the_enum_sits_in_the_annotation() -> None:
    def paint(
        primary: Annotated[Colour, "the main colour"],
        accent: Colour | None = None,
        layers: list[Colour] = [],  # noqa: B006 - never mutated
        by_room: dict[str, Colour] = {},  # noqa: B006 - never mutated
        either: Union[Colour, int] = 0,  # noqa: UP007 - the spelling under test
    ) -> None: ...

    described = tool(paint)
    arguments = described.check_arguments(
        '{"primary": "red", "accent": "blue", "layers": ["red", "blue"], "by_room": {"hall": "blue"}, "either": "red"}'
    )
    assert arguments == {
        "primary": Colour.RED,
        "accent": Colour.BLUE,
        "layers": [Colour.RED, Colour.BLUE],
        "by_room": {"hall": Colour.BLUE},
        "either": Colour.RED,
    }
    assert described.check_arguments('{"primary": "red", "accent": null, "either": 7}') == {
        "primary": Colour.RED,
        "accent": None,
        "either": 7,
    }


@settings(max_examples=examples(200), deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
        max_leaves=6,
    )
)
def test_an_int_parameter_accepts_exactly_the_json_integers(value: Any) -> None:
    def count(n: int) -> int:
        return n

    raw = json.dumps({"n": value})
    is_integer = isinstance(value, int) and not isinstance(value, bool)
    if is_integer:
        assert tool(count).check_arguments(raw) == {"n": value}
    else:
        with pytest.raises(ToolError):
            tool(count).check_arguments(raw)


# Invoking ---------------------------------------------------------------------------------------


def test_a_sync_function_runs_with_the_checked_arguments() -> None:
    assert run(BOOK.invoke('{"city": "Rome", "nights": 2, "breakfast": true}')) == "Rome/2/True/None"


def test_an_async_function_is_awaited() -> None:
    async def slow_echo(text: str, times: int = 1) -> str:
        await asyncio.sleep(0)
        return text * times

    assert run(tool(slow_echo).invoke('{"text": "ab", "times": 3}')) == "ababab"


def test_bad_arguments_never_reach_the_function() -> None:
    calls: list[int] = []

    def record(n: int) -> str:
        calls.append(n)
        return "ok"

    with pytest.raises(ToolError):
        run(tool(record).invoke('{"n": "1"}'))
    assert calls == []


@pytest.mark.parametrize(
    "result",
    [
        {"city": "Zürich", "temperature": 18.5, "sunny": True, "alerts": None},
        [1, 2, 3],
        42,
        2.5,
        True,
        None,
        {"nested": {"list": ["a", {"b": []}]}},
    ],
    ids=repr,
)
def test_results_that_are_not_text_are_sent_as_json(result: Any) -> None:
    def produce() -> Any:
        return result

    async def produce_later() -> Any:
        return result

    for function in (produce, produce_later):
        text = run(tool(function, name="produce").invoke("{}"))
        assert isinstance(text, str)
        assert json.loads(text) == result


def test_json_results_keep_non_ascii_text_readable() -> None:
    def produce() -> dict[str, str]:
        return {"city": "Zürich", "greeting": "こんにちは"}

    assert run(tool(produce).invoke("{}")) == '{"city": "Zürich", "greeting": "こんにちは"}'


def test_text_results_are_sent_as_they_are() -> None:
    def produce() -> str:
        return '"already quoted" and {not json'

    assert run(tool(produce).invoke("{}")) == '"already quoted" and {not json'


def test_values_json_cannot_encode_are_sent_as_their_text() -> None:
    class Temperature:
        def __str__(self) -> str:
            return "18 degrees"

    def inside() -> Any:
        return {"now": Temperature()}

    def alone() -> Any:
        return Temperature()

    assert json.loads(run(tool(inside).invoke("{}"))) == {"now": "18 degrees"}
    assert json.loads(run(tool(alone).invoke("{}"))) == "18 degrees"


def test_an_exception_in_the_function_propagates_from_invoke() -> None:
    def broken() -> str:
        raise LookupError("stock service down")

    async def broken_later() -> str:
        raise LookupError("stock service down")

    for function in (broken, broken_later):
        with pytest.raises(LookupError, match="stock service down"):
            run(tool(function, name="broken").invoke("{}"))
