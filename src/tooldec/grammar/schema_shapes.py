"""Measures and shapes of IR that the keyword compilers share: how big a node builds, the shortest and longest
text it matches, one-or-more with a single copy of the item, items joined by a separator."""

from __future__ import annotations

import math

from tooldec.grammar.ir import (
    EMPTY,
    Alt,
    Bytes,
    Difference,
    Divisible,
    Fields,
    Intersect,
    Node,
    Repeat,
    Seq,
)


def _ir_size(node: Node, memo: dict[int, int] | None = None) -> int:
    """About how many NFA states a node builds (bounded repeats unrolled, products counted by their parts)."""
    memo = {} if memo is None else memo
    key = id(node)
    if key not in memo:
        if isinstance(node, Bytes):
            size = 1
        elif isinstance(node, Repeat):
            copies = max(node.min, 1) + (node.max is None) if node.max is None else max(node.max, 1)
            sep = _ir_size(node.sep, memo) if node.sep is not None else 0
            size = copies * (_ir_size(node.item, memo) + sep)
        elif isinstance(node, Fields):
            size = sum(_ir_size(n, memo) for n, _ in node.items) + len(node.items) * _ir_size(node.sep, memo)
        elif isinstance(node, Difference):
            size = _ir_size(node.left, memo) + _ir_size(node.right, memo)
        elif isinstance(node, Divisible):
            size = node.divisor
        else:
            size = 1 + sum(_ir_size(n, memo) for n in node.items)
        memo[key] = size
    return memo[key]


def _max_bytes(node: Node, memo: dict[int, float] | None = None) -> float:
    """The longest byte string a node matches (inf when unbounded, -inf when it matches nothing)."""
    memo = {} if memo is None else memo
    key = id(node)
    if key not in memo:
        if isinstance(node, Bytes):
            size: float = 1 if node.mask else -math.inf
        elif isinstance(node, Seq):
            size = sum(_max_bytes(n, memo) for n in node.items)
        elif isinstance(node, Alt):
            size = max((_max_bytes(n, memo) for n in node.items), default=-math.inf)
        elif isinstance(node, Repeat):
            item = _max_bytes(node.item, memo)
            sep = _max_bytes(node.sep, memo) if node.sep is not None else 0
            if node.max is None:
                size = math.inf if item > 0 else (0 if node.min == 0 or item == 0 else -math.inf)
            else:
                size = node.max * item + max(node.max - 1, 0) * sep if item >= 0 else (0 if node.min == 0 else -math.inf)
        elif isinstance(node, Fields):
            size = sum(max(_max_bytes(n, memo), 0) for n, _ in node.items) + len(node.items) * _max_bytes(node.sep, memo)
        elif isinstance(node, Intersect):
            size = min(_max_bytes(n, memo) for n in node.items)
        elif isinstance(node, Divisible):
            size = math.inf
        else:
            size = _max_bytes(node.left, memo)
        memo[key] = size
    return memo[key]


def _min_bytes(node: Node, memo: dict[int, float] | None = None) -> float:
    """The shortest byte string a node matches (inf when it matches nothing)."""
    memo = {} if memo is None else memo
    key = id(node)
    if key not in memo:
        if isinstance(node, Bytes):
            size: float = 1 if node.mask else math.inf
        elif isinstance(node, Seq):
            size = sum(_min_bytes(n, memo) for n in node.items)
        elif isinstance(node, Alt):
            size = min((_min_bytes(n, memo) for n in node.items), default=math.inf)
        elif isinstance(node, Repeat):
            sep = _min_bytes(node.sep, memo) if node.sep is not None and node.min > 1 else 0
            size = node.min * _min_bytes(node.item, memo) + max(node.min - 1, 0) * sep if node.min else 0
        elif isinstance(node, Fields):
            size = sum(_min_bytes(n, memo) for n, r in node.items if r)
        elif isinstance(node, Intersect):
            size = max(_min_bytes(n, memo) for n in node.items)
        elif isinstance(node, Divisible):
            size = 0
        else:
            size = _min_bytes(node.left, memo)
        memo[key] = size
    return memo[key]


def _one_or_more(item: Node, sep: Node) -> Node:
    """`item (sep item)*` with a single copy of `item` (a plain Repeat with min 1 builds two of it)."""
    return Difference(Repeat(item, 0, None, sep), EMPTY)


def _joined(nodes: list[Node], sep: Node) -> list[Node]:
    out: list[Node] = []
    for i, n in enumerate(nodes):
        if i:
            out.append(sep)
        out.append(n)
    return out
