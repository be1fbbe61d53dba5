"""JSON Schema → grammar IR for one value, in a given value syntax and one canonical whitespace.

Every validation keyword is either enforced exactly or rejected with `UnsupportedSchemaError` naming it and
its path. Objects are written with their `properties` in schema order; extra properties (where allowed)
come after them. Recursion through `$ref` is bounded by `max_ref_depth` (deeper recursive branches are cut,
which keeps output valid but forbids nesting beyond that depth).
"""

from __future__ import annotations

import math
from typing import Any

import jsonschema
from jsonschema.validators import validator_for

from tooldec.errors import SchemaError, UnsupportedSchemaError
from tooldec.grammar.ir import (
    NOTHING,
    Difference,
    Fields,
    Intersect,
    Node,
    Repeat,
    alt,
    lit,
    seq,
)
from tooldec.grammar.numbers import any_number, integer_range, number_range
from tooldec.grammar.refs import resolve_pointer
from tooldec.grammar.regex import format_ir, pattern_ir
from tooldec.grammar.strings import codepoints_ir, complement_ranges, string_content
from tooldec.grammar.syntax import JSON, ValueSyntax

DEFAULT_REF_DEPTH = 3
DEFAULT_ANY_DEPTH = 3

ANNOTATIONS = frozenset(
    {
        "title", "description", "default", "examples", "example", "$schema", "$id", "id", "$comment",
        "readOnly", "writeOnly", "deprecated", "contentEncoding", "contentMediaType", "$anchor",
        "definitions", "$defs", "discriminator", "xml", "externalDocs", "$vocabulary", "markdownDescription",
    }
)
# Validation keywords we do not enforce in general (some are accepted where trivially satisfied).
UNSUPPORTED = frozenset(
    {
        "if", "then", "else", "dependencies", "dependentRequired", "dependentSchemas", "patternProperties",
        "propertyNames", "contains", "minContains", "maxContains", "unevaluatedProperties",
        "unevaluatedItems", "$dynamicRef", "$recursiveRef",
    }
)
TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
NO_CONSTRAINT_FORMATS = frozenset({"float", "double", "password", "binary", "textarea"})
# The formats JSON Schema defines (draft 4 to 2020-12). A `format` outside this list has no defined meaning,
# so validators treat it as an annotation and so do we; a standard one is either enforced or refused.
STANDARD_FORMATS = frozenset(
    {
        "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname", "ipv4",
        "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template", "json-pointer",
        "relative-json-pointer", "regex", "host-name", "ip-address", "color", "utc-millisec", "style", "phone",
    }
)
INT_FORMATS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1), "uint32": (0, 2**32 - 1)}

OBJECT_KEYS = frozenset(
    {"properties", "required", "additionalProperties", "minProperties", "maxProperties"}
)
ARRAY_KEYS = frozenset({"items", "prefixItems", "minItems", "maxItems", "uniqueItems"})
STRING_KEYS = frozenset({"minLength", "maxLength", "pattern", "format"})
NUMBER_KEYS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})


def _ptr(path: str, *parts: object) -> str:
    out = path
    for p in parts:
        out += "/" + str(p).replace("~", "~0").replace("/", "~1")
    return out


class SchemaCompiler:
    """Compiles the subschemas of one root document (so local `$ref`s resolve) to IR nodes."""

    def __init__(
        self,
        root: Any,
        *,
        syntax: ValueSyntax = JSON,
        tool: str | None = None,
        max_ref_depth: int = DEFAULT_REF_DEPTH,
        any_depth: int = DEFAULT_ANY_DEPTH,
        additional_properties: bool = False,
    ) -> None:
        self.root = root
        self.syntax = syntax
        self.tool = tool
        self.max_ref_depth = max_ref_depth
        self.any_depth = any_depth
        self.additional_properties = additional_properties
        self._active_refs: dict[str, int] = {}
        self._validator: Any = None
        self._sep = lit(syntax.item_sep)

    # -- errors -----------------------------------------------------------------------------------------
    def _unsupported(self, keyword: str, path: str, detail: str = "") -> UnsupportedSchemaError:
        return UnsupportedSchemaError(keyword, path=path, tool=self.tool, detail=detail)

    def _bad(self, message: str, path: str) -> SchemaError:
        return SchemaError(message, tool=self.tool, path=path)

    # -- entry ------------------------------------------------------------------------------------------
    def value(self, schema: Any = None, path: str = "#") -> Node:
        """IR for one value valid under `schema` (default: the root)."""
        return self._compile(self.root if schema is None else schema, path)

    def _compile(self, schema: Any, path: str) -> Node:
        if schema is True:
            return self.any_value(self.any_depth)
        if schema is False:
            return NOTHING
        if not isinstance(schema, dict):
            raise self._bad(f"a schema must be an object or a boolean, not {type(schema).__name__}", path)
        for key in schema:
            if key in UNSUPPORTED:
                raise self._unsupported(key, _ptr(path, key))
        if "$ref" in schema:
            return self._ref(schema, path)
        if "allOf" in schema:
            return self._all_of(schema, path)
        if "anyOf" in schema or "oneOf" in schema:
            return self._union(schema, path)
        if "not" in schema:
            rest = {k: v for k, v in schema.items() if k != "not"}
            return Difference(self._compile(rest, path), self._compile(schema["not"], _ptr(path, "not")))
        if "const" in schema or "enum" in schema:
            return self._enum(schema, path)
        return self._typed(schema, path)

    # -- references and combinators ---------------------------------------------------------------------
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
        if count >= self.max_ref_depth:
            return NOTHING
        self._active_refs[ref] = count + 1
        try:
            siblings = {k: v for k, v in schema.items() if k != "$ref" and k not in ANNOTATIONS}
            if siblings:
                merged = _merge(target, siblings) if isinstance(target, dict) else None
                if merged is not None:
                    return self._compile(merged, path)
                return Intersect((self._compile(target, ref), self._compile(siblings, path)))
            return self._compile(target, ref)
        finally:
            self._active_refs[ref] = count

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
                        return NOTHING
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
        nodes = [self._compile(p, _ptr(path, "allOf", i)) for i, p in enumerate(parts)]
        if set(rest) - ANNOTATIONS:
            nodes.append(self._compile(rest, path))
        return Intersect(tuple(nodes))

    def _union(self, schema: dict, path: str) -> Node:
        key = "anyOf" if "anyOf" in schema else "oneOf"
        branches = schema[key]
        if not isinstance(branches, list) or not branches:
            raise self._bad(f"{key} must be a non-empty list", _ptr(path, key))
        base = {k: v for k, v in schema.items() if k != key}
        nodes: list[Node] = []
        for i, br in enumerate(branches):
            bpath = _ptr(path, key, i)
            if set(base) - ANNOTATIONS:
                merged = _merge(base, br) if isinstance(br, dict) and "$ref" not in br else None
                node = (
                    self._compile(merged, bpath)
                    if merged is not None
                    else Intersect((self._compile(base, path), self._compile(br, bpath)))
                )
            else:
                node = self._compile(br, bpath)
            nodes.append(node)
        if key == "oneOf" and len(nodes) > 1 and not _disjoint_types(branches):
            exclusive = [
                Difference(n, alt(*(m for j, m in enumerate(nodes) if j != i))) for i, n in enumerate(nodes)
            ]
            return alt(*exclusive)
        return alt(*nodes)

    # -- literal values ---------------------------------------------------------------------------------
    def _is_valid(self, value: Any, schema: dict) -> bool:
        if self._validator is None:
            cls = validator_for(self.root if isinstance(self.root, dict) else {})
            self._validator = cls(self.root if isinstance(self.root, (dict, bool)) else {})
        try:
            return bool(self._validator.evolve(schema=schema).is_valid(value))
        except jsonschema.exceptions.SchemaError as exc:
            raise self._bad(str(exc.message), "#") from exc

    def _enum(self, schema: dict, path: str) -> Node:
        if "const" in schema:
            values = [schema["const"]]
        else:
            values = schema["enum"]
            if not isinstance(values, list):
                raise self._bad("enum must be a list", _ptr(path, "enum"))
        keep = [v for v in values if self._is_valid(v, schema)]
        spelled = []
        for v in keep:
            try:
                spelled.append(self.syntax.dumps(v))
            except (TypeError, ValueError) as exc:
                raise self._bad(str(exc), _ptr(path, "enum")) from exc
        return alt(*(lit(s) for s in dict.fromkeys(spelled)))

    # -- typed values -----------------------------------------------------------------------------------
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

    def _bounds(self, schema: dict, path: str) -> tuple[float | None, bool, float | None, bool]:
        lo = schema.get("minimum")
        hi = schema.get("maximum")
        lo_incl = hi_incl = True
        ex_lo, ex_hi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        for name, v in (("minimum", lo), ("maximum", hi)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise self._bad(f"{name} must be a number", _ptr(path, name))
        if ex_lo is True:
            lo_incl = False
        elif _is_number(ex_lo) and (lo is None or ex_lo >= lo):
            lo, lo_incl = ex_lo, False
        if ex_hi is True:
            hi_incl = False
        elif _is_number(ex_hi) and (hi is None or ex_hi <= hi):
            hi, hi_incl = ex_hi, False
        return lo, lo_incl, hi, hi_incl

    def _integer(self, schema: dict, path: str) -> Node:
        self._check_multiple_of(schema, path)
        lo, lo_incl, hi, hi_incl = self._bounds(schema, path)
        ilo = None if lo is None else (math.ceil(lo) if lo_incl else math.floor(lo) + 1)
        ihi = None if hi is None else (math.floor(hi) if hi_incl else math.ceil(hi) - 1)
        fmt = schema.get("format")
        if fmt in INT_FORMATS:
            flo, fhi = INT_FORMATS[fmt]
            ilo = flo if ilo is None else max(ilo, flo)
            ihi = fhi if ihi is None else min(ihi, fhi)
        elif fmt in STANDARD_FORMATS:
            raise self._unsupported("format", _ptr(path, "format"), f"{fmt!r} on an integer")
        return integer_range(ilo, ihi)

    def _check_multiple_of(self, schema: dict, path: str) -> bool:
        """True when multipleOf makes a number an integer; raises for any other multipleOf."""
        m = schema.get("multipleOf")
        if m is None:
            return False
        if m == 1:
            return True
        raise self._unsupported("multipleOf", _ptr(path, "multipleOf"), f"multipleOf {m!r}")

    def _number(self, schema: dict, path: str) -> Node:
        if self._check_multiple_of(schema, path):
            return self._integer(schema, path)
        fmt = schema.get("format")
        if fmt in INT_FORMATS:
            return self._integer(schema, path)
        if fmt in STANDARD_FORMATS:
            raise self._unsupported("format", _ptr(path, "format"), f"{fmt!r} on a number")
        lo, lo_incl, hi, hi_incl = self._bounds(schema, path)
        if lo is None and hi is None:
            return any_number()
        for name, v in (("minimum", lo), ("maximum", hi)):
            if v is not None and not float(v).is_integer():
                raise self._unsupported(name, _ptr(path, name), f"non-integral bound {v!r} on a number")
        return number_range(
            None if lo is None else int(lo), lo_incl, None if hi is None else int(hi), hi_incl
        )

    def _string(self, schema: dict, path: str) -> Node:
        parts: list[Node] = []
        fmt = schema.get("format")
        if fmt is not None and not isinstance(fmt, str):
            raise self._bad("format must be a string", _ptr(path, "format"))
        if fmt in STANDARD_FORMATS or fmt == "byte":
            parts.append(format_ir(fmt, path=_ptr(path, "format")))
        if "pattern" in schema:
            pat = schema["pattern"]
            if not isinstance(pat, str):
                raise self._bad("pattern must be a string", _ptr(path, "pattern"))
            parts.append(pattern_ir(pat, path=_ptr(path, "pattern")))
        lo = schema.get("minLength", 0)
        hi = schema.get("maxLength")
        if lo or hi is not None or not parts:
            try:
                parts.append(string_content(min_length=lo, max_length=hi, python=self.syntax.python))
            except UnsupportedSchemaError as exc:
                key = "maxLength" if hi is not None and exc.keyword == "maxLength" else exc.keyword
                raise self._unsupported(key, _ptr(path, key), exc.detail) from None
        body = parts[0] if len(parts) == 1 else Intersect(tuple(parts))
        return seq(lit('"'), body, lit('"'))

    def _array(self, schema: dict, path: str) -> Node:
        lo = schema.get("minItems", 0)
        hi = schema.get("maxItems")
        items = schema.get("items", True)
        prefix = schema.get("prefixItems", [])
        if isinstance(items, list):
            # draft 4-7 tuple form; additionalItems only has a meaning here
            prefix, items = items, schema.get("additionalItems", True)
        if schema.get("uniqueItems") is True and not (hi is not None and hi <= 1):
            raise self._unsupported("uniqueItems", _ptr(path, "uniqueItems"))
        prefix_nodes = [self._compile(p, _ptr(path, "prefixItems", i)) for i, p in enumerate(prefix)]
        rest = self._compile(items, _ptr(path, "items"))
        options: list[Node] = []
        k = len(prefix_nodes)
        for n in range(lo, min(k, hi if hi is not None else k) + 1):
            options.append(seq(*_joined(prefix_nodes[:n], self._sep)) if n else lit(""))
        if (hi is None or hi > k) and rest != NOTHING:
            need = max(lo - k, 1)
            more = Repeat(rest, need, None if hi is None else hi - k, self._sep)
            options.append(seq(*_joined(prefix_nodes, self._sep), self._sep, more) if k else more)
        body = alt(*options) if options else NOTHING
        if body == NOTHING:
            return NOTHING
        return seq(lit("["), body, lit("]"))

    def _object(self, schema: dict, path: str) -> Node:
        props = schema.get("properties", {})
        if not isinstance(props, dict):
            raise self._bad("properties must be an object", _ptr(path, "properties"))
        required = schema.get("required", [])
        if not isinstance(required, list):
            raise self._bad("required must be a list", _ptr(path, "required"))
        req = set(required)
        extra = schema.get("additionalProperties")
        if extra is None:
            extra = bool(self.additional_properties)
        syn = self.syntax
        fields: list[tuple[Node, bool]] = []
        for name, sub in props.items():
            value = self._compile(sub, _ptr(path, "properties", name))
            if value == NOTHING:
                if name in req:
                    return NOTHING
                continue
            fields.append((seq(lit(syn.dumps(name) + syn.key_sep), value), name in req))
        extra_path = _ptr(path, "additionalProperties")
        extra_value = NOTHING if extra is False else self._compile(extra, extra_path)
        missing = [r for r in required if r not in props]
        if missing:
            # a required key with no declared schema takes additionalProperties (any value when absent)
            required_value = (
                extra_value if extra is not False else self._compile(schema.get("additionalProperties", True), extra_path)
            )
            if required_value == NOTHING:
                return NOTHING
            for name in missing:
                fields.append((seq(lit(syn.dumps(name) + syn.key_sep), required_value), True))
        n_possible: int | None = len(fields)
        if extra_value != NOTHING:
            key = seq(lit('"'), _string_except(set(props) | set(missing)), lit('"' + syn.key_sep))
            fields.append((Repeat(seq(key, extra_value), 1, None, self._sep), False))
            n_possible = None
        n_required = sum(1 for _, r in fields if r)
        lo, hi = schema.get("minProperties", 0), schema.get("maxProperties")
        if lo > n_required:
            raise self._unsupported("minProperties", _ptr(path, "minProperties"))
        if hi is not None and (n_possible is None or hi < n_possible):
            raise self._unsupported("maxProperties", _ptr(path, "maxProperties"))
        return seq(lit("{"), Fields(tuple(fields), self._sep), lit("}"))

    # -- any value --------------------------------------------------------------------------------------
    def any_value(self, depth: int) -> Node:
        """Any JSON value nested at most `depth` containers deep."""
        syn = self.syntax
        scalars = [
            lit(syn.null), lit(syn.true), lit(syn.false), any_number(),
            seq(lit('"'), string_content(python=syn.python), lit('"')),
        ]
        if depth <= 0:
            return alt(*scalars, lit("[]"), lit("{}"))
        inner = self.any_value(depth - 1)
        key = seq(lit('"'), string_content(python=syn.python), lit('"' + syn.key_sep))
        array = seq(lit("["), Repeat(inner, 0, None, self._sep), lit("]"))
        obj = seq(lit("{"), Repeat(seq(key, inner), 0, None, self._sep), lit("}"))
        return alt(*scalars, array, obj)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _joined(nodes: list[Node], sep: Node) -> list[Node]:
    out: list[Node] = []
    for i, n in enumerate(nodes):
        if i:
            out.append(sep)
        out.append(n)
    return out


def _string_except(keys: set[str]) -> Node:
    """Canonical string bodies other than the given keys (so an extra property never repeats a declared one)."""
    if not keys:
        return string_content()
    any_char = codepoints_ir([(0, 0x10FFFF)])
    free = Repeat(any_char, 0, None)
    # trie over the keys' code points: every prefix of a key (the keys included) and the chars that extend it
    children: dict[str, set[str]] = {}
    for k in keys:
        for i in range(len(k) + 1):
            nxt = children.setdefault(k[:i], set())
            if i < len(k):
                nxt.add(k[i])
    parts: list[Node] = []
    for prefix, nxt in children.items():
        pre = seq(*(codepoints_ir([(ord(c), ord(c))]) for c in prefix))
        if prefix not in keys:
            parts.append(pre)
        ranges = complement_ranges((ord(c), ord(c)) for c in nxt)
        if ranges:
            parts.append(seq(pre, codepoints_ir(ranges), free))
    return alt(*parts)


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


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "integer" if v.is_integer() else "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


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


def _merge(a: dict, b: Any) -> dict | None:
    """The conjunction of two schemas as one schema, or None when it cannot be written as one simply."""
    if not isinstance(b, dict):
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
        elif k in _MAX_KEYS and not isinstance(cur, bool) and not isinstance(v, bool):
            out[k] = min(cur, v)
        elif k in _MIN_KEYS and not isinstance(cur, bool) and not isinstance(v, bool):
            out[k] = max(cur, v)
        else:
            return None
    return out
