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
        cached = len(compiler._groups)
        joined: list[int] = []
        union_dfas = compiler_module.union_dfas
        monkeypatch.setattr(compiler_module, "union_dfas", lambda parts, joined=joined, union_dfas=union_dfas: joined.append(len(parts)) or union_dfas(parts))
        bigger = compiler.compile(tools, fmt)
        monkeypatch.undo()
        assert len(compiler._groups) == cached + 1, "only the new tool is compiled"
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


SHARED_SCHEMAS = (
    {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]},
    {"type": "object", "properties": {"q": {"type": "string", "maxLength": 4}, "n": {"type": "integer"}},
     "required": ["q"]},
    {"type": "object", "properties": {}},
)


def _tool_sets():  # type: ignore[no-untyped-def]
    from hypothesis import strategies as st

    names = st.lists(st.sampled_from(["add", "get_add", "sub", "search_movie", "movie", "x-y", "ln", "log_ln"]),
                     min_size=1, max_size=6, unique=True)
    return names.flatmap(lambda ns: st.tuples(st.just(ns), st.lists(st.integers(0, len(SHARED_SCHEMAS) - 1),
                                                                    min_size=len(ns), max_size=len(ns))))


def test_tools_sharing_parameters_compile_to_the_language_of_their_separate_calls(bytelevel_vocab) -> None:
    """Tools with the same parameters share one argument machine behind all their names (`call_groups`): the
    compiled automaton is, minimized, identical to the union of every tool's own call automaton, in every format
    (aliases included: a suffix of any tool of a group names it), and Python calls keep their tools apart."""
    import numpy as np
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from tooldec.automaton.compile import KeyLanguage, compile_dfa
    from tooldec.automaton.dfa import minimize
    from tooldec.compiler import Compiler
    from tooldec.grammar.calls import call_groups, get_format, with_aliases
    from tooldec.grammar.ir import alt
    from tooldec.specs import ToolSpec

    compiler = Compiler(bytelevel_vocab)

    @settings(max_examples=40, deadline=None)
    @given(drawn=_tool_sets(), fmt_name=st.sampled_from(["json", "hermes", "hermes-lines", "toolken", "react",
                                                           "python", "llama31"]), aliased=st.booleans())
    def check(drawn: tuple[list[str], list[int]], fmt_name: str, aliased: bool) -> None:
        names, picks = drawn
        tools = [ToolSpec(n, "", SHARED_SCHEMAS[k]) for n, k in zip(names, picks, strict=True)]
        fmt = with_aliases(fmt_name, tools) if aliased else get_format(fmt_name)
        any_call = alt(*(fmt.call(t, max_ref_depth=3, decide=KeyLanguage) for t in tools))
        around = getattr(fmt, "around", None)  # a format whose calls come in a list (Llama 3.1): the list of them
        separate = minimize(compile_dfa(around(any_call) if around is not None else any_call))
        shared = minimize(compiler.compile(tools, fmt, use_cache=False).dfa)
        for a, b in ((separate.trans, shared.trans), (separate.classes, shared.classes),
                     (separate.accepting, shared.accepting)):
            assert np.array_equal(a, b)
        groups = call_groups(tools, fmt)
        assert len(groups) == (len(tools) if fmt_name == "python" else len(set(picks)))
        assert all(t.parameters == g[0].parameters for g in groups for t in g)
        order = [tools.index(t) for g in groups for t in g]
        assert sorted(order) == list(range(len(tools))) and [tools.index(g[0]) for g in groups] == sorted(
            tools.index(g[0]) for g in groups), "groups in the order of their first tools, each in input order"
        seen.append(len(tools))

    seen: list[int] = []
    check()
    assert len(seen) >= 40


def test_a_group_no_call_can_satisfy_is_refused_naming_its_first_tool(bytelevel_vocab) -> None:
    import pytest

    from tooldec.compiler import Compiler
    from tooldec.errors import EmptyGrammarError
    from tooldec.specs import ToolSpec

    empty = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 1}}, "required": ["a"]}
    tools = [ToolSpec("ok", "", SHARED_SCHEMAS[0]), ToolSpec("bad_one", "", empty), ToolSpec("ok_too", "", SHARED_SCHEMAS[0]),
             ToolSpec("bad_two", "", empty)]
    for fmt in ("json", "python"):
        with pytest.raises(EmptyGrammarError) as err:
            Compiler(bytelevel_vocab).compile(tools, fmt, use_cache=False)
        assert err.value.tool == "bad_one"


def test_an_empty_tool_set_is_refused_not_a_crash(bytelevel_vocab) -> None:
    import pytest

    from tooldec.automaton.dfa import union_dfas
    from tooldec.compiler import Compiler
    from tooldec.errors import ToolSpecError

    for fmt in ("json", "python", "hermes", "mistral"):
        with pytest.raises(ToolSpecError, match="empty"):
            Compiler(bytelevel_vocab).compile([], fmt, use_cache=False)
    with pytest.raises(ValueError):
        union_dfas([])
