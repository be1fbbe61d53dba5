"""JSON Schema → grammar IR for one value, in a given value syntax and one canonical whitespace.

Every validation keyword is either enforced exactly or rejected with `UnsupportedSchemaError` naming it and
its path. Objects are written with their `properties` in schema order; extra properties (where allowed)
come after them.

Recursion has two readings. `recursive=True` (one value, for the pushdown guide): a `$ref` met again inside
itself, and a place that holds any value, become `call`s of rules compiled once each (`SchemaCompiler.rules`),
so values nest without limit (with `refs_as_rules` and `containers_as_rules`, for a schema too large as one
automaton, every plain `$ref` and every member that may hold a container is a rule too, outside products of
languages). Otherwise (and where a call would fall inside a difference or intersection of
languages, which only regular languages have) recursion through `$ref` is unrolled to `max_ref_depth` (deeper
branches are cut, which keeps output valid but forbids nesting beyond that depth) and any value nests a bounded
depth.

This module holds `SchemaCompiler`'s entry (`value`), the dispatch of one subschema to the keywords that govern
it, and the split of a schema into one language per type; each concept compiles in a module of its own (the
class's bases), and the names other modules use are imported from here:

| module | what |
|---|---|
| `schema_base` | the state every part shares: polarity (subset or superset), nesting, errors, counts |
| `schema_keywords` | which keywords are annotations or unsupported, the standard formats; facts of JSON values |
| `schema_rewrites` | schema-to-schema rewrites: `if`/`then`/`else`, two schemas merged as one, disjoint types |
| `schema_refs` | `$ref`: resolution, the rules of the recursive reading, unrolling in the bounded one |
| `schema_combinators` | `allOf`, `anyOf`, `oneOf` (exclusivity, discriminators) |
| `schema_complements` | the values a schema rejects, built without a difference (`not` in the recursive reading) |
| `schema_literals` | `const`, `enum` |
| `schema_numbers` | `integer`, `number`: bounds, `multipleOf`, integer formats |
| `schema_strings` | `string`: `format`, `pattern`, lengths |
| `schema_arrays` | `array`: items, counts, `contains` |
| `schema_objects` | `object`: properties, required, additional and pattern members, counts, dependencies |
| `schema_any` | any JSON value, nested a bounded depth or as a rule |
| `schema_shapes` | sizes of IR nodes, and shapes the keyword modules share |
"""

from __future__ import annotations

from typing import Any

from tooldec.grammar import numbers
from tooldec.grammar.ir import NOTHING, Node, alt, lit
from tooldec.grammar.schema_any import (
    ANY_VALUE_BUDGET,
    MAX_ANY_DEPTH,
    MIN_ANY_DEPTH,
    SUBTRACTING_BUDGET,
    AnyValues,
    any_depth_at,
    nesting_limit,
)
from tooldec.grammar.schema_arrays import ArrayKeywords
from tooldec.grammar.schema_base import ANY_RULE, DEFAULT_REF_DEPTH, MAX_EXPANSIONS, Decide, Decided
from tooldec.grammar.schema_combinators import Combinators
from tooldec.grammar.schema_complements import Complements
from tooldec.grammar.schema_keywords import (
    ANNOTATIONS,
    INT_FORMATS,
    STANDARD_FORMATS,
    TYPES,
    UNSUPPORTED,
    _ptr,
    value_key,
)
from tooldec.grammar.schema_literals import LiteralValues
from tooldec.grammar.schema_numbers import NumberKeywords
from tooldec.grammar.schema_objects import ObjectKeywords, _string_except
from tooldec.grammar.schema_refs import ReferenceKeywords
from tooldec.grammar.schema_rewrites import _unconditional
from tooldec.grammar.schema_strings import StringKeywords

__all__ = [
    "ANNOTATIONS", "ANY_VALUE_BUDGET", "DEFAULT_REF_DEPTH", "INT_FORMATS", "MAX_ANY_DEPTH", "MAX_EXPANSIONS",
    "MIN_ANY_DEPTH", "STANDARD_FORMATS", "UNSUPPORTED", "Decide", "Decided", "SchemaCompiler", "any_depth_at",
    "clear_caches", "nesting_limit", "value_key",
]


class SchemaCompiler(
    ReferenceKeywords, Combinators, Complements, LiteralValues, NumberKeywords, StringKeywords, ArrayKeywords, ObjectKeywords,
    AnyValues,
):
    """Compiles the subschemas of one root document (so local `$ref`s resolve) to IR nodes. Key languages
    (propertyNames, patternProperties regions) are decided by automata that `decide` builds."""

    def value(self, schema: Any = None, path: str = "#") -> Node:
        """IR for one value valid under `schema` (default: the root).

        Without a fixed `any_depth`, the schema is built at MIN_ANY_DEPTH first, noting how deep each place that
        holds any value is, and built again under the largest nesting limit whose automata fit ANY_VALUE_BUDGET
        states together (when it has such places: most tool schemas have none).
        """
        target = self.root if schema is None else schema
        try:
            return self._value(target, path)
        finally:
            self._compile_rules()

    def _value(self, target: Any, path: str) -> Node:
        if self.any_depth is not None:
            return self._compile(target, path)
        deepest = self._deepest
        self._any_limit, self._any_places, self._subtracts = 0, [], False
        node = self._compile(target, path)
        places = self._any_places
        limit = nesting_limit(places, SUBTRACTING_BUDGET if self._subtracts else self.any_value_budget)
        if any(any_depth_at(limit, k) > MIN_ANY_DEPTH for k in places):  # else the second build changes nothing
            self._deepest, self._any_limit, self._any_places = deepest, limit, []
            node = self._compile(target, path)
        return node

    def _compile(self, schema: Any, path: str) -> Node:
        self._expansions += 1
        if self._expansions > MAX_EXPANSIONS:
            raise self._unsupported(
                "size", path, f"the schema expands to more than {MAX_EXPANSIONS:,} subschemas (recursive $ref, allOf)"
            )
        if schema is True:
            if self._negative or self._flips:
                # positive inside a flip is a subset a superset loses: only its valid JSON texts must be instances,
                # and every JSON value is one here, so a scanner (as deep as the grammar nests) cuts nothing
                return self._any_superset()
            if self._calls_here():
                return self._call(ANY_RULE, True)
            self._any_places.append(self._depth)
            depth = self.any_depth if self.any_depth is not None else any_depth_at(self._any_limit, self._depth)
            self._reached(depth + 1)
            return self.any_value(depth)
        if schema is False:
            return NOTHING
        if not isinstance(schema, dict):
            raise self._bad(f"a schema must be an object or a boolean, not {type(schema).__name__}", path)
        listed = self._listed(schema, path)
        if listed is not None:
            return self._enum(schema, listed, path)
        for key in schema:
            if key in UNSUPPORTED:
                raise self._unsupported(key, _ptr(path, key))
        if "if" in schema or "then" in schema or "else" in schema:
            return self._compile(_unconditional(schema), path)
        if "$ref" in schema:
            return self._ref(schema, path)
        if "allOf" in schema:
            return self._all_of(schema, path)
        if "anyOf" in schema or "oneOf" in schema:
            return self._union(schema, path)
        if "not" in schema:
            rest = {k: v for k, v in schema.items() if k != "not"}
            if self._complements_here() and not set(rest) - ANNOTATIONS:
                complement = self._complement(schema["not"], _ptr(path, "not"))
                if complement is not None:
                    return complement
            return self._difference(self._operand(lambda: self._compile(rest, path)), schema["not"], _ptr(path, "not"))
        return self._typed(schema, path)

    def _typed(self, schema: dict, path: str) -> Node:
        declared = schema.get("type")
        if declared is None:
            types = list(TYPES)
        elif isinstance(declared, str):
            types = [declared]
        elif isinstance(declared, list) and all(isinstance(t, str) for t in declared):
            types = list(declared)
        else:
            raise self._bad(f"type must be a string or a list of strings, not {declared!r}", _ptr(path, "type"))
        if schema.get("nullable") is True and "null" not in types:
            types.append("null")
        for t in types:
            if t not in TYPES:
                raise self._bad(f"unknown type {t!r}", _ptr(path, "type"))
        if "number" in types and "integer" in types:
            types.remove("integer")
        return alt(*(self._one_type(t, schema, path) for t in types))

    def _one_type(self, t: str, schema: dict, path: str) -> Node:
        syn = self.syntax
        if t == "null":
            return lit(syn.null)
        if t == "boolean":
            return alt(lit(syn.true), lit(syn.false))
        if t == "integer":
            return self._integer(schema, path)
        if t == "number":
            return self._number(schema, path)
        if t == "string":
            return self._string(schema, path)
        if t == "array":
            return self._array(schema, path)
        return self._object(schema, path)

    def _compile_all(self, parts: list[tuple[Any, str]], path: str) -> Node:
        """IR for a value valid under every (schema, path) in `parts` (merged into one schema where possible)."""
        parts = [(s, p) for s, p in parts if s is not True and s != {}] or parts[:1]
        if not parts:
            return self._compile(True, path)
        if len(parts) == 1:
            return self._compile(*parts[0])
        return self._compile({"allOf": [s for s, _ in parts]}, parts[0][1])


def clear_caches() -> None:
    """Forget the kept grammar pieces (number ranges, key languages): what a process's first compile starts from."""
    numbers.clear_caches()
    _string_except.cache_clear()
