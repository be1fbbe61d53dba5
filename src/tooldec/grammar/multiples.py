"""`multipleOf` as IR: decimal spellings of the multiples of a number, exactly or as a documented subset.

A value passes only if it is a multiple in exact decimal arithmetic (the JSON Schema meaning) *and* under the
binary floating-point test Python's `jsonschema` applies when `multipleOf` is written with a fraction or an
exponent (`instance / multipleOf` must come out integral). Two constructions:

* Enumeration, when bounds leave at most `MAX_ENUMERATED` multiples: each is checked both ways and spelled
  exactly (integral values also with `.0` for `number`).
* Digit structure, otherwise. With m = p / (2^a 5^b) in lowest terms, every multiple of s = p / 2^a is a
  multiple of m whose binary value is exact, and a decimal `I.F` (F padded to a digits, so D = I·10^a + F) is
  one exactly when 5^a·p divides D. Divisibility by 2^x 5^y is a condition on the last digits of D; by the
  rest of p (coprime to 10, at most MAX_DIVISOR) a remainder automaton over D's digits (`Divisible`). Multiples of m that are not
  multiples of s (0.07 for 0.01, whose binary test fails in Python anyway) are left out, as are exponent
  spellings and, where the float test needs it, magnitudes from 2^53·m on: a subset, never a superset.
"""

from __future__ import annotations

import math
from fractions import Fraction

from tooldec.errors import UnsupportedSchemaError
from tooldec.grammar.ir import (
    EMPTY,
    Difference,
    Divisible,
    Intersect,
    Node,
    Repeat,
    alt,
    lit,
    seq,
    star,
)
from tooldec.grammar.numbers import (
    DIGIT,
    NONZERO,
    ZERO_FRACTION,
    decimal_range,
    float_safe,
    integer_range,
    number_range,
)

MAX_ENUMERATED = 2_000
MAX_SUFFIXES = 1_000
MAX_DIVISOR = 1_000
"""The largest factor coprime to 10 a multiple's digits are checked against (its remainder automaton's states)."""


def _decimal(value: Fraction) -> str:
    """The exact decimal spelling of a value with a terminating expansion (`-12.5`, `3`)."""
    sign = "-" if value < 0 else ""
    value = abs(value)
    whole, rest = divmod(value.numerator, value.denominator)
    if not rest:
        return f"{sign}{whole}"
    digits = ""
    while rest:
        rest *= 10
        d, rest = divmod(rest, value.denominator)
        digits += str(d)
    return f"{sign}{whole}.{digits}"


def _python_accepts(spelled: str, m: float) -> bool:
    """jsonschema's multipleOf test on the value `json.loads` reads from `spelled`."""
    value: int | float = int(spelled) if "." not in spelled else float(spelled)
    if isinstance(m, float):
        q = value / m
        return math.isfinite(q) and int(q) == q
    return value % m == 0


def _float_test_exact(m: float) -> bool:
    """Whether `N·m / float(m)` rounds to N for every integer N below 2^53 (so exact multiples pass)."""
    exact = Fraction(repr(m))
    delta = (Fraction(m) - exact) / exact  # relative error of the binary value
    if delta == 0:
        return True
    # The quotient N/(1+delta) must round to N. Above N the half-gap exceeds N·2^-54; below a power of two
    # it is exactly N·2^-54 (the binade changes), so a low quotient must stay strictly within it.
    if delta > 0:
        return delta / (1 + delta) < Fraction(1, 2**54)
    return -delta / (1 + delta) <= Fraction(1, 2**54)


def _prime_powers(n: int) -> dict[int, int]:
    out: dict[int, int] = {}
    p = 2
    while p * p <= n:
        while n % p == 0:
            out[p] = out.get(p, 0) + 1
            n //= p
        p += 1
    if n > 1:
        out[n] = out.get(n, 0) + 1
    return out


def _integer_ending(u: str) -> Node:
    """Integers (no leading zeros) whose last len(u) >= 1 digits, zero-padded, are `u`."""
    return alt(lit(str(int(u))), seq(NONZERO, star(DIGIT), lit(u)))


def _suffix_language(two: int, five: int, a: int, *, integer: bool) -> Node:
    """Unsigned `I` / `I.F` (F at most a digits, then zeros) with 2^two·5^five dividing D = I·10^a + F.

    With `integer`, only `I` (and a = 0).
    """
    any_integer = alt(lit("0"), seq(NONZERO, star(DIGIT)))
    options: list[Node] = []
    for f in range(a + 1):
        g = a - f  # zeros implied after the f written fraction digits
        x, y = max(two - g, 0), max(five - g, 0)
        j = max(x, y)
        mod = 2**x * 5**y
        if 10**j // mod > MAX_SUFFIXES:
            raise UnsupportedSchemaError("multipleOf", detail=f"divisibility by {mod} needs too many digit endings")
        if f == 0:
            tail = EMPTY if integer or a else ZERO_FRACTION
        else:
            tail = star(lit("0")) if f == a else EMPTY
        for t in (str(t).zfill(j) for t in range(0, 10**j, mod)):
            if j <= f:  # the ending lies in the fraction
                body = seq(any_integer, lit("."), Repeat(DIGIT, f - j, f - j), lit(t)) if f else any_integer
            else:
                integer_part = _integer_ending(t[: j - f])
                body = seq(integer_part, lit("."), lit(t[j - f :])) if f else integer_part
            options.append(seq(body, tail))
    return alt(*options)


def _zero() -> Node:
    return seq(lit("0"), ZERO_FRACTION)


def _signed(magnitude: Node) -> Node:
    return alt(magnitude, seq(lit("-"), Difference(magnitude, _zero())))


def _enumerated(
    m: float, step: Fraction, integer: bool, lo: Fraction, lo_incl: bool, hi: Fraction, hi_incl: bool
) -> Node:
    first = math.ceil(lo / step)
    last = math.floor(hi / step)
    spellings: list[str] = []
    for k in range(first, last + 1):
        v = k * step
        if (v == lo and not lo_incl) or (v == hi and not hi_incl) or not (lo <= v <= hi):
            continue
        text = _decimal(v)
        options = [text] if integer or "." in text else [text, text + ".0"]
        spellings += [s for s in options if _python_accepts(s, m)]
    return alt(*(lit(s) for s in spellings))


def multiples(
    m: float,
    *,
    integer: bool,
    lo: float | None,
    lo_incl: bool,
    hi: float | None,
    hi_incl: bool,
) -> Node:
    """JSON numbers (integers when `integer`) that are multiples of m within the bounds (None = unbounded)."""
    if isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m) or m <= 0:
        raise ValueError("multipleOf must be a positive number")
    exact = Fraction(repr(m)) if isinstance(m, float) else Fraction(m)
    # the multiples produced: integers divisible by p for `integer`, else multiples of s = p / 2^a
    step = Fraction(exact.numerator) if integer else exact * 5 ** _prime_powers(exact.denominator).get(5, 0)
    if lo is not None and hi is not None:
        flo, fhi = Fraction(repr(lo) if isinstance(lo, float) else lo), Fraction(repr(hi) if isinstance(hi, float) else hi)
        if (fhi - flo) / (step if integer else exact) <= MAX_ENUMERATED:
            return _enumerated(m, step if integer else exact, integer, flo, lo_incl, fhi, hi_incl)
    if isinstance(m, float) and not _float_test_exact(m):
        raise UnsupportedSchemaError("multipleOf", detail=f"{m!r} is inexact in binary floating point")
    a = _prime_powers(step.denominator).get(2, 0)
    divisor = step.numerator * 5**a  # D = value·10^a must be a multiple of it
    powers = _prime_powers(divisor)
    coprime = math.prod(p**e for p, e in powers.items() if p not in (2, 5))
    if coprime > MAX_DIVISOR:
        raise UnsupportedSchemaError(
            "multipleOf", detail=f"{m!r}: divisibility by {coprime} needs more than {MAX_DIVISOR:,} remainders"
        )
    magnitude = _suffix_language(powers.get(2, 0), powers.get(5, 0), 0 if integer else a, integer=integer)
    if coprime > 1:
        magnitude = Intersect((magnitude, Divisible(coprime)))
    node = _signed(magnitude)
    bound = None
    if isinstance(m, float) or not integer:
        # exact binary values and quotients below 2^53 (see _float_test_exact)
        bound = math.floor(min(Fraction(2**53) / step.denominator, 2**53 * exact)) - 1
    ranges: list[Node] = []
    if bound is not None:
        ranges.append(integer_range(-bound, bound) if integer else number_range(-bound, True, bound, True))
    if lo is not None or hi is not None:
        if integer:
            clo = None if lo is None else (math.ceil(lo) if lo_incl else math.floor(lo) + 1)
            chi = None if hi is None else (math.floor(hi) if hi_incl else math.ceil(hi) - 1)
            ranges.append(integer_range(clo, chi))
        else:
            exact_lo = None if lo is None else Fraction(repr(lo)) if isinstance(lo, float) else Fraction(lo)
            exact_hi = None if hi is None else Fraction(repr(hi)) if isinstance(hi, float) else Fraction(hi)
            bounds = [b for b in (exact_lo, exact_hi) if b is not None]
            ranges.append(float_safe(decimal_range(exact_lo, lo_incl, exact_hi, hi_incl), bounds))
    return Intersect((node, *ranges)) if ranges else node
