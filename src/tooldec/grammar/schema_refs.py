"""`$ref`: local references resolved in the root document, and recursion read two ways.

Recursive reading (one value for the pushdown guide): a reference met again inside itself, or every plain
reference with `refs_as_rules`, becomes a `call` of a rule compiled once (`SchemaCompiler.rules`). Bounded
reading (and wherever a call would fall inside a difference or an intersection, which only regular languages
have): a reference is expanded in place, up to `max_ref_depth` times inside itself, deeper branches cut.
"""

from __future__ import annotations

import json
from typing import Any

from tooldec.grammar.ir import NOTHING, Intersect, Node, call
from tooldec.grammar.refs import resolve_pointer
from tooldec.grammar.schema_base import ANY_RULE, CompilerBase
from tooldec.grammar.schema_keywords import ANNOTATIONS, _ptr
from tooldec.grammar.schema_rewrites import _merge
from tooldec.grammar.schema_shapes import _ir_size

MEMBER_RULE_SIZE = 5_000
"""IR states past which a scalar member is a rule of its own with `containers_as_rules` (a string of maxLength 64
builds 4,099, of 1,024: 65,539)."""


class ReferenceKeywords(CompilerBase):
    """`$ref` resolution, and the rules of the recursive reading."""

    def _call(self, key: str, schema: Any, path: str | None = None) -> Node:
        """A call of the rule for `schema` (named `key`: its reference, or its text for a container; `path`, where
        errors in it are reported, defaults to `key`), compiled once after the value."""
        index = self._rule_index.get(key)
        if index is None:
            index = self._rule_index[key] = len(self.rules)
            self.rules.append(NOTHING)
            self._pending.append((index, key, schema, key if path is None else path))
        return call(index)

    def _compile_rules(self) -> None:
        """Compile the bodies of the rules calls named, each as a fresh value in which its own reference is
        already entered (so that the body's recursion calls it again)."""
        saved = self._active_refs, self._depth
        try:
            while self._pending:
                index, key, schema, path = self._pending.pop()
                self._active_refs, self._depth = {key: 1}, 0
                self.rules[index] = self._any_level() if key == ANY_RULE else self._compile(schema, path)
        finally:
            self._active_refs, self._depth = saved

    def _member(self, parts: list[tuple[Any, str]], path: str, *, copied: bool = False) -> Node:
        """A member's or item's value valid under every (schema, path) in `parts`. With `containers_as_rules`,
        where it may be a call here: a call of a rule of its own when it may hold an object or array or is
        `copied` (an item a bounded array repeats), or when compiled it is larger than MEMBER_RULE_SIZE (a long
        string, kept once however many members share it); else compiled in place (`_compile_all`)."""
        if not (self.containers_as_rules and self._optional_call_here()):
            return self._compile_all(parts, path)
        kept = [(s, p) for s, p in parts if s is not True and s != {}]
        if not kept or not all(isinstance(s, dict) for s, _ in kept):
            return self._compile_all(parts, path)
        schema = kept[0][0] if len(kept) == 1 else {"allOf": [s for s, _ in kept]}
        key = "member " + json.dumps(schema, sort_keys=True, default=repr)
        if key in self._rule_index or copied or all(_may_nest(self._plain(s)) for s, _ in kept):
            return self._call(key, schema, kept[0][1])
        node = self._compile_all(parts, path)
        if _ir_size(node) <= MEMBER_RULE_SIZE:
            return node
        self._rule_index[key] = len(self.rules)
        self.rules.append(node)
        return call(self._rule_index[key])

    def _resolve(self, ref: str, path: str) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise self._unsupported("$ref", path, f"only local references are supported, not {ref!r}")
        if ref[1:] and not ref.startswith("#/"):
            raise self._unsupported("$ref", path, f"anchor references are not supported: {ref!r}")
        try:
            return resolve_pointer(self.root, ref)
        except LookupError as exc:
            raise self._bad(str(exc), path) from None

    def _ref(self, schema: dict, path: str) -> Node:
        ref = schema["$ref"]
        target = self._resolve(ref, _ptr(path, "$ref"))
        count = self._active_refs.get(ref, 0)
        siblings = {k: v for k, v in schema.items() if k != "$ref" and k not in ANNOTATIONS}
        if not siblings and (count and self._calls_here() or self.refs_as_rules and self._optional_call_here()):
            return self._call(ref, target)
        if count >= self.max_ref_depth:
            return self._cut()
        self._active_refs[ref] = count + 1
        try:
            if siblings:
                merged = _merge(target, siblings) if isinstance(target, dict) else None
                if merged is not None:
                    return self._compile(merged, path)
                return Intersect(self._operand(lambda: (self._compile(target, ref), self._compile(siblings, path))))
            return self._compile(target, ref)
        finally:
            self._active_refs[ref] = count

    def _plain(self, schema: Any) -> Any:
        """The schema a chain of bare `$ref`s leads to (the schema itself otherwise)."""
        for _ in range(32):
            if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str)):
                return schema
            if set(schema) - ANNOTATIONS - {"$ref"} or not schema["$ref"].startswith("#"):
                return schema
            try:
                schema = resolve_pointer(self.root, schema["$ref"])
            except LookupError:
                return schema
        return schema


_NESTING = frozenset({
    "properties", "patternProperties", "additionalProperties", "propertyNames", "required", "minProperties",
    "maxProperties", "dependencies", "dependentRequired", "dependentSchemas", "items", "prefixItems",
    "additionalItems", "contains", "minItems", "maxItems", "uniqueItems", "allOf", "anyOf", "oneOf", "not", "$ref",
    "if", "then", "else",
})


def _may_nest(schema: Any) -> bool:
    """Whether a subschema's values may be objects or arrays, from its face (a `type` naming neither, `const` or
    `enum`: no; no type and no keyword of containers or combinators: no, a scalar's keywords only)."""
    if not isinstance(schema, dict) or "const" in schema or "enum" in schema:
        return False
    declared = schema.get("type")
    if isinstance(declared, str):
        return declared in ("object", "array")
    if isinstance(declared, list):
        return "object" in declared or "array" in declared
    return bool(_NESTING & set(schema))
