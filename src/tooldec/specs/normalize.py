"""Bring tool parameter schemas into standard JSON Schema spelling, so later stages see one dialect only."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from jsonschema.exceptions import SchemaError as _JsonSchemaError
from jsonschema.validators import validator_for

from tooldec.errors import SchemaError

JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})

# Spellings found in BFCL (Python, Java and JavaScript categories), matched case-insensitively after the
# standard names; None means "any value" (the type keyword is dropped).
_TYPE_ALIASES: dict[str, str | None] = {
    "dict": "object",
    "hashmap": "object",
    "map": "object",
    "float": "number",
    "double": "number",
    "long": "integer",
    "int": "integer",
    "str": "string",
    "char": "string",
    "bool": "boolean",
    "tuple": "array",
    "list": "array",
    "arraylist": "array",
    "any": None,
    "": None,
}

SCHEMA_KEYS = frozenset(
    {
        "items",
        "additionalProperties",
        "additionalItems",
        "unevaluatedItems",
        "unevaluatedProperties",
        "contains",
        "propertyNames",
        "not",
        "if",
        "then",
        "else",
    }
)
SCHEMA_LIST_KEYS = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
SCHEMA_MAP_KEYS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})


def join_pointer(path: str, *keys: str | int) -> str:
    """Extend a `#/...` JSON pointer by keys, escaping `~` and `/` as RFC 6901 requires."""
    escaped = (str(k).replace("~", "~0").replace("/", "~1") for k in keys)
    return "/".join([path, *escaped])


def normalize_schema(schema: Any, *, tool: str | None = None, path: str = "#") -> dict[str, Any]:
    """Return a deep copy of `schema` in standard JSON Schema spelling, or raise SchemaError where malformed."""
    if not isinstance(schema, dict):
        raise SchemaError(f"schema must be an object, not {type(schema).__name__}", tool=tool, path=path)
    out = _normalize(schema, tool, path, modern="$schema" not in schema)
    try:
        validator_for(out).check_schema(out)
    except _JsonSchemaError as err:
        where = join_pointer(path, *err.absolute_path)
        raise SchemaError(f"invalid JSON Schema: {err.message}", tool=tool, path=where) from err
    return out


def _normalize(schema: Any, tool: str | None, path: str, *, modern: bool) -> Any:
    """Normalise one (sub)schema; booleans are valid schemas and pass through.

    When `modern` (no `$schema` given, so draft 2020-12 applies), the older tuple form `items: [...]` with
    `additionalItems` is rewritten as `prefixItems` with `items`.
    """
    if isinstance(schema, bool):
        return schema
    if not isinstance(schema, dict):
        raise SchemaError(
            f"subschema must be an object or boolean, not {type(schema).__name__}", tool=tool, path=path
        )
    tuple_form = modern and isinstance(schema.get("items"), list)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        here = join_pointer(path, key)
        if tuple_form and key in ("items", "additionalItems"):
            key = "prefixItems" if key == "items" else "items"
        if key == "type":
            kind = _normalize_type(value, tool, here)
            if kind is not None:
                out[key] = kind
        elif key in SCHEMA_MAP_KEYS:
            if not isinstance(value, dict):
                raise SchemaError(f"{key!r} must be an object", tool=tool, path=here)
            out[key] = {
                name: _normalize(sub, tool, join_pointer(here, name), modern=modern)
                for name, sub in value.items()
            }
        elif key in SCHEMA_LIST_KEYS or (key == "items" and isinstance(value, list)):
            if not isinstance(value, list):
                raise SchemaError(f"{key!r} must be a list of schemas", tool=tool, path=here)
            out[key] = [
                _normalize(sub, tool, join_pointer(here, i), modern=modern) for i, sub in enumerate(value)
            ]
        elif key in SCHEMA_KEYS:
            out[key] = _normalize(value, tool, here, modern=modern)
        elif key == "required":
            if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
                raise SchemaError("'required' must be a list of strings", tool=tool, path=here)
            out[key] = list(value)
        elif key == "enum":
            if not isinstance(value, list):
                raise SchemaError("'enum' must be a list", tool=tool, path=here)
            out[key] = copy.deepcopy(value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _normalize_type(value: Any, tool: str | None, path: str) -> str | list[str] | None:
    """Map a type spelling (or list of them) to standard names; None when any value is allowed."""
    if isinstance(value, str):
        return _standard_type(value, tool, path)
    if isinstance(value, list) and value:
        kinds = [_standard_type(v, tool, join_pointer(path, i)) for i, v in enumerate(value)]
        if None in kinds:
            return None
        return _unique(k for k in kinds if k is not None)
    raise SchemaError("'type' must be a type name or a non-empty list of them", tool=tool, path=path)


def _standard_type(name: Any, tool: str | None, path: str) -> str | None:
    """Map one type spelling to its JSON Schema name."""
    if not isinstance(name, str):
        raise SchemaError(f"type name must be a string, not {type(name).__name__}", tool=tool, path=path)
    lowered = name.lower()
    if lowered in JSON_TYPES:
        return lowered
    if lowered in _TYPE_ALIASES:
        return _TYPE_ALIASES[lowered]
    raise SchemaError(f"unknown type {name!r}", tool=tool, path=path)


def _unique(items: Iterable[str]) -> list[str]:
    """Drop repeats, keeping first occurrences in order."""
    return list(dict.fromkeys(items))


def closed_objects(schema: Any) -> Any:
    """A copy of `schema` whose objects without `additionalProperties` admit only their declared properties and
    their required keys (an object below the root that declares no key stays a free-form map, and so does one
    whose keys come only from `anyOf` / `oneOf` branches when a branch declares none): the grammar's reading of
    objects in a tool call, for an independent validator and for the peer engines. An object's `allOf`
    parts and `anyOf` / `oneOf` branches belong to it, as the grammar merges them: their keys are declared on the
    object (any value there; the parts still hold them), and the parts are never closed on their own, also where
    the object states `additionalProperties` itself. `not` stays open (closing under it would widen it), and so do
    `const`, `enum`, `default` and `examples`, which hold values."""
    out = copy.deepcopy(schema)
    _close(out, whole=True, root=True)
    return out


_COMBINATORS = ("allOf", "anyOf", "oneOf")
_VALUE_KEYS = ("not", "const", "enum", "default", "examples")


def _object_like(node: dict[str, Any]) -> bool:
    """Whether `node` describes an object: by its type, its properties, or an `allOf` part that does."""
    kind = node.get("type")
    if kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in node:
        return True
    parts = node.get("allOf")
    return isinstance(parts, list) and any(isinstance(p, dict) and _object_like(p) for p in parts)


def _declares_keys(node: dict[str, Any]) -> bool:
    """Whether the object `node` names any key (own or its parts'; `properties: {}` names that it has none); one
    below the root that names none is a free-form map, which the grammar leaves open (closed, it could only be `{}`)."""
    return "properties" in node or bool(node.get("required") or node.get("patternProperties") or _part_keys(node))


def _part_keys(node: dict[str, Any]) -> list[str]:
    """The property names and required keys that `node`'s combinator parts declare, recursively."""
    keys: list[str] = []
    for key in _COMBINATORS:
        parts = node.get(key)
        for part in parts if isinstance(parts, list) else ():
            if not isinstance(part, dict):
                continue
            properties = part.get("properties")
            keys += list(properties) if isinstance(properties, dict) else []
            required = part.get("required")
            keys += [k for k in required if isinstance(k, str)] if isinstance(required, list) else []
            keys += _part_keys(part)
    return list(dict.fromkeys(keys))


def _free_form_branch(node: dict[str, Any]) -> bool:
    """Whether the object `node` names no key of its own and one of its `anyOf` / `oneOf` branches names none
    either: the grammar merges each branch into the object, and that branch is a free-form map (any members)."""
    own = "properties" in node or node.get("required") or node.get("patternProperties")
    if own or _part_keys({"allOf": node.get("allOf")}):
        return False
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        for branch in branches if isinstance(branches, list) else ():
            if branch is True:
                return True
            if isinstance(branch, dict) and "$ref" not in branch and _admits_objects(branch) and not _declares_keys(branch):
                return True
    return False


def _admits_objects(node: dict[str, Any]) -> bool:
    """Whether `node`'s type (if it states one) lets an object through."""
    kind = node.get("type", "object")
    return kind == "object" or (isinstance(kind, list) and "object" in kind)


def _close(node: Any, *, whole: bool, root: bool = False) -> None:
    """Close `node`'s objects in place (see `closed_objects`); `whole` is false for a part of a closed object,
    which closes what lies below it but not itself; `root` is true for the schema's own object and its branches."""
    if isinstance(node, list):
        for item in node:
            _close(item, whole=whole, root=root)
        return
    if not isinstance(node, dict):
        return
    closes = (whole and _object_like(node) and "additionalProperties" not in node
              and (root or (_declares_keys(node) and not _free_form_branch(node))))
    if closes:
        node["additionalProperties"] = False
        declare_required(node)
        extra = [k for k in _part_keys(node) if k not in node.get("properties", {})]
        if extra and isinstance(node.get("properties", {}), dict):
            node["properties"] = {**node.get("properties", {}), **{k: {} for k in extra}}
    for key, value in node.items():
        if key in _VALUE_KEYS:
            continue
        if key in _COMBINATORS:
            _close(value, whole=whole and not _object_like(node) and key != "allOf", root=root)
        elif key in ("properties", "$defs", "definitions", "patternProperties"):
            for sub in value.values() if isinstance(value, dict) else ():
                _close(sub, whole=True)
        elif isinstance(value, dict | list):
            _close(value, whole=True)


def declare_required(node: dict[str, Any]) -> None:
    """Declare (in place), with any value, the required keys an object does not list in `properties`, for closing
    it with `additionalProperties: false` as the grammar reads an object without it: the grammar
    admits them (a required key with no schema of its own takes additionalProperties, any value when it is
    absent), where `additionalProperties: false` alone would make the object unsatisfiable (BFCL's
    `waste_calculation.calculate` lists only `required: [adults, children, singles]` for its population)."""
    required = node.get("required")
    properties = node.get("properties", {})
    if not isinstance(required, list) or not isinstance(properties, dict):
        return
    missing = [name for name in required if isinstance(name, str) and name not in properties]
    if missing:
        node["properties"] = {**properties, **{name: {} for name in missing}}
