"""minProperties that needs two or more additional properties (issue 34): exact where the additional keys are a
finite set of at most MAX_DISTINCT_KEYS (finite patterns, an enum of propertyNames), each key then allowed once
so that every member counts; refused where they are not. Checked against `jsonschema` over every key sequence
of a small universe (duplicates included: JSON keeps the last), and by guided walks."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tooldec.automaton.compile import KeyLanguage, compile_dfa
from tooldec.automaton.dfa import DFA
from tooldec.compiler import Compiler
from tooldec.errors import UnsupportedSchemaError
from tooldec.grammar.canonical import CanonicalWriter
from tooldec.grammar.schema import SchemaCompiler
from tooldec.sample import random_walk
from tooldec.vocab import Vocabulary

EXTRAS = [
    {"patternProperties": {"^[p-r]$": {"type": "integer"}}, "additionalProperties": False},
    {"patternProperties": {"^(p|q)$": {"type": "integer"}, "^[qr]$": {"type": "integer", "minimum": 1}}, "additionalProperties": False},
    {"propertyNames": {"enum": ["a", "b", "p", "q", "r"]}, "additionalProperties": {"type": "integer"}},
]
KEYS = ["a", "b", "p", "q", "r", "s"]


@st.composite
def schemas(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(["a", "b"]), unique=True))
    schema: dict[str, Any] = {"type": "object", "properties": {n: {"type": "integer"} for n in names},
                              "required": [n for n in names if draw(st.booleans())], **draw(st.sampled_from(EXTRAS))}
    schema["minProperties"] = lo = len(names) + draw(st.integers(2, 3))
    if draw(st.booleans()):
        schema["maxProperties"] = lo + draw(st.integers(0, 1))
    return schema


def _dfa(schema: dict[str, Any]) -> DFA:
    return compile_dfa(SchemaCompiler(schema, decide=KeyLanguage).value())


SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(schemas(), st.sampled_from([0, 1, 2]))
def test_exact_over_every_key_sequence(schema: dict[str, Any], value: int) -> None:
    """Sound: every accepted text (any order, keys repeated or not) parses to a valid value. Complete: every valid
    value over the universe is accepted in its canonical order."""
    dfa = _dfa(schema)
    check = jsonschema.Draft7Validator(schema)
    for n in range(6):
        for keys in itertools.product(KEYS, repeat=n) if n <= 4 else itertools.permutations(KEYS, n):
            text = "{" + ", ".join(f'"{k}": {value}' for k in keys) + "}"
            if dfa.accepts(text.encode()):
                assert check.is_valid(json.loads(text)), (schema, text)
    writer = CanonicalWriter(schema)
    for n in range(7):
        for keys in itertools.combinations(KEYS, n):
            obj = dict.fromkeys(keys, value)
            if check.is_valid(obj):
                assert dfa.accepts(writer.dumps(obj).encode()), (schema, obj)


@SETTINGS
@given(schemas(), st.integers(0, 2**16))
def test_guided_values_validate(bytelevel_vocab: Vocabulary, schema: dict[str, Any], seed: int) -> None:
    grammar = Compiler(bytelevel_vocab).compile_schema(schema, additional_properties=False, use_cache=False)
    guide = random_walk(grammar.guide(), random.Random(seed), max_tokens=400, steer_after=100)
    jsonschema.Draft7Validator(schema).validate(json.loads(guide.text()))


def test_a_repeated_key_is_no_second_property() -> None:
    dfa = _dfa({"type": "object", "patternProperties": {"^[pq]$": {}}, "additionalProperties": False,
                "minProperties": 2})
    assert dfa.accepts(b'{"q": 1, "p": 2}')
    assert not dfa.accepts(b'{"p": 1, "p": 2}')


@pytest.mark.parametrize("extras", [
    {"additionalProperties": {"type": "integer"}},  # any key
    {"patternProperties": {"^p": {}}, "additionalProperties": False},  # infinitely many keys
    {"patternProperties": {"^[a-j]$": {}}, "additionalProperties": False},  # more than MAX_DISTINCT_KEYS
])
def test_infinitely_or_too_many_additional_keys_stay_refused(extras: dict[str, Any]) -> None:
    with pytest.raises(UnsupportedSchemaError) as info:
        _dfa({"type": "object", "minProperties": 2, **extras})
    assert info.value.keyword == "minProperties"
