"""`integer` and `number`: bounds (`minimum`, `exclusiveMaximum`, ... in draft 4 and later forms), `multipleOf`
(`tooldec.grammar.multiples`) and the integer formats; float-safe near a bound, since exact decimal and binary
arithmetic may compare a value with it differently."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from tooldec.errors import UnsupportedSchemaError
from tooldec.grammar.ir import Difference, Intersect, Node, Repeat, alt, lit, seq
from tooldec.grammar.multiples import multiples
from tooldec.grammar.numbers import (
    EXPONENT_NUMBER,
    any_number,
    decimal_range,
    float_safe,
    inner_exponents,
    integer_range,
    integral_spellings,
    number_range,
)
from tooldec.grammar.schema_base import CompilerBase
from tooldec.grammar.schema_keywords import INT_FORMATS, NUMBER_FORMATS, STANDARD_FORMATS, _is_number, _ptr


class NumberKeywords(CompilerBase):
    """Integers and numbers under their bounds, `multipleOf` and `format`."""

    def _bounds(self, schema: dict, path: str) -> tuple[float | None, bool, float | None, bool]:
        lo = schema.get("minimum")
        hi = schema.get("maximum")
        lo_incl = hi_incl = True
        ex_lo, ex_hi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        for name, v in (("minimum", lo), ("maximum", hi)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise self._bad(f"{name} must be a number", _ptr(path, name))
        if ex_lo is True:
            lo_incl = False
        elif _is_number(ex_lo) and (lo is None or ex_lo >= lo):
            lo, lo_incl = ex_lo, False
        if ex_hi is True:
            hi_incl = False
        elif _is_number(ex_hi) and (hi is None or ex_hi <= hi):
            hi, hi_incl = ex_hi, False
        return lo, lo_incl, hi, hi_incl

    def _integer(self, schema: dict, path: str) -> Node:
        m = self._multiple_of(schema, path)
        lo, lo_incl, hi, hi_incl = self._bounds(schema, path)
        ilo = None if lo is None else (math.ceil(lo) if lo_incl else math.floor(lo) + 1)
        ihi = None if hi is None else (math.floor(hi) if hi_incl else math.ceil(hi) - 1)
        fmt = schema.get("format")
        if fmt in INT_FORMATS:
            flo, fhi = INT_FORMATS[fmt]
            ilo = flo if ilo is None else max(ilo, flo)
            ihi = fhi if ihi is None else min(ihi, fhi)
        elif fmt in STANDARD_FORMATS - NUMBER_FORMATS and not self._negative:
            raise self._unsupported("format", _ptr(path, "format"), f"{fmt!r} on an integer")
        if self._negative:
            # every number Python or exact arithmetic may read as such an integer (an integral multipleOf enforced
            # on plain integers only)
            return self._integral_superset(m, ilo, ihi)
        if m is not None and m != 1:
            return self._multiples(m, True, ilo, True, ihi, True, path)
        return integer_range(ilo, ihi)

    def _integral_superset(self, m: float | None, ilo: int | None, ihi: int | None) -> Node:
        """For a difference's right side: every number that Python or exact arithmetic may read as an integer in
        [ilo, ihi] and a multiple of `m`.

        Python reads a plain integer exactly, and an integer below 2^53 with a zero fraction (`6.0`) as the exact
        float, and `jsonschema` tests an integer `multipleOf` of either exactly (`%`): for an integer m > 1 those
        spellings are its multiples alone (`not: {multipleOf: 3}` keeps 1, 2 and 4.0). Every other spelling that
        may read as an integer stays (`2.9999999999999999`, `1e3`), and so does every integer where m is not an
        integer or its multiples are refused (too many remainders or endings)."""
        plain = integer_range(ilo, ihi)
        others = alt(integral_spellings(ilo, ihi), EXPONENT_NUMBER)
        if isinstance(m, int) and not isinstance(m, bool) and 1 < m < 2**53:
            try:
                kept = multiples(m, integer=True, lo=ilo, lo_incl=True, hi=ihi, hi_incl=True)
            except UnsupportedSchemaError:
                return alt(plain, others)
            exact = integer_range(-(2**53), 2**53)
            zeros = seq(lit("."), Repeat(lit("0"), 1, None))
            decided = alt(plain, seq(Intersect((plain, exact)), zeros))
            return alt(kept, seq(Intersect((kept, exact)), zeros), Difference(others, decided))
        return alt(plain, others)

    def _multiple_of(self, schema: dict, path: str) -> int | float | None:
        m = schema.get("multipleOf")
        if m is not None and (isinstance(m, bool) or not isinstance(m, (int, float)) or not m > 0 or not math.isfinite(m)):
            raise self._bad("multipleOf must be a positive number", _ptr(path, "multipleOf"))
        return m

    def _multiples(
        self, m: float, integer: bool, lo: Any, lo_incl: bool, hi: Any, hi_incl: bool, path: str
    ) -> Node:
        try:
            return multiples(m, integer=integer, lo=lo, lo_incl=lo_incl, hi=hi, hi_incl=hi_incl)
        except UnsupportedSchemaError as exc:
            key = exc.keyword
            raise self._unsupported(key, _ptr(path, key), exc.detail) from None

    def _number(self, schema: dict, path: str) -> Node:
        m = self._multiple_of(schema, path)
        fmt = schema.get("format")
        if m == 1 or fmt in INT_FORMATS:
            return self._integer(schema, path)
        if fmt in STANDARD_FORMATS - NUMBER_FORMATS and not self._negative:
            raise self._unsupported("format", _ptr(path, "format"), f"{fmt!r} on a number")
        lo, lo_incl, hi, hi_incl = self._bounds(schema, path)
        if self._negative:
            if isinstance(m, int) and not isinstance(m, bool) and m > 1:
                # its multiples are integers: those in the bounds widened to the integers around them
                return self._integral_superset(m, None if lo is None else math.floor(lo),
                                               None if hi is None else math.ceil(hi))
            # bounds widened to the integers around them, every exponent spelling; multipleOf not enforced
            if lo is None and hi is None:
                return any_number()
            # widened to the integers around the bounds (excluded): decimals there may round onto a bound
            wlo = None if lo is None else math.floor(lo) - 1
            whi = None if hi is None else math.ceil(hi) + 1
            return alt(number_range(wlo, False, whi, False), EXPONENT_NUMBER)
        if m is not None:
            return self._multiples(m, False, lo, lo_incl, hi, hi_incl, path)
        if lo is None and hi is None:
            return any_number()
        if all(v is None or float(v).is_integer() for v in (lo, hi)):
            bounded = number_range(None if lo is None else int(lo), lo_incl, None if hi is None else int(hi), hi_incl)
        else:
            exact_lo, exact_hi = _exact(lo), _exact(hi)
            bounded = alt(decimal_range(exact_lo, lo_incl, exact_hi, hi_incl),
                          inner_exponents(exact_lo, lo_incl, exact_hi, hi_incl))
        # a value within float rounding of a bound compares differently in exact and binary arithmetic
        return float_safe(bounded, [b for b in (_exact(lo), _exact(hi)) if b is not None])


def _exact(v: float | None) -> Fraction | None:
    """A bound as the exact decimal it is written as (`0.1` is 1/10, not the nearest binary float)."""
    if v is None:
        return None
    return Fraction(repr(v)) if isinstance(v, float) else Fraction(v)

