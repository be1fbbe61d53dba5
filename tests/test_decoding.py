"""Decoding with a tiny random model: every guided call is valid, in every format, batch or not.

Random weights are the harshest model: unguided they never write a valid call; guided they always must.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tool_fixtures import TOOLS, WEATHER, check_call, check_sampled_calls

from tooldec.agents.toolken import CALL_END as TOOLKEN_CALL_END
from tooldec.automaton.forced import ForcedText, complete_utf8
from tooldec.compiler import Compiler
from tooldec.decoding import CallController, FreeController, SamplingParams, Trigger
from tooldec.decoding.decoder import Decoder
from tooldec.decoding.kv_cache import GrowingCache
from tooldec.decoding.logits_processor import ToolDecLogitsProcessor
from tooldec.decoding.prefix import PromptPrefix
from tooldec.decoding.sampling import apply_token_bitmask_inplace, sample_token
from tooldec.eval.runners.common import spelled_text
from tooldec.grammar.calls import FORMATS, ParsedCall
from tooldec.index import PreparedVocab, pack_bool, unpack
from tooldec.specs import ToolSet


@pytest.fixture(scope="module")
def model(vocab, tiny_llama) -> object:  # type: ignore[no-untyped-def]
    return tiny_llama(vocab.size)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_random_model_always_writes_valid_calls(vocab, model, fmt: str) -> None:  # type: ignore[no-untyped-def]
    check_sampled_calls(model, vocab, fmt, seeds=4)


def _is_valid_call(call: ParsedCall, tools: ToolSet = TOOLS) -> bool:
    """Whether a best-effort parse names one of `tools` with arguments that validate (no exception: a parse of
    unguided text may hold any JSON value as name or arguments)."""
    if not isinstance(call.name, str) or call.name not in tools or not isinstance(call.arguments, dict):
        return False
    tool = tools[call.name]
    if len(call.positional) > len(tool.parameters.get("properties", {})):
        return False
    return jsonschema.Draft202012Validator(tool.parameters).is_valid(call.bind(tool))


class ScriptedModel(torch.nn.Module):
    """A stand-in causal LM whose greedy continuation is a fixed token script, whatever the input (one row)."""

    def __init__(self, vocab_size: int, script: list[int]) -> None:
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # the Decoder reads the device off a parameter
        self.vocab_size = vocab_size
        self.script = script
        self.passes = 0

    def forward(self, input_ids: torch.Tensor, past_key_values: object = None, **_: object) -> SimpleNamespace:
        """Logits that make the next scripted token the argmax (one forward pass per sampled token)."""
        logits = torch.zeros(input_ids.shape[0], 1, self.vocab_size)
        logits[:, -1, self.script[min(self.passes, len(self.script) - 1)]] = 1.0
        self.passes += 1
        return SimpleNamespace(logits=logits, past_key_values=past_key_values)


def _free_decode(vocab, text: str, ctrl: FreeController) -> object:  # type: ignore[no-untyped-def]
    """Greedy free decoding of a model scripted to write `text` then EOS, watched by `ctrl`."""
    script = vocab.encode(text) + [min(vocab.eos_ids)]
    model = ScriptedModel(vocab.size, script)
    return Decoder(model, vocab).generate([vocab.encode("q")], [ctrl], max_new_tokens=len(script) + 5)[0]


TOOLKEN_TEXT = "Sure: <multiply>(3.14,123)= then <add>(1,,2)= and <nosuch>(7)= done"


def test_free_controller_reports_calls_best_effort(vocab) -> None:  # type: ignore[no-untyped-def]
    """FreeController never masks: every text that ends a call is reported, parsed when it parses (even a call
    of an unknown tool, which the caller must reject) and with the parse error when it does not."""
    ctrl = FreeController(vocab, TOOLKEN_CALL_END, FORMATS["toolken"].parse, after_call="text")
    gen = _free_decode(vocab, TOOLKEN_TEXT, ctrl)
    assert gen.finish_reason == "stop" and gen.text == TOOLKEN_TEXT
    assert [e.text for e in gen.events] == ["<multiply>(3.14,123)=", "<add>(1,,2)=", "<nosuch>(7)="]
    good, bad, unknown = gen.events
    assert good.error is None and good.calls == [ParsedCall("multiply", {}, (3.14, 123))]
    assert _is_valid_call(good.calls[0])
    check_call(good.calls[0])
    assert bad.calls == [] and bad.error is not None and "bad arguments" in bad.error and "<add>(1,,2)=" in bad.error
    assert unknown.error is None and unknown.calls == [ParsedCall("nosuch", {}, (7,))]
    assert not _is_valid_call(unknown.calls[0])


@pytest.mark.parametrize(("after_call", "max_calls", "events"), [("stop", 16, 1), ("text", 2, 2)])
def test_free_controller_stops_after_its_calls(vocab, after_call: str, max_calls: int, events: int) -> None:  # type: ignore[no-untyped-def]
    """after_call="stop" ends the sequence at the first call, max_calls at the last one allowed."""
    ctrl = FreeController(vocab, TOOLKEN_CALL_END, FORMATS["toolken"].parse, after_call=after_call, max_calls=max_calls)
    gen = _free_decode(vocab, TOOLKEN_TEXT, ctrl)
    assert ctrl.done and gen.finish_reason == "stop"
    assert len(gen.events) == events and gen.text.endswith(gen.events[-1].text)


def test_free_controller_reports_unparsable_json_with_its_error(vocab) -> None:  # type: ignore[no-untyped-def]
    """A JSON call that does not parse comes back as an event with no call and the parser's message."""
    ctrl = FreeController(vocab, re.compile(r"\{.*\}$", re.DOTALL), FORMATS["json"].parse, after_call="stop")
    gen = _free_decode(vocab, 'ok {"name": oops} more', ctrl)
    assert gen.text == 'ok {"name": oops}'
    assert len(gen.events) == 1
    assert gen.events[0].text == '{"name": oops}' and gen.events[0].calls == []
    assert gen.events[0].error is not None and "not a JSON call" in gen.events[0].error


def test_free_decoding_of_a_random_model_writes_no_valid_call(vocab, model) -> None:  # type: ignore[no-untyped-def]
    """The unguided baseline: a random model pushed into a JSON call (`{"name": "` forced, as for a required
    call) writes calls that FreeController reports, each best-effort (parsed, or its error), none valid."""
    call_end = re.compile(r"\{.*\}$", re.DOTALL)
    prompts = [vocab.encode(f"call a tool {i}:") for i in range(16)]
    start = vocab.encode('{"name": "')
    controllers = [FreeController(vocab, call_end, FORMATS["json"].parse, start=start) for _ in prompts]
    gens = Decoder(model, vocab).generate(
        prompts, controllers, SamplingParams(temperature=1.0, seed=0), max_new_tokens=80
    )
    reported = []
    for gen in gens:
        assert gen.text.startswith('{"name": "')
        for event in gen.events:
            assert call_end.search(event.text) and event.text in spelled_text(vocab, gen.tokens)  # control tokens by name
            assert (event.error is None) == bool(event.calls), event
            assert not any(_is_valid_call(call) for call in event.calls), event
        reported += gen.events
    assert reported, "the random model closed no brace: nothing was checked"


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


def test_a_prefix_built_on_another_holds_what_building_it_whole_does(vocab, model) -> None:  # type: ignore[no-untyped-def]
    head = vocab.encode("You may call tools. Here are some examples of calls and answers.")
    base = PromptPrefix.build(model, head + vocab.encode(" an older question"))
    tokens = head + vocab.encode(" Question: a newer one")
    built, whole = PromptPrefix.build(model, tokens, base=base), PromptPrefix.build(model, tokens)
    assert built.tokens == whole.tokens and 0 < base.shared([tokens]) < len(tokens)
    for (k1, v1), (k2, v2) in zip(built.layers, whole.layers, strict=True):
        assert k1.shape == k2.shape
        torch.testing.assert_close(k1, k2, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(v1, v2, rtol=1e-4, atol=1e-5)
    unrelated = PromptPrefix.build(model, vocab.encode("zzz unrelated"), base=base)
    assert len(unrelated.tokens) == unrelated.layers[0][0].shape[-2]


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
    # forced once: the rest is sampled (a random model may end its row early: EOS, or a call its text closes)
    assert gen.forced_tokens == len(start) and 0 < gen.sampled_tokens <= 8


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
    prepared = PreparedVocab(vocab)

    def banned(trig: Trigger, tail: bytes, allow: bool) -> np.ndarray:
        mask = trig.allowed_mask(tail, allow=allow)
        assert mask is not None
        return ~unpack(mask, vocab.size)

    trig = Trigger(prepared, "<")
    assert [vocab.token_bytes[i] for i in np.flatnonzero(banned(trig, b"", True))] == [b"<m", b"a<b"]
    assert banned(trig, b"", False)[[0, 2]].all()
    long = Trigger(prepared, "<tool_call>")
    after_prefix = banned(long, b"xx<tool", True)
    assert after_prefix[7] and not after_prefix[6]
    assert long.fired(b"<tool", 6) and not long.fired(b"<too", 6)
    assert trig.allowed_mask(b"", allow=True) is Trigger(prepared, "<").allowed_mask(b"", allow=True), (
        "text-mode masks are built once per model"
    )


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


def _masked(logits: torch.Tensor, allowed: np.ndarray | None) -> torch.Tensor:
    """A copy of a logits row with the tokens outside the boolean `allowed` mask at -inf (the decoding path)."""
    out = logits.clone()
    if allowed is not None:
        apply_token_bitmask_inplace(out, pack_bool(allowed, (len(allowed) + 31) // 32))
    return out


def _draw(
    logits: torch.Tensor, allowed: np.ndarray | None, params: SamplingParams, generator: torch.Generator | None = None
) -> int:
    """One sample_token draw with only the tokens of the boolean mask `allowed` (None: every token) allowed.

    The one place that knows how sample_token takes its mask (today: a packed int32 bitmask applied to a copy of
    the logits first, by `_masked`); a change of that API changes only this body."""
    return sample_token(_masked(logits, allowed), params, generator)


LOGITS = torch.tensor([2.0, -1.0, 0.5, 3.0, 1.5, -0.5, 0.0, 2.5, -2.0, 1.0])
ALLOWED = np.array([True, True, True, False, True, False, True, False, True, True])  # the two best are banned
DRAWS = 20_000
CHI2_CRITICAL = {1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515, 6: 22.458, 7: 24.322, 8: 26.124, 9: 27.877}
"""Upper 0.1% points of the chi-square distribution by degrees of freedom (standard tables, e.g. NIST/SEMATECH
e-Handbook 1.3.6.7.4): a correct sampler exceeds them with probability 0.001."""


def _algorithm1(logits: np.ndarray, allowed: np.ndarray | None, temperature: float, top_p: float) -> np.ndarray:
    """The distribution Algorithm 1 samples from, in float64 numpy: softmax of logits / temperature over the
    allowed tokens, then the smallest set of most likely tokens whose mass reaches top_p, renormalised."""
    z = np.where(np.ones(len(logits), bool) if allowed is None else allowed, logits / temperature, -np.inf)
    p = np.exp(z - z.max())
    p /= p.sum()
    if top_p < 1:
        order = np.argsort(-p, kind="stable")
        mass = np.cumsum(p[order])
        assert np.abs(mass - top_p).min() > 1e-3, "top_p on a boundary: the kept set would be ambiguous"
        keep = order[: int(np.searchsorted(mass, top_p)) + 1]
        p = np.where(np.isin(np.arange(len(p)), keep), p, 0.0)
        p /= p.sum()
    return p


@pytest.mark.parametrize(
    ("temperature", "top_p", "masked"),
    [(1.0, 1.0, True), (0.7, 1.0, True), (1.5, 0.8, True), (1.0, 0.5, True), (1.3, 0.9, False)],
)
def test_sampling_follows_the_renormalised_distribution(temperature: float, top_p: float, masked: bool) -> None:
    """20,000 draws from one generator fit Algorithm 1's distribution (chi-square goodness of fit at p = 0.001),
    and no banned or top-p-cut token is ever drawn."""
    allowed = ALLOWED if masked else None
    params = SamplingParams(temperature=temperature, top_p=top_p, seed=1234)
    gen = params.generator()
    draws = [_draw(LOGITS, allowed, params, gen) for _ in range(DRAWS)]
    observed = np.bincount(draws, minlength=len(LOGITS))
    expected = DRAWS * _algorithm1(LOGITS.double().numpy(), allowed, temperature, top_p)
    support = expected > 0
    assert observed[~support].sum() == 0, f"drew tokens outside the support: {observed}"
    assert expected[support].min() >= 5, "too few expected draws per cell for the chi-square approximation"
    df = int(support.sum()) - 1
    chi2 = float((((observed - expected) ** 2)[support] / expected[support]).sum())
    assert chi2 < CHI2_CRITICAL[df], f"chi2 = {chi2:.1f} with {df} df; observed {observed}, expected {expected.round()}"


@settings(max_examples=50, deadline=None)
@given(
    data=st.lists(st.tuples(st.floats(-30, 30), st.booleans()), min_size=1, max_size=40).filter(
        lambda xs: any(a for _, a in xs)
    ),
    temperature=st.sampled_from([0.0, 0.3, 1.0, 2.0]),
    top_p=st.sampled_from([0.05, 0.5, 1.0]),
    seed=st.integers(0, 2**16),
)
def test_sampling_never_leaves_the_mask_and_greedy_takes_the_best(
    data: list[tuple[float, bool]], temperature: float, top_p: float, seed: int
) -> None:
    """Whatever the logits, mask, temperature and top_p: every draw is an allowed token, and greedy (temperature
    0) is the first best allowed token."""
    logits = torch.tensor([x for x, _ in data])
    allowed = np.array([a for _, a in data])
    params = SamplingParams(temperature=temperature, top_p=top_p, seed=seed)
    gen = params.generator()
    draws = {_draw(logits, allowed, params, gen) for _ in range(10)}
    assert all(allowed[t] for t in draws), draws
    best = int(np.flatnonzero(allowed)[np.argmax(logits.numpy()[allowed])])
    assert _draw(logits, allowed, SamplingParams()) == best
    if temperature == 0:
        assert draws == {best}


def test_sampling_is_reproducible_from_its_seed() -> None:
    """The same seed gives the same draws, one generator moves on between draws, and another seed differs."""

    def run(seed: int) -> list[int]:
        params = SamplingParams(temperature=1.0, seed=seed)
        gen = params.generator()
        return [_draw(LOGITS, ALLOWED, params, gen) for _ in range(50)]

    assert run(7) == run(7)
    assert len(set(run(7))) > 1
    assert run(7) != run(8)


def test_sampling_refuses_an_empty_mask_and_meaningless_params() -> None:
    """Nothing allowed is an error, as are top_p outside (0, 1] and a negative temperature."""
    with pytest.raises(ValueError, match="no token"):
        _draw(LOGITS, np.zeros(len(LOGITS), dtype=bool), SamplingParams())
    with pytest.raises(ValueError):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError):
        SamplingParams(top_p=1.5)
    with pytest.raises(ValueError):
        SamplingParams(temperature=-1)


def test_forced_text_follows_literals(vocab) -> None:  # type: ignore[no-untyped-def]
    grammar = Compiler(vocab).compile(ToolSet([WEATHER]), "json")
    forced = ForcedText(grammar.dfa)
    assert forced.after(grammar.dfa.start) == b'{"name": "get_weather", "arguments": {"city": "'
    assert complete_utf8("é".encode()[:1]) == b""
