"""Schemas and tool calls through real tokenizers: soundness (random walks validate) and completeness."""

from __future__ import annotations

import dataclasses
import json
import keyword
import random
import re
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from tooldec.cfg_guide import CompiledCfg
from tooldec.compiler import Compiler
from tooldec.conformance import feed
from tooldec.errors import TokenRejectedError, ToolSpecError, UnsupportedSchemaError
from tooldec.grammar.calls import get_format
from tooldec.grammar.canonical import CanonicalWriter
from tooldec.grammar.numbers import DEFAULT_DIGITS, DigitLimits
from tooldec.grammar.schema import MAX_EXPANSIONS
from tooldec.grammar.syntax import LINE_INDENT
from tooldec.guide import Guide
from tooldec.sample import UNREACHABLE, WalkTooLong, distances_to_accept, random_walk
from tooldec.specs import ToolSet, ToolSpec
from tooldec.vocab import Vocabulary

NAMES = st.text(alphabet="abcdefgh_", min_size=1, max_size=6).filter(lambda s: s[0] != "_")
ENUM_VALUES = st.one_of(st.integers(-5, 50), st.text(alphabet="xyz é\"", max_size=4), st.booleans(), st.none())


def _bounds() -> st.SearchStrategy[dict[str, Any]]:
    b = st.one_of(st.none(), st.integers(-100, 100))
    return st.tuples(b, b, st.booleans()).map(
        lambda t: {
            k: v
            for k, v in (
                ("minimum", min(t[0], t[1]) if None not in t[:2] else t[0]),
                ("maximum", max(t[0], t[1]) if None not in t[:2] else t[1]),
            )
            if v is not None
        }
        | ({"exclusiveMinimum": t[0] - 1} if t[2] and t[0] is not None and t[1] is None else {})
    )


LEAVES = st.one_of(
    _bounds().map(lambda b: {"type": "integer", **b}),
    _bounds().map(lambda b: {"type": "number", **b}),
    st.just({"type": "number"}),
    st.tuples(st.integers(0, 3), st.integers(0, 6)).map(
        lambda t: {"type": "string", "minLength": t[0], "maxLength": t[0] + t[1]}
    ),
    st.just({"type": "string"}),
    st.sampled_from(
        [
            {"type": "string", "format": "date"},
            {"type": "string", "pattern": "^[a-z]{2,4}-[0-9]+$"},
            {"type": "boolean"},
            {"type": "null"},
            {"type": ["string", "null"]},
        ]
    ),
    st.lists(ENUM_VALUES, min_size=1, max_size=4, unique_by=lambda v: json.dumps(v)).map(lambda v: {"enum": v}),
    ENUM_VALUES.map(lambda v: {"const": v}),
)


def _containers(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    def obj(args: tuple[dict[str, dict], list[bool]]) -> dict[str, Any]:
        props, req = args
        names = list(props)
        return {
            "type": "object",
            "properties": props,
            "required": [n for n, r in zip(names, req) if r],
            "additionalProperties": False,
        }

    return st.one_of(
        st.tuples(st.dictionaries(NAMES, children, min_size=1, max_size=4), st.lists(st.booleans(), min_size=4, max_size=4)).map(obj),
        st.tuples(children, st.integers(0, 2), st.integers(0, 3)).map(
            lambda t: {"type": "array", "items": t[0], "minItems": t[1], "maxItems": t[1] + t[2]}
        ),
        children.map(lambda c: {"type": "array", "items": c}),
        st.lists(children, min_size=2, max_size=3).map(lambda cs: {"anyOf": cs}),
    )


SCHEMAS = st.recursive(LEAVES, _containers, max_leaves=6)
# No filter_too_much suppression: a property whose examples are mostly discarded must fail the health check.
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

WALK_MAX_TOKENS = 3000
WALK_STEER_AFTER = 1000
"""Walks are uniform for their first 1,000 tokens (4,000 property walks never needed more than ~1,300 in all),
then steered home: they take only tokens that get closer to acceptance, so a walk cannot legitimately run out
of tokens and WalkTooLong is a real failure."""


def _walk(compiled: Any, seed: int, **steering: int) -> Guide:
    """A seeded random walk to EOS; WalkTooLong (a grammar the walk cannot finish) fails the test."""
    kwargs = {"max_tokens": WALK_MAX_TOKENS, "steer_after": WALK_STEER_AFTER} | steering
    return random_walk(compiled.guide(), random.Random(seed), **kwargs)


def _check_instance(guide: Guide, schema: dict[str, Any]) -> None:
    """The walk wrote JSON that validates against `schema`, and the guide parses it to the same value."""
    value = json.loads(guide.text())
    jsonschema.validate(value, schema)
    assert guide.result() == value


def _assert_enough_checked(checked: list[int]) -> None:
    """A property run validated (nearly) every example it generated, and not only one-token instances."""
    assert len(checked) >= SETTINGS.max_examples * 0.9, f"only {len(checked)} examples were checked"
    assert max(checked) > 5, f"every walk was trivial: {checked}"


def test_walks_produce_valid_instances(vocab: Vocabulary) -> None:
    """Soundness: every random walk through a schema's guide is an instance of the schema."""
    checked: list[int] = []

    @SETTINGS
    @given(schema=SCHEMAS, seed=st.integers(0, 2**16))
    def walk_is_valid(schema: dict[str, Any], seed: int) -> None:
        compiled = Compiler(vocab).compile_schema(schema, additional_properties=False)
        guide = _walk(compiled, seed)
        _check_instance(guide, schema)
        checked.append(len(guide.tokens))

    walk_is_valid()
    _assert_enough_checked(checked)


def test_the_soundness_check_rejects_what_a_wrong_grammar_writes(bytelevel_vocab: Vocabulary) -> None:
    """The check above can fail: walks of a grammar looser than the schema (any integer where the schema wants
    one <= 99) are caught."""
    compiled = Compiler(bytelevel_vocab).compile_schema({"type": "integer"})
    strict = {"type": "integer", "maximum": 99}
    caught = 0
    for seed in range(10):
        try:
            _check_instance(_walk(compiled, seed), strict)
        except jsonschema.ValidationError:
            caught += 1
    assert caught > 0


def test_uniform_walks_can_run_long_and_steering_brings_them_home(bytelevel_vocab: Vocabulary) -> None:
    """Why walks are steered: a uniform walk through an array of strings can outrun a small budget (and says
    so with WalkTooLong); the same walks steered after 40 tokens all finish within it, still valid."""
    schema = {"type": "array", "items": {"type": "string"}}
    compiled = Compiler(bytelevel_vocab).compile_schema(schema)
    too_long = 0
    for seed in range(20):
        try:
            _walk(compiled, seed, max_tokens=60, steer_after=60)
        except WalkTooLong:
            too_long += 1
        _check_instance(_walk(compiled, seed, max_tokens=60, steer_after=40), schema)
    assert too_long > 0


@SETTINGS
@given(schema=SCHEMAS, seed=st.integers(0, 2**16), steer_after=st.integers(0, 40))
def test_steered_walks_end_within_the_distance_to_acceptance(
    vocab: Vocabulary, schema: dict[str, Any], seed: int, steer_after: int
) -> None:
    """Once steered, a walk takes at most (bytes to the nearest accepting state) + 1 (EOS) more tokens, and
    stays valid."""
    compiled = Compiler(vocab).compile_schema(schema, additional_properties=False)
    dist = distances_to_accept(compiled.dfa)
    farthest = int(dist[dist < UNREACHABLE].max())
    guide = _walk(compiled, seed, max_tokens=steer_after + farthest + 1, steer_after=steer_after)
    _check_instance(guide, schema)


@SETTINGS
@given(schema=SCHEMAS, data=st.data())
def test_valid_instances_are_accepted(vocab: Vocabulary, schema: dict[str, Any], data: st.DataObject) -> None:
    compiled = Compiler(vocab).compile_schema(schema, additional_properties=False)
    instance = data.draw(from_schema(schema))
    # a bounded number's exponent spellings stop at e-323 (grammar/numbers.py: below, a mantissa may underflow
    # to 0 and compare unlike its decimal); hypothesis likes 5e-324, the smallest double
    assume(not _below_e323(instance))
    text = CanonicalWriter(schema).dumps(instance)
    assume("\ud800" > max(text, default="a") or not any(0xD800 <= ord(c) <= 0xDFFF for c in text))
    # canonically tokenised, and byte by byte
    assert feed(compiled.guide(), vocab.encode(text)), text
    assert compiled.dfa.accepts(text.encode()), text


def _below_e323(value: Any) -> bool:
    """Whether `value` holds a nonzero float written with an exponent under -323."""
    if isinstance(value, dict):
        return any(_below_e323(v) for v in value.values())
    if isinstance(value, list):
        return any(_below_e323(v) for v in value)
    return isinstance(value, float) and 0 < abs(value) < 1e-323


# Python keywords are refused as keyword arguments (tested on their own below), so parameters avoid them
TOOL_PARAMS = st.dictionaries(NAMES.filter(lambda n: not keyword.iskeyword(n)), SCHEMAS, min_size=0, max_size=3)


@st.composite
def tool_sets(draw: st.DrawFn) -> list[ToolSpec]:
    names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    tools = []
    for name in names:
        props = draw(TOOL_PARAMS)
        req = [p for p in props if draw(st.booleans())]
        tools.append(
            ToolSpec(name, "", {"type": "object", "properties": props, "required": req, "additionalProperties": False})
        )
    return tools


def test_tool_call_walks_are_valid_calls(vocab: Vocabulary) -> None:
    """Soundness for calls: every random walk is a call of an existing tool with arguments valid for it."""
    checked: list[int] = []

    @SETTINGS
    @given(tools=tool_sets(), fmt=st.sampled_from(["json", "python", "hermes", "hermes-lines"]), seed=st.integers(0, 2**16))
    def walk_is_a_valid_call(tools: list[ToolSpec], fmt: str, seed: int) -> None:
        compiled = Compiler(vocab).compile(tools, fmt)
        guide = _walk(compiled, seed)
        call = guide.result()
        spec = ToolSet(tools)[call.name]
        jsonschema.validate(call.arguments, spec.parameters)
        checked.append(len(guide.tokens))

    walk_is_a_valid_call()
    _assert_enough_checked(checked)


@SETTINGS
@given(tools=tool_sets(), fmt=st.sampled_from(["json", "python", "hermes", "hermes-lines"]), data=st.data())
def test_every_valid_call_is_accepted(vocab: Vocabulary, tools: list[ToolSpec], fmt: str, data: st.DataObject) -> None:
    """Completeness: every valid call is accepted without a digit bound, and with the default bound whenever its
    numbers fit it (a number of 16 integer digits is refused on purpose: guided numbers must end)."""
    bounded = Compiler(vocab).compile(tools, fmt)
    unbounded = Compiler(vocab).compile(tools, _without_digit_bound(get_format(fmt)))
    tool = data.draw(st.sampled_from(tools))
    args = data.draw(from_schema(tool.parameters))
    text = get_format(fmt).render(tool, args)
    assume(not any(0xD800 <= ord(c) <= 0xDFFF for c in text))
    assert feed(unbounded.guide(), vocab.encode(text)), text
    if _fits_digits(args):
        assert feed(bounded.guide(), vocab.encode(text)), text
    parsed = get_format(fmt).parse(text)
    assert parsed.name == tool.name and parsed.arguments == args


def _pretty(value: Any, indent: int, arrays_inline: bool, level: int = 0) -> str:
    """`value` pretty-printed the way models write JSON: one member a line at `indent` spaces a level, arrays
    either broken the same way (json.dumps) or kept on one line (Qwen2.5-Coder)."""
    pad, inner = " " * (indent * level), " " * (indent * (level + 1))
    if isinstance(value, dict) and value:
        members = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {_pretty(v, indent, arrays_inline, level + 1)}"
                   for k, v in value.items()]
        return "{\n" + ",\n".join(members) + "\n" + pad + "}"
    if isinstance(value, list) and value and not arrays_inline:
        items = [inner + _pretty(v, indent, arrays_inline, level + 1) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    if isinstance(value, list):
        return "[" + ", ".join(_pretty(v, indent, arrays_inline, level + 1) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


@SETTINGS
@given(tools=tool_sets(), indent=st.sampled_from([2, 4]), arrays_inline=st.booleans(), data=st.data())
def test_pretty_printed_calls_are_accepted_in_the_line_layout(
    vocab: Vocabulary, tools: list[ToolSpec], indent: int, arrays_inline: bool, data: st.DataObject
) -> None:
    """Completeness of the line-broken layout: a valid call pretty-printed as models write it, in either Hermes
    block, is accepted by `hermes-lines` and read back to the same call; the compact `hermes` refuses it."""
    lines, compact = Compiler(vocab).compile(tools, "hermes-lines"), Compiler(vocab).compile(tools, "hermes")
    tool = data.draw(st.sampled_from(tools))
    args = data.draw(from_schema(tool.parameters))
    assume(_fits_digits(args))
    canonical = json.loads(get_format("json").render(tool, args))  # the schema's key order, which the grammar keeps
    body = _pretty(canonical, indent, arrays_inline)
    assume(not any(0xD800 <= ord(c) <= 0xDFFF for c in body))
    assume(max(len(line) - len(line.lstrip(" ")) for line in body.splitlines()) <= LINE_INDENT)
    for opening, closing in (("<tool_call>\n", "\n</tool_call>"), ("```json\n", "\n```")):
        text = opening + body + closing
        assert feed(lines.guide(), vocab.encode(text)), text
        assert not feed(compact.guide(), vocab.encode(text)), text
        parsed = get_format("hermes-lines").parse(text)
        assert parsed.name == tool.name and parsed.arguments == args


COUNTED = {
    "type": "object",
    "properties": {
        "pick": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
            "minProperties": 1,
            "maxProperties": 2,
            "not": {"const": {"a": 1}},
        },
        "items": {"type": "array", "items": {"type": "integer"}, "maxItems": 2, "contains": {"const": 5}},
    },
    "required": ["pick", "items"],
}


@pytest.mark.parametrize(
    ("pick", "items"),
    [
        ("{\n    }", "[5]"),
        ("{\n      \"a\": 2\n    }", "[\n      5\n    ]"),
        ("{\n      \"a\": 1\n    }", "[5]"),
        ("{\n      \"a\": 1,\n      \"b\": 2\n    }", "[5, 1]"),
        ("{\n      \"a\": 1,\n      \"b\": 2,\n      \"c\": 3\n    }", "[5]"),
        ("{\"b\": 1}", "[\n      1,\n      2\n    ]"),
        ("{\"b\": 1}", "[\n      1,\n      5,\n      6\n    ]"),
        ("{\"b\": 1}", "[\n    ]"),
    ],
)
def test_line_breaks_do_not_change_what_counts(bytelevel_vocab: Vocabulary, pick: str, items: str) -> None:
    """Member counts, `contains` and `not` read line-broken containers as the validator does: whitespace is no
    member (`{\n}` is empty), a value spelt across lines is still the value `not` excludes."""
    tool = ToolSpec("f", "", COUNTED)
    text = '```json\n{"name": "f", "arguments": {\n    "pick": ' + pick + ',\n    "items": ' + items + "\n  }\n}\n```"
    valid = jsonschema.Draft202012Validator(COUNTED).is_valid(json.loads(text[len("```json\n") : -len("\n```")])["arguments"])
    assert feed(Compiler(bytelevel_vocab).compile([tool], "hermes-lines").guide(), bytelevel_vocab.encode(text)) == valid


@pytest.mark.parametrize(
    ("arguments", "accepted"),
    [
        ('{"grades": {"math": 90, "art": {"term": [1, 2]}}}', True),
        ('{"grades": {}}', True),
        ('{"grades": {}, "extra": 1}', False),
        ('{"grades": 3}', False),
    ],
)
def test_a_free_form_map_takes_any_members(bytelevel_vocab: Vocabulary, arguments: str, accepted: bool) -> None:
    """A parameter object that names no key is a map the model fills (BFCL's `gradeDict`), not an object that can
    only be `{}`; the arguments object itself stays closed."""
    grades = ToolSpec("avg", "", {"type": "object", "properties": {"grades": {"type": "object"}}, "required": ["grades"]})
    compiled = Compiler(bytelevel_vocab).compile([grades], "json")
    assert feed(compiled.guide(), bytelevel_vocab.encode('{"name": "avg", "arguments": ' + arguments + "}")) == accepted


def test_a_tool_without_parameters_takes_none(bytelevel_vocab: Vocabulary) -> None:
    compiled = Compiler(bytelevel_vocab).compile([ToolSpec("now", "", {"type": "object"})], "json")
    assert feed(compiled.guide(), bytelevel_vocab.encode('{"name": "now", "arguments": {}}'))
    assert not feed(compiled.guide(), bytelevel_vocab.encode('{"name": "now", "arguments": {"tz": "UTC"}}'))


def _without_digit_bound(fmt: Any) -> Any:
    """The same call format with unbounded numbers (`digits=None`), through a wrapper if there is one."""
    if hasattr(fmt, "inner"):
        return dataclasses.replace(fmt, inner=_without_digit_bound(fmt.inner))
    return dataclasses.replace(fmt, digits=None)


def _fits_digits(value: Any, limits: DigitLimits = DEFAULT_DIGITS) -> bool:
    """Whether every number in `value`, spelt as JSON and Python write it, fits `limits`."""
    if isinstance(value, dict):
        return all(_fits_digits(v, limits) for v in value.values())
    if isinstance(value, list):
        return all(_fits_digits(v, limits) for v in value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    parts = re.fullmatch(r"-?(\d+)(?:\.(\d+))?(?:[eE][+-]?(\d+))?", json.dumps(value))
    assert parts is not None, value
    integer, fraction, exponent = (len(p or "") for p in parts.groups())
    return integer <= limits.integer and fraction <= limits.fraction and exponent <= limits.exponent


def test_unknown_tool_name_is_rejected(bytelevel_vocab: Vocabulary) -> None:
    tools = [ToolSpec("multiply", "", {"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]})]
    compiled = Compiler(bytelevel_vocab).compile(tools, "python")
    assert feed(compiled.guide(), bytelevel_vocab.encode("multiply(a=3.14)"))
    assert not feed(compiled.guide(), bytelevel_vocab.encode("product(a=3.14)"))
    assert not feed(compiled.guide(), bytelevel_vocab.encode("multiply(a=pi)"))
    assert not feed(compiled.guide(), bytelevel_vocab.encode("multiply()"))
    guide = compiled.guide()
    bad = bytelevel_vocab.encode("p")[0]
    with pytest.raises(TokenRejectedError):
        guide.advance(bad)


def test_optional_parameters_can_be_skipped_and_order_is_fixed(bytelevel_vocab: Vocabulary) -> None:
    params = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
        "required": ["b"],
    }
    compiled = Compiler(bytelevel_vocab).compile([ToolSpec("f", "", params)], "json")
    ok = ['{"b": "x"}', '{"a": 1, "b": "x"}', '{"b": "x", "c": true}', '{"a": -2, "b": "", "c": false}']
    bad = ['{}', '{"a": 1}', '{"b": "x", "a": 1}', '{"b": "x",  "c": true}', '{"b": "x", "d": 1}']
    for args in ok:
        assert compiled.dfa.accepts(f'{{"name": "f", "arguments": {args}}}'.encode()), args
    for args in bad:
        assert not compiled.dfa.accepts(f'{{"name": "f", "arguments": {args}}}'.encode()), args


@pytest.mark.parametrize(
    ("schema", "keyword", "path"),
    [
        ({"type": "object", "properties": {"x": {"$dynamicRef": "#a"}}}, "$dynamicRef", "#/properties/x/$dynamicRef"),
        ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "uniqueItems", "#/uniqueItems"),
        ({"type": "number", "multipleOf": 0.7}, "multipleOf", "#/multipleOf"),
        ({"type": "object", "patternProperties": {"(?=a)": {}}}, "patternProperties", "#/patternProperties/(?=a)"),
        ({"type": "object", "unevaluatedProperties": False}, "unevaluatedProperties", "#/unevaluatedProperties"),
        ({"type": "string", "pattern": "(a)\\1"}, "pattern", "#/pattern"),
        ({"type": "string", "format": "color"}, "format", "#/format"),
        ({"$ref": "http://example.com/s.json"}, "$ref", "#/$ref"),
    ],
)
def test_unenforceable_keywords_are_refused_with_their_path(
    bytelevel_vocab: Vocabulary, schema: dict, keyword: str, path: str
) -> None:
    with pytest.raises(UnsupportedSchemaError) as info:
        Compiler(bytelevel_vocab).compile_schema(schema)
    assert info.value.keyword == keyword
    assert info.value.path == path
    assert keyword in str(info.value)


def test_errors_name_the_tool(bytelevel_vocab: Vocabulary) -> None:
    good = ToolSpec("a", "", {"type": "object", "properties": {}})
    with pytest.raises(ToolSpecError, match="duplicate"):
        Compiler(bytelevel_vocab).compile([good, good])
    bad = ToolSpec("b", "", {"type": "object", "properties": {"x": {"type": "string", "uniqueItems": True, "not": {"$dynamicRef": "#a"}}}})
    with pytest.raises(UnsupportedSchemaError) as info:
        Compiler(bytelevel_vocab).compile([bad])
    assert info.value.tool == "b" and "'b'" in str(info.value)


def test_branching_recursion_is_refused_by_size_in_tool_calls(bytelevel_vocab: Vocabulary) -> None:
    # six definitions that each refer to all six expand to 6**18 subschemas at max_ref_depth 3: a tool call (a
    # DFA) refuses them by size once MAX_EXPANSIONS are built (seconds), where building them all would never end;
    # one value (compile_schema) takes them through the pushdown guide, each definition a rule compiled once
    defs = {f"d{i}": {"type": "object", "properties": {f"p{j}": {"$ref": f"#/$defs/d{j}"} for j in range(6)}}
            for i in range(6)}
    params = {"type": "object", "properties": {"root": {"$ref": "#/$defs/d0"}}, "$defs": defs}
    with pytest.raises(UnsupportedSchemaError) as info:
        Compiler(bytelevel_vocab).compile([ToolSpec("f", "", params)])
    assert info.value.keyword == "size"
    assert f"{MAX_EXPANSIONS:,} subschemas" in str(info.value)
    compiled = Compiler(bytelevel_vocab).compile_schema({"$defs": defs, "$ref": "#/$defs/d0"})
    assert isinstance(compiled, CompiledCfg)
    deep: dict = {}
    for i in range(12):
        deep = {f"p{i % 6}": deep}
    assert feed(compiled.guide(), bytelevel_vocab.encode(json.dumps(deep)))


def test_recursive_refs_are_bounded_in_tool_calls_only(bytelevel_vocab: Vocabulary) -> None:
    node = {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"], "additionalProperties": False}
    schema = {"$defs": {"node": node}, "$ref": "#/$defs/node"}
    deep = b'{"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}]}'
    params = {"type": "object", "properties": {"t": {"$ref": "#/$defs/node"}}, "required": ["t"], "$defs": {"node": node}}
    call = Compiler(bytelevel_vocab, max_ref_depth=2).compile([ToolSpec("f", "", params)])
    assert call.dfa.accepts(b'{"name": "f", "arguments": {"t": {"v": 1, "kids": [{"v": 2, "kids": []}]}}}')
    assert not call.dfa.accepts(b'{"name": "f", "arguments": {"t": ' + deep + b"}}")
    compiled = Compiler(bytelevel_vocab, max_ref_depth=2).compile_schema(schema)
    assert feed(compiled.guide(), bytelevel_vocab.encode(deep.decode()))
    for seed in range(5):
        jsonschema.validate(json.loads(_walk(compiled, seed).text()), schema)


def test_one_of_excludes_values_matching_two_branches(bytelevel_vocab: Vocabulary) -> None:
    schema = {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0}]}
    dfa = Compiler(bytelevel_vocab).compile_schema(schema).dfa
    assert dfa.accepts(b"-3") and dfa.accepts(b"2.5")
    assert not dfa.accepts(b"3")


def test_required_keys_without_a_schema_take_any_value(bytelevel_vocab: Vocabulary) -> None:
    params = {"type": "object", "properties": {"p": {"type": "object", "required": ["adults"]}}, "required": ["p"]}
    dfa = Compiler(bytelevel_vocab).compile([ToolSpec("f", "", params)]).dfa
    assert dfa.accepts(b'{"name": "f", "arguments": {"p": {"adults": 2}}}')
    assert not dfa.accepts(b'{"name": "f", "arguments": {"p": {}}}')


def test_unsatisfiable_schemas_are_reported(bytelevel_vocab: Vocabulary) -> None:
    from tooldec.errors import EmptyGrammarError

    with pytest.raises(EmptyGrammarError):
        Compiler(bytelevel_vocab).compile_schema({"type": "integer", "minimum": 5, "maximum": 1})
    params = {"type": "object", "properties": {"x": False}, "required": ["x"]}
    with pytest.raises(EmptyGrammarError, match="'g'"):
        Compiler(bytelevel_vocab).compile([ToolSpec("g", "", params)])


def test_python_keywords_cannot_be_keyword_arguments(bytelevel_vocab: Vocabulary) -> None:
    params = {"type": "object", "properties": {"from": {"type": "string"}}}
    with pytest.raises(ToolSpecError, match="from"):
        Compiler(bytelevel_vocab).compile([ToolSpec("h", "", params)], "python")
    Compiler(bytelevel_vocab).compile([ToolSpec("h", "", params)], "json")


def test_tuple_items_with_additional_items(bytelevel_vocab: Vocabulary) -> None:
    schema = {"type": "array", "items": [{"type": "integer"}, {"type": "string"}], "additionalItems": False}
    dfa = Compiler(bytelevel_vocab).compile_schema(schema).dfa
    assert dfa.accepts(b'[1, "a"]') and dfa.accepts(b"[1]") and dfa.accepts(b"[]")
    assert not dfa.accepts(b'[1, "a", 2]') and not dfa.accepts(b'["a"]')
    schema["additionalItems"] = {"type": "boolean"}
    dfa = Compiler(bytelevel_vocab).compile_schema(schema).dfa
    assert dfa.accepts(b'[1, "a", true, false]') and not dfa.accepts(b'[1, "a", 2]')


def test_canonical_order_reaches_into_branches_and_items(bytelevel_vocab: Vocabulary) -> None:
    item = {"type": "object", "properties": {"b": {"const": 0}, "a": {"enum": [0]}}, "required": ["b", "a"], "additionalProperties": False}
    schema = {"anyOf": [{"type": "integer"}, {"type": "array", "items": item, "maxItems": 1}]}
    text = CanonicalWriter(schema).dumps([{"a": 0, "b": 0}])
    assert text == '[{"b": 0, "a": 0}]'
    assert Compiler(bytelevel_vocab).compile_schema(schema).dfa.accepts(text.encode())


TYPE_NAMES = ("null", "boolean", "integer", "number", "string", "array", "object")


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    values=st.lists(
        st.one_of(st.integers(-3, 3), st.sampled_from([2.0, -1.5, 0.0]), st.booleans(), st.none(),
                  st.text("ab", max_size=2), st.lists(st.integers(0, 2), max_size=2)),
        min_size=1, max_size=5, unique_by=json.dumps,
    ),
    types=st.one_of(st.none(), st.sampled_from(TYPE_NAMES), st.lists(st.sampled_from(TYPE_NAMES), min_size=1, max_size=3, unique=True)),
    draft=st.sampled_from(["http://json-schema.org/draft-04/schema#", "https://json-schema.org/draft/2020-12/schema"]),
)
def test_a_typed_enum_admits_its_values_of_that_type(
    bytelevel_vocab: Vocabulary, values: list[Any], types: Any, draft: str
) -> None:
    """An enum under a type keeps exactly the values `jsonschema` finds valid, in the schema's draft (draft 4 has
    no integral floats among integers): the grammar checks such values by type alone, without a validator."""
    schema: dict[str, Any] = {"$schema": draft, "enum": values, **({"type": types} if types is not None else {})}
    check = jsonschema.validators.validator_for(schema)(schema)
    assume(any(check.is_valid(v) for v in values))
    dfa = Compiler(bytelevel_vocab).compile_schema(schema).dfa
    writer = CanonicalWriter(schema)
    for v in values:
        assert dfa.accepts(writer.dumps(v).encode()) == check.is_valid(v), (v, schema)
