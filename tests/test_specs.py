"""Tests for tooldec.specs: tool specs from functions, OpenAI/MCP/BFCL tool lists and OpenAPI documents."""

import dataclasses
import enum
import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tooldec.errors import SchemaError, ToolSpecError
from tooldec.specs import (
    ToolSet,
    ToolSpec,
    from_function,
    from_openai_tools,
    from_openapi,
    load_tools_file,
    normalize_schema,
    openapi_operations,
)
from tooldec.specs.normalize import closed_objects

EMPTY = {"type": "object", "properties": {}, "required": []}


def spec(name: str, **properties: Any) -> ToolSpec:
    """A tool with the given property schemas, all optional."""
    return ToolSpec(name, f"{name} tool", {"type": "object", "properties": properties, "required": []})


# ToolSpec and ToolSet


@given(st.from_regex(r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}", fullmatch=True))
def test_valid_names_are_accepted(name: str) -> None:
    assert ToolSpec(name, "", EMPTY).name == name


@given(
    st.one_of(
        st.from_regex(r"[0-9][A-Za-z0-9_]{0,20}", fullmatch=True),
        st.from_regex(r"[A-Za-z_]{1,10} [A-Za-z_ ]{0,10}", fullmatch=True),
        st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}[(){}\[\]:,;!?]", fullmatch=True),
    )
)
def test_names_with_spaces_leading_digits_or_punctuation_are_rejected(name: str) -> None:
    with pytest.raises(ToolSpecError) as info:
        ToolSpec(name, "", EMPTY)
    assert info.value.tool == name
    assert info.value.path == "#/name"


@pytest.mark.parametrize("name", ["", "a" * 129])
def test_empty_and_overlong_names_are_rejected(name: str) -> None:
    with pytest.raises(ToolSpecError, match="tool name"):
        ToolSpec(name, "", EMPTY)


def test_dotted_and_hyphenated_names_are_accepted() -> None:
    assert ToolSpec("math.factorial", "", EMPTY).name == "math.factorial"
    assert ToolSpec("get-an-album", "", EMPTY).name == "get-an-album"


def test_parameters_must_be_an_object_schema() -> None:
    with pytest.raises(ToolSpecError) as info:
        ToolSpec("f", "", {"type": "array"})
    assert info.value.path == "#/parameters/type"
    assert "'f'" in str(info.value)


def test_required_names_must_be_properties() -> None:
    with pytest.raises(ToolSpecError, match="'y'") as info:
        ToolSpec("f", "", {"type": "object", "properties": {"x": {}}, "required": ["x", "y"]})
    assert info.value.path == "#/parameters/required/1"


def test_to_openai_gives_the_tools_entry_as_a_copy() -> None:
    tool = spec("f", x={"type": "integer"})
    entry = tool.to_openai()
    assert entry == {
        "type": "function",
        "function": {"name": "f", "description": "f tool", "parameters": tool.parameters},
    }
    entry["function"]["parameters"]["properties"]["x"]["type"] = "string"
    assert tool.parameters["properties"]["x"]["type"] == "integer"


def test_toolset_keeps_order_and_looks_up_by_name() -> None:
    tools = ToolSet([spec("b"), spec("a"), spec("c")])
    assert tools.names == ("b", "a", "c")
    assert [t.name for t in tools] == ["b", "a", "c"]
    assert len(tools) == 3
    assert tools["a"].name == "a"
    assert "c" in tools and "d" not in tools
    with pytest.raises(KeyError):
        tools["d"]


def test_toolset_with_tool_returns_a_new_set() -> None:
    tools = ToolSet([spec("a")])
    more = tools.with_tool(spec("b"))
    assert more.names == ("a", "b")
    assert tools.names == ("a",)


def test_duplicate_tool_names_are_an_error_naming_the_tool() -> None:
    with pytest.raises(ToolSpecError, match="duplicate tool name") as info:
        ToolSet([spec("search"), spec("other"), spec("search")])
    assert info.value.tool == "search"
    assert "'search'" in str(info.value)
    with pytest.raises(ToolSpecError, match="'other'"):
        ToolSet([spec("other")]).with_tool(spec("other"))


# normalize_schema


def test_bfcl_python_spellings_are_normalised() -> None:
    bfcl = {
        "type": "dict",
        "properties": {
            "x": {"type": "float", "description": "x value"},
            "point": {"type": "tuple", "items": {"type": "float"}},
            "anything": {"type": "any", "description": "whatever"},
            "nested": {"type": "dict", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        },
        "required": ["x"],
        "optional": True,
    }
    out = normalize_schema(bfcl)
    assert out == {
        "type": "object",
        "properties": {
            "x": {"type": "number", "description": "x value"},
            "point": {"type": "array", "items": {"type": "number"}},
            "anything": {"description": "whatever"},
            "nested": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        },
        "required": ["x"],
        "optional": True,
    }
    assert list(out["properties"]) == ["x", "point", "anything", "nested"]
    assert bfcl["type"] == "dict", "the input is left unchanged"


@pytest.mark.parametrize(
    ("spelling", "standard"),
    [
        ("String", "string"),
        ("Boolean", "boolean"),
        ("HashMap", "object"),
        ("ArrayList", "array"),
        ("Array", "array"),
        ("long", "integer"),
        ("double", "number"),
        ("char", "string"),
    ],
)
def test_java_and_javascript_spellings_are_normalised(spelling: str, standard: str) -> None:
    assert normalize_schema({"type": spelling}) == {"type": standard}


def test_empty_type_name_means_any_value() -> None:
    assert normalize_schema({"type": "", "description": "d"}) == {"description": "d"}


def test_normalisation_reaches_every_subschema() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"items": [{"type": "float"}, {"type": "dict"}]}},
        "additionalProperties": {"type": "float"},
        "anyOf": [{"type": ["float", "number", "null"]}],
        "oneOf": [{"type": "dict"}],
        "allOf": [{"not": {"type": "tuple"}}],
        "$defs": {"D": {"type": "float"}},
        "definitions": {"E": {"type": "dict"}},
    }
    out = normalize_schema(schema)
    assert out["properties"]["a"] == {"prefixItems": [{"type": "number"}, {"type": "object"}]}
    assert out["additionalProperties"] == {"type": "number"}
    assert out["anyOf"] == [{"type": ["number", "null"]}]
    assert out["oneOf"] == [{"type": "object"}]
    assert out["allOf"] == [{"not": {"type": "array"}}]
    assert out["$defs"] == {"D": {"type": "number"}}
    assert out["definitions"] == {"E": {"type": "object"}}


def test_tuple_form_items_become_prefix_items_unless_an_older_draft_is_named() -> None:
    schema = {"type": "tuple", "items": [{"type": "float"}], "additionalItems": {"type": "String"}}
    assert normalize_schema(schema) == {
        "type": "array",
        "prefixItems": [{"type": "number"}],
        "items": {"type": "string"},
    }
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", **schema}
    assert normalize_schema(draft7)["items"] == [{"type": "number"}]


def test_unknown_keywords_are_kept() -> None:
    schema = {"type": "string", "x-custom": {"a": [1]}, "format": "date"}
    assert normalize_schema(schema) == schema


@pytest.mark.parametrize(
    ("schema", "path", "message"),
    [
        ({"type": "object", "properties": {"x": {"type": "integr"}}}, "#/properties/x/type", "unknown type"),
        ({"type": ["string", 3]}, "#/type/1", "type name"),
        ({"type": "object", "properties": ["x"]}, "#/properties", "'properties'"),
        ({"type": "object", "required": "x"}, "#/required", "'required'"),
        ({"type": "object", "required": [1]}, "#/required", "'required'"),
        ({"properties": {"x": {"enum": "abc"}}}, "#/properties/x/enum", "'enum'"),
        ({"type": "array", "items": 3}, "#/items", "subschema"),
        ({"anyOf": [{"type": "string"}, "integer"]}, "#/anyOf/1", "subschema"),
        ({"properties": {"x": {"minLength": "a"}}}, "#/properties/x/minLength", "invalid JSON Schema"),
        ({"properties": {"a/b": {"type": 7}}}, "#/properties/a~1b/type", "type"),
    ],
)
def test_malformed_schemas_raise_with_the_json_path(schema: dict, path: str, message: str) -> None:
    with pytest.raises(SchemaError, match=message) as info:
        normalize_schema(schema, tool="t")
    assert info.value.path == path
    assert info.value.tool == "t"


def test_error_paths_start_at_the_given_base() -> None:
    with pytest.raises(SchemaError) as info:
        normalize_schema({"properties": {"x": {"type": "nope"}}}, path="#/0/function/parameters")
    assert info.value.path == "#/0/function/parameters/properties/x/type"


_SPELLINGS = ["dict", "float", "tuple", "any", "String", "Boolean", "HashMap", "long", "integer", "null", ""]
_schemas = st.recursive(
    st.builds(
        lambda t: {"type": t}, st.sampled_from(_SPELLINGS) | st.lists(st.sampled_from(_SPELLINGS), min_size=1)
    ),
    lambda inner: st.one_of(
        st.builds(lambda p: {"type": "dict", "properties": p}, st.dictionaries(st.text(max_size=5), inner)),
        st.builds(lambda i: {"type": "tuple", "items": i}, inner),
        st.builds(lambda a: {"anyOf": a}, st.lists(inner, min_size=1, max_size=3)),
    ),
    max_leaves=10,
)


def _type_names(schema: Any) -> list[str]:
    """Every type name anywhere in a normalised schema."""
    if isinstance(schema, list):
        return [n for s in schema for n in _type_names(s)]
    if not isinstance(schema, dict):
        return []
    kind = schema.get("type", [])
    names = [kind] if isinstance(kind, str) else list(kind)
    for key in ("properties",):
        names += _type_names(list(schema.get(key, {}).values()))
    return names + _type_names(schema.get("items")) + _type_names(schema.get("anyOf", []))


@given(_schemas)
def test_normalisation_is_idempotent_and_uses_standard_names(schema: dict) -> None:
    once = normalize_schema(schema)
    assert normalize_schema(once) == once
    standard = {"object", "array", "string", "number", "integer", "boolean", "null"}
    assert set(_type_names(once)) <= standard


# from_function


class Unit(enum.Enum):
    CELSIUS = "c"
    FAHRENHEIT = "f"


@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0


def get_weather(
    city: str,
    unit: Literal["c", "f"] = "c",
    days: Optional[int] = None,  # noqa: UP045 - the typing.Optional spelling is under test
    tags: list[str] | None = None,
    strict: bool = False,
) -> str:
    """Get the weather
    for a city.

    Longer explanation that is not part of the description.

    Args:
        city (str): The city name,
            e.g. Paris.
        unit: Temperature unit.
        days: How many days ahead.
    """
    return city


def test_from_function_signature_docstring_and_defaults() -> None:
    tool = from_function(get_weather)
    assert tool.name == "get_weather"
    assert tool.description == "Get the weather for a city."
    params = tool.parameters
    assert params["type"] == "object"
    assert list(params["properties"]) == ["city", "unit", "days", "tags", "strict"]
    assert params["required"] == ["city"]
    assert params["additionalProperties"] is False
    props = params["properties"]
    assert props["city"] == {"type": "string", "description": "The city name, e.g. Paris."}
    assert props["unit"] == {"enum": ["c", "f"], "description": "Temperature unit.", "default": "c"}
    assert props["days"] == {
        "anyOf": [{"type": "integer"}, {"type": "null"}],
        "description": "How many days ahead.",
        "default": None,
    }
    assert props["tags"]["anyOf"] == [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]
    assert props["strict"] == {"type": "boolean", "default": False}


def sphinx_style(query, limit: Annotated[int, "Maximum hits."] = 10, unit: Unit = Unit.CELSIUS) -> None:
    """Search things.

    :param query: What to look for,
        in plain words.
    :param int limit: Ignored in favour of the Annotated text.
    :returns: the hits
    """


def test_from_function_sphinx_docstring_annotated_enum_and_untyped() -> None:
    props = from_function(sphinx_style).parameters["properties"]
    assert props["query"] == {"description": "What to look for, in plain words."}
    assert props["limit"] == {"type": "integer", "description": "Maximum hits.", "default": 10}
    assert props["unit"] == {"enum": ["c", "f"], "default": "c"}


def containers(
    pairs: tuple[int, int], many: tuple[float, ...], table: dict[str, bool], point: Point, tagset: set[str]
) -> None:
    """Containers."""


def test_from_function_containers_and_dataclasses() -> None:
    props = from_function(containers).parameters["properties"]
    assert props["pairs"] == {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}
    assert props["many"] == {"type": "array", "items": {"type": "number"}}
    assert props["table"] == {"type": "object", "additionalProperties": {"type": "boolean"}}
    assert props["point"] == {
        "type": "object",
        "properties": {"x": {"type": "number"}, "y": {"type": "number", "default": 0.0}},
        "required": ["x"],
        "additionalProperties": False,
    }
    assert props["tagset"] == {"type": "array", "items": {"type": "string"}, "uniqueItems": True}


def test_from_function_pydantic_models_share_top_level_defs() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Address(pydantic.BaseModel):
        street: str

    class Person(pydantic.BaseModel):
        name: str
        home: Address

    def register(person: Person) -> None:
        """Register a person."""

    params = from_function(register).parameters
    assert params["properties"]["person"]["properties"]["home"] == {"$ref": "#/$defs/Address"}
    assert params["$defs"]["Address"]["properties"]["street"]["type"] == "string"


def mixed_tuple(x: tuple[int, str]) -> None:
    """Mixed."""


def nested_unsupported(items: list[object]) -> None:
    """Nested."""


def varargs(*args: int) -> None:
    """Varargs."""


def int_keys(table: dict[int, str]) -> None:
    """Int keys."""


@pytest.mark.parametrize(
    ("fn", "path"),
    [
        (mixed_tuple, "#/properties/x"),
        (nested_unsupported, "#/properties/items/items"),
        (varargs, "#/properties/args"),
        (int_keys, "#/properties/table"),
    ],
)
def test_from_function_unsupported_parameters_name_tool_and_path(fn: Any, path: str) -> None:
    with pytest.raises(ToolSpecError) as info:
        from_function(fn)
    assert info.value.tool == fn.__name__
    assert info.value.path == path


def test_from_function_rejects_lambdas_by_name() -> None:
    with pytest.raises(ToolSpecError, match="<lambda>"):
        from_function(lambda: None)


# from_openai_tools and load_tools_file

WEATHER = {
    "name": "get_weather",
    "description": "Weather.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def test_openai_bare_and_mcp_tools_all_load() -> None:
    mcp = {"name": "search", "description": "Search.", "inputSchema": {"type": "object", "properties": {}}}
    tools = from_openai_tools([{"type": "function", "function": WEATHER}, {**WEATHER, "name": "bare"}, mcp])
    assert [t.name for t in tools] == ["get_weather", "bare", "search"]
    assert tools[0].parameters == {**WEATHER["parameters"]}
    assert tools[2].parameters == EMPTY
    assert from_openai_tools({"tools": [WEATHER]})[0].name == "get_weather"
    assert from_openai_tools({"type": "function", "function": WEATHER})[0].name == "get_weather"


def test_missing_parameters_give_an_empty_object_schema() -> None:
    (tool,) = from_openai_tools([{"type": "function", "function": {"name": "ping"}}])
    assert tool.parameters == EMPTY
    assert tool.description == ""


def test_bfcl_entries_load_with_standard_types() -> None:
    entry = {
        "id": "simple_0",
        "question": [[{"role": "user", "content": "?"}]],
        "function": [
            {
                "name": "math.hypot",
                "description": "Hypotenuse.",
                "parameters": {
                    "type": "dict",
                    "properties": {"x": {"type": "float"}, "y": {"type": "integer"}},
                    "required": ["x", "y"],
                },
            }
        ],
    }
    (tool,) = from_openai_tools(entry)
    assert tool.name == "math.hypot"
    assert tool.parameters["type"] == "object"
    assert tool.parameters["properties"]["x"] == {"type": "number"}
    single = {**entry, "function": entry["function"][0]}
    assert from_openai_tools(single) == [tool]


def test_errors_point_into_the_input() -> None:
    bad = {"type": "object", "properties": {"x": {"type": "strin"}}}
    with pytest.raises(SchemaError) as info:
        from_openai_tools(
            [
                {"type": "function", "function": WEATHER},
                {"type": "function", "function": {"name": "f", "parameters": bad}},
            ]
        )
    assert info.value.path == "#/1/function/parameters/properties/x/type"
    assert info.value.tool == "f"
    with pytest.raises(ToolSpecError) as info:
        from_openai_tools([{"name": "g", "parameters": {"type": "object", "required": ["z"]}}])
    assert info.value.path == "#/0/parameters/required/0"
    with pytest.raises(ToolSpecError) as info:
        from_openai_tools({"function": [{"name": "bad name"}]})
    assert info.value.path == "#/function/0/name"


def test_non_function_tool_types_are_rejected() -> None:
    with pytest.raises(ToolSpecError, match="unsupported tool type") as info:
        from_openai_tools([{"type": "code_interpreter"}])
    assert info.value.path == "#/0/type"


def test_load_tools_file_reads_json_and_one_line_jsonl(tmp_path: Path) -> None:
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps([{"type": "function", "function": WEATHER}]))
    assert [t.name for t in load_tools_file(tools_file)] == ["get_weather"]
    entry_file = tmp_path / "entry.json"
    entry_file.write_text(json.dumps({"id": "e", "function": [WEATHER]}) + "\n")
    assert [t.name for t in load_tools_file(entry_file)] == ["get_weather"]


def test_load_tools_file_refuses_several_json_lines(tmp_path: Path) -> None:
    data = tmp_path / "BFCL_v4_simple.json"
    data.write_text("\n".join(json.dumps({"id": str(i), "function": [WEATHER]}) for i in range(3)))
    with pytest.raises(ToolSpecError, match="3 JSON lines.*one entry"):
        load_tools_file(data)


def test_load_tools_file_detects_openapi_and_reports_bad_files(tmp_path: Path) -> None:
    doc = tmp_path / "api.json"
    doc.write_text(json.dumps({"openapi": "3.0.0", "paths": {"/ping": {"get": {"summary": "Ping"}}}}))
    assert [t.name for t in load_tools_file(doc)] == ["get_ping"]
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ToolSpecError, match="not valid JSON"):
        load_tools_file(broken)
    with pytest.raises(ToolSpecError, match="cannot read"):
        load_tools_file(tmp_path / "missing.json")


# from_openapi

MOVIES = {
    "openapi": "3.0.0",
    "paths": {
        "/movie/{movie_id}/credits": {
            "parameters": [
                {"$ref": "#/components/parameters/MovieId"},
                {
                    "name": "language",
                    "in": "query",
                    "schema": {"type": "string"},
                    "description": "Item level.",
                },
            ],
            "get": {
                "summary": "Get Credits",
                "parameters": [
                    {"name": "language", "in": "query", "schema": {"$ref": "#/components/schemas/Lang"}},
                    {"name": "X-Trace", "in": "header", "schema": {"type": "string"}},
                ],
            },
            "post": {
                "operationId": "not a valid name!",
                "description": "Rate it.",
                "requestBody": {"$ref": "#/components/requestBodies/Rating"},
            },
        },
        "/search/movie": {
            "get": {
                "operationId": "GET_search-movie",
                "parameters": [
                    {"name": "query", "in": "query", "required": True, "schema": {"type": "string"}}
                ],
            }
        },
        "/other": {"get": {"operationId": "get_movie_movie_id_credits"}},
    },
    "components": {
        "parameters": {
            "MovieId": {
                "name": "movie_id",
                "in": "path",
                "description": "The movie.",
                "schema": {"type": "integer"},
            }
        },
        "schemas": {
            "Lang": {"type": "string", "enum": ["en", "fr"]},
            "Score": {"type": "number", "maximum": 10},
        },
        "requestBodies": {
            "Rating": {
                "required": True,
                "content": {
                    "application/json;charset=utf-8": {
                        "schema": {
                            "type": "object",
                            "properties": {"value": {"$ref": "#/components/schemas/Score"}},
                        }
                    }
                },
            }
        },
    },
}


def test_openapi_operation_names_and_deduplication() -> None:
    operations = openapi_operations(MOVIES)
    assert [(t.name, method, path) for t, method, path in operations] == [
        ("get_movie_movie_id_credits", "GET", "/movie/{movie_id}/credits"),
        ("post_movie_movie_id_credits", "POST", "/movie/{movie_id}/credits"),
        ("GET_search-movie", "GET", "/search/movie"),
        ("get_movie_movie_id_credits_2", "GET", "/other"),
    ]
    assert [t.description for t, _, _ in operations[:2]] == ["Get Credits", "Rate it."]
    assert from_openapi(MOVIES) == [t for t, _, _ in operations]


def test_openapi_parameters_refs_and_required() -> None:
    credits, rate, search, _ = from_openapi(MOVIES)
    assert credits.parameters == {
        "type": "object",
        "properties": {
            "movie_id": {"type": "integer", "description": "The movie."},
            "language": {"type": "string", "enum": ["en", "fr"]},
        },
        "required": ["movie_id"],
    }
    assert search.parameters["required"] == ["query"]
    assert rate.parameters["properties"]["body"] == {
        "type": "object",
        "properties": {"value": {"type": "number", "maximum": 10}},
    }
    assert rate.parameters["required"] == ["movie_id", "body"]
    assert rate.parameters["properties"]["language"] == {"type": "string", "description": "Item level."}
    without_body = from_openapi(MOVIES, include_body=False)[1]
    assert list(without_body.parameters["properties"]) == ["movie_id", "language"]


def test_openapi_path_params_are_required_even_when_not_marked() -> None:
    doc = {"openapi": "3.0.0", "paths": {"/u/{id}": {"get": {"parameters": [{"name": "id", "in": "path"}]}}}}
    (tool,) = from_openapi(doc)
    assert tool.parameters["required"] == ["id"]
    assert tool.parameters["properties"]["id"] == {}


def test_openapi_recursive_refs_go_to_defs_and_sloppy_spellings_are_repaired() -> None:
    doc = {
        "openapi": "3.0.3",
        "paths": {
            "/tree": {
                "put": {
                    "parameters": [
                        {
                            "name": "limit",
                            "in": "query",
                            "required": "true",
                            "schema": {"type": "integer", "maximum": "50"},
                        },
                        {"name": "note", "in": "query", "schema": {"type": "string", "nullable": True}},
                    ],
                    "requestBody": {
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Node"}}}
                    },
                }
            }
        },
        "components": {
            "schemas": {
                "Node": {
                    "type": "object",
                    "additionalProperties": "true",
                    "properties": {
                        "size": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
                        "children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}},
                    },
                }
            }
        },
    }
    (tool,) = from_openapi(doc)
    params = tool.parameters
    assert params["required"] == ["limit"]
    assert params["properties"]["limit"] == {"type": "integer", "maximum": 50}
    assert params["properties"]["note"] == {"type": ["string", "null"]}
    assert params["properties"]["body"] == {"$ref": "#/$defs/Node"}
    node = params["$defs"]["Node"]
    assert node["additionalProperties"] is True
    assert node["properties"]["size"] == {"type": "number", "exclusiveMinimum": 0}
    assert node["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}


def test_swagger2_parameters_and_body() -> None:
    doc = {
        "swagger": "2.0",
        "paths": {
            "/pets/{id}": {
                "put": {
                    "operationId": "updatePet",
                    "parameters": [
                        {"name": "id", "in": "path", "type": "string"},
                        {"name": "limit", "in": "query", "type": "integer", "maximum": 10},
                        {
                            "name": "pet",
                            "in": "body",
                            "required": True,
                            "schema": {"$ref": "#/definitions/Pet"},
                        },
                    ],
                }
            }
        },
        "definitions": {"Pet": {"type": "object", "properties": {"name": {"type": "string"}}}},
    }
    (tool,) = from_openapi(doc)
    assert tool.parameters["properties"] == {
        "id": {"type": "string"},
        "limit": {"type": "integer", "maximum": 10},
        "body": {"type": "object", "properties": {"name": {"type": "string"}}},
    }
    assert tool.parameters["required"] == ["id", "body"]


def test_openapi_bad_refs_and_schemas_are_reported() -> None:
    external = {"openapi": "3.0.0", "paths": {"/a": {"get": {"parameters": [{"$ref": "other.json#/p"}]}}}}
    with pytest.raises(ToolSpecError, match="only local"):
        from_openapi(external)
    dangling = {
        "openapi": "3.0.0",
        "paths": {"/a": {"get": {"parameters": [{"$ref": "#/components/parameters/Nope"}]}}},
    }
    with pytest.raises(ToolSpecError, match="unresolvable"):
        from_openapi(dangling)
    bad_type = {
        "openapi": "3.0.0",
        "paths": {"/a": {"get": {"parameters": [{"name": "q", "in": "query", "schema": {"type": "text"}}]}}},
    }
    with pytest.raises(SchemaError) as info:
        from_openapi(bad_type)
    assert info.value.path == "#/paths/~1a/get/parameters/0/schema/type"
    assert info.value.tool == "get_a"
    with pytest.raises(ToolSpecError, match="paths"):
        from_openapi({"openapi": "3.0.0"})


# Reference data (slow)


@pytest.mark.slow
def test_reference_data_loads() -> None:
    shared = Path(os.environ.get("TOOLDEC_SHARED", "../shared")) / "data"
    restbench, bfcl = shared / "restbench", shared / "bfcl"
    if not restbench.is_dir() or not bfcl.is_dir():
        pytest.skip(f"reference data not found under {shared}")
    for name in ("tmdb_oas.json", "spotify_oas.json"):
        doc = json.loads((restbench / name).read_text())
        expected = sum(
            1
            for item in doc["paths"].values()
            for m in item
            if m in ("get", "post", "put", "patch", "delete")
        )
        tools = load_tools_file(restbench / name)
        assert len(tools) == expected
        assert len(ToolSet(tools)) == expected
    files = sorted(bfcl.glob("*.json"))
    assert files
    for path in files:
        for number, line in enumerate(path.read_text().splitlines()):
            if line.strip():
                tools = from_openai_tools(json.loads(line))
                assert tools, f"{path.name} line {number + 1}"
                assert all(t.parameters["type"] == "object" for t in tools)


def test_closed_objects_leaves_explicit_and_all_of_alone() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {}},
            "b": {"type": "object", "additionalProperties": True},
        },
        "allOf": [{"properties": {"c": {}}}],
    }
    closed = closed_objects(schema)
    assert closed["additionalProperties"] is False
    assert closed["properties"]["a"]["additionalProperties"] is False
    assert closed["properties"]["b"]["additionalProperties"] is True
    assert "additionalProperties" not in closed["allOf"][0]
    assert closed["properties"]["c"] == {}
    assert "additionalProperties" not in schema


def test_closed_objects_leave_free_form_maps_below_the_root_open() -> None:
    """An object below the root that names no key (BFCL's `gradeDict: {type: dict}`) stays open, as the grammar
    reads it; the root, `properties: {}` and an object with only required keys still close."""
    schema = {
        "type": "object",
        "properties": {
            "grades": {"type": "object", "description": "subject -> score"},
            "none": {"type": "object", "properties": {}},
            "keyed": {"type": "object", "required": ["k"]},
        },
    }
    closed = closed_objects(schema)
    assert "additionalProperties" not in closed["properties"]["grades"]
    assert closed["properties"]["none"]["additionalProperties"] is False
    assert closed["properties"]["keyed"]["additionalProperties"] is False
    assert closed_objects({"type": "object"})["additionalProperties"] is False


def test_closed_objects_leave_the_branches_of_an_open_object_open(bytelevel_vocab: Any) -> None:
    """An object that states `additionalProperties: true` with an `anyOf` branch: the grammar merges the branch
    into the open object, so the checker must not close the branch on its own (it refused every call)."""
    from tooldec.compiler import Compiler
    from tooldec.conformance import feed

    params = {
        "type": "object",
        "additionalProperties": True,
        "properties": {"k": {"type": "integer"}},
        "anyOf": [{"properties": {"x": {"type": "integer"}}}],
    }
    guide = Compiler(bytelevel_vocab).compile([ToolSpec("f", "", params)], "json")
    checker = jsonschema.Draft202012Validator(closed_objects(params))
    for arguments, valid in (({"k": 1}, True), ({"k": 1, "x": 2}, True), ({"x": "s"}, False)):
        text = '{"name": "f", "arguments": ' + json.dumps(arguments) + "}"
        assert feed(guide.guide(), bytelevel_vocab.encode(text)) == valid
        assert checker.is_valid(arguments) == valid


@pytest.mark.parametrize("keyless", [{"type": "object"}, {}, True])
def test_closed_objects_leave_an_object_open_where_a_branch_is_a_free_form_map(bytelevel_vocab: Any,
                                                                               keyless: Any) -> None:
    """An object below the root whose only keys come from `anyOf` branches, one of which names no key: the
    grammar merges each branch into the object, so that branch is a free-form map (any members), and the checker
    must admit its calls; with every branch keyed, the object closes in both."""
    from tooldec.compiler import Compiler
    from tooldec.conformance import feed

    keyed = {"properties": {"a": {"type": "integer"}}, "required": ["a"]}
    cases = {
        "open": ([keyed, keyless], {"x": {"a": 1}}, {"x": {}}, {"x": {"zzz": 1}}, {"x": {"a": 1, "b": 2}}),
        "closed": ([keyed, {"properties": {"b": {"type": "string"}}}], {"x": {"a": 1}}, {"x": {"b": "s"}}),
    }
    refused = {"open": [{"x": 3}], "closed": [{"x": {"zzz": 1}}, {"x": {"a": 1, "zzz": 1}}]}
    for name, (branches, *valid) in cases.items():
        params = {"type": "object", "properties": {"x": {"type": "object", "anyOf": branches}}, "required": ["x"]}
        guide = Compiler(bytelevel_vocab).compile([ToolSpec("f", "", params)], "json")
        checker = jsonschema.Draft202012Validator(closed_objects(params))
        for arguments, ok in [*((v, True) for v in valid), *((r, False) for r in refused[name])]:
            text = '{"name": "f", "arguments": ' + json.dumps(arguments) + "}"
            assert feed(guide.guide(), bytelevel_vocab.encode(text)) == ok, (name, arguments)
            assert checker.is_valid(arguments) == ok, (name, arguments)
