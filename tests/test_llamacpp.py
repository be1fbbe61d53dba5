"""The llama.cpp backend (xllamacpp's prebuilt library), on a tiny GGUF model written here: no download.

The same property as the transformers backend's: under random sampling every finished call is valid, in every
call format. Besides: llama.cpp computes the logits transformers computes from the same weights; a batch of rows
(one `llama_decode`) and the server's continuous batch write what each row writes alone; the warm start
(llama.cpp's sequence state after the prompt prefix, kept by the prefix store) writes exactly the tokens a cold
run writes; a library laid out otherwise than declared is refused with the fix, not crashed into. The real
embedded model (fetched: the slow tier) checks the tokenizer read from its GGUF file and `tooldec run`'s path.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("xllamacpp")
pytest.importorskip("gguf")

from gguf_fixture import write_gguf
from tool_fixtures import TOOLS, check_sampled_calls

from tooldec.backends import llama_api
from tooldec.backends.llama_api import LlamaApi, LlamaApiError
from tooldec.backends.llamacpp import (
    LlamaCppModel,
    LlamaPrefix,
    LlamaPrefixes,
    check_vocabulary,
    gguf_tokenizer,
    gguf_vocabulary,
    load_llamacpp,
)
from tooldec.backends.llamacpp_batch import LlamaBatch
from tooldec.backends.loader import LoadedModel, ModelLoadError, choose_backend, gguf_key
from tooldec.backends.prefix_store import PrefixStore, prefix_kind, stable_prefix
from tooldec.decoding import CallController, SamplingParams
from tooldec.decoding.decoder import Decoder
from tooldec.grammar.calls import FORMATS


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, bytelevel_tokenizer, bytelevel_vocab, tiny_llama) -> tuple[Any, Path]:  # type: ignore[no-untyped-def]
    """The tiny random Llama and its GGUF file."""
    model = tiny_llama(bytelevel_vocab.size, seed=2)
    path = write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", model, bytelevel_tokenizer)
    return model, path


@pytest.fixture(scope="module")
def lm(tiny, bytelevel_tokenizer) -> LoadedModel:  # type: ignore[no-untyped-def]
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=bytelevel_tokenizer, eos_token="</s>")
    return load_llamacpp(tiny[1], threads=1, n_ctx=4096, sequences=4, tokenizer=tokenizer)


def test_logits_are_those_transformers_computes(tiny, lm: LoadedModel) -> None:  # type: ignore[no-untyped-def]
    model, _ = tiny
    context = lm.model.context
    prompts = [lm.vocab.encode('{"name": "get_weather", "arguments": {"city": "Paris"}}'), lm.vocab.encode("hi")]
    with torch.no_grad():
        want = [model(torch.tensor([p])).logits[0, -1].numpy() for p in prompts]
    context.clear()
    together = context.decode([(0, 0, prompts[0]), (1, 0, prompts[1])]).copy()
    for row, expected in enumerate(want):
        np.testing.assert_allclose(together[row], expected, atol=2e-3)  # llama.cpp keeps its KV cache in f16
        context.clear()
        np.testing.assert_allclose(context.decode([(0, 0, prompts[row])])[0], expected, atol=2e-3)


def test_decode_continues_sequences_and_splits_long_batches(tiny, lm: LoadedModel) -> None:  # type: ignore[no-untyped-def]
    model, _ = tiny
    context = lm.model.context
    tokens = lm.vocab.encode("The quick brown fox jumps over the lazy dog. " * 60)
    assert len(tokens) > context.n_batch  # past one llama_decode: run in parts
    with torch.no_grad():
        want = model(torch.tensor([tokens])).logits[0, -1].numpy()
    context.clear()
    context.decode([(0, 0, tokens[:10])])
    np.testing.assert_allclose(context.decode([(0, 10, tokens[10:])])[0], want, atol=2e-3)
    assert context.last_position(0) == len(tokens) - 1
    with pytest.raises(ValueError, match="at least one new token"):
        context.decode([(0, len(tokens), [])])
    with pytest.raises(ValueError, match="sequence 9"):
        context.decode([(9, 0, tokens[:2])])


def test_the_gguf_vocabulary_matches_the_tokenizer(lm: LoadedModel) -> None:
    pieces = lm.model.context.token_pieces()
    check_vocabulary(pieces, lm.vocab)
    assert lm.vocab.token_bytes[5] == pieces[5]
    wrong = list(pieces)
    wrong[300] = wrong[300] + b"!"
    with pytest.raises(ModelLoadError, match="1 tokens differ"):
        check_vocabulary(wrong, lm.vocab)
    pieces[200] = b""  # a token the file holds no text for (Qwen's padding rows) is never allowed
    vocab = gguf_vocabulary(pieces, lm.tokenizer)
    assert vocab.token_bytes[200] is None and lm.vocab.token_bytes[200]
    assert vocab.token_bytes[201] == lm.vocab.token_bytes[201]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_sampled_calls_are_always_valid(lm: LoadedModel, fmt: str) -> None:
    check_sampled_calls(lm.model, lm.vocab, fmt, seeds=2)


def test_a_batch_writes_what_each_row_writes_alone(lm: LoadedModel) -> None:
    grammar = lm.compiler.compile(TOOLS, "hermes")
    decoder = Decoder(lm.model, lm.vocab)
    prompts = [lm.vocab.encode(q) for q in ("a", "a longer prompt with more tokens in it", "b c")]
    params = SamplingParams(temperature=1.0, seed=4)
    batch = decoder.generate(prompts, [CallController(grammar) for _ in prompts], params, max_new_tokens=300)
    for i, (prompt, together) in enumerate(zip(prompts, batch, strict=True)):
        alone = decoder.generate([prompt], [CallController(grammar)], SamplingParams(temperature=1.0, seed=4 + i), max_new_tokens=300)[0]
        assert alone.tokens == together.tokens
    with pytest.raises(ModelLoadError, match="4 sequences"):
        decoder.generate([prompts[0]] * 5, [CallController(grammar) for _ in range(5)])


def test_the_logits_are_llama_cpps_buffer(lm: LoadedModel) -> None:
    """The mask is applied where llama.cpp wrote the logits: no copy when every row added tokens."""
    from tooldec.decoding.sampling import apply_token_bitmask_inplace

    context = lm.model.context
    out = lm.model(input_ids=torch.tensor([[5, 6, 7], [8, 9, 10]]), past_key_values=None)
    logits = out.logits[:, -1, :]
    assert logits.data_ptr() == context.api.llama_get_logits(context.ctx) and logits.shape == (2, lm.vocab.size)
    mask = np.zeros((2, (lm.vocab.size + 31) // 32), dtype=np.int32)
    mask[:, 0] = 1 << 5  # token 5 only
    apply_token_bitmask_inplace(logits, mask)
    buffer = np.ctypeslib.as_array(
        ctypes.cast(context.api.llama_get_logits(context.ctx), ctypes.POINTER(ctypes.c_float)), shape=(2, lm.vocab.size)
    )
    assert np.isfinite(buffer[:, 5]).all() and np.isneginf(np.delete(buffer, 5, axis=1)).all()


@pytest.mark.parametrize("kv_split", [False, True], ids=["unified", "split"])
def test_continuous_batch_rows_write_what_they_write_alone(lm: LoadedModel, tiny, kv_split: bool) -> None:  # type: ignore[no-untyped-def]
    """Rows joining and leaving, kept prompts taken by later rows (shared cells, or copied streams with
    `kv_split`): each row writes what it writes alone."""
    grammar = lm.compiler.compile(TOOLS, "hermes")
    served = load_llamacpp(tiny[1], threads=1, n_ctx=8192, sequences=5 + 2, tokenizer=lm.tokenizer, kv_split=kv_split)
    decoder = Decoder(served.model, lm.vocab)
    enc = lm.vocab.encode
    head = enc("You may call tools. Here are some examples of calls and answers, always the same.")
    greedy = SamplingParams()
    schedule = {
        0: [
            (enc("a"), greedy, 300),
            (head + enc(" b c"), SamplingParams(temperature=1.0, seed=3), 300),
            (head + enc(" d e f"), greedy, 300),  # joins with the one above: their head runs once
        ],
        2: [(head + enc(" a longer question with more tokens"), greedy, 300)],  # reuses a kept prompt
        4: [(enc("x"), greedy, 12)],  # a short budget: it leaves early ("length")
    }
    batch = LlamaBatch(decoder, prefixes=2, min_prefix=8)
    rows, step = [], 0
    while len(batch) or any(s >= step for s in schedule):
        for prompt, params, limit in schedule.get(step, []):
            rows.append(batch.add(prompt, CallController(grammar), params, max_new_tokens=limit))
        batch.step()
        step += 1
        assert step < 400
    flat = [item for s in sorted(schedule) for item in schedule[s]]
    for row, (prompt, params, limit) in zip(rows, flat, strict=True):
        alone = decoder.generate([prompt], [CallController(grammar)], params, max_new_tokens=limit)[0]
        assert row.finished and row.error is None
        assert (row.gen.tokens, row.gen.finish_reason) == (alone.tokens, alone.finish_reason)
    assert [r.gen.prefix_tokens >= len(head) for r in rows] == [False, True, True, True, False]
    assert rows[4].gen.finish_reason == "length"


HEAD = (
    "You answer questions with tools. The examples below are the same for every question.\n"
    "Q: weather in Rome? A: get_weather(city=Rome)\nQ: 2 plus 3? A: add(2, 3)\n"
)


@pytest.mark.parametrize("kv_split", [False, True], ids=["unified", "split"])
def test_a_unified_context_keeps_no_more_prompts_than_rows_run(lm: LoadedModel, tiny, kv_split: bool) -> None:  # type: ignore[no-untyped-def]
    """Every row's attention reads every used cell of a unified context, kept prompts' too, so one client's rows
    one after another keep only the last prompt (and still take the start they share from it); rows running
    together keep theirs; streams of their own (`kv_split`) keep up to `prefixes`."""
    grammar = lm.compiler.compile(TOOLS, "hermes")
    served = load_llamacpp(tiny[1], threads=1, n_ctx=8192, sequences=8, tokenizer=lm.tokenizer, kv_split=kv_split)
    batch = LlamaBatch(Decoder(served.model, lm.vocab), prefixes=4, min_prefix=8)
    enc = lm.vocab.encode
    head = enc("You may call tools. Here are some examples of calls and answers, always the same.")
    for i, question in enumerate([" Q: one?", " Q: the second?", " Q: three, the last?"]):
        row = batch.add(head + enc(question), CallController(grammar), max_new_tokens=8)
        while len(batch):
            batch.step()
        assert row.gen.prefix_tokens >= (len(head) if i else 0)
        assert len(batch._prefixes) == (1 if not kv_split else i + 1)
        assert tuple(row.prompt) in batch._prefixes
    rows = [batch.add(head + enc(f" Q: together {n}?"), CallController(grammar), max_new_tokens=8) for n in range(3)]
    batch.step()
    assert len(batch._prefixes) >= 3 and all(tuple(r.prompt) in batch._prefixes for r in rows)
    while len(batch):
        batch.step()


def _render(question: str) -> str:
    return f"{HEAD}Q: {question} A:"


def _greedy(lm: LoadedModel, prompts: list[list[int]], prefix: LlamaPrefix | None) -> list[list[int]]:
    grammar = lm.compiler.compile(TOOLS, "json")
    decoder = Decoder(lm.model, lm.vocab)
    single = [decoder.generate([p], [CallController(grammar)], max_new_tokens=40, prefix=prefix)[0] for p in prompts]
    batch = decoder.generate(prompts, [CallController(grammar) for _ in prompts], max_new_tokens=40, prefix=prefix)
    assert [g.tokens for g in batch] == [g.tokens for g in single]
    return [g.tokens for g in single]


def test_stored_prefix_writes_the_same_tokens(lm: LoadedModel, tmp_path: Path) -> None:
    head = stable_prefix(lm.vocab.encode, _render)
    prompts = [lm.vocab.encode(_render(q)) for q in ("weather in Oslo?", "What is 3.14 times 123?")]
    assert all(p[: len(head)] == head for p in prompts)
    plain = _greedy(lm, prompts, None)
    built, hit = PrefixStore(tmp_path).get(prefix_kind(lm.model), head)
    assert not hit and len(list(tmp_path.iterdir())) == 1
    loaded, hit = PrefixStore(tmp_path).get(prefix_kind(lm.model), head)  # a new store: read from disk
    assert hit and isinstance(loaded, LlamaPrefix) and isinstance(built, LlamaPrefix)
    assert loaded.tokens == built.tokens and loaded.state == built.state
    assert _greedy(lm, prompts, built) == _greedy(lm, prompts, loaded) == plain
    assert all(plain)


def test_stale_or_corrupt_states_are_ignored_and_rewritten(lm: LoadedModel, tiny, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import tooldec.backends.llamacpp as backend

    head = lm.vocab.encode(HEAD)
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
    other = load_llamacpp(tiny[1], threads=1, n_ctx=1024, tokenizer=lm.tokenizer)
    assert store.key(LlamaPrefixes(other.model), head) != key  # another context size
    monkeypatch.setattr(backend, "library_version", lambda package: "0.0.1")
    assert store.key(kind, head) != key  # another xllamacpp


def test_a_library_laid_out_otherwise_is_refused_with_the_fix(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    path = LlamaApi.load().path
    monkeypatch.setitem(llama_api._CONTEXT_DEFAULTS, "n_ubatch", 256)  # as if the field had moved
    with pytest.raises(LlamaApiError, match=r"laid out differently.*n_ubatch.*pip install \"xllamacpp==") as err:
        LlamaApi(path)
    assert llama_api.XLLAMACPP_VERSION in str(err.value)
    monkeypatch.setitem(llama_api._SIGNATURES, "llama_not_there", (None, []))
    with pytest.raises(LlamaApiError, match="lacks llama.cpp functions tooldec calls \\(llama_not_there\\)"):
        LlamaApi(path)


def test_a_missing_library_names_the_install(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(llama_api.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(LlamaApiError, match="pip install \"xllamacpp=="):
        llama_api.library_path()
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"GGUF but not really")
    with pytest.raises(ModelLoadError, match="llama.cpp cannot load"):
        load_llamacpp(bad, threads=1, tokenizer=object())


def test_auto_picks_llama_cpp_for_gguf_files_and_embedded_models(tiny, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert choose_backend("auto", str(tiny[1])) == "llamacpp"
    assert choose_backend("auto", None) == "llamacpp"  # the default model is embedded
    assert choose_backend("auto", str(tmp_path)) == "transformers"  # a folder
    assert choose_backend("transformers", str(tiny[1])) == "transformers"
    import tooldec.backends.llamacpp as backend

    monkeypatch.setattr(backend, "available", lambda: False)
    assert choose_backend("auto", None) == "transformers"
    with pytest.raises(ValueError, match="unknown backend"):
        choose_backend("vllm", None)


@pytest.fixture(scope="module")
def smollm2() -> LoadedModel:
    from tooldec.errors import ToolDecError

    try:
        return load_llamacpp("smollm2", threads=1, n_ctx=2048)
    except (ToolDecError, OSError) as exc:
        pytest.skip(f"the embedded SmolLM2 cannot be fetched here: {exc}")


@pytest.mark.slow
def test_the_tokenizer_is_read_from_the_gguf_file_once(smollm2: LoadedModel, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TOOLDEC_CACHE", str(tmp_path))
    path = smollm2.model.context.path
    folder = tmp_path / "tokenizers" / gguf_key(path)
    first = gguf_tokenizer(path)
    assert (folder / "tokenizer.json").is_file() and first.name_or_path != str(folder)
    second = gguf_tokenizer(path)
    assert second.name_or_path == str(folder)
    text = 'Q: What is 3.14 times 123?\nA: <multiply>(3.14,123)=386.22 {"city": "Zürich"} 日本'
    assert second.encode(text) == first.encode(text) == smollm2.tokenizer.encode(text)
    assert second.chat_template == first.chat_template
    pieces = smollm2.model.context.token_pieces()
    assert gguf_vocabulary(pieces, second).token_bytes == smollm2.vocab.token_bytes
    assert sum(b is not None for b in smollm2.vocab.token_bytes) > 49_000


@pytest.mark.slow
def test_run_answers_the_same_from_the_stored_prefix(smollm2: LoadedModel, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`tooldec run`'s path on llama.cpp: the first answer stores the prompt's start, the second reads it."""
    from tooldec.agents.executor import load_executor
    from tooldec.cli import answer, make_agent

    monkeypatch.setenv("TOOLDEC_CACHE", str(tmp_path))
    agent, render = make_agent(smollm2, load_executor(None), "toolken", max_new_tokens=24)
    cold, cold_warm = answer(agent, render, "What is 3.14 times 123?")
    warm, warm_warm = answer(agent, render, "What is 3.14 times 123?")
    assert cold_warm["prefix_tokens"] > 500 and (cold_warm["stored"], warm_warm["stored"]) == (False, True)
    assert len(list((tmp_path / "prefixes").iterdir())) == 1
    assert warm.text == cold.text and warm.tokens == cold.tokens
    assert isinstance(smollm2.model, LlamaCppModel)


def test_llama_states_stay_within_the_bound(lm: LoadedModel, tmp_path: Path) -> None:
    kind = prefix_kind(lm.model)
    heads = [lm.vocab.encode(f"Prefix number {i}: " + HEAD) for i in range(2)]
    store = PrefixStore(tmp_path)
    store.get(kind, heads[0])
    size = store.path(store.key(kind, heads[0])).stat().st_size
    bounded = PrefixStore(tmp_path, max_bytes=int(1.5 * size))
    assert bounded.get(kind, heads[1])[1] is False
    assert [bounded.path(bounded.key(kind, h)).exists() for h in heads] == [False, True]
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= bounded.max_bytes


def test_the_server_on_llama_cpp_returns_only_valid_calls(tiny, bytelevel_tokenizer) -> None:  # type: ignore[no-untyped-def]
    """`tooldec serve --backend llamacpp`'s path: concurrent requests share one context (LlamaBatch), every
    returned call is valid, sampled or greedy, whole or streamed."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    import jsonschema

    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from tooldec.serve import ServeConfig, create_app

    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=bytelevel_tokenizer, eos_token="</s>")
    tokenizer.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}<assistant>"
    served = load_llamacpp(tiny[1], threads=1, n_ctx=8192, sequences=4 + 2, tokenizer=tokenizer)
    weather = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                "days": {"type": "integer", "minimum": 1, "maximum": 14}},
               "required": ["city"]}  # fmt: skip
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": weather}}]
    app = create_app(served, ServeConfig(model_name="tiny", max_batch=4, prefix_cache=2, default_max_tokens=120))

    def ask(seed: int) -> dict[str, Any]:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": tools,
                "tool_choice": "required", "temperature": 1.0, "seed": seed}  # fmt: skip
        response = http.post("/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text
        message: dict[str, Any] = response.json()["choices"][0]["message"]
        return message

    with TestClient(app) as http, ThreadPoolExecutor(6) as pool:
        messages = list(pool.map(ask, range(12)))
        assert isinstance(app.state.engine.batch, LlamaBatch) and app.state.engine.steps > 0
    for message in messages:
        assert message["tool_calls"], message
        for call in message["tool_calls"]:
            assert call["function"]["name"] == "get_weather"
            jsonschema.validate(json.loads(call["function"]["arguments"]), weather)


def test_a_cache_the_model_did_not_return_is_refused(lm: LoadedModel) -> None:
    """The KV cells live in llama.cpp: continuing from any other cache (a stale session, the tensors of
    ContinuousBatch) would silently decode from the wrong state."""
    from tooldec.decoding.kv_cache import GrowingCache

    first = lm.model(input_ids=torch.tensor([[5, 6]]), past_key_values=GrowingCache()).past_key_values
    lm.model(input_ids=torch.tensor([[7]]), past_key_values=first)  # its own session goes on
    lm.model(input_ids=torch.tensor([[5, 6]]), past_key_values=None)  # a new one starts
    with pytest.raises(ValueError, match="keeps its KV cache itself"):
        lm.model(input_ids=torch.tensor([[7]]), past_key_values=first)
    with pytest.raises(ValueError, match="keeps its KV cache itself"):
        lm.model(input_ids=torch.tensor([[7]]), past_key_values=GrowingCache([(torch.zeros(1, 2, 3, 4),) * 2]))


def test_prompt_prefix_build_takes_the_llama_route(lm: LoadedModel) -> None:
    """The evaluation's runners build their prefix with PromptPrefix.build: on llama.cpp, a sequence state."""
    from tooldec.decoding.prefix import PromptPrefix

    head = lm.vocab.encode(HEAD)
    prefix = PromptPrefix.build(lm.model, head)
    assert isinstance(prefix, LlamaPrefix) and prefix.tokens == tuple(head)
    prompts = [lm.vocab.encode(_render(q)) for q in ("weather in Oslo?", "2 plus 2?")]
    assert prefix.shared(prompts) > 0
    assert _greedy(lm, prompts, prefix) == _greedy(lm, prompts, None)
    assert _greedy(lm, prompts, prefix.head(10)) == _greedy(lm, prompts, None)


def test_a_cpu_without_avx2_is_refused_before_loading(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The wheel's llama.cpp is compiled for AVX2: loading it elsewhere would kill the process."""
    old = tmp_path / "cpuinfo"
    old.write_text("processor\t: 0\nflags\t\t: fpu sse sse2 avx\n")
    assert llama_api.missing_cpu_features(old) == ["avx2", "fma", "f16c", "bmi2"]
    assert llama_api.missing_cpu_features(tmp_path / "absent") == []
    monkeypatch.setattr(llama_api, "missing_cpu_features", lambda: ["avx2"])
    with pytest.raises(LlamaApiError, match="lacks avx2.*--backend transformers"):
        LlamaApi(LlamaApi.load().path)
