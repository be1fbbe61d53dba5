"""Shared fixtures: small real tokenizers (byte-level BPE and SentencePiece-style BPE) trained on tool-call text."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings

if os.environ.get("TOOLDEC_CORE"):  # the sanitizer tier (tests/sanitize/run.sh): this build of the compiled core
    import importlib.util
    import sys

    _spec = importlib.util.spec_from_file_location("tooldec._core", os.environ["TOOLDEC_CORE"])
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
    sys.modules["tooldec._core"] = _module  # before tooldec imports the installed one

if TYPE_CHECKING:
    from tooldec.vocab import Vocabulary

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

# No per-example deadline: a deadline is a timing assertion, and on a loaded machine it fails tests that are right
# (speed is measured in benchmarks/). CI (.ci/run sets HYPOTHESIS_PROFILE=ci) draws the same examples every run,
# so a red CI run can be reproduced; local runs keep drawing new ones.
settings.register_profile("default", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

SPECIAL_TOKENS = ["</s>", "<|endoftext|>", "<tool_call>"]
"""Special tokens of both fixtures: two EOS names and a tool-call marker."""

CORPUS = [
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    '{"name": "search", "arguments": {"query": "numbers 0123456789", "limit": 10}}',
    '{"name": "add", "arguments": {"a": 12, "b": 345, "c": -6.78e9}}',
    '{"name": "send", "arguments": {"to": "zoë@example.com", "body": "Grüße aus Köln, 東京"}}',
    '[{"id": 1, "ok": true}, {"id": 2, "ok": false}, {"id": 3, "ok": null}]',
    "The quick brown fox jumps over the lazy dog.\nLine two\twith a tab.",
    "hello world, hello there; numbers 2024 and 31415926",
]
"""Inline training text, repeated so that merges like `",` `"}` and digit pairs form."""


def _corpus() -> list[str]:
    """The training corpus, repeated enough for frequent pairs to win merges."""
    return CORPUS * 20


@pytest.fixture(scope="session")
def bytelevel_tokenizer() -> Tokenizer:
    """A GPT-2-style byte-level BPE of a few hundred tokens with `</s>`, `<|endoftext|>`, `<tool_call>`."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=500,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    return tok


@pytest.fixture(scope="session")
def sentencepiece_tokenizer() -> Tokenizer:
    """A Llama/Mistral-style BPE: `▁` for spaces, `<0x00>`…`<0xFF>` byte fallback, `</s>` EOS, `<tool_call>`."""
    metaspace = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.pre_tokenizer = metaspace
    trainer_tok.train_from_iterator(
        _corpus(), trainers.BpeTrainer(vocab_size=400, limit_alphabet=60, show_progress=False)
    )
    trained = json.loads(trainer_tok.to_str())["model"]
    specials = ["<unk>", "<s>", *SPECIAL_TOKENS]
    pieces = specials + [f"<0x{b:02X}>" for b in range(256)]
    pieces += sorted(trained["vocab"], key=trained["vocab"].get)
    merges = [
        tuple(merge) if isinstance(merge, list) else tuple(merge.split(" ")) for merge in trained["merges"]
    ]
    model = models.BPE(
        vocab={piece: i for i, piece in enumerate(pieces)},
        merges=merges,
        unk_token="<unk>",
        fuse_unk=True,
        byte_fallback=True,
    )
    tok = Tokenizer(model)
    tok.pre_tokenizer = metaspace
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in specials])
    return tok


@pytest.fixture(scope="session")
def bytelevel_vocab(bytelevel_tokenizer: Tokenizer) -> Vocabulary:
    """The byte-level fixture as a tooldec Vocabulary."""
    from tooldec.vocab import Vocabulary

    return Vocabulary.from_tokenizers(bytelevel_tokenizer)


@pytest.fixture(scope="session")
def sentencepiece_vocab(sentencepiece_tokenizer: Tokenizer) -> Vocabulary:
    """The SentencePiece-style fixture as a tooldec Vocabulary."""
    from tooldec.vocab import Vocabulary

    return Vocabulary.from_tokenizers(sentencepiece_tokenizer)


@pytest.fixture(scope="session", params=["bytelevel", "sentencepiece"])
def vocab(request: pytest.FixtureRequest) -> Vocabulary:
    """Each real tokenizer family in turn."""
    return request.getfixturevalue(f"{request.param}_vocab")


@pytest.fixture(autouse=True, scope="session")
def _unlimited_int_digits() -> None:
    """Random walks write integers of thousands of digits, past Python's default int parsing limit."""
    import sys

    sys.set_int_max_str_digits(0)


def _build_tiny_llama(vocab_size: int, *, seed: int = 0, num_attention_heads: int = 4, **config: Any) -> Any:
    """A 2-layer Llama with random weights (seeded): the harshest model, built from a config, no download."""
    import torch
    import transformers

    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        **config,
    )
    return transformers.LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="session")
def tiny_llama() -> Callable[..., Any]:
    """Builder of tiny random Llama models: `tiny_llama(vocab_size, seed=0, num_attention_heads=4, **config)`."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return _build_tiny_llama


ARITH = """
start: expr
expr: expr "+" term | term
term: term "*" factor | factor
factor: "(" expr ")" | NUMBER
NUMBER: /[0-9]+/
"""
"""Left-recursive arithmetic in Lark, without spaces: the grammar of the structured-output and vLLM grammar tests."""


ARITH_WS = """
start: expr
expr: expr "+" term | expr "-" term | term
term: term "*" factor | factor
factor: "-" factor | "(" expr ")" | NUMBER
NUMBER: /[0-9]+/
%ignore " "
"""
"""Left-recursive arithmetic with minus and ignored spaces, in Lark: the serve grammar and custom-tool tests'."""


@pytest.fixture(scope="module")
def factory(vocab: Vocabulary) -> Any:
    """The vLLM processor's policy factory over the module's `vocab` fixture, in the Hermes syntax."""
    from tooldec.compiler import Compiler
    from tooldec.integrations.batch import PolicyFactory

    return PolicyFactory(Compiler(vocab), "hermes")


@pytest.fixture(scope="session")
def chatml_llama(tiny_llama: Callable[..., Any]) -> Callable[..., Any]:
    """Builder of the serve tests' model: a tiny random Llama over their ChatML tokenizer (test_serve), `<|im_end|>`
    (EOS) raised by `boost` so that answers end: `chatml_llama(seed, boost, name)` gives a LoadedModel."""
    import torch

    from tooldec.backends.loader import LoadedModel
    from tooldec.vocab import Vocabulary

    def build(seed: int, boost: float, name: str) -> LoadedModel:
        from test_serve import _tokenizer

        hf = _tokenizer()
        vocab = Vocabulary.from_hf(hf)
        model = tiny_llama(vocab.size, seed=seed)
        bias = torch.zeros(vocab.size)
        bias[hf.convert_tokens_to_ids("<|im_end|>")] = boost
        model.lm_head.register_forward_hook(lambda _m, _i, out: out + bias)
        return LoadedModel(model, hf, vocab, name, "test", 0.0)

    return build
