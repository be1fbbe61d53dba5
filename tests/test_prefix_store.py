"""The on-disk prefix store: same tokens with and without it, bad files ignored and rewritten, bounded size."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tooldec.agents.toolken import toolken_prompt
from tooldec.backends.prefix_store import PrefixStore, model_fingerprint, stable_prefix
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
    built, hit = PrefixStore(tmp_path).get(model, head)
    assert not hit and len(list(tmp_path.glob("*.pt"))) == 1
    loaded, hit = PrefixStore(tmp_path).get(model, head)  # a new store: read from disk, not from memory
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
    model = tiny_llama(vocab.size, seed=1)
    head = vocab.encode(HEAD)
    store = PrefixStore(tmp_path)
    key = store.key(model, head)
    store.path(key).write_bytes(b"not a torch file")
    prefix, hit = store.get(model, head)
    assert not hit and store.load(key, head) is not None  # rewritten, readable
    other = vocab.encode("another prefix entirely, of other tokens")
    other_key = store.key(model, other)
    os.replace(store.path(key), store.path(other_key))  # a valid file under the wrong name
    assert store.load(other_key, other) is None and not store.path(other_key).exists()
    truncated = store.save(key, prefix)
    assert truncated is not None
    truncated.write_bytes(truncated.read_bytes()[:1000])
    assert store.get(model, head)[1] is False


def test_key_changes_with_model_and_tokens(bytelevel_vocab, tiny_llama, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    vocab = bytelevel_vocab
    a, b = tiny_llama(vocab.size, seed=1), tiny_llama(vocab.size, seed=1, num_attention_heads=2)
    store = PrefixStore(tmp_path)
    head = vocab.encode(HEAD)
    assert model_fingerprint(a) != model_fingerprint(b)
    assert store.key(a, head) != store.key(b, head) != store.key(a, head[:-1])
    assert store.key(a, head) == PrefixStore(tmp_path).key(a, head)


def test_total_size_is_bounded_oldest_first(bytelevel_vocab, tiny_llama, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    vocab = bytelevel_vocab
    model = tiny_llama(vocab.size, seed=1)
    texts = [f"prefix number {i} with some words" for i in range(4)]
    one = PrefixStore(tmp_path).get(model, vocab.encode(texts[0]))[0]
    size = PrefixStore(tmp_path).path(PrefixStore(tmp_path).key(model, one.tokens)).stat().st_size
    store = PrefixStore(tmp_path, max_bytes=int(2.5 * size))
    for i, text in enumerate(texts[1:], start=1):
        past = store.path(store.key(model, vocab.encode(texts[i - 1])))
        if past.exists():
            os.utime(past, ns=(i, i))  # make file ages distinct on coarse clocks
        store.get(model, vocab.encode(text))
    kept = [store.path(store.key(model, vocab.encode(t))).exists() for t in texts]
    assert kept == [False, False, True, True]
    assert PrefixStore(tmp_path, max_bytes=10).get(model, vocab.encode("too big to keep"))[1] is False
    assert not PrefixStore(tmp_path, max_bytes=10).path(store.key(model, vocab.encode("too big to keep"))).exists()
