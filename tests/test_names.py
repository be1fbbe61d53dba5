"""Names that follow the model's intent: a tool may be called by a unique word-aligned suffix of its name."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tooldec.automaton.compile import KeyLanguage, compile_dfa
from tooldec.compiler import Compiler
from tooldec.conformance import feed
from tooldec.grammar.calls import (
    Aliased,
    ParallelCalls,
    _snake,
    _spellings,
    _word_starts,
    get_format,
    name_aliases,
    tools_grammar,
    with_aliases,
)
from tooldec.specs import ToolSpec
from tooldec.vocab import Vocabulary

WORDS = st.sampled_from(["number", "of", "children", "get", "weather", "current", "search", "movie", "year", "place",
                         "birth", "start", "name", "first", "last", "id", "list", "user"])
NAMES = st.lists(WORDS, min_size=1, max_size=4).flatmap(
    lambda ws: st.sampled_from(["_", "-", "/", " ", "camel"]).map(
        lambda sep: ws[0] + "".join(w.title() for w in ws[1:]) if sep == "camel" else sep.join(ws)
    )
)


def _tool(name: str) -> ToolSpec:
    return ToolSpec(name, "", {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})


@settings(max_examples=200, deadline=None)
@given(st.lists(NAMES, min_size=1, max_size=12, unique=True))
def test_every_alias_names_one_tool_and_no_tool_is_shadowed(names: list[str]) -> None:
    aliases = name_aliases(names)
    for alias, name in aliases.items():
        assert alias not in names
        assert [n for n in names if alias in _spellings(n)] == [name]
        # its words are the name's last words: a suffix as written, or the snake_case of one (or of the name)
        words, alias_words = _snake(name).split("_"), _snake(alias).split("_")
        assert words[len(words) - len(alias_words):] == alias_words
        assert name.endswith(alias) or alias == _snake(alias)


def test_word_starts_split_separators_and_camel_case() -> None:
    assert _word_starts("number_of_children") == [0, 7, 10]
    assert _word_starts("GET /search/movie") == [0, 5, 12]
    assert _word_starts("getCurrentWeather") == [0, 3, 10]
    assert _word_starts("HTTPServer") == [0, 4]
    assert name_aliases(["number_of_children", "bordering_cities"])["children"] == "number_of_children"
    assert name_aliases(["GET /search/movie", "GET /movie/{id}"])["search_movie"] == "GET /search/movie"
    # shared suffixes and suffixes that are names themselves are not aliases
    assert "name" not in name_aliases(["first_name", "last_name"])
    assert "location" not in name_aliases(["location", "headquarter_location"])
    assert "of" not in name_aliases(["part_of"]) and "year_2" in name_aliases(["start_year_2", "start_year"])


TOOLS = [_tool(n) for n in ("number_of_children", "bordering_cities", "first_name", "last_name", "location")]


def test_an_alias_is_in_the_name_trie_and_parses_to_the_tool() -> None:
    fmt = with_aliases("toolken", TOOLS)
    dfa = compile_dfa(tools_grammar(TOOLS, fmt, decide=KeyLanguage))
    assert dfa.accepts(b'<children>("Obama")=') and dfa.accepts(b'<number_of_children>("Obama")=')
    assert not dfa.accepts(b'<name>("x")=') and not dfa.accepts(b'<child>("x")=')
    assert fmt.parse('<children>("Obama")=').name == "number_of_children"
    assert fmt.render(TOOLS[0], {"q": "x"}) == '<number_of_children>("x")='
    # without aliases the prefix trie refuses the model's word
    assert not compile_dfa(tools_grammar(TOOLS, get_format("toolken"), decide=KeyLanguage)).accepts(b'<children>("Obama")=')


def test_aliases_in_every_format(bytelevel_vocab: Vocabulary) -> None:
    texts = {
        "json": '{"name": "children", "arguments": {"q": "x"}}',
        "hermes": '<tool_call>\n{"name": "cities", "arguments": {"q": "x"}}\n</tool_call>',
        "python": 'children(q="x")',
        "react": 'Action: cities\nAction Input: {"q": "x"}\n',
        "mistral": '[{"name": "children", "arguments": {"q": "x"}}, {"name": "last_name", "arguments": {"q": "y"}}]',
    }
    for name, text in texts.items():
        fmt = with_aliases(name, TOOLS)
        assert isinstance(fmt, ParallelCalls if name == "mistral" else Aliased)
        compiled = Compiler(bytelevel_vocab).compile(TOOLS, fmt)
        guide = compiled.guide()
        assert feed(guide, bytelevel_vocab.encode(text)), name
        calls = fmt.parse_all(text) if isinstance(fmt, ParallelCalls) else [guide.result()]
        assert calls[0].name in ("number_of_children", "bordering_cities"), name
        assert calls[0].arguments == {"q": "x"}


def test_grammars_with_different_alias_tables_are_cached_apart(bytelevel_vocab: Vocabulary) -> None:
    compiler = Compiler(bytelevel_vocab)
    a = compiler.compile(TOOLS[:2], with_aliases("toolken", TOOLS[:2]))
    b = compiler.compile(TOOLS[:2], with_aliases("toolken", [*TOOLS[:2], _tool("children")]))
    assert a is not b
    assert a.dfa.accepts(b'<children>("x")=') and not b.dfa.accepts(b'<children>("x")=')
