"""The on-disk prefix store (transformers payloads): same tokens with and without it, bad files ignored and
rewritten, bounded size. The llama.cpp payload's tests are in test_llamacpp.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tooldec.agents.toolken import toolken_prompt
from tooldec.backends.prefix_store import (
    PrefixStore,
    TorchPrefixes,
    model_fingerprint,
    prefix_kind,
    stable_prefix,
)
from tooldec.compiler import Compiler
from tooldec.decoding import CallController, SamplingParams
from tooldec.decoding.decoder import Decoder
from tooldec.specs import ToolSet, ToolSpec

TOOLS = ToolSet(
    [
        ToolSpec("get_weather", "", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        ToolSpec("add", "", {"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]}),
    ]
)
HEAD = "You may call tools. Here are some examples of calls and answers, the same for every question.\n"


def _prompts(vocab):  # type: ignore[no-untyped-def]
    return [vocab.encode(HEAD + q) for q in ("Q: first", "Q: a second question", "Q: 3")]


def _generate(model, vocab, prompts, prefix=None):  # type: ignore[no-untyped-def]
    grammar = Compiler(vocab).compile(TOOLS, "hermes")
    params = SamplingParams(temperature=1.0, seed=3)
    gens = Decoder(model, vocab).generate(
        prompts, [CallController(grammar) for _ in prompts], params, prefix=prefix, max_new_tokens=120
    )
    return gens


def test_stored_prefix_gives_the_same_tokens(bytelevel_vocab, tiny_llama, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    vocab = bytelevel_vocab
    model = tiny_llama(vocab.size, seed=1)
    prompts = _prompts(vocab)
    head = stable_prefix(vocab.encode, lambda q: HEAD + q)
    plain = _generate(model, vocab, prompts)
    built, hit = PrefixStore(tmp_path).get(TorchPrefixes(model), head)
    assert not hit and len(list(tmp_path.iterdir())) == 1
    loaded, hit = PrefixStore(tmp_path).get(TorchPrefixes(model), head)  # a new store: read from disk
    assert hit and loaded.tokens == built.tokens
    for (k1, v1), (k2, v2) in zip(built.layers, loaded.layers, strict=True):
        assert torch.equal(k1, k2) and torch.equal(v1, v2)
    first, second = _generate(model, vocab, prompts, built), _generate(model, vocab, prompts, loaded)
    assert [g.tokens for g in first] == [g.tokens for g in second] == [g.tokens for g in plain]
    assert all(g.prefix_tokens >= len(head) - 1 > 10 for g in second)


def test_stable_prefix_is_a_token_prefix_of_every_prompt() -> None:
    def encode(text: str) -> list[int]:  # a tokenizer that never merges
        return [ord(c) for c in text]

    names = ["add", "multiply"]
    head = stable_prefix(encode, lambda q: toolken_prompt(q, names))
    for question in ("What is 3.14 times 123?", "Q"):
        assert encode(toolken_prompt(question, names))[: len(head)] == head
    assert toolken_prompt("x", names).startswith("".join(map(chr, head)) + " ")  # all but the merged end


def test_bad_or_foreign_files_are_ignored_and_rewritten(bytelevel_vocab, tiny_llama, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    vocab = bytelevel_vocab
    kind = TorchPrefixes(tiny_llama(vocab.size, seed=1))
    head = vocab.encode(HEAD)
    store = PrefixStore(tmp_path)
    key = store.key(kind, head)
    store.path(key).write_bytes(b"not a prefix file")
    _, hit = store.get(kind, head)
    assert not hit and store.load(kind, key, head) is not None  # rewritten, readable
    good = store.path(key).read_bytes()
    other = vocab.encode("another prefix entirely, of other tokens")
    other_key = store.key(kind, other)
    store.path(other_key).write_bytes(good)  # a valid file under the wrong name
    assert store.load(kind, other_key, other) is None and not store.path(other_key).exists()
    store.path(key).write_bytes(good[:-1000])  # truncated
    assert store.get(kind, head)[1] is False and store.path(key).read_bytes() == good
    flipped = bytearray(good)
    flipped[-5000] ^= 0xFF  # one byte of a tensor: still a readable torch file, not the stored numbers
    store.path(key).write_bytes(bytes(flipped))
    assert store.load(kind, key, head) is None and not store.path(key).exists()


def test_the_model_chooses_its_kind_of_payload(tiny_llama) -> None:  # type: ignore[no-untyped-def]
    class Own:
        def prefix_kind(self) -> str:
            return "own kind"

    assert prefix_kind(Own()) == "own kind"
    assert isinstance(prefix_kind(tiny_llama(300, seed=1)), TorchPrefixes)


def test_key_changes_with_model_and_tokens(bytelevel_vocab, tiny_llama, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    vocab = bytelevel_vocab
    a, b = tiny_llama(vocab.size, seed=1), tiny_llama(vocab.size, seed=1, num_attention_heads=2)
    store = PrefixStore(tmp_path)
    head = vocab.encode(HEAD)
    ka, kb = TorchPrefixes(a), TorchPrefixes(b)
    assert model_fingerprint(a) != model_fingerprint(b)
    assert store.key(ka, head) != store.key(kb, head) != store.key(ka, head[:-1])
    assert store.key(ka, head) == PrefixStore(tmp_path).key(TorchPrefixes(a), head)


def test_total_size_is_bounded_oldest_first(bytelevel_vocab, tiny_llama, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    vocab = bytelevel_vocab
    kind = TorchPrefixes(tiny_llama(vocab.size, seed=1))
    texts = [f"prefix number {i} with some words" for i in range(4)]
    first = PrefixStore(tmp_path)
    first.get(kind, vocab.encode(texts[0]))
    size = first.path(first.key(kind, vocab.encode(texts[0]))).stat().st_size
    legacy = tmp_path / "0123.pt"  # a file of the earlier format counts, and goes first
    legacy.write_bytes(b"x" * size)
    os.utime(legacy, ns=(0, 0))
    (tmp_path / "a folder").mkdir()  # not the store's: left alone
    store = PrefixStore(tmp_path, max_bytes=int(2.5 * size))
    for i, text in enumerate(texts[1:], start=1):
        past = store.path(store.key(kind, vocab.encode(texts[i - 1])))
        if past.exists():
            os.utime(past, ns=(i, i))  # make file ages distinct on coarse clocks
        store.get(kind, vocab.encode(text))
    kept = [store.path(store.key(kind, vocab.encode(t))).exists() for t in texts]
    assert kept == [False, False, True, True] and not legacy.exists() and (tmp_path / "a folder").is_dir()
    assert sum(p.stat().st_size for p in tmp_path.iterdir() if p.is_file()) <= store.max_bytes
    tiny = PrefixStore(tmp_path, max_bytes=10)
    assert tiny.get(kind, vocab.encode("too big to keep"))[1] is False
    assert not tiny.path(tiny.key(kind, vocab.encode("too big to keep"))).exists()
