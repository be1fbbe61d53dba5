"""Schema-to-schema rewrites that come before compiling: `if` / `then` / `else` as combinators, the conjunction
of two schemas as one (`allOf` parts, siblings of a `$ref`, a `oneOf`'s surrounding keywords), and whether a
union's branches admit disjoint types (so `oneOf` needs no exclusivity check)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tooldec.grammar.schema_keywords import ANNOTATIONS, _json_type


def _schema_types(s: Any) -> set[str] | None:
    if not isinstance(s, dict):
        return None
    if "const" in s or "enum" in s:
        vals = [s["const"]] if "const" in s else s.get("enum", [])
        if not isinstance(vals, list):
            return None
        return {_json_type(v) for v in vals}
    t = s.get("type")
    if isinstance(t, str):
        t = [t]
    if not isinstance(t, list) or ("anyOf" in s or "oneOf" in s or "allOf" in s or "$ref" in s):
        return None
    out = set(t)
    if "number" in out:
        out.add("integer")
    return out



def key_order(schemas: list[Any], resolve: Callable[[str], Any], outer: list[str] | None, limit: int) -> list[str]:
    """The one order of an object's keys under intersected schemas, shared by the schema compiler (which lays every
    part out in it) and the canonical writer: `outer` (an order already in force), then the `properties` of each
    schema, its `allOf` parts and `anyOf` / `oneOf` branches depth first, then their `required` keys. `resolve`
    gives a local `$ref`'s target (LookupError: skipped); at most `limit` subschemas are read."""
    found: list[dict] = []
    stack = list(reversed(schemas))
    while stack and len(found) < limit:
        sub = stack.pop()
        if isinstance(sub, dict) and isinstance(sub.get("$ref"), str) and sub["$ref"].startswith("#"):
            try:
                sub = resolve(sub["$ref"])
            except LookupError:
                continue
        if not isinstance(sub, dict):
            continue
        found.append(sub)
        nested = [*(sub.get("allOf") or []), *(sub.get("anyOf") or []), *(sub.get("oneOf") or [])]
        stack.extend(reversed([n for n in nested if isinstance(n, (dict, bool))]))
    names = list(outer or [])
    for sub in found:
        props = sub.get("properties")
        names += [k for k in props if isinstance(k, str)] if isinstance(props, dict) else []
    for sub in found:
        req = sub.get("required")
        names += [k for k in req if isinstance(k, str)] if isinstance(req, list) else []
    return list(dict.fromkeys(names))


def _disjoint_types(branches: list[Any]) -> bool:
    seen: set[str] = set()
    for b in branches:
        t = _schema_types(b)
        if t is None or t & seen:
            return False
        seen |= t
    return True


_MAX_KEYS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
_MIN_KEYS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")


def _unconditional(schema: dict) -> dict:
    """`if` / `then` / `else` as the combinators they stand for: (if and then) or (not if and else), an absent
    branch true; `then` and `else` without `if` constrain nothing. The parts then merge and share one key
    order like any `allOf` and `anyOf`."""
    rest = {k: v for k, v in schema.items() if k not in ("if", "then", "else")}
    if "if" not in schema or ("then" not in schema and "else" not in schema):
        return rest
    cond = schema["if"]
    case = {"anyOf": [{"allOf": [cond, schema.get("then", True)]}, {"allOf": [{"not": cond}, schema.get("else", True)]}]}
    return {**rest, "allOf": [*rest.get("allOf", []), case]} if "allOf" in rest else {**rest, "allOf": [case]}


def _merge(a: dict, b: Any) -> dict | None:
    """The conjunction of two schemas as one schema, or None when it cannot be written as one simply."""
    if not isinstance(b, dict):
        return None
    for one, other in ((a, b), (b, a)):
        # a side whose additionalProperties constrains its undeclared keys would lose them to the other side's
        # properties and patterns; tuple items would lose the other side's items: keep those as intersections
        closed = one.get("additionalProperties", True) is not True
        if closed and (set(other.get("properties", {})) - set(one.get("properties", {}))
                       or other.get("patternProperties", one.get("patternProperties")) != one.get("patternProperties")):
            return None
        if (("prefixItems" in one or isinstance(one.get("items"), list)) and ("items" in other or "prefixItems" in other)
                and any(one.get(k) != other.get(k) for k in ("items", "prefixItems", "additionalItems"))):
            return None
    out = dict(a)
    for k, v in b.items():
        if k not in out or k in ANNOTATIONS:
            out.setdefault(k, v)
            continue
        cur = out[k]
        if cur == v:
            continue
        if k == "properties" and isinstance(cur, dict) and isinstance(v, dict):
            props = dict(cur)
            for name, sub in v.items():
                props[name] = {"allOf": [props[name], sub]} if name in props else sub
            out[k] = props
        elif k == "required" and isinstance(cur, list) and isinstance(v, list):
            out[k] = list(dict.fromkeys(cur + v))
        elif k == "type":
            ta = {cur} if isinstance(cur, str) else set(cur)
            tb = {v} if isinstance(v, str) else set(v)
            both = (ta & tb) | ({"integer"} if ("integer" in ta and "number" in tb) else set())
            both |= {"integer"} if ("integer" in tb and "number" in ta) else set()
            out[k] = sorted(both)
        elif k == "enum" and isinstance(cur, list) and isinstance(v, list):
            out[k] = [x for x in cur if x in v]
        elif k == "not":  # neither a nor b: not (a or b)
            out[k] = {"anyOf": [cur, v]}
        elif k == "allOf" and isinstance(cur, list) and isinstance(v, list):
            out[k] = cur + v
        elif k in _MAX_KEYS and not isinstance(cur, bool) and not isinstance(v, bool):
            out[k] = min(cur, v)
        elif k in _MIN_KEYS and not isinstance(cur, bool) and not isinstance(v, bool):
            out[k] = max(cur, v)
        else:
            return None
    return out
