"""The compiled Lark tokenizer (`_core.lark_tokens`, behind `lark_reader.tokenize`) against its specification: the
master regex it replaced, kept here as the reference, on random texts over the dialect's characters."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tooldec import _core
from tooldec.errors import GrammarError
from tooldec.grammar.cfg.lark_reader import tokenize

REFERENCE = re.compile(r"""
    [ \t\f]*
  (?:
    (?P<rule>_?[a-z][_a-z0-9]*)
  | (?P<term>_?[A-Z][_A-Z0-9]*)
  | (?P<string>"(?:\\[^\n]|[^"\\\n])*"i?)
  | (?P<punct>[()\[\]{}:,~|])
  | (?P<nl>\r?\n(?:\s|//[^\n]*|\#[^\n]*)*(?P<bar>\|)?)
  | (?P<skip>[ \t\f]+|\\[ ]*\r?\n|//[^\n]*|\#[^\n]*)
  | (?P<regexp>/(?!/)(?:\\[\s\S]|[^/\\])*/[imslux]*)
  | (?P<to>->)
  | (?P<dotdot>\.\.)
  | (?P<dot>\.)
  | (?P<directive>%[a-z]+)
  | (?P<mod>(?:![?]?|[?]!?)(?=[_a-z]))
  | (?P<op>[+*?])
  | (?P<number>[+-]?\d+)
  )
  | (?P<bad>[\s\S])
""", re.VERBOSE)
"""The token syntax, as the regex lark_reader used before the core cut its tokens (lark_lexer.cc's comment)."""


def reference_tokens(text: str) -> list[tuple[str, str, int]] | int:
    """The tokens the reference regex cuts, or the offset of the first character no token starts with."""
    tokens: list[tuple[str, str, int]] = []
    for m in REFERENCE.finditer(text):
        kind = m.lastgroup
        assert kind is not None
        if kind == "skip":
            continue
        if kind == "bad":
            return m.start(kind)
        value = m[kind]
        if kind == "nl" and m["bar"]:
            tokens.append(("|", "|", m.start("bar")))
        elif kind == "punct":
            tokens.append((value, value, m.start(kind)))
        else:
            tokens.append((kind, value, m.start(kind)))
    return [*tokens, ("nl", "\n", len(text)), ("eof", "", len(text))]


DIALECT = st.text(st.sampled_from(list('aZ_09 \t\f\r\n"\\/|()[]{}:,~.%!?+*-#>i\u00a0\u2028\u0663é')), max_size=40)
"""Texts over the characters each token's syntax turns on, Unicode spaces and digits (which `\\s`, `\\d` match)
among them."""
PIECES = st.lists(st.sampled_from(['rule', 'TERM', '_x', '"a\\"b"', '"s"i', '/a\\/b/i', '//c', '# c', '\n', '\n  |',
                                   '\r\n', ' ', '->', '..', '.', '%import', '?x', '!y', '!?z', '+', '-3', '12', ':',
                                   '\\\n', '~', '\u0663']), max_size=20).map("".join)
"""Texts made of whole tokens of the dialect and its separators, so that long matches are common."""


@settings(max_examples=600, deadline=None, derandomize=True)
@given(st.one_of(DIALECT, PIECES))
def test_the_compiled_tokenizer_cuts_as_the_reference_regex(text: str) -> None:
    expected = reference_tokens(text)
    assert _core.lark_tokens(text) == expected  # the tokens, or the offset of the character refused
    if isinstance(expected, int):
        with pytest.raises(GrammarError, match="Unexpected input"):
            tokenize(text)
    else:
        assert tokenize(text) == expected
