"""Numbers as IR: JSON integers and decimals, with inclusive or exclusive bounds enforced digit by digit."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

from tooldec.grammar.ir import (
    ALL_BYTES,
    EMPTY,
    NOTHING,
    Bytes,
    Difference,
    Intersect,
    Node,
    Repeat,
    alt,
    byte_mask,
    byte_range,
    lit,
    one_of_bytes,
    opt,
    seq,
    star,
)

DIGIT = byte_range(0x30, 0x39)
NONZERO = byte_range(0x31, 0x39)
UNSIGNED = alt(lit("0"), seq(NONZERO, star(DIGIT)))
FRACTION = seq(lit("."), Repeat(DIGIT, 1, None))
NONZERO_FRACTION = seq(lit("."), star(DIGIT), NONZERO, star(DIGIT))
ZERO_FRACTION = opt(seq(lit("."), Repeat(lit("0"), 1, None)))
EXPONENT = seq(one_of_bytes("eE"), opt(one_of_bytes("+-")), Repeat(DIGIT, 1, None))
MANTISSA = seq(NONZERO, opt(FRACTION))  # 1 <= m < 10
# m·10^-k with k >= 1 lies in (0, 1); m·10^k with k >= 0 is >= 1: the exponent spellings Python and
# JavaScript print for very small and very large numbers (1e-05, 1.5e+16).
TINY = seq(MANTISSA, one_of_bytes("eE"), lit("-"), star(lit("0")), NONZERO, star(DIGIT))


RANGE_CACHE_SIZE = 1024
"""Number ranges kept by their bounds (pure functions of ints; the same bounds recur in every tool of a set)."""


def clear_caches() -> None:
    """Forget the kept number grammars (ranges, digit shapes): what a process's first compile starts from."""
    for cached in (natural_range, integer_range, number_range, digit_shape):
        cached.cache_clear()


def _huge(min_exponent: int) -> Node:
    """m·10^k with 1 <= m < 10 and k >= min_exponent, so the value is at least 10^min_exponent."""
    return seq(MANTISSA, one_of_bytes("eE"), opt(lit("+")), star(lit("0")), natural_range(min_exponent, None))


def _digit_span(lo: int, hi: int) -> Node:
    return byte_range(0x30 + lo, 0x30 + hi)


def _same_length(lo: str, hi: str) -> Node:
    """Decimal strings of len(lo) == len(hi) digits between lo and hi inclusive (leading zeros allowed)."""
    if not lo:
        return EMPTY
    k = len(lo) - 1
    a, b = int(lo[0]), int(hi[0])
    if a == b:
        return seq(lit(lo[0]), _same_length(lo[1:], hi[1:]))
    if lo[1:] == "0" * k and hi[1:] == "9" * k:
        return seq(_digit_span(a, b), Repeat(DIGIT, k, k))
    parts = [seq(lit(lo[0]), _same_length(lo[1:], "9" * k))]
    if b - a > 1:
        parts.append(seq(_digit_span(a + 1, b - 1), Repeat(DIGIT, k, k)))
    parts.append(seq(lit(hi[0]), _same_length("0" * k, hi[1:])))
    return alt(*parts)


@functools.lru_cache(maxsize=RANGE_CACHE_SIZE)
def natural_range(lo: int, hi: int | None) -> Node:
    """Non-negative integers in [lo, hi] (hi None = unbounded) without leading zeros."""
    if lo < 0:
        raise ValueError("natural_range needs lo >= 0")
    if hi is not None and hi < lo:
        return NOTHING
    parts: list[Node] = []
    if lo == 0:
        parts.append(lit("0"))
        lo = 1
        if hi == 0:
            return parts[0]
    n_lo = len(str(lo))
    n_hi = len(str(hi)) if hi is not None else n_lo
    for n in range(n_lo, n_hi + 1):
        a = max(lo, 10 ** (n - 1))
        b = 10**n - 1 if hi is None else min(hi, 10**n - 1)
        if a <= b:
            parts.append(_same_length(str(a), str(b)))
    if hi is None:
        parts.append(seq(NONZERO, Repeat(DIGIT, n_lo, None)))
    return alt(*parts)


@functools.lru_cache(maxsize=RANGE_CACHE_SIZE)
def integer_range(lo: int | None, hi: int | None) -> Node:
    """JSON integers in [lo, hi] (None = unbounded on that side); never `-0`."""
    if lo is not None and hi is not None and hi < lo:
        return NOTHING
    parts: list[Node] = []
    if hi is None or hi >= 0:
        parts.append(natural_range(max(lo, 0) if lo is not None else 0, hi))
    if lo is None or lo < 0:
        mag_lo = 1 if (hi is None or hi >= 0) else -hi
        mag_hi = None if lo is None else -lo
        parts.append(seq(lit("-"), natural_range(mag_lo, mag_hi)))
    return alt(*parts)


def _magnitude(lo: int | None, lo_incl: bool, hi: int | None, hi_incl: bool) -> Node:
    """Unsigned decimals `I(.F)?` whose value m satisfies lo <(=) m <(=) hi, for integral bounds >= 0."""
    lo_i = 0 if lo is None else (lo if lo_incl else lo + 1)
    parts: list[Node] = []
    any_frac_hi = None if hi is None else hi - 1
    if any_frac_hi is None or any_frac_hi >= lo_i:
        parts.append(seq(natural_range(lo_i, any_frac_hi), opt(FRACTION)))
    if hi is not None and hi_incl and hi >= lo_i:
        parts.append(seq(natural_range(hi, hi), ZERO_FRACTION))
    if lo is not None and not lo_incl and (hi is None or lo < hi):
        parts.append(seq(natural_range(lo, lo), NONZERO_FRACTION))
    if (lo is None or lo == 0) and (hi is None or hi >= 1):
        parts.append(TINY)
    if hi is None:
        # 10^k > lo as soon as k >= the number of digits of lo (k >= 0 when lo <= 1 is allowed)
        small = lo is None or lo < 1 or (lo == 1 and lo_incl)
        parts.append(_huge(0 if small else len(str(lo))))
    return alt(*parts)


@functools.lru_cache(maxsize=RANGE_CACHE_SIZE)
def number_range(lo: int | None, lo_incl: bool, hi: int | None, hi_incl: bool) -> Node:
    """JSON numbers between integral bounds (exponent spellings only where they cannot cross a bound)."""
    parts: list[Node] = []
    if hi is None or hi > 0 or (hi == 0 and hi_incl):
        if lo is None or lo < 0:
            pos_lo, pos_incl = 0, True
        else:
            pos_lo, pos_incl = lo, lo_incl
        parts.append(_magnitude(pos_lo, pos_incl, hi, hi_incl))
    if lo is None or lo < 0:
        # x = -m with m > 0; x >= lo  <=>  m <= -lo;  x <= hi  <=>  m >= -hi
        if hi is None or hi >= 0:
            m_lo, m_incl = 0, False
        else:
            m_lo, m_incl = -hi, hi_incl
        m_hi = None if lo is None else -lo
        parts.append(seq(lit("-"), _magnitude(m_lo, m_incl, m_hi, lo_incl)))
    return alt(*parts)


EXPONENT_NUMBER = seq(opt(lit("-")), UNSIGNED, opt(FRACTION), EXPONENT)
"""Every number spelled with an exponent."""

_DIGIT_OR_POINT = alt(DIGIT, lit("."))
SAFE_NUMBER = seq(
    opt(lit("-")),
    Intersect((
        seq(UNSIGNED, opt(FRACTION)),
        # at most 15 significant digits: from the first non-zero digit, 15 digits (and maybe the point), then zeros
        seq(
            star(one_of_bytes("0.")),
            opt(alt(seq(NONZERO, Repeat(DIGIT, 0, 14)),
                    *(seq(NONZERO, Repeat(DIGIT, i, i), lit("."), Repeat(DIGIT, 0, 14 - i)) for i in range(15)))),
            star(one_of_bytes("0.")),
        ),
        Repeat(_DIGIT_OR_POINT, 1, 40),
    )),
    opt(seq(one_of_bytes("eE"), opt(one_of_bytes("+-")), Repeat(DIGIT, 1, 2))),
)
"""Numbers of at most 15 significant digits, far from overflow and underflow: distinct such decimals are distinct
binary floats in the same order, so a bound compares the same in exact and in floating-point arithmetic."""

_SHORT_PLAIN = Repeat(one_of_bytes("0123456789.-"), 1, 300)


def _equal_plain(value: Fraction) -> Node:
    """The plain decimal spellings of exactly `value` (`1.5`, `1.50`, `2`, `2.0`, `-0` for zero)."""
    if value == 0:
        return seq(opt(lit("-")), lit("0"), ZERO_FRACTION)
    text = _canonical(abs(value))
    tail = star(lit("0")) if "." in text else ZERO_FRACTION
    return seq(lit("-") if value < 0 else EMPTY, lit(text), tail)


def float_safe(node: Node, bounds: list[Fraction]) -> Node:
    """The numbers of `node` that compare with each bound alike in exact and in binary floating-point arithmetic.

    A plain decimal is kept unless it lies within float rounding of a bound without being equal to it (or is
    absurdly long); an exponent spelling only with at most 15 significant digits and a 2-digit exponent."""
    plain = Intersect((node, _SHORT_PLAIN))
    for b in bounds:
        # Python compares float(x) with float(b): they can disagree with x vs b only within an ulp of either
        # (a representable bound: only values rounding onto it, within half an ulp, ties included)
        if b == 0:
            continue  # plain decimals of at most 300 characters are either 0 or normal floats
        if abs(b) >= Fraction(1, 10**20):
            binary = Fraction(float(b))
            ulp = Fraction(math.ulp(float(b))) / (2 if binary == b else 1)
            zone = decimal_range(min(b, binary) - ulp, True, max(b, binary) + ulp, True)
        else:  # the exact ulps have hundreds of digits: three units of the 15th significant digit instead
            unit = Fraction(10) ** (math.floor(math.log10(abs(b))) - 14)
            zone = decimal_range(b - 3 * unit, True, b + 3 * unit, True)
        plain = Difference(plain, Difference(zone, _equal_plain(b)))
    with_exponent = seq(star(Bytes(ALL_BYTES & ~byte_mask(b"eE"))), one_of_bytes("eE"), star(Bytes(ALL_BYTES)))
    exponent = [Intersect((node, SAFE_NUMBER, with_exponent))]
    if all(abs(b) < 10**15 and (b == 0 or abs(b) >= Fraction(1, 1000)) for b in bounds):
        # the exponent spellings Python and JavaScript print (from 1e16, below 1e-4) are then far from every bound
        # large ones may overflow to infinity, which still compares alike; small ones stop short of underflow
        # to zero (1e-323 is still a subnormal float)
        far = seq(opt(lit("-")), MANTISSA, one_of_bytes("eE"), alt(
            seq(opt(lit("+")), star(lit("0")), alt(seq(lit("1"), byte_range(0x36, 0x39)), seq(byte_range(0x32, 0x39), DIGIT),
                                                    seq(NONZERO, DIGIT, Repeat(DIGIT, 1, None)))),
            seq(lit("-"), star(lit("0")), alt(byte_range(0x35, 0x39), seq(NONZERO, DIGIT), seq(one_of_bytes("12"), DIGIT, DIGIT),
                                              seq(lit("3"), one_of_bytes("01"), DIGIT), seq(lit("32"), byte_range(0x30, 0x33)))),
        ))
        exponent.append(Intersect((node, far)))
    return alt(plain, *exponent)


_Digits = tuple[bool, Node]  # (whether the empty fraction is in, the non-empty fraction digit strings)


def _digits(lo: int, hi: int) -> Node:
    return byte_range(0x30 + lo, 0x30 + hi) if lo <= hi else NOTHING


def _tail(lang: _Digits) -> Node:
    return alt(EMPTY, lang[1]) if lang[0] else lang[1]


def _fraction_cmp(f: str, op: str) -> _Digits:
    """Fraction digit strings D (D empty = no fraction) with 0.D `op` 0.f, trailing zeros implied."""
    if not f.strip("0"):
        return {
            "ge": (True, Repeat(DIGIT, 1, None)),
            "gt": (False, seq(star(lit("0")), NONZERO, star(DIGIT))),
            "le": (True, Repeat(lit("0"), 1, None)),
            "lt": (False, NOTHING),
        }[op]
    d = int(f[0])
    rest = _tail(_fraction_cmp(f[1:], op))
    if op in ("ge", "gt"):
        return False, alt(seq(_digits(d + 1, 9), star(DIGIT)), seq(lit(f[0]), rest))
    return True, alt(seq(_digits(0, d - 1), star(DIGIT)), seq(lit(f[0]), rest))


def _fraction(lang: _Digits) -> Node:
    return alt(*([EMPTY] if lang[0] else []), seq(lit("."), lang[1]))


def _split(value: Fraction) -> tuple[int, str]:
    """(integer part, fraction digits) of a terminating decimal >= 0."""
    whole = value.numerator // value.denominator
    rest, digits = value - whole, ""
    while rest:
        rest *= 10
        digit = rest.numerator // rest.denominator
        digits += str(digit)
        rest -= digit
    return whole, digits


def _decimal_magnitude(lo: Fraction, lo_incl: bool, hi: Fraction | None, hi_incl: bool) -> Node:
    """Unsigned `I` / `I.D` with lo <(=) value <(=) hi, for decimal bounds 0 <= lo (< hi)."""
    ia, fa = _split(lo)
    low = _fraction_cmp(fa, "ge" if lo_incl else "gt")
    if hi is None:
        return alt(seq(natural_range(ia + 1, None), opt(FRACTION)), seq(natural_range(ia, ia), _fraction(low)))
    ib, fb = _split(hi)
    high = _fraction_cmp(fb, "le" if hi_incl else "lt")
    if ia == ib:
        both = (low[0] and high[0], Intersect((low[1], high[1])))
        return seq(natural_range(ia, ia), _fraction(both))
    parts = [seq(natural_range(ia, ia), _fraction(low)), seq(natural_range(ib, ib), _fraction(high))]
    if ib - ia > 1:
        parts.append(seq(natural_range(ia + 1, ib - 1), opt(FRACTION)))
    return alt(*parts)


def decimal_range(lo: Fraction | None, lo_incl: bool, hi: Fraction | None, hi_incl: bool) -> Node:
    """Plain decimals (no exponent) between terminating decimal bounds, each exactly as written."""
    if lo is not None and hi is not None and (lo > hi or (lo == hi and not (lo_incl and hi_incl))):
        return NOTHING
    parts: list[Node] = []
    if hi is None or hi > 0 or (hi == 0 and hi_incl):
        pos_lo, pos_incl = (Fraction(0), True) if lo is None or lo < 0 else (lo, lo_incl)
        parts.append(_decimal_magnitude(pos_lo, pos_incl, hi, hi_incl))
    if lo is None or lo < 0:
        # x = -m, m > 0: x >= lo <=> m <= -lo; x <= hi <=> m >= -hi
        m_lo, m_incl = (Fraction(0), False) if hi is None or hi >= 0 else (-hi, hi_incl)
        m_hi = None if lo is None else -lo
        if m_hi is None or m_lo < m_hi or (m_lo == m_hi and m_incl and lo_incl):
            parts.append(seq(lit("-"), _decimal_magnitude(m_lo, m_incl, m_hi, lo_incl)))
    return alt(*parts)


def inner_exponents(lo: Fraction | None, lo_incl: bool, hi: Fraction | None, hi_incl: bool) -> Node:
    """Exponent spellings of the numbers between the integers inside decimal bounds (`minimum: -2.5`: from -2 on),
    which `decimal_range` leaves out: with `float_safe` they cover what models and `repr` write (1e-83, 2.5e+20);
    only exponent spellings between a bound and the nearest integer inside it stay out."""
    ilo = None if lo is None else math.ceil(lo)
    ihi = None if hi is None else math.floor(hi)
    ilo_incl = lo_incl or lo is None or ilo != lo
    ihi_incl = hi_incl or hi is None or ihi != hi
    if ilo is not None and ihi is not None and (ilo > ihi or (ilo == ihi and not (ilo_incl and ihi_incl))):
        return NOTHING
    return Intersect((number_range(ilo, ilo_incl, ihi, ihi_incl), EXPONENT_NUMBER))


def integral_spellings(lo: int | None, hi: int | None) -> Node:
    """A superset of the non-exponent numbers that exact arithmetic or a binary float reads as an integer in
    [lo, hi]: `5.0`, `-0`, and decimals within float rounding of an integer (a fraction opening with enough
    zeros or nines for the integer part's size, strictly between lo - 1 and hi + 1); every such number from
    10^15 on."""
    parts: list[Node] = [seq(integer_range(lo, hi), ZERO_FRACTION)]
    if (lo is None or lo <= 0) and (hi is None or hi >= 0):
        parts.append(seq(lit("-0"), ZERO_FRACTION))
    sign = opt(lit("-"))
    near: list[Node] = []
    for k in range(1, 17):  # k integer digits: floats there are spaced about 10^(k-16) apart
        zeros = max(16 - k - 1, 0)
        near.append(seq(sign, Repeat(DIGIT, k, k), lit("."), alt(Repeat(lit("0"), zeros, zeros), Repeat(lit("9"), zeros, zeros)), star(DIGIT)))
    near.append(seq(sign, NONZERO, Repeat(DIGIT, 15, None), opt(FRACTION)))
    if lo is not None or hi is not None:
        window = number_range(None if lo is None else lo - 1, False, None if hi is None else hi + 1, False)
        parts.append(Intersect((alt(*near), window)))
    else:
        parts += near
    return alt(*parts)


def _fixed(value: Fraction, places: int) -> str:
    """`value` (a multiple of 10^-places, >= 0) with exactly `places` fraction digits."""
    scaled = int(value * 10**places)
    if not places:
        return str(scaled)
    digits = str(scaled).rjust(places + 1, "0")
    return f"{digits[:-places]}.{digits[-places:]}"


def _canonical(value: Fraction) -> str:
    """The shortest exact decimal of a terminating value >= 0 (`2`, `1.5`)."""
    text = _fixed(value, 0) if value.denominator == 1 else None
    if text is not None:
        return text
    places = 0
    while (value * 10**places).denominator != 1:
        places += 1
    return _fixed(value, places)


def near_spellings(value: float) -> Node:
    """A superset of the numbers equal to `value` in exact decimal or binary floating-point arithmetic.

    Those lie within one unit of its 15th significant digit (binary rounding is finer): the decimals there
    (any spelling: `1.5`, `1.50`, `1.4999999999999999999`), every exponent spelling, and any number from
    10^14 on when `value` is that large."""
    exact = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
    if exact == 0:
        return alt(seq(opt(lit("-")), lit("0"), ZERO_FRACTION), EXPONENT_NUMBER)
    magnitude = abs(exact)
    if magnitude >= 10**14:
        return any_number()
    sign = lit("-") if exact < 0 else EMPTY
    first = len(str(magnitude.numerator // magnitude.denominator)) - 1 if magnitude >= 1 else -1
    while magnitude < Fraction(10) ** first:
        first -= 1
    places = 14 - first  # the 15th significant digit's place (> 0 below 10^14)
    unit = Fraction(1, 10**places)
    k = (magnitude / unit).numerator // (magnitude / unit).denominator
    options: list[Node] = [EXPONENT_NUMBER]
    for near in (k - 1, k, k + 1):
        v = near * unit
        canonical = _canonical(v)
        tail = star(lit("0")) if "." in canonical else ZERO_FRACTION
        options.append(seq(sign, lit(canonical), tail))
        options.append(seq(sign, lit(_fixed(v, places)), star(DIGIT)))
    return alt(*options)


def any_number() -> Node:
    """Every JSON number."""
    return seq(opt(lit("-")), UNSIGNED, opt(FRACTION), opt(EXPONENT))


@dataclass(frozen=True)
class DigitLimits:
    """The most digits a guided number may write in its integer part, fraction and exponent.

    Without a limit a number's grammar loops on its digits, and a model that never stops writing them
    (`172.700000…`) runs to the token limit. The default fits what APIs exchange: 15 integer digits are the
    integers every JSON parser reads exactly (a double holds 15 significant decimal digits, DBL_DIG, and every
    integer below 2^53 ≈ 9·10^15), enough for money in cents, millisecond timestamps (13 digits) and counts;
    8 fraction digits hold coordinates to a millimetre (1e-8 degree), currency (2–4) and percentages; 3
    exponent digits reach every double (1e-324 to 1e308). Schemas whose bounds or multipleOf need more get
    more (`for_bounds`)."""

    integer: int = 15
    fraction: int = 8
    exponent: int = 3

    def __post_init__(self) -> None:
        if min(self.integer, self.fraction, self.exponent) < 1:
            raise ValueError(f"digit limits must be at least 1: {self}")

    def for_bounds(self, bounds: Iterable[int | float], steps: Iterable[int | float] = ()) -> DigitLimits:
        """These limits widened so that numbers between `bounds` (and multiples of `steps`) keep values:
        one integer digit and one fraction digit more than any bound is written with, a step's fraction digits."""
        integer, fraction = self.integer, self.fraction
        for b in bounds:
            whole, digits = _split(abs(_written(b)))
            integer = max(integer, len(str(whole)) + 1)
            fraction = max(fraction, len(digits) + 1)
        for m in steps:
            fraction = max(fraction, len(_split(abs(_written(m)))[1]))
        return DigitLimits(integer, fraction, self.exponent)


DEFAULT_DIGITS = DigitLimits()


def _written(v: float) -> Fraction:
    """A bound as the decimal it is written as (`0.1` is 1/10)."""
    return Fraction(repr(v)) if isinstance(v, float) else Fraction(v)


@functools.lru_cache(maxsize=64)
def digit_shape(limits: DigitLimits) -> Node:
    """Every spelling `-I.FeX` with at most `limits` digits in each part: a finite language, so it always ends.

    Kept per limits (a few distinct ones in practice): every numeric parameter of every tool asks for it, and
    the product cache recognises the same node at once."""
    return seq(
        opt(lit("-")),
        Repeat(DIGIT, 1, limits.integer),
        opt(seq(lit("."), Repeat(DIGIT, 1, limits.fraction))),
        opt(seq(one_of_bytes("eE"), opt(one_of_bytes("+-")), Repeat(DIGIT, 1, limits.exponent))),
    )


def limit_digits(node: Node, limits: DigitLimits) -> Node:
    """The numbers of `node` with at most `limits` digits (a subset: only for what a grammar admits)."""
    return Intersect((node, digit_shape(limits)))
