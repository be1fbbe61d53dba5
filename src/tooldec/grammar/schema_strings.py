"""`string`: `format`, `pattern`, `minLength` and `maxLength`, intersected (a length the pattern or format already
implies needs no counting)."""

from __future__ import annotations

from tooldec.errors import UnsupportedSchemaError
from tooldec.grammar.ir import Intersect, Node, lit, seq
from tooldec.grammar.regex import format_ir, pattern_ir, pattern_upper_ir
from tooldec.grammar.schema_base import CompilerBase
from tooldec.grammar.schema_keywords import STANDARD_FORMATS, _ptr
from tooldec.grammar.schema_shapes import _max_bytes, _min_bytes
from tooldec.grammar.strings import MAX_STRING_LENGTH, string_content

LONG_STRING_CAP = 1_024  # a maxLength above MAX_STRING_LENGTH is enforced as this (a subset)


class StringKeywords(CompilerBase):
    """Strings under their format, pattern and length bounds."""

    def _string(self, schema: dict, path: str) -> Node:
        parts: list[Node] = []
        fmt = schema.get("format")
        if fmt is not None and not isinstance(fmt, str):
            raise self._bad("format must be a string", _ptr(path, "format"))
        if (fmt in STANDARD_FORMATS or fmt == "byte") and not self._negative:
            # a format is a subset of the valid values; on the right side of a difference it constrains nothing
            parts.append(format_ir(fmt, path=_ptr(path, "format")))
        if "pattern" in schema:
            pat = schema["pattern"]
            if not isinstance(pat, str):
                raise self._bad("pattern must be a string", _ptr(path, "pattern"))
            bound = pattern_upper_ir if self._negative else pattern_ir
            parts.append(bound(pat, path=_ptr(path, "pattern")))
        lo = self._count(schema, "minLength", path) or 0
        hi = self._count(schema, "maxLength", path)
        if parts:
            # a bound the pattern or format already implies needs no counting (a character is 1 to 6 bytes)
            most, least = min(_max_bytes(p) for p in parts), max(_min_bytes(p) for p in parts)
            if hi is not None and most <= hi:
                hi = None
            if lo and -(-least // 6) >= lo:
                lo = 0
        if hi is not None and hi > MAX_STRING_LENGTH:
            # every character below the bound is a state of its own: a huge bound is enforced as a smaller
            # one (a subset), or not at all on a difference's right side (a superset)
            hi = None if self._negative else max(LONG_STRING_CAP, lo)
        if self._negative and lo > MAX_STRING_LENGTH:
            lo = MAX_STRING_LENGTH
        if lo or hi is not None or not parts:
            try:
                parts.append(string_content(min_length=lo, max_length=hi, python=self.syntax.python))
            except UnsupportedSchemaError as exc:
                key = "maxLength" if hi is not None and exc.keyword == "maxLength" else exc.keyword
                raise self._unsupported(key, _ptr(path, key), exc.detail) from None
        body = parts[0] if len(parts) == 1 else Intersect(tuple(parts))
        return seq(lit('"'), body, lit('"'))
