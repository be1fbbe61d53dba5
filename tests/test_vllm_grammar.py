"""A context-free grammar through tooldec's vLLM payload (`{"tooldec_grammar": text}`), without vLLM: the
payload, its checks (what `validate_params` refuses with a ValueError, so vLLM answers 400), and the persistent
batch guiding grammar rows next to tool rows under random logits. The vLLM tier is in test_vllm.py."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
lark = pytest.importorskip("lark")

from conftest import ARITH
from test_vllm import TOOLS, Params, Update, allowed_text, apply_update, masked, tooled

from tooldec.errors import GrammarError
from tooldec.integrations.batch import (
    GRAMMAR_KEY,
    GRAMMAR_SYNTAX_KEY,
    GrammarRequest,
    PolicyBatch,
    PolicyFactory,
    ToolRequest,
    ToolRequestError,
    check_grammar,
    grammar_payload,
    read_request,
    tool_payload,
)
from tooldec.vocab import Vocabulary

WORDS_GBNF = 'root ::= word (" " word)*\nword ::= "cat" | "dog" | [a-c]+\n'
WORDS_LARK = 'start: word (" " word)*\nword: "cat" | "dog" | /[a-c]+/\n'
"""WORDS_GBNF in Lark, the oracle of its sentences."""


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    """Every single byte, some pieces of sentences, EOS last."""
    pieces = [bytes([b]) for b in range(256)]
    pieces += [b"12", b"+(", b")*", b"cat", b" dog", b"<tool_call>"]
    pieces = list(dict.fromkeys(pieces))
    return Vocabulary.from_bytes([*pieces, None], eos_id=len(pieces))


def test_payload_round_trip() -> None:
    assert grammar_payload(ARITH) == {GRAMMAR_KEY: ARITH}
    assert read_request({**grammar_payload(ARITH), "other": 1}) == GrammarRequest(ARITH, "lark")
    assert read_request(grammar_payload(WORDS_GBNF)) == GrammarRequest(WORDS_GBNF, "gbnf")  # read from the text
    assert read_request(grammar_payload(WORDS_GBNF, "lark")) == GrammarRequest(WORDS_GBNF, "lark")
    assert isinstance(read_request(tool_payload(TOOLS)), ToolRequest)
    assert read_request(None) is None and read_request({"x": "y"}) is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({GRAMMAR_KEY: ["start: 'a'"]}, "must be the grammar's text"),
        ({GRAMMAR_SYNTAX_KEY: "lark"}, "must be the grammar's text"),
        ({GRAMMAR_KEY: ARITH, GRAMMAR_SYNTAX_KEY: "ebnf"}, "unknown grammar syntax 'ebnf'"),
        ({GRAMMAR_KEY: ARITH, **tool_payload(TOOLS)}, "not both"),
    ],
    ids=["not-a-string", "syntax-alone", "unknown-syntax", "with-tools"],
)
def test_bad_payloads_name_the_problem(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolRequestError, match=message) as err:
        read_request(extra)
    assert isinstance(err.value, ValueError)


def test_check_grammar_refuses_a_bad_grammar_with_its_place() -> None:
    check_grammar(ARITH, "lark")
    check_grammar(WORDS_GBNF, "gbnf")
    with pytest.raises(GrammarError) as err:
        check_grammar('start: "a"\nb: (\n', "lark")
    assert isinstance(err.value, ValueError) and err.value.line == 2 and err.value.column is not None
    with pytest.raises(GrammarError, match="line 2"):
        check_grammar('root ::= "a"\nx ::= [a-\n', "gbnf")


def test_a_grammar_row_is_masked_by_its_grammar(factory: PolicyFactory, vocab: Vocabulary) -> None:
    output: list[int] = []
    batch = PolicyBatch(factory)
    apply_update(batch, Update(added=[(0, Params(), [1], []), (1, Params(grammar_payload(ARITH)), [1], output)]))
    mask = masked(batch, 2)
    assert mask[0].all()
    guide = factory.compiler.compile_grammar(ARITH, "lark").guide()
    assert np.flatnonzero(mask[1]).tolist() == guide.allowed_token_ids().tolist()
    assert allowed_text(vocab, mask[1]) >= {b"(", b"7", b"12"} and b"+(" not in allowed_text(vocab, mask[1])
    output += vocab.encode("(12")
    text = allowed_text(vocab, masked(batch, 2)[1])
    assert {b"+(", b")*", b"3"} <= text and None not in text  # no EOS inside the parenthesis
    output += vocab.encode(")")
    assert None in allowed_text(vocab, masked(batch, 2)[1])  # a complete sentence: EOS may come


def test_a_grammar_that_fails_in_the_engine_ends_the_request(factory: PolicyFactory, vocab: Vocabulary) -> None:
    batch = PolicyBatch(factory)
    apply_update(batch, Update(added=[(0, Params(grammar_payload("start: missing")), [1], [])]))
    assert np.flatnonzero(masked(batch, 1)[0]).tolist() == sorted(vocab.eos_ids)


def test_simulated_engine_writes_only_sentences(factory: PolicyFactory, vocab: Vocabulary) -> None:
    """Grammar rows (Lark and GBNF) and tool rows in one batch under random logits: every grammar row that
    ends is a sentence its oracle parses, and no row ends before its sentence is complete."""
    rng = random.Random(3)
    gen = torch.Generator().manual_seed(3)
    eos = min(vocab.eos_ids)
    kinds = [("lark", ARITH), ("gbnf", WORDS_GBNF), ("tools", None)]
    rows = [(kinds[i % 3], []) for i in range(9)]
    batch = PolicyBatch(factory)
    added = []
    for i, ((kind, grammar), out) in enumerate(rows):
        params = tooled("required") if grammar is None else Params(grammar_payload(grammar))
        added.append((i, params, [1], out))
    apply_update(batch, Update(added=added))
    for _ in range(40):
        live = [i for i, (_, out) in enumerate(rows) if not out or out[-1] != eos]
        if not live:
            break
        logits = torch.randn((len(rows), vocab.size), generator=gen) * 3
        logits[:, eos] += rng.choice([0.0, 4.0])
        batch.apply(logits)
        for i in live:
            rows[i][1].append(int(torch.multinomial(torch.softmax(logits[i], dim=-1), 1, generator=gen)))
    oracles = {"lark": lark.Lark(ARITH, parser="earley"), "gbnf": lark.Lark(WORDS_LARK, parser="earley")}
    ended = 0
    for (kind, _), out in rows:
        if kind == "tools" or not out or out[-1] != eos:
            continue
        oracles[kind].parse(b"".join(vocab.token_bytes[t] or b"" for t in out[:-1]).decode())
        ended += 1
    assert ended >= 3
