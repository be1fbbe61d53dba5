"""Markdown code fences: a bare call opening inside a code block of another language is code, for the guide's
trigger watch and for the reader of calls alike (`grammar.fences`)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tooldec.chat import CHAT_SYNTAXES, read_calls
from tooldec.compiler import Compiler
from tooldec.decoding import CallController
from tooldec.grammar.fences import START, code_spans, in_spans, step
from tooldec.specs import ToolSpec
from tooldec.vocab import Vocabulary

TOOLS = [ToolSpec("get_weather", "", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})]
CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
CODE = f'Like this:\n```python\ndef make():\n    return {CALL}\n```\n'
"""A Python block whose dict literal is a whole call object (BFCL irrelevance_18 wrote one)."""

PIECES = st.sampled_from(["```", "``", "`", "python", "json", "JSON", " js", "\n", "x", " ", '{"name": "f"}', "a b"])


def _states(text: str) -> list[bool]:
    """Whether each position of `text` is inside a code block, stepping the scanner one character at a time."""
    inside, state = [], START
    for ch in text:
        state = step(state, ch)
        inside.append(state.in_code)
    return inside


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=25), st.lists(st.integers(0, 60), max_size=6))
def test_the_spans_are_where_the_scanner_is_in_code_however_the_text_is_cut(pieces: list[str], cuts: list[int]) -> None:
    text = "".join(pieces)
    inside = _states(text)
    spans = code_spans(text)
    before = [False, *inside[:-1]]
    # a character (but for the backticks that close a block) is in a span exactly when the scanner is in code
    # before reading it
    assert [in_spans(i, spans) for i, ch in enumerate(text) if ch != "`"] == [
        before[i] for i, ch in enumerate(text) if ch != "`"]
    state, at = START, 0
    for cut in sorted(c for c in cuts if c <= len(text)):  # token by token, split anywhere
        state, at = step(state, text[at:cut]), cut
    assert step(state, text[at:]).in_code == (inside[-1] if text else False)


def test_which_fences_hold_code() -> None:
    assert code_spans(CODE) == [(CODE.index("def"), CODE.rindex("```"))]
    assert code_spans("```\nplain\n```") == [] and code_spans("```json\n{}\n```") == []
    assert code_spans("inline ```x``` code, then text") == [], "backticks in the info string: inline code"
    open_block = "```bash\nls {"
    assert code_spans(open_block) == [(8, len(open_block))], "a block the text ends inside runs to its end"


def test_the_reader_leaves_a_call_object_inside_code_and_reads_one_outside() -> None:
    syntax = CHAT_SYNTAXES["hermes"]
    assert read_calls(CODE, syntax).calls == []
    after = read_calls(CODE + "Or call it: " + CALL, syntax).calls
    assert [(c.name, c.arguments) for c in after] == [("get_weather", {"city": "Paris"})]
    plain = read_calls("```\n" + CALL + "\n```", syntax).calls
    assert [c.name for c in plain] == ["get_weather"], "a fence without a language may hold a call"


def test_the_guide_writes_code_freely_and_opens_the_call_after_the_block(bytelevel_vocab: Vocabulary) -> None:
    grammar = Compiler(bytelevel_vocab).compile(TOOLS, "hermes")
    syntax = CHAT_SYNTAXES["hermes"]
    ctrl = CallController(grammar, trigger=syntax.triggers)
    tokens = bytelevel_vocab.encode(CODE)
    assert ctrl.validate_tokens(tokens) == len(tokens), "the dict literal in code is not banned as a trigger run-on"
    assert not ctrl.accept_tokens(tokens) and ctrl.guide is None, "no call opened inside the code"
    events = ctrl.accept_tokens(bytelevel_vocab.encode("Or call it: " + CALL))
    assert [e.calls[0].name for e in events] == ["get_weather"]
    ctrl.rollback(len(ctrl.tokens))
    assert ctrl.accept_tokens(bytelevel_vocab.encode("Or call it: " + CALL)), "rolled back, the fence state with it"


@settings(max_examples=40, deadline=None)
@given(st.lists(PIECES, max_size=12))
def test_the_guide_and_the_reader_open_the_same_calls(bytelevel_vocab: Vocabulary, pieces: list[str]) -> None:
    grammar = Compiler(bytelevel_vocab).compile(TOOLS, "hermes")
    syntax = CHAT_SYNTAXES["hermes"]
    text = "".join(pieces).replace('{"name": "f"}', CALL)
    ctrl = CallController(grammar, trigger=syntax.triggers, max_calls=16)
    tokens = bytelevel_vocab.encode(text)
    n = ctrl.validate_tokens(tokens)
    ctrl.accept_tokens(tokens[:n])
    if n == len(tokens) and ctrl.guide is None:  # whole text taken, no call left open
        assert len(ctrl.events) == len(read_calls(text, syntax).calls)
