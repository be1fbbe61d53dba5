"""JSON Schema recursion through the pushdown guide: a `$ref` inside itself and any value nest without limit.

Soundness (every guided value validates with `jsonschema`), completeness (deep valid values are accepted token by
token), exactness (invalid ones are rejected), the fallback where recursion meets a difference of languages, and
a clear error where a schema nests past what the compiler follows."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tooldec.automaton import compile as automaton_compile
from tooldec.automaton.compile import KeyLanguage, compile_dfa
from tooldec.automaton.value_grammar import NotTokenizable, calls_in_products, value_grammar
from tooldec.cfg_guide import CompiledCfg
from tooldec.compiler import CompiledGrammar, Compiler
from tooldec.conformance import feed
from tooldec.errors import UnsupportedSchemaError
from tooldec.grammar.ir import (
    CALL_MARKER,
    EMPTY,
    Alt,
    Bytes,
    Difference,
    Divisible,
    Fields,
    Intersect,
    Node,
    Repeat,
    Seq,
    call,
    lit,
    seq,
)
from tooldec.grammar.schema import SchemaCompiler
from tooldec.index import PreparedVocab
from tooldec.sample import random_walk
from tooldec.vocab import Vocabulary

TREE = {
    "type": "object",
    "properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#"}}},
    "required": ["value", "children"],
    "additionalProperties": False,
}
EXPRESSION = {
    "$defs": {
        "expr": {
            "anyOf": [
                {"type": "number"},
                {
                    "type": "object",
                    "properties": {
                        "op": {"enum": ["+", "-", "*"]},
                        "left": {"$ref": "#/$defs/expr"},
                        "right": {"$ref": "#/$defs/expr"},
                    },
                    "required": ["op", "left", "right"],
                    "additionalProperties": False,
                },
            ]
        }
    },
    "$ref": "#/$defs/expr",
}
LINKED = {
    "type": "object",
    "properties": {"label": {"type": "string", "maxLength": 4}, "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
    "required": ["label", "next"],
    "additionalProperties": False,
}
ANY: dict[str, Any] = {}
OPEN_OBJECT = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}
RECURSIVE = {"tree": TREE, "expression": EXPRESSION, "linked": LINKED, "any": ANY, "open_object": OPEN_OBJECT}


@pytest.fixture(scope="module")
def compiler(bytelevel_vocab: Vocabulary) -> Compiler:
    return Compiler(bytelevel_vocab)


def text_of(value: Any) -> str:
    """The canonical text of a value whose dict keys are already in schema order."""
    return json.dumps(value, ensure_ascii=False)


def tree(depth: int, fan: int = 1) -> dict:
    return {"value": depth, "children": [tree(depth - 1, fan) for _ in range(fan)] if depth else []}


@pytest.mark.parametrize("name", sorted(RECURSIVE))
def test_recursive_schemas_take_the_pushdown_guide(compiler: Compiler, name: str) -> None:
    assert isinstance(compiler.compile_schema(RECURSIVE[name], use_cache=False), CompiledCfg)


def test_a_regular_schema_keeps_the_dfa_path(compiler: Compiler) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}
    assert isinstance(compiler.compile_schema(schema, use_cache=False), CompiledGrammar)


@pytest.mark.parametrize("name", sorted(RECURSIVE))
def test_guided_values_validate(compiler: Compiler, name: str) -> None:
    """1,000 random guided values per recursive schema, each valid under the schema."""
    schema = RECURSIVE[name]
    grammar = compiler.compile_schema(schema)
    rng = random.Random(name)
    for _ in range(1000):
        guide = random_walk(grammar.guide(), rng, max_tokens=4000, steer_after=40)
        jsonschema.validate(guide.result(), schema)


def test_a_tree_fifty_deep_is_accepted_and_generated(compiler: Compiler, bytelevel_vocab: Vocabulary) -> None:
    grammar = compiler.compile_schema(TREE)
    value = tree(50)
    assert feed(grammar.guide(), bytelevel_vocab.encode(text_of(value)))
    # generated: a walk that opens a child while it can, 50 levels deep, then closes them all
    guide = grammar.guide()
    for level in range(50):
        assert guide.accept_bytes(f'{{"value": {level}, "children": ['.encode()) > 0
    guide.accept_bytes(b'{"value": 0, "children": []}' + b"]}" * 50)
    assert guide.is_accepting()
    jsonschema.validate(json.loads(guide.text()), TREE)
    assert guide.text().count("[") == 51


def test_any_value_nests_past_the_old_limit(compiler: Compiler, bytelevel_vocab: Vocabulary) -> None:
    deep: Any = 1
    for i in range(40):
        deep = [deep] if i % 2 else {"k": deep}
    grammar = compiler.compile_schema(ANY)
    assert feed(grammar.guide(), bytelevel_vocab.encode(text_of(deep)))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=25,
)


@settings(max_examples=60, deadline=None)
@given(json_values)
def test_any_json_value_is_accepted(compiler: Compiler, bytelevel_vocab: Vocabulary, value: Any) -> None:
    """Completeness for any value: every JSON value, in canonical text, token by token."""
    grammar = compiler.compile_schema(ANY)
    assert feed(grammar.guide(), bytelevel_vocab.encode(text_of(value)))


def expressions() -> st.SearchStrategy[Any]:
    number = st.integers(-1000, 1000) | st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
    return st.recursive(
        number,
        lambda inner: st.builds(lambda op, a, b: {"op": op, "left": a, "right": b}, st.sampled_from("+-*"), inner, inner),
        max_leaves=12,
    )


@settings(max_examples=60, deadline=None)
@given(expressions())
def test_every_expression_is_accepted(compiler: Compiler, bytelevel_vocab: Vocabulary, value: Any) -> None:
    grammar = compiler.compile_schema(EXPRESSION)
    assert feed(grammar.guide(), bytelevel_vocab.encode(text_of(value)))


@pytest.mark.parametrize(
    "schema, value",
    [
        (TREE, {"value": 1, "children": [{"value": "x", "children": []}]}),
        (TREE, {"value": 1, "children": [{"value": 2}]}),
        (TREE, {"value": 1, "children": [{"value": 2, "children": [], "extra": 1}]}),
        (EXPRESSION, {"op": "/", "left": 1, "right": 2}),
        (EXPRESSION, {"op": "+", "left": {"op": "+", "left": 1}, "right": 2}),
        (LINKED, {"label": "abcde", "next": None}),
        (LINKED, {"label": "a", "next": {"label": "b", "next": {"label": "toolong", "next": None}}}),
        (OPEN_OBJECT, {"other": 1}),
    ],
)
def test_invalid_values_are_rejected(compiler: Compiler, bytelevel_vocab: Vocabulary, schema: Any, value: Any) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(value, schema)
    assert not feed(compiler.compile_schema(schema).guide(), bytelevel_vocab.encode(text_of(value)))


def test_recursion_under_a_difference_is_unrolled(compiler: Compiler, bytelevel_vocab: Vocabulary) -> None:
    """A recursive reference inside `not` has no context-free difference: recursion is unrolled (exact to
    max_ref_depth, cut beyond), as before the pushdown guide."""
    schema = {**TREE, "not": {"properties": {"value": {"const": -1}}}}
    grammar = compiler.compile_schema(schema, use_cache=False)
    assert isinstance(grammar, CompiledGrammar)
    assert feed(grammar.guide(), bytelevel_vocab.encode(text_of(tree(2))))
    assert not feed(grammar.guide(), bytelevel_vocab.encode(text_of({"value": -1, "children": []})))


def test_a_schema_too_deep_to_follow_is_refused_clearly(compiler: Compiler) -> None:
    schema: Any = {"type": "integer"}
    for _ in range(300):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"], "additionalProperties": False}
    with pytest.raises(UnsupportedSchemaError, match="nests deeper"):
        compiler.compile_schema(schema, use_cache=False)


def test_value_grammar_refuses_bytes_that_start_no_json_token() -> None:
    with pytest.raises(NotTokenizable, match="starts no JSON token"):
        value_grammar(seq(lit("<"), call(0)), [lit("1")])


def test_value_grammar_refuses_a_call_of_a_missing_rule() -> None:
    with pytest.raises(NotTokenizable, match="past the 1 rules"):
        value_grammar(seq(lit("["), call(3), lit("]")), [lit("1")])


def _calls_below(node: Node) -> bool:
    """Reference: whether a call's marker lies anywhere below `node` (plain recursion, no sharing)."""
    if isinstance(node, Bytes):
        return node.mask == 1 << CALL_MARKER
    if isinstance(node, (Seq, Alt, Intersect)):
        return any(_calls_below(k) for k in node.items)
    if isinstance(node, Repeat):
        return _calls_below(node.item) or (node.sep is not None and _calls_below(node.sep))
    if isinstance(node, Fields):
        return _calls_below(node.sep) or any(_calls_below(k) for k, _ in node.items)
    if isinstance(node, Difference):
        return _calls_below(node.left) or _calls_below(node.right)
    return False


def _calls_in_products_reference(node: Node) -> bool:
    """Reference: a product (not a difference that only removes the empty string) with a call below it."""
    if isinstance(node, Difference) and node.right == EMPTY:
        return _calls_in_products_reference(node.left)
    if isinstance(node, (Intersect, Difference)):
        return _calls_below(node)
    if isinstance(node, (Seq, Alt)):
        return any(_calls_in_products_reference(k) for k in node.items)
    if isinstance(node, Repeat):
        return _calls_in_products_reference(node.item) or (
            node.sep is not None and _calls_in_products_reference(node.sep))
    if isinstance(node, Fields):
        return _calls_in_products_reference(node.sep) or any(_calls_in_products_reference(k) for k, _ in node.items)
    return False


def _grow_ir(kids: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
    some = st.lists(kids, min_size=1, max_size=3)
    return st.one_of(
        some.map(lambda ks: Seq(tuple(ks))),
        some.map(lambda ks: Alt(tuple(ks))),
        some.map(lambda ks: Intersect(tuple(ks))),
        st.tuples(kids, st.one_of(kids, st.just(EMPTY))).map(lambda lr: Difference(*lr)),
        st.tuples(kids, st.one_of(st.none(), kids)).map(lambda rs: Repeat(rs[0], 0, None, rs[1])),
        st.tuples(st.lists(st.tuples(kids, st.booleans()), min_size=1, max_size=2), kids).map(
            lambda fs: Fields(tuple(fs[0]), fs[1])),
    )


IR_TREES = st.recursive(st.sampled_from([lit("a"), call(0), call(2), Divisible(3), EMPTY]), _grow_ir,
                        max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(st.lists(IR_TREES, min_size=1, max_size=3))
def test_calls_in_products_agrees_with_a_plain_recursive_reading(nodes: list[Node]) -> None:
    assert calls_in_products(nodes) == any(_calls_in_products_reference(n) for n in nodes)


POINT = {"type": "object", "properties": {"x": {"type": "integer", "minimum": -999, "maximum": 999},
                                          "label": {"type": "string", "maxLength": 3}},
         "required": ["x"], "additionalProperties": False}
SHAPES = {
    "$defs": {"point": POINT},
    "type": "object",
    "properties": {k: {"$ref": "#/$defs/point"} for k in ("a", "b", "c", "d")},
    "required": ["a", "b"],
    "additionalProperties": False,
}


def test_a_schema_too_large_as_one_automaton_becomes_a_grammar_of_its_references(
    bytelevel_vocab: Vocabulary, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the automaton bound below the whole schema's DFA but above each definition's, the schema compiles to
    the pushdown guide with its `$ref`s as rules; its values validate and valid ones are accepted. Below each
    definition's size too, the size refusal stands."""
    whole = compile_dfa(SchemaCompiler(SHAPES, decide=KeyLanguage, additional_properties=True).value()).num_states
    monkeypatch.setattr(automaton_compile, "MAX_DFA_STATES", whole - 1)
    compiler = Compiler(bytelevel_vocab)
    grammar = compiler.compile_schema(SHAPES, use_cache=False)
    assert isinstance(grammar, CompiledCfg)
    rng = random.Random(7)
    for _ in range(200):
        jsonschema.validate(random_walk(grammar.guide(), rng, max_tokens=400, steer_after=60).result(), SHAPES)
    value = {"a": {"x": -12, "label": "ab"}, "b": {"x": 999}, "d": {"x": 0, "label": ""}}
    assert feed(grammar.guide(), bytelevel_vocab.encode(text_of(value)))
    assert not feed(grammar.guide(), bytelevel_vocab.encode(text_of({"a": {"x": 1000}, "b": {"x": 1}})))
    monkeypatch.setattr(automaton_compile, "MAX_DFA_STATES", 20)
    with pytest.raises(UnsupportedSchemaError) as info:
        Compiler(bytelevel_vocab).compile_schema(SHAPES, use_cache=False)
    assert info.value.keyword == "size"


@pytest.mark.parametrize("links", [1, 2, 3, 6])
def test_recursion_cut_inside_an_intersection_is_refused_not_called_empty(bytelevel_vocab: Vocabulary, links: int) -> None:
    """A recursive `$ref` under an `allOf` is unrolled to `max_ref_depth`; when every value nests deeper than that,
    the unrolled language is empty although values exist (jsonschema accepts one): a refusal naming `$ref`, not
    'no value satisfies this schema'. Shallower chains still compile and take their value."""
    keys = "abcdefgh"[: links + 1]
    patterns = {f"^{k}": {"allOf": [{"$ref": "#/definitions/p"}, {"required": [nxt]}]} for k, nxt in itertools.pairwise(keys)}
    schema = {"allOf": [{"$ref": "#/definitions/p"}, {"required": ["a"]}],
              "definitions": {"p": {"type": "object", "patternProperties": patterns}}}
    value: Any = 0
    for k in reversed(keys):
        value = {k: value}
    assert jsonschema.validators.validator_for(schema)(schema).is_valid(value)
    compiler = Compiler(bytelevel_vocab)
    if links < 3:  # the `$ref` entered at most max_ref_depth (3) times
        grammar = compiler.compile_schema(schema, use_cache=False)
        assert feed(grammar.guide(), bytelevel_vocab.encode(json.dumps(value)))
        return
    with pytest.raises(UnsupportedSchemaError, match="recursion") as info:
        compiler.compile_schema(schema, use_cache=False)
    assert info.value.keyword == "$ref"


def _masks(grammar: CompiledCfg, tokens: list[int], size: int, *, brute: bool = False) -> list[bytes]:
    """The guide's packed mask before each token of `tokens` and after the last; with `brute`, each checked
    against `accepts` of every token."""
    guide, out, masks = grammar.guide(), np.zeros((1, (size + 31) // 32), np.int32), []
    for token in [*tokens, None]:
        guide.fill_bitmask(out, 0)
        masks.append(out.tobytes())
        if brute:
            bits = np.unpackbits(out.view(np.uint8), bitorder="little")[:size].astype(bool)
            assert [guide.accepts(t) for t in range(size)] == bits.tolist(), guide.text()
        if token is not None:
            guide.advance(token)
    return masks


@settings(max_examples=25, deadline=None)
@given(keys=st.lists(st.text("abcdefgh_", min_size=1, max_size=6), min_size=1, max_size=5, unique=True),
       free=st.text("abcxyz \\\"é", min_size=1, max_size=8))
def test_lexeme_walks_shared_across_grammars_mask_as_fresh_ones(
    bytelevel_vocab: Vocabulary, keys: list[str], free: str
) -> None:
    """An open object's keys (literal keys beside any key) walked through the vocabulary's shared lexeme walks
    (another grammar's, and walks patched from a string's contents) give the masks a fresh vocabulary gives."""
    warm = Compiler(PreparedVocab(bytelevel_vocab))
    warm.compile_schema({"type": "object", "properties": {"zz": {"type": "string"}}}, use_cache=False).guide()
    first = warm.compile_schema(OPEN_OBJECT, use_cache=False)
    _masks(first, bytelevel_vocab.encode('{"id": 1, "k": "v"}'), bytelevel_vocab.size)
    assert warm.prepared.core.shared_lexeme_walks > 0
    schema = {"type": "object", "properties": {k: {"type": "integer"} for k in keys}, "additionalProperties": True}
    value = {**{k: 1 for k in keys}, "~" + free: free}
    tokens = bytelevel_vocab.encode(text_of(value))
    shared = warm.compile_schema(schema, use_cache=False)
    fresh = Compiler(PreparedVocab(bytelevel_vocab)).compile_schema(schema, use_cache=False)
    assert _masks(shared, tokens, bytelevel_vocab.size, brute=True) == _masks(fresh, tokens, bytelevel_vocab.size)


BOUNDED_NUMBERS = {
    "type": "object",
    "properties": {"cpus": {"type": "number", "minimum": 0.5}, "mem": {"type": "number", "minimum": 2048}},
    "required": ["cpus", "mem"],
}


def test_bounded_numbers_in_an_open_object_are_few_terminals(compiler: Compiler) -> None:
    """A bounded number ends in many DFA states that all go on alike: one terminal for them, not one each."""
    grammar = compiler.compile_schema(BOUNDED_NUMBERS, use_cache=False)
    assert isinstance(grammar, CompiledCfg)
    assert len(grammar.grammar.terminals) < 40


@settings(max_examples=60, deadline=None)
@given(cpus=st.floats(min_value=0.5, max_value=1e6, allow_nan=False), mem=st.integers(2048, 10**9),
       frac=st.integers(0, 999))
def test_bounded_numbers_in_an_open_object_accept_exactly(
    compiler: Compiler, bytelevel_vocab: Vocabulary, cpus: float, mem: int, frac: int
) -> None:
    """Values at and above each bound are accepted, one below is not, and guided values validate."""
    grammar = compiler.compile_schema(BOUNDED_NUMBERS)
    for value, ok in (({"cpus": cpus, "mem": mem}, True), ({"cpus": cpus, "mem": float(f"{mem}.{frac}")}, True),
                      ({"cpus": 0.4, "mem": mem}, False), ({"cpus": cpus, "mem": 2047}, False)):
        assert feed(grammar.guide(), bytelevel_vocab.encode(text_of(value))) == ok, value
    guide = random_walk(grammar.guide(), random.Random(mem), max_tokens=400, steer_after=40)
    jsonschema.validate(guide.result(), BOUNDED_NUMBERS)
