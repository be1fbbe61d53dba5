"""Lark terminal patterns (Python `re` syntax, whole-lexeme match) as IR over raw UTF-8 bytes.

The stdlib parser gives the syntax tree; each construct maps to IR with exactly the language `re.fullmatch`
gives it on text, encoded as UTF-8 (lone surrogates have no UTF-8 form, so they drop out). Character classes
keep Python's Unicode meaning of `\\d`, `\\w` and `\\s`; under the `i` flag, each one-character item takes the
characters `re` itself accepts for it. Constructs whose language is not regular or depends on the text around
the lexeme (lookaround, backreferences, word boundaries, anchors inside the pattern) are refused, not guessed.
"""

from __future__ import annotations

import _sre  # type: ignore[import-not-found]
import os
import re
import warnings
from collections.abc import Iterable
from functools import cache
from re import _compiler, _parser  # type: ignore[attr-defined]
from re import _constants as C  # type: ignore[attr-defined]
from typing import Any

from tooldec.errors import GrammarError
from tooldec.grammar.ir import _BYTE, EMPTY, Alt, Bytes, Node, Repeat, Seq, alt, lit, seq
from tooldec.grammar.regex import _python_class
from tooldec.grammar.strings import (
    MAX_CODEPOINT,
    Ranges,
    _raw_utf8_ir,
    complement_ranges,
    intersect_ranges,
    normalize_ranges,
)

# plain ints, not RegexFlag: each operation on an enum flag builds a new one in Python (1 µs per character)
_FLAGS = {"i": int(re.IGNORECASE), "s": int(re.DOTALL)}
_SUPPORTED = int(re.IGNORECASE | re.DOTALL | re.UNICODE)  # UNICODE is implied for every str pattern
_CHAR_FLAGS = int(re.IGNORECASE | re.DOTALL)  # the flags that change what one character matches
_IGNORECASE = _FLAGS["i"]
_BEGIN = (C.AT_BEGINNING, C.AT_BEGINNING_STRING)
_END = (C.AT_END, C.AT_END_STRING)
_CHAR_OPS = (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN)
_REFUSED_OPS = {
    C.GROUPREF: "a backreference",
    C.GROUPREF_EXISTS: "a conditional group",
    C.ASSERT: "a lookaround assertion",
    C.ASSERT_NOT: "a lookaround assertion",
    C.ATOMIC_GROUP: "an atomic group",
    C.POSSESSIVE_REPEAT: "a possessive quantifier",
}
_MAY_WARN = re.compile(r"\[\[|--|&&|~~|\|\||\(\?[P(]")
"""Where `re`'s parser may warn (a possible nested set or set operation inside a class, a group name): wider
than its tests, never narrower."""
_LITERAL_CHAR = r"(?:[^\\.^$*+?{}\[\]|()]|\\[^A-Za-z0-9])"  # a character re reads as itself (no flags)
_CHOICE = re.compile(f"{_LITERAL_CHAR}+(?:\\|{_LITERAL_CHAR}+)*")
_OPTION = re.compile(r"(?:[^\\|]|\\[\s\S])+")
_ESCAPED = re.compile(r"\\([\s\S])")
_SURROGATE = re.compile("[\ud800-\udfff]")
_CATEGORIES = {
    C.CATEGORY_DIGIT: ("isdecimal", False), C.CATEGORY_NOT_DIGIT: ("isdecimal", True),
    C.CATEGORY_WORD: ("isalnum", False), C.CATEGORY_NOT_WORD: ("isalnum", True),
    C.CATEGORY_SPACE: ("isspace", False), C.CATEGORY_NOT_SPACE: ("isspace", True),
}


class _Refused(Exception):
    """A construct that cannot be converted exactly; the message names it."""


@cache
def _category(category: object) -> Ranges:
    """The code points of a class escape as Python's `re` reads it on str patterns (Unicode)."""
    test, negated = _CATEGORIES[category]
    ranges = _python_class(test)
    if test == "isalnum":  # \w is alphanumerics plus "_"
        ranges = normalize_ranges(ranges + ((0x5F, 0x5F),))
    return complement_ranges(ranges) if negated else ranges


@cache
def _cased() -> tuple[int, ...]:
    """Every code point that `re` may fold to or from another one under IGNORECASE (sorted)."""
    out: set[int] = set()
    for cp in range(MAX_CODEPOINT + 1):
        if _sre.unicode_iscased(cp):
            out.add(cp)
            out.add(_sre.unicode_tolower(cp))
    for key, others in _compiler._EXTRA_CASES.items():
        out.add(key)
        out.update(others)
    return tuple(sorted(out))


def _class_ranges(items: list[tuple[object, object]]) -> Ranges:
    """The code points a `[...]` class matches, case-sensitively."""
    negate = bool(items) and items[0][0] is C.NEGATE
    ranges: list[tuple[int, int]] = []
    for op, av in items[1:] if negate else items:
        if op is C.LITERAL:
            ranges.append((av, av))  # type: ignore[arg-type]
        elif op is C.RANGE:
            ranges.append(av)  # type: ignore[arg-type]
        elif op is C.CATEGORY and av in _CATEGORIES:
            ranges.extend(_category(av))
        else:
            raise _Refused(f"class item {op} {av}")
    return complement_ranges(ranges) if negate else normalize_ranges(ranges)


def _frozen(av: object) -> object:
    """A hashable copy of a parse-tree argument (class items come as lists)."""
    return tuple(av) if isinstance(av, list) else av


@cache
def _char_ranges(op: object, av: object, flags: int) -> Ranges:
    """The code points one single-character item matches under `flags` (IGNORECASE, DOTALL)."""
    if op is C.ANY:
        return ((0, MAX_CODEPOINT),) if flags & re.DOTALL else complement_ranges(((0x0A, 0x0A),))
    if op is C.LITERAL:
        exact: Ranges = ((av, av),)  # type: ignore[assignment]
    elif op is C.NOT_LITERAL:
        exact = complement_ranges(((av, av),))  # type: ignore[arg-type]
    else:
        exact = _class_ranges(list(av))  # type: ignore[call-overload]
    if not flags & re.IGNORECASE:
        return exact
    # Folding only ever relates cased code points; for those, ask `re` itself what the item accepts.
    state = _parser.State()
    state.flags = flags | re.UNICODE
    item = [(op, list(av) if isinstance(av, tuple) else av)]
    matcher = _compiler.compile(_parser.SubPattern(state, item), state.flags)
    cased = _cased()
    folded = [(cp, cp) for cp in cased if matcher.fullmatch(chr(cp))]
    uncased = complement_ranges(normalize_ranges((cp, cp) for cp in cased))
    return normalize_ranges(intersect_ranges(exact, uncased) + tuple(folded))


class _Converter:
    """Turns one parsed pattern into IR; `at_start`/`at_end` say whether a piece sits at the lexeme's edge."""

    def sequence(self, items: list[tuple[object, Any]], flags: int, at_start: bool, at_end: bool) -> Node:
        """A concatenation; anchors at the lexeme's edges hold on every whole-lexeme match, so they drop."""
        items = list(getattr(items, "data", items))  # a SubPattern's own list: no __getitem__ call per item
        while at_start and items and items[0][0] is C.AT and items[0][1] in _BEGIN:
            items.pop(0)
        while at_end and items and items[-1][0] is C.AT and items[-1][1] in _END:
            items.pop()
        last = len(items) - 1
        folded = flags & _IGNORECASE
        return seq(*[_BYTE[av] if op is C.LITERAL and av < 0x80 and not folded  # `item` of an ASCII character
                     else self.item(op, av, flags, at_start and i == 0, at_end and i == last)
                     for i, (op, av) in enumerate(items)])

    def item(self, op: object, av: Any, flags: int, at_start: bool, at_end: bool) -> Node:
        """One parsed element under the flags in force there."""
        if op in _CHAR_OPS:
            return _raw_utf8_ir(_char_ranges(op, _frozen(av), flags & _CHAR_FLAGS))
        if op is C.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            if (add_flags | del_flags) & ~_SUPPORTED:
                raise _Refused("an inline flag other than i and s")
            return self.sequence(sub, (flags | add_flags) & ~del_flags, at_start, at_end)
        if op is C.BRANCH:
            return alt(*(self.sequence(b, flags, at_start, at_end) for b in av[1]))
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):  # lazy and greedy repeats match the same whole lexemes
            lo, hi, sub = av
            if hi == 0:
                return EMPTY
            body = self.sequence(sub, flags, False, False)
            return body if lo == hi == 1 else Repeat(body, lo, None if hi == C.MAXREPEAT else hi)
        if op is C.AT:
            if av in (C.AT_BOUNDARY, C.AT_NON_BOUNDARY):
                raise _Refused("a word boundary (\\b, \\B)")
            raise _Refused("an anchor that is not at the start or end of the pattern")
        raise _Refused(_REFUSED_OPS.get(op, f"the construct {op}"))


def _nullable(node: Node) -> bool:
    """Whether `node` matches the empty string."""
    if isinstance(node, Bytes):
        return False
    if isinstance(node, Seq):
        return all(map(_nullable, node.items))
    if isinstance(node, Alt):
        return any(map(_nullable, node.items))
    assert isinstance(node, Repeat)
    return node.min == 0 or _nullable(node.item)


def _matches_nothing(node: Node) -> bool:
    """Whether `node`'s language is empty."""
    if isinstance(node, Bytes):
        return node.mask == 0
    if isinstance(node, Seq):
        return any(map(_matches_nothing, node.items))
    if isinstance(node, Alt):
        return all(map(_matches_nothing, node.items))
    assert isinstance(node, Repeat)
    return node.min > 0 and _matches_nothing(node.item)


def _flag_bits(flags: Iterable[str], name: str) -> int:
    """The `re` flags of Lark's flag letters; letters other than i and s are refused."""
    bits = 0
    for f in sorted(flags):
        if f not in _FLAGS:
            raise GrammarError(f"terminal {name}: flag {f!r} is not supported (only i and s are)")
        bits |= _FLAGS[f]
    return bits


def _checked(node: Node, name: str, shown: str) -> Node:
    """`node`, refused if it matches the empty string or nothing at all (neither can be a lexeme)."""
    if _nullable(node):
        raise GrammarError(f"terminal {name} ({shown}) can match the empty string")
    if _matches_nothing(node):
        raise GrammarError(f"terminal {name} ({shown}) matches no string (its language is empty)")
    return node


# Lark idioms whose lexemes, as Lark's lexer cuts them (`re.match`, lazy quantifiers), form a regular language that
# the pattern's own full-match language is not: the lexeme language stands in for the pattern. common.lark's
# ESCAPED_STRING ends at the first quote after an even run of backslashes, and holds no newline.
LEXEME_IDIOMS = {
    r'".*?(?<!\\)(\\\\)*?"': r'"(?:[^"\\\n]|\\.)*"',
}


def regex_ir(pattern: str, flags: Iterable[str] = (), *, name: str) -> Node:
    """A terminal's lexemes: the UTF-8 byte strings that `re.fullmatch(pattern, text, flags)` accepts, as IR (for
    the idioms of LEXEME_IDIOMS: the lexemes Lark's lexer cuts with it); GrammarError if refused, or if it can
    match the empty string or nothing."""
    pattern = LEXEME_IDIOMS.get(pattern, pattern)
    flags = tuple(flags)
    return _checked(fullmatch_ir(pattern, flags, name=name), name, f"/{pattern}/" + "".join(sorted(flags)))


def fullmatch_ir(pattern: str, flags: Iterable[str] = (), *, name: str) -> Node:
    """The UTF-8 byte strings that `re.fullmatch(pattern, text, flags)` accepts, as IR (the empty string too, where
    it does); GrammarError naming `name` for a construct that is refused."""
    flags = tuple(flags)
    if not flags:
        if (options := _literal_options(pattern)) is not None:
            return _choice_ir(options)
        if (node := _simple_ir(pattern)) is not None:
            return node
    return _parsed_ir(pattern, flags, name)


_ESCAPE_CHARS = {"n": 10, "t": 9, "r": 13, "f": 12, "v": 11}
_ESCAPE_CATEGORIES = {"d": C.CATEGORY_DIGIT, "D": C.CATEGORY_NOT_DIGIT, "w": C.CATEGORY_WORD,
                      "W": C.CATEGORY_NOT_WORD, "s": C.CATEGORY_SPACE, "S": C.CATEGORY_NOT_SPACE}
_REPEATS = {"*": (0, None), "+": (1, None), "?": (0, 1)}


def _escape_item(c: str) -> tuple[object, object] | None:
    """re's item for the escape `\\c` (inside or outside a class): a character, or a class escape; None for the
    escapes left to re's parser (\\b, \\x, \\u, digits, letters)."""
    if c in _ESCAPE_CHARS:
        return (C.LITERAL, _ESCAPE_CHARS[c])
    if c in _ESCAPE_CATEGORIES:
        return (C.CATEGORY, _ESCAPE_CATEGORIES[c])
    return None if c.isascii() and c.isalnum() else (C.LITERAL, ord(c))


def _simple_ir(pattern: str) -> Node | None:
    """The converter's IR of a pattern that is a sequence of characters, `.`, escapes and `[...]` classes, each
    maybe under `*`, `+` or `?` (lazy or not), as re parses it (Lark's NAME, INT, whitespace); None for any other
    pattern (groups, `|`, counted repeats, anchors) and wherever re would refuse, so that re's parser gives its
    verdict."""
    out: list[Node] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "[":
            got = _class_items(pattern, i)
            if got is None:
                return None
            items, i = got
            node = _raw_utf8_ir(_char_ranges(C.IN, items, 0))
        elif c == "\\":
            if i == n or (item := _escape_item(pattern[i])) is None:
                return None
            i += 1
            node = _char_ir(item[1]) if item[0] is C.LITERAL else _raw_utf8_ir(_char_ranges(C.IN, (item,), 0))  # type: ignore[arg-type]
        elif c == ".":
            node = _raw_utf8_ir(_char_ranges(C.ANY, None, 0))
        elif c in "^$*+?{}[]|()":
            return None
        else:
            node = _char_ir(ord(c))
        if i < n and pattern[i] in _REPEATS:
            lo, hi = _REPEATS[pattern[i]]
            i += 1
            if i < n and pattern[i] == "?":  # lazy: the same whole lexemes
                i += 1
            if i < n and pattern[i] in "*+?{":  # a possessive or a second repeat: re's verdict
                return None
            node = Repeat(node, lo, hi)
        out.append(node)
    return seq(*out)


def _class_atom(pattern: str, i: int) -> tuple[tuple[object, object], int] | None:
    """re's item of the one class member at `i` (a character, or an escape `_escape_item` knows) and the index after
    it; None where re's parser is left to read it."""
    if pattern[i] != "\\":
        return (C.LITERAL, ord(pattern[i])), i + 1  # where re warns of a set operation or a nested set, it reads this too
    if i + 1 == len(pattern) or (item := _escape_item(pattern[i + 1])) is None:
        return None
    return item, i + 2


def _class_items(pattern: str, i: int) -> tuple[tuple[tuple[object, object], ...], int] | None:
    """re's items of the class whose body starts at `i` (after `[`), and the index after its `]`; None where re's
    parser is left to read it (an escape not in `_escape_item`, an error)."""
    n = len(pattern)
    items: list[tuple[object, object]] = []
    negate = i < n and pattern[i] == "^"
    i += negate
    while True:
        if i == n:
            return None
        if pattern[i] == "]" and items:
            i += 1
            break
        if (got := _class_atom(pattern, i)) is None:
            return None
        code1, i = got
        if i < n and pattern[i] == "-":
            i += 1
            if i == n:
                return None
            if pattern[i] == "]":
                items += [code1, (C.LITERAL, ord("-"))]
                i += 1
                break
            if (got := _class_atom(pattern, i)) is None:
                return None
            code2, i = got
            if code1[0] is not C.LITERAL or code2[0] is not C.LITERAL or code2[1] < code1[1]:  # type: ignore[operator]
                return None
            items.append((C.RANGE, (code1[1], code2[1])))
        else:
            items.append(code1)
    if negate:
        items.insert(0, (C.NEGATE, None))
    return tuple(items), i


def _literal_options(pattern: str) -> list[str] | None:
    """The strings of a pattern that is only literal characters and `|` (maybe inside one `(?:...)`), as Lark
    joins string alternatives (`"<" | "<=" | ">"`); None for any other pattern."""
    body = pattern[3:-1] if pattern.startswith("(?:") and pattern.endswith(")") else pattern
    if _CHOICE.fullmatch(body) is None:
        return None
    return [_ESCAPED.sub(r"\1", option) if "\\" in option else option for option in _OPTION.findall(body)]


def _char_ir(cp: int) -> Node:
    """The converter's IR of one literal character (no flags)."""
    return _BYTE[cp] if cp < 0x80 else _raw_utf8_ir(_char_ranges(C.LITERAL, cp, 0))


def _choice_ir(options: list[str]) -> Node:
    """The IR the converter makes of re's parse of a choice of literal strings: re moves the options' common
    prefix out of the branch, then makes a branch of single characters a class (re._parser._parse_sub)."""
    if len(options) == 1:
        return _string_ir(options[0])
    prefix = len(os.path.commonprefix(options))
    rest = list(dict.fromkeys([o[prefix:] for o in options]))
    if min(map(len, rest)) == 1 == max(map(len, rest)):
        tail = _raw_utf8_ir(_char_ranges(C.IN, tuple([(C.LITERAL, ord(r)) for r in rest]), 0))
    elif len(rest) == 1 or _SURROGATE.search("".join(rest)):
        tail = alt(*map(_string_ir, rest))
    else:  # distinct strings have distinct UTF-8 (alt's structural dedup would find nothing to drop)
        tail = Alt(tuple([lit(r.encode()) for r in rest]))  # `_string_ir` of each: no surrogate among them
    return seq(_string_ir(options[0][:prefix]), tail) if prefix else tail


def _string_ir(text: str) -> Node:
    """The converter's IR of a run of literal characters: their UTF-8 bytes (a lone surrogate has none)."""
    if _SURROGATE.search(text):
        return seq(*[_char_ir(ord(c)) for c in text])
    return lit(text.encode())


def _parsed_ir(pattern: str, flags: tuple[str, ...], name: str) -> Node:
    """`fullmatch_ir` through re's parser."""
    bits = _flag_bits(flags, name)
    shown = f"/{pattern}/" + "".join(sorted(flags))
    try:
        if _MAY_WARN.search(pattern):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = _parser.parse(pattern, bits)
        else:  # the parser warns of nothing here (entering `catch_warnings` costs as much as parsing `[0-9]+`)
            tree = _parser.parse(pattern, bits)
        if tree.state.flags & ~_SUPPORTED:
            raise _Refused("an inline flag other than i and s")
        node = _Converter().sequence(list(tree), tree.state.flags, True, True)
    except re.error as exc:
        raise GrammarError(f"terminal {name}: {shown} is not a valid regular expression ({exc})") from None
    except RecursionError:
        raise GrammarError(f"terminal {name}: {shown} nests too deeply") from None
    except _Refused as exc:
        raise GrammarError(f"terminal {name} ({shown}) uses {exc}, which is not supported") from None
    return node


def literal_ir(text: str, flags: Iterable[str] = (), *, name: str) -> Node:
    """The UTF-8 bytes of a string literal (with flag i: any casing `re` would accept); GrammarError if refused."""
    flags = tuple(flags)
    if flags:
        return regex_ir(re.escape(text), flags, name=name)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise GrammarError(f"terminal {name}: the literal {text!r} holds a lone surrogate (no UTF-8 form)") from None
    return lit(data) if data else _checked(EMPTY, name, repr(text))  # bytes: neither empty nor matching nothing
