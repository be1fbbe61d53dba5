"""The native Lark reader against lark itself: the same ContextFreeGrammar, structure and names included.

The oracle is the previous front end (lark's GrammarBuilder reads the grammar, its terminals and BNF rules are
mapped as before); `parse_lark` must return an equal grammar (terminal IR, priorities, literal flags, nonterminal
names, rules, ignore, start) or both must refuse the grammar.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lark.exceptions import LarkError
from lark.lexer import PatternStr, Token
from lark.load_grammar import GrammarBuilder, PackageResource, eval_escaping, stdlib_loader
from test_cfg_front import SHARED_LARK

from tooldec.errors import GrammarError
from tooldec.grammar.cfg import ContextFreeGrammar, Rule, Terminal, normalize, parse_lark
from tooldec.grammar.cfg.lark_reader import unescape
from tooldec.grammar.cfg.model import nonterminal_symbol
from tooldec.grammar.cfg.terminal_regex import literal_ir, regex_ir


def _loader(base: object, path: str) -> tuple[object, str]:
    if path == "common.lark" and (base is None or isinstance(base, PackageResource)):
        return stdlib_loader(base, path)  # type: ignore[no-any-return]
    raise GrammarError(f"import of {path}")


def _oracle(text: str, start: str = "start") -> ContextFreeGrammar:
    """The grammar the lark-based front end built: lark compiles, we map terminals and rules."""
    try:
        builder = GrammarBuilder(False, [_loader])
        builder.load_grammar(text, "<grammar>")
        grammar = builder.build()
        for _name, _params, tree, _options in grammar.rule_defs:
            for sub in tree.iter_subtrees():  # [x] read as x? (the previous front end did the same)
                if sub.data == "maybe":
                    sub.data = "expr"
                    sub.children.append(Token("OP", "?"))
        lark_terms, lark_rules, ignore = grammar.compile([start], ())
    except (LarkError, RecursionError) as exc:
        raise GrammarError(f"lark refused: {exc}") from None
    terminals = []
    for t in lark_terms:
        literal = isinstance(t.pattern, PatternStr)
        to_ir = literal_ir if literal else regex_ir
        terminals.append(Terminal(t.name, to_ir(t.pattern.value, t.pattern.flags, name=t.name),
                                  priority=t.priority, literal=literal))
    term_index = {t.name: i for i, t in enumerate(terminals)}
    nt_index: dict[str, int] = {}
    for r in lark_rules:
        nt_index.setdefault(r.origin.name, len(nt_index))
    if start not in nt_index:
        raise GrammarError("no start rule")
    rules = tuple(Rule(nt_index[r.origin.name], tuple(
        term_index[s.name] if s.is_term else nonterminal_symbol(nt_index[s.name]) for s in r.expansion))
        for r in lark_rules)
    return normalize(ContextFreeGrammar(tuple(terminals), tuple(nt_index), rules, nt_index[start],
                                        tuple(term_index[n] for n in ignore)))


def _outcome(read: object, text: str) -> ContextFreeGrammar | str:
    """The grammar a reader returns, or "refused"."""
    try:
        return read(text)  # type: ignore[operator, no-any-return]
    except GrammarError:
        return "refused"


def _assert_same(text: str) -> None:
    ours, theirs = _outcome(parse_lark, text), _outcome(_oracle, text)
    assert ours == theirs, text


# Grammars in the style of lark's examples, written for these tests.
EXAMPLES = {
    "calc": r'''
?start: sum
      | NAME "=" sum    -> assign_var
?sum: product
    | sum "+" product   -> add
    | sum "-" product   -> sub
?product: atom
    | product "*" atom  -> mul
    | product "/" atom  -> div
?atom: NUMBER           -> number
     | "-" atom         -> neg
     | NAME             -> var
     | "(" sum ")"
%import common.CNAME -> NAME
%import common.NUMBER
%import common.WS_INLINE
%ignore WS_INLINE
''',
    "json_common": r'''
?start: value
?value: object | array | string | SIGNED_NUMBER -> number | "true" -> true | "false" -> false | "null" -> null
array  : "[" [value ("," value)*] "]"
object : "{" [pair ("," pair)*] "}"
pair   : string ":" value
string : STR
STR: "\"" /[^"\\]*/ "\""
%import common (SIGNED_NUMBER, WS)
%ignore WS
''',
    "templates": r'''
start: _list{item, ","} ";" _list{NAME, _SEP}
_list{x, sep}: x (sep x)*
item: NAME | INT | "[" [_list{item, ","}] "]"
_SEP: "|" | "/"
NAME: LETTER (LETTER | DIGIT | "_")*
LETTER: "a".."z" | "A".."Z"
%import common.DIGIT
%import common.INT
%ignore " "
''',
    "keywords": r'''
start: stmt+
stmt: "if"i cond "then" stmt ("else" stmt)? | NAME "=" expr ";" | "{" stmt* "}"
cond: expr ("==" | "!=") expr
expr: NAME | NUMBER | "(" expr ")" | expr PLUS expr
PLUS: "+"
NAME.-1: /[a-z_]+/
NUMBER.2: /\d+/ ("." /\d+/)?
COMMENT: "//" /[^\n]*/
%ignore /\s+/
%ignore COMMENT
''',
    "repeats": r'''
start: hex~4 "-" hex~2..3 "-" "x"~60 "-" "y"~3..70 tail
hex: HEX
tail: ["!" tail] | ("?" | "." ~ 1..2)+
HEX: /[0-9a-f]/ | "A".."F"
''',
    "multiline": r'''
start: a
     // a comment between alternatives
     | b  # another comment style
     | "c" \
       "d"
!a: "a" "a"?
_b: "b"
  | "bb"
b: _b+ [a] [a]
''',
    "escapes": r'''
start: "\"" | "\\" | "\n" | "tab\t" | "\x41\u00e9" | /\// | /a\.b/ | "\q" | A | B
A: "\x5c\x5c"
B: /[\"]x/
''',
}


@pytest.mark.parametrize("name", sorted(SHARED_LARK))
def test_shared_grammars_equal_the_lark_reading(name: str) -> None:
    _assert_same(SHARED_LARK[name][0])


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_grammars_equal_the_lark_reading(name: str) -> None:
    assert not isinstance(_outcome(parse_lark, EXAMPLES[name]), str), name
    _assert_same(EXAMPLES[name])


@pytest.mark.parametrize("source", [
    'start: A\nA: "a" B\nB: "b" A\n',  # recursive terminals
    'start: a\na: A\nA: a\n',  # a rule inside a terminal
    'start: x{"a"}\n',  # undefined template
    'start: "a"\nstart.2: "b"\n',
    'start: "a"\n__x: "b"\n',
    'start: "a" -> x | "a" -> y\n',  # aliases make the same expansion twice
    '_start: "a" -> x\n',
    'start: A\n%import common.ESCAPED_STRING -> A\n',  # lookbehind
    'start: "a"\n%ignore B\n',
    'start: ""\n',
    'start: "a"~3..2\n',
    'start: A\nA: \n',
    'start: unused_import\n%import common.NOPE -> unused_import\n',
])
def test_refusals_agree_with_lark(source: str) -> None:
    _assert_same(source)


@pytest.mark.parametrize(("source", "message", "line", "column"), [
    ('start: "a"\n%override start: "b"\n', "%override is not supported", 2, 1),
    ('start: "a"\n%extend start: "b"\n', "%extend is not supported", 2, 1),
    ("start: " + "(" * 300 + '"a"' + ")" * 300 + "\n", "nests too deeply", 1, 264),
    ('start: "a" -> x "b"\n', "Unexpected token", 1, 17),
    ('start: ("a" -> x)\n', "Unexpected token", 1, 13),
    ('start: "a"?b\n', "Unexpected token", 1, 11),
    ('start: "a\\x4"\n', "bad escape", 1, 8),
    ('start: "a" | y\ny{p}: p "a"\n', "template 'y' is not defined with 0 parameters", 1, 14),  # a KeyError before
    ('start: t{y}\nt{p}: p\ny{p}: p "a"\n', "template 'y' is not defined with 0 parameters", 1, 10),
])
def test_reader_refusals_carry_line_and_column(source: str, message: str, line: int, column: int) -> None:
    with pytest.raises(GrammarError, match=re.escape(message)) as info:
        parse_lark(source)
    assert (info.value.line, info.value.column) == (line, column)


@settings(max_examples=300)
@given(st.text('\\"\'nxuU0a4/q', max_size=8), st.booleans())
def test_escapes_evaluate_as_lark_evaluates_them(body: str, is_string: bool) -> None:
    try:
        expected: str | None = eval_escaping(body)
        if is_string:
            expected = expected.replace("\\\\", "\\")  # type: ignore[union-attr]
    except LarkError:
        expected = None
    try:
        ours: str | None = unescape(body, is_string)
    except ValueError:
        ours = None
    assert ours == expected


_ATOMS = ['"a"', '"b"', '"if"', '"+"', '"ab"', '"a"i', '/[0-9]+/', '/b+/', '"x".."z"', '" "']


def _expressions(leaves: list[str]) -> st.SearchStrategy[str]:
    """Random Lark bodies over `leaves`: sequences, groups, alternatives and every operator."""
    def grow(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.lists(inner, min_size=2, max_size=3).map(" ".join),
            st.lists(inner, min_size=2, max_size=3).map(lambda xs: "(" + " | ".join(xs) + ")"),
            st.tuples(inner, st.sampled_from(["?", "*", "+", "~2", "~0..2", "~ 1..3"])).map(
                lambda p: f"({p[0]}){p[1]}"),
            inner.map(lambda s: f"[{s}]"),
        )
    return st.recursive(st.sampled_from(leaves), grow, max_leaves=6)


@st.composite
def _grammars(draw: st.DrawFn) -> str:
    """A small random grammar: three rules, two terminals (B may use A), maybe an ignore, an import."""
    term_a = draw(_expressions(_ATOMS))
    term_b = draw(_expressions([*_ATOMS, "A"]))
    rule_leaves = [*_ATOMS, "A", "B", "x", "y", "INT"]
    lines = [f"start: {draw(_expressions(rule_leaves))} | {draw(_expressions(rule_leaves))}",
             f"x: {draw(_expressions(rule_leaves))}",
             f"y: {draw(_expressions([*rule_leaves[:-3], 'x']))}",
             f"A{draw(st.sampled_from(['', '.2', '.-1']))}: {term_a}",
             f"B: {term_b}",
             "%import common.INT"]
    lines += draw(st.sampled_from([[], ['%ignore " "'], ["%ignore /[ \\t]+/"], ["%ignore A"]]))
    return "\n".join(draw(st.permutations(lines))) + "\n"


@settings(max_examples=150, deadline=None)
@given(_grammars())
def test_random_grammars_equal_the_lark_reading(text: str) -> None:
    _assert_same(text)
