"""Differential fuzzing of the schema grammar against `jsonschema` (issue 14).

Schemas are drawn from a grammar of keywords (objects open and closed, `oneOf` / `anyOf` / `allOf` / `not`,
`required`, `$ref`, enums, bounded numbers, strings with patterns and lengths, arrays with `items` /
`prefixItems` / `minItems` / `maxItems`, `additionalProperties` as a schema). Instances are drawn valid by
`hypothesis-jsonschema`, then mutated (most mutants are invalid), plus arbitrary JSON values. Every schema that
compiles is checked the way `tooldec check-schemas` checks a file (`tooldec.conformance`: JSON Schema's open
objects, canonical text fed token by token): the guide accepts an instance exactly when `jsonschema` says it is
valid. Accepting an invalid instance fails the test; rejecting a valid one is a known subset of the grammar
(README, "What the grammar enforces") and is reported by category.

`benchmarks/fuzz_schemas.py` runs the same check longer and writes its figures.
"""

from __future__ import annotations

import copy
import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import HypothesisException
from hypothesis_jsonschema import from_schema

from tooldec.compiler import Compiler
from tooldec.conformance import Compiled, accepts, compile_checked
from tooldec.grammar.canonical import CanonicalWriter
from tooldec.sample import WalkTooLong, random_walk
from tooldec.vocab import Vocabulary

KEYS = ["a", "b", "c"]
"""Few property names, so that branches, `required` lists and extra members collide."""

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 12), st.sampled_from([0.5, -1.25, 2.0, 1e20]), st.sampled_from(["", "a", "ab", "z9"])
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(st.sampled_from([*KEYS, "z"]), kids, max_size=3)),
    max_leaves=6,
)
PATTERNS = ["^a", "b$", "^[a-z]+$", "^[0-9]{2,3}$", "x", "^(ab|c)*$"]
DECIMALS = [-2.5, -1, 0, 0.5, 1.25, 3, 10]


def _number(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    """An integer or number type with up to two bounds (decimal ones for numbers), inclusive or exclusive."""
    values = st.integers(-5, 10) if kind == "integer" else st.sampled_from(DECIMALS)

    def build(args: tuple[Any, Any, bool, bool]) -> dict[str, Any]:
        lo, hi, ex_lo, ex_hi = args
        out: dict[str, Any] = {"type": kind}
        if lo is not None:
            out["exclusiveMinimum" if ex_lo else "minimum"] = lo
        if hi is not None:
            out["exclusiveMaximum" if ex_hi else "maximum"] = hi
        return out

    return st.tuples(st.none() | values, st.none() | values, st.booleans(), st.booleans()).map(build)


def _string() -> st.SearchStrategy[dict[str, Any]]:
    """A string with an optional pattern and length bounds."""

    def build(args: tuple[str | None, int | None, int | None]) -> dict[str, Any]:
        pattern, lo, span = args
        out: dict[str, Any] = {"type": "string"}
        if pattern is not None:
            out["pattern"] = pattern
        if lo is not None:
            out["minLength"] = lo
        if span is not None:
            out["maxLength"] = (lo or 0) + span
        return out

    return st.tuples(st.none() | st.sampled_from(PATTERNS), st.none() | st.integers(0, 3), st.none() | st.integers(0, 3)).map(build)


PLAIN_LEAVES = st.one_of(
    _number("integer"),
    _number("number"),
    _string(),
    st.sampled_from([{"type": "boolean"}, {"type": "null"}, {}, {"type": ["string", "integer"]}]),
    st.lists(JSON_VALUES, min_size=1, max_size=3, unique_by=lambda v: json.dumps(v, sort_keys=True)).map(lambda v: {"enum": v}),
    JSON_VALUES.map(lambda v: {"const": v}),
)
REF = {"$ref": "#/$defs/d"}
LEAVES = PLAIN_LEAVES | st.just(REF)


def _containers(kids: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects, arrays and combinators over `kids`; object and array keywords sometimes without a type."""

    def obj(args: tuple[dict[str, Any], list[str], Any, bool]) -> dict[str, Any]:
        props, required, extra, typed = args
        out: dict[str, Any] = {"type": "object"} if typed else {}
        if props:
            out["properties"] = props
        if required:
            out["required"] = required
        if extra is not None:
            out["additionalProperties"] = extra
        return out

    def arr(args: tuple[list[Any], Any, int | None, int | None, bool]) -> dict[str, Any]:
        prefix, items, lo, span, typed = args
        out: dict[str, Any] = {"type": "array"} if typed else {}
        if prefix:
            out["prefixItems"] = prefix
        if items is not None:
            out["items"] = items
        if lo is not None:
            out["minItems"] = lo
        if span is not None:
            out["maxItems"] = (lo or 0) + span
        return out

    keys = st.sampled_from(KEYS)
    return st.one_of(
        st.tuples(
            st.dictionaries(keys, kids, max_size=3),
            st.lists(keys, max_size=2, unique=True),
            st.none() | st.booleans() | kids,
            st.booleans(),
        ).map(obj),
        st.tuples(
            st.lists(kids, max_size=2), st.none() | st.just(False) | kids, st.none() | st.integers(0, 2),
            st.none() | st.integers(0, 2), st.booleans(),
        ).map(arr),
        st.tuples(st.sampled_from(["oneOf", "anyOf", "allOf"]), st.lists(kids, min_size=1, max_size=3)).map(
            lambda t: {t[0]: t[1]}
        ),
        kids.map(lambda k: {"not": k}),
        st.tuples(st.sampled_from(["object", "array", "integer", "string"]), kids).map(lambda t: {"type": t[0], "not": t[1]}),
        st.tuples(kids, kids).map(lambda t: {"oneOf": [t[0]], **({"type": "object"} if t[1] else {})}),
    )


SUBSCHEMAS = st.recursive(LEAVES, _containers, max_leaves=5)
PLAIN_SUBSCHEMAS = st.recursive(PLAIN_LEAVES, _containers, max_leaves=4)
# what `$defs/d` holds: a plain subschema, or a recursive object (a list node) or array (a tree)
DEFINITIONS = st.one_of(
    PLAIN_SUBSCHEMAS,
    PLAIN_SUBSCHEMAS.map(lambda v: {"type": "object", "properties": {"v": v, "next": REF}, "required": ["v"]}),
    PLAIN_SUBSCHEMAS.map(lambda v: {"anyOf": [v, {"type": "array", "items": REF, "maxItems": 2}]}),
)


def _root(args: tuple[Any, Any]) -> Any:
    """A root document with `$defs/d` for the `$ref` leaves (a subschema that may itself refer to `d`)."""
    top, target = args
    if "#/$defs/d" not in json.dumps(top):
        return top
    if top == REF:
        return {"$defs": {"d": target}, **REF}
    return {**top, "$defs": {"d": target}} if isinstance(top, dict) and "$ref" not in top else {"allOf": [top], "$defs": {"d": target}}


SCHEMAS = st.tuples(SUBSCHEMAS, DEFINITIONS).map(_root)


# -- instances ----------------------------------------------------------------------------------------------
def _locations(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON value (the value itself first)."""
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_locations(v, (*path, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_locations(v, (*path, i)))
    return out


def _changed(node: Any, rng: random.Random) -> Any:
    """A value near `node` and unequal to it: another number or string, another type, or a container with a
    member added, removed or replaced."""
    scalars = [None, True, 0, -1, 0.5, "", "a", [], {}]
    options: list[Callable[[], Any]] = [lambda: rng.choice(scalars)]
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        options += [lambda: node + 1, lambda: node - 1, lambda: node + 0.5, lambda: -node, lambda: node * 10,
                    lambda: str(node), lambda: 1e20, lambda: node - 0.001]
    elif isinstance(node, str):
        options += [lambda: node + "x", lambda: node[:-1], lambda: node + node, lambda: "9" + node]
    elif isinstance(node, list):
        options += [
            lambda: [*node, copy.deepcopy(rng.choice(node)) if node else rng.choice(scalars)],
            lambda: node[1:],
            lambda: node[::-1],
        ]
    elif isinstance(node, dict):
        gone = rng.choice([*node, "a"])
        options += [
            lambda: {k: v for k, v in node.items() if k != gone},
            lambda: {**node, rng.choice([*KEYS, "z"]): rng.choice(scalars)},
            lambda: {**node, **{k: rng.choice(scalars) for k in list(node)[:1]}},
        ]
    for _ in range(8):
        out = rng.choice(options)()
        if not _same(out, node):
            return out
    return [node]


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values (a bool is not a number)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def mutate(value: Any, rng: random.Random) -> Any:
    """`value` with one place changed (see `_changed`)."""
    path = rng.choice(_locations(value))
    if not path:
        return _changed(value, rng)
    out = copy.deepcopy(value)
    node = out
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = _changed(node[path[-1]], rng)
    return out


# -- the check ----------------------------------------------------------------------------------------------
@dataclass
class Disagreement:
    """The guide and `jsonschema` differ on one instance."""

    direction: str  # "accepted-invalid" (a soundness bug) or "rejected-valid" (a subset the grammar admits)
    schema: Any
    instance: Any
    text: str
    keyword: str = ""  # for accepted-invalid: the keyword jsonschema's best error names


@dataclass
class SchemaCheck:
    """One schema's outcome: its compile status and how many instances agreed."""

    status: str  # a compile status (see tooldec.conformance.Compiled), or skipped
    reason: str = ""
    instances: int = 0
    valid: int = 0
    disagreements: list[Disagreement] = field(default_factory=list)


def check_schema(
    schema: Any, instances: list[Any], compiler: Compiler, *, walks: int = 0, seed: int = 0, strict: bool = False
) -> SchemaCheck:
    """Compile `schema` as check-schemas does (`strict`: as tool calls read it, undeclared keys refused) and
    compare the guide with `jsonschema` (on `strict_reference(schema)` when strict) on each instance, and on the
    values of `walks` random walks of the guide (each the guide accepts, so each must be valid)."""
    compiled = compile_checked(schema, compiler, additional_properties=not strict)
    out = SchemaCheck(status=compiled.status, reason=compiled.reason)
    if compiled.status != "compiled":
        return out
    reference = strict_reference(schema) if strict else schema
    validator = jsonschema.validators.validator_for(reference)(reference)
    writer = CanonicalWriter(schema)
    if compiled.grammar is not None:
        rng = random.Random(seed)
        for _ in range(walks):
            try:
                guide = random_walk(compiled.grammar.guide(), rng, max_tokens=2000, steer_after=300)
            except WalkTooLong:
                continue
            instances = [*instances, json.loads(guide.text())]
    for value in instances:
        if not _spellable(value):
            continue
        try:
            valid = validator.is_valid(value)
        except RecursionError:  # a $ref cycle that consumes no input: jsonschema cannot decide either
            return SchemaCheck(status="skipped", reason="jsonschema recursion")
        out.instances += 1
        out.valid += valid
        if agreement := _disagreement(compiled, writer, compiler.vocab, validator, schema, value, valid):
            out.disagreements.append(agreement)
    return out


STRICT = "__strict"
"""The suffix of the closed copy of each `$defs` entry in a strict reference (`$ref`s reached positively)."""


def strict_reference(schema: Any) -> Any:
    """`schema` as the strict reading (`compile_schema(..., additional_properties=False)`) means it, for `jsonschema`.

    The README's reading: an object without `additionalProperties` admits only its declared properties. Declared
    means by `properties` or `required` anywhere in the schemas applied to the value in place (`allOf` parts,
    `anyOf` / `oneOf` branches, `$ref` targets), which the grammar merges: so `unevaluatedProperties: false` at
    every value position (the root, `properties`, `patternProperties`, `additionalProperties`, `items`,
    `prefixItems`, `contains`), each `required` key declared. Left as written: what a `not` subtracts (the
    grammar reads it open, as JSON Schema does), and a schema that lists its values (`enum` / `const`, its own or
    an `allOf` part's), which are checked against the schema as written. A `$ref` reached outside a `not` points
    to a closed copy of its target."""

    def lists(s: dict[str, Any], depth: int = 0) -> bool:
        if "const" in s or "enum" in s:
            return True
        for part in s.get("allOf", []) if depth < 8 else []:
            if isinstance(part, dict) and set(part) == {"$ref"} and part["$ref"].startswith("#/$defs/"):
                part = defs.get(part["$ref"][len("#/$defs/"):])
            if isinstance(part, dict) and "$ref" not in part and lists(part, depth + 1):
                return True
        return False

    def close(s: Any, in_place: bool) -> Any:
        if not isinstance(s, dict):
            return s
        if lists(s):  # as written; applied in place, its listed object's keys count as evaluated for the parent's
            return {**s, "unevaluatedProperties": True} if in_place else s  # closure (a oneOf branch's enum)
        out = dict(s)
        props = {**{r: True for r in s.get("required", []) if isinstance(r, str)}, **s.get("properties", {})}
        if props:
            out["properties"] = {k: close(v, False) for k, v in props.items()}
        if isinstance(s.get("patternProperties"), dict):
            out["patternProperties"] = {k: close(v, False) for k, v in s["patternProperties"].items()}
        for key in ("additionalProperties", "contains", "additionalItems"):
            if key in s:
                out[key] = close(s[key], False)
        items = s.get("items")
        if items is not None:
            out["items"] = [close(v, False) for v in items] if isinstance(items, list) else close(items, False)
        for key in ("prefixItems", "allOf", "anyOf", "oneOf"):
            if isinstance(s.get(key), list):
                out[key] = [close(v, key != "prefixItems") for v in s[key]]
        ref = s.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            out["$ref"] = ref + STRICT
        if not in_place:
            out["unevaluatedProperties"] = False
        return out

    defs = schema.get("$defs", {}) if isinstance(schema, dict) else {}
    root = close(schema, False)
    if defs and root is not schema:
        root["$defs"] = {**defs, **{name + STRICT: close(d, True) for name, d in defs.items()}}
    return root


def _disagreement(
    compiled: Compiled, writer: CanonicalWriter, vocab: Vocabulary, validator: Any, schema: Any, value: Any, valid: bool
) -> Disagreement | None:
    if accepts(compiled, writer, vocab, value) == valid:
        return None
    if valid:
        return Disagreement("rejected-valid", schema, value, writer.dumps(value))
    best = jsonschema.exceptions.best_match(validator.iter_errors(value))
    keyword = str(best.validator) if best is not None else "?"
    return Disagreement("accepted-invalid", schema, value, writer.dumps(value), keyword)


def _spellable(value: Any) -> bool:
    """Whether a value has JSON text without lone surrogates (which no UTF-8 byte grammar can hold)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False) if _finite(value) else None
    return text is not None and not any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def draw_instances(data: st.DataObject, schema: Any, *, valid: int = 3, mutants: int = 3, others: int = 2) -> list[Any]:
    """Valid instances from hypothesis-jsonschema (none when it cannot draw for this schema), `mutants` of each,
    and `others` arbitrary JSON values."""
    out: list[Any] = []
    strategy = from_schema(schema)
    try:
        drawn = [] if strategy.is_empty else [data.draw(strategy) for _ in range(valid)]
    except HypothesisException:
        raise  # hypothesis' own control flow (an unsatisfiable draw discards the example)
    except Exception:  # noqa: BLE001 - hypothesis-jsonschema raises on draw what it cannot handle (recursive $ref)
        drawn = []
    rng = data.draw(st.randoms(use_true_random=False))
    for v in drawn:
        out.append(v)
        out.extend(mutate(v, rng) for _ in range(mutants))
    out.extend(data.draw(JSON_VALUES) for _ in range(others))
    return out


# -- tests --------------------------------------------------------------------------------------------------
FUZZ = settings(
    max_examples=60, deadline=None, derandomize=True,  # the same 60 draws in every CI run (the long run varies them)
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_the_guide_accepts_an_instance_only_when_jsonschema_says_it_is_valid(bytelevel_vocab: Vocabulary) -> None:
    """Soundness, differentially: no compiled schema accepts an instance `jsonschema` rejects, and nothing
    crashes. Enough of the draws compile and hold valid instances for the check to mean something."""
    compiler = Compiler(bytelevel_vocab)
    seen: list[SchemaCheck] = []

    @FUZZ
    @given(schema=SCHEMAS, data=st.data())
    def agree(schema: Any, data: st.DataObject) -> None:
        res = check_schema(schema, draw_instances(data, schema), compiler, walks=2, seed=data.draw(st.integers(0, 99)))
        seen.append(res)
        assert res.status != "crashed", res.reason
        wrong = [d for d in res.disagreements if d.direction == "accepted-invalid"]
        assert not wrong, (wrong[0].schema, wrong[0].text, wrong[0].keyword)

    agree()
    compiled = [r for r in seen if r.status == "compiled"]
    assert len(compiled) >= 0.7 * len(seen), [r.reason for r in seen if r.status != "compiled"]
    assert sum(r.valid for r in compiled) >= len(compiled)  # random draws gave 69 valid over 60 schemas once
    assert sum(r.instances - r.valid for r in compiled) >= len(compiled)


def test_the_strict_guide_accepts_an_instance_only_when_jsonschema_says_it_is_valid(bytelevel_vocab: Vocabulary) -> None:
    """Soundness of the strict reading (tool calls: undeclared keys refused), differentially against
    `jsonschema` on `strict_reference(schema)`: no accepted instance is invalid, nothing crashes, and the draws
    hold instances of both kinds (the guide's own walks give the valid ones that open draws rarely are)."""
    compiler = Compiler(bytelevel_vocab)
    seen: list[SchemaCheck] = []

    @FUZZ
    @given(schema=SCHEMAS, data=st.data())
    def agree(schema: Any, data: st.DataObject) -> None:
        seed = data.draw(st.integers(0, 99))
        res = check_schema(schema, draw_instances(data, schema), compiler, walks=3, seed=seed, strict=True)
        seen.append(res)
        assert res.status != "crashed", res.reason
        wrong = [d for d in res.disagreements if d.direction == "accepted-invalid"]
        assert not wrong, (wrong[0].schema, wrong[0].text, wrong[0].keyword)

    agree()
    compiled = [r for r in seen if r.status == "compiled"]
    assert len(compiled) >= 0.7 * len(seen), [r.reason for r in seen if r.status != "compiled"]
    assert sum(r.valid for r in compiled) >= len(compiled)
    assert sum(r.instances - r.valid for r in compiled) >= len(compiled)


@pytest.mark.parametrize(
    ("schema", "valid", "invalid"),
    [
        ({"properties": {"a": {"type": "integer"}}}, {"a": 1}, {"a": 1, "b": 2}),
        ({"required": ["c"]}, {"c": [{"x": 1}]}, {"c": 1, "d": 2}),
        ({"properties": {"a": {}}, "allOf": [{"properties": {"b": {}}}]}, {"a": 1, "b": 2}, {"a": 1, "c": 3}),
        ({"type": "array", "items": {"properties": {"a": {}}}}, [{"a": 1}], [{"a": 1, "b": 2}]),
        ({"not": {"properties": {"a": {}}, "required": ["a"]}}, {}, {"a": 1}),
        ({"$defs": {"d": {"properties": {"v": {"properties": {"w": {}}}}}}, "$ref": "#/$defs/d"},
         {"v": {"w": 1}}, {"v": {"w": 1, "x": 2}}),
        ({"$defs": {"d": {"properties": {"v": {}}}}, "properties": {"v": {}, "w": {}},
          "not": {"$ref": "#/$defs/d", "required": ["v"]}}, {"w": 1}, {"v": 1, "w": 2}),
        ({"enum": [{"z": 1}], "properties": {"a": {}}}, {"z": 1}, {"a": 1}),
    ],
)
def test_the_strict_reference_closes_what_the_strict_grammar_closes(
    bytelevel_vocab: Vocabulary, schema: dict[str, Any], valid: Any, invalid: Any
) -> None:
    """The reference refuses undeclared keys where the strict grammar does (declared in place, `required`
    included), not under a `not` nor in listed values, and the strict guide agrees with it on both instances."""
    reference = jsonschema.Draft202012Validator(strict_reference(schema))
    assert reference.is_valid(valid) and not reference.is_valid(invalid)
    res = check_schema(schema, [valid, invalid], Compiler(bytelevel_vocab), strict=True)
    assert res.status == "compiled" and res.instances == 2 and not res.disagreements, res.disagreements


@pytest.mark.parametrize(
    ("schema", "instance"),
    [
        ({"type": "integer", "maximum": 3}, 4),
        ({"oneOf": [{"type": "object", "required": ["a"]}, {"type": "object", "required": ["b"]}]}, {"a": 1, "b": 2}),
    ],
)
def test_the_check_reports_a_guide_that_accepts_an_invalid_instance(
    bytelevel_vocab: Vocabulary, schema: dict[str, Any], instance: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check can fail: with a grammar looser than the schema (its `maximum` / `oneOf` exclusivity dropped,
    as a buggy compiler would), the disagreement is reported as accepted-invalid, naming the keyword."""
    loose = {k: v for k, v in schema.items() if k != "maximum"} if "maximum" in schema else {"anyOf": schema["oneOf"]}
    compiler = Compiler(bytelevel_vocab)
    real = compiler.compile_schema
    monkeypatch.setattr(compiler, "compile_schema", lambda s, **kw: real(loose, **kw))
    res = check_schema(schema, [instance], compiler)
    assert [(d.direction, d.keyword) for d in res.disagreements] == [
        ("accepted-invalid", "maximum" if "maximum" in schema else "oneOf")
    ]


def test_the_strict_check_reports_a_guide_that_admits_undeclared_keys(
    bytelevel_vocab: Vocabulary, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The strict check can fail: a compiler that ignores the strict reading (objects left open) is reported as
    accepting an invalid instance, the keyword being the reference's unevaluatedProperties."""
    compiler = Compiler(bytelevel_vocab)
    real = compiler.compile_schema
    monkeypatch.setattr(compiler, "compile_schema", lambda s, **kw: real(s, **{**kw, "additional_properties": True}))
    res = check_schema({"properties": {"a": {"type": "integer"}}}, [{"a": 1}, {"a": 1, "b": 2}], compiler, strict=True)
    assert [(d.direction, d.keyword, d.instance) for d in res.disagreements] == [
        ("accepted-invalid", "unevaluatedProperties", {"a": 1, "b": 2})
    ]


def test_mutations_change_the_value() -> None:
    """Every mutant differs from its source, and most break a closed object's schema."""
    rng = random.Random(0)
    schema = {"type": "object", "properties": {"a": {"type": "integer", "maximum": 5}}, "required": ["a"], "additionalProperties": False}
    value = {"a": 3}
    mutants = [mutate(value, rng) for _ in range(50)]
    assert not any(_same(m, value) for m in mutants)
    assert sum(not jsonschema.Draft202012Validator(schema).is_valid(m) for m in mutants) >= 35
