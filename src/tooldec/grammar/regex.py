"""JSON Schema `pattern` (ECMA-262 regex, search semantics) and `format` values as IR over canonical JSON.

The stdlib parser gives the syntax tree; where ECMA and Python read a construct differently, the IR takes
the strings both readings accept (`\\d` is ASCII only, `.` excludes every ECMA line terminator, `$` is the
end of the string), so whatever it admits passes Python's `jsonschema` and an ECMA validator alike.
Constructs whose readings diverge in ways that cannot be reconciled are refused, never approximated.
"""

from __future__ import annotations

import re
import warnings
from functools import cache, lru_cache
from re import _constants as C  # type: ignore[attr-defined]
from re import _parser  # type: ignore[attr-defined]

import numpy as np

from tooldec.errors import UnsupportedSchemaError
from tooldec.grammar.ir import EMPTY, Bytes, Node, Repeat, alt, opt, seq, star
from tooldec.grammar.strings import (
    MAX_CODEPOINT,
    Ranges,
    codepoints_ir,
    complement_ranges,
    intersect_ranges,
    normalize_ranges,
)

MAX_LEAVES = 20_000

_ECMA_SPACE: Ranges = ((0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
                       (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000),
                       (0xFEFF, 0xFEFF))
_ECMA_DOT = complement_ranges(((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)))
_PYTHON_DOT = complement_ranges(((0x0A, 0x0A),))  # a superset of ECMA's
_ASCII_DIGIT: Ranges = ((0x30, 0x39),)
_ASCII_WORD: Ranges = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))

_BEGIN = (C.AT_BEGINNING, C.AT_BEGINNING_STRING)
_END = (C.AT_END, C.AT_END_STRING)
_EDGE_OPS = (C.AT, C.SUBPATTERN, C.BRANCH)  # elements that read the edge context (anchors), or pass it inward
_REFUSED_OPS = {
    C.GROUPREF: "backreferences",
    C.GROUPREF_EXISTS: "conditional groups",
    C.ASSERT: "lookaround assertions",
    C.ASSERT_NOT: "lookaround assertions",
    C.ATOMIC_GROUP: "atomic groups (not ECMA-262)",
    C.POSSESSIVE_REPEAT: "possessive quantifiers (not ECMA-262)",
}
# Escapes Python reads specially but ECMA reads as the bare letter (or rejects).
_PYTHON_ONLY_ESCAPES = {"a": "\\a (bell)", "U": "\\U", "N": "\\N{...}"}


class _Refused(Exception):
    """A pattern construct that cannot be enforced soundly; carries the detail for the schema error."""


_RUNS = {"isdecimal": r"\d+", "isalnum": r"\w+", "isspace": r"\s+"}
"""Per `str` predicate, the runs `re` matches where it holds: CPython's `re` reads `\\d`, `\\w` and `\\s` through the
same Unicode tables as `str.isdecimal`, `isalnum` (with `_` added) and `isspace`."""


@cache
def _python_class(test: str) -> Ranges:
    """The code points for which the named `str` predicate holds: what Python's `re` uses for `\\d\\w\\s`. Found
    by `re` over one string of every code point (0.75 s a class as a loop of the predicate, ~0.1 s so)."""
    every = np.arange(MAX_CODEPOINT + 1, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")
    runs = tuple((m.start(), m.end() - 1) for m in re.finditer(_RUNS[test], every))
    return intersect_ranges(runs, complement_ranges(((0x5F, 0x5F),))) if test == "isalnum" else runs


_CATEGORIES = {
    C.CATEGORY_DIGIT: ("isdecimal", False), C.CATEGORY_NOT_DIGIT: ("isdecimal", True),
    C.CATEGORY_WORD: ("isalnum", False), C.CATEGORY_NOT_WORD: ("isalnum", True),
    C.CATEGORY_SPACE: ("isspace", False), C.CATEGORY_NOT_SPACE: ("isspace", True),
}
_ECMA_CATEGORY = {"isdecimal": _ASCII_DIGIT, "isalnum": _ASCII_WORD, "isspace": _ECMA_SPACE}


@cache
def _category_bounds(category: object) -> tuple[Ranges, Ranges]:
    """(lower, upper) for a class escape: the code points in it under both readings / under either one."""
    test, negated = _CATEGORIES[category]
    ecma, python = _ECMA_CATEGORY[test], _python_class(test)
    if test == "isalnum":  # Python's \w is alphanumerics plus "_"
        python = normalize_ranges(python + ((0x5F, 0x5F),))
    lower, upper = intersect_ranges(ecma, python), normalize_ranges(ecma + python)
    return (complement_ranges(upper), complement_ranges(lower)) if negated else (lower, upper)


def _class_ranges(items: list[tuple[object, object]], upper: bool = False) -> Ranges:
    """The code points a `[...]` class surely matches: negated classes exclude anything either reading has.

    With `upper`, the code points it may match under either reading instead.
    """
    negate = bool(items) and items[0][0] is C.NEGATE
    ranges: list[tuple[int, int]] = []
    for op, av in items[1:] if negate else items:
        if op is C.LITERAL:
            ranges.append((av, av))  # type: ignore[arg-type]
        elif op is C.RANGE:
            ranges.append(av)  # type: ignore[arg-type]
        elif op is C.CATEGORY:
            ranges.extend(_category_bounds(av)[int(negate != upper)])
        else:
            raise _Refused(f"class item {op}")
    return complement_ranges(ranges) if negate else normalize_ranges(ranges)


def _ecma_to_python(pattern: str) -> str:
    """Rewrite ECMA-only syntax for Python's parser; refuse syntax the two languages read differently."""
    out: list[str] = []
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            if pattern[i + 1] in _PYTHON_ONLY_ESCAPES:
                raise _Refused(f"escape {_PYTHON_ONLY_ESCAPES[pattern[i + 1]]} means different things in ECMA")
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            start = i + 2 if pattern.startswith("[^", i) else i + 1
            if pattern.startswith("]", start):
                raise _Refused("a class starting with ']' ([] or [^]) means different things in ECMA")
            out.append(pattern[i:start])
            i, in_class = start, True
            continue
        elif pattern.startswith("(?<", i) and not pattern.startswith(("(?<=", "(?<!"), i):
            out.append("(?P<")
            i += 3
            continue
        elif pattern.startswith("{,", i):
            raise _Refused("'{,n}' is a literal in ECMA but a quantifier in Python")
        out.append(c)
        i += 1
    return "".join(out)


class _Converter:
    """Turns a parsed pattern into IR, tracking for each piece whether it sits at an edge of the pattern.

    The default reading is the *lower* bound: strings both ECMA-262 and Python's `re` match. With `upper`, it
    is the *upper* bound: strings either may match (Unicode classes, `.` short of `\n` only, and `$` before a
    final newline as Python allows), so a string outside it surely does not match under either reading.
    """

    # `before`/`after` below: True = this piece starts/ends the pattern unanchored (any text may precede /
    # follow it), False = it starts/ends the pattern at an anchor, None = interior (an anchor is refused).

    def __init__(self, upper: bool = False) -> None:
        self.upper = upper
        self.any_star = star(codepoints_ir(((0, MAX_CODEPOINT),)))

    def sequence(self, items: list[tuple[object, object]], before: bool | None, after: bool | None) -> Node:
        """A concatenation, consuming anchors that sit at the pattern's edges."""
        items = list(items)
        while items and items[0][0] is C.AT and items[0][1] in _BEGIN and before is not None:
            before = False
            items.pop(0)
        newline = False  # Python's `$` also matches before a final "\n"
        while items and items[-1][0] is C.AT and items[-1][1] in _END and after is not None:
            after = False
            newline |= items[-1][1] is C.AT_END
            items.pop()
        tail = opt(codepoints_ir(((0x0A, 0x0A),))) if newline and self.upper else EMPTY
        if not items:
            return seq(self.any_star if before or after else EMPTY, tail)
        last = len(items) - 1
        return seq(*(self.item(op, av, before if i == 0 else None, after if i == last else None)
                     for i, (op, av) in enumerate(items)), tail)

    def item(self, op: object, av: object, before: bool | None, after: bool | None) -> Node:
        """One parsed element; groups and alternations pass the edge context into their contents."""
        if op is C.SUBPATTERN:
            _group, add_flags, del_flags, sub = av  # type: ignore[misc]
            if add_flags or del_flags:
                raise _Refused("inline flags")
            return self.sequence(sub, before, after)
        if op is C.BRANCH:
            return self.branches(av[1], before, after)  # type: ignore[index]
        return seq(self.any_star if before else EMPTY, self.atom(op, av), self.any_star if after else EMPTY)

    def branches(self, branches: list[list[tuple[object, object]]], before: bool | None, after: bool | None) -> Node:
        """An alternation. Unanchored branches share one `.*` on each open side: `.*(a|b).*`, not `.*a.*|.*b.*`,
        whose subset construction tells apart every set of branches matched so far (2^n states, n branches)."""
        open_before, open_after = before is True, after is True

        def shares(items: list[tuple[object, object]]) -> bool:
            # a branch whose open edges hold plain elements: its edge `.*` is all the edge context gives it
            return not items or all(op not in _EDGE_OPS for op, _ in
                                    ([items[0]] if open_before else []) + ([items[-1]] if open_after else []))

        if not (open_before or open_after):
            return alt(*(self.sequence(b, before, after) for b in branches))
        shared = [b for b in branches if shares(b)]
        own = [self.sequence(b, before, after) for b in branches if not shares(b)]
        if not shared:
            return alt(*own)
        inner = alt(*(self.sequence(b, False if open_before else before, False if open_after else after)
                      for b in shared))
        factored = seq(self.any_star if open_before else EMPTY, inner, self.any_star if open_after else EMPTY)
        return alt(factored, *own)

    def atom(self, op: object, av: object) -> Node:
        """An element that is neither a group nor an alternation."""
        if op is C.LITERAL:
            return codepoints_ir(((av, av),))  # type: ignore[arg-type]
        if op is C.NOT_LITERAL:
            return codepoints_ir(complement_ranges(((av, av),)))  # type: ignore[arg-type]
        if op is C.ANY:
            return codepoints_ir(_PYTHON_DOT if self.upper else _ECMA_DOT)
        if op is C.IN:
            return codepoints_ir(_class_ranges(av, self.upper))  # type: ignore[arg-type]
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            lo, hi, sub = av  # type: ignore[misc]
            if hi == 0:
                return EMPTY
            body = self.sequence(sub, None, None)
            return body if lo == hi == 1 else Repeat(body, lo, None if hi == C.MAXREPEAT else hi)
        if op is C.AT:
            if av in (C.AT_BOUNDARY, C.AT_NON_BOUNDARY):
                raise _Refused("word boundaries (\\b, \\B)")
            raise _Refused("an anchor that is not at the start or end of the pattern")
        raise _Refused(_REFUSED_OPS.get(op, f"construct {op}"))


def _leaves(node: Node, memo: dict[int, int]) -> int:
    """How many byte leaves `node` has once bounded repeats are unrolled (the automaton's cost)."""
    key = id(node)
    if key not in memo:
        if isinstance(node, Bytes):
            size = 1
        elif isinstance(node, Repeat):
            copies = max(node.min, 1) if node.max is None else node.max
            sep = _leaves(node.sep, memo) if node.sep is not None else 0
            size = copies * _leaves(node.item, memo) + max(copies - 1, 0) * sep
        else:
            size = sum(_leaves(it, memo) for it in node.items)  # type: ignore[arg-type]
        memo[key] = size
    return memo[key]


@lru_cache(maxsize=512)
def _pattern_ir(pattern: str, upper: bool = False) -> Node:
    """Cached body of `pattern_ir` (and of `pattern_upper_ir`); raises `_Refused`."""
    source = _ecma_to_python(pattern)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = _parser.parse(source)
    except re.error as exc:
        raise _Refused(f"not a regex Python can parse ({exc})") from None
    if tree.state.flags & ~C.SRE_FLAG_UNICODE:
        raise _Refused("inline flags")
    node = _Converter(upper).sequence(list(tree), True, True)
    size = _leaves(node, {})
    if size > MAX_LEAVES:
        raise _Refused(f"bounded repeats expand to {size} byte leaves (limit {MAX_LEAVES})")
    return node


def pattern_ir(pattern: str, *, path: str = "#") -> Node:
    """The canonical JSON string bodies of the strings in which the ECMA-262 `pattern` finds a match."""
    try:
        return _pattern_ir(pattern)
    except _Refused as exc:
        raise UnsupportedSchemaError("pattern", path=path, detail=f"{pattern!r}: {exc}") from None


def pattern_upper_ir(pattern: str, *, path: str = "#") -> Node:
    """Canonical JSON string bodies in which ECMA-262 or Python *may* find a match of `pattern`.

    A superset of `pattern_ir`: a string outside it matches under neither reading (patternProperties uses it
    to tell which keys a pattern surely does not govern). Refuses exactly what `pattern_ir` refuses.
    """
    try:
        return _pattern_ir(pattern, True)
    except _Refused as exc:
        raise UnsupportedSchemaError("pattern", path=path, detail=f"{pattern!r}: {exc}") from None


_YEAR = r"(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})"
_LEAP_YEAR = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_MONTH_DAY = (r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
              r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
              r"|02-(?:0[1-9]|1[0-9]|2[0-8]))")
_DATE = rf"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
_HOUR = r"(?:[01][0-9]|2[0-3])"
_TIME = rf"{_HOUR}:[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:Z|[+-]{_HOUR}:[0-5][0-9])"
_LABEL63 = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_LABEL30 = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,28}[A-Za-z0-9])?"
_HEX = r"[0-9A-Fa-f]"
_H16 = rf"{_HEX}{{1,4}}"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_PCT = rf"%{_HEX}{{2}}"
_PCHAR = rf"(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|{_PCT})"
_URI_AUTHORITY = rf"(?:(?:[A-Za-z0-9._~!$&'()*+,;=:-]|{_PCT})*@)?(?:[A-Za-z0-9._~!$&'()*+,;=-]|{_PCT})*(?::[0-9]*)?"
_URI_PATH = rf"(?://{_URI_AUTHORITY}(?:/{_PCHAR}*)*|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?|{_PCHAR}+(?:/{_PCHAR}*)*)?"
_URI_TAIL = rf"(?:{_PCHAR}|[/?])*"
_URI = rf"[A-Za-z][A-Za-z0-9+.-]*:{_URI_PATH}(?:\?{_URI_TAIL})?(?:#{_URI_TAIL})?"
# RFC 3986's relative-ref: a network path, an absolute path, or a relative one whose first segment has no colon
_SEGMENT_NC = rf"(?:[A-Za-z0-9._~!$&'()*+,;=@-]|{_PCT})"
_RELATIVE_REF = (rf"(?://{_URI_AUTHORITY}(?:/{_PCHAR}*)*|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?|{_SEGMENT_NC}+(?:/{_PCHAR}*)*)?"
                 rf"(?:\?{_URI_TAIL})?(?:#{_URI_TAIL})?")
# RFC 6570 (levels 1-4) as the `uri_template` package (jsonschema's checker) also reads it: ASCII literals, no
# operators reserved for future extensions (= , ! @ |), variable names without percent-escapes, prefixes below 1,000
_TEMPLATE_LITERAL = rf"(?:[!#$&()*+,./0-9:;=?@A-Z\[\]_a-z~-]|{_PCT})"
_VARSPEC = r"[A-Za-z0-9_](?:\.?[A-Za-z0-9_])*(?::[1-9][0-9]{0,2}|\*)?"
_JSON_POINTER = r"(?:/(?:[^/~]|~[01])*)*"

_FORMATS = {
    "date": _DATE,
    "time": _TIME,
    "date-time": rf"{_DATE}T{_TIME}",
    "email": r"[A-Za-z0-9_%+-]+(?:\.[A-Za-z0-9_%+-]+)*@" + rf"{_LABEL63}(?:\.{_LABEL63})+",
    "uri": _URI,
    "uri-reference": rf"{_URI}|{_RELATIVE_REF}",
    "uri-template": rf"(?:{_TEMPLATE_LITERAL}|\{{[+#./;?&]?{_VARSPEC}(?:,{_VARSPEC})*\}})*",
    "json-pointer": _JSON_POINTER,
    # at most 99 levels up: jsonschema's checker refuses any digit after a 0 (100 among them)
    "relative-json-pointer": rf"(?:0|[1-9][0-9]?)(?:#|{_JSON_POINTER})",
    "uuid": rf"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}",
    "ipv4": rf"{_OCTET}(?:\.{_OCTET}){{3}}",
    "ipv6": "|".join((
        rf"(?:{_H16}:){{7}}{_H16}",
        rf"(?:{_H16}:){{1,7}}:",
        rf"(?:{_H16}:){{1,6}}:{_H16}",
        *(rf"(?:{_H16}:){{1,{k}}}(?::{_H16}){{1,{7 - k}}}" for k in (5, 4, 3, 2)),
        rf"{_H16}:(?::{_H16}){{1,6}}",
        rf":(?:(?::{_H16}){{1,7}}|:)",
    )),
    # At most 63 + 6 * 31 = 249 characters, inside the 253 that DNS allows.
    "hostname": rf"{_LABEL63}(?:\.{_LABEL30}){{0,6}}",
    "host-name": rf"{_LABEL63}(?:\.{_LABEL30}){{0,6}}",  # draft 3's name for it
    "byte": r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?",
}


def format_ir(fmt: str, *, path: str = "#") -> Node:
    """Canonical JSON string bodies of values of a JSON Schema `format`, a subset that validators accept."""
    if fmt not in _FORMATS:
        raise UnsupportedSchemaError("format", path=path, detail=fmt)
    return pattern_ir(f"^(?:{_FORMATS[fmt]})$", path=path)
