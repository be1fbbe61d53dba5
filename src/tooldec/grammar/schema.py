"""JSON Schema → grammar IR for one value, in a given value syntax and one canonical whitespace.

Every validation keyword is either enforced exactly or rejected with `UnsupportedSchemaError` naming it and
its path. Objects are written with their `properties` in schema order; extra properties (where allowed)
come after them.

Recursion has two readings. `recursive=True` (one value, for the pushdown guide): a `$ref` met again inside
itself, and a place that holds any value, become `call`s of rules compiled once each (`SchemaCompiler.rules`),
so values nest without limit. Otherwise (and where a call would fall inside a difference or intersection of
languages, which only regular languages have) recursion through `$ref` is unrolled to `max_ref_depth` (deeper
branches are cut, which keeps output valid but forbids nesting beyond that depth) and any value nests a bounded
depth.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable
from fractions import Fraction
from typing import Any, ClassVar, Protocol

import jsonschema
from jsonschema.validators import validator_for

from tooldec.errors import SchemaError, UnsupportedSchemaError
from tooldec.grammar import numbers
from tooldec.grammar.counting import container_count, keyed_count, member_text
from tooldec.grammar.ir import (
    EMPTY,
    NOTHING,
    Alt,
    Bytes,
    Difference,
    Divisible,
    Fields,
    Intersect,
    Node,
    Repeat,
    Seq,
    alt,
    call,
    lit,
    seq,
)
from tooldec.grammar.multiples import multiples
from tooldec.grammar.numbers import (
    EXPONENT_NUMBER,
    any_number,
    decimal_range,
    float_safe,
    inner_exponents,
    integer_range,
    integral_spellings,
    near_spellings,
    number_range,
)
from tooldec.grammar.refs import resolve_pointer
from tooldec.grammar.regex import format_ir, pattern_ir, pattern_upper_ir
from tooldec.grammar.strings import (
    MAX_STRING_LENGTH,
    canonical_text,
    codepoints_ir,
    complement_ranges,
    string_content,
)
from tooldec.grammar.syntax import JSON, ValueSyntax

DEFAULT_REF_DEPTH = 3
# Any value (`true`, `{}`, additionalProperties absent or true, arrays without items) nests MIN_ANY_DEPTH to
# MAX_ANY_DEPTH containers deep. An automaton must remember, per open container, whether it is an array or an
# object, so each place holding any value costs about ANY_LEVEL_STATES * 2**(depth + 1) states. A schema's places
# share ANY_VALUE_BUDGET states under one nesting limit for the whole document: a place k containers deep holds
# any value nested limit - k deep (within MIN_ANY_DEPTH..MAX_ANY_DEPTH), the limit the largest that fits, so a
# value near the root may nest as deep as one further in. A schema that subtracts (`not`, `oneOf` exclusivity,
# `contains`) takes the difference of such automata with scanners that follow nesting as deep: it shares
# SUBTRACTING_BUDGET (`not: {required: [a, b]}` passes 500,000 DFA states at 9).
MIN_ANY_DEPTH = 3
MAX_ANY_DEPTH = 9
ANY_LEVEL_STATES = 77
ANY_VALUE_BUDGET = 80_000
SUBTRACTING_BUDGET = 20_000
MAX_KEY_REGIONS = 64  # patternProperties: key regions (sets of patterns matching together) at most
MAX_DEPENDENCIES = 8  # dependencies split an object into up to 2**8 cases
MAX_TRACKED_KEYS = 6  # on a difference's right side, objects in any key order track this many required keys
MAX_CONTAINS = 32  # minContains + maxContains at most (each counted match copies the item machine)
UNROLL_LIMIT = 20_000  # a bounded array whose unrolled items would be bigger counts its items by a product
# Subschemas compiled for one value (every `$ref` expansion, `allOf` part, branch and property counts). Recursive
# references that branch expand exponentially up to max_ref_depth: past this many the schema is refused by size
# in ~2.5 s instead of building for minutes. Of MaskBench's 4,046 schemas, the largest that compiles expands to
# 1,979; the five that ran past 10 s expanded to 32,000-333,000 (measured 2026-11-25).
MAX_EXPANSIONS = 50_000
ANY_RULE = "any value"  # the rule any value calls (recursive); no `$ref` can be named so (refs start with "#")
LONG_STRING_CAP = 1_024  # a maxLength above MAX_STRING_LENGTH is enforced as this (a subset)

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
        "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef",
    }
)
TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
_TYPE_AND_ENUM = frozenset({"type", "enum"})
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
    {
        "properties", "required", "additionalProperties", "minProperties", "maxProperties", "patternProperties",
        "propertyNames", "dependencies", "dependentRequired", "dependentSchemas",
    }
)
ARRAY_KEYS = frozenset(
    {"items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains", "minContains", "maxContains"}
)
STRING_KEYS = frozenset({"minLength", "maxLength", "pattern", "format"})
NUMBER_KEYS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})


def _ptr(path: str, *parts: object) -> str:
    out = path
    for p in parts:
        out += "/" + str(p).replace("~", "~0").replace("/", "~1")
    return out


class Decided(Protocol):
    """A small language built by the automaton layer: a schema's key language, checked for one key or emptiness."""

    is_empty: bool

    def accepts(self, data: bytes) -> bool:
        """Whether `data` is in the language."""
        ...


Decide = Callable[[Node], Decided]
"""Builds a `Decided` language from IR (`tooldec.automaton.compile.KeyLanguage`): passed in by the compiler, so
the grammar does not import the layer below it."""


class SchemaCompiler:
    """Compiles the subschemas of one root document (so local `$ref`s resolve) to IR nodes. Key languages
    (propertyNames, patternProperties regions) are decided by automata that `decide` builds."""

    any_value_budget: ClassVar[int] = ANY_VALUE_BUDGET
    """States the places holding any value share (see ANY_VALUE_BUDGET)."""
    free_form_maps: ClassVar[bool] = False
    """Whether, in the strict reading, an object inside a value that declares no key at all (no `properties`,
    `required` or `patternProperties`) keeps any members: closed, it could only be `{}`."""

    def __init__(
        self,
        root: Any,
        *,
        decide: Decide,
        syntax: ValueSyntax = JSON,
        tool: str | None = None,
        max_ref_depth: int = DEFAULT_REF_DEPTH,
        any_depth: int | None = None,
        additional_properties: bool = False,
        recursive: bool = False,
        refs_as_rules: bool = False,
    ) -> None:
        self.root = root
        self.recursive = recursive
        self.refs_as_rules = recursive and refs_as_rules
        """Every plain `$ref` a rule of its own, not only a recursive one: a schema too large as one automaton
        (definitions used in many places) as a grammar of automata that each stay small."""
        self.rules: list[Node] = []
        """With `recursive`: the body of rule k (one value) that `call(k)` in the compiled IR nests."""
        self._rule_index: dict[str, int] = {}
        self._pending: list[tuple[int, str, Any]] = []  # rules named by a call, their bodies not compiled yet
        self.syntax = syntax
        self.tool = tool
        self.max_ref_depth = max_ref_depth
        self.decide = decide
        self.any_depth = any_depth
        self.additional_properties = additional_properties
        self._active_refs: dict[str, int] = {}
        self._validator: Any = None
        self._sep = syntax.separator()
        self._decided: dict[Node, Decided] = {}  # key languages by node, built once per compiler
        self._any_values: dict[int, Node] = {}  # any_value(depth), built once per compiler
        # Polarity: False while compiling a language that must be a subset of the schema's instances (what
        # the grammar admits), True for the right side of a difference (`not`, the other branches of a
        # `oneOf`), which must be a superset. Each approximation below picks its side by it.
        self._negative = False
        self._flips = 0  # how many difference right sides the build is inside (positive and > 0: a subset removed)
        # Container nesting: the current depth while compiling, and the deepest any compiled value reaches
        # (scanners that read values without their schema are given this depth, so they cut nothing).
        self._depth = 0
        self._deepest = 0
        # the nesting limit of any values in the build under way (0 builds each at MIN_ANY_DEPTH), and the
        # container depth of every place one has been compiled into
        self._any_limit = 0
        self._any_places: list[int] = []
        self._subtracts = False  # whether the build under way takes a difference of languages
        # while the parts of an intersection compile: the order of the object keys they share (see _keys_of)
        self._key_order: list[str] | None = None
        self._expansions = 0  # subschemas compiled so far (see MAX_EXPANSIONS)

    def _wrap(self, opening: str, body: Node, closing: str) -> Node:
        """A container: its brackets around `body`, with the gaps the syntax's layout admits inside them."""
        return seq(self.syntax.opening(opening), body, self.syntax.closing(closing))

    # -- errors -----------------------------------------------------------------------------------------
    def _unsupported(self, keyword: str, path: str, detail: str = "") -> UnsupportedSchemaError:
        return UnsupportedSchemaError(keyword, path=path, tool=self.tool, detail=detail)

    def _bad(self, message: str, path: str) -> SchemaError:
        return SchemaError(message, tool=self.tool, path=path)

    # -- entry ------------------------------------------------------------------------------------------
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

    # -- rules (recursive) -------------------------------------------------------------------------------
    def _calls_here(self) -> bool:
        """Whether a recursive place may become a call here: only where the language is built as it is (a call
        inside a difference's right side or a product would need a context-free difference)."""
        return self.recursive and not self._negative and not self._flips

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

    def _any_level(self) -> Node:
        """Any JSON value, the values inside it calls of the any-value rule."""
        return self._build_any_value(1, self._call(ANY_RULE, True))

    def _flipped(self, schema: Any, path: str) -> Node:
        """`schema` compiled at the other polarity (for the right side of a difference)."""
        self._negative = not self._negative
        self._flips += 1
        try:
            return self._compile(schema, path)
        finally:
            self._negative = not self._negative
            self._flips -= 1

    def _difference(self, left: Node, right_schema: Any, right_path: str) -> Node:
        """`left` minus the instances of `right_schema`, sound at the current polarity.

        Positive: the right side is compiled as a superset, and the left keeps canonical string spellings only
        (patterns, consts and keys match canonical text, so other spellings of a removed value would slip
        through). Negative: the right side is compiled as a subset, and every spelling of the left stays.
        """
        return self._minus(left, self._flipped(right_schema, right_path))

    def _minus(self, left: Node, right: Node) -> Node:
        """`left` minus an already compiled right side of the other polarity (see `_difference`)."""
        self._subtracts = True
        if self._negative:
            return Difference(left, right)
        return Difference(Intersect((left, canonical_text())), right)

    def _cut(self) -> Node:
        """What a cut branch (recursion past max_ref_depth) becomes: nothing, or anything when negative."""
        return self._any_superset() if self._negative else NOTHING

    def _reached(self, depth: int) -> None:
        self._deepest = max(self._deepest, self._depth + depth)

    def _scan_depth(self) -> int:
        """How deep a schema-less scanner must read: as deep as anything compiled so far nests."""
        return self._deepest + 1

    def _any_superset(self) -> Node:
        """A superset of every value the grammar can hold here (for a difference's right side)."""
        return member_text(self._scan_depth())

    def _nested(self, build: Any) -> Any:
        """Run `build` one container level deeper."""
        self._depth += 1
        self._reached(0)
        order, self._key_order = self._key_order, None
        try:
            return build()
        finally:
            self._depth -= 1
            self._key_order = order

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
            return self._difference(self._compile(rest, path), schema["not"], _ptr(path, "not"))
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
        self._key_order = self._keys_of([rest, *parts], saved)
        try:
            nodes = [self._compile(p, _ptr(path, "allOf", i)) for i, p in enumerate(parts)]
            if set(rest) - ANNOTATIONS:
                nodes.append(self._compile(rest, path))
        finally:
            self._key_order = saved
        return Intersect(tuple(nodes))

    def _keys_of(self, schemas: list[Any], outer: list[str] | None) -> list[str]:
        """The order of an object's keys under several schemas at once, as the canonical writer lays them out
        (tooldec.grammar.canonical): the `properties` of each schema, its `allOf` parts and `anyOf` / `oneOf`
        branches in turn, then their `required` keys; within `outer`, an order already in force."""
        found: list[dict] = []
        stack = list(reversed(schemas))
        while stack and len(found) < MAX_EXPANSIONS:
            sub = stack.pop()
            if isinstance(sub, dict) and isinstance(sub.get("$ref"), str) and sub["$ref"].startswith("#"):
                try:
                    sub = resolve_pointer(self.root, sub["$ref"])
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
        nodes = [self._compile(s, p) for s, p in specs]
        exclusive = key == "oneOf" and len(nodes) > 1
        if exclusive and not _disjoint_types(branches) and not self._discriminated(base, branches):
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

    # -- literal values ---------------------------------------------------------------------------------
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
        parts = schema.get("allOf")
        for i, part in enumerate(parts if isinstance(parts, list) and depth < 8 else []):
            part = self._plain(part)
            if isinstance(part, dict) and "$ref" not in part:
                values = self._listed(part, _ptr(path, "allOf", i), depth + 1)
                if values is not None:
                    return values
        return None

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
        m = self._multiple_of(schema, path)
        lo, lo_incl, hi, hi_incl = self._bounds(schema, path)
        ilo = None if lo is None else (math.ceil(lo) if lo_incl else math.floor(lo) + 1)
        ihi = None if hi is None else (math.floor(hi) if hi_incl else math.ceil(hi) - 1)
        fmt = schema.get("format")
        if fmt in INT_FORMATS:
            flo, fhi = INT_FORMATS[fmt]
            ilo = flo if ilo is None else max(ilo, flo)
            ihi = fhi if ihi is None else min(ihi, fhi)
        elif fmt in STANDARD_FORMATS and not self._negative:
            raise self._unsupported("format", _ptr(path, "format"), f"{fmt!r} on an integer")
        if self._negative:
            # every number Python or exact arithmetic may read as such an integer (multipleOf not enforced)
            return alt(integer_range(ilo, ihi), integral_spellings(ilo, ihi), EXPONENT_NUMBER)
        if m is not None and m != 1:
            return self._multiples(m, True, ilo, True, ihi, True, path)
        return integer_range(ilo, ihi)

    def _multiple_of(self, schema: dict, path: str) -> int | float | None:
        m = schema.get("multipleOf")
        if m is not None and (isinstance(m, bool) or not isinstance(m, (int, float)) or not m > 0 or not math.isfinite(m)):
            raise self._bad("multipleOf must be a positive number", _ptr(path, "multipleOf"))
        return m

    def _multiples(
        self, m: float, integer: bool, lo: Any, lo_incl: bool, hi: Any, hi_incl: bool, path: str
    ) -> Node:
        try:
            return multiples(m, integer=integer, lo=lo, lo_incl=lo_incl, hi=hi, hi_incl=hi_incl)
        except UnsupportedSchemaError as exc:
            key = exc.keyword
            raise self._unsupported(key, _ptr(path, key), exc.detail) from None

    def _number(self, schema: dict, path: str) -> Node:
        m = self._multiple_of(schema, path)
        fmt = schema.get("format")
        if m == 1 or fmt in INT_FORMATS:
            return self._integer(schema, path)
        if fmt in STANDARD_FORMATS and not self._negative:
            raise self._unsupported("format", _ptr(path, "format"), f"{fmt!r} on a number")
        lo, lo_incl, hi, hi_incl = self._bounds(schema, path)
        if self._negative:
            # bounds widened to the integers around them, every exponent spelling; multipleOf not enforced
            if lo is None and hi is None:
                return any_number()
            # widened to the integers around the bounds (excluded): decimals there may round onto a bound
            wlo = None if lo is None else math.floor(lo) - 1
            whi = None if hi is None else math.ceil(hi) + 1
            return alt(number_range(wlo, False, whi, False), EXPONENT_NUMBER)
        if m is not None:
            return self._multiples(m, False, lo, lo_incl, hi, hi_incl, path)
        if lo is None and hi is None:
            return any_number()
        if all(v is None or float(v).is_integer() for v in (lo, hi)):
            bounded = number_range(None if lo is None else int(lo), lo_incl, None if hi is None else int(hi), hi_incl)
        else:
            exact_lo, exact_hi = _exact(lo), _exact(hi)
            bounded = alt(decimal_range(exact_lo, lo_incl, exact_hi, hi_incl),
                          inner_exponents(exact_lo, lo_incl, exact_hi, hi_incl))
        # a value within float rounding of a bound compares differently in exact and binary arithmetic
        return float_safe(bounded, [b for b in (_exact(lo), _exact(hi)) if b is not None])

    def _string(self, schema: dict, path: str) -> Node:
        parts: list[Node] = []
        fmt = schema.get("format")
        if fmt is not None and not isinstance(fmt, str):
            raise self._bad("format must be a string", _ptr(path, "format"))
        if (fmt in STANDARD_FORMATS or fmt == "byte") and not self._negative:
            # a format is a subset of the valid values; on the right side of a difference it constrains nothing
            parts.append(format_ir(fmt, path=_ptr(path, "format")))
        if "pattern" in schema:
            pat = schema["pattern"]
            if not isinstance(pat, str):
                raise self._bad("pattern must be a string", _ptr(path, "pattern"))
            bound = pattern_upper_ir if self._negative else pattern_ir
            parts.append(bound(pat, path=_ptr(path, "pattern")))
        lo = self._count(schema, "minLength", path) or 0
        hi = self._count(schema, "maxLength", path)
        if parts:
            # a bound the pattern or format already implies needs no counting (a character is 1 to 6 bytes)
            most, least = min(_max_bytes(p) for p in parts), max(_min_bytes(p) for p in parts)
            if hi is not None and most <= hi:
                hi = None
            if lo and -(-least // 6) >= lo:
                lo = 0
        if hi is not None and hi > MAX_STRING_LENGTH:
            # every character below the bound is a state of its own: a huge bound is enforced as a smaller
            # one (a subset), or not at all on a difference's right side (a superset)
            hi = None if self._negative else max(LONG_STRING_CAP, lo)
        if self._negative and lo > MAX_STRING_LENGTH:
            lo = MAX_STRING_LENGTH
        if lo or hi is not None or not parts:
            try:
                parts.append(string_content(min_length=lo, max_length=hi, python=self.syntax.python))
            except UnsupportedSchemaError as exc:
                key = "maxLength" if hi is not None and exc.keyword == "maxLength" else exc.keyword
                raise self._unsupported(key, _ptr(path, key), exc.detail) from None
        body = parts[0] if len(parts) == 1 else Intersect(tuple(parts))
        return seq(lit('"'), body, lit('"'))

    def _array(self, schema: dict, path: str) -> Node:
        lo = self._count(schema, "minItems", path) or 0
        hi = self._count(schema, "maxItems", path)
        items = schema.get("items", True)
        prefix = schema.get("prefixItems", [])
        if isinstance(items, list):
            # draft 4-7 tuple form; additionalItems only has a meaning here
            prefix, items = items, schema.get("additionalItems", True)
        if schema.get("uniqueItems") is True and not (hi is not None and hi <= 1) and not self._negative:
            raise self._unsupported("uniqueItems", _ptr(path, "uniqueItems"))
        prefix_nodes = self._nested(lambda: [self._compile(p, _ptr(path, "prefixItems", i)) for i, p in enumerate(prefix)])
        rest = self._nested(lambda: self._compile(items, _ptr(path, "items")))
        options: list[Node] = []
        k = len(prefix_nodes)
        for n in range(lo, min(k, hi if hi is not None else k) + 1):
            options.append(seq(*_joined(prefix_nodes[:n], self._sep)) if n else lit(""))
        if (hi is None or hi > k) and rest != NOTHING:
            need = max(lo - k, 1)
            if need == 1 and hi is None:
                if not k and not lo:
                    options.append(Repeat(rest, 0, None, self._sep))  # also the empty array; one copy of `rest`
                    need = 0
                else:
                    more = _one_or_more(rest, self._sep)
            elif not k and hi is not None and (hi - need) * _ir_size(rest) > UNROLL_LIMIT:
                # one copy of a big item, the count kept by a product with a bracket-counting automaton
                counted = container_count("[", "]", lo, hi, max_depth=self._scan_depth())
                options = [Intersect((self._wrap("[", Repeat(rest, 0, None, self._sep), "]"), counted))]
                need = 0
            else:
                more = Repeat(rest, need, None if hi is None else hi - k, self._sep)
            if need:
                options.append(seq(*_joined(prefix_nodes, self._sep), self._sep, more) if k else more)
        body = alt(*options) if options else NOTHING
        if body == NOTHING:
            return NOTHING
        node = body if isinstance(body, Intersect) else self._wrap("[", body, "]")
        if "contains" in schema:
            counted = self._contains(schema, rest, bool(prefix), path)
            if counted is not None:
                node = counted if not lo and hi is None else Intersect((node, counted))
        return node

    def _contains(self, schema: dict, rest: Node, has_prefix: bool, path: str) -> Node | None:
        """Arrays of `rest` items of which between minContains and maxContains match `contains`.

        Items are split into those matching (M) and those not (N); the array is N's around the counted M's.
        None when the keyword constrains nothing (minContains 0 without maxContains).
        """
        a = self._count(schema, "minContains", path)
        a = 1 if a is None else a
        b = self._count(schema, "maxContains", path)
        if a == 0 and b is None:
            return None
        if b is not None and b < a:
            return NOTHING
        if has_prefix:
            raise self._unsupported("contains", _ptr(path, "contains"), "contains with prefixItems / tuple items")
        if a + (b or 0) > MAX_CONTAINS:
            raise self._unsupported(
                "contains", _ptr(path, "contains"), f"counting more than {MAX_CONTAINS} matching items"
            )
        target_path = _ptr(path, "contains")
        sep = self._sep
        match = Intersect((rest, self._nested(lambda: self._compile(schema["contains"], target_path))))
        other = self._nested(lambda: self._difference(rest, schema["contains"], target_path))
        first = seq(Repeat(seq(other, sep), 0, None), match)  # N, N, ..., M
        more = seq(Repeat(seq(sep, other), 0, None), sep, match)  # , N, ..., M
        options: list[Node] = []
        if a == 0:
            options.append(Repeat(other, 0, None, sep))
        if b is None or b >= 1:
            start = max(a, 1)
            counted = [first] + [more] * (start - 1)
            if b is None:
                options.append(seq(*counted, Repeat(seq(sep, rest), 0, None)))
            else:
                options.append(seq(*counted, Repeat(more, 0, b - start), Repeat(seq(sep, other), 0, None)))
        return self._wrap("[", alt(*options), "]")

    def _object(self, schema: dict, path: str) -> Node:
        deps = self._dependencies(schema, path)
        if deps:
            return self._split_dependency(schema, deps[0], path)
        props = schema.get("properties", {})
        if not isinstance(props, dict):
            raise self._bad("properties must be an object", _ptr(path, "properties"))
        required = schema.get("required", [])
        if not isinstance(required, list):
            raise self._bad("required must be a list", _ptr(path, "required"))
        patterns = schema.get("patternProperties", {})
        if not isinstance(patterns, dict):
            raise self._bad("patternProperties must be an object", _ptr(path, "patternProperties"))
        req = set(required)
        extra = schema.get("additionalProperties")
        if extra is None:
            # the strict reading (tool calls: undeclared keys refused) narrows what is admitted; on the subtracted
            # side of a `not` it would narrow what is removed, and admit objects the schema forbids. Free-form maps
            # stay open where `free_form_maps` says so
            free_form = (self.free_form_maps and self._depth > 0 and "properties" not in schema
                         and not (required or patterns))
            extra = True if self._negative or free_form else bool(self.additional_properties)
        syn = self.syntax
        neg = self._negative
        names = self._property_names(schema, path)
        pattern_keys = [self._pattern_keys(pat, _ptr(path, "patternProperties", pat)) for pat in patterns]
        members: list[tuple[str, Node, bool]] = []
        missing = [r for r in dict.fromkeys(required) if r not in props]
        laid_out = [*props, *missing]
        if self._key_order is not None:  # a part of an intersection: every key the parts name, in their order
            laid_out = [*self._key_order, *(n for n in laid_out if n not in self._key_order)]
        for name in laid_out:
            if not isinstance(name, str):
                raise self._bad("property names must be strings", _ptr(path, "required"))
            body = syn.dumps(name)[1:-1].encode()
            if names is not None and not self._language(names[0]).accepts(b'"' + body + b'"'):
                if name in req:
                    return NOTHING
                continue
            parts: list[tuple[Any, str]] = []
            if name in props:
                parts.append((props[name], _ptr(path, "properties", name)))
            governed = False  # whether additionalProperties is surely (negative: possibly) void for the key
            for (pat, sub), (lower, upper) in zip(patterns.items(), pattern_keys):
                surely = self._language(lower).accepts(body)
                maybe = surely or self._language(upper).accepts(body)
                # where the regex readings disagree, positive takes both schemas and negative neither
                if surely or (maybe and not neg):
                    parts.append((sub, _ptr(path, "patternProperties", pat)))
                governed = governed or (maybe if neg else surely)
            if name not in props and not governed:
                if extra is False and name not in req:
                    continue  # laid out for the other parts of an intersection, and closed here
                # a required key with no declared schema takes additionalProperties (any value when absent)
                parts.append((schema.get("additionalProperties", True) if extra is False else extra,
                              _ptr(path, "additionalProperties")))
            value = self._nested(lambda parts=parts: self._compile_all(parts, path))
            if value == NOTHING:
                if name in req:
                    return NOTHING
                continue
            members.append((name, seq(lit(syn.dumps(name) + syn.key_sep), value), name in req))
        extras = self._nested(
            lambda: self._extra_members(schema, path, laid_out, names, extra, pattern_keys)
        )
        lo = self._count(schema, "minProperties", path) or 0
        hi = self._count(schema, "maxProperties", path)
        if neg:
            return self._object_superset(members, extras, lo)
        if self._flips and not lo and hi is None and sum(r for _, _, r in members) <= MAX_TRACKED_KEYS:
            # a subset that a superset loses (`not` under `not`, a oneOf branch on the subtracted side): members in
            # any order, as the superset holds them; each parsed key keeps a valid value, every required key shows
            return self._object_superset(members, extras, 0)
        return self._object_fields(members, extras, lo, hi, path)

    def _object_fields(
        self, members: list[tuple[str, Node, bool]], extras: Node, lo: int, hi: int | None, path: str
    ) -> Node:
        """Declared members in schema order (optional ones skippable), then the extra members, with counts.

        An extra key may repeat (a JSON object keeps the last), so extras count at most once toward
        minProperties (the object has at least one distinct extra key), and fully toward maxProperties.
        """
        fields = tuple((node, r) for _, node, r in members)
        n_required = sum(1 for _, _, r in members if r)
        n_declared = len(members)
        if hi is not None and hi < n_required:
            return NOTHING
        declared = self._wrap("{", Fields(fields, self._sep), "}")
        if extras == NOTHING:
            if lo > n_declared:
                return NOTHING
        elif lo > n_declared + 1:
            raise self._unsupported(
                "minProperties", _ptr(path, "minProperties"),
                f"{lo} members would need two additional properties, whose keys could repeat",
            )
        if extras == NOTHING:
            if lo > n_required or (hi is not None and hi < n_declared):
                return Intersect((declared, container_count("{", "}", lo, hi, max_depth=self._scan_depth())))
            return declared
        more = _one_or_more(extras, self._sep)
        if lo <= n_required and hi is None:
            return self._wrap("{", Fields((*fields, (more, False)), self._sep), "}")
        options: list[Node] = []
        if lo <= n_declared:
            options.append(
                Intersect((declared, container_count("{", "}", lo, hi, max_depth=self._scan_depth())))
                if lo > n_required or (hi is not None and hi < n_declared) else declared
            )
        if hi is None or hi > n_required:
            with_extras = self._wrap("{", Fields((*fields, (more, True)), self._sep), "}")
            limits: list[Node] = []
            if lo - 1 > n_required:
                keys = [(self.syntax.dumps(name)).encode() for name, _, _ in members]
                limits.append(keyed_count(keys, lo - 1, max_depth=self._scan_depth()))
            if hi is not None:
                limits.append(container_count("{", "}", 0, hi, max_depth=self._scan_depth()))
            options.append(Intersect((with_extras, *limits)) if limits else with_extras)
        return alt(*options)

    def _object_superset(self, members: list[tuple[str, Node, bool]], extras: Node, lo: int) -> Node:
        """For a difference's right side: members in any order (repeats allowed), the first required keys
        present, at least minProperties members; maxProperties not enforced."""
        options = [node for _, node, _ in members] + ([extras] if extras != NOTHING else [])
        body = self._wrap("{", Repeat(alt(*options), 0, None, self._sep), "}") if options else self._wrap("{", EMPTY, "}")
        depth = self._scan_depth()
        limits = [
            keyed_count([self.syntax.dumps(name).encode()], 1, max_depth=depth) for name, _, r in members if r
        ][:MAX_TRACKED_KEYS]
        if lo > 0:
            limits.append(container_count("{", "}", lo, None, max_depth=depth))
        return Intersect((body, *limits)) if limits else body

    def _count(self, schema: dict, key: str, path: str) -> int | None:
        """A non-negative integer keyword (minProperties, maxItems, ...), None when absent."""
        v = schema.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or not float(v).is_integer():
            raise self._bad(f"{key} must be a non-negative integer", _ptr(path, key))
        return int(v)

    def _compile_all(self, parts: list[tuple[Any, str]], path: str) -> Node:
        """IR for a value valid under every (schema, path) in `parts` (merged into one schema where possible)."""
        parts = [(s, p) for s, p in parts if s is not True and s != {}] or parts[:1]
        if not parts:
            return self._compile(True, path)
        if len(parts) == 1:
            return self._compile(*parts[0])
        return self._compile({"allOf": [s for s, _ in parts]}, parts[0][1])

    def _property_names(self, schema: dict, path: str) -> tuple[Node] | None:
        """The quoted keys `propertyNames` admits (canonical spellings), or None when it is absent."""
        if "propertyNames" not in schema:
            return None
        quoted = seq(lit('"'), string_content(python=self.syntax.python), lit('"'))
        return (Intersect((quoted, self._compile(schema["propertyNames"], _ptr(path, "propertyNames")))),)

    def _pattern_keys(self, pattern: Any, path: str) -> tuple[Node, Node]:
        """(keys a patternProperties pattern surely matches, keys it may match), as string bodies."""
        if not isinstance(pattern, str):
            raise self._bad("a patternProperties key must be a string", path)
        try:
            return pattern_ir(pattern, path=path), pattern_upper_ir(pattern, path=path)
        except UnsupportedSchemaError as exc:
            raise self._unsupported("patternProperties", path, exc.detail) from None

    def _extra_members(
        self,
        schema: dict,
        path: str,
        declared: list[str],
        names: tuple[Node] | None,
        extra: Any,
        pattern_keys: list[tuple[Node, Node]],
    ) -> Node:
        """`"key": value` for the keys outside `properties`, each with the schemas that govern it.

        Keys are split into regions by the patterns matching them. A pattern the regex readings may disagree on
        for a key (`\\w` and `é`) leaves that key out when positive (a subset), and imposes nothing on its
        value when negative (a superset). A region's values satisfy every matching pattern's schema, or
        `additionalProperties` where no pattern matches.
        """
        syn = self.syntax
        neg = self._negative
        patterns = list(schema.get("patternProperties", {}).items())
        if extra is False and not patterns:  # a closed object (every tool call's): no key language to build
            return NOTHING
        universe = seq(lit('"'), _string_except(frozenset(declared), canonical=bool(patterns) or names is not None), lit('"'))
        if names is not None:
            universe = Intersect((universe, names[0]))
        # regions: (patterns surely matching, whether some pattern may match, quoted key language)
        regions: list[tuple[tuple[int, ...], bool, Node]] = [((), False, universe)]
        for i, (lower, upper) in enumerate(pattern_keys):
            surely, maybe = seq(lit('"'), lower, lit('"')), seq(lit('"'), upper, lit('"'))
            split: list[tuple[tuple[int, ...], bool, Node]] = []
            for matched, touched, keys in regions:
                parts = [((*matched, i), True, Intersect((keys, surely))), (matched, touched, Difference(keys, maybe))]
                if neg:
                    parts.append((matched, True, Intersect((Difference(keys, surely), maybe))))
                for part in parts:
                    if len(pattern_keys) == 1 or not self._language(part[2]).is_empty:
                        split.append(part)
            regions = split
            if len(regions) > MAX_KEY_REGIONS:
                raise self._unsupported(
                    "patternProperties", _ptr(path, "patternProperties"),
                    f"the patterns split keys into more than {MAX_KEY_REGIONS} regions",
                )
        members: list[Node] = []
        for matched, touched, keys in regions:
            if matched:
                value = self._compile_all(
                    [(patterns[i][1], _ptr(path, "patternProperties", patterns[i][0])) for i in matched], path
                )
            elif touched:
                value = self._any_superset()  # negative only: a pattern may govern the key, or none
            elif extra is False:
                continue
            else:
                value = self._compile(extra, _ptr(path, "additionalProperties"))
            if value != NOTHING:
                members.append(seq(keys, lit(syn.key_sep), value))
        return alt(*members)

    def _dependencies(self, schema: dict, path: str) -> list[tuple[str, str, Any]]:
        """(keyword, trigger property, required list or schema) for every dependency of an object schema."""
        out: list[tuple[str, str, Any]] = []
        for key in ("dependencies", "dependentRequired", "dependentSchemas"):
            deps = schema.get(key)
            if deps is None:
                continue
            if not isinstance(deps, dict):
                raise self._bad(f"{key} must be an object", _ptr(path, key))
            for name, dep in deps.items():
                if key == "dependentRequired" and not isinstance(dep, list):
                    raise self._bad("a dependentRequired entry must be a list", _ptr(path, key, name))
                if key == "dependentSchemas" and not isinstance(dep, (dict, bool)):
                    raise self._bad("a dependentSchemas entry must be a schema", _ptr(path, key, name))
                if not isinstance(dep, (list, dict, bool)):
                    raise self._bad("a dependency must be a list or a schema", _ptr(path, key, name))
                out.append((key, name, dep))
        if len(out) > MAX_DEPENDENCIES:
            raise self._unsupported(
                out[0][0], _ptr(path, out[0][0]), f"more than {MAX_DEPENDENCIES} dependencies"
            )
        return out

    def _split_dependency(self, schema: dict, dep: tuple[str, str, Any], path: str) -> Node:
        """An object schema with one dependency as two cases: the trigger property absent, or present.

        Absent: the property is forbidden and the dependency void. Present: the property is required along
        with what it depends on (more required properties, or the dependent schema, merged in).
        """
        key, name, value = dep
        rest = {k: v for k, v in schema.items() if k != "nullable"}
        rest["type"] = "object"
        others = {k: v for k, v in schema[key].items() if k != name}
        if others:
            rest[key] = others
        else:
            del rest[key]
        props = dict(rest.get("properties", {}))
        required = list(rest.get("required", []))
        cases: list[Node] = []
        if name not in required:
            props_absent = {**props, name: False}
            cases.append(self._compile({**rest, "properties": props_absent}, path))
        needs = [name, *(value if isinstance(value, list) else [])]
        present = {**rest, "required": list(dict.fromkeys(required + needs))}
        if isinstance(value, list) or value is True:
            cases.append(self._compile(present, path))
        elif isinstance(value, dict):
            merged = _merge(present, value) if "$ref" not in value else None
            if merged is not None:
                cases.append(self._compile(merged, path))
            else:
                cases.append(Intersect((self._compile(present, path), self._compile(value, _ptr(path, key, name)))))
        return alt(*cases)

    def _language(self, node: Node) -> Decided:
        """The decided language of a small node (key languages), built once per compiler."""
        language = self._decided.get(node)
        if language is None:
            language = self._decided[node] = self.decide(node)
        return language

    # -- any value --------------------------------------------------------------------------------------
    def any_value(self, depth: int) -> Node:
        """Any JSON value nested at most `depth` containers deep."""
        kept = self._any_values.get(depth)
        if kept is None:
            kept = self._any_values[depth] = self._build_any_value(depth)
        return kept

    def _build_any_value(self, depth: int, inner: Node | None = None) -> Node:
        """Any JSON value nested at most `depth` deep, or one level of any value around `inner` values."""
        syn = self.syntax
        scalars = [
            lit(syn.null), lit(syn.true), lit(syn.false), any_number(),
            seq(lit('"'), string_content(python=syn.python), lit('"')),
        ]
        if depth <= 0:
            return alt(*scalars, self._wrap("[", EMPTY, "]"), self._wrap("{", EMPTY, "}"))
        if inner is None:
            inner = self.any_value(depth - 1)
        key = seq(lit('"'), string_content(python=syn.python), lit('"' + syn.key_sep))
        array = self._wrap("[", Repeat(inner, 0, None, self._sep), "]")
        obj = self._wrap("{", Repeat(seq(key, inner), 0, None, self._sep), "}")
        return alt(*scalars, array, obj)


def any_depth_at(limit: int, k: int) -> int:
    """How deep any value nests at a place k containers deep under the nesting limit `limit` (see MIN_ANY_DEPTH)."""
    return max(MIN_ANY_DEPTH, min(MAX_ANY_DEPTH, limit - k))


def nesting_limit(places: list[int], budget: int = ANY_VALUE_BUDGET) -> int:
    """The deepest nesting limit at which places holding any value, at the container depths `places`, fit within
    `budget` states together (see MIN_ANY_DEPTH); 0 without places."""
    if not places:
        return 0
    counts = Counter(places)

    def cost(limit: int) -> int:
        return sum(n * ANY_LEVEL_STATES * 2 ** (any_depth_at(limit, k) + 1) for k, n in counts.items())

    limit = min(counts) + MIN_ANY_DEPTH
    while limit < max(counts) + MAX_ANY_DEPTH and cost(limit + 1) <= budget:
        limit += 1
    return limit


def _exact(v: float | None) -> Fraction | None:
    """A bound as the exact decimal it is written as (`0.1` is 1/10, not the nearest binary float)."""
    if v is None:
        return None
    return Fraction(repr(v)) if isinstance(v, float) else Fraction(v)


def _json_depth(v: Any) -> int:
    """How many containers deep a JSON value nests."""
    if isinstance(v, list):
        return 1 + max((_json_depth(x) for x in v), default=0)
    if isinstance(v, dict):
        return 1 + max((_json_depth(x) for x in v.values()), default=0)
    return 0


def value_key(v: Any) -> Any:
    """A hashable key equal for values JSON Schema deems equal (1 == 1.0 at any depth, but true != 1)."""
    if isinstance(v, bool) or v is None:
        return ("literal", v)
    if isinstance(v, (int, float)):
        return ("number", v)
    if isinstance(v, str):
        return ("string", v)
    if isinstance(v, list):
        return ("array", tuple(value_key(x) for x in v))
    if isinstance(v, dict):
        return ("object", frozenset((k, value_key(x)) for k, x in v.items()))
    return ("other", repr(v))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _ir_size(node: Node, memo: dict[int, int] | None = None) -> int:
    """About how many NFA states a node builds (bounded repeats unrolled, products counted by their parts)."""
    memo = {} if memo is None else memo
    key = id(node)
    if key not in memo:
        if isinstance(node, Bytes):
            size = 1
        elif isinstance(node, Repeat):
            copies = max(node.min, 1) + (node.max is None) if node.max is None else max(node.max, 1)
            sep = _ir_size(node.sep, memo) if node.sep is not None else 0
            size = copies * (_ir_size(node.item, memo) + sep)
        elif isinstance(node, Fields):
            size = sum(_ir_size(n, memo) for n, _ in node.items) + len(node.items) * _ir_size(node.sep, memo)
        elif isinstance(node, Difference):
            size = _ir_size(node.left, memo) + _ir_size(node.right, memo)
        elif isinstance(node, Divisible):
            size = node.divisor
        else:
            size = 1 + sum(_ir_size(n, memo) for n in node.items)
        memo[key] = size
    return memo[key]


def _max_bytes(node: Node, memo: dict[int, float] | None = None) -> float:
    """The longest byte string a node matches (inf when unbounded, -inf when it matches nothing)."""
    memo = {} if memo is None else memo
    key = id(node)
    if key not in memo:
        if isinstance(node, Bytes):
            size: float = 1 if node.mask else -math.inf
        elif isinstance(node, Seq):
            size = sum(_max_bytes(n, memo) for n in node.items)
        elif isinstance(node, Alt):
            size = max((_max_bytes(n, memo) for n in node.items), default=-math.inf)
        elif isinstance(node, Repeat):
            item = _max_bytes(node.item, memo)
            sep = _max_bytes(node.sep, memo) if node.sep is not None else 0
            if node.max is None:
                size = math.inf if item > 0 else (0 if node.min == 0 or item == 0 else -math.inf)
            else:
                size = node.max * item + max(node.max - 1, 0) * sep if item >= 0 else (0 if node.min == 0 else -math.inf)
        elif isinstance(node, Fields):
            size = sum(max(_max_bytes(n, memo), 0) for n, _ in node.items) + len(node.items) * _max_bytes(node.sep, memo)
        elif isinstance(node, Intersect):
            size = min(_max_bytes(n, memo) for n in node.items)
        elif isinstance(node, Divisible):
            size = math.inf
        else:
            size = _max_bytes(node.left, memo)
        memo[key] = size
    return memo[key]


def _min_bytes(node: Node, memo: dict[int, float] | None = None) -> float:
    """The shortest byte string a node matches (inf when it matches nothing)."""
    memo = {} if memo is None else memo
    key = id(node)
    if key not in memo:
        if isinstance(node, Bytes):
            size: float = 1 if node.mask else math.inf
        elif isinstance(node, Seq):
            size = sum(_min_bytes(n, memo) for n in node.items)
        elif isinstance(node, Alt):
            size = min((_min_bytes(n, memo) for n in node.items), default=math.inf)
        elif isinstance(node, Repeat):
            sep = _min_bytes(node.sep, memo) if node.sep is not None and node.min > 1 else 0
            size = node.min * _min_bytes(node.item, memo) + max(node.min - 1, 0) * sep if node.min else 0
        elif isinstance(node, Fields):
            size = sum(_min_bytes(n, memo) for n, r in node.items if r)
        elif isinstance(node, Intersect):
            size = max(_min_bytes(n, memo) for n in node.items)
        elif isinstance(node, Divisible):
            size = 0
        else:
            size = _min_bytes(node.left, memo)
        memo[key] = size
    return memo[key]


def _one_or_more(item: Node, sep: Node) -> Node:
    """`item (sep item)*` with a single copy of `item` (a plain Repeat with min 1 builds two of it)."""
    return Difference(Repeat(item, 0, None, sep), EMPTY)


def _joined(nodes: list[Node], sep: Node) -> list[Node]:
    out: list[Node] = []
    for i, n in enumerate(nodes):
        if i:
            out.append(sep)
        out.append(n)
    return out


STRING_EXCEPT_CACHE_SIZE = 1024
"""Key languages kept by their excluded keys (a `$ref`'d object recurs at every place it is referenced)."""


def clear_caches() -> None:
    """Forget the kept grammar pieces (number ranges, key languages): what a process's first compile starts from."""
    numbers.clear_caches()
    _string_except.cache_clear()


@functools.lru_cache(maxsize=STRING_EXCEPT_CACHE_SIZE)
def _string_except(keys: frozenset[str], *, canonical: bool = False) -> Node:
    """String bodies other than the given keys (so an extra property never repeats a declared one).

    Canonical spellings only, except with no keys to exclude and not `canonical`: then any spelling.
    A pure function of its arguments returning immutable IR, so it is cached.
    """
    any_char = codepoints_ir([(0, 0x10FFFF)])
    free = Repeat(any_char, 0, None)
    if not keys:
        return free if canonical else string_content()
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
