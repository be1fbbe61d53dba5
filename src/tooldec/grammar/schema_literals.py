"""`const` and `enum`: the listed values the whole schema admits (each checked by `jsonschema` itself), spelled
as listed; on a difference's right side, every spelling that may read as one of them."""

from __future__ import annotations

import math
from typing import Any

import jsonschema
from jsonschema.validators import validator_for

from tooldec.grammar.counting import keyed_count
from tooldec.grammar.ir import EMPTY, NOTHING, Intersect, Node, Repeat, alt, lit, seq
from tooldec.grammar.numbers import near_spellings
from tooldec.grammar.schema_base import CompilerBase
from tooldec.grammar.schema_keywords import _TYPE_AND_ENUM, ANNOTATIONS, TYPES, _json_depth, _ptr
from tooldec.grammar.schema_objects import MAX_TRACKED_KEYS
from tooldec.grammar.schema_shapes import _joined

ENUMERATED_INTEGERS = 4096
"""The most integers a bounded integer schema that combines subschemas is checked for one by one
(`LiteralValues._integers_in_range`): each costs a `jsonschema` validation (about 50 us)."""
COMBINING = frozenset({"not", "allOf", "anyOf", "oneOf", "$ref", "if"})
"""The keywords that combine subschemas."""


class LiteralValues(CompilerBase):
    """`const` / `enum`."""

    def _is_valid(self, value: Any, schema: dict) -> bool:
        if self._validator is None:
            cls = validator_for(self.root if isinstance(self.root, dict) else {})
            self._validator = cls(self.root if isinstance(self.root, (dict, bool)) else {})
        if (
            not set(schema) - ANNOTATIONS - _TYPE_AND_ENUM
            and any(v is value for v in schema.get("enum", ()))
            and not (isinstance(value, float) and not math.isfinite(value))  # jsonschema: nan is in no enum
        ):
            # a value listed by the schema's own enum, under at most a type: only the type is left to check (the
            # common tool parameter; evolving a validator per value cost more than the rest of its grammar)
            declared = schema.get("type")
            if declared is None:
                return True
            declared = [declared] if isinstance(declared, str) else declared
            if isinstance(declared, list) and all(t in TYPES for t in declared):
                return any(self._validator.is_type(value, t) for t in declared)
        try:
            return bool(self._validator.evolve(schema=schema).is_valid(value))
        except jsonschema.exceptions.SchemaError as exc:
            raise self._bad(str(exc.message), "#") from exc

    def _listed(self, schema: dict, path: str, depth: int = 0) -> list[Any] | None:
        """The values a schema's own `const` / `enum`, or that of an `allOf` part (through bare `$ref`s), lists.

        None when neither lists any. Such a schema admits at most those values, so each can be checked against
        the whole schema by `jsonschema` itself, whatever other keywords (`not`, `oneOf`, ...) it holds.
        """
        if "const" in schema:
            return [schema["const"]]
        if "enum" in schema:
            if not isinstance(schema["enum"], list):
                raise self._bad("enum must be a list", _ptr(path, "enum"))
            return schema["enum"]
        counted = self._integers_in_range(schema, path)
        if counted is not None:
            return counted
        parts = schema.get("allOf")
        for i, part in enumerate(parts if isinstance(parts, list) and depth < 8 else []):
            part = self._plain(part)
            if isinstance(part, dict) and "$ref" not in part:
                values = self._listed(part, _ptr(path, "allOf", i), depth + 1)
                if values is not None:
                    return values
        return None

    def _integers_in_range(self, schema: dict, path: str) -> list[int] | None:
        """Every integer an integer schema's own bounds leave, when they are few and the schema combines
        subschemas: each is then checked against the whole schema like an enum's values (exact), where building
        the combination would multiply automata (a `not` of six `multipleOf`s over 900 integers passes the
        state bound). None otherwise."""
        if schema.get("type") != "integer" or not COMBINING & set(schema):
            return None
        lo, lo_incl, hi, hi_incl = self._bounds(schema, path)
        if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
            return None
        ilo = math.ceil(lo) if lo_incl else math.floor(lo) + 1
        ihi = math.floor(hi) if hi_incl else math.ceil(hi) - 1
        return list(range(ilo, ihi + 1)) if ihi - ilo < ENUMERATED_INTEGERS else None

    def _enum(self, schema: dict, values: list[Any], path: str) -> Node:
        """The listed `values` that the whole `schema` admits, each spelled as listed (every spelling when
        negative)."""
        for v in values:
            self._reached(_json_depth(v))
        keep = [v for v in values if self._is_valid(v, schema)]  # the instances, exactly (siblings checked too)
        if self._negative:
            # every spelling a value may take in the grammar it is subtracted from (numbers nearby, any key order)
            return alt(*(self._spellings(v, _ptr(path, "enum")) for v in keep))
        spelled = []
        for v in keep:
            try:
                spelled.append(self.syntax.dumps(v))
            except (TypeError, ValueError) as exc:
                raise self._bad(str(exc), _ptr(path, "enum")) from exc
        return alt(*(lit(s) for s in dict.fromkeys(spelled)))

    def _spellings(self, value: Any, path: str) -> Node:
        """A superset of the texts equal to `value`: a number's neighbourhood (exact decimals and binary
        floats both round there), objects' members in any order."""
        syn = self.syntax
        if isinstance(value, bool) or value is None or isinstance(value, str):
            return lit(syn.dumps(value))
        if isinstance(value, (int, float)):
            return near_spellings(value) if math.isfinite(value) else NOTHING
        if isinstance(value, list):
            return self._wrap("[", seq(*_joined([self._spellings(v, path) for v in value], self._sep)), "]")
        if isinstance(value, dict):
            if not value:
                return self._wrap("{", EMPTY, "}")
            members = [seq(lit(syn.dumps(str(k)) + syn.key_sep), self._spellings(v, path)) for k, v in value.items()]
            body = self._wrap("{", Repeat(alt(*members), 1, None, self._sep), "}")
            has = [keyed_count([syn.dumps(str(k)).encode()], 1, max_depth=self._scan_depth())
                   for k in list(value)[:MAX_TRACKED_KEYS]]
            return Intersect((body, *has))
        raise self._bad(f"{value!r} has no JSON spelling", path)
