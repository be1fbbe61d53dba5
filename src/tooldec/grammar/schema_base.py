"""The state every part of the schema compiler shares, and the moves on it that cut across keywords.

`CompilerBase` holds one compile's state: the root document (local `$ref`s resolve in it), the value syntax,
the rules of the recursive reading, the polarity (whether the language under construction must be a subset of
the schema's instances, or a superset on the right side of a difference), the container depth, and the key
languages decided so far. The keyword compilers (`SchemaCompiler`'s bases, one module each) extend it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from tooldec.errors import SchemaError, UnsupportedSchemaError
from tooldec.grammar.counting import member_text
from tooldec.grammar.ir import NOTHING, Difference, Intersect, Node, seq
from tooldec.grammar.schema_keywords import _ptr
from tooldec.grammar.strings import canonical_text
from tooldec.grammar.syntax import JSON, ValueSyntax

DEFAULT_REF_DEPTH = 3
# Subschemas compiled for one value (every `$ref` expansion, `allOf` part, branch and property counts). Recursive
# references that branch expand exponentially up to max_ref_depth: past this many the schema is refused by size
# in ~2.5 s instead of building for minutes. Of MaskBench's 4,046 schemas, the largest that compiles expands to
# 1,979; the five that ran past 10 s expanded to 32,000-333,000 (measured 2026-11-25).
MAX_EXPANSIONS = 50_000
ANY_RULE = "any value"  # the rule any value calls (recursive); no `$ref` can be named so (refs start with "#")


class Decided(Protocol):
    """A small language built by the automaton layer: a schema's key language, checked for one key or emptiness."""

    is_empty: bool

    def accepts(self, data: bytes) -> bool:
        """Whether `data` is in the language."""
        ...

    def strings(self, limit: int) -> list[bytes] | None:
        """Every string of the language where it holds at most `limit`, else None."""
        ...


_T = TypeVar("_T")
Decide = Callable[[Node], Decided]
"""Builds a `Decided` language from IR (`tooldec.automaton.compile.KeyLanguage`): passed in by the compiler, so
the grammar does not import the layer below it."""


class CompilerBase:
    """One compile's state and the moves shared by every keyword: errors, polarity, nesting, counts, key
    languages. Key languages (propertyNames, patternProperties regions) are decided by automata that `decide`
    builds."""

    if TYPE_CHECKING:  # defined by SchemaCompiler's other bases, called across them
        def _compile(self, schema: Any, path: str) -> Node: ...
        def _compile_all(self, parts: list[tuple[Any, str]], path: str) -> Node: ...
        def _call(self, key: str, schema: Any, path: str | None = None) -> Node: ...
        def _complements_here(self) -> bool: ...
        def _one_of_universal(self, branches: list[Any], path: str) -> Node | None: ...
        def _member(self, parts: list[tuple[Any, str]], path: str, *, copied: bool = False) -> Node: ...
        def _resolve(self, ref: str, path: str) -> Any: ...
        def _plain(self, schema: Any) -> Any: ...
        def _any_level(self) -> Node: ...
        def _bounds(self, schema: dict, path: str) -> tuple[float | None, bool, float | None, bool]: ...

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
        containers_as_rules: bool = False,
    ) -> None:
        self.root = root
        self.recursive = recursive
        self.refs_as_rules = recursive and refs_as_rules
        """Every plain `$ref` a rule of its own, not only a recursive one: a schema too large as one automaton
        (definitions used in many places) as a grammar of automata that each stay small."""
        self.containers_as_rules = self.refs_as_rules and containers_as_rules
        """Also every member or item that may hold an object or array a rule of its own (where no product of
        languages takes it in): a schema too large as one automaton for nesting alone (a hundred counted items)
        as one small automaton per container."""
        self.rules: list[Node] = []
        """With `recursive`: the body of rule k (one value) that `call(k)` in the compiled IR nests."""
        self._rule_index: dict[str, int] = {}
        self._pending: list[tuple[int, str, Any, str]] = []  # rules named by a call (index, key, schema, path), not compiled yet
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
        self._operands = 0  # how many operands of an intersection or difference (or left sides) the build is inside
        # Container nesting: the current depth while compiling, and the deepest any compiled value reaches
        # (scanners that read values without their schema are given this depth, so they cut nothing).
        self._depth = 0
        self._deepest = 0
        # the nesting limit of any values in the build under way (0 builds each at MIN_ANY_DEPTH), and the
        # container depth of every place one has been compiled into
        self._any_limit = 0
        self._any_places: list[int] = []
        self._subtracts = False  # whether the build under way takes a difference of languages
        # while the parts of an intersection compile: the order of the object keys they share (see schema_rewrites.key_order)
        self._key_order: list[str] | None = None
        self._expansions = 0  # subschemas compiled so far (see MAX_EXPANSIONS)
        self.cut = False
        """Whether recursion was cut at `max_ref_depth` somewhere that removes values from the language."""

    def _wrap(self, opening: str, body: Node, closing: str) -> Node:
        """A container: its brackets around `body`, with the gaps the syntax's layout admits inside them."""
        return seq(self.syntax.opening(opening), body, self.syntax.closing(closing))

    def _unsupported(self, keyword: str, path: str, detail: str = "") -> UnsupportedSchemaError:
        return UnsupportedSchemaError(keyword, path=path, tool=self.tool, detail=detail)

    def _bad(self, message: str, path: str) -> SchemaError:
        return SchemaError(message, tool=self.tool, path=path)

    def _calls_here(self) -> bool:
        """Whether a recursive place may become a call here: only where the language is built as it is (a call
        inside a difference's right side or a product would need a context-free difference)."""
        return self.recursive and not self._negative and not self._flips

    def _optional_call_here(self) -> bool:
        """Whether a place that need not be a call (a plain `$ref` or a container with `refs_as_rules`, not a
        recursion) becomes one here: where calls may go, and outside every operand of a product, which would
        need the context-free product that `value_grammar` refuses."""
        return self._calls_here() and not self._operands

    def _operand(self, build: Callable[[], _T]) -> _T:
        """`build()` as an operand of an intersection or difference: its optional places stay inline."""
        self._operands += 1
        try:
            return build()
        finally:
            self._operands -= 1

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
        """What a cut branch (recursion past max_ref_depth) becomes: nothing, or anything when negative. A cut
        that removes values is recorded (`cut`): an empty result is then not proof that no value exists."""
        if self._negative:
            return self._any_superset()
        self.cut = True
        return NOTHING

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

    def _count(self, schema: dict, key: str, path: str) -> int | None:
        """A non-negative integer keyword (minProperties, maxItems, ...), None when absent."""
        v = schema.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or not float(v).is_integer():
            raise self._bad(f"{key} must be a non-negative integer", _ptr(path, key))
        return int(v)

    def _language(self, node: Node) -> Decided:
        """The decided language of a small node (key languages), built once per compiler."""
        language = self._decided.get(node)
        if language is None:
            language = self._decided[node] = self.decide(node)
        return language
