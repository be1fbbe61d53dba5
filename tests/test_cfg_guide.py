"""The context-free guide end to end: its API (rollback, fork, forced bytes, EOS), its errors, bounded work per
step, the batch fill beside tool-call rows, decoding with a random model (Decoder and the transformers logits
processor) and the grammar CLI. Properties against lark are in tests/test_cfg_properties.py."""

from __future__ import annotations

import json
import random
from pathlib import Path

import lark
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tooldec import _core
from tooldec.automaton.compile import compile_arrays
from tooldec.cfg_guide import CfgGuide, compile_cfg
from tooldec.cli import app
from tooldec.compiler import Compiler
from tooldec.decoding import CallController, SamplingParams, fill_bitmasks
from tooldec.decoding.decoder import Decoder
from tooldec.decoding.logits_processor import ToolDecLogitsProcessor
from tooldec.errors import GrammarError, TokenRejectedError
from tooldec.grammar.cfg import load_grammar
from tooldec.grammar.ir import Bytes, seq
from tooldec.index import PreparedVocab, unpack
from tooldec.sample import random_walk
from tooldec.specs import ToolSpec
from tooldec.vocab import Vocabulary

ARITH = """
start: expr
expr: expr "+" term | expr "-" term | term
term: term "*" factor | factor
factor: "(" expr ")" | NUMBER
NUMBER: /[0-9]+/
%ignore " "
"""
ARITH_GBNF = r"""
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor ("*" factor)*
factor ::= "(" expr ")" | [0-9]+
"""
ARITH_GBNF_AS_LARK = """
start: expr
expr: term (("+" | "-") term)*
term: factor ("*" factor)*
factor: "(" expr ")" | DIGITS
DIGITS: /[0-9]+/
"""
KEYWORDS = """
start: "select " NAME " from " NAME
NAME: /[a-z]+/
"""


def _bytes_vocab() -> Vocabulary:
    """Every single byte a token, plus a few longer ones that cross lexemes, and EOS."""
    tokens: list[bytes | None] = [bytes([b]) for b in range(256)]
    tokens += [b"((", b"))", b"1+", b"+2", b" * (", b"12", b"select", b" from ", b"sel"]
    return Vocabulary.from_bytes([*tokens, None], eos_id=len(tokens))


@pytest.fixture(scope="module")
def byte_vocab() -> Vocabulary:
    return _bytes_vocab()


def _verdicts(guide: CfgGuide, parser: lark.Lark, text: str) -> tuple[bool, bool]:
    """Whether a fork of `guide` takes all of `text` and may end there, and whether lark parses it."""
    g = guide.fork()
    ours = g.accept_bytes(text.encode()) == len(text.encode()) and g.is_accepting()
    try:
        parser.parse(text)
        theirs = True
    except lark.exceptions.LarkError:
        theirs = False
    return ours, theirs


def _mask(guide: CfgGuide, size: int) -> np.ndarray:
    out = np.zeros((1, (size + 31) // 32), dtype=np.int32)
    guide.fill_bitmask(out, 0)
    return unpack(out[0], size)


def test_guide_api_follows_the_text(byte_vocab: Vocabulary) -> None:
    compiled = Compiler(byte_vocab).compile_grammar(ARITH)
    guide = compiled.guide()
    eos = min(byte_vocab.eos_ids)
    assert not guide.is_accepting() and not guide.accepts(eos)
    texts = [guide.text()]
    for token in byte_vocab.encode("(1+2"):
        guide.advance(token)
        texts.append(guide.text())
    assert guide.text() == "(1+2" and not guide.is_accepting()
    allowed = {byte_vocab.token_bytes[t] for t in np.flatnonzero(_mask(guide, byte_vocab.size))}
    assert b")" in allowed and b"))" not in allowed and b"+2" in allowed and b"(" not in allowed
    with pytest.raises(TokenRejectedError):
        guide.advance(byte_vocab.encode("(")[0])
    fork = guide.fork()
    fork.advance(byte_vocab.encode(")")[0])
    assert fork.is_accepting() and not guide.is_accepting()
    fork.advance(eos)
    assert fork.is_finished() and not _mask(fork, byte_vocab.size).any()
    assert fork.result() == "(1+2)"
    guide.rollback(2)
    assert guide.text() == texts[-3] and guide.accepts(guide.vocab.encode(texts[-2][len(texts[-3]):])[0])
    with pytest.raises(ValueError, match="roll back"):
        guide.rollback(5)


def test_forced_bytes_run_up_to_the_first_choice(byte_vocab: Vocabulary) -> None:
    guide = Compiler(byte_vocab).compile_grammar(KEYWORDS).guide()
    assert guide.forced_bytes() == b"select "
    guide.accept_bytes(b"select abc")
    assert guide.forced_bytes() == b""  # the name may go on, or " from " come
    guide.accept_bytes(b" f")
    assert guide.forced_bytes() == b"rom "
    spaced = Compiler(byte_vocab).compile_grammar('start: "a" "b"\n%ignore " "\n').guide()
    assert spaced.forced_bytes() == b""  # ignored spaces may come first


def test_keyword_beats_name_on_the_same_lexeme(byte_vocab: Vocabulary) -> None:
    """A literal wins over a pattern on exactly the same lexeme where the parser allows both (Lark's rule), and
    only where it does: with no keyword allowed, `if` is a NAME (lexing is contextual)."""
    compiled = Compiler(byte_vocab).compile_grammar('start: NAME+\nNAME: /[a-z]+/\nKW: "if"\n%ignore " "\n')
    assert compiled.guide().accept_bytes(b"abc if") == 6
    parser = lark.Lark('start: NAME+ | "if" NAME\nNAME: /[a-z]+/\n%ignore " "\n', parser="lalr")
    guide = Compiler(byte_vocab).compile_grammar('start: NAME+ | "if" NAME\nNAME: /[a-z]+/\n%ignore " "\n').guide()
    for text, ok in (("if x", True), ("x if", True), ("ifx y", True), ("if if", True), ("if", False)):
        assert _verdicts(guide, parser, text) == (ok, ok), text


@pytest.mark.parametrize(
    ("text", "where"),
    [("start: x\n", None), ("start: A\nA: /a(?=b)/\n", None), ('start: "a"\n%declare B\n', 2), ("start: (\n", 1)],
)
def test_bad_grammars_are_refused_with_a_position(byte_vocab: Vocabulary, text: str, where: int | None) -> None:
    with pytest.raises(GrammarError) as info:
        Compiler(byte_vocab).compile_grammar(text)
    if where is not None:
        assert info.value.line == where


def test_a_grammar_whose_language_is_empty_is_refused(byte_vocab: Vocabulary) -> None:
    with pytest.raises(GrammarError, match="empty"):
        Compiler(byte_vocab).compile_grammar('start: a\na: "x" a\n')


def test_ambiguity_past_the_item_bound_is_an_error_not_a_hang(byte_vocab: Vocabulary) -> None:
    grammar = load_grammar('start: a\na: a a | "x"\n', "lark")
    core = compile_cfg(grammar, PreparedVocab(byte_vocab))
    assert _core.CfgMatcher(core).accept_bytes(b"x" * 200) == 200  # ambiguous, within the default bound
    tight = _core.CfgGrammar(
        PreparedVocab(byte_vocab).core,
        [(t[0], t[1], t[2], t[3]) for t in _terminal_tables(grammar)],
        np.zeros(len(grammar.terminals), np.int32), np.zeros(len(grammar.terminals), bool),
        np.array(grammar.ignore, np.int32), len(grammar.nonterminals),
        np.array([r.lhs for r in grammar.rules], np.int32),
        np.cumsum([0] + [len(r.rhs) for r in grammar.rules]).astype(np.int64),
        np.array([s for r in grammar.rules for s in r.rhs], np.int32), grammar.start, max_items=40,
    )
    with pytest.raises(_core.GrammarTooLarge, match="Earley set"):
        _core.CfgMatcher(tight).accept_bytes(b"x" * 200)


def _terminal_tables(grammar: object) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, int]]:
    from tooldec.automaton.compile import compile_dfas

    dfas = compile_dfas([t.node for t in grammar.terminals])  # type: ignore[attr-defined]
    return [(d.trans.astype(np.int32), d.classes, d.accepting, int(d.start)) for d in dfas]


def test_deep_nesting_needs_no_recursion(byte_vocab: Vocabulary) -> None:
    guide = Compiler(byte_vocab).compile_grammar('start: a\na: "[" a? "]"\n').guide()
    depth = 5000
    assert guide.accept_bytes(b"[" * depth) == depth
    assert guide.distance() == depth
    assert guide.accept_bytes(b"]" * depth) == depth and guide.is_accepting()


def test_parser_sets_are_interned_and_shared_by_guides(byte_vocab: Vocabulary) -> None:
    """A repeated structure reaches the same Earley sets again, and a second guide reuses the first one's sets."""
    compiled = Compiler(byte_vocab).compile_grammar('start: item+\nitem: "a" | "(" item+ ")"\n')
    first = compiled.guide()
    assert first.accept_bytes(b"aaaa") == 4
    few = compiled.core.num_sets
    assert first.accept_bytes(b"a" * 500) == 500
    assert compiled.core.num_sets == few
    assert first.accept_bytes(b"((a)(a))" * 3) == 24
    made = compiled.core.num_sets
    second = compiled.guide()
    assert second.accept_bytes(b"aaaa" + b"((a)(a))" * 3) == 28
    assert compiled.core.num_sets == made
    third = compiled.guide()
    assert third.accept_bytes(b"(" * 300) == 300
    assert compiled.core.num_sets >= made + 300  # each depth its own set: nothing merged that differs
    assert third.accept_bytes(b"a" + b")" * 300) == 301 and third.is_accepting()


def test_gbnf_guides_like_its_lark_twin(byte_vocab: Vocabulary) -> None:
    compiled = Compiler(byte_vocab).compile_grammar(ARITH_GBNF, "gbnf")
    parser = lark.Lark(ARITH_GBNF_AS_LARK, parser="earley", lexer="dynamic_complete")
    rng = random.Random(4)
    for _ in range(60):
        guide = random_walk(compiled.guide(), rng, max_tokens=200, steer_after=30)
        parser.parse(guide.text())
    assert compiled.guide().accept_bytes(b"(1+2)*34") == 8


def test_batch_fill_mixes_grammar_and_tool_rows(byte_vocab: Vocabulary) -> None:
    compiler = Compiler(byte_vocab)
    grammar = compiler.compile_grammar(ARITH)
    tools = compiler.compile([ToolSpec("f", "", {"type": "object", "properties": {"x": {"type": "integer"}}})], "json")
    rows: list[object] = []
    for k in range(40):
        if k % 3 == 0:
            rows.append(CallController(tools))
            continue
        guide = grammar.guide()
        guide.accept_bytes(b"(1+2) * (3"[: k % 10])
        rows.append(guide)
    out = np.zeros((len(rows), (byte_vocab.size + 31) // 32), np.int32)
    fill_bitmasks(rows, out, threads=2)  # type: ignore[arg-type]
    for k, row in enumerate(rows):
        one = np.zeros((1, out.shape[1]), np.int32)
        row.fill_bitmask(one, 0)  # type: ignore[attr-defined]
        assert (one[0] == out[k]).all()
    with pytest.raises(ValueError, match="width"):
        fill_bitmasks(rows[1:2], np.zeros((1, 3), np.int32))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def model(vocab, tiny_llama) -> object:  # type: ignore[no-untyped-def]
    return tiny_llama(vocab.size)


def test_random_model_writes_sentences_of_the_grammar(vocab, model) -> None:  # type: ignore[no-untyped-def]
    compiled = Compiler(vocab).compile_grammar(ARITH)
    parser = lark.Lark(ARITH, parser="lalr")
    decoder = Decoder(model, vocab)
    ended = 0
    for seed in range(3):
        gens = decoder.generate([vocab.encode("q"), vocab.encode("x")], [CallController(compiled) for _ in "ab"],
                                SamplingParams(temperature=1.0, seed=seed), max_new_tokens=60)
        for gen in gens:
            if gen.finish_reason == "stop":
                assert len(gen.events) == 1 and gen.events[0].calls == [gen.events[0].text]
                parser.parse(gen.events[0].text)
                ended += 1
            else:
                assert compiled.guide().accept_bytes(gen.text.encode()) == len(gen.text.encode())
    torch.manual_seed(0)
    ctrl = CallController(compiled)
    prompt = torch.tensor([vocab.encode("q:")])
    eos = min(vocab.eos_ids)
    out = model.generate(  # type: ignore[attr-defined]
        prompt, attention_mask=torch.ones_like(prompt), logits_processor=[ToolDecLogitsProcessor([ctrl])],
        do_sample=True, max_new_tokens=60, eos_token_id=eos, pad_token_id=eos,
    )
    text = vocab.decode(t for t in out[0, prompt.shape[1]:].tolist() if t not in vocab.eos_ids).decode()
    if out[0, -1].item() == eos:
        parser.parse(text)
    else:  # cut by max_new_tokens: still a prefix the guide accepts
        assert compiled.guide().accept_bytes(text.encode()) == len(text.encode())


def test_cli_samples_and_checks_grammars(tmp_path: Path) -> None:
    grammar = tmp_path / "arith.lark"
    grammar.write_text(ARITH)
    runner = CliRunner()
    got = runner.invoke(app, ["sample", "--grammar", str(grammar), "-n", "5", "--seed", "3", "--json",
                              "--max-tokens", "400"])
    assert got.exit_code == 0, got.output
    parser = lark.Lark(ARITH, parser="lalr")
    lines = [json.loads(line) for line in got.stdout.splitlines()]
    assert len(lines) == 5
    for line in lines:
        assert line["value"] == line["text"] and line["tokens"] >= len(line["text"].encode())  # bytes, then EOS
        parser.parse(line["text"])
    good, bad = tmp_path / "good.txt", tmp_path / "bad.txt"
    good.write_text("(1 + 2) * 3")
    bad.write_text("(1 + 2 * 3\n+ )")
    tok = tmp_path / "tok"
    _tokenizer_folder(tok)
    ok = runner.invoke(app, ["check-grammar", str(grammar), str(good), "--tokenizer", str(tok)])
    assert ok.exit_code == 0 and "accepted" in ok.stdout
    no = runner.invoke(app, ["check-grammar", str(grammar), str(good), str(bad), "--tokenizer", str(tok)])
    assert no.exit_code == 1 and "rejected at line 1, column 11" in no.stdout  # the newline: only " " is ignored
    broken = tmp_path / "broken.lark"
    broken.write_text("start: (\n")
    assert runner.invoke(app, ["check-grammar", str(broken), str(good), "--tokenizer", str(tok)]).exit_code == 2
    assert runner.invoke(app, ["sample", "--grammar", str(tmp_path / "x.txt")]).exit_code == 2


def _tokenizer_folder(folder: Path) -> None:
    """A byte-level tokenizer.json in `folder` (the CLI reads tokenizers from files)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    folder.mkdir()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab["</s>"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))


def test_common_escaped_string_lexes_as_lark_cuts_it(byte_vocab: Vocabulary) -> None:
    """common.ESCAPED_STRING is a lazy pattern with a lookbehind: its lexemes (a quote, escapes, the first quote
    after an even run of backslashes) are what the guide takes, as lark does."""
    text = 'start: ESCAPED_STRING ("," ESCAPED_STRING)*\n%import common.ESCAPED_STRING\n'
    guide = Compiler(byte_vocab).compile_grammar(text).guide()
    parser = lark.Lark(text, parser="lalr")
    rng = random.Random(7)
    for _ in range(400):
        sample = ",".join('"' + "".join(rng.choice('ab\\"') for _ in range(rng.randint(0, 5))) + '"'
                          for _ in range(rng.randint(1, 3)))
        ours, theirs = _verdicts(guide, parser, sample)
        assert ours == theirs, sample


def test_regex_and_choice_guide_a_whole_text(byte_vocab: Vocabulary) -> None:
    import re

    compiler = Compiler(byte_vocab)
    rng = random.Random(3)
    pattern = r"(?:[0-9]{1,3}\.){3}[0-9]{1,3}|[a-z]+@[a-z]+\.(?:com|org)"
    regex = compiler.compile_regex(pattern)
    for _ in range(40):
        text = random_walk(regex.guide(), rng, max_tokens=400, steer_after=40).text()
        assert re.fullmatch(pattern, text), text
    assert compiler.compile_regex("a*").guide().is_accepting()  # the empty text matches
    options = ["yes", "no", "not sure", "no"]
    choice = compiler.compile_choice(options)
    assert {random_walk(choice.guide(), rng).text() for _ in range(60)} == set(options)
    with pytest.raises(GrammarError, match="lookaround"):
        compiler.compile_regex("(?<=a)b")
    with pytest.raises(GrammarError, match="at least one"):
        compiler.compile_choice([])


_MASKS = st.one_of(st.integers(0, 255).map(lambda b: 1 << b), st.integers(0, (1 << 256) - 1),
                   st.integers(0x61, 0x7A).map(lambda b: (1 << b) | (1 << (b - 32))))


@settings(max_examples=300, deadline=None)
@given(st.lists(_MASKS, min_size=1, max_size=8))
def test_a_chain_of_byte_sets_compiles_as_its_ir_does(masks: list[int]) -> None:
    """Terminals that are a sequence of byte sets (literals, one character) reach the core as chain rows, whose
    DFA must be the one the NFA path builds from the same IR, array for array."""
    items = [Bytes(m) for m in masks]
    ref = compile_arrays([seq(*items) if len(items) > 1 else items[0]])[0]
    got = _core.chain_dfa(b"".join(m.to_bytes(32, "little") for m in masks))
    assert [np.asarray(a).tolist() for a in got[:3]] == [np.asarray(a).tolist() for a in ref[:3]]
    assert got[3] == ref[3]
