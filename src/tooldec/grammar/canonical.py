"""The canonical spelling of a value under a schema: the whitespace and key order the grammar generates.

Keys follow the order in which the schema compiler lays out properties (own `properties`, then those merged in
from `$ref` siblings, `allOf` parts and the `anyOf`/`oneOf` branch the value matches); other keys follow in
the value's own order.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from jsonschema.validators import validator_for

from tooldec.grammar.refs import resolve_pointer
from tooldec.grammar.schema import value_key
from tooldec.grammar.schema_base import MAX_EXPANSIONS
from tooldec.grammar.schema_keywords import ANNOTATIONS
from tooldec.grammar.schema_rewrites import _merge, key_order
from tooldec.grammar.syntax import JSON, ValueSyntax


class CanonicalWriter:
    """Writes values of one root schema document canonically."""

    def __init__(self, root: Any, syntax: ValueSyntax = JSON) -> None:
        self.root = root
        self.syntax = syntax
        cls = validator_for(root if isinstance(root, dict) else {})
        self._validator = cls(root if isinstance(root, (dict, bool)) else {})

    def dumps(self, value: Any, schema: Any = None) -> str:
        """The canonical text of `value` (validated against `schema`, default the root, only to pick orders)."""
        return self._dump(value, self.root if schema is None else schema, 0)

    def _resolve(self, schema: Any) -> Any:
        for _ in range(16):
            if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str)):
                return schema
            ref = schema["$ref"]
            if not ref.startswith("#"):
                return schema
            try:
                node = resolve_pointer(self.root, ref)
            except LookupError:
                return {}
            siblings = {k: v for k, v in schema.items() if k != "$ref"}
            if siblings and isinstance(node, dict):
                node = {**node, "allOf": [siblings]} if "allOf" not in node else node
            schema = node
        return schema

    def _valid(self, value: Any, schema: Any) -> bool:
        try:
            return bool(self._validator.evolve(schema=schema).is_valid(value))
        except Exception:  # noqa: BLE001 - a malformed subschema only makes it a poor guide for the order
            return False

    def _parts(self, value: Any, schema: Any, depth: int = 0) -> list[dict]:
        """The schema and the subschemas that shape `value` with it, in grammar order.

        Those are its `allOf` parts and the first `anyOf` / `oneOf` branch that `value` satisfies, recursively,
        the order in which the schema compiler merges their properties.
        """
        schema = self._resolve(schema)
        if not isinstance(schema, dict) or depth > 32:
            return []
        out = [schema]
        for part in schema.get("allOf", []) or []:
            out.extend(self._parts(value, part, depth + 1))
        for key in ("anyOf", "oneOf"):
            for branch in schema.get(key, []) or []:
                if self._valid(value, branch):
                    out.extend(self._parts(value, branch, depth + 1))
                    break
        return out

    def _intersection_order(self, parts: list[dict]) -> list[str]:
        """The key order the schema compiler imposes when one of `parts` has an `allOf` it cannot merge into one
        schema (its parts are then intersected, all laid out in `key_order`), else nothing."""
        for schema in parts:
            all_of = schema.get("allOf")
            if not isinstance(all_of, list):
                continue
            rest = {k: v for k, v in schema.items() if k != "allOf"}
            if not self._merges(rest, all_of):
                return key_order([rest, *all_of], lambda ref: resolve_pointer(self.root, ref), None, MAX_EXPANSIONS)
        return []

    def _merges(self, rest: dict, parts: list[Any]) -> bool:
        """Whether the schema compiler merges `parts` into `rest` as one schema (Combinators._all_of's rule)."""
        merged: dict | None = rest
        for part in parts:
            if part is True:
                continue
            for _ in range(16):
                if not (isinstance(part, dict) and isinstance(part.get("$ref"), str) and not set(part) - ANNOTATIONS - {"$ref"}):
                    break
                try:
                    part = resolve_pointer(self.root, part["$ref"])
                except LookupError:
                    return False
            if merged is None or not isinstance(part, dict) or "$ref" in part:
                return False
            merged = _merge(merged, part)
        return merged is not None

    @staticmethod
    def _items_schema(parts: list[dict], i: int) -> Any:
        """The subschema of item `i` from the first part that declares items."""
        for schema in parts:
            prefix = schema.get("prefixItems")
            items = schema.get("items")
            if isinstance(items, list):
                prefix, items = items, schema.get("additionalItems", True)
            if isinstance(prefix, list) and i < len(prefix):
                return prefix[i]
            if items is not None:
                return items
        return True

    @staticmethod
    def _member_schema(parts: list[dict], seen: dict[str, Any], key: str) -> Any:
        """The schema of one member's value: its property's, with every patternProperties schema matching it.

        They come in the order the schema compiler merges them (property first, then patterns); a key neither
        declared nor matched takes the first `additionalProperties`.
        """
        schemas = [seen[key]] if key in seen else []
        for part in parts:
            pats = part.get("patternProperties")
            for pat, sub in pats.items() if isinstance(pats, dict) else ():
                if _search(pat, key):
                    schemas.append(sub)
        if not schemas:
            return next((p["additionalProperties"] for p in parts if "additionalProperties" in p), True)
        return schemas[0] if len(schemas) == 1 else {"allOf": schemas}

    def _dump(self, value: Any, schema: Any, depth: int) -> str:
        syn = self.syntax
        if isinstance(value, (dict, list, int, float)) and not isinstance(value, bool):
            parts = self._parts(value, schema)
            listed = _listed(parts, value)
            if listed is not None:
                return syn.dumps(listed)  # an enum / const value is spelled as the schema writes it
        if isinstance(value, dict):
            parts += [p for part in list(parts) for d in _triggered(part, value) for p in self._parts(value, d)]
            seen: dict[str, Any] = {}
            for part in parts:
                props = part.get("properties")
                for name, sub in props.items() if isinstance(props, dict) else ():
                    seen.setdefault(name, sub)
            # required keys without a property schema come next, as the schema compiler lays them out
            required = [r for part in parts for r in _required(part) if r not in seen]
            order = list(dict.fromkeys([*self._intersection_order(parts), *seen, *required]))
            keys = [k for k in order if k in value] + [k for k in value if k not in order]
            fields = [
                syn.dumps(str(k)) + syn.key_sep + self._dump(value[k], self._member_schema(parts, seen, str(k)), depth + 1)
                for k in keys
            ]
            return "{" + syn.item_sep.join(fields) + "}"
        if isinstance(value, list):
            return "[" + syn.item_sep.join(
                self._dump(v, self._items_schema(parts, i), depth + 1) for i, v in enumerate(value)
            ) + "]"
        return syn.dumps(value)


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except (re.error, TypeError):
        return None


def _search(pattern: Any, key: str) -> bool:
    """Whether a patternProperties pattern matches a key (Python's reading; only used to pick key orders)."""
    rx = _compiled(pattern) if isinstance(pattern, str) else None
    return bool(rx and rx.search(key))


def _required(schema: dict) -> list[str]:
    req = schema.get("required")
    return [r for r in req if isinstance(r, str)] if isinstance(req, list) else []


def _listed(parts: list[dict], value: Any) -> Any:
    """The entry of an `enum` / `const` among `parts` equal to `value`, a container or number (None when none is;
    `1.0` equals `1`, but `true` does not)."""
    key = value_key(value)
    for part in parts:
        entries = [part["const"]] if "const" in part else part.get("enum")
        for entry in entries if isinstance(entries, list) else ():
            if not isinstance(entry, (bool, str)) and entry is not None and value_key(entry) == key:
                return entry
    return None


def _triggered(schema: dict, value: dict) -> list[Any]:
    """The dependent schemas (`dependentSchemas`, schema-valued `dependencies`) that the value's keys trigger."""
    out = []
    for key in ("dependencies", "dependentSchemas"):
        deps = schema.get(key)
        for name, dep in deps.items() if isinstance(deps, dict) else ():
            if isinstance(dep, dict) and name in value:
                out.append(dep)
    return out
