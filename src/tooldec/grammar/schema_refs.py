"""`$ref`: local references resolved in the root document, and recursion read two ways.

Recursive reading (one value for the pushdown guide): a reference met again inside itself, or every plain
reference with `refs_as_rules`, becomes a `call` of a rule compiled once (`SchemaCompiler.rules`). Bounded
reading (and wherever a call would fall inside a difference or an intersection, which only regular languages
have): a reference is expanded in place, up to `max_ref_depth` times inside itself, deeper branches cut.
"""

from __future__ import annotations

from typing import Any

from tooldec.grammar.ir import NOTHING, Intersect, Node, call
from tooldec.grammar.refs import resolve_pointer
from tooldec.grammar.schema_base import ANY_RULE, CompilerBase
from tooldec.grammar.schema_keywords import ANNOTATIONS, _ptr
from tooldec.grammar.schema_rewrites import _merge


class ReferenceKeywords(CompilerBase):
    """`$ref` resolution, and the rules of the recursive reading."""

    def _call(self, key: str, schema: Any) -> Node:
        """A call of the rule for `schema` (named `key`: its reference), compiled once after the value."""
        index = self._rule_index.get(key)
        if index is None:
            index = self._rule_index[key] = len(self.rules)
            self.rules.append(NOTHING)
            self._pending.append((index, key, schema))
        return call(index)

    def _compile_rules(self) -> None:
        """Compile the bodies of the rules calls named, each as a fresh value in which its own reference is
        already entered (so that the body's recursion calls it again)."""
        saved = self._active_refs, self._depth
        try:
            while self._pending:
                index, key, schema = self._pending.pop()
                self._active_refs, self._depth = {key: 1}, 0
                self.rules[index] = self._any_level() if key == ANY_RULE else self._compile(schema, key)
        finally:
            self._active_refs, self._depth = saved

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
        if (count or self.refs_as_rules) and not siblings and self._calls_here():
            return self._call(ref, target)
        if count >= self.max_ref_depth:
            return self._cut()
        self._active_refs[ref] = count + 1
        try:
            if siblings:
                merged = _merge(target, siblings) if isinstance(target, dict) else None
                if merged is not None:
                    return self._compile(merged, path)
                return Intersect((self._compile(target, ref), self._compile(siblings, path)))
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
