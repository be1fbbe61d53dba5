"""`not`, and a `oneOf` with a branch that admits every value, over values that nest without bound (issue 34):
the recursive reading builds the complement of the negated schema without a difference of languages, so the
pushdown guide takes it exactly, with no depth limit (the unrolled reading kept any value a few levels deep and
lost deeper valid values). Checked against `jsonschema` (Draft 7): hypothesis-drawn values, deep ones included,
are accepted exactly when valid, and guided values validate."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tooldec.cfg_guide import CompiledCfg
from tooldec.compiler import Compiler
from tooldec.conformance import feed
from tooldec.sample import random_walk
from tooldec.vocab import Vocabulary

ARRAY_OF_INTS = {"type": "array", "items": {"type": "integer"}}
SCHEMAS: dict[str, dict[str, Any]] = {
    # not an object whose `a` is an array of integers (objects without `a`, with another `a`, other types)
    "not_object": {"not": {"type": "object", "properties": {"a": ARRAY_OF_INTS}, "required": ["a"]}},
    # valid where the first branch fails: `a` present and not an array whose items all fail `b`-strings
    "one_of_anything": {"oneOf": [
        {"properties": {"a": {"type": "array", "items": {"oneOf": [
            {"properties": {"b": {"type": "string"}}}, {"x-note": "admits every value"}]}}}},
        {"description": "admits every value"},
    ]},
    "not_all_of": {"not": {"allOf": [{"type": ["object", "integer"]}, {"properties": {"b": {"type": "null"}}}]}},
    "not_not": {"not": {"not": {"type": "array", "items": {"type": "array"}}}},
}
KEYS = st.sampled_from(["a", "b", "x", "y"])
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.5, "s", ""]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=30,
)


def _deep(value: Any, depth: int) -> Any:
    """`value` nested `depth` containers deeper, alternating arrays and objects."""
    for i in range(depth):
        value = [value] if i % 2 else {"y": value}
    return value


def _parts(schema: Any) -> list[dict]:
    """A schema and the subschemas of its combinators, each of which may declare properties."""
    if not isinstance(schema, dict):
        return []
    out = [schema]
    for key in ("allOf", "anyOf", "oneOf"):
        for branch in schema.get(key, []):
            out += _parts(branch)
    return out + _parts(schema.get("not"))


def _canonical(value: Any, schemas: list[Any]) -> Any:
    """`value` with every object's keys in the guide's canonical order (README, "Canonical order"): the
    properties the schemas at its place declare, in their order, then the other keys alphabetically."""
    parts = [p for s in schemas for p in _parts(s)]
    if isinstance(value, dict):
        declared = [k for p in parts for k in p.get("properties", {})]
        keys = [k for k in dict.fromkeys(declared) if k in value] + sorted(k for k in value if k not in declared)
        return {k: _canonical(value[k], [p["properties"][k] for p in parts if k in p.get("properties", {})])
                for k in keys}
    if isinstance(value, list):
        return [_canonical(v, [p["items"] for p in parts if "items" in p]) for v in value]
    return value


@pytest.fixture(scope="module")
def compiled(bytelevel_vocab: Vocabulary) -> dict[str, CompiledCfg]:
    out = {}
    compiler = Compiler(bytelevel_vocab)
    for name, schema in SCHEMAS.items():
        grammar = compiler.compile_schema(schema, use_cache=False)
        assert isinstance(grammar, CompiledCfg), name  # the pushdown guide: no depth limit
        out[name] = grammar
    return out


SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.sampled_from(sorted(SCHEMAS)), VALUES, st.integers(0, 12))
@example("one_of_anything", {"a": [{"a": None, "b": "s"}]}, 0)  # the item's schema declares b only: b first
def test_accepted_exactly_when_valid(compiled: dict[str, CompiledCfg], bytelevel_vocab: Vocabulary, name: str,
                                     value: Any, depth: int) -> None:
    value = _canonical(value if depth < 2 else {"a": [_deep(value, depth)], "b": _deep(value, depth)}, [SCHEMAS[name]])
    valid = jsonschema.Draft7Validator(SCHEMAS[name]).is_valid(value)
    assert feed(compiled[name].guide(), bytelevel_vocab.encode(json.dumps(value))) == valid, (name, value)


@SETTINGS
@given(st.sampled_from(sorted(SCHEMAS)), st.integers(0, 2**16))
def test_guided_values_validate(compiled: dict[str, CompiledCfg], name: str, seed: int) -> None:
    guide = random_walk(compiled[name].guide(), random.Random(seed), max_tokens=600, steer_after=120)
    jsonschema.Draft7Validator(SCHEMAS[name]).validate(guide.result())


def test_a_deep_value_outside_the_negated_schema_is_accepted(compiled: dict[str, CompiledCfg],
                                                             bytelevel_vocab: Vocabulary) -> None:
    """Twelve levels under `a`: past any depth the unrolled reading keeps."""
    value = {"a": [{"b": 1}, _deep(0, 12)]}
    assert jsonschema.Draft7Validator(SCHEMAS["one_of_anything"]).is_valid(value)
    assert feed(compiled["one_of_anything"].guide(), bytelevel_vocab.encode(json.dumps(value)))
