"""Decoding with a tiny random model: every guided call is valid, in every format, batch or not.

Random weights are the harshest model: unguided they never write a valid call; guided they always must.
"""

from __future__ import annotations

import json
import re

import jsonschema
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tooldec.compiler import Compiler
from tooldec.decoding import CallController, FreeController, SamplingParams, Trigger
from tooldec.decoding.decoder import Decoder
from tooldec.decoding.jump_forward import ForcedText, complete_utf8
from tooldec.decoding.kv_cache import GrowingCache
from tooldec.decoding.logits_processor import ToolDecLogitsProcessor
from tooldec.decoding.prefix import PromptPrefix
from tooldec.decoding.sampling import sample_token
from tooldec.grammar.calls import FORMATS
from tooldec.specs import ToolSet, ToolSpec
from tooldec.toolsets import funcqa_tools

WEATHER = ToolSpec(
    "get_weather",
    "Weather in a city.",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12},
            "unit": {"enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "detailed": {"type": "boolean"},
        },
        "required": ["city"],
    },
)
TOOLS = ToolSet([*funcqa_tools(), WEATHER])


@pytest.fixture(scope="module")
def model(vocab, tiny_llama) -> object:  # type: ignore[no-untyped-def]
    return tiny_llama(vocab.size)


def check_call(call, tools: ToolSet = TOOLS) -> None:  # type: ignore[no-untyped-def]
    """The call names a tool and its arguments validate against that tool's schema."""
    assert call.name in tools
    tool = tools[call.name]
    jsonschema.validate(call.bind(tool), tool.parameters)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_random_model_always_writes_valid_calls(vocab, model, fmt: str) -> None:  # type: ignore[no-untyped-def]
    grammar = Compiler(vocab).compile(TOOLS, fmt)
    decoder = Decoder(model, vocab)
    prompts = [vocab.encode("call a tool:"), vocab.encode("hello"), vocab.encode("x")]
    for seed in range(4):
        controllers = [CallController(grammar) for _ in prompts]
        gens = decoder.generate(prompts, controllers, SamplingParams(temperature=1.0, seed=seed), max_new_tokens=400)
        for gen in gens:
            assert gen.finish_reason == "stop", gen.text
            assert len(gen.events) == 1 and gen.events[0].error is None
            for call in gen.events[0].calls:
                check_call(call)


def test_free_decoding_of_a_random_model_writes_no_call(vocab, model) -> None:  # type: ignore[no-untyped-def]
    fmt = FORMATS["json"]
    found = 0
    for seed in range(3):
        ctrl = FreeController(vocab, re.compile(r"\{.*\}$", re.DOTALL), fmt.parse, after_call="stop")
        gen = Decoder(model, vocab).generate(
            [vocab.encode("call a tool:")], [ctrl], SamplingParams(temperature=1.0, seed=seed), max_new_tokens=60
        )[0]
        for event in gen.events:
            try:
                for call in event.calls:
                    check_call(call)
                    found += 1
            except (AssertionError, jsonschema.ValidationError, KeyError):
                pass
    assert found == 0


def test_batch_matches_one_by_one_with_jump_forward(vocab, model) -> None:  # type: ignore[no-untyped-def]
    grammar = Compiler(vocab).compile(TOOLS, "hermes")
    decoder = Decoder(model, vocab)
    prompts = [vocab.encode("a"), vocab.encode("a longer prompt with more tokens in it"), vocab.encode("b c")]
    batch = decoder.generate(prompts, [CallController(grammar) for _ in prompts], max_new_tokens=300)
    for prompt, together in zip(prompts, batch, strict=True):
        alone = decoder.generate([prompt], [CallController(grammar)], max_new_tokens=300)[0]
        assert alone.tokens == together.tokens


def test_shared_prefix_cache_gives_the_same_tokens(vocab, model) -> None:  # type: ignore[no-untyped-def]
    grammar = Compiler(vocab).compile(TOOLS, "hermes")
    decoder = Decoder(model, vocab)
    head = vocab.encode("You may call tools. Here are some examples of calls and answers.")
    prompts = [head + vocab.encode(q) for q in (" first", " a second question", " 3")]
    prefix = PromptPrefix.build(model, head + vocab.encode(" unrelated tail"))
    params = SamplingParams(temperature=1.0, seed=5)
    cached = decoder.generate(prompts, [CallController(grammar) for _ in prompts], params, prefix=prefix)
    plain = decoder.generate(prompts, [CallController(grammar) for _ in prompts], params)
    assert prefix.shared(prompts) == len(head)
    assert [g.prefix_tokens for g in cached] == [len(head)] * 3
    assert [g.tokens for g in cached] == [g.tokens for g in plain]
    assert [g.forward_passes for g in cached] == [g.forward_passes for g in plain]


def test_growing_cache_holds_what_concatenation_would() -> None:
    gen = torch.Generator().manual_seed(0)
    start = torch.randn(1, 2, 5, 4, generator=gen).expand(3, -1, -1, -1)
    cache = GrowingCache([(start, start + 1)])
    keys, values = [start], [start + 1]
    for width in (1, 1, 70, 2, 130, 1):
        k, v = torch.randn(3, 2, width, 4, generator=gen), torch.randn(3, 2, width, 4, generator=gen)
        got_k, got_v = cache.update(k, v, 0)
        keys.append(k)
        values.append(v)
        assert torch.equal(got_k, torch.cat(keys, dim=2)) and torch.equal(got_v, torch.cat(values, dim=2))
    assert cache.get_seq_length() == 5 + 205
    empty = GrowingCache()
    assert empty.get_seq_length() == 0
    assert torch.equal(empty.update(start, start, 0)[0], start)


def test_prefix_that_covers_a_whole_prompt_leaves_it_one_token(vocab, model) -> None:  # type: ignore[no-untyped-def]
    prompt = vocab.encode("exactly the prefix")
    prefix = PromptPrefix.build(model, prompt)
    assert prefix.shared([prompt]) == len(prompt) - 1
    assert prefix.shared([vocab.encode("zzz"), prompt]) == 0
    ctrl = CallController(Compiler(vocab).compile(TOOLS, "json"))
    gen = Decoder(model, vocab).generate([prompt], [ctrl], prefix=prefix, max_new_tokens=300)[0]
    alone = Decoder(model, vocab).generate([prompt], [CallController(ctrl.grammar)], max_new_tokens=300)[0]
    assert gen.tokens == alone.tokens
    with pytest.raises(ValueError, match="at least one token"):
        PromptPrefix.build(model, [])


def test_free_controller_forces_its_start_once(vocab, model) -> None:  # type: ignore[no-untyped-def]
    start = vocab.encode("<tool_call>")
    ctrl = FreeController(vocab, None, start=start)
    gen = Decoder(model, vocab).generate([vocab.encode("q")], [ctrl], max_new_tokens=len(start) + 8)[0]
    assert gen.tokens[: len(start)] == start and gen.text.startswith("<tool_call>")
    assert gen.forced_tokens == len(start) and gen.sampled_tokens == 8


def test_jump_forward_saves_passes_and_keeps_calls_valid(vocab, model) -> None:  # type: ignore[no-untyped-def]
    grammar = Compiler(vocab).compile(ToolSet([WEATHER]), "react")  # bounded values: greedy decoding ends
    decoder = Decoder(model, vocab)
    prompt = [vocab.encode("go")]
    on = decoder.generate(prompt, [CallController(grammar)], max_new_tokens=300)[0]
    off = decoder.generate(prompt, [CallController(grammar)], max_new_tokens=300, jump_forward=False)[0]
    assert on.forced_tokens > 0 and off.forced_tokens == 0
    assert on.forward_passes < off.forward_passes
    for gen in (on, off):
        check_call(gen.events[0].calls[0])


@pytest.mark.parametrize("trigger", ["<", "Action:"])
def test_trigger_switches_text_to_tool_mode_and_results_are_injected(vocab, model, trigger: str) -> None:  # type: ignore[no-untyped-def]
    fmt = "toolken" if trigger == "<" else "react"
    grammar = Compiler(vocab).compile(TOOLS, fmt)
    ctrl = CallController(grammar, trigger=trigger, tool_choice="required", after_call="text", max_calls=2)
    seen: list[str] = []

    def on_call(row: int, event) -> str:  # type: ignore[no-untyped-def]
        seen.append(event.text)
        return " RESULT "

    gen = Decoder(model, vocab).generate(
        [vocab.encode("q")], [ctrl], SamplingParams(temperature=1.0, seed=3), max_new_tokens=600, on_call=on_call
    )[0]
    assert seen and all(text.startswith(trigger) for text in seen)
    assert " RESULT " in gen.text
    for event in gen.events:
        check_call(event.calls[0])


def test_tool_choice_none_never_writes_the_trigger(vocab, model) -> None:  # type: ignore[no-untyped-def]
    grammar = Compiler(vocab).compile(TOOLS, "hermes")
    for seed in range(3):
        ctrl = CallController(grammar, trigger="<", tool_choice="none")
        gen = Decoder(model, vocab).generate(
            [vocab.encode("q")], [ctrl], SamplingParams(temperature=1.0, seed=seed), max_new_tokens=80
        )[0]
        assert "<" not in gen.text and not gen.events


def test_trigger_bans_tokens_that_run_past_it() -> None:
    from tooldec.vocab import Vocabulary

    vocab = Vocabulary.from_bytes([b"<", b"<m", b"a<", b"a<b", b"ab", b"tool", b"_call>", b"_call>x", None], eos_id=8)
    trig = Trigger(vocab, "<")
    banned = trig.banned(b"", allow=True)
    assert banned is not None
    assert [vocab.token_bytes[i] for i in np.flatnonzero(banned)] == [b"<m", b"a<b"]
    assert banned[0] == banned[2] == False
    assert trig.banned(b"", allow=False)[[0, 2]].all()
    long = Trigger(vocab, "<tool_call>")
    after_prefix = long.banned(b"xx<tool", allow=True)
    assert after_prefix is not None and after_prefix[7] and not after_prefix[6]
    assert long.fired(b"<tool", 6) and not long.fired(b"<too", 6)
    assert Trigger.of(vocab, "<") is Trigger.of(vocab, "<") is not Trigger.of(vocab, "<tool_call>")


def test_hf_logits_processor_constrains_generate(vocab, model) -> None:  # type: ignore[no-untyped-def]
    grammar = Compiler(vocab).compile(TOOLS, "json")
    eos = min(vocab.eos_ids)
    for seed in range(3):
        torch.manual_seed(seed)
        ctrl = CallController(grammar)
        processor = ToolDecLogitsProcessor([ctrl])
        prompt = torch.tensor([vocab.encode("call:")])
        out = model.generate(  # type: ignore[attr-defined]
            prompt,
            attention_mask=torch.ones_like(prompt),
            logits_processor=[processor],
            do_sample=True,
            max_new_tokens=400,
            eos_token_id=eos,
            pad_token_id=eos,
        )
        ctrl_text = vocab.decode(t for t in out[0, prompt.shape[1] :].tolist() if t not in vocab.eos_ids)
        call = json.loads(ctrl_text)
        tool = TOOLS[call["name"]]
        jsonschema.validate(call["arguments"], tool.parameters)


def test_sampling_masks_renormalises_and_is_seeded() -> None:
    logits = torch.tensor([5.0, 1.0, 0.5, 3.0])
    allowed = np.array([False, True, True, False])
    assert sample_token(logits, allowed, SamplingParams()) == 1
    params = SamplingParams(temperature=1.0, seed=7)
    draws = [sample_token(logits, allowed, params, params.generator()) for _ in range(5)]
    assert set(draws) <= {1, 2} and len(set(draws)) == 1
    top = SamplingParams(temperature=1.0, top_p=0.1, seed=1)
    gen = top.generator()
    assert {sample_token(logits, None, top, gen) for _ in range(20)} == {0}
    with pytest.raises(ValueError, match="no token"):
        sample_token(logits, np.zeros(4, dtype=bool), SamplingParams())
    with pytest.raises(ValueError):
        SamplingParams(top_p=0)


def test_forced_text_follows_literals(vocab) -> None:  # type: ignore[no-untyped-def]
    grammar = Compiler(vocab).compile(ToolSet([WEATHER]), "json")
    forced = ForcedText(grammar.dfa)
    assert forced.after(grammar.dfa.start) == b'{"name": "get_weather", "arguments": {"city": "'
    assert complete_utf8("é".encode()[:1]) == b""
