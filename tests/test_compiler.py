"""The compiler facade: caching of compiled grammars."""

from __future__ import annotations


def test_compiled_grammars_are_cached_per_tool_set_and_vocabulary(bytelevel_vocab, sentencepiece_vocab) -> None:
    from tooldec.compiler import Compiler
    from tooldec.specs import ToolSpec

    tools = [ToolSpec("f", "", {"type": "object", "properties": {"x": {"type": "integer"}}})]
    compiler = Compiler(bytelevel_vocab)
    a = compiler.compile(tools)
    assert compiler.compile(tools) is a
    assert compiler.compile(tools, "python") is not a
    assert Compiler(sentencepiece_vocab).compile(tools) is not a
    assert compiler.compile(tools, use_cache=False) is not a
    small = Compiler(compiler.prepared, cache_size=1)
    b = small.compile(tools)
    small.compile(tools, "python")
    assert small.compile(tools) is not b, "the cache is bounded"


def test_precomputed_index_never_scans_the_vocabulary_again(bytelevel_vocab, monkeypatch) -> None:
    import random

    from tooldec.compiler import Compiler
    from tooldec.sample import random_walk
    from tooldec.specs import ToolSpec

    tools = [ToolSpec("f", "", {"type": "object", "properties": {"x": {"enum": [1, 2, 30]}, "y": {"type": "boolean"}}})]
    compiled = Compiler(bytelevel_vocab).compile(tools, "python", use_cache=False, precompute=True)

    computed = compiled.index.core.computed
    for seed in range(20):
        guide = random_walk(compiled.guide(), random.Random(seed))
        assert guide.result().name == "f"
    assert compiled.index.core.computed == computed, "a walk computed a state that precompute had not"


def test_tool_sets_are_unions_of_cached_per_tool_automata(bytelevel_vocab, monkeypatch) -> None:
    """A tool set's automaton is the union of its tools' (cached) automata: same language as the whole-set
    construction, both ways, and adding a tool joins the cached set's automaton with the new tool's only."""
    import random

    import tooldec.compiler as compiler_module
    from tooldec.automaton.compile import KeyLanguage, compile_dfa
    from tooldec.compiler import Compiler
    from tooldec.grammar.calls import get_format, tools_grammar
    from tooldec.guide import Guide
    from tooldec.index import TokenIndex
    from tooldec.sample import random_walk
    from tooldec.specs import ToolSpec

    def tool(name: str, kind: str) -> ToolSpec:
        return ToolSpec(name, "", {"type": "object", "properties": {"v": {"type": kind}}, "required": ["v"]})

    tools = [tool("get", "integer"), tool("get_all", "string"), tool("set", "boolean"), tool("g", "number")]
    compiler = Compiler(bytelevel_vocab)
    for fmt in ("json", "python", "toolken"):
        union = compiler.compile(tools[:3], fmt)
        whole = compile_dfa(tools_grammar(tools[:3], get_format(fmt), decide=KeyLanguage))
        whole_index = TokenIndex(whole, compiler.prepared)
        for seed in range(30):
            text = random_walk(union.guide(), random.Random(seed)).text().encode()
            assert whole.accepts(text), text
            back = random_walk(Guide(whole_index), random.Random(seed)).text().encode()
            assert union.dfa.accepts(back), back
        whole_grammar = Compiler(bytelevel_vocab).compile(tools[:3], "mistral")  # a list: built whole
        assert whole_grammar.dfa.start > 0
        cached = len(compiler._tools)
        joined: list[int] = []
        union_dfas = compiler_module.union_dfas
        monkeypatch.setattr(compiler_module, "union_dfas", lambda parts, joined=joined, union_dfas=union_dfas: joined.append(len(parts)) or union_dfas(parts))
        bigger = compiler.compile(tools, fmt)
        monkeypatch.undo()
        assert len(compiler._tools) == cached + 1, "only the new tool is compiled"
        assert joined == [2], "the 3-tool set's automaton joined with the new tool's"
        whole4 = compile_dfa(tools_grammar(tools, get_format(fmt), decide=KeyLanguage))
        whole4_index = TokenIndex(whole4, compiler.prepared)
        for seed in range(30):
            text = random_walk(bigger.guide(), random.Random(seed)).text().encode()
            assert whole4.accepts(text), text
            back = random_walk(Guide(whole4_index), random.Random(seed)).text().encode()
            assert bigger.dfa.accepts(back), back
        rendered = get_format(fmt).render(tools[3], {"v": 2.5})
        assert bigger.dfa.accepts(rendered.encode()) and not union.dfa.accepts(rendered.encode())


def test_product_cache_builds_each_product_once_and_stays_bounded(monkeypatch) -> None:
    """A product that recurs (in one IR or across compiles) is built once; the cache keeps at most `size`."""
    from tooldec.automaton import compile as compile_module
    from tooldec.grammar.ir import Intersect, alt, lit, seq

    built: list[object] = []
    product = compile_module._product
    monkeypatch.setattr(compile_module, "_product", lambda node, cache: built.append(node) or product(node, cache))
    cache = compile_module.ProductCache(size=2)
    both = Intersect((alt(lit("a"), lit("b")), alt(lit("b"), lit("c"))))
    dfa = compile_module.compile_dfa(seq(both, lit("-"), both), cache)
    assert dfa.accepts(b"b-b") and not dfa.accepts(b"a-b") and not dfa.accepts(b"b-c")
    assert len(built) == 1
    compile_module.compile_dfa(seq(lit("x"), both), cache)
    assert len(built) == 1, "a later compile reuses it"
    for word in ("p", "q", "r"):
        compile_module.compile_dfa(Intersect((lit(word), alt(lit(word), lit("z")))), cache)
    assert len(cache) == 2 and len(built) == 4


def test_tool_automata_built_in_parallel_are_the_sequential_ones(bytelevel_vocab) -> None:
    import numpy as np

    from tooldec.bench.workloads import synthetic_tools
    from tooldec.compiler import Compiler

    tools = list(synthetic_tools(40, seed=7))
    one = Compiler(bytelevel_vocab, threads=1).compile(tools, use_cache=False).dfa
    two = Compiler(bytelevel_vocab, threads=2).compile(tools, use_cache=False).dfa
    assert one.start == two.start
    for a, b in ((one.trans, two.trans), (one.classes, two.classes), (one.accepting, two.accepting)):
        assert np.array_equal(a, b)


def test_a_tool_past_the_automaton_bounds_is_refused_on_any_thread(bytelevel_vocab, monkeypatch) -> None:
    import pytest

    from tooldec.automaton import compile as compile_module
    from tooldec.bench.workloads import synthetic_tools
    from tooldec.compiler import Compiler
    from tooldec.errors import UnsupportedSchemaError

    monkeypatch.setattr(compile_module, "MAX_DFA_STATES", 8)
    for threads in (1, 2):
        with pytest.raises(UnsupportedSchemaError, match="8 DFA states"):
            Compiler(bytelevel_vocab, threads=threads).compile(list(synthetic_tools(20, seed=3)), use_cache=False)
