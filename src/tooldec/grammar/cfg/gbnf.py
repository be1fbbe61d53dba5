"""GBNF (llama.cpp's grammar format) text to a ContextFreeGrammar.

GBNF has no lexer: it matches one character at a time. So every terminal here is one character class (a string
literal is a sequence of one-character terminals, `.` is any character) and identical classes share one
terminal. The reader is a tokenizer plus a loop with an explicit stack of open groups, so nesting depth never
reaches Python's recursion limit. A rule ends where the next `name ::=` begins: that reads every grammar
llama.cpp reads the same way, and also accepts rules whose lines continue without parentheses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tooldec.errors import GrammarError
from tooldec.grammar.cfg.model import ContextFreeGrammar, Rule, Terminal, nonterminal_symbol
from tooldec.grammar.cfg.normalize import normalize
from tooldec.grammar.strings import (
    MAX_CODEPOINT,
    SURROGATES,
    Ranges,
    _raw_utf8_ir,
    complement_ranges,
    intersect_ranges,
    normalize_ranges,
)

MAX_REPEAT = 10_000
"""Largest bound of a `{m,n}` repetition (each unit is copied into the grammar)."""

_NAME = re.compile(r"[A-Za-z0-9-]+")
_SPACE = re.compile(r"(?:[ \t\r\n]|#[^\n]*)+")
_BOUNDS = re.compile(r"\{[ \t\r\n]*(\d+)[ \t\r\n]*(?:(,)[ \t\r\n]*(\d+)?[ \t\r\n]*)?\}")
_ESCAPES = {"n": 0x0A, "r": 0x0D, "t": 0x09, "\\": 0x5C, '"': 0x22, "[": 0x5B, "]": 0x5D}
_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}
_SINGLE = {"(": "(", ")": ")", "|": "|", "?": "?", "*": "*", "+": "+", ".": "."}
_NO_SURROGATES = complement_ranges((SURROGATES,))

Elem = tuple[int, ...]
"""One element of a sequence (a literal, a class, a reference, a group) as the symbols it stands for."""


@dataclass(frozen=True)
class _Token:
    """A lexical unit: its kind, its value (name, code points, ranges or bounds) and where it starts."""

    kind: str
    value: object
    offset: int


@dataclass
class _Frame:
    """An open group (or the rule body itself): its alternatives so far and where it opened."""

    offset: int
    alts: list[list[Elem]] = field(default_factory=lambda: [[]])


def _error(text: str, offset: int, message: str) -> GrammarError:
    """A GrammarError at a character offset of the grammar text."""
    line = text.count("\n", 0, offset) + 1
    return GrammarError(message, line=line, column=offset - (text.rfind("\n", 0, offset) + 1) + 1)


def _read_char(text: str, i: int) -> tuple[int, int]:
    """The code point written at `i` (raw or escaped) and the offset after it."""
    if i >= len(text):
        raise _error(text, i, "unexpected end of grammar inside a literal or class")
    if text[i] != "\\":
        cp, end = ord(text[i]), i + 1
    elif text[i + 1 : i + 2] in _ESCAPES:
        cp, end = _ESCAPES[text[i + 1]], i + 2
    elif text[i + 1 : i + 2] in _HEX_DIGITS:
        digits = text[i + 2 : i + 2 + _HEX_DIGITS[text[i + 1]]]
        if len(digits) != _HEX_DIGITS[text[i + 1]] or not all(c in "0123456789abcdefABCDEF" for c in digits):
            raise _error(text, i, f"escape \\{text[i + 1]} needs {_HEX_DIGITS[text[i + 1]]} hex digits")
        cp, end = int(digits, 16), i + 2 + len(digits)
    else:
        raise _error(text, i, f"unknown escape {text[i:i + 2]!r}")
    if cp > MAX_CODEPOINT or SURROGATES[0] <= cp <= SURROGATES[1]:
        raise _error(text, i, f"U+{cp:04X} is not a character with a UTF-8 form")
    return cp, end


def _read_string(text: str, start: int) -> tuple[tuple[int, ...], int]:
    """The code points of the string literal opening at `start`, and the offset after its closing quote."""
    i, out = start + 1, []
    while i < len(text) and text[i] != '"':
        cp, i = _read_char(text, i)
        out.append(cp)
    if i >= len(text):
        raise _error(text, start, "unterminated string literal")
    return tuple(out), i + 1


def _read_class(text: str, start: int) -> tuple[Ranges, int]:
    """The code points of the `[...]` class opening at `start`, and the offset after its `]`."""
    i = start + 1
    negated = text.startswith("^", i)
    i += negated
    ranges: list[tuple[int, int]] = []
    while i < len(text) and text[i] != "]":
        item = i
        lo, i = _read_char(text, i)
        hi = lo
        if text.startswith("-", i) and i + 1 < len(text) and text[i + 1] != "]":
            hi, i = _read_char(text, i + 1)
            if hi < lo:
                raise _error(text, item, f"character range {text[item:i]!r} runs backwards")
        ranges.append((lo, hi))
    if i >= len(text):
        raise _error(text, start, "unterminated character class")
    return (complement_ranges(ranges) if negated else normalize_ranges(ranges)), i + 1


def _tokens(text: str) -> list[_Token]:
    """The grammar text as tokens; whitespace, newlines and `#` comments only separate them."""
    out: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        if (space := _SPACE.match(text, i)) is not None:
            i = space.end()
            continue
        c = text[i]
        if (name := _NAME.match(text, i)) is not None:
            out.append(_Token("name", name.group(), i))
            i = name.end()
        elif text.startswith("::=", i):
            out.append(_Token("def", None, i))
            i += 3
        elif c == '"':
            points, end = _read_string(text, i)
            out.append(_Token("string", points, i))
            i = end
        elif c == "[":
            ranges, end = _read_class(text, i)
            out.append(_Token("class", ranges, i))
            i = end
        elif c == "{":
            bounds = _BOUNDS.match(text, i)
            if bounds is None:
                raise _error(text, i, "a repetition is written {m}, {m,} or {m,n}")
            lo = int(bounds.group(1))
            hi = lo if bounds.group(2) is None else (None if bounds.group(3) is None else int(bounds.group(3)))
            if max(lo, hi or 0) > MAX_REPEAT or (hi is not None and hi < lo):
                raise _error(text, i, f"repetition {bounds.group()} is out of order or exceeds {MAX_REPEAT}")
            out.append(_Token("repeat", (lo, hi), i))
            i = bounds.end()
        elif c in _SINGLE:
            out.append(_Token(_SINGLE[c], c, i))
            i += 1
        else:
            raise _error(text, i, f"unexpected character {c!r}")
    return out


class _Reader:
    """Builds the BNF rules, terminals and helper nonterminals while it walks the tokens."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.defined: set[int] = set()
        self.first_use: dict[int, int] = {}
        self.rules: list[Rule] = []
        self.terminals: list[Terminal] = []
        self.term_index: dict[Ranges, int] = {}
        self.derived: dict[tuple[str, Elem], int] = {}

    def nonterminal(self, name: str) -> int:
        """The index of the nonterminal `name`, created on first mention."""
        if name not in self.index:
            self.index[name] = len(self.names)
            self.names.append(name)
        return self.index[name]

    def fresh(self, base: str, kind: str) -> int:
        """A new helper nonterminal; `_` never occurs in GBNF names, so it cannot clash with one."""
        return self.nonterminal(f"{base}__{kind}{len(self.names)}")

    def char_class(self, ranges: Ranges) -> Elem:
        """One character from `ranges`: its shared terminal, or a rule-less nonterminal if it is empty."""
        ranges = intersect_ranges(ranges, _NO_SURROGATES)
        if not ranges:
            return (nonterminal_symbol(self.nonterminal("__nothing")),)
        if ranges not in self.term_index:
            self.term_index[ranges] = len(self.terminals)
            self.terminals.append(Terminal(_describe(ranges), _raw_utf8_ir(ranges)))
        return (self.term_index[ranges],)

    def derive(self, kind: str, elem: Elem, base: str) -> Elem:
        """`elem` under `?`, `*` or `+`, as one helper nonterminal (shared by identical uses)."""
        if not elem:
            return ()
        key = (kind, elem)
        if key not in self.derived:
            nt = self.derived[key] = self.fresh(base, {"?": "opt", "*": "star", "+": "plus"}[kind])
            sym = nonterminal_symbol(nt)
            self.rules.append(Rule(nt, () if kind == "*" else elem))
            self.rules.append(Rule(nt, (sym, *elem) if kind != "?" else ()))
        return (nonterminal_symbol(self.derived[key]),)

    def repeat(self, elem: Elem, lo: int, hi: int | None, base: str) -> Elem:
        """`elem` between `lo` and `hi` times (None = unbounded): copies, then nested optionals."""
        if hi is None:
            return elem * lo + self.derive("*", elem, base)
        tail: Elem = ()
        for _ in range(hi - lo):
            tail = self.derive("?", elem + tail, base)
        return elem * lo + tail

    def group(self, alts: list[list[Elem]], base: str) -> Elem:
        """A parenthesized group: inlined when it has one alternative, else a helper nonterminal."""
        bodies = [tuple(s for e in alt for s in e) for alt in alts]
        if len(bodies) == 1:
            return bodies[0]
        nt = self.fresh(base, "group")
        self.rules.extend(Rule(nt, body) for body in bodies)
        return (nonterminal_symbol(nt),)

    def element(self, tok: _Token) -> Elem:
        """The symbols of a reference, literal, class or `.`."""
        if tok.kind == "name":
            nt = self.nonterminal(str(tok.value))
            self.first_use.setdefault(nt, tok.offset)
            return (nonterminal_symbol(nt),)
        if tok.kind == "string":
            return tuple(s for cp in tok.value for s in self.char_class(((cp, cp),)))  # type: ignore[attr-defined]
        if tok.kind == "class":
            return self.char_class(tok.value)  # type: ignore[arg-type]
        return self.char_class(((0, MAX_CODEPOINT),))

    def body(self, tokens: list[_Token], p: int, name: str, start: int) -> int:
        """Read one rule body from token `p` to the next definition; return where it stopped."""
        stack = [_Frame(start)]
        while p < len(tokens) and not (tokens[p].kind == "name" and p + 1 < len(tokens)
                                       and tokens[p + 1].kind == "def"):
            tok = tokens[p]
            p += 1
            seq = stack[-1].alts[-1]
            if tok.kind in ("name", "string", "class", "."):
                seq.append(self.element(tok))
            elif tok.kind == "(":
                stack.append(_Frame(tok.offset))
            elif tok.kind == ")":
                if len(stack) == 1:
                    raise _error(self.text, tok.offset, "')' without a matching '('")
                alts = stack.pop().alts
                stack[-1].alts[-1].append(self.group(alts, name))
            elif tok.kind == "|":
                stack[-1].alts.append([])
            elif tok.kind in ("?", "*", "+", "repeat"):
                if not seq:
                    raise _error(self.text, tok.offset, "a repetition operator needs an item before it")
                if tok.kind == "repeat":
                    seq[-1] = self.repeat(seq[-1], *tok.value, base=name)  # type: ignore[misc]
                else:
                    seq[-1] = self.derive(tok.kind, seq[-1], name)
            else:
                raise _error(self.text, tok.offset, "'::=' must follow a rule name at the start of a rule")
        if len(stack) > 1:
            raise _error(self.text, stack[-1].offset, "'(' is never closed")
        nt = self.index[name]
        self.rules.extend(Rule(nt, tuple(s for e in alt for s in e)) for alt in stack[0].alts)
        return p

    def read(self) -> ContextFreeGrammar:
        """The whole grammar, before normalization; GrammarError on bad syntax or undefined names."""
        tokens = _tokens(self.text)
        p = 0
        while p < len(tokens):
            tok = tokens[p]
            if tok.kind != "name" or p + 1 >= len(tokens) or tokens[p + 1].kind != "def":
                raise _error(self.text, tok.offset, "expected a rule definition 'name ::= ...'")
            nt = self.nonterminal(str(tok.value))
            if nt in self.defined:
                raise _error(self.text, tok.offset, f"rule {tok.value!r} is defined more than once")
            self.defined.add(nt)
            p = self.body(tokens, p + 2, str(tok.value), tok.offset)
        undefined = [(off, nt) for nt, off in self.first_use.items() if nt not in self.defined]
        if undefined:
            offset, nt = min(undefined)
            raise _error(self.text, offset, f"rule {self.names[nt]!r} is used but never defined")
        if "root" not in self.index:
            raise GrammarError("the grammar has no 'root' rule (a GBNF grammar starts at root)")
        return ContextFreeGrammar(tuple(self.terminals), tuple(self.names), tuple(self.rules),
                                  start=self.index["root"], priorities=False)


_CLASS_SPECIAL = "\\]-^"
_SHORT = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}


def _show(cp: int, special: str) -> str:
    """One code point as written in a terminal's name: escaped if unprintable or one of `special`."""
    ch = chr(cp)
    if ch.isprintable():
        return "\\" + ch if ch in special else ch
    return _SHORT.get(cp) or (f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}")


def _describe(ranges: Ranges) -> str:
    """A readable, unique name for a one-character terminal: `"a"` for one character, else a class."""
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return '"' + _show(ranges[0][0], '\\"') + '"'
    shown = (_show(lo, _CLASS_SPECIAL) + ("" if lo == hi else "-" + _show(hi, _CLASS_SPECIAL)) for lo, hi in ranges)
    return "[" + "".join(shown) + "]"


def parse_gbnf(text: str) -> ContextFreeGrammar:
    """Read a GBNF grammar (start symbol `root`) into the normalized BNF model; GrammarError if refused."""
    return normalize(_Reader(text).read())
