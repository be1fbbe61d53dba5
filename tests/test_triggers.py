"""Several triggers per format (`<tool_call>` or a Markdown ```json block), control-token triggers the grammar
spells as text, and the free baseline reading the same shapes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tooldec.chat import CHAT_SYNTAXES, chat_syntax, parse_call, read_calls
from tooldec.chat.reader import call_at_end
from tooldec.chat.syntax import PRETTY_BARE_OPENINGS
from tooldec.compiler import Compiler
from tooldec.decoding import CallController, FreeController
from tooldec.decoding.trigger import Triggers
from tooldec.eval.runners.scoring import chat_attempts
from tooldec.grammar.calls import BARE_OPENING, get_format
from tooldec.specs import ToolSpec
from tooldec.vocab import Vocabulary

HEALING = Vocabulary([None, *(bytes([b]) for b in range(32, 127)), b"\n", b"<m", b"ilitary", b"_branch", b">(\"",
                      b"\")=", b"ordering"], [0])
"""Single bytes, and the merges a BPE makes of `<military_branch>("x")=`: the call's `<` rarely stands alone."""

TOOLS = [ToolSpec("get_weather", "", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})]
CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
OPENINGS = ["<tool_call>", "```json"]


def _feed(ctrl: CallController, vocab: Vocabulary, *texts: str) -> list:
    events = []
    for text in texts:
        events += ctrl.accept_tokens(vocab.encode(text))
    return events


def test_either_trigger_opens_a_guided_call(bytelevel_vocab: Vocabulary) -> None:
    grammar = Compiler(bytelevel_vocab).compile(TOOLS, "hermes")
    special = bytelevel_vocab.encode("Sure. ") + [bytelevel_vocab.special_ids["<tool_call>"]]  # one token here
    for opening, rest in [(bytelevel_vocab.encode("Sure. ```json"), f"\n{CALL}\n```"),
                          (special, f"\n{CALL}\n</tool_call>")]:
        ctrl = CallController(grammar, trigger=OPENINGS)
        assert isinstance(ctrl.trigger, Triggers)
        assert not ctrl.accept_tokens(opening) and ctrl.guide is not None
        [event] = _feed(ctrl, bytelevel_vocab, rest)
        assert event.calls[0].name == "get_weather" and event.calls[0].arguments == {"city": "Paris"}
        assert event.text.endswith(rest) and event.text.removesuffix(rest) in OPENINGS
    required = CallController(grammar, trigger=OPENINGS, tool_choice="required")
    assert required.forced() == [bytelevel_vocab.special_ids["<tool_call>"]]
    fence = CallController(grammar, trigger=OPENINGS[::-1], tool_choice="required").forced()
    assert fence and bytelevel_vocab.encode("```json")[: len(fence)] == fence


def test_a_control_token_trigger_the_grammar_spells_is_not_expected_twice(bytelevel_vocab: Vocabulary) -> None:
    # `<tool_call>` is one special token of the fixture: the guide starts after its text
    special = bytelevel_vocab.special_ids["<tool_call>"]
    grammar = Compiler(bytelevel_vocab).compile(TOOLS, "hermes")
    ctrl = CallController(grammar, trigger="<tool_call>")
    assert ctrl.trigger is not None and ctrl.trigger.token_id == special
    ctrl.accept_token(special)
    [event] = _feed(ctrl, bytelevel_vocab, f"\n{CALL}\n</tool_call>")
    assert event.text == f"<tool_call>\n{CALL}\n</tool_call>" and event.calls[0].name == "get_weather"
    # a grammar that does not spell it (a bare JSON call after the token) starts at its own start
    ctrl = CallController(Compiler(bytelevel_vocab).compile(TOOLS, "json"), trigger="<tool_call>")
    ctrl.accept_token(special)
    [event] = _feed(ctrl, bytelevel_vocab, CALL)
    assert event.text == "<tool_call>" + CALL and event.calls[0].arguments == {"city": "Paris"}


def _allowed(tail: bytes, token: bytes, triggers: list[bytes]) -> bool:
    """No trigger may end inside the token: only at its end (or before it)."""
    text = tail + token
    for t in triggers:
        for end in range(len(tail) + 1, len(text)):
            if text[:end].endswith(t):
                return False
    return True


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["", "`", "``", "```", "```js", "<", "<tool", "x"]))
def test_several_triggers_ban_every_token_that_runs_past_any(bytelevel_vocab: Vocabulary, tail: str) -> None:
    grammar = Compiler(bytelevel_vocab).compile(TOOLS, "hermes")
    trig = CallController(grammar, trigger=[*OPENINGS, "ab"]).trigger
    assert isinstance(trig, Triggers)
    texts = [b"```json", b"ab"]  # `<tool_call>` is a control token in this vocabulary
    mask = trig.allowed_mask(tail.encode(), allow=True)
    for token_id, token in enumerate(bytelevel_vocab.token_bytes):
        if token:
            bit = bool((int(mask[token_id >> 5]) >> (token_id & 31)) & 1)
            assert bit == _allowed(tail.encode(), token, texts), (tail, token)


def test_the_free_baseline_reads_the_same_shapes() -> None:
    oslo = CALL.replace("Paris", "Oslo")
    text = f"Here: ```json\n{CALL}\n```\nand <tool_call>\n{oslo}\n</tool_call> then <tool_call>\n" + '{"na'
    attempts = chat_attempts(text, truncated=True)
    assert [a.complete for a in attempts] == [True, True, False]
    assert [parse_call(a.text).name for a in attempts[:2]] == ["get_weather"] * 2
    assert [get_format("hermes").parse(a.text).arguments for a in attempts[:2]] == [{"city": "Paris"}, {"city": "Oslo"}]
    reading = read_calls(text, CHAT_SYNTAXES["hermes"])
    assert [c.name for c in reading.calls] == ["get_weather"] * 2 and not reading.errors, "a cut call is no error"
    assert CHAT_SYNTAXES["hermes"].triggers == ("<tool_call>", "```json", BARE_OPENING, *PRETTY_BARE_OPENINGS)


def test_a_bare_call_opens_a_guided_call_and_the_free_baseline_reads_it(bytelevel_vocab: Vocabulary) -> None:
    """Qwen2.5-Coder often writes its call as a bare object: its own first bytes open a guided call, whose name
    the grammar then holds to the tools, and the free reader takes the same shape (prose braces are no call)."""
    grammar = Compiler(bytelevel_vocab).compile(TOOLS, "hermes")
    syntax = CHAT_SYNTAXES["hermes"]
    ctrl = CallController(grammar, trigger=syntax.triggers)
    assert not ctrl.accept_tokens(bytelevel_vocab.encode('Sure. {"name": "')) and ctrl.guide is not None
    allowed = {bytelevel_vocab.token_bytes[t] for t in ctrl.guide.allowed_token_ids()}
    assert b"g" in allowed and b"x" not in allowed, "only the tools' names may follow"
    [event] = _feed(ctrl, bytelevel_vocab, CALL.removeprefix(BARE_OPENING))
    assert event.text == CALL and (event.calls[0].name, event.calls[0].arguments) == ("get_weather", {"city": "Paris"})
    text = 'A set {1, 2} and {"a": 1}, then ' + CALL + "\n" + CALL.replace("Paris", "Oslo")
    reading = read_calls(text, syntax)
    assert [c.arguments["city"] for c in reading.calls] == ["Paris", "Oslo"] and not reading.errors
    assert [a.text for a in chat_attempts(CALL, truncated=False)] == [CALL], "BFCL runs read bare calls too"


@pytest.mark.parametrize("layout", ["compact", "lines"])
@pytest.mark.parametrize("indent", [2, 4])
def test_a_pretty_printed_bare_call_is_guided_and_keeps_its_layout(bytelevel_vocab: Vocabulary, layout: str,
                                                                    indent: int) -> None:
    """Qwen2.5-Coder pretty-prints about half its bare calls (`{\n  "name": ...`): that opening opens a guided call
    too (a BFCL record wrote a tool name that does not exist through it), in the compact layout by the grammar's
    own spelling, and the call's text is the one the model wrote; rolled back, the trigger is text again."""
    syntax = chat_syntax("hermes", layout)
    grammar = Compiler(bytelevel_vocab).compile(TOOLS, syntax.format)
    ctrl = CallController(grammar, trigger=syntax.triggers)
    opening = "{\n" + " " * indent + '"name": "'
    assert not ctrl.accept_tokens(bytelevel_vocab.encode("Sure. " + opening)) and ctrl.guide is not None
    allowed = {bytelevel_vocab.token_bytes[t] for t in ctrl.guide.allowed_token_ids()}
    assert b"g" in allowed and b"H" not in allowed, "only the tools' names may follow"
    rest = CALL.removeprefix(BARE_OPENING)
    [event] = _feed(ctrl, bytelevel_vocab, rest)
    assert event.text == opening + rest and not event.error
    assert (event.calls[0].name, event.calls[0].arguments) == ("get_weather", {"city": "Paris"})
    assert [c.arguments for c in read_calls("Sure. " + event.text, syntax).calls] == [{"city": "Paris"}]
    tokens = bytelevel_vocab.encode(rest)
    ctrl.rollback(len(tokens) - 3)
    [again] = ctrl.accept_tokens(tokens[3:])
    assert again.text == event.text, "a rollback inside the call keeps how its opening was written"
    ctrl.rollback(len(ctrl.tokens) - len(bytelevel_vocab.encode("Sure. {")))
    assert ctrl.guide is None and not ctrl.events


def test_a_chat_syntax_in_the_lines_layout_compiles_its_pretty_format() -> None:
    lines = chat_syntax("hermes", "lines")
    assert (lines.family, lines.format, lines.triggers) == ("hermes", "hermes-lines", CHAT_SYNTAXES["hermes"].triggers)
    assert [chat_syntax(f).format for f in CHAT_SYNTAXES] == [*list(CHAT_SYNTAXES)[:-1], "python-calls"]
    with pytest.raises(ValueError, match="exists for hermes calls only, not 'mistral'"):
        chat_syntax("mistral", "lines")
    with pytest.raises(ValueError, match="unknown call syntax"):
        chat_syntax("xml")


def test_the_free_baseline_sees_a_control_token_trigger(bytelevel_vocab: Vocabulary) -> None:
    """`<tool_call>` as one special token (no bytes of its own) still opens a call the free controller reads."""
    ctrl = FreeController(bytelevel_vocab, call_at_end, parse_call, after_call="stop")
    tokens = bytelevel_vocab.encode("Sure. ") + [bytelevel_vocab.special_ids["<tool_call>"]]
    tokens += bytelevel_vocab.encode(f"\n{CALL}\n</tool_call>")
    events = [e for t in tokens if (e := ctrl.accept_token(t)) is not None]
    assert [(c.name, c.arguments) for e in events for c in e.calls] == [("get_weather", {"city": "Paris"})]
    assert events[0].text == f"<tool_call>\n{CALL}\n</tool_call>" and ctrl.done


def _ids(vocab: Vocabulary, *pieces: bytes) -> list[int]:
    return [vocab.token_bytes.index(p) for p in pieces]


def test_a_forced_stretch_leaves_its_last_token_to_the_model_when_a_longer_one_may_follow() -> None:
    tools = [ToolSpec(n, "", {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})
             for n in ("military_branch", "bordering_cities")]
    grammar = Compiler(HEALING).compile(tools, "toolken")
    ctrl = CallController(grammar, trigger="<", tool_choice="required")
    assert ctrl.forced() == []  # not a lone `<`: the model may write `<m`
    ctrl.accept_tokens(_ids(HEALING, b"<m", b"ilitary"))
    # `_branch>("` is forced, but `>("` is held back only if a longer token could follow it: none here
    assert ctrl.forced() == _ids(HEALING, b"_branch", b'>("')
    ctrl.accept_tokens(ctrl.forced() + HEALING.encode("x"))
    [event] = ctrl.accept_tokens(_ids(HEALING, b'")='))
    assert event.calls[0].name == "military_branch" and event.text == '<military_branch>("x")='
    # with jump-forward's canonical `<` a required call still starts with the trigger
    walked = CallController(grammar, trigger="<", tool_choice="required")
    [event] = walked.accept_tokens(HEALING.encode('<bordering_cities>("y")='))
    assert event.calls[0].name == "bordering_cities"


REACT_TOOLS = [*TOOLS, ToolSpec("Finish", "", {"type": "object", "properties": {"answer": {"type": "string"}},
                                               "required": ["answer"]})]


def test_the_end_of_a_react_thought_line_opens_the_action(bytelevel_vocab: Vocabulary) -> None:
    # ReAct's format FSM: the newline that ends the Thought is not spelled by the grammar (it stays in the text
    # before the call) and `Action: ` is forced after it; `Action:` written on the Thought line opens it too
    from tooldec.agents.react import THOUGHT_ENDS
    from tooldec.grammar.calls import ReactCall

    grammar = Compiler(bytelevel_vocab).compile(REACT_TOOLS, ReactCall())
    action = 'Action: get_weather\nAction Input: {"city": "Paris"}\n'
    for thought, rest in [(" I need the weather.\n", action), (" I need the weather. Action:", action[7:])]:
        ctrl = CallController(grammar, trigger=THOUGHT_ENDS, after_call="text", end_in_text=False)
        assert not _feed(ctrl, bytelevel_vocab, thought) and ctrl.guide is not None
        if thought.endswith("\n"):
            assert bytelevel_vocab.decode(ctrl.forced()) == b"Action: "
        [event] = _feed(ctrl, bytelevel_vocab, rest)
        assert event.calls[0].name == "get_weather" and event.calls[0].arguments == {"city": "Paris"}
        assert event.text == ("\n" if thought.endswith("\n") else "Action:") + rest


@settings(max_examples=60, deadline=None)
@given(st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=30))
def test_a_react_thought_may_not_end_and_only_ends_at_its_line(bytelevel_vocab: Vocabulary, thought: str) -> None:
    from tooldec.agents.react import THOUGHT_ENDS
    from tooldec.grammar.calls import ReactCall

    grammar = Compiler(bytelevel_vocab).compile(REACT_TOOLS, ReactCall())
    ctrl = CallController(grammar, trigger=THOUGHT_ENDS, after_call="text", end_in_text=False)
    written = thought.split("Action:")[0]  # the guide takes over at `Action:`
    ctrl.accept_tokens(bytelevel_vocab.encode(written))
    assert ctrl.guide is None
    allowed = ctrl.mask_source()
    assert isinstance(allowed, np.ndarray)
    ids = np.flatnonzero(np.unpackbits(allowed.view(np.uint8), bitorder="little"))
    assert not set(ids.tolist()) & set(bytelevel_vocab.eos_ids), "the text may not end before an action"
    inner = [t for t in ids if b"\n" in (bytelevel_vocab.token_bytes[t] or b"")[:-1]]
    assert not inner, "a newline inside a token would run past the end of the Thought line"
    newline = bytelevel_vocab.encode("\n")
    assert len(newline) == 1 and newline[0] in ids


def test_a_text_that_may_not_end_needs_a_trigger(bytelevel_vocab: Vocabulary) -> None:
    grammar = Compiler(bytelevel_vocab).compile(TOOLS, "hermes")
    for kwargs in ({"trigger": None}, {"trigger": "<tool_call>", "tool_choice": "none"}):
        with pytest.raises(ValueError, match="needs a trigger"):
            CallController(grammar, end_in_text=False, **kwargs)  # type: ignore[arg-type]
