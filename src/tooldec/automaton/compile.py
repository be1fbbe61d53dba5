"""IR → DFA: the grammar IR as a node table for the compiled core, which builds the Thompson NFA and runs the
subset construction; Intersect and Difference nodes become product DFAs first (built here, bottom up).

The table lists every node object once (shared subtrees are shared objects), children before parents (see `Thompson` in the core's source for
the record layout); the core builds fresh states for every use of a node, as the construction requires.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np

from tooldec import _core
from tooldec.automaton.dfa import DEAD, DFA, MAX_DFA_STATES, from_core, minimize
from tooldec.automaton.product import difference, intersect
from tooldec.errors import UnsupportedSchemaError
from tooldec.grammar.ir import Alt, Bytes, Difference, Divisible, Fields, Intersect, Node, Repeat, Seq

MAX_NFA_STATES = 2_000_000
"""NFA states one compile may build (bounded repeats unroll; a schema past this is refused as too large)."""
MAX_PRODUCT_WORK = 1_000_000
"""States of the automata one root node builds for its products in all (each operand compiled and each product,
before minimizing; nested products included): past it the node is refused by size before its products run on for
seconds (Github_easy o78062, a recursive oneOf unrolled under products of 17,000-state strings, passed 10 s short
of its end, and reaches this bound in about 2.5 s; the most any MaskBench schema that compiles builds is 540,000,
Handwritten allany8, measured 2026-11-28). A product taken from the cache costs nothing."""

_work: ContextVar[list[int] | None] = ContextVar("product_work", default=None)

_BYTES, _SEQ, _ALT, _REPEAT, _FIELDS, _EMBED = range(6)


@dataclass(frozen=True, eq=False)
class Embedded:
    """An automaton already built, as a leaf of IR: the core places its states as they are (a tool set's calls,
    built per group and cached, inside a block that holds several of them)."""

    dfa: DFA


class ProductCache:
    """Product DFAs by their IR node (Intersect / Difference), least recently used dropped first, safe to share
    between threads. The same product recurs across the tools of a set (every digit-bounded number, a pattern
    with a length), and each costs two subset constructions and a product."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._dfas: OrderedDict[Node, DFA] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._dfas)

    def clear(self) -> None:
        """Forget every product."""
        with self._lock:
            self._dfas.clear()

    def get(self, node: Intersect | Difference) -> DFA:
        """The product DFA of `node`, built on first use."""
        with self._lock:
            got = self._dfas.get(node)
            if got is not None:
                self._dfas.move_to_end(node)
                return got
        dfa = _product(node, self)
        with self._lock:
            self._dfas[node] = dfa
            while len(self._dfas) > self.size:
                self._dfas.popitem(last=False)
        return dfa


class _Table:
    """The node table under construction: records, byte masks and embedded product DFAs.

    Nodes are told apart by identity (a C-level lookup; shared subtrees are shared objects), and a product by
    its structure too, through the product cache."""

    def __init__(self, products: ProductCache | None) -> None:
        self.products = products
        self.code: list[int] = []
        self.ptr: list[int] = [0]
        self.ids: dict[int, int] = {}
        self.masks: dict[int, int] = {}
        self.dfas: list[tuple[np.ndarray, np.ndarray, np.ndarray, int]] = []

    def add(self, node: Node) -> int:
        """The id of `node`, adding it (and its children first) if it is new."""
        got = self.ids.get(id(node))
        if got is not None:
            return got
        add = self.add
        kind = type(node)
        if kind is Bytes:
            mask = node.mask  # type: ignore[union-attr]
            record = [_BYTES, self.masks.setdefault(mask, len(self.masks)) if mask else -1]
        elif kind is Seq or kind is Alt:
            items = node.items  # type: ignore[union-attr]
            record = [_SEQ if kind is Seq else _ALT, len(items), *[add(item) for item in items]]
        elif kind is Repeat:
            assert isinstance(node, Repeat)
            if node.max is not None and node.max < node.min:
                raise ValueError(f"repeat bounds {node.min}..{node.max}")
            record = [_REPEAT, add(node.item), node.min, -1 if node.max is None else node.max,
                      -1 if node.sep is None else add(node.sep)]
        elif kind is Fields:
            assert isinstance(node, Fields)
            record = [_FIELDS, add(node.sep), len(node.items)]
            for item, required in node.items:
                record += (add(item), int(required))
        elif kind is Intersect or kind is Difference:
            assert isinstance(node, (Intersect, Difference))
            dfa = self.products.get(node) if self.products is not None else _product(node, None)
            self.dfas.append((np.ascontiguousarray(dfa.trans, dtype=np.int32), dfa.classes, dfa.accepting, dfa.start))
            record = [_EMBED, len(self.dfas) - 1]
        elif kind is Embedded:
            dfa = node.dfa  # type: ignore[union-attr]
            self.dfas.append((np.ascontiguousarray(dfa.trans, dtype=np.int32), dfa.classes, dfa.accepting, dfa.start))
            record = [_EMBED, len(self.dfas) - 1]
        elif kind is Divisible:
            assert isinstance(node, Divisible)
            self.dfas.append(_remainder_arrays(node.divisor))
            record = [_EMBED, len(self.dfas) - 1]
        else:
            raise TypeError(f"not a grammar node: {node!r}")
        self.code += record
        self.ptr.append(len(self.code))
        self.ids[id(node)] = n = len(self.ptr) - 2
        return n

    def mask_rows(self) -> np.ndarray:
        """The byte masks as `uint8[n, 32]`, row i = mask id i (little-endian bits)."""
        data = b"".join(m.to_bytes(32, "little") for m in self.masks)
        return np.frombuffer(data, dtype=np.uint8).reshape(-1, 32)


def _remainder_arrays(divisor: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The DFA of `Divisible(divisor)` as the core's arrays: state r + 1 holds remainder r of the digits read so
    far (start 1, accepting 1), a digit d moves r to (10 r + d) mod divisor, `.` stays; byte classes 1-10 are the
    digits, 11 the dot, 0 every other byte (dead)."""
    classes = np.zeros(256, dtype=np.uint8)
    classes[0x30:0x3A] = np.arange(1, 11, dtype=np.uint8)
    classes[ord(".")] = 11
    remainders = np.arange(divisor, dtype=np.int64)
    trans = np.zeros((divisor + 1, 12), dtype=np.int32)
    trans[1:, 1:11] = (10 * remainders[:, None] + np.arange(10)) % divisor + 1
    trans[1:, 11] = remainders + 1
    accepting = np.zeros(divisor + 1, dtype=bool)
    accepting[1] = True
    return trans, classes, accepting, 1


def _product(node: Intersect | Difference, products: ProductCache | None) -> DFA:
    """The product DFA of `node`, its operands and itself minimized: the subset construction keeps states apart
    that minimizing merges (a decimal's last digits for divisibility by 8: 1,000 endings, 8 remainders), and a
    product multiplies what its operands keep (Handwritten allany2: past 500,000 states unminimized, 1,989)."""
    if isinstance(node, Difference):
        return minimize(_charged(difference(_operand(node.left, products), _operand(node.right, products))))
    result = _operand(node.items[0], products)
    for item in node.items[1:]:
        result = minimize(_charged(intersect(result, _operand(item, products))))
    return result


def _operand(node: Node, products: ProductCache | None) -> DFA:
    """A product's operand as a minimal DFA (a product already is one)."""
    if isinstance(node, (Intersect, Difference)):
        return products.get(node) if products is not None else _product(node, None)
    return minimize(_charged(compile_dfa(node, products)))


def _charged(dfa: DFA) -> DFA:
    """`dfa`, built for a product (an operand or the product, before minimizing), counted toward the root
    node's MAX_PRODUCT_WORK."""
    work = _work.get()
    if work is not None:
        work[0] += dfa.num_states
        if work[0] > MAX_PRODUCT_WORK:
            raise UnsupportedSchemaError(
                "size", detail=f"the products of automata it needs pass {MAX_PRODUCT_WORK:,} states in all")
    return dfa


def compile_dfa(node: Node, products: ProductCache | None = None) -> DFA:
    """IR node → pruned DFA. An empty language gives a DFA whose start is DEAD. `products` keeps product DFAs
    between compiles (a Compiler owns one).

    Raises UnsupportedSchemaError past MAX_NFA_STATES or MAX_DFA_STATES; a pending signal (a time limit)
    interrupts the core."""
    return compile_dfas([node], products)[0]


def compile_dfas(nodes: Sequence[Node], products: ProductCache | None = None, threads: int = 1) -> list[DFA]:
    """`compile_dfa` of each node; the nodes go to the core in one table (a tool set's tools share most of their
    nodes) and it builds their automata on up to `threads` threads (then without seeing a signal until all are
    built). Raises UnsupportedSchemaError for the first node past the bounds."""
    return [from_core(got) for got in compile_arrays(nodes, products, threads)]


def compile_arrays(nodes: Sequence[Node], products: ProductCache | None = None, threads: int = 1, *,
                   parallel_from: int = 0) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, int]]:
    """`compile_dfas` as the core's own `(trans, classes, accepting, start)` arrays, for a caller that hands them
    straight back to the core (a context-free grammar's terminals) and needs no DFA objects. A node table of
    fewer than `parallel_from` code entries is built on one thread: starting threads costs more than it saves."""
    table = _Table(products)
    outer = _work.get() is None  # a root compile, not an operand's inside a product
    roots = []
    for node in nodes:
        token = _work.set([0]) if outer else None
        try:
            roots.append(table.add(node))
        finally:
            if token is not None:
                _work.reset(token)
    if len(table.code) < parallel_from:
        threads = 1
    code, ptr = np.array(table.code, dtype=np.int32), np.array(table.ptr, dtype=np.int64)
    built = _core.compile_irs(code, ptr, table.mask_rows(), table.dfas, roots, MAX_NFA_STATES, MAX_DFA_STATES, threads)
    for got in built:  # past the bounds: its message
        if isinstance(got, str):
            raise UnsupportedSchemaError("size", detail=got)
    return built  # type: ignore[no-any-return]


class KeyLanguage:
    """A small language compiled for a schema's checks (a key language: `Decide` in tooldec.grammar.schema):
    membership of one byte string, and emptiness."""

    def __init__(self, node: Node) -> None:
        self.dfa = compile_dfa(node)
        self.is_empty = self.dfa.start == DEAD

    def accepts(self, data: bytes) -> bool:
        """Whether `data` is in the language."""
        return not self.is_empty and bool(self.dfa.accepts(data))

    def strings(self, limit: int) -> list[bytes] | None:
        """Every string of the language where it holds at most `limit` (a finite key set), else None: a walk
        over the states that lead to acceptance, stopped past `limit` strings or at a longer path than there
        are states (a cycle, so infinitely many)."""
        if self.is_empty:
            return []
        trans, accepting = np.asarray(self.dfa.trans), np.asarray(self.dfa.accepting, dtype=bool)
        classes = np.asarray(self.dfa.classes)
        live = accepting.copy()
        while True:  # states from which an accepting one is reachable
            grown = live | live[trans].any(axis=1)
            grown[DEAD] = False
            if (grown == live).all():
                break
            live = grown
        by_class = [np.flatnonzero(classes == c).tolist() for c in range(trans.shape[1])]
        out: list[bytes] = []
        stack = [(int(self.dfa.start), b"")]
        while stack:
            state, text = stack.pop()
            if len(text) > len(accepting):
                return None
            if accepting[state]:
                out.append(text)
                if len(out) > limit:
                    return None
            for c in np.flatnonzero(live[trans[state]]).tolist():
                if len(by_class[c]) > limit:
                    return None
                stack.extend((int(trans[state, c]), text + bytes((b,))) for b in by_class[c])
        return out
