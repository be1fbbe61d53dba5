"""`array`: `items` and `prefixItems` (or draft 4-7 tuple `items` with `additionalItems`), `minItems` and
`maxItems`, `contains` with `minContains` / `maxContains`; `uniqueItems` only where at most one item fits."""

from __future__ import annotations

from tooldec.grammar.counting import container_count
from tooldec.grammar.ir import NOTHING, Intersect, Node, Repeat, alt, lit, seq
from tooldec.grammar.schema_base import CompilerBase
from tooldec.grammar.schema_keywords import _ptr
from tooldec.grammar.schema_shapes import _ir_size, _joined, _one_or_more

MAX_CONTAINS = 32  # minContains + maxContains at most (each counted match copies the item machine)
UNROLL_LIMIT = 20_000  # a bounded array whose unrolled items would be bigger counts its items by a product


class ArrayKeywords(CompilerBase):
    """Arrays: their items, counts and `contains`."""

    def _array(self, schema: dict, path: str) -> Node:
        if "contains" in schema:  # the items are an operand of the counting product
            return self._operand(lambda: self._items(schema, path))
        return self._items(schema, path)

    def _items(self, schema: dict, path: str) -> Node:
        """The array's items and counts (`_array`), `contains` counted over them."""
        lo = self._count(schema, "minItems", path) or 0
        hi = self._count(schema, "maxItems", path)
        items = schema.get("items", True)
        prefix = schema.get("prefixItems", [])
        if isinstance(items, list):
            # draft 4-7 tuple form; additionalItems only has a meaning here
            prefix, items = items, schema.get("additionalItems", True)
        if schema.get("uniqueItems") is True and not (hi is not None and hi <= 1) and not self._negative:
            raise self._unsupported("uniqueItems", _ptr(path, "uniqueItems"))
        prefix_nodes = self._nested(
            lambda: [self._member([(p, _ptr(path, "prefixItems", i))], path) for i, p in enumerate(prefix)])
        copied = hi is not None or lo > 1  # the item is unrolled into that many copies
        rest = self._nested(lambda: self._member([(items, _ptr(path, "items"))], path, copied=copied))
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
