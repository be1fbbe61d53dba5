"""Structured outputs: one entry for guided generation by a regex, a JSON Schema, a choice, a grammar or tools.

An output type says what the model may write and what the text becomes once written:

- `Regex(pattern)`: text that `re.fullmatch(pattern, text)` accepts; the value is the text.
- `JsonSchema(schema)`: a JSON value valid under a schema (a dict or its JSON text), or under the schema pydantic
  derives from a type (a Pydantic model, a dataclass, a TypedDict, `list[int]`...); the value is the parsed JSON,
  validated into an instance of the type where one was given.
- `Choice(options)`: exactly one of the strings; the value is the string.
- `Grammar(text, syntax)`: a sentence of a Lark or GBNF grammar; the value is the sentence.
- `Tools(tools, format)`: one call of one of the tools (functions or ToolSpecs); the value is the ParsedCall.

`Generator(model, output_type)` compiles the output type once for the model (its compiler's cache) and, called
with a prompt, decodes under it and returns the value; `Generator.logits_processor()` gives the same guidance to
`model.generate` as a transformers LogitsProcessor. The output types import neither torch nor transformers; the
generator loads them on use.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from tooldec.cfg_guide import CompiledCfg
from tooldec.compiler import CompiledGrammar, Compiler
from tooldec.errors import GrammarError, SchemaError, ToolDecError
from tooldec.grammar.calls import CallFormat, ParsedCall, get_format
from tooldec.grammar.cfg import sniff_syntax
from tooldec.specs import ToolSet, ToolSpec, from_function

if TYPE_CHECKING:
    from tooldec.backends.loader import LoadedModel
    from tooldec.decoding.decoder import Generation
    from tooldec.decoding.logits_processor import ToolDecLogitsProcessor
    from tooldec.decoding.sampling import SamplingParams

Compiled = CompiledGrammar | CompiledCfg
"""What an output type compiles to: a DFA-indexed grammar or a context-free one; both make guides."""


class OutputType(Protocol):
    """What the model may write (`compile`) and the value a complete text stands for (`parse`)."""

    def compile(self, compiler: Compiler) -> Compiled:
        """The grammar of the output over the compiler's vocabulary (cached by the compiler)."""
        ...

    def parse(self, text: str) -> Any:
        """The value of a complete output text."""
        ...


@dataclass(frozen=True)
class Regex:
    """Text matching `pattern` whole (Python `re.fullmatch` syntax; lookaround and backreferences refused)."""

    pattern: str

    def compile(self, compiler: Compiler) -> Compiled:
        """The regex's DFA path (`Compiler.compile_regex`); raises GrammarError for a construct it refuses."""
        return compiler.compile_regex(self.pattern)

    def parse(self, text: str) -> str:
        """The matched text itself."""
        return text


@dataclass(frozen=True, init=False)
class Choice:
    """Exactly one of `options`, as written."""

    options: tuple[str, ...]

    def __init__(self, options: Iterable[str]) -> None:
        """Keep the options in order; raises GrammarError for an option that is not a string."""
        options = tuple(options)
        if not all(isinstance(o, str) for o in options):
            raise GrammarError("every option of a choice must be a string")
        object.__setattr__(self, "options", options)

    def compile(self, compiler: Compiler) -> Compiled:
        """The options as one automaton (`Compiler.compile_choice`); raises GrammarError for no option."""
        return compiler.compile_choice(self.options)

    def parse(self, text: str) -> str:
        """The chosen option."""
        return text


@dataclass(frozen=True)
class Grammar:
    """A sentence of a context-free grammar in Lark or GBNF (`syntax`)."""

    text: str
    syntax: Literal["lark", "gbnf"] = "lark"

    @classmethod
    def sniffed(cls, text: str) -> Grammar:
        """The grammar of `text`, GBNF when a line defines a rule with `::=`, Lark otherwise (as servers read it)."""
        return cls(text, sniff_syntax(text))

    def compile(self, compiler: Compiler) -> Compiled:
        """The pushdown guide's grammar (`Compiler.compile_grammar`); raises GrammarError with line and column."""
        return compiler.compile_grammar(self.text, self.syntax)

    def parse(self, text: str) -> str:
        """The sentence itself."""
        return text


@dataclass(init=False)
class JsonSchema:
    """A JSON value valid under a JSON Schema, given as a dict, its JSON text, or a type pydantic can describe
    (`pydantic.TypeAdapter(type).json_schema()`: a Pydantic model, a dataclass, a TypedDict, ...).

    `additional_properties` is what an object schema that does not say allows (as `Compiler.compile_schema`):
    True follows JSON Schema, False writes only the declared properties; by default True for a schema and False
    for a type (whose instance would drop the others)."""

    schema: dict[str, Any] | bool
    additional_properties: bool = True
    python_type: Any = None
    _adapter: Any = field(default=None, repr=False, compare=False)

    def __init__(
        self, schema: Mapping[str, Any] | str | bool | type | Any, *, additional_properties: bool | None = None
    ) -> None:
        """Read the schema; raises SchemaError for JSON text that does not parse to a schema, or a type pydantic
        cannot describe."""
        self.additional_properties = True if additional_properties is None else additional_properties
        self.python_type = None
        self._adapter = None
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as exc:
                raise SchemaError(f"the schema is not valid JSON: {exc}") from None
            if not isinstance(schema, dict | bool):
                raise SchemaError("a JSON Schema is an object or a boolean")
        if isinstance(schema, Mapping | bool):
            self.schema = dict(schema) if isinstance(schema, Mapping) else schema
            return
        from pydantic import PydanticUserError, TypeAdapter

        try:
            self._adapter = TypeAdapter(schema)
            self.schema = self._adapter.json_schema()
        except PydanticUserError as exc:
            raise SchemaError(f"pydantic cannot describe {schema!r} as a JSON Schema: {exc}") from None
        self.python_type = schema
        self.additional_properties = additional_properties is True

    def compile(self, compiler: Compiler) -> Compiled:
        """The schema's grammar (`Compiler.compile_schema`); raises UnsupportedSchemaError, SchemaError or
        EmptyGrammarError with the schema path."""
        return compiler.compile_schema(self.schema, additional_properties=self.additional_properties)

    def parse(self, text: str) -> Any:
        """The JSON value, validated into an instance of the type where one was given (pydantic's
        ValidationError if it does not fit it)."""
        if self._adapter is not None:
            return self._adapter.validate_json(text)
        return json.loads(text)


@dataclass(frozen=True, init=False)
class Tools:
    """One call of one of `tools` (Python functions or ToolSpecs) in a call `format` (see grammar.calls.FORMATS)."""

    tools: ToolSet
    format: CallFormat

    def __init__(self, tools: Iterable[Callable[..., Any] | ToolSpec] | ToolSet, format: str | CallFormat = "json"
                 ) -> None:
        """Describe each function as a tool (`from_function`); raises ToolSpecError for a bad tool or format."""
        toolset = tools if isinstance(tools, ToolSet) else ToolSet(
            t if isinstance(t, ToolSpec) else from_function(t) for t in tools
        )
        object.__setattr__(self, "tools", toolset)
        object.__setattr__(self, "format", get_format(format))

    def compile(self, compiler: Compiler) -> Compiled:
        """The tool set's call automaton (`Compiler.compile`)."""
        return compiler.compile(self.tools, self.format)

    def parse(self, text: str) -> ParsedCall:
        """The call the text writes."""
        return self.format.parse(text)


STRUCTURED_KEYS = ("grammar", "regex", "choice", "json")
"""The keys of vLLM's `structured_outputs` that name an output type (one per request)."""


def structured_output(key: str, value: Any) -> OutputType:
    """The output type of one `structured_outputs` entry as vLLM takes it: `json` (a schema, or its JSON text),
    `regex`, `choice` (a list of strings), `grammar` (Lark or GBNF, told apart by the text). Raises GrammarError
    or SchemaError for a value of the wrong kind, ValueError for another key."""
    if key == "json":
        if not isinstance(value, dict | str | bool):
            raise SchemaError("structured_outputs.json must be a JSON Schema (an object, or its JSON text)")
        return JsonSchema(value)
    if key == "choice":
        if isinstance(value, str) or not isinstance(value, list | tuple):
            raise GrammarError("a choice is a list of strings")
        return Choice(value)
    if key in ("regex", "grammar"):
        if not isinstance(value, str):
            raise GrammarError(f"a {key} is a string")
        return Regex(value) if key == "regex" else Grammar.sniffed(value)
    raise ValueError(f"unknown structured output {key!r}; known: {', '.join(STRUCTURED_KEYS)}")


@functools.lru_cache(maxsize=1)
def _byte_compiler() -> Compiler:
    """A compiler over single bytes: an output type compiles over it as over any vocabulary, errors included."""
    from tooldec.vocab import Vocabulary

    return Compiler(Vocabulary.from_bytes([bytes([b]) for b in range(256)] + [None], eos_id=256))


def check_output(output: OutputType) -> None:
    """Compile an output type over single bytes (no model's vocabulary needed), so that a schema, regex, choice or
    grammar tooldec cannot guide is refused before a model is loaded or a request runs. Raises its ToolDecError
    (a ValueError naming the schema path, the construct refused, or the grammar's line and column)."""
    output.compile(_byte_compiler())


class IncompleteOutputError(ToolDecError, ValueError):
    """A generation that ended (its token budget spent) before the output was complete; `text` is what it wrote."""

    def __init__(self, text: str, max_new_tokens: int) -> None:
        self.text = text
        super().__init__(f"the output did not finish within {max_new_tokens} tokens: {text[:200]!r}")


Prompt = str | Sequence[Mapping[str, Any]]
"""A raw prompt text, or chat messages rendered by the model's chat template."""


class Generator:
    """A model and an output type: call it with a prompt to get the output's value (valid by construction).

    `model` is a LoadedModel (`tooldec.backends.load_model`, `load_llamacpp`: any backend) or a transformers
    causal LM given with its `tokenizer`. The output type is compiled once here (the model's compiler caches it).
    """

    def __init__(self, model: LoadedModel | Any, output_type: OutputType, *, tokenizer: Any = None) -> None:
        """Compile `output_type` for `model`; raises the output type's compile error (ToolDecError)."""
        from tooldec.backends.loader import LoadedModel

        if tokenizer is not None:
            from tooldec.vocab import Vocabulary

            hf: Any = model
            vocab = Vocabulary.from_hf(tokenizer, vocab_size=hf.get_output_embeddings().weight.shape[0])
            model = LoadedModel(hf, tokenizer, vocab, type(hf).__name__, "object", 0.0)
        if not isinstance(model, LoadedModel):
            raise TypeError("Generator takes a LoadedModel, or a transformers model with tokenizer=")
        self.model = model
        self.output_type = output_type
        self.compiled = output_type.compile(model.compiler)

    def _encode(self, prompt: Prompt) -> list[int]:
        """The prompt's token ids: a text as the tokenizer encodes it, messages through the chat template."""
        if isinstance(prompt, str):
            ids: list[int] = self.model.tokenizer.encode(prompt)
        else:
            ids = self.model.encode_chat([dict(m) for m in prompt])
        return ids or [min(self.model.vocab.eos_ids)]

    def __call__(
        self, prompt: Prompt, *, max_new_tokens: int = 256, params: SamplingParams | None = None
    ) -> Any:
        """Decode one output after `prompt` (greedy unless `params` say otherwise) and return its value. Raises
        IncompleteOutputError when `max_new_tokens` run out first."""
        return self.batch([prompt], max_new_tokens=max_new_tokens, params=params)[0]

    def batch(
        self, prompts: Sequence[Prompt], *, max_new_tokens: int = 256, params: SamplingParams | None = None
    ) -> list[Any]:
        """The values of one output per prompt, decoded together."""
        gens = self.generations(prompts, max_new_tokens=max_new_tokens, params=params)
        return [self.value(gen, max_new_tokens) for gen in gens]

    def generations(
        self, prompts: Sequence[Prompt], *, max_new_tokens: int = 256, params: SamplingParams | None = None
    ) -> list[Generation]:
        """The decoding of one output per prompt, with what it cost (one row each, decoded together; one at a time
        under llama.cpp, which decodes one sequence); `value` reads each one's value."""
        from tooldec.decoding import CallController, SamplingParams
        from tooldec.decoding.decoder import Decoder

        decoder = Decoder(self.model.model, self.model.vocab)
        ids = [self._encode(p) for p in prompts]
        gens: list[Generation] = []
        for group in [[i] for i in ids] if self.model.backend == "llamacpp" else [ids]:
            controllers = [CallController(self.compiled) for _ in group]
            gens += decoder.generate(group, controllers, params or SamplingParams(), max_new_tokens=max_new_tokens)
        return gens

    def value(self, gen: Generation, max_new_tokens: int) -> Any:
        """The value of one of `generations`; raises IncompleteOutputError when its `max_new_tokens` ran out before
        the output was complete."""
        if not gen.events:
            raise IncompleteOutputError(gen.text, max_new_tokens)
        return self.output_type.parse(gen.events[0].text)

    def logits_processor(self, batch_size: int = 1) -> ToolDecLogitsProcessor:
        """A transformers LogitsProcessor guiding `batch_size` rows of `model.generate` by this output type (a
        fresh one per `generate` call: it follows the rows' tokens)."""
        from tooldec.decoding import CallController
        from tooldec.decoding.logits_processor import ToolDecLogitsProcessor

        return ToolDecLogitsProcessor([CallController(self.compiled) for _ in range(batch_size)])
