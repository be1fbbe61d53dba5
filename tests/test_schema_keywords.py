"""The object, array and number keywords added to the schema grammar: soundness and completeness.

patternProperties / propertyNames / additionalProperties with schemas, dependencies (dependentRequired,
dependentSchemas), minProperties / maxProperties, contains / minContains / maxContains and multipleOf. Each has
a property test that random walks of its guide validate under `jsonschema` and that instances
`hypothesis-jsonschema` draws are accepted, plus exhaustive checks over small value spaces; what stays refused
keeps its UnsupportedSchemaError.
"""

from __future__ import annotations

import itertools
import json
import random
from fractions import Fraction
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from tooldec.automaton.compile import KeyLanguage, compile_dfa
from tooldec.compiler import Compiler
from tooldec.conformance import feed
from tooldec.errors import EmptyGrammarError, UnsupportedSchemaError
from tooldec.grammar.canonical import CanonicalWriter
from tooldec.grammar.counting import container_count
from tooldec.grammar.multiples import multiples
from tooldec.grammar.regex import pattern_ir, pattern_upper_ir
from tooldec.grammar.schema import SchemaCompiler
from tooldec.sample import random_walk
from tooldec.vocab import Vocabulary

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DRAFT7 = "http://json-schema.org/draft-07/schema#"


def _validator(schema: dict[str, Any]) -> Any:
    return jsonschema.validators.validator_for(schema)(schema)


def _walk_is_valid(vocab: Vocabulary, schema: dict[str, Any], seed: int) -> Any:
    """A random walk of the schema's guide is an instance (an unsatisfiable draw is discarded)."""
    try:
        compiled = Compiler(vocab).compile_schema(schema, additional_properties=False)
    except EmptyGrammarError:
        assume(False)
    guide = random_walk(compiled.guide(), random.Random(seed), max_tokens=3000, steer_after=600)
    value = json.loads(guide.text())
    errors = list(_validator(schema).iter_errors(value))
    assert not errors, (guide.text(), errors[0].message)
    return value


def _accepts_instance(vocab: Vocabulary, schema: dict[str, Any], instance: Any) -> None:
    """A valid instance, written canonically, is accepted (hypothesis-jsonschema does not know minContains /
    maxContains, so its draws are checked first)."""
    assume(_validator(schema).is_valid(instance))
    try:
        compiled = Compiler(vocab).compile_schema(schema, additional_properties=False)
    except EmptyGrammarError:
        raise AssertionError(f"a valid instance {instance!r} but an empty grammar") from None
    text = CanonicalWriter(schema).dumps(instance)
    assume(not any(0xD800 <= ord(c) <= 0xDFFF for c in text))
    assert compiled.dfa.accepts(text.encode()), text
    assert feed(compiled.guide(), vocab.encode(text)), text


def _dfa(schema: Any, *, additional_properties: bool = False) -> Any:
    return compile_dfa(SchemaCompiler(schema, additional_properties=additional_properties, decide=KeyLanguage).value())


def _agrees(schema: dict[str, Any], values: list[Any], *, additional_properties: bool = False) -> None:
    """Exactly the valid values among `values` are accepted (in their canonical spelling)."""
    dfa = _dfa(schema, additional_properties=additional_properties)
    writer = CanonicalWriter(schema)
    check = _validator(schema)
    for v in values:
        text = writer.dumps(v)
        assert dfa.accepts(text.encode()) == check.is_valid(v), (text, check.is_valid(v))


def _sound(schema: dict[str, Any], texts: list[str]) -> int:
    """No text outside the schema is accepted; returns how many were accepted."""
    dfa = _dfa(schema)
    check = _validator(schema)
    accepted = 0
    for t in texts:
        if dfa.accepts(t.encode()):
            accepted += 1
            assert check.is_valid(json.loads(t)), t
    return accepted


# -- patternProperties / propertyNames / additionalProperties ------------------------------------------------

# Patterns without \d \w \s or `.`, whose ECMA and Python readings agree on every key, so completeness holds.
PATTERNS = st.sampled_from(["^a", "b$", "^[a-c]+$", "x", "^(ab|cd)", "[0-9]{2}", "^$"])
VALUES = st.sampled_from(
    [{"type": "integer"}, {"type": "string", "maxLength": 3}, {"type": "boolean"}, {"enum": [1, "a", None]},
     {"type": "integer", "minimum": 0}, {"type": "array", "items": {"type": "integer"}, "maxItems": 2}, False]
)  # not `true`: any value is nested at most 3 deep in the grammar, hypothesis-jsonschema nests deeper
KEYS = st.text(alphabet="abcx0é", min_size=0, max_size=4)


@st.composite
def pattern_objects(draw: st.DrawFn) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    props = draw(st.dictionaries(KEYS, VALUES, max_size=3))
    if props:
        schema["properties"] = props
        schema["required"] = [k for k in props if draw(st.booleans())]
    schema["patternProperties"] = draw(st.dictionaries(PATTERNS, VALUES, min_size=1, max_size=3))
    # always explicit: the tests compile in strict mode, where a missing additionalProperties means false
    schema["additionalProperties"] = draw(VALUES)
    if draw(st.booleans()):
        schema["propertyNames"] = draw(st.sampled_from([{"maxLength": 2}, {"pattern": "^[a-c]*$"}, {"not": {"const": "a"}}]))
    return schema


@SETTINGS
@given(schema=pattern_objects(), seed=st.integers(0, 2**16))
def test_pattern_property_walks_are_valid(bytelevel_vocab: Vocabulary, schema: dict[str, Any], seed: int) -> None:
    _walk_is_valid(bytelevel_vocab, schema, seed)


@SETTINGS
@given(schema=pattern_objects(), data=st.data())
def test_pattern_property_instances_are_accepted(bytelevel_vocab: Vocabulary, schema: dict[str, Any], data: st.DataObject) -> None:
    instance = data.draw(from_schema(schema))
    _accepts_instance(bytelevel_vocab, schema, instance)


def test_pattern_properties_exhaustively() -> None:
    schema = {
        "type": "object",
        "properties": {"ab": {"type": "integer"}},
        "patternProperties": {"^a": {"type": "integer", "minimum": 0}, "b$": {"enum": [1, 2, "s"]}},
        "additionalProperties": {"type": "boolean"},
    }
    keys = ["ab", "a", "b", "xb", "c", ""]
    values = [-1, 0, 1, 2, "s", True]
    objects = [dict(zip(ks, vs)) for n in range(3) for ks in itertools.permutations(keys, n)
               for vs in itertools.product(values, repeat=n)]
    _agrees(schema, objects)


def test_declared_keys_also_take_the_schemas_of_matching_patterns() -> None:
    schema = {"type": "object", "properties": {"ab": {"type": "integer"}}, "patternProperties": {"^a": {"minimum": 5}}}
    dfa = _dfa(schema)
    assert dfa.accepts(b'{"ab": 7}') and not dfa.accepts(b'{"ab": 3}')


def test_keys_the_regex_readings_disagree_on_are_left_out() -> None:
    """`\\w` is ASCII in ECMA-262 but Unicode in Python: `é` may or may not match `^\\w$`, so an extra key `é`
    is neither given the pattern's schema alone nor additionalProperties alone; the grammar leaves it out."""
    schema = {"type": "object", "patternProperties": {"^\\w$": {"type": "integer"}}, "additionalProperties": {"type": "string"}}
    dfa = _dfa(schema)
    assert dfa.accepts(b'{"a": 1}') and dfa.accepts(b'{"ab": "s"}')
    assert not dfa.accepts('{"é": 1}'.encode()) and not dfa.accepts('{"é": "s"}'.encode())


def test_pattern_upper_bound_contains_both_readings() -> None:
    for pattern in ["^\\w+$", "a.c", "^\\s$", "x$", "[^\\d]"]:
        lower, upper = compile_dfa(pattern_ir(pattern)), compile_dfa(pattern_upper_ir(pattern))
        import re

        for s in ["abc", "é", "a\n", "a\rc", "\x1c", "\ufeff", "x\n", "5", "", "a\nc"]:
            body = json.dumps(s, ensure_ascii=False)[1:-1].encode()
            python = re.search(pattern, s) is not None
            if lower.accepts(body):
                assert python and upper.accepts(body), (pattern, s)
            if python:
                assert upper.accepts(body), (pattern, s)


def test_property_names() -> None:
    schema = {"type": "object", "properties": {"abc": {}}, "propertyNames": {"maxLength": 2}}
    _agrees(schema, [{}, {"a": 1}, {"ab": 1}, {"abc": 1}, {"xyz": 1}, {"a": 1, "b": [2]}], additional_properties=True)
    assert _dfa({"type": "object", "required": ["abc"], "propertyNames": {"maxLength": 2}}).start == 0


def test_nested_pattern_values_are_written_in_their_schema_order(bytelevel_vocab: Vocabulary) -> None:
    item = {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "integer"}}, "additionalProperties": False}
    schema = {"type": "object", "patternProperties": {"^x": item}, "additionalProperties": False}
    text = CanonicalWriter(schema).dumps({"x1": {"a": 1, "b": 2}})
    assert text == '{"x1": {"b": 2, "a": 1}}'
    assert feed(Compiler(bytelevel_vocab).compile_schema(schema).guide(), bytelevel_vocab.encode(text))


# -- dependencies -----------------------------------------------------------------------------------------------

NAMES = ["a", "b", "c", "d"]


@st.composite
def dependent_objects(draw: st.DrawFn) -> dict[str, Any]:
    props = {n: draw(st.sampled_from([{"type": "integer"}, {"type": "string", "maxLength": 2}, {"enum": [0, 1]}])) for n in NAMES}
    deps: dict[str, Any] = {}
    for n in draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=3)):
        if draw(st.booleans()):
            deps[n] = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=2))
        else:
            deps[n] = draw(st.sampled_from([
                {"required": ["c"]}, {"properties": {"d": {"const": 1}}}, {"not": {"required": ["b"]}},
                {"properties": {"e": {"type": "boolean"}}, "required": ["e"]}, False, True,
            ]))
    required = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=1))
    return {"$schema": DRAFT7, "type": "object", "properties": props, "required": required, "dependencies": deps,
            "additionalProperties": draw(st.sampled_from([False, {"type": "boolean"}]))}


@SETTINGS
@given(schema=dependent_objects(), seed=st.integers(0, 2**16))
def test_dependency_walks_are_valid(bytelevel_vocab: Vocabulary, schema: dict[str, Any], seed: int) -> None:
    _walk_is_valid(bytelevel_vocab, schema, seed)


@SETTINGS
@given(schema=dependent_objects(), data=st.data())
def test_dependency_instances_are_accepted(bytelevel_vocab: Vocabulary, schema: dict[str, Any], data: st.DataObject) -> None:
    _accepts_instance(bytelevel_vocab, schema, data.draw(from_schema(schema)))


def test_dependent_required_and_schemas_exhaustively() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
        "dependentRequired": {"a": ["b"], "b": ["c"]},
        "dependentSchemas": {"c": {"properties": {"a": {"minimum": 1}}}},
    }
    objects = [{k: v for k, v in zip("abc", vs) if v is not None} for vs in itertools.product([None, 0, 1], repeat=3)]
    _agrees(schema, objects)


def test_too_many_dependencies_are_refused() -> None:
    schema = {"type": "object", "dependentRequired": {f"p{i}": ["q"] for i in range(9)}}
    with pytest.raises(UnsupportedSchemaError) as info:
        _dfa(schema)
    assert info.value.keyword == "dependentRequired"


# -- minProperties / maxProperties ----------------------------------------------------------------------------


@st.composite
def counted_objects(draw: st.DrawFn) -> dict[str, Any]:
    props = {n: {"type": "integer"} for n in draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=4))}
    lo = draw(st.integers(0, len(props) + 1))  # more would need two additional keys: refused, tested below
    schema: dict[str, Any] = {"type": "object", "properties": props, "minProperties": lo}
    if draw(st.booleans()):
        schema["maxProperties"] = lo + draw(st.integers(0, 2))
    schema["additionalProperties"] = draw(st.sampled_from([False, {"type": "boolean"}, {"type": "array", "items": {"type": "integer"}}]))
    schema["required"] = [n for n in props if draw(st.booleans())]
    return schema


@SETTINGS
@given(schema=counted_objects(), seed=st.integers(0, 2**16))
def test_property_count_walks_are_valid(bytelevel_vocab: Vocabulary, schema: dict[str, Any], seed: int) -> None:
    _walk_is_valid(bytelevel_vocab, schema, seed)


@SETTINGS
@given(schema=counted_objects(), data=st.data())
def test_property_count_instances_are_accepted(bytelevel_vocab: Vocabulary, schema: dict[str, Any], data: st.DataObject) -> None:
    try:
        instance = data.draw(from_schema(schema))
    except Exception:  # noqa: BLE001 - hypothesis-jsonschema finds some drawn schemas unsatisfiable
        assume(False)
    # additional members count once toward minProperties (their keys could repeat): see the test below
    declared = sum(k in schema["properties"] for k in instance)
    assume(declared + min(len(instance) - declared, 1) >= schema["minProperties"])
    _accepts_instance(bytelevel_vocab, schema, instance)


def test_property_counts_exhaustively() -> None:
    """Exactly the valid objects, except that additional members count at most once toward minProperties."""
    schema = {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "additionalProperties": {"type": "array"}, "minProperties": 2, "maxProperties": 3,
    }
    dfa = _dfa(schema)
    check = _validator(schema)
    keys = ["a", "b", "x", "y"]
    for n in range(5):
        for ks in itertools.combinations(keys, n):
            value = {k: (1 if k in "ab" else [1, [2, "x,y"]]) for k in ks}
            declared = sum(k in "ab" for k in ks)
            expected = check.is_valid(value) and declared + min(n - declared, 1) >= 2
            assert dfa.accepts(CanonicalWriter(schema).dumps(value).encode()) == expected, value


def test_min_properties_needing_two_additional_keys_is_refused() -> None:
    """Two extra members could repeat one key (JSON keeps the last), so they do not make two properties."""
    schema = {"type": "object", "properties": {"a": {}}, "minProperties": 3, "additionalProperties": {"type": "boolean"}}
    with pytest.raises(UnsupportedSchemaError) as info:
        _dfa(schema)
    assert info.value.keyword == "minProperties" and info.value.path == "#/minProperties"
    dfa = _dfa({**schema, "minProperties": 2})
    assert dfa.accepts(b'{"a": 1, "x": true}') and not dfa.accepts(b'{"x": true, "x": false}')


def test_container_count_reads_strings_and_nesting() -> None:
    dfa = compile_dfa(container_count("{", "}", 1, 2))
    assert not dfa.accepts(b"{}")
    assert dfa.accepts(b'{"a": [1, 2], "b": "x,y"}')
    assert dfa.accepts(b'{"a\\",": {"x": 1, "y": [1, {}]}}')
    assert not dfa.accepts(b'{"a": 1, "b": 2, "c": 3}')


# -- contains ---------------------------------------------------------------------------------------------------


@st.composite
def contains_arrays(draw: st.DrawFn) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "array",
        "items": draw(st.sampled_from([{"type": "integer", "minimum": 0, "maximum": 5}, {"enum": [0, 1, "a", None]}, {"type": ["integer", "string", "null"]}])),
        "contains": draw(st.sampled_from([{"const": 1}, {"type": "integer", "minimum": 3}, {"type": "string"}])),
    }
    if draw(st.booleans()):
        schema["minContains"] = draw(st.integers(0, 2))
    if draw(st.booleans()):
        schema["maxContains"] = draw(st.integers(1, 3))
    if draw(st.booleans()):
        schema["maxItems"] = draw(st.integers(0, 4))
    return schema


@SETTINGS
@given(schema=contains_arrays(), seed=st.integers(0, 2**16))
def test_contains_walks_are_valid(bytelevel_vocab: Vocabulary, schema: dict[str, Any], seed: int) -> None:
    _walk_is_valid(bytelevel_vocab, schema, seed)


@SETTINGS
@given(schema=contains_arrays(), data=st.data())
def test_contains_instances_are_accepted(bytelevel_vocab: Vocabulary, schema: dict[str, Any], data: st.DataObject) -> None:
    try:
        instance = data.draw(from_schema(schema))
    except Exception:  # noqa: BLE001 - hypothesis-jsonschema finds some drawn schemas unsatisfiable
        assume(False)
    _accepts_instance(bytelevel_vocab, schema, instance)


def test_contains_exhaustively() -> None:
    schema = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 3}, "contains": {"minimum": 2},
              "minContains": 1, "maxContains": 2, "maxItems": 4}
    _agrees(schema, [list(t) for n in range(6) for t in itertools.product(range(4), repeat=n)])


def test_contains_with_tuple_items_is_refused() -> None:
    with pytest.raises(UnsupportedSchemaError) as info:
        _dfa({"type": "array", "prefixItems": [{"type": "integer"}], "contains": {"const": 1}})
    assert info.value.keyword == "contains" and info.value.path == "#/contains"


# -- multipleOf -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("m", [2, 3, 4, 5, 7, 9, 10, 11, 12, 21, 25, 33, 2.5, 0.5, 0.1, 0.01, 0.25, 1.5, 0.0001, 6.0,
                               6.75, 0.33, 999])
@pytest.mark.parametrize("kind", ["integer", "number"])
def test_multiple_of_is_sound(kind: str, m: float) -> None:
    """Nothing accepted fails Python's test or exact decimal arithmetic; the multiples of the binary-exact grid
    (m·5^b for m = p / (2^a 5^b)) are all accepted."""
    schema = {"type": kind, "multipleOf": m}
    dfa = _dfa(schema)
    texts = [str(i) for i in range(-200, 200)] + [f"{i / 100:.2f}" for i in range(-2000, 2000, 3)]
    texts += [f"{i / 8}" for i in range(-200, 200)] + ["1.50", "2.500", "12345678901234567890", "-0", "1e2", "0.0"]
    check = _validator(schema)
    exact = Fraction(repr(m)) if isinstance(m, float) else Fraction(m)
    grid = Fraction(exact.numerator) if kind == "integer" else exact * 5 ** _power(exact.denominator, 5)
    for t in texts:
        value = json.loads(t)
        if dfa.accepts(t.encode()):
            assert check.is_valid(value) and Fraction(t) % exact == 0, t
        elif (Fraction(t) % grid == 0 and "e" not in t and t != "-0" and abs(Fraction(t)) < 10**12
              and (kind == "number" or "." not in t)):
            raise AssertionError(f"{t} is a multiple of {grid} and was refused")


def _power(n: int, p: int) -> int:
    k = 0
    while n % p == 0:
        n //= p
        k += 1
    return k


def test_multiple_of_with_bounds_enumerates_and_checks_python() -> None:
    schema = {"type": "number", "multipleOf": 0.01, "minimum": 0, "maximum": 1}
    dfa = _dfa(schema)
    check = _validator(schema)
    for i in range(101):
        text = json.dumps(i / 100)
        assert dfa.accepts(text.encode()) == check.is_valid(json.loads(text)), text
    assert not dfa.accepts(b"1.01") and not dfa.accepts(b"-0.01")
    assert _sound({"type": "integer", "multipleOf": 13, "exclusiveMinimum": 100, "exclusiveMaximum": 1000},
                  [str(i) for i in range(1100)]) == 69


@SETTINGS
@given(m=st.sampled_from([2, 3, 5, 7, 10, 11, 0.5, 0.25, 2.5, 6.75]), bounds=st.tuples(st.integers(-50, 50), st.integers(0, 100)),
       seed=st.integers(0, 2**16))
def test_multiple_of_walks_are_valid(bytelevel_vocab: Vocabulary, m: float, bounds: tuple[int, int], seed: int) -> None:
    schema = {"type": "number", "multipleOf": m, "minimum": bounds[0], "maximum": bounds[0] + bounds[1]}
    _walk_is_valid(bytelevel_vocab, schema, seed)
    _walk_is_valid(bytelevel_vocab, {"type": "integer", "multipleOf": m}, seed)


@SETTINGS
@given(m=st.sampled_from([2, 3, 4, 7, 11, 12, 25, 27, 143]), data=st.data())
def test_multiple_of_instances_are_accepted(bytelevel_vocab: Vocabulary, m: int, data: st.DataObject) -> None:
    schema = {"type": "integer", "multipleOf": m}
    _accepts_instance(bytelevel_vocab, schema, data.draw(from_schema(schema)))


@pytest.mark.parametrize("m", [1009, 10.09, 1e-05, 0.7])
def test_multiple_of_without_a_small_automaton_is_refused(m: float) -> None:
    with pytest.raises(UnsupportedSchemaError) as info:
        _dfa({"type": "number", "multipleOf": m})
    assert info.value.keyword == "multipleOf" and info.value.path == "#/multipleOf"


# -- if / then / else ---------------------------------------------------------------------------------------------

CONDITIONAL_VALUES: list[Any] = [*range(-3, 14), "", "a", "ab", "ba", "abc", None, True] + [
    {"kind": k, **({"x": 1} if i & 1 else {}), **({"y": "s"} if i & 2 else {})} for k in "ab" for i in range(4)
]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "if": {"minimum": 5}, "then": {"multipleOf": 2}, "else": {"maximum": 1}},
        {"if": {"type": "string"}, "then": {"maxLength": 2}, "else": {"type": "integer", "minimum": 0}},
        {"type": "string", "if": {"maxLength": 1}, "then": {"pattern": "^a"}},
        {"type": "integer", "if": {"minimum": 5}, "else": {"minimum": 3}},
        {"type": "integer", "then": {"minimum": 3}, "else": {"maximum": 0}},
        {
            "type": "object",
            "properties": {"kind": {"enum": ["a", "b"]}, "x": {"type": "integer"}, "y": {"type": "string"}},
            "required": ["kind"],
            "additionalProperties": False,
            "if": {"properties": {"kind": {"const": "a"}}},
            "then": {"required": ["x"]},
            "else": {"required": ["y"], "not": {"required": ["x"]}},
        },
    ],
)
def test_if_then_else_admits_exactly_the_valid_values(schema: dict[str, Any]) -> None:
    """(if and then) or (not if and else), an absent branch true, then / else without if ignored: exactly what
    jsonschema accepts."""
    _agrees(schema, CONDITIONAL_VALUES)


def test_multiples_module_spells_exact_decimals() -> None:
    dfa = compile_dfa(multiples(0.25, integer=False, lo=None, lo_incl=True, hi=None, hi_incl=True))
    for text in ["0", "0.25", "-1.5", "2.750", "3", "3.0", "1000000.75"]:
        assert dfa.accepts(text.encode()), text
    for text in ["0.2", "-0", "1.125", "1e3", "00.25"]:
        assert not dfa.accepts(text.encode()), text


# -- number bounds and string lengths ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lo", "lo_incl", "hi", "hi_incl"),
    [("0.1", True, None, True), ("0.1", False, "2.25", True), ("-459.67", True, None, True), (None, True, "0.5", False),
     ("-1.5", False, "-0.25", True), ("0", True, "0", True), ("1.5", True, "1.75", False)],
)
def test_decimal_bounds_are_exact(lo: str | None, lo_incl: bool, hi: str | None, hi_incl: bool) -> None:
    """Plain decimals between decimal bounds, compared exactly (no binary rounding)."""
    from tooldec.grammar.numbers import decimal_range

    flo, fhi = (None if lo is None else Fraction(lo)), (None if hi is None else Fraction(hi))
    dfa = compile_dfa(decimal_range(flo, lo_incl, fhi, hi_incl))
    rng = random.Random(0)
    texts = ["0", "-0", "0.1", "0.10", "0.09", "1.5", "2.25", "-459.67", "-459.671", "-459.669", "0.0", "12", "1.75"]
    texts += [f"{rng.choice(['', '-'])}{rng.randint(0, 12)}.{rng.randint(0, 999):03d}" for _ in range(2000)]
    for t in texts:
        v = Fraction(t)
        inside = (flo is None or (v >= flo if lo_incl else v > flo)) and (fhi is None or (v <= fhi if hi_incl else v < fhi))
        assert dfa.accepts(t.encode()) == (inside and not t.startswith("-0")) or (t.startswith("-0") and v != 0 and dfa.accepts(t.encode()) == inside), t


def test_decimal_bounds_keep_the_exponent_spellings_inside_their_integers() -> None:
    """With a bound that is not an integer, numbers spelled with an exponent (as `repr` writes 3.14e-83 or 1e+20)
    are accepted between the integers inside the bounds (found by the differential fuzzer: `{"minimum": -2.5}`
    rejected 3.14326780433952e-83); plain decimals reach the bounds exactly."""
    _agrees({"minimum": -2.5}, [3.14326780433952e-83, 1e-83, -1e-83, 1e20, 3.5e-5, -2.5, -2.6, -1e20, 0.5])
    _agrees({"type": "number", "minimum": -2.5, "maximum": 7.25}, [1e-83, -7e-5, 1e20, 7.25, 7.26, -2.5])
    _agrees({"exclusiveMaximum": 0.5}, [-1e-83, -1e20, -3.5e-7, 0.5, 0.49])
    # between a bound and the nearest integer inside it no exponent spelling is written: a subset, never more
    assert not _dfa({"exclusiveMaximum": 0.5}).accepts(b"1e-83")


@SETTINGS
@given(bound=st.sampled_from([0, 1, 5, 66, -66, 0.1, 0.5, -459.67, 2.25, 1e-5, 123456.789]),
       kind=st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]), seed=st.integers(0, 2**16))
def test_bounded_numbers_compare_alike_in_exact_and_binary_arithmetic(bound: float, kind: str, seed: int) -> None:
    """Whatever a walk writes next to a bound (long decimals, exponents) passes both jsonschema (binary floats)
    and exact decimal comparison."""
    schema = {"type": "number", kind: bound}
    dfa = _dfa(schema)
    rng = random.Random(seed)
    b = Fraction(repr(bound)) if isinstance(bound, float) else Fraction(bound)
    check = _validator(schema)
    for _ in range(200):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 25)))
        base = float(bound) + rng.choice([0, 1, -1]) * rng.choice([1e-16, 1e-14, 1e-3, 1]) * max(abs(float(bound)), 1)
        text = rng.choice([repr(base), f"{base:.20f}", f"{base:.3e}", repr(base) + digits if "." in repr(base) and "e" not in repr(base) else repr(base)])
        if dfa.accepts(text.encode()):
            v = Fraction(text)
            exact = {"minimum": v >= b, "maximum": v <= b, "exclusiveMinimum": v > b, "exclusiveMaximum": v < b}[kind]
            assert exact and check.is_valid(json.loads(text)), text


def test_huge_max_length_is_enforced_as_a_smaller_bound() -> None:
    dfa = _dfa({"type": "string", "maxLength": 65535})
    assert dfa.accepts(b'"' + b"a" * 1024 + b'"') and not dfa.accepts(b'"' + b"a" * 1025 + b'"')
    # a bound the pattern already implies costs nothing and changes nothing
    dfa = _dfa({"type": "string", "pattern": "^[a-z]{1,5}$", "maxLength": 65535})
    assert dfa.accepts(b'"abc"') and not dfa.accepts(b'"abcdef"') and dfa.num_states < 20
    with pytest.raises(UnsupportedSchemaError) as info:
        _dfa({"type": "string", "minLength": 20000})
    assert info.value.keyword == "minLength"


# -- exact or refused (issue 14) ------------------------------------------------------------------------------

OPEN_VALUES = [{}, {"a": 1}, {"b": 2}, {"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}, {"body": 1}, {"body": 1, "bodyValue": 2}, 0, "x", []]


@pytest.mark.parametrize(
    "schema",
    [
        {"oneOf": [{"type": "object", "required": ["a"]}, {"type": "object", "required": ["b"]}]},
        {"oneOf": [{"required": ["a"]}, {"required": ["b"]}, {"type": "object"}]},
        {"not": {"required": ["body", "bodyValue"]}},
        {"type": "object", "not": {"required": ["body", "bodyValue"]}},
        {"not": {"oneOf": [{}, {}]}},
        {"not": {"oneOf": [{"type": "integer"}, {"minimum": 0}, {"type": "object"}]}},
    ],
)
def test_one_of_over_open_objects_and_not_over_required_are_exact(schema: dict[str, Any]) -> None:
    """The shapes issue 14 found accepted though invalid: an object matching two open `oneOf` branches, `not`
    over `required`; and a `oneOf` under `not`, which keeps its exclusivity (`not: {oneOf: [{}, {}]}` is every
    value). Exact on these values, at the top level and nested in a property, with JSON Schema's open objects."""
    _agrees(schema, OPEN_VALUES, additional_properties=True)
    nested = {"type": "object", "properties": {"p": schema}, "required": ["p"]}
    _agrees(nested, [{"p": v} for v in OPEN_VALUES], additional_properties=True)


def test_required_keys_without_a_property_and_enum_objects_are_written_as_the_grammar_lays_them_out() -> None:
    """Canonical order: a required key without a property schema comes before other extra keys; an enum object is
    spelled in the schema's key order, and an enum number as the schema writes it."""
    _agrees({"required": ["c"]}, [{"b": 0, "c": {}}, {"c": 1, "b": 0}, {"b": 0}], additional_properties=True)
    _agrees({"anyOf": [{"enum": [{"c": 0.5, "a": {}}]}, {"type": "string"}]}, [{"a": {}, "c": 0.5}, "x", {"a": {}}])
    _agrees({"enum": [2.0, [1]]}, [2, 2.0, [1.0], [1], 3])


def test_any_value_nests_deep_within_a_state_budget(bytelevel_vocab: Vocabulary) -> None:
    """One place holding any value nests 9 containers deep (10 with an empty innermost one), mixing arrays and
    objects; more places share the budget, down to MIN_ANY_DEPTH, under one nesting limit for the document (a place
    nearer the root nests deeper); a schema that subtracts shares a smaller one (7 deep); a fixed any_depth still
    applies."""
    from tooldec.grammar.schema import MAX_ANY_DEPTH, MIN_ANY_DEPTH, any_depth_at, nesting_limit

    uniform = [any_depth_at(nesting_limit([1] * n), 1) for n in (1, 2, 4, 8, 16, 32, 100)]
    assert uniform == [MAX_ANY_DEPTH, 8, 7, 6, 5, 4, MIN_ANY_DEPTH]
    assert [any_depth_at(nesting_limit([1, 2, 3, 4]), k) for k in (1, 2, 3, 4)] == [8, 7, 6, 5]
    assert nesting_limit([]) == 0 and any_depth_at(0, 5) == MIN_ANY_DEPTH

    def nest(depth: int, inner: Any = (1, "x")) -> Any:
        value: Any = list(inner)
        for i in range(depth - 1):
            value = {"k": value, "n": None} if i % 2 else [value, 2.5]
        return value

    schema = {"type": "object", "properties": {"id": {"type": "integer"}}, "additionalProperties": True}
    dfa = _dfa(schema)
    assert dfa.accepts(json.dumps({"id": 1, "extra": nest(9)}).encode())
    assert dfa.accepts(json.dumps({"id": 1, "extra": nest(10, inner=[])}).encode())  # an empty tenth level
    assert not dfa.accepts(json.dumps({"id": 1, "extra": nest(10)}).encode())
    assert not _dfa(schema | {"properties": {f"p{i}": {} for i in range(40)}}).accepts(
        json.dumps({"p0": nest(5)}).encode()
    )
    # a schema that subtracts keeps the smaller budget: its differences follow nesting as deep
    subtracting = _dfa(schema | {"not": {"required": ["body", "bodyValue"]}})
    assert subtracting.accepts(json.dumps({"extra": nest(7)}).encode())
    assert not subtracting.accepts(json.dumps({"extra": nest(8)}).encode())
    # four open objects, one inside the other: the root's extra value nests 8 deep, the innermost one's 5
    chain: dict[str, Any] = {"type": "object"}
    for name in ("c", "b", "a"):
        chain = {"type": "object", "properties": {name: chain}}
    chained = _dfa(chain, additional_properties=True)
    assert chained.accepts(json.dumps({"extra": nest(8)}).encode())
    assert not chained.accepts(json.dumps({"extra": nest(9)}).encode())
    assert chained.accepts(json.dumps({"a": {"b": {"c": {"extra": nest(5)}}}}).encode())
    assert not chained.accepts(json.dumps({"a": {"b": {"c": {"extra": nest(6)}}}}).encode())
    fixed = compile_dfa(SchemaCompiler(schema, any_depth=2, decide=KeyLanguage).value())
    assert fixed.accepts(json.dumps({"extra": nest(2)}).encode()) and not fixed.accepts(json.dumps({"extra": nest(3)}).encode())
    assert feed(Compiler(bytelevel_vocab).compile_schema(schema).guide(), bytelevel_vocab.encode(json.dumps({"extra": nest(9)})))


def test_strict_objects_are_not_closed_on_the_subtracted_side() -> None:
    """In the strict reading (tool calls: an object without additionalProperties takes its declared keys only),
    `not: {required: [b]}` still removes every object holding b: closing the subtracted object would have removed
    nothing and admitted {"a": 1, "b": 2} (found by a walk in CI, through dependencies)."""
    props = {"a": {"type": "integer"}, "b": {"type": "integer"}}
    objects = [{"a": 1}, {"a": 1, "b": 2}, {"b": 2}, {}]
    _agrees({"type": "object", "properties": props, "not": {"required": ["b"]}, "additionalProperties": False}, objects)
    _agrees({"type": "object", "properties": props, "dependentSchemas": {"a": {"not": {"required": ["b"]}}},
             "additionalProperties": False}, objects)
    _agrees({"$schema": DRAFT7, "type": "object", "properties": props, "required": ["a"],
             "dependencies": {"a": {"not": {"required": ["b"]}}}, "additionalProperties": False}, objects)


# -- const / enum with other keywords ------------------------------------------------------------------------

LISTED = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 3) | st.sampled_from([0.5, 2.0, "", "a", "ab"]),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.sampled_from(["foo", "bar", "baz"]), kids, max_size=3),
    max_leaves=5,
)
# keywords whose subtracted side (under `not`, the other `oneOf` branches) is only a superset, and one refused
SIDES = st.sampled_from(
    [
        {"maxProperties": 1}, {"maxProperties": 0}, {"minProperties": 2}, {"required": ["foo", "bar"]},
        {"oneOf": [{"required": ["foo"]}, {"required": ["bar"]}]},
        {"oneOf": [{"properties": {"bar": {"type": "integer"}}, "required": ["bar"]}, {"required": ["foo"]}]},
        {"not": {"oneOf": [{"required": ["foo", "bar"]}, {"required": ["foo", "baz"]}], "type": "object"}},
        {"multipleOf": 2}, {"type": "string", "pattern": "^a"}, {"maxItems": 1}, {"uniqueItems": True},
        {"if": {"type": "integer"}, "then": {"minimum": 1}},
    ]
)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(values=st.lists(LISTED, min_size=1, max_size=4), side=SIDES, shape=st.integers(0, 3), strict=st.booleans())
def test_listed_values_are_checked_against_the_whole_schema(values: list[Any], side: dict[str, Any], shape: int, strict: bool) -> None:
    """A schema that lists its values (`enum` / `const`, its own or an `allOf` part's) admits exactly those the
    whole schema admits, whatever approximation its other keywords would need (MaskBench's `allOf: [{enum},
    {not: {maxProperties: 2}}]` once admitted nothing)."""
    listed: dict[str, Any] = {"enum": values} if len(values) > 1 else {"const": values[0]}
    schema = [
        {"allOf": [listed, {"not": side}]},
        {**listed, "not": side},
        {"allOf": [listed, side]},
        {"$defs": {"e": listed}, "allOf": [{"$ref": "#/$defs/e"}, {"not": side}]},
    ][shape]
    dfa = _dfa(schema, additional_properties=not strict)
    writer = CanonicalWriter(schema)
    check = _validator(schema)
    for v in values:
        assert bool(dfa.accepts(writer.dumps(v).encode())) == check.is_valid(v), (schema, v)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    keys=st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True, max_size=4),
    deep=st.integers(0, 4),
    nested=st.booleans(),
)
def test_a_subtracted_not_keeps_every_key_order_and_depth(keys: list[str], deep: int, nested: bool) -> None:
    """`oneOf: [{required: [a, b]}, {required: [c], not: {required: [b]}}]` over declared properties (MaskBench's
    Github_medium---o57539): the second branch is subtracted as a superset, so its `not` removes a subset, which
    must hold objects in any key order and, as undeclared members, values as deep as a declared property nests.
    Both were cut: a valid object with `b` after a deep `d` was rejected."""
    arrays: Any = {}
    for _ in range(4):
        arrays = {"type": "array", "items": arrays}
    one_of = {"properties": {"d": arrays}, "oneOf": [{"required": ["a", "b"]}, {"required": ["c"], "not": {"required": ["b"]}}]}
    schema = {"type": "object", "properties": {"p": one_of}} if nested else one_of
    value: Any = 1
    for _ in range(deep):
        value = [value]
    obj = {k: (value if k == "d" else i) for i, k in enumerate(keys)}
    _agrees(schema, [{"p": obj} if nested else obj], additional_properties=True)


@st.composite
def intersected_requirements(draw: st.DrawFn) -> dict[str, Any]:
    """Objects whose `allOf` parts do not merge (two `anyOf`s of `required`), with or without `dependencies`."""
    keys = ["a", "b", "c", "d"]
    declared = draw(st.lists(st.sampled_from(keys), min_size=1, max_size=3, unique=True))
    schema: dict[str, Any] = {
        "$schema": DRAFT7,
        "type": "object",
        "properties": {k: {"type": draw(st.sampled_from(["string", "integer"]))} for k in declared},
        "additionalProperties": draw(st.booleans()),
    }
    requirement = st.lists(st.sampled_from(keys), min_size=1, max_size=2, unique=True).map(lambda r: {"required": r})
    schema["allOf"] = [{"anyOf": draw(st.lists(requirement, min_size=1, max_size=3))} for _ in range(2)]
    if draw(st.booleans()):
        schema["dependencies"] = {draw(st.sampled_from(keys)): draw(st.lists(st.sampled_from(keys), min_size=1, max_size=2, unique=True))}
    return schema


@SETTINGS
@given(intersected_requirements())
@example(  # the writer once put `a` before `c`, by the first branch each part's value satisfies: rejected
    {"$schema": DRAFT7, "type": "object", "properties": {"b": {"type": "string"}}, "additionalProperties": True,
     "allOf": [{"anyOf": [{"required": ["b"]}, {"required": ["b", "c"]}]}, {"anyOf": [{"required": ["a", "c"]}]}]}
)
def test_intersected_parts_share_one_key_order(bytelevel_vocab: Vocabulary, schema: dict[str, Any]) -> None:
    """The parts of an `allOf` that do not merge lay out keys in one order, the canonical writer's: an object
    every part accepts is accepted (it was 'admits no value' when each part put its own keys first)."""
    validator = _validator(schema)
    keys = ["a", "b", "c", "d"]
    props = schema["properties"]
    valid = [
        inst
        for r in range(5)
        for sub in itertools.combinations(keys, r)
        if validator.is_valid(inst := {k: ("x" if props.get(k, {"type": "string"})["type"] == "string" else 1) for k in sub})
    ]
    assume(valid)
    # the smallest valid objects: their canonical order follows the branches they satisfy first
    smallest = [v for v in valid if len(v) == len(valid[0])]
    grammar = Compiler(bytelevel_vocab).compile_schema(schema, use_cache=False)
    accepted = [feed(grammar.guide(), bytelevel_vocab.encode(CanonicalWriter(schema).dumps(v))) for v in smallest]
    assert any(accepted)
