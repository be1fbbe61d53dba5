"""Schemas too large as one automaton for nesting alone (issue 34): the size fallback makes every member, item and
union branch that may hold an object or array, every item a bounded array repeats and every long scalar member a
rule of its own, so each automaton stays small while the language stays the schema's. Places inside a product of
languages (`not`, exclusive `oneOf`, counted members) stay inline. Checked against `jsonschema`: guided values
validate (soundness), valid values are accepted token by token (completeness), invalid ones are rejected."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tooldec.automaton.compile import KeyLanguage, compile_dfa
from tooldec.cfg_guide import CompiledCfg
from tooldec.compiler import Compiler
from tooldec.conformance import feed
from tooldec.errors import UnsupportedSchemaError
from tooldec.grammar.schema import SchemaCompiler
from tooldec.sample import random_walk
from tooldec.vocab import Vocabulary

ROW = {
    "type": "object",
    "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 99}, "tag": {"type": "string", "maxLength": 255}},
    "required": ["id"],
    "additionalProperties": False,
}
EVENT = {"oneOf": [  # discriminated by `kind`: no difference of languages, so each branch may be a rule
    {"type": "object", "properties": {"kind": {"const": "a"}, "rows": {"type": "array", "items": ROW, "maxItems": 3}},
     "required": ["kind"], "additionalProperties": False},
    {"type": "object", "properties": {"kind": {"const": "b"}, "note": {"type": "string", "maxLength": 300}},
     "required": ["kind", "note"], "additionalProperties": False},
]}
FLAGS = {  # a `not` around an array: the array is the left side of a difference and must stay inline
    "type": "object",
    "properties": {"on": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}},
    "additionalProperties": False,
    "not": {"required": ["on"], "properties": {"on": {"maxItems": 0}}},
}
TABLE = {
    "type": "object",
    "properties": {
        "rows": {"type": "array", "items": ROW, "minItems": 1, "maxItems": 100},
        "events": {"type": "array", "items": EVENT, "maxItems": 4},
        "title": {"type": "string", "maxLength": 400},
        "flags": FLAGS,
        "meta": {"type": "object", "properties": {"n": {"type": "integer"}},
                 "additionalProperties": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}},
    },
    "required": ["rows"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def table(bytelevel_vocab: Vocabulary) -> CompiledCfg:
    grammar = Compiler(bytelevel_vocab).compile_schema(TABLE, use_cache=False)
    assert isinstance(grammar, CompiledCfg)
    return grammar


def test_the_schema_is_too_large_as_one_automaton() -> None:
    with pytest.raises(UnsupportedSchemaError) as info:
        compile_dfa(SchemaCompiler(TABLE, decide=KeyLanguage, additional_properties=True).value())
    assert info.value.keyword == "size"


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32))
def test_guided_values_validate(table: CompiledCfg, seed: int) -> None:
    guide = random_walk(table.guide(), random.Random(seed), max_tokens=3000, steer_after=80)
    jsonschema.validate(guide.result(), TABLE)


TEXT = st.text(max_size=8)
ROWS = st.builds(lambda i, tag: {"id": i} if tag is None else {"id": i, "tag": tag},
                 st.integers(0, 99), st.none() | TEXT)
EVENTS = st.one_of(
    st.lists(ROWS, max_size=3).map(lambda rows: {"kind": "a", "rows": rows}),
    st.just({"kind": "a"}),
    TEXT.map(lambda note: {"kind": "b", "note": note}),
)
FLAG_VALUES = st.lists(st.booleans(), min_size=1, max_size=3).map(lambda on: {"on": on})
META = st.builds(
    lambda n, extra: ({"n": n} if n is not None else {}) | extra,
    st.none() | st.integers(-5, 5),
    st.dictionaries(st.text("xyz", min_size=1, max_size=2), st.lists(st.booleans(), max_size=2), max_size=2),
)


def _table(rows: list, events: list | None, title: str | None, flags: dict | None, meta: dict | None) -> dict:
    """A TABLE value, its keys in schema order (the canonical text)."""
    parts = {"rows": rows, "events": events, "title": title, "flags": flags, "meta": meta}
    return {k: v for k, v in parts.items() if v is not None}


TABLES = st.builds(_table, st.lists(ROWS, min_size=1, max_size=100), st.none() | st.lists(EVENTS, max_size=4),
                   st.none() | TEXT, st.none() | FLAG_VALUES, st.none() | META)


@settings(max_examples=60, deadline=None)
@given(TABLES)
def test_valid_values_are_accepted(table: CompiledCfg, bytelevel_vocab: Vocabulary, value: dict) -> None:
    jsonschema.validate(value, TABLE)
    assert feed(table.guide(), bytelevel_vocab.encode(json.dumps(value, ensure_ascii=False)))


@pytest.mark.parametrize("value", [
    {"rows": []},  # minItems
    {"rows": [{"id": 1}] * 101},  # maxItems of an item that is a rule
    {"rows": [{"id": 100}]},  # inside the item's rule
    {"rows": [{"id": 1, "tag": "x" * 256}]},  # a long string that is a rule of its own
    {"rows": [{"id": 1}], "events": [{"kind": "b"}]},  # a union branch's required member
    {"rows": [{"id": 1}], "events": [{"kind": "a", "rows": [{"id": 1}] * 4}]},
    {"rows": [{"id": 1}], "flags": {"on": []}},  # the `not`
    {"rows": [{"id": 1}], "meta": {"n": 1, "x": [True, False, True]}},  # an additional member's maxItems
])
def test_invalid_values_are_rejected(table: CompiledCfg, bytelevel_vocab: Vocabulary, value: dict) -> None:
    assert not jsonschema.validators.validator_for(TABLE)(TABLE).is_valid(value)
    assert not feed(table.guide(), bytelevel_vocab.encode(json.dumps(value)))


def test_a_container_inside_a_product_stays_inline() -> None:
    """The array under FLAGS's `not` is no call (a call there would need a context-free difference), while the
    object's own member calls outside any product remain."""
    comp = SchemaCompiler({"type": "array", "items": FLAGS, "maxItems": 5}, decide=KeyLanguage,
                          additional_properties=True, recursive=True, refs_as_rules=True, containers_as_rules=True)
    comp.value()
    assert len(comp.rules) == 1  # the item (FLAGS), whose `on` array is compiled in place
