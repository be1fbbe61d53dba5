"""tooldec.structured: output types (regex, JSON Schema from a dict or a type, choice, grammar, tools) and the
Generator over a model.

Properties: random guided walks give values that `re.fullmatch`, `jsonschema`, the choice list and `lark` accept;
texts drawn from a regex or a schema are accepted by the guide; bad output types are refused with clear errors.
The Generator runs on a tiny random Llama (no download): whatever it writes is valid by construction.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
from typing import Any

import jsonschema
import lark
import pytest
from conftest import ARITH
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from typing_extensions import TypedDict

from tooldec.compiler import Compiler
from tooldec.errors import GrammarError, SchemaError, TokenRejectedError, UnsupportedSchemaError
from tooldec.grammar.calls import ParsedCall
from tooldec.sample import random_walk
from tooldec.structured import (
    STRUCTURED_KEYS,
    Choice,
    Grammar,
    JsonSchema,
    Regex,
    Tools,
    structured_output,
)
from tooldec.vocab import Vocabulary


class City(BaseModel):
    name: str
    population: int
    coastal: bool


@dataclasses.dataclass
class Point:
    x: float
    y: float
    label: str | None = None


class Pet(TypedDict):
    kind: str
    legs: int


def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


PATTERNS = [r"[0-9]{2,4}-[a-z]+", r"(yes|no|maybe)!?", r"\d+(\.\d+)?", r"[A-Z][a-z]*( [A-Z][a-z]*){0,3}",
            r"(ab|cd)*e", r"\w+@\w+\.(com|org)"]
SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0}, "tags": {"type": "array",
     "items": {"type": "string", "maxLength": 5}, "maxItems": 3}}, "required": ["id"]},
    {"type": "array", "items": {"enum": ["red", "green", 3, None]}},
    {"anyOf": [{"type": "string", "pattern": "^[a-c]+$"}, {"type": "number", "maximum": 10}]},
]


@pytest.fixture(scope="module")
def compiler() -> Compiler:
    """A compiler over single bytes (every text has one tokenisation)."""
    return Compiler(Vocabulary.from_bytes([bytes([b]) for b in range(256)] + [None], eos_id=256))


def accepts(compiler: Compiler, output: Any, text: str) -> bool:
    """Whether the guide of `output` takes `text` byte by byte (the byte vocabulary's token t is byte t) and may
    end there."""
    guide = output.compile(compiler).guide()
    try:
        for byte in text.encode():
            guide.advance(byte)
    except TokenRejectedError:
        return False
    return bool(guide.is_accepting())


def walk(compiler: Compiler, output: Any, seed: int) -> str:
    """A random guided text of `output`."""
    return random_walk(output.compile(compiler).guide(), random.Random(seed), steer_after=40).text()


@settings(max_examples=40, deadline=None)
@given(pattern=st.sampled_from(PATTERNS), seed=st.integers(0, 10**6))
def test_regex_walks_match_the_pattern(compiler: Compiler, pattern: str, seed: int) -> None:
    text = walk(compiler, Regex(pattern), seed)
    assert re.fullmatch(pattern, text) and Regex(pattern).parse(text) == text


@settings(max_examples=40, deadline=None)
@given(data=st.data(), pattern=st.sampled_from(PATTERNS))
def test_regex_matches_are_accepted(compiler: Compiler, data: st.DataObject, pattern: str) -> None:
    text = data.draw(st.from_regex(pattern, fullmatch=True))
    assert accepts(compiler, Regex(pattern), text)


@settings(max_examples=40, deadline=None)
@given(options=st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=5), seed=st.integers(0, 10**6))
def test_choice_walks_give_an_option_and_every_option_is_accepted(
    compiler: Compiler, options: list[str], seed: int
) -> None:
    choice = Choice(options)
    assert walk(compiler, choice, seed) in options
    assert all(accepts(compiler, choice, option) for option in options)


@settings(max_examples=30, deadline=None)
@given(schema=st.sampled_from(SCHEMAS), seed=st.integers(0, 10**6))
def test_schema_walks_validate(compiler: Compiler, schema: dict[str, Any], seed: int) -> None:
    output = JsonSchema(schema)
    text = walk(compiler, output, seed)
    jsonschema.validate(output.parse(text), schema)


@pytest.mark.parametrize(("kind", "check"), [
    (City, lambda v: isinstance(v, City)),
    (Point, lambda v: isinstance(v, Point)),
    (Pet, lambda v: isinstance(v, dict) and set(v) == {"kind", "legs"}),
    (list[int], lambda v: all(isinstance(i, int) for i in v)),
])
def test_types_give_instances_of_the_type(compiler: Compiler, kind: Any, check: Any) -> None:
    output = JsonSchema(kind)
    assert output.python_type is kind and not output.additional_properties  # an instance drops the others
    for seed in range(15):
        text = walk(compiler, output, seed)
        jsonschema.validate(json.loads(text), output.schema)
        assert check(output.parse(text)), text


def test_a_schema_may_come_as_json_text_and_keeps_extra_properties(compiler: Compiler) -> None:
    output = JsonSchema(json.dumps(SCHEMAS[0]))
    assert output.schema == SCHEMAS[0] and output.additional_properties and output.python_type is None
    text = '{"id": 3, "other": [true]}'
    assert accepts(compiler, output, text)
    assert not accepts(compiler, JsonSchema(SCHEMAS[0], additional_properties=False), text)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6))
def test_grammar_walks_parse_with_lark(compiler: Compiler, seed: int) -> None:
    text = walk(compiler, Grammar(ARITH), seed)
    lark.Lark(ARITH, parser="lalr").parse(text)
    gbnf = 'root ::= "[" [0-9]+ ("," [0-9]+)* "]"'
    assert re.fullmatch(r"\[[0-9]+(,[0-9]+)*\]", walk(compiler, Grammar(gbnf, "gbnf"), seed))


def test_tools_give_a_parsed_call(compiler: Compiler) -> None:
    for seed in range(5):
        call = Tools([multiply]).parse(walk(compiler, Tools([multiply]), seed))
        assert isinstance(call, ParsedCall) and call.name == "multiply" and set(call.arguments) == {"a", "b"}
    python = Tools([multiply], format="python")
    assert python.parse(walk(compiler, python, 1)).name == "multiply"


@pytest.mark.parametrize(("make", "error", "words"), [
    (lambda: Regex("(?<=a)b"), GrammarError, "lookaround"),
    (lambda: Regex("(a"), GrammarError, "not a valid regular expression"),
    (lambda: Choice([]), GrammarError, "at least one option"),
    (lambda: Choice(["a", 3]), GrammarError, "must be a string"),
    (lambda: JsonSchema("{not json"), SchemaError, "not valid JSON"),
    (lambda: JsonSchema("[1]"), SchemaError, "an object or a boolean"),
    (lambda: JsonSchema(object()), SchemaError, "pydantic cannot describe"),
    (lambda: JsonSchema({"type": "array", "items": {"type": "object"}, "uniqueItems": True}), UnsupportedSchemaError,
     "uniqueItems"),
    (lambda: JsonSchema({"type": "integer", "minimum": 5, "maximum": 1}), ValueError, "no value"),
    (lambda: Grammar("start: missing\n"), GrammarError, "line 1"),
    (lambda: Grammar('root ::= "a"\nx ::= [a-\n', "gbnf"), GrammarError, "line 2"),
], ids=["lookaround", "bad-regex", "no-option", "not-a-string", "not-json", "not-a-schema", "not-a-type",
        "unsupported-keyword", "empty-schema", "undefined-rule", "bad-gbnf"])
def test_bad_output_types_are_refused_clearly(compiler: Compiler, make: Any, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        make().compile(compiler)


def test_structured_outputs_keys_map_to_output_types() -> None:
    assert STRUCTURED_KEYS == ("grammar", "regex", "choice", "json")
    assert structured_output("regex", "a+") == Regex("a+")
    assert structured_output("choice", ["a", "b"]) == Choice(["a", "b"])
    assert structured_output("grammar", 'root ::= "a"') == Grammar('root ::= "a"', "gbnf")
    assert structured_output("grammar", 'start: "a"') == Grammar('start: "a"', "lark")
    assert structured_output("json", '{"type": "integer"}') == JsonSchema({"type": "integer"})
    for key, value, words in [("json", 3, "JSON Schema"), ("choice", "ab", "list of strings"), ("regex", 1, "string"),
                              ("structural_tag", "x", "unknown structured output")]:
        with pytest.raises(ValueError, match=words):
            structured_output(key, value)


# --- the Generator on a tiny random model ---------------------------------------------------------------------

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def lm(chatml_llama: Any) -> Any:
    """The tiny random Llama of the serve tests, its byte-level tokenizer, EOS boosted so that outputs end."""
    return chatml_llama(3, 4.0, "tiny")


def test_generator_returns_values_of_every_output_type(lm: Any) -> None:
    from tooldec.decoding import SamplingParams
    from tooldec.structured import Generator, IncompleteOutputError

    cases: list[tuple[Any, Any]] = [
        (Regex(r"[0-9]{2,4}-[a-z]+"), lambda v: re.fullmatch(r"[0-9]{2,4}-[a-z]+", v)),
        (Choice(["Paris", "London", "Rome"]), lambda v: v in ("Paris", "London", "Rome")),
        (Grammar(ARITH), lambda v: lark.Lark(ARITH, parser="lalr").parse(v)),
        (JsonSchema(City), lambda v: isinstance(v, City)),
        (JsonSchema(SCHEMAS[0]), lambda v: jsonschema.validate(v, SCHEMAS[0]) is None),
        (Tools([multiply]), lambda v: v.name == "multiply"),
    ]
    for output, ok in cases:
        generator = Generator(lm, output)
        done = 0
        for seed in range(3):
            params = SamplingParams(temperature=1.0, seed=seed)
            try:
                value = generator("Answer: ", max_new_tokens=48, params=params)
            except IncompleteOutputError as exc:  # a random model may wander: what it wrote is still a prefix
                assert exc.text
                continue
            assert ok(value), (output, value)
            done += 1
        assert done, output
    messages = [{"role": "user", "content": "Pick a city."}]
    assert Generator(lm, Choice(["Paris", "Rome"]))(messages) in ("Paris", "Rome")
    assert set(Generator(lm, Choice(["Paris", "Rome"])).batch(["a", "b c"])) <= {"Paris", "Rome"}


def test_generator_takes_a_transformers_model_and_gives_a_logits_processor(lm: Any) -> None:
    from transformers import LogitsProcessorList

    from tooldec.structured import Generator

    generator = Generator(lm.model, Regex(r"(ab|cd){2,3}"), tokenizer=lm.tokenizer)
    assert re.fullmatch(r"(ab|cd){2,3}", generator("x", max_new_tokens=16))
    prompt = torch.tensor([lm.tokenizer.encode("Answer: ")] * 2)
    eos = lm.tokenizer.convert_tokens_to_ids("<|im_end|>")
    out = lm.model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=True, max_new_tokens=16,
                            logits_processor=LogitsProcessorList([generator.logits_processor(batch_size=2)]),
                            eos_token_id=eos, pad_token_id=eos)
    for row in out[:, prompt.shape[1]:].tolist():
        text = lm.tokenizer.decode([t for t in row if t != eos])
        if eos in row:
            assert re.fullmatch(r"(ab|cd){2,3}", text), text
        else:
            assert re.fullmatch(r"(ab|cd){0,3}(a|c)?", text), text
    with pytest.raises(TypeError, match="LoadedModel"):
        Generator(lm.model, Regex("a"))
