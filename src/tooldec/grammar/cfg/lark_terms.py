"""Lark terminal definitions to single patterns, and the names Lark gives to anonymous terminals.

A terminal's body (strings, regexes, ranges, references to other terminals, groups, operators) is joined into
one regex the way Lark joins it (alternatives longest first), so a terminal reads to exactly the pattern Lark
would hand its lexer, and equal patterns are recognized as the same terminal.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from functools import cache
from re import _parser  # type: ignore[attr-defined]
from typing import NamedTuple

from tooldec.errors import GrammarError
from tooldec.grammar.cfg.lark_reader import Node

_TERMINAL_NAMES = {
    ".": "DOT", ",": "COMMA", ":": "COLON", ";": "SEMICOLON", "+": "PLUS", "-": "MINUS", "*": "STAR",
    "/": "SLASH", "\\": "BACKSLASH", "|": "VBAR", "?": "QMARK", "!": "BANG", "@": "AT", "#": "HASH",
    "$": "DOLLAR", "%": "PERCENT", "^": "CIRCUMFLEX", "&": "AMPERSAND", "_": "UNDERSCORE", "<": "LESSTHAN",
    ">": "MORETHAN", "=": "EQUAL", '"': "DBLQUOTE", "'": "QUOTE", "`": "BACKQUOTE", "~": "TILDE", "(": "LPAR",
    ")": "RPAR", "{": "LBRACE", "}": "RBRACE", "[": "LSQB", "]": "RSQB", "\n": "NEWLINE", "\r\n": "CRLF",
    "\t": "TAB", " ": "SPACE",
}
"""Lark's names for anonymous one-symbol string terminals (part of the dialect: token types carry them)."""

_ID_START = frozenset(("Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Pc"))
_ID_CONTINUE = _ID_START | {"Nd", "Nl"}
_ASCII_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Pattern(NamedTuple):
    """A string ("str") or regex ("re") pattern with its flags, equal to another when Lark's would be (a named
    tuple: every literal in a rule makes one, and it keys the terminal names; a frozen dataclass hashes in
    Python)."""

    kind: str
    value: str
    flags: frozenset[str] = frozenset()

    def to_regexp(self) -> str:
        """The pattern as a regex, flags applied as inline groups."""
        value = re.escape(self.value) if self.kind == "str" else self.value
        for flag in sorted(self.flags):
            value = f"(?{flag}:{value})"
        return value

    def widths(self) -> tuple[int, int]:
        """Shortest and longest match length (as `re`'s parser computes it for regexes)."""
        if self.kind == "str":
            return len(self.value), len(self.value)
        return _regex_widths(self.to_regexp())


@cache
def _regex_widths(regex: str) -> tuple[int, int]:
    """`re`'s width bounds of a regex; GrammarError if `re` cannot parse it."""
    try:
        lo, hi = _parser.parse(regex).getwidth()
    except re.error as exc:
        raise GrammarError(f"invalid Lark grammar: {regex!r} is not a valid regular expression ({exc})") from None
    return int(lo), int(hi)


def _joined(parts: list[Pattern], kind: str) -> Pattern:
    """Lark's pattern for a concatenation ("seq") or a choice ("alts") of patterns."""
    if len(parts) == 1:
        return parts[0]
    if kind == "seq":
        return Pattern("str", "") if not parts else Pattern("re", "".join(p.to_regexp() for p in parts))

    def longest_first(p: Pattern) -> tuple[int, int, int]:
        lo, hi = p.widths()
        return -hi, -lo, -len(p.value)

    ordered = sorted(parts, key=longest_first)
    return Pattern("re", "(?:" + "|".join(p.to_regexp() for p in ordered) + ")")


def _repeated(inner: Pattern, op: str, lo: int, hi: int) -> Pattern:
    """Lark's pattern for `inner` under ?, *, + or ~ lo..hi."""
    if op == "~":
        op = f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}"
    return Pattern("re", f"(?:{inner.to_regexp()}){op}", inner.flags)


def term_pattern(name: str, tree: Node, resolve: Callable[[str], Pattern]) -> Pattern:
    """The single pattern of terminal `name`'s body; `resolve` gives the pattern of a referenced terminal.

    Raises GrammarError for an empty terminal, or a rule or a template inside a terminal."""
    if tree == ("alts", ("seq",)):
        raise GrammarError(f"invalid Lark grammar: Terminals cannot be empty ({name})")
    done: dict[int, Pattern] = {}
    order, i = [tree], 0
    while i < len(order):  # breadth first; read backwards, every node comes after its children
        node = order[i]
        i += 1
        if node[0] in ("alts", "seq", "tmpl"):
            order.extend(c for c in node[1:] if isinstance(c, tuple))
        elif node[0] == "expr":
            order.append(node[1])
    for node in reversed(order):
        kind = node[0]
        if kind == "P":
            pattern = Pattern(node[1], node[2], node[3])
        elif kind == "T":
            pattern = resolve(node[1])
        elif kind in ("seq", "alts"):
            pattern = _joined([done[id(c)] for c in node[1:]], kind)
        elif kind == "expr":
            pattern = _repeated(done[id(node[1])], node[2], node[3], node[4])
        elif kind == "N":
            raise GrammarError(f"invalid Lark grammar: Rules aren't allowed inside terminals ({node[1]} in {name})")
        else:
            raise GrammarError(f"invalid Lark grammar: templates are not allowed inside terminals ({name})")
        done[id(node)] = pattern
    return done[id(tree)]


def _is_identifier(value: str) -> bool:
    """Whether Lark would name a string terminal after its value (a Unicode identifier)."""
    if value.isascii():
        return _ASCII_ID.fullmatch(value) is not None
    return all(c == "_" or unicodedata.category(c) in _ID_CONTINUE for c in value) and (
        value[0] == "_" or unicodedata.category(value[0]) in _ID_START)


class AnonymousTerminals:
    """The terminal list, grown with a terminal for each new pattern written inside a rule, named as Lark does."""

    def __init__(self, terminals: list[tuple[str, Pattern, int]]) -> None:
        self.terminals = terminals  # (name, pattern, priority), in Lark's order
        self.names = {name for name, _p, _prio in terminals}
        self.by_pattern = {pattern: name for name, pattern, _prio in terminals}
        self.count = 0

    def name(self, pattern: Pattern) -> str:
        """The terminal a pattern in a rule stands for: a defined one with that pattern, or a new one."""
        found = self.by_pattern.get(pattern)
        if found is not None:
            return found
        name = None
        if pattern.kind == "str":
            name = _TERMINAL_NAMES.get(pattern.value)
            if name is None and _is_identifier(pattern.value) and pattern.value.upper() not in self.names:
                name = pattern.value.upper()
            if name in self.names:
                name = None
        if name is None:
            name = f"__ANON_{self.count}"
            self.count += 1
        if name not in self.names:
            self.names.add(name)
            self.by_pattern[pattern] = name
            self.terminals.append((name, pattern, 0))
        return name
