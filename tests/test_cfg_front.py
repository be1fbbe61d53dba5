"""The CFG front end: Lark and GBNF text to the normalized BNF model, terminal regexes checked against `re`."""

from __future__ import annotations

import re
import warnings
from collections import defaultdict
from functools import cache

import lark
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tooldec.automaton.compile import compile_dfa
from tooldec.automaton.dfa import DFA
from tooldec.errors import GrammarError, ToolDecError
from tooldec.grammar.cfg import (
    ContextFreeGrammar,
    Rule,
    Terminal,
    load_grammar,
    normalize,
    parse_gbnf,
    parse_lark,
)
from tooldec.grammar.cfg.terminal_regex import _parsed_ir, fullmatch_ir, literal_ir, regex_ir
from tooldec.grammar.ir import lit

# ---------------------------------------------------------------- helpers: DFAs and an Earley recognizer


@cache
def _dfa(grammar: ContextFreeGrammar, terminal: int) -> DFA:
    return compile_dfa(grammar.terminals[terminal].node)


def _recognizes(grammar: ContextFreeGrammar, tokens: list[set[int]]) -> bool:
    """Earley recognition of a sequence of terminal sets (each position: the terminals that lexeme can be)."""
    by_lhs: dict[int, list[int]] = defaultdict(list)
    for i, rule in enumerate(grammar.rules):
        by_lhs[rule.lhs].append(i)
    nullable: set[int] = set()
    changed = True
    while changed:
        changed = False
        for rule in grammar.rules:
            if rule.lhs not in nullable and all(s < 0 and -s - 1 in nullable for s in rule.rhs):
                nullable.add(rule.lhs)
                changed = True
    n = len(tokens)
    sets: list[set[tuple[int, int, int]]] = [set() for _ in range(n + 1)]
    for r in by_lhs[grammar.start]:
        sets[0].add((r, 0, 0))
    for i in range(n + 1):
        current, agenda = sets[i], list(sets[i])
        while agenda:
            r, d, o = agenda.pop()
            rhs = grammar.rules[r].rhs
            found: list[tuple[int, int, int]] = []
            if d == len(rhs):
                lhs = grammar.rules[r].lhs
                found = [(r2, d2 + 1, o2) for r2, d2, o2 in list(sets[o])
                         if d2 < len(grammar.rules[r2].rhs) and grammar.rules[r2].rhs[d2] == -(lhs + 1)]
            elif rhs[d] < 0:
                nt = -rhs[d] - 1
                found = [(r2, 0, i) for r2 in by_lhs[nt]] + ([(r, d + 1, o)] if nt in nullable else [])
            elif i < n and rhs[d] in tokens[i]:
                sets[i + 1].add((r, d + 1, o))
            for item in found:
                if item not in current:
                    current.add(item)
                    agenda.append(item)
    return any(o == 0 and d == len(grammar.rules[r].rhs) and grammar.rules[r].lhs == grammar.start
               for r, d, o in sets[n])


def _chars_derived(grammar: ContextFreeGrammar, text: str) -> bool:
    """Whether a grammar whose terminals are all one character long derives `text`."""
    tokens = [{t for t in range(len(grammar.terminals)) if _dfa(grammar, t).accepts(ch.encode())} for ch in text]
    return _recognizes(grammar, tokens)


def _lark_accepts(grammar: ContextFreeGrammar, source: str, text: str) -> bool:
    """Whether the grammar derives the lexemes lark's own lexer finds in `text` (ignored ones dropped).

    Each lexeme must also be accepted by the DFA of the terminal lark named for it; text that lark's lexer
    cannot split is not derived."""
    names = {t.name: i for i, t in enumerate(grammar.terminals)}
    tokens = []
    try:
        for tok in lark.Lark(source, parser="lalr", lexer="basic").lex(text):
            index = names[tok.type]
            assert _dfa(grammar, index).accepts(str(tok).encode()), (tok.type, str(tok))
            tokens.append({index})
    except lark.exceptions.UnexpectedCharacters:
        return False
    return _recognizes(grammar, tokens)


# ---------------------------------------------------------------- terminal regexes against re.fullmatch

PATTERNS: list[tuple[str, str]] = [
    (r"[0-9]+(\.[0-9]+)?", ""),
    (r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?", ""),
    (r'"([^"\\\x00-\x1f]|\\(["\\/bfnrt]|u[0-9a-fA-F]{4}))*"', ""),
    (r"[a-zA-Z_]\w*", ""),
    (r"\d+|\s+|\W", ""),
    (r"[^\d\s]+", ""),
    (r"\D\S?", ""),
    (r"a.b", ""),
    (r"a.b", "s"),
    (r"(?s:.)x|y.", ""),
    (r"select|from", "i"),
    (r"[a-k]+|ß", "i"),
    (r"[^a-z]", "i"),
    (r"(?i:k)s", ""),
    (r"(?i)st\w", ""),
    (r"(ab){2,3}c{0,2}", ""),
    (r"a+?b*?c??", ""),
    (r"^(a|b$)$", ""),
    (r"\Aé+\Z", ""),
    (r"[α-ω]+x", "i"),
    (r"[\u0100-\U0001F600]+", ""),
]
ALPHABET = "abcksxyzABCKSXYZ019_.-\" \t\n\\/eEµΜμſKßẞÉéαΣσςİıi\u00a0٣𝟘😀"


@settings(max_examples=60)
@given(st.sampled_from(PATTERNS), st.lists(st.text(ALPHABET, max_size=6), min_size=10, max_size=10))
def test_terminal_regex_agrees_with_re_fullmatch(case: tuple[str, str], texts: list[str]) -> None:
    pattern, flags = case
    dfa = compile_dfa(regex_ir(pattern, flags, name="T"))
    compiled = re.compile(pattern, (re.IGNORECASE if "i" in flags else 0) | (re.DOTALL if "s" in flags else 0))
    for text in texts:
        assert dfa.accepts(text.encode()) == bool(compiled.fullmatch(text)), (pattern, flags, text)


@settings(max_examples=60)
@given(st.characters(codec="utf-8"), st.sampled_from(["[a-z]", "[^a-z]", "k", "s", "\\w", "[^\\W\\d]", "[σ-ω]"]))
def test_case_insensitive_class_agrees_with_re_on_any_character(ch: str, pattern: str) -> None:
    dfa = compile_dfa(regex_ir(pattern, "i", name="T"))
    assert dfa.accepts(ch.encode()) == bool(re.fullmatch(pattern, ch, re.IGNORECASE)), (pattern, ch)


@pytest.mark.parametrize(("pattern", "flags", "construct"), [
    (r"a*", "", "empty string"),
    (r"(a|)", "", "empty string"),
    (r"[^\s\S]", "", "matches no string"),
    (r"a\bc", "", "word boundary"),
    (r"(?=a)a", "", "lookaround"),
    (r"a(?!b)", "", "lookaround"),
    (r"(a)\1", "", "backreference"),
    (r"a^b", "", "anchor"),
    (r"a$b", "", "anchor"),
    (r"(?m)a", "", "inline flag"),
    (r"(?x:a)", "", "inline flag"),
    (r"a*+", "", "possessive"),
    (r"(?>a)", "", "atomic"),
    (r"(a)?(?(1)b|c)", "", "conditional"),
    (r"a", "m", "flag 'm'"),
    (r"a", "x", "flag 'x'"),
    (r"a(", "", "not a valid regular expression"),
])
def test_terminal_regex_refusals_name_the_terminal_and_construct(pattern: str, flags: str, construct: str) -> None:
    with pytest.raises(GrammarError, match=re.escape(construct)) as info:
        regex_ir(pattern, flags, name="MY_TERM")
    assert "MY_TERM" in str(info.value)


_OPTION_CHARS = st.sampled_from(list("aab<=>!|()[]{}.*+?^$\\-# \n\t/&~é€😀") + ["\ud800"])


def _ir_or_none(pattern: str, parsed: bool) -> object:
    """The IR of `pattern` through re's parser (`parsed`) or through `fullmatch_ir` (its fast paths where they apply);
    None where it raises GrammarError."""
    try:
        return _parsed_ir(pattern, (), "T") if parsed else fullmatch_ir(pattern, name="T")
    except GrammarError:
        return None


def _fast_and_parsed_ir(pattern: str) -> tuple[object, object]:
    """`fullmatch_ir`'s IR of `pattern` and the IR through re's parser, each None where refused; re's warnings
    are silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _ir_or_none(pattern, parsed=False), _ir_or_none(pattern, parsed=True)


@settings(max_examples=400, deadline=None)
@given(st.text(_OPTION_CHARS, max_size=2), st.lists(st.text(_OPTION_CHARS, max_size=4), min_size=1, max_size=6),
       st.booleans(), st.booleans())
def test_literal_choices_skip_the_parser_with_its_ir(prefix: str, options: list[str], group: bool,
                                                     escape: bool) -> None:
    """A pattern of literal characters and `|` (Lark's join of string alternatives) gets the IR re's parser and the
    converter give it (a common prefix moved out, single characters made a class), without parsing; any other
    pattern is parsed."""
    body = "|".join(re.escape(prefix + o) if escape else prefix + o for o in options)
    pattern = f"(?:{body})" if group else body
    got, expected = _fast_and_parsed_ir(pattern)
    assert got == expected


_CLASS_PIECES = st.sampled_from(["a", "z", "-", "]", "^", "[", "a-z", "0-9", "z-a", "\\d", "\\w", "\\S", "\\n", "\\]",
                                 "\\-", "\\b", "\\x41", "\\\\", "--", "&&", "é", "\ud800", "_", " ", "\t"])
_PIECES = st.one_of(
    st.sampled_from(["a", "b", "_", "é", "😀", "\ud800", ".", "-", " ", "\\d", "\\s", "\\W", "\\.", "\\n", "\\t", "\\b",
                     "\\A", "\\1", "\\x41", "\\\\", "\\", "^", "$", "(", ")", "|", "{", "}", "]"]),
    st.lists(_CLASS_PIECES, max_size=4).map(lambda xs: "[" + "".join(xs) + "]"))
_QUANTIFIERS = st.sampled_from(["", "", "*", "+", "?", "*?", "+?", "??", "*+", "**", "{2}", "{1,3}"])


@settings(max_examples=600, deadline=None)
@given(st.lists(st.tuples(_PIECES, _QUANTIFIERS), max_size=5))
def test_simple_regexes_skip_the_parser_with_its_ir(parts: list[tuple[str, str]]) -> None:
    """A pattern of characters, escapes and classes under *, + and ? (Lark's NAME, INT, whitespace) gets the IR
    re's parser and the converter give it, without parsing; refusals and errors stay re's."""
    pattern = "".join(a + q for a, q in parts)
    got, expected = _fast_and_parsed_ir(pattern)
    assert got == expected


@pytest.mark.parametrize("pattern", ["[[a]", "[a&&b]", "[a~~b]", "[a||b]", "[a-c--]", "(?P<x>a)"])
def test_terminal_regexes_that_re_warns_about_compile_silently(pattern: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compile_dfa(regex_ir(pattern, name="T")).accepts(b"a")


def test_literals_are_raw_utf8_and_flag_i_folds_case() -> None:
    assert literal_ir("é\"\\n", name="T") == lit("é\"\\n".encode())
    dfa = compile_dfa(literal_ir("Select", ("i",), name="T"))
    assert all(dfa.accepts(w.encode()) for w in ["select", "SELECT", "ſelect"])
    assert not dfa.accepts(b"selec")
    with pytest.raises(GrammarError, match="empty string"):
        literal_ir("", name="T")
    with pytest.raises(GrammarError, match="surrogate"):
        literal_ir("\ud800", name="T")


# ---------------------------------------------------------------- Lark grammars

SHARED_LARK = {
    "json": (r'''start: value
value: object | array | STRING | NUMBER | "true" | "false" | "null"
object: "{" (pair ("," pair)*)? "}"
pair: STRING ":" value
array: "[" (value ("," value)*)? "]"
STRING: /"([^"\\\x00-\x1f]|\\(["\\\/bfnrt]|u[0-9a-fA-F]{4}))*"/
NUMBER: /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/
%ignore /[ \t\n\r]+/
''', '{"a": [1, -2.5e3, true, null], "b\\u00e9": {"c": "x\\n"}, "d": []}'),
    "sql": (r'''start: select_stmt ";"?
select_stmt: "SELECT" select_list "FROM" table_ref join* where_clause? group_by? order_by? limit?
select_list: "*" | select_item ("," select_item)*
select_item: expr ("AS" NAME)?
table_ref: NAME ("AS" NAME)?
join: ("INNER" | "LEFT")? "JOIN" table_ref "ON" expr
where_clause: "WHERE" expr
group_by: "GROUP" "BY" expr ("," expr)*
order_by: "ORDER" "BY" order_item ("," order_item)*
order_item: expr ("ASC" | "DESC")?
limit: "LIMIT" INT
expr: and_expr ("OR" and_expr)*
and_expr: not_expr ("AND" not_expr)*
not_expr: "NOT" not_expr | comparison
comparison: sum (COMP_OP sum)?
sum: product (("+" | "-") product)*
product: atom (("*" | "/") atom)*
atom: column | INT | STRING | "(" expr ")" | func_call
column: NAME ("." NAME)?
func_call: FUNC "(" (expr ("," expr)* | "*")? ")"
FUNC: "COUNT" | "SUM" | "AVG" | "MIN" | "MAX" | "LOWER" | "UPPER"
COMP_OP: "=" | "<>" | "!=" | "<=" | ">=" | "<" | ">"
NAME: /[a-z_][a-z0-9_]*/
INT: /[0-9]+/
STRING: /'[^']*'/
%ignore /[ \t\n]+/
''', ("SELECT u.name, COUNT(o.id) AS n FROM users AS u LEFT JOIN orders AS o ON o.user_id = u.id "
          "WHERE u.country = 'France' AND (o.total > 100 OR o.status <> 'void') GROUP BY u.name "
          "ORDER BY n DESC LIMIT 20;")),
    "arith_leftrec": (r'''start: expr
expr: expr "+" term | expr "-" term | term
term: term "*" factor | term "/" factor | factor
factor: "-" factor | "(" expr ")" | NUMBER
NUMBER: /[0-9]+(\.[0-9]+)?/
%ignore " "
''', "(3.14 * 123 - (42 / 7)) * -(2 + 3 * (4 - 1)) + 1000 / 8"),
    "pycall": (r'''start: call ("\n" call)*
call: NAME "(" (args)? ")"
args: arg ("," arg)*
arg: NAME "=" value | value
value: STRING | NUMBER | "True" | "False" | "None" | list | dict | call
list: "[" (value ("," value)*)? "]"
dict: "{" (kv ("," kv)*)? "}"
kv: STRING ":" value
NAME: /[a-zA-Z_][a-zA-Z0-9_]*/
STRING: /"[^"\\\n]*"/ | /'[^'\\\n]*'/
NUMBER: /-?[0-9]+(\.[0-9]+)?/
%ignore /[ \t]+/
''', 'get_weather(city="Paris", days=3)\ncompose(f=add(a=1, b=2), g=[{"k": None}], h=\'x\')'),
    "nested300": ('start: arr\narr: "[" (arr ("," arr)*)? "]"\n', "[" * 300 + "]" * 300),
}


NOT_DERIVED = {"json": '{"a": [1, 2,]}', "sql": "SELECT FROM users", "arith_leftrec": "(1 + 2",
               "pycall": "f(a=)", "nested300": "[" * 300 + "]" * 299}


@pytest.mark.parametrize("name", sorted(SHARED_LARK))
def test_shared_lark_grammars_load_and_derive_their_samples(name: str) -> None:
    source, sample = SHARED_LARK[name]
    grammar = load_grammar(source, "lark")
    assert grammar.priorities and grammar.nonterminals[grammar.start] == "start"
    assert _lark_accepts(grammar, source, sample)
    for i, term in enumerate(grammar.terminals):
        assert not _dfa(grammar, i).accepts(b""), term.name
    if name != "nested300":
        assert len(grammar.ignore) == 1
    assert not _lark_accepts(grammar, source, NOT_DERIVED[name])


def test_lark_terminal_kinds_priorities_and_ignore() -> None:
    source = '''start: KW NAME+ "x"i NUMBER
KW.3: "let"
NAME: /[a-z]+/
%import common.WS
%import common.NUMBER
%ignore WS
'''
    grammar = parse_lark(source)
    terms = {t.name: t for t in grammar.terminals}
    assert compile_dfa(terms["NUMBER"].node).accepts(b"1.5e3")
    assert terms["KW"].priority == 3 and terms["KW"].literal
    assert not terms["NAME"].literal and terms["NAME"].priority == 0
    assert [grammar.terminals[i].name for i in grammar.ignore] == ["WS"]
    anon = next(t for t in grammar.terminals if t.name not in {"KW", "NAME", "WS", "NUMBER"})
    assert anon.literal and compile_dfa(anon.node).accepts(b"X")


@pytest.mark.parametrize(("source", "good", "bad"), [
    ('start: "a"? "b"* "c"+\n', ["c", "abbcc", "bc"], ["", "ab", "aac"]),
    ('start: ("a" | "b") ["c"] ("d" "e")*\n', ["a", "bc", "adede"], ["c", "ab", "ad"]),
    ('start: "a"~3 "b"~1..2\n', ["aaab", "aaabb"], ["aab", "aaabbb"]),
    ('start: [x] [x]\nx: "x"\n', ["", "x", "xx"], ["xxx"]),
    ('start: _sep{ITEM, ","}\n_sep{x, sep}: x (sep x)*\nITEM: "a".."c"\n', ["a", "a,b,c"], ["", "a,", "d"]),
    ('?start: x _y\n!x: "a"\n_y: "b" | "c"\n', ["ab", "ac"], ["a", "b"]),
    ('start.2: a a\na: a "x" | "x"\n', ["xx", "xxxx"], ["x"]),
])
def test_lark_ebnf_expands_to_the_same_language(source: str, good: list[str], bad: list[str]) -> None:
    grammar = parse_lark(source)
    for text in good:
        assert _chars_derived(grammar, text), text
    for text in bad:
        assert not _chars_derived(grammar, text), text


@pytest.mark.parametrize(("source", "message", "line", "column"), [
    ('start: "a"\nfoo: ( "b"\n', "Unexpected token", 2, 11),
    ('start: "a" @\n', "Unexpected input", 1, 12),
    ('start: "a" missing\n', "'missing' used but not defined", 1, 12),
    ('start "a"\n', "missing colon", 1, 7),
    ('start: "a"\nstart: "b"\n', "defined more than once", 2, 1),
    ('start: x\nx: "a"\n  | "a".."bc"\n', "a range must join", 3, 5),
    ('start: A\n%declare A\n', "%declare is not supported", 2, 1),
    ('start: X\n%import .other.X\n', "%import of other.lark is not supported", 2, 9),
    ('start: X\n%import python.NAME\n', "only Lark's common library", 2, 9),
    ('start: A\n\nA: /a*/\n', "terminal A (/a*/) can match the empty string", 3, 1),
    ('start: "a" /b?/\n', "(/b?/) can match the empty string", 1, 12),
    ('start: A\nA.2: /a\\b/\n', "word boundary", 2, 1),
    ('start: A\nA: /x/m\n', "flag 'm' is not supported", 2, 1),
])
def test_lark_errors_carry_line_and_column(source: str, message: str, line: int, column: int) -> None:
    with pytest.raises(GrammarError, match=re.escape(message)) as info:
        parse_lark(source)
    assert (info.value.line, info.value.column) == (line, column)
    assert isinstance(info.value, ToolDecError)


def test_lark_deep_nesting_is_a_grammar_error_not_a_crash() -> None:
    nested = "start: " + "(" * 1000 + '"a"' + ")" * 1000 + "\n"
    with pytest.raises(GrammarError, match="nests too deeply"):
        parse_lark(nested)
    assert _chars_derived(parse_lark("start: " + "(" * 50 + '"a"' + ")" * 50 + "\n"), "a")


def test_lark_missing_start_and_other_start() -> None:
    with pytest.raises(GrammarError, match="start rule 'start' is not defined"):
        parse_lark('x: "a"\n')
    assert parse_lark('x: "a"\n', start="x").nonterminals == ("x",)


# ---------------------------------------------------------------- GBNF grammars

JSON_GBNF = r'''
# JSON, written for these tests
root   ::= ws value ws
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::=
  "{" ws (
    member (ws "," ws member)*
  )? ws "}"
member ::= string ws ":" ws value
array  ::= "[" ws ( value (ws "," ws value)* )? ws "]"
string ::= "\"" ( [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
ws     ::= [ \t\n\r]*
'''

ARITH_GBNF = '''root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= number | "(" expr ")" | "-" factor
number ::= [0-9]+ ("." [0-9]+)?
'''


def test_gbnf_json_loads_and_recognizes() -> None:
    grammar = load_grammar(JSON_GBNF, "gbnf")
    assert not grammar.priorities and grammar.ignore == ()
    for text in ['{"a": [1, -2.5e3, true, null], "b\\u00e9": {"c": "x\\n"}}', "[]", ' "é😀" ']:
        assert _chars_derived(grammar, text), text
    for text in ['{"a" 1}', "[1,]", '"\\x"', "01"]:
        assert not _chars_derived(grammar, text), text


def test_gbnf_arithmetic_and_shared_one_character_terminals() -> None:
    grammar = parse_gbnf(ARITH_GBNF)
    names = [t.name for t in grammar.terminals]
    assert len(names) == len(set(names)) and names.count("[0-9]") == 1
    assert _chars_derived(grammar, "1+2*(3.5-4)/-5")
    assert not _chars_derived(grammar, "1+")


def test_gbnf_literals_split_per_character_and_escapes() -> None:
    grammar = parse_gbnf('root ::= "ab\\n\\t\\\\\\"\\x41\\u00e9\\U0001F600" [\\]\\[] .')
    assert [t.name for t in grammar.terminals][:2] == ['"a"', '"b"']
    assert _chars_derived(grammar, 'ab\n\t\\"Aé😀]\n')
    assert _chars_derived(grammar, 'ab\n\t\\"Aé😀[x')
    assert not _chars_derived(grammar, 'ab\n\t\\"Aé😀a')


@settings(max_examples=40)
@given(st.text("abc", max_size=8))
def test_gbnf_repetitions_agree_with_re(text: str) -> None:
    grammar = parse_gbnf('root ::= ("a" | "b"){1,3} "c"* ( "ab"{2} | "b"{0,1} )? [^b]{2,}')
    assert _chars_derived(grammar, text) == bool(re.fullmatch(r"(a|b){1,3}c*(?:(?:ab){2}|b?)?[^b]{2,}", text))


def test_gbnf_rules_span_lines_and_comments() -> None:
    grammar = parse_gbnf('root ::= "a" # comment "b"\n  item\n  | "z"\nitem ::= (\n "x"\n | "y" )\n')
    for text, ok in [("ax", True), ("ay", True), ("z", True), ("ab", False), ("a", False)]:
        assert _chars_derived(grammar, text) == ok, text


def test_gbnf_deep_nesting_never_recurses() -> None:
    deep = "root ::= " + "(" * 1000 + '"a"' + ")" * 1000
    assert _chars_derived(parse_gbnf(deep), "a")
    alternatives = "root ::= " + '("a" | ' * 1000 + '"b"' + ")" * 1000
    grammar = parse_gbnf(alternatives)
    assert _chars_derived(grammar, "b") and not _chars_derived(grammar, "ab")
    with pytest.raises(GrammarError, match="never closed") as info:
        parse_gbnf("root ::= " + "(" * 1000)
    assert (info.value.line, info.value.column) == (1, 1009)


@pytest.mark.parametrize(("source", "message", "line", "column"), [
    ('root ::= "a" b\n', "rule 'b' is used but never defined", 1, 14),
    ('a ::= "x"\n', "no 'root' rule", None, None),
    ('root ::= "a"\nroot ::= "b"\n', "defined more than once", 2, 1),
    ('root ::= ("a"\n', "'(' is never closed", 1, 10),
    ('root ::= "a" )\n', "')' without a matching '('", 1, 14),
    ("root ::=\n  * \"a\"\n", "needs an item before it", 2, 3),
    ('root ::= "\\q"\n', "unknown escape", 1, 11),
    ('root ::= "\\x4"\n', "needs 2 hex digits", 1, 11),
    ('root ::= "abc\n', "unterminated string", 1, 10),
    ("root ::= [ab\n", "unterminated character class", 1, 10),
    ("root ::= [z-a]\n", "runs backwards", 1, 11),
    ('root ::= "a"{3,2}\n', "out of order", 1, 13),
    ('root ::= "a"{,2}\n', "{m}, {m,} or {m,n}", 1, 13),
    ('root ::= "a" ::= "b"\n', "'::=' must follow a rule name", 1, 14),
    ('"a" ::= "b"\n', "expected a rule definition", 1, 1),
    ("root ::= <think>\n", "unexpected character '<'", 1, 10),
    ('root ::= "\\uD800"\n', "not a character with a UTF-8 form", 1, 11),
])
def test_gbnf_errors_carry_line_and_column(source: str, message: str, line: int | None,
                                           column: int | None) -> None:
    with pytest.raises(GrammarError, match=re.escape(message)) as info:
        parse_gbnf(source)
    assert (info.value.line, info.value.column) == (line, column)


# ---------------------------------------------------------------- normalization and empty languages


@pytest.mark.parametrize(("syntax", "source"), [
    ("lark", 'start: a\na: a "x"\n'),
    ("lark", 'start: "a" b\nb: "b" b\n'),
    ("gbnf", 'root ::= x\nx ::= "a" x\n'),
    ("gbnf", "root ::= [^\\x00-\\U0010FFFF]\n"),
    ("gbnf", "root ::= []\n"),
])
def test_empty_languages_are_refused(syntax: str, source: str) -> None:
    with pytest.raises(GrammarError, match="language is empty"):
        load_grammar(source, syntax)  # type: ignore[arg-type]


def test_normalize_drops_dead_parts_and_duplicates() -> None:
    a, b, c, w = (Terminal(n, lit(n.lower())) for n in "ABCW")
    grammar = ContextFreeGrammar(
        terminals=(a, b, c, w),
        nonterminals=("dead", "start", "loop", "orphan", "x"),
        rules=(Rule(1, (0, -5)), Rule(1, (0, -5)), Rule(1, (-3,)), Rule(2, (-3, 1)), Rule(4, ()),
               Rule(3, (2,)), Rule(0, (1,))),
        start=1,
        ignore=(3,),
    )
    out = normalize(grammar)
    assert out.nonterminals == ("start", "x")
    assert out.rules == (Rule(0, (0, -2)), Rule(1, ()))
    assert [t.name for t in out.terminals] == ["A", "W"] and out.ignore == (1,) and out.start == 0


def test_normalize_is_iterative_on_long_chains() -> None:
    depth = 20_000
    rules = tuple(Rule(i, (-(i + 2),)) for i in range(depth)) + (Rule(depth, (0,)),)
    grammar = ContextFreeGrammar((Terminal("A", lit("a")),), tuple(f"n{i}" for i in range(depth + 1)), rules, 0)
    assert len(normalize(grammar).rules) == depth + 1


def test_unknown_syntax_is_refused() -> None:
    with pytest.raises(GrammarError, match="unknown grammar syntax"):
        load_grammar("root ::= \"a\"", "ebnf")  # type: ignore[arg-type]
