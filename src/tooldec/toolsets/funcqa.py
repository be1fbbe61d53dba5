"""The 13 FuncQA math tools of ToolkenGPT, as Python functions and a ToolSet.

`add`, `multiply`, `lcm` and `gcd` take two to four operands (FuncQA's solutions chain up to three);
the others take exactly their mathematical arity. The functions return exact floats or ints; rounding for
display is the agent's business.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from functools import reduce
from typing import Any

from tooldec.specs import ToolSet, ToolSpec

Number = float


def add(a: Number, b: Number, c: Number | None = None, d: Number | None = None) -> Number:
    """Sum of two to four numbers."""
    return sum(x for x in (a, b, c, d) if x is not None)


def subtract(a: Number, b: Number) -> Number:
    """a minus b."""
    return a - b


def multiply(a: Number, b: Number, c: Number | None = None, d: Number | None = None) -> Number:
    """Product of two to four numbers."""
    return math.prod(x for x in (a, b, c, d) if x is not None)


def divide(a: Number, b: Number) -> Number:
    """a divided by b."""
    return a / b


def power(a: Number, b: Number) -> Number:
    """a raised to the power b."""
    return a**b


def sqrt(a: Number) -> Number:
    """Square root of a."""
    return math.sqrt(a)


def log(a: Number) -> Number:
    """Base-10 logarithm of a."""
    return math.log10(a)


def ln(a: Number) -> Number:
    """Natural logarithm of a."""
    return math.log(a)


def _integers(values: tuple[Number | None, ...], tool: str) -> list[int]:
    out = []
    for x in values:
        if x is None:
            continue
        if float(x) != int(x):
            raise ValueError(f"{tool} takes integers, got {x}")
        out.append(int(x))
    return out


def lcm(a: Number, b: Number, c: Number | None = None, d: Number | None = None) -> int:
    """Least common multiple of two to four integers."""
    return reduce(math.lcm, _integers((a, b, c, d), "lcm"))


def gcd(a: Number, b: Number, c: Number | None = None, d: Number | None = None) -> int:
    """Greatest common divisor of two to four integers."""
    return reduce(math.gcd, _integers((a, b, c, d), "gcd"))


def remainder(a: Number, b: Number) -> Number:
    """Remainder of a divided by b."""
    return a % b


def choose(n: Number, k: Number) -> int:
    """Number of ways to choose k items from n (binomial coefficient)."""
    n_, k_ = _integers((n, k), "choose")
    return math.comb(n_, k_)


def permutate(n: Number, k: Number) -> int:
    """Number of ordered arrangements of k items from n."""
    n_, k_ = _integers((n, k), "permutate")
    return math.perm(n_, k_)


FUNCQA_FUNCTIONS: dict[str, Callable[..., Any]] = {
    f.__name__: f
    for f in (add, subtract, multiply, divide, power, sqrt, log, ln, lcm, gcd, remainder, choose, permutate)
}


def _spec(fn: Callable[..., Any]) -> ToolSpec:
    """A spec whose operands are plain numbers; optional operands may be left out but are never null."""
    params = inspect.signature(fn).parameters
    properties = {name: {"type": "number"} for name in params}
    required = [name for name, p in params.items() if p.default is inspect.Parameter.empty]
    return ToolSpec(
        fn.__name__,
        inspect.getdoc(fn) or "",
        {"type": "object", "properties": properties, "required": required},
    )


def funcqa_tools() -> ToolSet:
    """The 13 FuncQA tools in ToolkenGPT's order, with number operands."""
    return ToolSet(_spec(f) for f in FUNCQA_FUNCTIONS.values())
