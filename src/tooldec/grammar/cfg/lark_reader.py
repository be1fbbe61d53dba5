"""A reader of the Lark grammar dialect: text to definitions whose bodies are trees of tuples.

The compiled core cuts the tokens (`_core.lark_tokens`); statements and bodies are read by a loop with an explicit
stack of open groups, so nesting never reaches Python's recursion limit (groups deeper than MAX_DEPTH are
refused). Bodies use the shapes of Lark's own grammar trees, as tuples (equal trees compare equal, as Lark's do):

    ("alts", alternative, ...)        one or more alternatives (an alternative is a "seq" or an "alias")
    ("seq", item, ...)                a concatenation (possibly empty)
    ("alias", seq, name)              an alternative renamed with `-> name` (only shapes the tree)
    ("expr", item, op, lo, hi)        item?, item*, item+ or item ~ lo..hi; `[x]` reads as ("expr", x, "?", 0, 0)
    ("tmpl", name, arg, ...)          a template used with arguments
    ("T", name) / ("N", name)         a terminal / a rule
    ("P", kind, value, flags)         a string ("str") or regex ("re") pattern, escapes already evaluated
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tooldec import _core
from tooldec.errors import GrammarError

MAX_DEPTH = 256
"""Deepest nesting of groups, optionals and template arguments read (Lark itself fails near 450)."""

Node = tuple  # type: ignore[type-arg]

_SHOWN = {"nl": "a line end", "eof": "the end of the grammar"}


Token = tuple[str, str, int]
"""A lexical unit of the grammar text: its kind (a `_TOKEN` group, or the punctuation itself), its value and its
offset (a plain tuple: a grammar has hundreds, and a named tuple's constructor runs in Python)."""


@dataclass
class Definition:
    """A rule or terminal definition: its body tree and where its name is written."""

    name: str
    is_term: bool
    tree: Node
    offset: int
    priority: int = 0
    params: tuple[str, ...] = ()
    inlined_expand1: bool = False  # `?_name`, which Lark refuses


@dataclass
class Import:
    """`%import path.NAME [-> ALIAS]` or `%import path (A, B)`: imported name -> local name."""

    path: tuple[str, ...]
    relative: bool
    aliases: dict[str, str]
    offset: int


@dataclass
class Ignore:
    """`%ignore` of a terminal name or an inline pattern."""

    tree: Node
    offset: int


@dataclass
class LarkSyntax:
    """A grammar file's statements, the first place each symbol name and each literal is used, and whether a
    template is defined or used."""

    statements: list[Definition | Import | Ignore]
    uses: dict[str, int] = field(default_factory=dict)
    literals: dict[Node, int] = field(default_factory=dict)
    templates: bool = False


def error_at(text: str, offset: int, message: str) -> GrammarError:
    """A GrammarError at a character offset of `text`, with 1-based line and column."""
    line = text.count("\n", 0, offset) + 1
    return GrammarError(message, line=line, column=offset - (text.rfind("\n", 0, offset) + 1) + 1)


def tokenize(text: str) -> list[Token]:
    """The tokens of `text`, ending with a line end and "eof"; GrammarError at a character no token starts with.

    The compiled core cuts them (its lark_lexer.cc has the token syntax, as the master regex it replaces)."""
    tokens = _core.lark_tokens(text)  # type: ignore[attr-defined]
    if type(tokens) is int:
        raise error_at(text, tokens, f"invalid Lark grammar: Unexpected input {text[tokens]!r}")
    return tokens  # type: ignore[no-any-return]


def unescape(body: str, is_string: bool) -> str:
    """A literal's value as Lark evaluates the text between its delimiters; ValueError on a bad escape.

    Python's escapes \\n \\f \\t \\r \\x \\u \\U are evaluated, \\" is a quote, \\\\ stays two characters (one in a
    string), and any other backslash is kept with the character after it."""
    if "\\" not in body:
        return body
    out: list[str] = []
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        out.append(c)
        if c == "\\":
            if i + 1 == n:
                raise ValueError("the literal ends with a lone backslash")
            nxt = body[i + 1]
            if nxt == "\\":
                out.append("\\\\")
            elif nxt not in "Uuxnftr":
                out.append("\\")
            out.append(nxt)
            i += 1
        i += 1
    source = "".join(out).replace('\\"', '"')
    if "\0" in source:
        raise ValueError(f"bad escape in {body!r} (a null character)")
    source = source.replace("\r\n", "\n").replace("\r", "\n")  # as Python reads line ends inside a literal
    try:  # the escapes of a Python string literal, as Lark evaluates them, without compiling one
        value = source.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError as exc:
        raise ValueError(f"bad escape in {body!r} ({exc.reason})") from None
    return value.replace("\\\\", "\\") if is_string else value


_NO_FLAGS: frozenset[str] = frozenset()
_VALUES = frozenset(("rule", "term", "string", "regexp"))


class _Reader:
    """Reads the token list statement by statement."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.syntax = LarkSyntax([])

    def error(self, token: Token, message: str) -> GrammarError:
        """A GrammarError at `token`."""
        return error_at(self.text, token[2], "invalid Lark grammar: " + message)

    def unexpected(self, token: Token, expected: str) -> GrammarError:
        """The error for a token that cannot come here."""
        shown = _SHOWN.get(token[0], repr(token[1]))
        return self.error(token, f"Unexpected token {shown}; expected {expected}")

    def take(self, *kinds: str) -> Token | None:
        """The next token if it has one of `kinds` (consumed), else None."""
        token = self.tokens[self.i]
        if token[0] in kinds:
            self.i += 1
            return token
        return None

    def need(self, kind: str, expected: str) -> Token:
        """The next token, which must be of `kind`."""
        token = self.tokens[self.i]
        if token[0] != kind:
            raise self.unexpected(token, expected)
        self.i += 1
        return token

    def read(self) -> LarkSyntax:
        """Every statement of the grammar."""
        while True:
            kind = self.tokens[self.i][0]
            if kind == "eof":
                return self.syntax
            if kind == "nl":
                self.i += 1
            elif kind in ("mod", "rule", "term"):
                self.syntax.statements.append(self.definition())
            elif kind == "directive":
                self.directive()
            else:
                raise self.error(self.tokens[self.i], "Expecting rule or terminal definition")

    def definition(self) -> Definition:
        """`[mod] rule[{params}][.n]: body` or `TERM[.n]: body`."""
        mod = self.take("mod")
        name_kind, name, offset = token = self.tokens[self.i]
        if name_kind not in ("rule", "term") or (mod is not None and name_kind != "rule"):
            raise self.unexpected(token, "a rule name")
        self.i += 1
        params: list[str] = []
        if name_kind == "rule" and self.take("{"):
            self.syntax.templates = True
            params.append(self.need("rule", "a template parameter")[1])
            while self.take(","):
                params.append(self.need("rule", "a template parameter")[1])
            self.need("}", "'}'")
        priority = 0
        if self.take("dot"):
            priority = int(self.need("number", "a priority number")[1])
        if self.take(":") is None:
            raise self.error(self.tokens[self.i], "Expecting rule or terminal definition (missing colon)")
        tree = self.body(allow_alias=name_kind == "rule")
        return Definition(name, name_kind == "term", tree, offset, priority, tuple(params),
                          inlined_expand1=mod is not None and "?" in mod[1] and name.startswith("_"))

    def directive(self) -> None:
        """`%ignore`, `%import`; the other directives are refused."""
        _kind, value, offset = self.tokens[self.i]
        self.i += 1
        if value == "%ignore":
            self.syntax.statements.append(Ignore(self.body(allow_alias=False), offset))
        elif value == "%import":
            self.syntax.statements.append(self.import_statement())
        elif value == "%declare":
            raise error_at(self.text, offset, "%declare is not supported: every terminal needs a definition "
                                              "(a string or a regex)")
        elif value in ("%override", "%extend"):
            raise error_at(self.text, offset, f"{value} is not supported")
        else:
            raise error_at(self.text, offset, f"invalid Lark grammar: Unexpected input {value!r}")

    def import_statement(self) -> Import:
        """`%import [.]a.b.NAME [-> ALIAS]` or `%import [.]a.b (N1, N2)`."""
        offset = self.tokens[self.i][2]
        relative = self.take("dot") is not None
        path = [self.need_name()]
        while self.take("dot"):
            path.append(self.need_name())
        if self.take("("):
            names = [self.need_name()]
            while self.take(","):
                names.append(self.need_name())
            self.need(")", "')'")
            aliases = {name: name for name in names}
        else:
            if len(path) == 1:
                raise error_at(self.text, offset, f"invalid Lark grammar: Nothing was imported from grammar "
                                                  f"`{path[0]}`")
            name = path.pop()
            aliases = {name: self.need_name() if self.take("to") else name}
        self.need("nl", "a line end")
        return Import(tuple(path), relative, aliases, offset)

    def need_name(self) -> str:
        """A rule or terminal name."""
        token = self.take("rule", "term")
        if token is None:
            raise self.unexpected(self.tokens[self.i], "a name")
        return token[1]

    def literal(self, token: Token) -> Node:
        """A string or regex token as a pattern leaf; a string followed by `..` makes a range."""
        kind, value, offset = token
        flags_at = max(value.rfind('"'), value.rfind("/")) + 1
        body, flags = value[1:flags_at - 1], frozenset(value[flags_at:])
        is_string = kind == "string"
        if not is_string and "\n" in body and "x" not in flags:
            raise self.error(token, "You can only use newlines in regular expressions with the `x` (verbose) flag")
        if is_string and self.take("dotdot"):
            end = self.need("string", "a string after '..'")[1]
            end_body = end[1:-1]
            try:
                ok = not flags and end.endswith('"') and len(unescape(body, True)) == 1 == len(
                    unescape(end_body, True))
            except ValueError:
                ok = False
            if not ok:
                raise self.error(token, 'a range must join two one-character strings, like "a".."z"')
            node: Node = ("P", "re", f"[{body}-{end_body}]", _NO_FLAGS)
        else:
            try:
                evaluated = unescape(body, is_string)
            except ValueError as exc:
                raise self.error(token, str(exc)) from None
            if not evaluated:
                raise self.error(token, f"Empty terminals are not allowed ({value})")
            node = ("P", "str" if is_string else "re", evaluated, flags)
        self.syntax.literals.setdefault(node, offset)
        return node

    def value(self, token: Token, depth: int) -> Node:
        """A terminal, a rule, a template use (`name{args}`) or a literal, starting at `token` (consumed)."""
        kind, name, offset = token
        if kind == "string" or kind == "regexp":
            return self.literal(token)
        self.syntax.uses.setdefault(name, offset)
        if kind == "term":
            return ("T", name)
        if not self.take("{"):
            return ("N", name)
        if depth > MAX_DEPTH:
            raise self.error(token, f"the Lark grammar nests too deeply (more than {MAX_DEPTH} levels)")
        self.syntax.templates = True
        args = [self.value(self.need_value(), depth + 1)]
        while self.take(","):
            args.append(self.value(self.need_value(), depth + 1))
        self.need("}", "'}'")
        return ("tmpl", name, *args)

    def need_value(self) -> Token:
        """The next token, which must start a value."""
        token = self.tokens[self.i]
        if token[0] not in _VALUES:
            raise self.unexpected(token, "a value")
        self.i += 1
        return token

    def body(self, allow_alias: bool) -> Node:
        """Alternatives up to the end of the statement, with an explicit stack of open groups.

        The commonest values (a terminal, a rule, a plain string) are read inline: a body is most of the tokens, and
        the position is a local, handed to `self.i` around the methods that read on."""
        tokens, uses, literals = self.tokens, self.syntax.uses, self.syntax.literals
        i = self.i
        opener: Token | None = None
        alternatives: list[Node] = []
        items: list[Node] = []
        stack: list[tuple[Token | None, list[Node], list[Node]]] = []  # the enclosing groups' state
        fixed = False  # whether the last item already carries an operator
        while True:
            token = tokens[i]
            i += 1
            kind, value, offset = token
            if kind == "term":
                uses.setdefault(value, offset)
                items.append(("T", value))
                fixed = False
            elif kind == "rule" and tokens[i][0] != "{":
                uses.setdefault(value, offset)
                items.append(("N", value))
                fixed = False
            elif kind == "string" and len(value) > 2 and value[-1] == '"' and "\\" not in value and (
                    tokens[i][0] != "dotdot"):
                node: Node = ("P", "str", value[1:-1], _NO_FLAGS)  # `literal` of a plain string
                literals.setdefault(node, offset)
                items.append(node)
                fixed = False
            elif kind in _VALUES:
                self.i = i
                items.append(self.value(token, len(stack) + 1))
                i = self.i
                fixed = False
            elif kind == "op" or kind == "~":
                if not items or fixed:
                    raise self.unexpected(token, "a value before the operator")
                if kind == "op":
                    items[-1] = ("expr", items[-1], value, 0, 0)
                else:
                    self.i = i
                    lo = hi = int(self.need("number", "a number after '~'")[1])
                    if self.take("dotdot"):
                        hi = int(self.need("number", "a number after '..'")[1])
                    i = self.i
                    if hi < lo or lo < 0:
                        raise self.error(token, f"Bad Range for repeat ({lo}..{hi} isn't allowed)")
                    items[-1] = ("expr", items[-1], "~", lo, hi)
                fixed = True
            elif kind == "(" or kind == "[":
                if len(stack) >= MAX_DEPTH:
                    raise self.error(token, f"the Lark grammar nests too deeply (more than {MAX_DEPTH} levels)")
                stack.append((opener, alternatives, items))
                opener, alternatives, items = token, [], []
            elif kind == ")" or kind == "]":
                if opener is None or (opener[0] == "(") != (kind == ")"):
                    raise self.unexpected(token, "a value, '|' or the end of the group")
                alternatives.append(("seq", *items))
                group: Node = ("alts", *alternatives)
                opener, alternatives, items = stack.pop()
                items.append(group if kind == ")" else ("expr", group, "?", 0, 0))
                fixed = False
            elif kind == "|":
                alternatives.append(("seq", *items))
                items = []
                fixed = False
            elif kind == "to" and allow_alias and opener is None:
                self.i = i
                alias = self.need("rule", "an alias name (lowercase)")[1]
                i = self.i
                alternatives.append(("alias", ("seq", *items), alias))
                items = []
                after = tokens[i]
                if after[0] not in ("|", "nl"):
                    raise self.unexpected(after, "'|' or a line end after an alias")
                if after[0] == "|":
                    i += 1
                else:
                    self.i = i
                    return ("alts", *alternatives)
            elif kind == "nl" and opener is None:
                self.i = i
                alternatives.append(("seq", *items))
                return ("alts", *alternatives)
            else:
                raise self.unexpected(token, "a value, an operator, '|' or a line end")


def read_lark(text: str) -> LarkSyntax:
    """The statements of a Lark grammar; GrammarError (line, column) on a syntax error or a refused directive."""
    return _Reader(text).read()
