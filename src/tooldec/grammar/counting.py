"""Scanning JSON text without its schema: member counts, keyed members, and a superset of every value.

These languages read any well-formed JSON text (they do not check values): strings are skipped as strings (a
`,` or bracket inside one is not structure), brackets are tracked up to `max_depth` levels, commas at the top
level separate members, and whitespace alone is no member (`{\n}` is empty, as a line-broken layout writes it).
Intersected with a container's own grammar they restrict it (to a number of members, to members with given keys)
without copying its value machines once per count. Text nested deeper
than `max_depth` is not read: callers pass a depth at least that of the grammar they intersect or subtract
from (the schema compiler tracks it), so nothing is cut.
"""

from __future__ import annotations

from functools import cache

from tooldec.grammar.ir import (
    ALL_BYTES,
    Bytes,
    Difference,
    Node,
    Repeat,
    alt,
    byte_mask,
    lit,
    literal_alternatives,
    one_of_bytes,
    seq,
    star,
)

DEFAULT_MAX_DEPTH = 8

_STRUCT = byte_mask(b'"\\,[]{}')
# a string: any byte but `"` and `\`, or `\` and any byte (a superset of JSON strings that never misreads one)
STRING = seq(lit('"'), star(alt(Bytes(ALL_BYTES & ~byte_mask(b'"\\')), seq(lit("\\"), Bytes(ALL_BYTES)))), lit('"'))
_PLAIN = Bytes(ALL_BYTES & ~_STRUCT)
_WHITESPACE = byte_mask(b" \t\n\r")
_SPACE = star(Bytes(_WHITESPACE))
_SOLID = Bytes(ALL_BYTES & ~_STRUCT & ~_WHITESPACE)
_OPEN = one_of_bytes("[{")
_CLOSE = one_of_bytes("]}")


@cache
def _inside(depth: int) -> Node:
    """The text between a bracket pair `depth` more levels may nest in (commas allowed)."""
    parts: list[Node] = [STRING, _PLAIN, lit(",")]
    if depth > 0:
        parts.append(seq(_OPEN, _inside(depth - 1), _CLOSE))
    return star(alt(*parts))


@cache
def member_text(max_depth: int = DEFAULT_MAX_DEPTH) -> Node:
    """One member of a container (a value, or `"key": value`) nested at most `max_depth` deep inside: no comma
    at its own level, not empty. A superset of every JSON value's text of that depth."""
    nested = seq(_OPEN, _inside(max(max_depth - 1, 0)), _CLOSE)
    return seq(_SPACE, alt(STRING, _SOLID, nested), star(alt(STRING, _PLAIN, nested)))


def container_count(open_: str, close: str, lo: int, hi: int | None, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Node:
    """Containers `open_ … close_` with between `lo` and `hi` (None = unbounded) members at the top level."""
    member = member_text(max_depth)
    options: list[Node] = []
    if lo <= 0:
        options.append(seq(_SPACE, lit(close)))
    if hi is None or hi >= 1:
        options.append(seq(Repeat(member, max(lo, 1), hi, lit(",")), lit(close)))
    return seq(lit(open_), alt(*options))


def keyed_count(keys: list[bytes], lo: int, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Node:
    """Objects with at least `lo` top-level members whose key is spelled as one of `keys` (quoted, exact bytes)."""
    if lo <= 0:
        return container_count("{", "}", 0, None, max_depth=max_depth)
    quoted = literal_alternatives(keys)
    tail = star(alt(STRING, _PLAIN, seq(_OPEN, _inside(max(max_depth - 1, 0)), _CLOSE)))
    keyed = seq(_SPACE, quoted, tail)
    other = seq(_SPACE, Difference(STRING, quoted), tail)
    anyone = member_text(max_depth)
    first = seq(Repeat(seq(other, lit(",")), 0, None), keyed)
    more = seq(Repeat(seq(lit(","), other), 0, None), lit(","), keyed)
    return seq(lit("{"), first, *([more] * (lo - 1)), Repeat(seq(lit(","), anyone), 0, None), lit("}"))
