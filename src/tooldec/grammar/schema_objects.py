"""`object`: `properties` laid out in schema order (optional ones skippable), `required`, the extra members that
`additionalProperties` and `patternProperties` govern (keys split into regions by the patterns matching them),
`propertyNames`, `minProperties` / `maxProperties`, and dependencies (`dependencies`, `dependentRequired`,
`dependentSchemas`) as cases of the trigger property absent or present."""

from __future__ import annotations

import functools
import json
from typing import Any, ClassVar

from tooldec.errors import UnsupportedSchemaError
from tooldec.grammar.counting import container_count, keyed_count
from tooldec.grammar.ir import EMPTY, NOTHING, Difference, Fields, Intersect, Node, Repeat, alt, lit, seq
from tooldec.grammar.regex import pattern_ir, pattern_upper_ir
from tooldec.grammar.schema_base import CompilerBase
from tooldec.grammar.schema_keywords import _ptr
from tooldec.grammar.schema_rewrites import _merge
from tooldec.grammar.schema_shapes import _one_or_more
from tooldec.grammar.strings import codepoints_ir, complement_ranges, string_content

MAX_KEY_REGIONS = 64  # patternProperties: key regions (sets of patterns matching together) at most
MAX_DEPENDENCIES = 8  # dependencies split an object into up to 2**8 cases
MAX_TRACKED_KEYS = 6  # on a difference's right side, objects in any key order track this many required keys
MAX_DISTINCT_KEYS = 8  # extra keys allowed once each (a scanner per key) where minProperties counts several
STRING_EXCEPT_CACHE_SIZE = 1024
"""Key languages kept by their excluded keys (a `$ref`'d object recurs at every place it is referenced)."""


class ObjectKeywords(CompilerBase):
    """Objects: declared and extra members, their counts, key languages and dependencies."""

    free_form_maps: ClassVar[bool] = False
    """Whether, in the strict reading, an object inside a value that declares no key at all (no `properties`,
    `required` or `patternProperties`) keeps any members: closed, it could only be `{}`."""

    def _object(self, schema: dict, path: str) -> Node:
        deps = self._dependencies(schema, path)
        if deps:
            return self._split_dependency(schema, deps[0], path)
        if "minProperties" in schema or "maxProperties" in schema:  # the members may be an operand of a count
            return self._operand(lambda: self._members(schema, path))
        return self._members(schema, path)

    def _members(self, schema: dict, path: str) -> Node:
        """An object without dependencies: its declared and extra members, and their counts (`_object`)."""
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
            value = self._nested(lambda parts=parts: self._member(parts, path))
            if value == NOTHING:
                if name in req:
                    return NOTHING
                continue
            members.append((name, seq(lit(syn.dumps(name) + syn.key_sep), value), name in req))
        extras, extra_keys = self._nested(
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
        return self._object_fields(members, extras, lo, hi, path, extra_keys)

    def _object_fields(
        self, members: list[tuple[str, Node, bool]], extras: Node, lo: int, hi: int | None, path: str,
        extra_keys: Node = NOTHING,
    ) -> Node:
        """Declared members in schema order (optional ones skippable), then the extra members (their quoted keys:
        `extra_keys`), with counts.

        An extra key may repeat (a JSON object keeps the last), so extras count at most once toward
        minProperties (the object has at least one distinct extra key), and fully toward maxProperties; unless
        the extra keys are few (`_distinct_extras`), each then allowed once and every member counted.
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
            distinct = self._distinct_extras(fields, extras, extra_keys, lo, hi)
            if distinct is None:
                raise self._unsupported(
                    "minProperties", _ptr(path, "minProperties"),
                    f"{lo} members would need two additional properties, whose keys could repeat",
                )
            return distinct
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

    def _distinct_extras(
        self, fields: tuple[tuple[Node, bool], ...], extras: Node, extra_keys: Node, lo: int, hi: int | None
    ) -> Node | None:
        """Objects whose extra members have distinct keys, every member then counted toward minProperties and
        maxProperties, where the extra keys are at most MAX_DISTINCT_KEYS canonical spellings (a finite key
        language: each key is allowed once by a scanner); None where they are not."""
        keys = self._language(extra_keys).strings(MAX_DISTINCT_KEYS)
        if keys is None or any(self._respelled(k) != k for k in keys):
            return None
        depth = self._scan_depth()
        once = [Difference(container_count("{", "}", 0, None, max_depth=depth), keyed_count([k], 2, max_depth=depth))
                for k in keys]
        body = self._wrap("{", Fields((*fields, (_one_or_more(extras, self._sep), False)), self._sep), "}")
        return Intersect((body, container_count("{", "}", lo, hi, max_depth=depth), *once))

    def _respelled(self, quoted: bytes) -> bytes | None:
        """A quoted key's canonical spelling (None for text that is no JSON string)."""
        try:
            key = json.loads(quoted)
        except ValueError:
            return None
        return self.syntax.dumps(key).encode() if isinstance(key, str) else None

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

    def _property_names(self, schema: dict, path: str) -> tuple[Node] | None:
        """The quoted keys `propertyNames` admits (canonical spellings), or None when it is absent."""
        if "propertyNames" not in schema:
            return None
        quoted = seq(lit('"'), string_content(python=self.syntax.python), lit('"'))
        names = self._operand(lambda: self._compile(schema["propertyNames"], _ptr(path, "propertyNames")))
        return (Intersect((quoted, names)),)

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
    ) -> tuple[Node, Node]:
        """`"key": value` for the keys outside `properties`, each with the schemas that govern it, and the quoted
        keys those members take.

        Keys are split into regions by the patterns matching them. A pattern the regex readings may disagree on
        for a key (`\\w` and `é`) leaves that key out when positive (a subset), and imposes nothing on its
        value when negative (a superset). A region's values satisfy every matching pattern's schema, or
        `additionalProperties` where no pattern matches.
        """
        syn = self.syntax
        neg = self._negative
        patterns = list(schema.get("patternProperties", {}).items())
        if extra is False and not patterns:  # a closed object (every tool call's): no key language to build
            return NOTHING, NOTHING
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
        taken: list[Node] = []
        for matched, touched, keys in regions:
            if matched:
                value = self._member(
                    [(patterns[i][1], _ptr(path, "patternProperties", patterns[i][0])) for i in matched], path
                )
            elif touched:
                value = self._any_superset()  # negative only: a pattern may govern the key, or none
            elif extra is False:
                continue
            else:
                value = self._member([(extra, _ptr(path, "additionalProperties"))], path)
            if value != NOTHING:
                members.append(seq(keys, lit(syn.key_sep), value))
                taken.append(keys)
        return alt(*members), alt(*taken)

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
                cases.append(Intersect(self._operand(
                    lambda: (self._compile(present, path), self._compile(value, _ptr(path, key, name))))))
        return alt(*cases)


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
