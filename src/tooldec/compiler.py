"""The compiler: tool specs (or one JSON Schema) → grammar → DFA → token index, cached per tool set.

One `Compiler` per model (it holds the prepared vocabulary); `compile` once per tool set;
`CompiledGrammar.guide()` once per request. The compiler's cache is bounded and safe to share between threads.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import numpy as np

from tooldec.automaton.compile import Embedded, KeyLanguage, ProductCache, compile_dfa, compile_dfas
from tooldec.automaton.dfa import DEAD, DFA, minimize, separated_run, union_dfas
from tooldec.automaton.forced import ForcedText
from tooldec.automaton.value_grammar import NotTokenizable, value_grammar
from tooldec.cfg_guide import CompiledCfg, compile_cfg
from tooldec.errors import EmptyGrammarError, GrammarError, ToolSpecError, UnsupportedSchemaError
from tooldec.grammar.calls import (
    CallFormat,
    call_groups,
    get_format,
    group_call,
    several_in_block,
    tools_grammar,
)
from tooldec.grammar.cfg import Terminal, load_grammar
from tooldec.grammar.cfg.terminal_regex import fullmatch_ir
from tooldec.grammar.custom import CustomCalls, custom_call_grammar, input_grammar, json_call_pieces
from tooldec.grammar.ir import EMPTY, Node, alt, lit
from tooldec.grammar.schema import DEFAULT_REF_DEPTH, SchemaCompiler
from tooldec.guide import Guide
from tooldec.index import PreparedVocab, TokenIndex
from tooldec.specs import ToolSet, ToolSpec
from tooldec.vocab import Vocabulary

__version__ = "0.1.0"


@dataclass
class CompiledGrammar:
    """A tool set (or schema) compiled against one vocabulary: make a guide per sequence from it."""

    dfa: DFA
    index: TokenIndex
    parse: Callable[[str], Any]
    tools: ToolSet | None = None
    format: CallFormat | None = None
    forced: ForcedText = field(init=False)

    def __post_init__(self) -> None:
        self.forced = ForcedText(self.dfa)

    @property
    def prepared(self) -> PreparedVocab:
        """The prepared vocabulary the index is over."""
        return self.index.prepared

    def guide(self) -> Guide:
        """A fresh guide at the start of a call."""
        return Guide(self.index, self.parse, self.forced)


_C = TypeVar("_C", bound="CompiledGrammar | CompiledCfg")

CACHE_SIZE = 32
"""Compiled grammars a Compiler keeps (least recently used dropped first)."""
TOOL_CACHE_SIZE = 4096
"""Call automata of tool groups (tools sharing parameters; mostly one tool) a Compiler keeps, so that adding a
tool to a compiled set costs about one tool."""
UNION_CACHE_SIZE = 4
"""Tool-set automata a Compiler keeps by their tools, so that a set growing by a few tools is the union of the
last one with the new tools' automata: joining 201 automata took 21 ms at 200 tools, joining 2 takes a few."""
PINNED_FORMATS = ("json", "python")
"""Call formats whose plain values a Compiler walks once per model and pins in the vocabulary (JSON strings, which
every JSON format writes, Python string literals, and the default-bounded numbers of both): a cold compile of any
tool set then walks the trie for none of these, at compile time or on a first visit, as llguidance's tokenizer
holds its slices."""


def _probe(name: str, required: dict[str, Any], optional: dict[str, Any] | None = None) -> ToolSpec:
    properties = {**required, **(optional or {})}
    return ToolSpec(name, "", {"type": "object", "properties": properties, "required": list(required)})


_STR, _NUM, _INT = {"type": "string"}, {"type": "number"}, {"type": "integer"}
_PROBES = [  # a number's region ends on the bytes that may follow it, so each kind is met before each follower
    _probe("f", {"s": _STR, "x": _NUM, "i": _INT}),
    _probe("g", {"i": _INT, "x": _NUM}),
    _probe("h", {"x": _NUM, "i": _INT},
           {"y": _NUM, "j": _INT, "xs": {"type": "array", "items": _NUM}, "js": {"type": "array", "items": _INT}}),
]
COMPILE_THREADS = 4
"""Threads at most that build a tool set's per-tool automata (the core's part of a cold compile)."""


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _indexed(dfa: DFA, prepared: PreparedVocab, threads: int, *, precompute: bool, share_regions: bool) -> TokenIndex:
    """The token index of `dfa`, warmed: its regions and opening stretch, or with `precompute` every state of the
    minimized automaton (minimizing takes under a millisecond where every state will cost a mask: FuncQA 1,487
    -> 357 states in 0.7 ms; a lazy index only meets the states a call visits, so it skips that step)."""
    index = TokenIndex(minimize(dfa) if precompute else dfa, prepared, share_regions=share_regions)
    index.warm(threads, whole=precompute)
    return index


class Compiler:
    """Compiles tool sets for one model; results are cached per (tool set or schema, format, options).

    The cache keeps the last `cache_size` grammars, keyed by a hash of the tooldec version, the tool set or
    schema, the format, the ref depth and the vocabulary fingerprint; it is guarded by a lock, and two threads
    asking for the same new grammar may both build it (the first stored wins).
    """

    def __init__(
        self,
        vocab: Vocabulary | PreparedVocab,
        *,
        max_ref_depth: int = DEFAULT_REF_DEPTH,
        cache_size: int = CACHE_SIZE,
        threads: int | None = None,
    ) -> None:
        """Take a prepared vocabulary (share one per model) or prepare a bare Vocabulary here. `threads` build
        the automata of a tool set's tools in parallel (default: this process's cores, at most COMPILE_THREADS).
        The first Compiler over a prepared vocabulary pins the walks of plain strings and numbers there
        (PINNED_FORMATS; about 20 ms at 128k tokens)."""
        self.prepared = vocab if isinstance(vocab, PreparedVocab) else PreparedVocab(vocab)
        self.vocab = self.prepared.vocab
        self.max_ref_depth = max_ref_depth
        self.cache_size = cache_size
        self.threads = threads or min(COMPILE_THREADS, _cores())
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._groups: OrderedDict[str, DFA] = OrderedDict()
        self._unions: OrderedDict[frozenset[str], DFA] = OrderedDict()
        self._products = ProductCache()
        self._lock = threading.Lock()
        for fmt in PINNED_FORMATS:
            if self.prepared.first_time(("pinned regions", fmt)):
                # a fresh index, each state's region walked from it: the compile's own index, small enough to be
                # indexed whole, took most of its walks from states alike (`TokenIndex.warm`) and holds fewer
                index = TokenIndex(self.compile(_PROBES, fmt, use_cache=False).dfa, self.prepared)
                index.warm(whole=True)
                index.pin_regions()

    def clear_cache(self) -> None:
        """Forget every compiled grammar."""
        with self._lock:
            self._cache.clear()
            self._groups.clear()
            self._unions.clear()
        self._products.clear()

    def _key(self, kind: str, payload: Any) -> str:
        h = hashlib.sha256()
        h.update(f"{__version__}|{kind}|{self.max_ref_depth}|{self.vocab.fingerprint}|".encode())
        h.update(json.dumps(payload, sort_keys=False, default=str).encode())
        return h.hexdigest()

    def _cached(self, key: str, build: Callable[[], _C], use_cache: bool) -> _C:
        if use_cache:
            with self._lock:
                got = self._cache.get(key)
                if got is not None:
                    self._cache.move_to_end(key)
                    return got
        try:
            result = build()
        except RecursionError:
            raise UnsupportedSchemaError(
                "depth", detail="the input nests deeper than the compiler can follow (about 100 levels of objects)"
            ) from None
        if use_cache:
            with self._lock:
                result = self._cache.setdefault(key, result)
                self._cache.move_to_end(key)
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return result

    def compile(
        self,
        tools: Iterable[ToolSpec] | ToolSet,
        format: str | CallFormat = "json",
        *,
        use_cache: bool = True,
        precompute: bool = False,
    ) -> CompiledGrammar:
        """The grammar of one call of any of `tools` in `format`.

        With `precompute`, every state gets its index entry now (Outlines-style, all up front); otherwise a
        state's entry is built on its first visit and cached, after the string regions and the opening stretch
        built here. Raises ToolSpecError (an empty tool set among others), UnsupportedSchemaError or
        EmptyGrammarError.
        """
        toolset = tools if isinstance(tools, ToolSet) else ToolSet(list(tools))
        if len(toolset) == 0:
            raise ToolSpecError("the tool set is empty: a call needs at least one tool")
        fmt = get_format(format)
        specs = [t.text for t in toolset]
        key = self._key(f"tools:{fmt!r}:{precompute}", specs)

        def build() -> CompiledGrammar:
            products = self._products if use_cache else ProductCache()  # cold: shared within this compile only
            block = several_in_block(fmt)
            if getattr(fmt, "around", None) is not None:  # calls inside a list: one automaton of the whole
                dfa = compile_dfa(tools_grammar(toolset, fmt, decide=KeyLanguage, max_ref_depth=self.max_ref_depth), products)
            elif block is not None:  # a block of calls: the union of one call, placed in the block as it is
                wrapped, one = block
                calls = self._union(toolset, specs, one, products, use_cache)
                run = separated_run(calls, [sep.encode() for sep in wrapped.between])
                node = wrapped.block(Embedded(calls), None if run is None else Embedded(run))  # type: ignore[arg-type]
                dfa = compile_dfa(node, products)
            else:
                dfa = self._union(toolset, specs, fmt, products, use_cache)
            if dfa.start == DEAD:
                raise EmptyGrammarError("no call of this tool set can be valid (its schemas admit no value)")
            index = _indexed(dfa, self.prepared, self.threads, precompute=precompute, share_regions=use_cache)
            return CompiledGrammar(index.dfa, index, fmt.parse, toolset, fmt)

        return self._cached(key, build, use_cache)

    def _union(
        self, toolset: ToolSet, specs: list[str], fmt: CallFormat, products: ProductCache, use_cache: bool
    ) -> DFA:
        """The automaton of a call of any tool: the union of the per-group automata (`_group_dfas`), or, when a
        cached set's tools are all in this one, the union of that set's automaton with the other tools' (the
        largest such set)."""
        prefix = f"{fmt!r}|{self.max_ref_depth}|"
        keys = [prefix + spec for spec in specs]
        wanted = frozenset(keys)
        base: frozenset[str] = frozenset()
        parts: list[DFA] = []
        if use_cache:
            with self._lock:
                for have, dfa in self._unions.items():
                    if len(have) > len(base) and have <= wanted:
                        base, parts = have, [dfa]
                if base:
                    self._unions.move_to_end(base)
        parts += self._group_dfas([(t, key) for t, key in zip(toolset, keys) if key not in base], fmt, products, use_cache)
        dfa = union_dfas(parts)
        if use_cache:
            with self._lock:
                self._unions[wanted] = dfa
                self._unions.move_to_end(wanted)
                while len(self._unions) > UNION_CACHE_SIZE:
                    self._unions.popitem(last=False)
        return dfa

    def _group_dfas(
        self, tools: list[tuple[ToolSpec, str]], fmt: CallFormat, products: ProductCache, use_cache: bool
    ) -> list[DFA]:
        """The automaton of one call of each group of tools that share their parameters (`call_groups`; `key`:
        format, options and spec), kept per group so that a changed tool set recompiles only its new groups (the
        last TOOL_CACHE_SIZE are kept). The missing ones are built together, on `self.threads` threads."""
        key_of = {tool.name: key for tool, key in tools}
        groups = [(g, "\x1f".join(key_of[t.name] for t in g)) for g in call_groups([t for t, _ in tools], fmt)]
        found: dict[str, DFA] = {}
        if use_cache:
            with self._lock:
                for _, key in groups:
                    got = self._groups.get(key)
                    if got is not None:
                        self._groups.move_to_end(key)
                        found[key] = got
        missing = [(group, key) for group, key in groups if key not in found]
        grammars = [group_call(group, fmt, decide=KeyLanguage, max_ref_depth=self.max_ref_depth) for group, _ in missing]
        for (group, key), dfa in zip(missing, compile_dfas(grammars, products, threads=self.threads), strict=True):
            if dfa.start == DEAD:
                raise EmptyGrammarError("no call of this tool can be valid", tool=group[0].name, path="#/parameters")
            found[key] = dfa
        if use_cache and missing:
            with self._lock:
                for _, key in missing:
                    self._groups[key] = found[key]
                while len(self._groups) > TOOL_CACHE_SIZE:
                    self._groups.popitem(last=False)
        return [found[key] for _, key in groups]

    def compile_custom_calls(
        self, tools: Iterable[ToolSpec] | ToolSet, format: str | CallFormat = "hermes", *, use_cache: bool = True
    ) -> CompiledCfg:
        """The grammar of one call of any of `tools` where some are custom tools (`ToolSpec.input_format`): their
        input is guided by its grammar inside the call's JSON string (`tooldec.grammar.custom`), the function
        tools' calls are their automaton (as `compile` builds it) as one terminal, for the pushdown guide. Raises
        GrammarError (a custom tool's grammar or regex, or a format whose calls come in a list) and the errors of
        `compile`."""
        toolset = tools if isinstance(tools, ToolSet) else ToolSet(list(tools))
        fmt = get_format(format)
        key = self._key(f"custom-calls:{fmt!r}", [t.text for t in toolset])

        def build() -> CompiledCfg:
            json_call_pieces(fmt)  # refuse a format of listed calls before building anything
            functions = [t for t in toolset if t.input_format is None]
            terminal = None
            if functions:
                products = self._products if use_cache else ProductCache()
                dfa = self._union(ToolSet(functions), [t.text for t in functions], fmt, products, use_cache)
                if dfa.start == DEAD:
                    raise EmptyGrammarError("no call of this tool set can be valid (its schemas admit no value)")
                automaton = (dfa.trans.astype(np.int32), dfa.classes.astype(np.uint8), dfa.accepting.astype(bool),
                             int(dfa.start))
                terminal = Terminal("function call", EMPTY, automaton=automaton)
            inputs = [(t.name, input_grammar(t.input_format, t.name)) for t in toolset if t.input_format is not None]
            grammar = custom_call_grammar(fmt, inputs, terminal)
            calls = CustomCalls(fmt, frozenset(name for name, _ in inputs))
            return CompiledCfg(compile_cfg(grammar, self.prepared, self.threads), grammar, self.prepared,
                               parse=calls.parse, format=calls, tools=toolset)

        return self._cached(key, build, use_cache)

    def compile_schema(
        self, schema: Any, *, additional_properties: bool = True, use_cache: bool = True, precompute: bool = False
    ) -> CompiledGrammar | CompiledCfg:
        """The grammar of one JSON value valid under `schema` (canonical whitespace, schema key order); `precompute`
        as in `compile`.

        A schema whose values nest without bound (a `$ref` inside itself, a place holding any value) goes to the
        pushdown guide (`CompiledCfg`), with no depth limit; a regular one keeps the DFA path and its O(1) index.
        Where recursion meets a difference or intersection of languages (`not`, exclusive `oneOf`, `allOf` of
        references), recursion is unrolled to `max_ref_depth` instead. A schema too large as one automaton goes
        to the pushdown guide with every plain `$ref`, and every member, item or branch that may hold an object or
        array, a bounded array's item and a long scalar member, a rule of its own outside products of languages
        (`containers_as_rules`), else its `$ref`s only, before its size refusal stands."""
        key = self._key(f"schema:{additional_properties}:{precompute}", schema)

        def build() -> CompiledGrammar | CompiledCfg:
            try:
                return self._schema_guide(schema, additional_properties, precompute, use_cache)
            except UnsupportedSchemaError as exc:
                if exc.keyword != "size":
                    raise
                # too large as one automaton: a grammar whose rules are its references and the values that may
                # hold containers, each automaton small; or, where such a value falls in a product of languages,
                # its references only
                for containers in (True, False):
                    try:
                        comp = SchemaCompiler(schema, decide=KeyLanguage, additional_properties=additional_properties,
                                              recursive=True, refs_as_rules=True, containers_as_rules=containers)
                        start = comp.value()
                        if comp.rules:
                            return self._value_cfg(start, comp.rules)
                    except NotTokenizable:
                        continue
                    except (UnsupportedSchemaError, GrammarError):
                        pass
                    break
                raise exc from None

        return self._cached(key, build, use_cache)

    def _schema_guide(self, schema: Any, additional_properties: bool, precompute: bool,
                      use_cache: bool) -> CompiledGrammar | CompiledCfg:
        """`compile_schema`'s first reading: the pushdown guide where values nest without bound, else (or where
        the pushdown path cannot cut the rules) one DFA with recursion unrolled."""
        products = self._products if use_cache else ProductCache()
        comp = SchemaCompiler(schema, decide=KeyLanguage, additional_properties=additional_properties,
                              recursive=True)
        start = comp.value()
        if comp.rules:
            try:
                return self._value_cfg(start, comp.rules)
            except (NotTokenizable, GrammarError):  # the pushdown guide cannot take it: the bounded reading
                comp = SchemaCompiler(schema, decide=KeyLanguage, max_ref_depth=self.max_ref_depth,
                                      additional_properties=additional_properties)
                start = comp.value()
        dfa = compile_dfa(start, products)
        if dfa.start == DEAD and comp.cut:  # values may exist only deeper than the unrolling went: not exact
            raise UnsupportedSchemaError(
                "$ref", path="#", detail=f"recursion inside an intersection or difference, unrolled {self.max_ref_depth} "
                "deep, leaves no value; deeper values may exist",
            )
        if dfa.start == DEAD:
            raise EmptyGrammarError("no value satisfies this schema", path="#")
        index = _indexed(dfa, self.prepared, self.threads, precompute=precompute, share_regions=True)
        return CompiledGrammar(index.dfa, index, json.loads)

    def _value_cfg(self, start: Node, rules: list[Node]) -> CompiledCfg:
        """The pushdown guide of one JSON value: `start` and the rules its calls name."""
        grammar = value_grammar(start, rules, self.threads)
        return CompiledCfg(compile_cfg(grammar, self.prepared, self.threads), grammar, self.prepared, parse=json.loads)

    def compile_regex(self, pattern: str, *, use_cache: bool = True) -> CompiledGrammar:
        """Text that `re.fullmatch(pattern, text)` accepts (Python syntax; a regular language keeps the DFA path and
        its O(1) index). Raises GrammarError for a construct that is not regular (lookaround, backreferences) and
        EmptyGrammarError when no text matches."""
        key = self._key("regex", pattern)

        def build() -> CompiledGrammar:
            node = fullmatch_ir(pattern, name="regex")
            return self._text_grammar(node, use_cache, "no text matches this regex")

        return self._cached(key, build, use_cache)

    def compile_choice(self, options: Iterable[str], *, use_cache: bool = True) -> CompiledGrammar:
        """Exactly one of `options`, as written. Raises GrammarError for an empty list."""
        choices = list(dict.fromkeys(options))
        if not choices:
            raise GrammarError("a choice needs at least one option")
        key = self._key("choice", choices)

        def build() -> CompiledGrammar:
            return self._text_grammar(alt(*(lit(c.encode()) for c in choices)), use_cache, "no option is allowed")

        return self._cached(key, build, use_cache)

    def _text_grammar(self, node: Any, use_cache: bool, empty: str) -> CompiledGrammar:
        """The compiled grammar of a whole text given as IR (its result is the text itself)."""
        dfa = compile_dfa(node, self._products if use_cache else ProductCache())
        if dfa.start == DEAD:
            raise EmptyGrammarError(empty)
        index = _indexed(dfa, self.prepared, self.threads, precompute=False, share_regions=True)
        return CompiledGrammar(index.dfa, index, str)

    def compile_grammar(
        self, text: str, syntax: Literal["lark", "gbnf"] = "lark", *, use_cache: bool = True
    ) -> CompiledCfg:
        """A context-free grammar written in Lark (the dialect llguidance and OpenAI custom tools accept) or GBNF
        (llama.cpp's), compiled for guidance: its terminals become byte automata, its rules go to the core's
        Earley parser. Raises GrammarError (with line and column where the text is at fault)."""
        key = self._key(f"grammar:{syntax}", text) if use_cache else ""

        def build() -> CompiledCfg:
            grammar = load_grammar(text, syntax)
            return CompiledCfg(compile_cfg(grammar, self.prepared, self.threads), grammar, self.prepared)

        return self._cached(key, build, use_cache)
