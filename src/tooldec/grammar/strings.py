"""IR for the content of JSON string literals (the UTF-8 bytes between the quotes).

Two spellings matter. A *canonical* character is written exactly as `json.dumps(ch, ensure_ascii=False)`
writes it; patterns and formats constrain canonical text, so each string has exactly one spelling there.
A *JSON* character is any spelling a JSON parser accepts (raw UTF-8 or any escape); length-only strings use
it so nothing a model may legitimately write is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache, lru_cache

from tooldec.errors import UnsupportedSchemaError
from tooldec.grammar.ir import (
    Bytes,
    Node,
    Repeat,
    alt,
    byte_range,
    lit,
    one_of_bytes,
    seq,
)

MAX_CODEPOINT = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)
MAX_STRING_LENGTH = 10_000

Ranges = tuple[tuple[int, int], ...]

_SHORT_ESCAPES = {0x22: '"', 0x5C: "\\", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t"}
_HEX = b"0123456789abcdefABCDEF"


def normalize_ranges(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """Sorted, merged, non-empty inclusive ranges clipped to the code-point space."""
    clipped = sorted((max(lo, 0), min(hi, MAX_CODEPOINT)) for lo, hi in ranges if lo <= hi)
    merged: list[tuple[int, int]] = []
    for lo, hi in clipped:
        if lo > hi:
            continue
        if merged and lo <= merged[-1][1] + 1:
            if hi > merged[-1][1]:
                merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return tuple(merged)


def complement_ranges(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """Every code point not in `ranges`."""
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in normalize_ranges(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CODEPOINT:
        out.append((nxt, MAX_CODEPOINT))
    return tuple(out)


def intersect_ranges(a: Iterable[tuple[int, int]], b: Iterable[tuple[int, int]]) -> Ranges:
    """The code points in both `a` and `b`."""
    return complement_ranges(complement_ranges(a) + complement_ranges(b))


def utf8_sequences(lo: int, hi: int) -> list[tuple[tuple[int, int], ...]]:
    """Split [lo, hi] (no surrogates) into byte-range sequences whose products are exactly its UTF-8 forms."""
    # Split where the encoded length changes, then wherever the continuation bytes of the two ends do not
    # span their full 0x80-0xBF range, until each piece is a product of byte ranges.
    out: list[tuple[tuple[int, int], ...]] = []
    stack = [(lo, hi)]
    while stack:
        s, e = stack.pop()
        while True:
            split = next((m for m in (0x7F, 0x7FF, 0xFFFF) if s <= m < e), None)
            if split is not None:
                stack.append((split + 1, e))
                e = split
                continue
            if e <= 0x7F:
                out.append(((s, e),))
                break
            for i in (1, 2, 3):
                m = (1 << (6 * i)) - 1
                if s & ~m != e & ~m:
                    if s & m:
                        stack.append(((s | m) + 1, e))
                        e = s | m
                        break
                    if e & m != m:
                        stack.append((e & ~m, e))
                        e = (e & ~m) - 1
                        break
            else:
                a, b = chr(s).encode(), chr(e).encode()
                out.append(tuple(zip(a, b)))
                break
    return out


@lru_cache(maxsize=1024)
def _raw_utf8_ir(ranges: Ranges) -> Node:
    """Raw UTF-8 of the given code points (surrogates dropped): one byte mask plus a few range sequences. A pure
    function returning immutable IR, kept like `_codepoints_ir` (a negated class spans all of Unicode: 0.2 ms)."""
    ascii_mask = 0
    multi: list[Node] = []
    for lo, hi in ranges:
        for a, b in ((lo, min(hi, SURROGATES[0] - 1)), (max(lo, SURROGATES[1] + 1), hi)):
            if a > b:
                continue
            for pieces in utf8_sequences(a, b):
                if len(pieces) == 1:
                    ascii_mask |= byte_range(*pieces[0]).mask
                else:
                    multi.append(seq(*(byte_range(x, y) for x, y in pieces)))
    return alt(*([Bytes(ascii_mask)] if ascii_mask else []), *multi)


def _escaped_ir(points: list[int]) -> Node:
    """Canonical JSON escapes of the given characters (each `"`, `\\` or a control character)."""
    short = "".join(_SHORT_ESCAPES[c] for c in points if c in _SHORT_ESCAPES)
    by_nibble: dict[int, bytes] = {}
    for c in points:
        if c not in _SHORT_ESCAPES:
            by_nibble[c >> 4] = by_nibble.get(c >> 4, b"") + b"%x" % (c & 0xF)
    options = [one_of_bytes(short)] if short else []
    options += [seq(lit(b"u00%x" % hi), one_of_bytes(lows)) for hi, lows in sorted(by_nibble.items())]
    return seq(lit("\\"), alt(*options)) if options else alt()


@lru_cache(maxsize=1024)
def _codepoints_ir(ranges: Ranges) -> Node:
    """Cached body of `codepoints_ir` for normalized ranges."""
    special = [c for lo, hi in intersect_ranges(ranges, ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)))
               for c in range(lo, hi + 1)]
    raw = intersect_ranges(ranges, complement_ranges(((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))))
    return alt(_raw_utf8_ir(raw), _escaped_ir(special))


def codepoints_ir(ranges: Sequence[tuple[int, int]]) -> Node:
    """One character from the union of inclusive code-point ranges, in canonical JSON spelling."""
    return _codepoints_ir(normalize_ranges(ranges))


def _u_escape_ir(python: bool) -> Node:
    """`uXXXX` (any-case hex) spelling one code point: a surrogate pair is one character, a lone one none."""
    # jsonschema counts a pair as one code point; Python reads a pair as two surrogates, so `python` drops it.
    hexd = one_of_bytes(_HEX)
    d = one_of_bytes(b"dD")
    plain = alt(seq(Bytes(hexd.mask & ~d.mask), hexd, hexd, hexd), seq(d, byte_range(0x30, 0x37), hexd, hexd))
    if python:
        return seq(lit("u"), plain)
    high = seq(d, one_of_bytes(b"89abAB"), hexd, hexd)
    low = seq(d, one_of_bytes(b"cdefCDEF"), hexd, hexd)
    return seq(lit("u"), alt(plain, seq(high, lit("\\u"), low)))


@cache
def json_char(*, python: bool = False) -> Node:
    """Any JSON string character (one code point) in any spelling; `python` keeps what Python reads alike."""
    raw = _raw_utf8_ir(complement_ranges(((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))))
    simple = one_of_bytes(b'"\\bfnrt' if python else b'"\\/bfnrt')
    return alt(raw, seq(lit("\\"), alt(simple, _u_escape_ir(python))))


def string_content(*, min_length: int = 0, max_length: int | None = None, python: bool = False) -> Node:
    """A string body of `min_length` to `max_length` characters (escapes count as one, like code points)."""
    for keyword, bound in (("minLength", min_length), ("maxLength", max_length)):
        if bound is not None and bound > MAX_STRING_LENGTH:
            raise UnsupportedSchemaError(keyword, detail=f"length bound {bound} exceeds {MAX_STRING_LENGTH}")
    if max_length is not None and max_length < min_length:
        return alt()
    return Repeat(json_char(python=python), min_length, max_length)


@cache
def canonical_text() -> Node:
    """Any text whose string literals are all canonical (`json.dumps(s, ensure_ascii=False)`), whatever else.

    Outside string literals every byte but `"` passes, so intersecting a value language with it keeps the
    values exactly as they are and only drops the other spellings of their strings.
    """
    canonical_char = _codepoints_ir(((0, MAX_CODEPOINT),))
    string = seq(lit('"'), Repeat(canonical_char, 0, None), lit('"'))
    return Repeat(alt(Bytes(((1 << 256) - 1) & ~(1 << 0x22)), string), 0, None)
