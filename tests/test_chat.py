"""The chat layer: torch-free, parallel calls in every syntax (completeness and soundness against the one reader),
the policy builder's rules, and the answer mode."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tooldec.automaton.compile import KeyLanguage, compile_dfa
from tooldec.automaton.dfa import minimize
from tooldec.chat import CHAT_SYNTAXES, ChatSyntax, build_policy, call_blocks, chat_syntax, read_calls
from tooldec.chat.policy import ANSWER_BANS, CallsOnly, plan_calls
from tooldec.chat.reader import distinct_blocks, parse_calls
from tooldec.chat.template import write_calls
from tooldec.compiler import Compiler
from tooldec.decoding import CallController, FreeController, Mode
from tooldec.errors import TokenRejectedError
from tooldec.grammar.calls import CallParseError, ParsedCall, name_aliases, several_in_block, tools_grammar
from tooldec.index import unpack
from tooldec.specs import ToolSet, ToolSpec
from tooldec.vocab import Vocabulary

TOOLS = ToolSet([
    ToolSpec("get_weather", "Weather of a city.", {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city", "days"]}),
    ToolSpec("add", "Add two numbers.", {"type": "object", "properties": {
        "a": {"type": "integer", "minimum": -99, "maximum": 99}, "b": {"type": "boolean"}}, "required": ["a"]}),
])
SYNTAXES = ["hermes", "hermes-lines", "llama31", "mistral", "python"]

calls_st = st.lists(
    st.one_of(
        st.builds(lambda c, d: ("get_weather", {"city": c, "days": d}), st.sampled_from(["Paris", "Oslo", "Lima"]),
                  st.integers(1, 7)),
        st.builds(lambda a, b: ("add", {"a": a, **({} if b is None else {"b": b})}), st.integers(-99, 99),
                  st.none() | st.booleans()),
    ),
    min_size=1, max_size=3, unique_by=lambda c: json.dumps(c, sort_keys=True),
)
"""One to three distinct calls (a call that repeats an earlier one of the turn ends it: see the repeat tests)."""

_GRAMMARS: dict[tuple[int, str], Any] = {}


def _syntax(name: str) -> ChatSyntax:
    family, _, layout = name.partition("-")
    return chat_syntax(family, layout or "compact")


def _policy(vocab: Vocabulary, name: str, choice: str = "auto") -> Any:
    key = (id(vocab), name)
    if key not in _GRAMMARS:
        _GRAMMARS[key] = Compiler(vocab)
    return build_policy(_GRAMMARS[key], TOOLS, choice, syntax=_syntax(name))


BETWEEN = (",\n", "\n", ", ")
"""What Qwen2.5-Coder writes between parallel calls in one `<tool_call>` block (BFCL, free decoding: 94, 39, 17)."""


def _written(name: str, calls: list[tuple[str, dict[str, Any]]], shapes: list[int]) -> str:
    """The calls as a model of this syntax writes them in one turn (Hermes in a mix of its shapes: a shape of 8
    or more puts the call in the block before it, after one of BETWEEN)."""
    if name.startswith("hermes"):
        indent = 2 if name == "hermes-lines" else None
        blocks: list[tuple[int, list[str]]] = []
        for (tool, args), shape in zip(calls, shapes, strict=False):
            obj = json.dumps({"name": tool, "arguments": args}, indent=indent)
            if shape >= 8 and blocks and blocks[-1][0] < 2:
                blocks[-1][1].extend((BETWEEN[shape % 3], obj))
                continue
            bare = json.dumps({"name": tool, "arguments": args})  # a bare call opens with its own compact start
            pretty = "{\n  " + bare[1:]  # or pretty-printed: the rest in the layout's own spelling
            blocks.append((shape % 4, [[obj, obj, bare, pretty][shape % 4]]))
        around = [("<tool_call>\n", "\n</tool_call>"), ("```json\n", "\n```"), ("", ""), ("", "")]
        return "Let me see.\n" + "\n".join(around[k][0] + "".join(b) + around[k][1] for k, b in blocks)
    if name == "python":
        return write_calls(_syntax(name), calls)
    text = write_calls(_syntax(name), calls)
    if name == "llama31" and len(calls) > 1 and shapes[0] % 2:  # a JSON list rather than objects in turn
        text = json.dumps([{"name": t, "parameters": a} for t, a in calls])
    return text


def _encode(vocab: Vocabulary, text: str) -> list[int]:
    """Token ids of `text` as a tokenizer gives them: a special token's name is that token (`<tool_call>`)."""
    out: list[int] = []
    for i, part in enumerate(text.split("<tool_call>")):
        out += ([vocab.special_ids["<tool_call>"]] if i else []) + (vocab.encode(part) if part else [])
    return out


def _pairs(calls: list[ParsedCall]) -> list[tuple[str, dict[str, Any]]]:
    return [(c.name, c.arguments) for c in calls]


def test_importing_the_chat_layer_imports_no_torch() -> None:
    code = ("import sys, tooldec.chat, tooldec.chat.reader, tooldec.chat.policy, tooldec.chat.template; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name", SYNTAXES)
@settings(max_examples=25)
@given(calls=calls_st, shapes=st.lists(st.integers(0, 11), min_size=3, max_size=3))
def test_one_to_three_calls_are_accepted_in_every_syntax(
    bytelevel_vocab: Vocabulary, name: str, calls: list[tuple[str, dict[str, Any]]], shapes: list[int]
) -> None:
    """Completeness: every sequence of 1-3 calls, written as the syntax writes parallel calls, goes through the
    guide token by token, and the guide and the one reader read the same calls."""
    policy = _policy(bytelevel_vocab, name)
    text = _written(name, calls, shapes)
    events = policy.accept_tokens([*_encode(bytelevel_vocab, text), min(bytelevel_vocab.eos_ids)])
    assert _pairs([c for e in events for c in e.calls]) == calls, text
    assert not any(e.error for e in events) and policy.done
    reading = read_calls(text, _syntax(name))
    assert _pairs(reading.calls) == calls and not reading.errors


@pytest.mark.parametrize("name", ["hermes", "hermes-lines", "llama31"])
@pytest.mark.parametrize("choice", ["auto", "required"])
@settings(max_examples=20)
@given(calls=calls_st, again=st.integers(0, 2), shapes=st.lists(st.integers(0, 7), min_size=4, max_size=4))
def test_a_call_that_repeats_one_of_the_turn_ends_it(bytelevel_vocab: Vocabulary, name: str, choice: str,
                                                     calls: list[tuple[str, dict[str, Any]]], again: int,
                                                     shapes: list[int]) -> None:
    """A call the turn made before, written again as a call of its own, ends the sequence as a `repeat` with no
    calls (where a block may hold several, right after the call object, before the block's closing); the one
    reader leaves it out too, so guide and reader still read the same calls. SmolLM2 wrote one required BFCL call
    until max_tokens."""
    policy = _policy(bytelevel_vocab, name, choice)
    repeated = calls[again % len(calls)]
    shapes = [s & ~1 for s in shapes]  # objects in turn, not a Llama list
    if choice == "required":  # the answer starts with the forced trigger
        shapes[0] = 0
    text = _written(name, [*calls, repeated], shapes)
    if choice == "required":
        text = text.removeprefix("Let me see.\n")
    tokens = _encode(bytelevel_vocab, text)
    events = []
    taken = 0
    while taken < len(tokens) and not policy.done:
        event = policy.accept_token(tokens[taken])
        events += [event] if event is not None else []
        taken += 1
    assert text[len(_spelled(bytelevel_vocab, tokens[:taken])):].strip() in ("", "</tool_call>", "```"), text
    assert policy.done and events[-1].repeat and not events[-1].calls, text
    assert _pairs([c for e in events for c in e.calls]) == calls
    assert _pairs(read_calls(text, _syntax(name)).calls) == calls


@pytest.mark.parametrize("choice", ["auto", "required"])
@settings(max_examples=30)
@given(calls=calls_st, again=st.integers(0, 2), sep=st.sampled_from([",\n", "\n", ", "]),
       fence=st.booleans(), split=st.booleans())
def test_a_call_object_that_repeats_one_ends_the_block_there(bytelevel_vocab: Vocabulary, choice: str,
                                                             calls: list[tuple[str, dict[str, Any]]], again: int,
                                                             sep: str, fence: bool, split: bool) -> None:
    """In a block of several calls, the call object that repeats one of the block's or of an earlier block's ends
    the sequence right after it (only EOS may follow), the block left open; guide and reader read the distinct
    calls. Qwen2.5-Coder wrote one call over and over in a fence until max_tokens (BFCL parallel_multiple_63)."""
    vocab = bytelevel_vocab
    policy = _policy(vocab, "hermes", choice)
    opening, closing = ("```json\n", "\n```") if fence else ("<tool_call>\n", "\n</tool_call>")
    objects = [json.dumps({"name": t, "arguments": a}) for t, a in [*calls, calls[again % len(calls)]]]
    if split and len(calls) > 1:  # the first call in a block of its own, the rest and the repeat in the next
        text = f"{opening}{objects[0]}{closing}\n{opening}{sep.join(objects[1:])}"
    else:
        text = opening + sep.join(objects)
    tokens = _encode(vocab, text)
    events = policy.accept_tokens(tokens)
    assert policy.done and _allowed(policy, vocab).tolist() == sorted(vocab.eos_ids), text
    assert _pairs([c for e in events for c in e.calls]) == calls
    assert _pairs(read_calls(text, _syntax("hermes")).calls) == calls
    policy.rollback(1)  # the last token undone: the block is open again
    assert not policy.done and policy.mode is Mode.TOOL


@settings(max_examples=60)
@given(calls=calls_st, again=st.integers(0, 2), differ=st.booleans())
def test_distinct_blocks_never_show_a_block_they_later_drop(calls: list[tuple[str, dict[str, Any]]], again: int,
                                                            differ: bool) -> None:
    """Streaming over distinct_blocks: at every prefix of a text, the blocks kept are those of the whole text as
    far as written (a repeat is held from its first character, a call that only starts like an earlier one shows
    once it differs), so a stream never announces a call that proves a repeat."""
    tool, args = calls[again % len(calls)]
    last = (tool, {**args, "extra": 1}) if differ else (tool, args)
    text = "\n".join(f"<tool_call>\n{json.dumps({'name': t, 'arguments': a})}\n</tool_call>" for t, a in [*calls, last])
    final = distinct_blocks(call_blocks(text))
    assert len(final) == len(calls) + differ
    for cut in range(len(text) + 1):
        shown = distinct_blocks(call_blocks(text[:cut]))
        assert len(shown) <= len(final)
        assert all(f.json.startswith(s.json) and f.start == s.start for s, f in zip(shown, final, strict=False))


def _spelled(vocab: Vocabulary, tokens: list[int]) -> str:
    names = {i: n.encode() for n, i in vocab.special_ids.items()}
    return b"".join(vocab.token_bytes[t] or names.get(t, b"") for t in tokens if t not in vocab.eos_ids).decode()


def _allowed(policy: Any, vocab: Vocabulary) -> np.ndarray:
    out = np.zeros((1, (vocab.size + 31) // 32), dtype=np.int32)
    policy.fill_bitmask(out, 0)
    return np.flatnonzero(unpack(out[0], vocab.size))


@pytest.mark.parametrize("name", SYNTAXES)
@pytest.mark.parametrize("choice", ["auto", "required"])
def test_guided_walks_parse_with_the_one_reader(bytelevel_vocab: Vocabulary, name: str, choice: str) -> None:
    """Soundness: random walks under the policy (text, triggers and guided tokens drawn at random) end in a text
    whose calls the reader finds exactly as the guide reported them."""
    vocab = bytelevel_vocab
    rng = random.Random(f"{name}-{choice}")
    syntax = _syntax(name)
    words = [vocab.encode(w) for w in (" ok", "\n", " so")]
    openings = [_encode(vocab, t) for t in syntax.openings]
    eos = min(vocab.eos_ids)
    walks = 0
    for _ in range(40):
        policy = _policy(vocab, name, choice)
        tokens: list[int] = []
        for _step in range(400):
            if policy.done:
                break
            between = isinstance(policy, CallsOnly) and policy.mode is Mode.TEXT
            if between or getattr(policy, "mode", Mode.TOOL) is Mode.TEXT:
                pick = rng.random()
                if pick < 0.4:
                    run = rng.choice(openings)
                elif pick < 0.6:
                    run = [eos]
                else:
                    run = rng.choice(words)
                try:
                    policy.accept_tokens(run)
                except TokenRejectedError:
                    if eos not in _allowed(policy, vocab):  # a required answer's opening: only a trigger
                        continue
                    policy.accept_token(eos)
                    tokens.append(eos)
                    break
                tokens += run
                continue
            token = int(rng.choice(list(_allowed(policy, vocab))))
            policy.accept_token(token)
            tokens.append(token)
        if not policy.done:
            continue
        walks += 1
        text = _spelled(vocab, tokens)
        guided = [c for e in policy.events for c in e.calls]
        assert not any(e.error for e in policy.events)
        reading = read_calls(text, syntax, names=name_aliases(TOOLS.names))
        assert _pairs(reading.calls) == _pairs(guided), text
        assert not reading.errors, text
    assert walks >= 20


def test_after_a_call_every_next_call_shape_stays_open(bytelevel_vocab: Vocabulary) -> None:
    """Guidance never removes the start of a next call the syntax allows: after a Hermes call, each of its
    triggers (after a line break too); after a Llama 3.1 object, another object or a list."""
    vocab = bytelevel_vocab
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>'
    for choice in ("auto", "required"):
        for nxt in ("\n<tool_call>", "<tool_call>", "\n```json", '\n{"name": "', '{"name": "'):
            policy = _policy(vocab, "hermes", choice)
            policy.accept_tokens(_encode(vocab, call))
            assert policy.validate_tokens(_encode(vocab, nxt)) == len(_encode(vocab, nxt)), (choice, nxt)
    inside = '<tool_call>\n{"name": "add", "arguments": {"a": 1}}'
    for choice in ("auto", "required"):
        for between in BETWEEN:  # the next call in the same block
            policy = _policy(vocab, "hermes", choice)
            policy.accept_tokens(_encode(vocab, inside))
            nxt = _encode(vocab, between + '{"name": "')
            assert policy.validate_tokens(nxt) == len(nxt), (choice, between)
    for nxt in ('\n{"name": "', '\n[{"name": "'):
        policy = _policy(vocab, "llama31")
        policy.accept_tokens(vocab.encode('{"name": "add", "parameters": {"a": 1}}'))
        assert policy.validate_tokens(vocab.encode(nxt)) == len(vocab.encode(nxt)), nxt
    mistral = _policy(vocab, "mistral", "required")
    mistral.accept_tokens(vocab.encode('[TOOL_CALLS][{"name": "add", "arguments": {"a": 1}}'))
    assert mistral.validate_tokens(vocab.encode(', {"name": "')) == len(vocab.encode(', {"name": "'))


def test_without_parallel_calls_one_call_ends_the_answer(bytelevel_vocab: Vocabulary) -> None:
    compiler = Compiler(bytelevel_vocab)
    for name in SYNTAXES:
        policy = build_policy(compiler, TOOLS, "required", syntax=_syntax(name), parallel=False)
        text = _written(name, [("add", {"a": 1})], [0, 0, 0])
        if name.startswith("hermes"):
            text = text.removeprefix("Let me see.\n")
        [event] = policy.accept_tokens([*_encode(bytelevel_vocab, text), min(bytelevel_vocab.eos_ids)])
        assert _pairs(event.calls) == [("add", {"a": 1})] and policy.done, name


def test_without_parallel_calls_a_block_holds_one_call(bytelevel_vocab: Vocabulary) -> None:
    policy = build_policy(Compiler(bytelevel_vocab), TOOLS, "auto", syntax=chat_syntax("hermes"), parallel=False)
    policy.accept_tokens(_encode(bytelevel_vocab, 'Sure.\n<tool_call>\n{"name": "add", "arguments": {"a": 1}}'))
    for between in BETWEEN:
        nxt = _encode(bytelevel_vocab, between + "{")
        assert policy.validate_tokens(nxt) < len(nxt), between


@pytest.mark.parametrize("name", ["hermes", "hermes-lines"])
def test_a_block_of_several_calls_compiles_to_its_grammar(bytelevel_vocab: Vocabulary, name: str) -> None:
    """The compiler builds a block of several calls from the union of one call, placed in the block as it is
    built (cached per tool group); that is the automaton of the block's grammar (`tools_grammar`), aliases
    included."""
    fmt = plan_calls(TOOLS, "auto", syntax=_syntax(name)).format
    assert several_in_block(fmt) is not None
    built = minimize(Compiler(bytelevel_vocab).compile(TOOLS, fmt, use_cache=False).dfa)
    direct = minimize(compile_dfa(tools_grammar(TOOLS, fmt, decide=KeyLanguage)))
    for a, b in ((built.trans, direct.trans), (built.classes, direct.classes), (built.accepting, direct.accepting)):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_a_block_of_calls_may_end_the_text_unclosed(bytelevel_vocab: Vocabulary, choice: str) -> None:
    """After a call in a block of several, EOS may come before the closing (Qwen2.5-Coder, made to call, ended
    its turn right after the JSON, and with only a separator or the closing allowed it went on calling): the
    block's calls are the answer's, for the guide and the reader alike."""
    vocab = bytelevel_vocab
    eos = min(vocab.eos_ids)
    text = '<tool_call>\n{"name": "add", "arguments": {"a": 1}},\n{"name": "add", "arguments": {"a": 2}}'
    policy = _policy(vocab, "hermes", choice)
    events = policy.accept_tokens(_encode(vocab, text))
    assert not events and policy.validate_tokens([eos]) == 1
    [event] = policy.accept_tokens([eos])
    assert _pairs(event.calls) == [("add", {"a": 1}), ("add", {"a": 2})] and policy.done
    assert _pairs(read_calls(text, chat_syntax("hermes")).calls) == _pairs(event.calls)
    assert _pairs(parse_calls(text)) == _pairs(event.calls)


def test_a_block_reads_as_its_run_of_calls() -> None:
    fmt = plan_calls(TOOLS, "auto", syntax=chat_syntax("hermes")).format
    two = '{"name": "add", "arguments": {"a": 1}}%s{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}'
    for between in BETWEEN:
        calls = fmt.parse_all(f"<tool_call>\n{two % between}\n</tool_call>")  # type: ignore[attr-defined]
        assert _pairs(calls) == [("add", {"a": 1}), ("get_weather", {"city": "Oslo", "days": 2})]
    for bad in (two % "; ", two % ",\n"[:1] + "x", '{"name": "add", "arguments": {"a": 1}'):
        with pytest.raises(CallParseError):
            fmt.parse_all(f"<tool_call>\n{bad}\n</tool_call>")  # type: ignore[attr-defined]


def test_a_named_tool_choice_is_one_call_of_that_tool(bytelevel_vocab: Vocabulary) -> None:
    policy = build_policy(Compiler(bytelevel_vocab), TOOLS, {"type": "function", "function": {"name": "add"}},
                          syntax=chat_syntax("hermes"))
    assert isinstance(policy, CallsOnly) and policy.grammar.tools is not None
    assert policy.grammar.tools.names == ("add",) and policy.max_calls == 1 and policy.after_call == "stop"


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "add"}}])
def test_a_required_call_opens_in_any_shape_the_syntax_has(bytelevel_vocab: Vocabulary, choice: Any) -> None:
    """A required answer is calls only, but the model picks the opening: a `<tool_call>` tag, a ```json fence or
    a bare object (Qwen2.5-Coder writes its parallel calls in one fence); text and EOS may not come first."""
    vocab = bytelevel_vocab
    eos = min(vocab.eos_ids)
    call = '{"name": "add", "arguments": {"a": 1, "b": true}}'
    for opening, closing in (("<tool_call>\n", "\n</tool_call>"), ("```json\n", "\n```"), ("", "")):
        policy = build_policy(Compiler(vocab), TOOLS, choice, syntax=chat_syntax("hermes"))
        assert policy.forced() == [] and eos not in _allowed(policy, vocab)
        assert policy.validate_tokens(vocab.encode("Sure")) == 0
        spelled = vocab.encode("<tool_call>")  # the control token's name as text opens no call: not allowed
        assert policy.validate_tokens(spelled) < len(spelled)
        events = policy.accept_tokens([*_encode(vocab, opening + call + closing), eos])
        assert [c.name for e in events for c in e.calls] == ["add"] and policy.done, opening


def test_the_answer_mode_bans_every_call_shape(bytelevel_vocab: Vocabulary) -> None:
    """After tool results, the answer mode lets the model write text but no call in any shape, also one no
    trigger opens (`{"name": 'get_weather'`)."""
    vocab = bytelevel_vocab
    policy = _policy(vocab, "hermes", "answer")
    assert isinstance(policy, CallController) and policy.tool_choice == "none"
    assert policy.validate_tokens(vocab.encode("It is sunny in Paris.")) == len(vocab.encode("It is sunny in Paris."))
    for text in ("<tool_call>", "```json", '{"name": "add"', "{'name': 'add'", *ANSWER_BANS):
        tokens = _encode(vocab, "Sure: " + text)
        assert policy.validate_tokens(tokens) < len(tokens), text
    eos = min(vocab.eos_ids)
    assert policy.validate_tokens([eos]) == 0 and policy.validate_tokens([*vocab.encode(" \n"), eos]) == 2
    policy.accept_tokens(vocab.encode(" It"))
    assert policy.validate_tokens([eos]) == 1, "the answer may end once it holds text"
    policy.rollback(len(vocab.encode(" It")))
    assert policy.validate_tokens([eos]) == 0
    python = _policy(vocab, "python", "answer")
    assert isinstance(python, FreeController)


def test_the_reader_reads_every_shape() -> None:
    hermes = CHAT_SYNTAXES["hermes"]
    text = ('Sure. <tool_call>\n{"name": "a", "arguments": {"x": "</tool_call>"}}\n</tool_call>\n'
            '{"name": "b", "parameters": {}}, [{"name": "c", "arguments": {}}, {"name": "d", "arguments": "{}"}]\n'
            '```json\n{\n  "name": "e",\n  "arguments": {}\n}\n```\n[TOOL_CALLS][{"name": "f", "arguments": {}}]')
    reading = read_calls(text, hermes, names={"e": "echo"})
    assert [c.name for c in reading.calls] == ["a", "b", "c", "d", "echo", "f"] and not reading.errors
    assert reading.content == "Sure." and reading.calls[0].arguments == {"x": "</tool_call>"}
    cut = read_calls('Hi <tool_call>\n{"name": "a", "arguments": {"x": "y', hermes)
    assert not cut.calls and not cut.errors and cut.content == "Hi"
    prose = read_calls('A set {1, 2} and {"a": 1} and {"name"} end', hermes)
    assert not prose.calls and prose.content.startswith("A set")
    python = read_calls('[f(a=1), g(b="x")]', CHAT_SYNTAXES["python"])
    assert _pairs(python.calls) == [("f", {"a": 1}), ("g", {"b": "x"})]
