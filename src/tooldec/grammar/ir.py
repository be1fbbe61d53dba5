"""The grammar IR: a small regular-expression algebra over bytes that every schema and call format compiles to.

Nodes are immutable and hashable. The automaton layer turns a node into a byte-level DFA; nothing here knows
about automata or tokenizers. Byte sets are Python ints used as 256-bit masks (bit b set = byte b allowed).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields

ALL_BYTES = (1 << 256) - 1


_COMPARED: dict[type, tuple[str, ...]] = {}
"""Per node class, the names of its compared fields (dataclasses.fields is too slow to call per hash)."""


def _cached_hash(self: object) -> int:
    """Structural hash computed once per node: alternation dedup and caches hash big trees many times."""
    h = self._h  # type: ignore[attr-defined]
    if not h:
        cls = type(self)
        names = _COMPARED.get(cls)
        if names is None:
            names = _COMPARED[cls] = tuple(f.name for f in fields(self) if f.compare)  # type: ignore[arg-type]
        h = hash((cls.__name__, *(getattr(self, n) for n in names))) or 1
        object.__setattr__(self, "_h", h)
    return h


@dataclass(frozen=True, slots=True)
class Bytes:
    """Exactly one byte from a set (a 256-bit mask)."""

    mask: int
    _h: int = field(default=0, compare=False, repr=False)
    __hash__ = _cached_hash


@dataclass(frozen=True, slots=True)
class Seq:
    """Each item in turn; the empty sequence matches the empty string."""

    items: tuple[Node, ...]
    _h: int = field(default=0, compare=False, repr=False)
    __hash__ = _cached_hash


@dataclass(frozen=True, slots=True)
class Alt:
    """Any one of the items; the empty alternation matches nothing."""

    items: tuple[Node, ...]
    _h: int = field(default=0, compare=False, repr=False)
    __hash__ = _cached_hash


@dataclass(frozen=True, slots=True)
class Repeat:
    """`item` between `min` and `max` times (None = unbounded), with `sep` between consecutive items."""

    item: Node
    min: int = 0
    max: int | None = None
    sep: Node | None = None
    _h: int = field(default=0, compare=False, repr=False)
    __hash__ = _cached_hash


@dataclass(frozen=True, slots=True)
class Fields:
    """An ordered subsequence of `items` (node, required) holding every required one, `sep` between them.

    This is how object properties and keyword arguments are emitted in a fixed order with optional ones
    skippable, without copying any value machine.
    """

    items: tuple[tuple[Node, bool], ...]
    sep: Node
    _h: int = field(default=0, compare=False, repr=False)
    __hash__ = _cached_hash


@dataclass(frozen=True, slots=True)
class Intersect:
    """Strings matched by every item (the automaton builds it as a product of DFAs)."""

    items: tuple[Node, ...]
    _h: int = field(default=0, compare=False, repr=False)
    __hash__ = _cached_hash


@dataclass(frozen=True, slots=True)
class Difference:
    """Strings matched by `left` and not by `right`."""

    left: Node
    right: Node
    _h: int = field(default=0, compare=False, repr=False)
    __hash__ = _cached_hash


@dataclass(frozen=True, slots=True)
class Divisible:
    """Decimal digit strings, any `.` skipped, whose value is a multiple of `divisor` (coprime to 10, so trailing
    zeros change nothing; the empty string counts as 0). The automaton layer builds its remainder automaton
    directly, `divisor` states: as a regular expression it grows exponentially (state elimination)."""

    divisor: int
    _h: int = field(default=0, compare=False, repr=False)
    __hash__ = _cached_hash

    def __post_init__(self) -> None:
        if self.divisor < 1 or self.divisor % 2 == 0 or self.divisor % 5 == 0:
            raise ValueError(f"divisibility by {self.divisor}: the divisor must be positive and coprime to 10")


Node = Bytes | Seq | Alt | Repeat | Fields | Intersect | Difference | Divisible

EMPTY: Node = Seq(())
NOTHING: Node = Alt(())


def byte_mask(values: Iterable[int]) -> int:
    """The mask of a collection of byte values."""
    m = 0
    for v in values:
        m |= 1 << v
    return m


def byte_range(lo: int, hi: int) -> Bytes:
    """One byte in [lo, hi]."""
    return Bytes(((1 << (hi + 1)) - 1) ^ ((1 << lo) - 1))


def one_of_bytes(chars: bytes | str) -> Bytes:
    """One of the given (ASCII) bytes."""
    data = chars.encode() if isinstance(chars, str) else chars
    return Bytes(byte_mask(data))


_BYTE = tuple(Bytes(1 << b) for b in range(256))
"""One node per single byte, shared by every literal (their hashes are computed once)."""


def lit(text: bytes | str) -> Node:
    """Exactly this byte string (a str is encoded as UTF-8)."""
    data = text.encode() if isinstance(text, str) else text
    if len(data) == 1:
        return _BYTE[data[0]]
    return Seq(tuple(map(_BYTE.__getitem__, data)))


def seq(*items: Node) -> Node:
    """Concatenation, flattening nested sequences; NOTHING anywhere makes the whole NOTHING."""
    flat: list[Node] = []
    for it in items:
        if type(it) is Alt and not it.items:  # NOTHING, as any empty alternation (cheaper than dataclass ==)
            return NOTHING
        if isinstance(it, Seq):
            flat.extend(it.items)
        else:
            flat.append(it)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def alt(*items: Node) -> Node:
    """Alternation, flattening nested alternations and dropping NOTHING and duplicates."""
    if len(items) == 1 and not isinstance(items[0], Alt):  # nothing to drop: spare hashing a fresh tree
        return items[0]
    flat: list[Node] = []
    seen: set[Node] = set()
    for it in items:
        parts = it.items if isinstance(it, Alt) else (it,)
        for p in parts:
            if p not in seen:
                seen.add(p)
                flat.append(p)
    return flat[0] if len(flat) == 1 else Alt(tuple(flat))


def opt(item: Node) -> Node:
    """Zero or one `item`."""
    return alt(item, EMPTY)


def star(item: Node) -> Node:
    """Zero or more `item`."""
    return Repeat(item, 0, None)


def plus(item: Node) -> Node:
    """One or more `item`."""
    return Repeat(item, 1, None)


def literal_alternatives(options: Iterable[bytes]) -> Node:
    """Exactly one of the byte strings; the DFA makes it a trie."""
    return alt(*(lit(o) for o in options))


CALL_MARKER = 0x01
"""The first byte of a call (`call`): a control byte no JSON text holds raw, so it never meets a value's bytes."""
MAX_CALLS = 1 << 16
"""Rules a call can name (two bytes of index)."""


def call(rule: int) -> Node:
    """Where a value of rule `rule` of a recursive value grammar nests: three bytes (CALL_MARKER, then the index
    big-endian) that the pushdown path (tooldec.automaton.value_grammar) reads as a call of that rule."""
    if not 0 <= rule < MAX_CALLS:
        raise ValueError(f"a call names rule {rule}, past the {MAX_CALLS:,} a grammar may have")
    return lit(bytes((CALL_MARKER, rule >> 8, rule & 0xFF)))
