"""`allOf`, `anyOf` and `oneOf`: parts merged into one schema where they can be (`rewrites._merge`), else
intersected under one key order; branches united, and a `oneOf`'s made exclusive by differences unless their
types or a discriminating property already keep them apart. (`not` is a difference: `CompilerBase._difference`.)
"""

from __future__ import annotations

from typing import Any

from tooldec.errors import UnsupportedSchemaError
from tooldec.grammar.ir import Intersect, Node, alt
from tooldec.grammar.refs import resolve_pointer
from tooldec.grammar.schema_base import MAX_EXPANSIONS, CompilerBase
from tooldec.grammar.schema_keywords import ANNOTATIONS, _ptr, value_key
from tooldec.grammar.schema_rewrites import _disjoint_types, _merge, key_order


class Combinators(CompilerBase):
    """`allOf`, `anyOf`, `oneOf`."""

    def _all_of(self, schema: dict, path: str) -> Node:
        parts = schema["allOf"]
        if not isinstance(parts, list) or not parts:
            raise self._bad("allOf must be a non-empty list", _ptr(path, "allOf"))
        merged: dict | None = {k: v for k, v in schema.items() if k != "allOf"}
        entered: list[str] = []
        try:
            for part in parts:
                if part is True:
                    continue
                while isinstance(part, dict) and isinstance(part.get("$ref"), str) and not set(part) - ANNOTATIONS - {"$ref"}:
                    ref = part["$ref"]
                    if self._active_refs.get(ref, 0) >= self.max_ref_depth:
                        return self._cut()
                    self._active_refs[ref] = self._active_refs.get(ref, 0) + 1
                    entered.append(ref)
                    part = self._resolve(ref, _ptr(path, "allOf"))
                if merged is None or not isinstance(part, dict) or "$ref" in part:
                    merged = None
                    break
                merged = _merge(merged, part)
            if merged is not None:
                return self._compile(merged, path)
        finally:
            for ref in entered:
                self._active_refs[ref] -= 1
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        # the parts are intersected, so each lays out an object's keys in the one order the whole value uses
        saved = self._key_order
        self._key_order = key_order([rest, *parts], lambda ref: resolve_pointer(self.root, ref), saved, MAX_EXPANSIONS)
        try:
            nodes = self._operand(lambda: [self._compile(p, _ptr(path, "allOf", i)) for i, p in enumerate(parts)])
            if set(rest) - ANNOTATIONS:
                nodes.append(self._operand(lambda: self._compile(rest, path)))
        finally:
            self._key_order = saved
        return Intersect(tuple(nodes))

    def _union(self, schema: dict, path: str) -> Node:
        key = "anyOf" if "anyOf" in schema else "oneOf"
        branches = schema[key]
        if not isinstance(branches, list) or not branches:
            raise self._bad(f"{key} must be a non-empty list", _ptr(path, key))
        base = {k: v for k, v in schema.items() if k != key}
        specs: list[tuple[Any, str]] = []
        for i, br in enumerate(branches):
            bpath = _ptr(path, key, i)
            if set(base) - ANNOTATIONS:
                merged = _merge(base, br) if isinstance(br, dict) and "$ref" not in br else None
                specs.append((merged, bpath) if merged is not None else ({"allOf": [base, br]}, bpath))
            else:
                specs.append((br, bpath))
        exclusive = (key == "oneOf" and len(specs) > 1 and not _disjoint_types(branches)
                     and not self._discriminated(base, branches))
        if exclusive and not set(base) - ANNOTATIONS and self._complements_here():
            complement = self._one_of_universal(branches, path)
            if complement is not None:
                return complement
        # an exclusive branch is the left side of a difference; another may be a rule of its own
        if exclusive:
            nodes = self._operand(lambda: [self._compile(s, p) for s, p in specs])
        else:
            nodes = [self._member([(s, p)], p) for s, p in specs]
        if exclusive:
            # a value matching two branches is no instance: each branch minus the others, at the other polarity
            # (positive: a superset of them is removed; negative: a subset, so that a superset remains)
            try:
                others = [self._flipped(s, p) for s, p in specs]
            except UnsupportedSchemaError:
                if not self._negative:
                    raise
                return alt(*nodes)  # negative: a branch refused as a subset; the union is a superset still
            return alt(*(
                self._minus(n, alt(*(m for j, m in enumerate(others) if j != i))) for i, n in enumerate(nodes)
            ))
        return alt(*nodes)

    def _const_values(self, schema: Any, depth: int = 0) -> set[Any] | None:
        """The values a schema restricts an instance to by const / enum (None when it does not)."""
        schema = self._plain(schema)
        if not isinstance(schema, dict) or depth > 8:
            return None
        out: set[Any] | None = None
        if "const" in schema:
            out = {value_key(schema["const"])}
        elif isinstance(schema.get("enum"), list):
            out = {value_key(v) for v in schema["enum"]}
        for part in schema.get("allOf", []) if isinstance(schema.get("allOf"), list) else []:
            vals = self._const_values(part, depth + 1)
            if vals is not None:
                out = vals if out is None else out & vals
        return out

    def _discriminated(self, base: dict, branches: list[Any]) -> bool:
        """Whether no instance can match two branches because of a discriminating property.

        That is: every branch (merged with the schema around the oneOf) admits only objects, requires one
        same property, and restricts it by const / enum to values no other branch allows.
        """
        merged_branches = []
        for br in branches:
            br = self._plain(br)
            if not isinstance(br, dict):
                return False
            m = _merge(base, br) if set(base) - ANNOTATIONS else br
            if m is None or "$ref" in m:
                return False
            types = m.get("type")
            if types not in ("object", ["object"]):
                return False
            merged_branches.append(m)
        common: set[Any] | None = None
        for m in merged_branches:
            req = m.get("required", [])
            names = {r for r in req if isinstance(r, str)} if isinstance(req, list) else set()
            common = names if common is None else common & names
        for name in sorted(common or ()):
            seen: set[Any] = set()
            for m in merged_branches:
                props = m.get("properties", {})
                vals = self._const_values(props.get(name)) if isinstance(props, dict) else None
                if vals is None or vals & seen:
                    break
                seen |= vals
            else:
                return True
        return False
