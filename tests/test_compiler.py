"""The compiler facade: caching of compiled grammars."""

from __future__ import annotations


def test_compiled_grammars_are_cached_per_tool_set_and_vocabulary(bytelevel_vocab, sentencepiece_vocab) -> None:
    from tooldec.compiler import Compiler
    from tooldec.specs import ToolSpec

    tools = [ToolSpec("f", "", {"type": "object", "properties": {"x": {"type": "integer"}}})]
    a = Compiler(bytelevel_vocab).compile(tools)
    assert Compiler(bytelevel_vocab).compile(tools) is a
    assert Compiler(bytelevel_vocab).compile(tools, "python") is not a
    assert Compiler(sentencepiece_vocab).compile(tools) is not a
    assert Compiler(bytelevel_vocab).compile(tools, use_cache=False) is not a
