"""The values a schema rejects, built as a language of its own (no difference of languages), for the recursive
reading: there a `not`, or a `oneOf` with a branch that admits every value, subtracts from values that nest
without bound, which no product of automata can take. Pushing the negation inward keeps every call outside
products: not (anyOf of one branch) is its complement, not (allOf) the union of the parts' complements, a
value of another type is outside a typed schema, an object whose member `k` holds a value outside
`properties[k]` (or that lacks a required key) is outside an object schema, an array with an item outside
`items` is outside an array schema. Anything else has no complement here (None), and the difference stays.

Only JSON Schema's own reading of objects applies (an absent additionalProperties admits any member), so the
complement is taken only when the compiler reads objects so (`additional_properties`).
"""

from __future__ import annotations

from typing import Any

from tooldec.grammar.ir import NOTHING, Node, Repeat, alt, lit, seq
from tooldec.grammar.schema_base import MAX_EXPANSIONS, CompilerBase
from tooldec.grammar.schema_keywords import ANNOTATIONS, KEYWORDS, TYPES, _ptr
from tooldec.grammar.schema_objects import _string_except

MAX_COMPLEMENT_REFS = 8  # `$ref`s followed in a row while one complement is built (a recursive one has none)
_SHAPES = frozenset({"type", "properties", "required", "items"})


def _constraints(schema: dict) -> set[str]:
    """The keys of `schema` that may constrain a value (not annotations, not unknown words)."""
    return {k for k in schema if k in KEYWORDS and k not in ANNOTATIONS}


def universal(schema: Any) -> bool:
    """Whether `schema` admits every value on its face (`true`, or only annotations and unknown words)."""
    return schema is True or (isinstance(schema, dict) and not _constraints(schema))


class Complements(CompilerBase):
    """The complement of a schema, built positively where its shape allows (see the module docstring)."""

    def _complements_here(self) -> bool:
        """Whether a complement may be built here: the recursive reading, where calls may go, objects open."""
        return self.recursive and self._calls_here() and bool(self.additional_properties)

    def _complement(self, schema: Any, path: str, refs: int = 0) -> Node | None:
        """Every value `schema` rejects, or None where its shape has no complement here."""
        if schema is True:
            return NOTHING
        if schema is False:
            return self._compile(True, path)
        if not isinstance(schema, dict):
            return None
        keys = _constraints(schema)
        if not keys:
            return NOTHING
        if keys == {"not"}:
            return self._compile(schema["not"], _ptr(path, "not"))
        self._expansions += 1
        if self._expansions > MAX_EXPANSIONS:
            raise self._unsupported("size", path, f"the schema expands to more than {MAX_EXPANSIONS:,} subschemas")
        if keys == {"$ref"}:
            if refs >= MAX_COMPLEMENT_REFS:
                return None
            return self._complement(self._resolve(schema["$ref"], _ptr(path, "$ref")), schema["$ref"], refs + 1)
        if keys == {"anyOf"} and isinstance(schema["anyOf"], list) and len(schema["anyOf"]) == 1:
            return self._complement(schema["anyOf"][0], _ptr(path, "anyOf", 0), refs)
        if keys == {"allOf"} and isinstance(schema["allOf"], list) and schema["allOf"]:
            parts = [self._complement(p, _ptr(path, "allOf", i), refs) for i, p in enumerate(schema["allOf"])]
            kept = [p for p in parts if p is not None]
            return alt(*kept) if len(kept) == len(parts) else None
        if keys == {"oneOf"} and isinstance(schema["oneOf"], list):
            return self._complement_one_of(schema["oneOf"], path, refs)
        if keys <= _SHAPES:
            return self._complement_shape(schema, path, refs)
        return None

    def _complement_one_of(self, branches: list[Any], path: str, refs: int) -> Node | None:
        """A `oneOf` with a branch that admits every value fails where another branch also matches: the values
        of the other branches; two such branches always fail."""
        others = [(i, b) for i, b in enumerate(branches) if not universal(b)]
        if len(others) == len(branches):
            return None
        if len(branches) - len(others) > 1:
            return self._compile(True, path)
        return alt(*(self._compile(b, _ptr(path, "oneOf", i)) for i, b in others))

    def _one_of_universal(self, branches: list[Any], path: str) -> Node | None:
        """A `oneOf` with a branch that admits every value: the values no other branch admits (the complement
        of the one other branch), nothing with two such branches; None otherwise."""
        others = [(i, b) for i, b in enumerate(branches) if not universal(b)]
        if len(others) == len(branches) or len(others) > 1:
            return None
        if len(branches) - len(others) > 1:
            return NOTHING
        if not others:
            return self._compile(True, path)
        i, branch = others[0]
        return self._complement(branch, _ptr(path, "oneOf", i))

    def _complement_shape(self, schema: dict, path: str, refs: int) -> Node | None:
        """Values of another type, or of a declared type that break its `properties`, `required` or `items`."""
        declared = schema.get("type", list(TYPES))
        types = [declared] if isinstance(declared, str) else declared
        if not isinstance(types, list) or any(t not in TYPES for t in types):
            return None
        kept = set(types) | ({"integer"} if "number" in types else set())
        out: list[Node] = []
        others = [t for t in TYPES if t not in kept and not (t == "number" and "integer" in kept)]
        if others:
            out.append(self._compile({"type": others}, path))
        if "integer" in kept and "number" not in kept:  # numbers that are not integers
            out.append(self._compile({"type": "number", "not": {"type": "integer"}}, path))
        if "object" in kept:
            broken = self._broken_object(schema, path, refs)
            if broken is None:
                return None
            out.append(broken)
        if "array" in kept and "items" in schema:
            items = schema["items"]
            if not isinstance(items, (dict, bool)):
                return None
            bad = self._nested(lambda: self._complement(items, _ptr(path, "items"), refs))
            if bad is None:
                return None
            some = self._nested(lambda: self._compile(True, path))
            sep = self._sep
            out.append(self._wrap("[", seq(Repeat(seq(some, sep), 0, None), bad, Repeat(seq(sep, some), 0, None)), "]"))
        return alt(*out)

    def _broken_object(self, schema: dict, path: str, refs: int) -> Node | None:
        """Objects with a member outside its `properties` schema, or without a `required` key (members in any
        order, other keys holding any value)."""
        props = schema.get("properties", {})
        required = schema.get("required", [])
        if not isinstance(props, dict) or not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            return None
        syn, sep = self.syntax, self._sep
        out: list[Node] = []
        for name, sub in props.items():
            bad = self._nested(lambda sub=sub, name=name: self._complement(sub, _ptr(path, "properties", name), refs))
            if bad is None:
                return None
            if bad == NOTHING:
                continue
            other = self._other_member(name)
            member = seq(lit(syn.dumps(name) + syn.key_sep), bad)
            out.append(self._wrap("{", seq(Repeat(seq(other, sep), 0, None), member, Repeat(seq(sep, other), 0, None)), "}"))
        for name in dict.fromkeys(required):
            out.append(self._wrap("{", Repeat(self._other_member(name), 0, None, sep), "}"))
        return alt(*out)

    def _other_member(self, name: str) -> Node:
        """A member whose key is not `name` (canonical spellings), holding any value."""
        keys = seq(lit('"'), _string_except(frozenset([name])), lit('"' + self.syntax.key_sep))
        return seq(keys, self._nested(lambda: self._compile(True, "#")))
