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
