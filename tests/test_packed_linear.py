"""Linear layers on oneDNN-packed weights: nn.Linear's products, tied weights kept shared, the same decoding."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tool_fixtures import TOOLS

from tooldec.backends import packed_linear as pl
from tooldec.compiler import Compiler
from tooldec.decoding import CallController, SamplingParams
from tooldec.decoding.decoder import Decoder

pytestmark = pytest.mark.skipif(not pl.available(), reason="this PyTorch has no oneDNN")


def tiny(kind: str, vocab_size: int, *, tied: bool, seed: int = 0) -> Any:
    """A 2-layer random model (Qwen2's projections have biases, Llama's do not)."""
    torch.manual_seed(seed)
    configs = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}
    cfg = configs[kind](
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=tied,
    )
    return transformers.AutoModelForCausalLM.from_config(cfg).eval()


@settings(max_examples=60, deadline=None)
@given(
    lead=st.lists(st.integers(0, 5), max_size=2),
    inputs=st.integers(1, 70),
    outputs=st.integers(1, 90),
    bias=st.booleans(),
    strided=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_a_packed_linear_computes_what_nn_linear_does(
    lead: list[int], inputs: int, outputs: int, bias: bool, strided: bool, seed: int
) -> None:
    torch.manual_seed(seed)
    linear = torch.nn.Linear(inputs, outputs, bias=bias)
    x = torch.randn(*lead, 2 * inputs if strided else inputs)
    x = x[..., ::2] if strided else x  # a view that is not contiguous
    expected = linear(x)
    packed = pl.PackedLinear(linear)
    assert packed(x).shape == expected.shape
    torch.testing.assert_close(packed(x), expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(packed.weight, linear.weight.detach())


@pytest.mark.parametrize(("kind", "tied"), [("llama", True), ("qwen2", False), ("qwen2", True)])
def test_packing_a_model_keeps_its_logits_and_its_tied_weights(bytelevel_vocab, kind: str, tied: bool) -> None:  # type: ignore[no-untyped-def]
    model = tiny(kind, bytelevel_vocab.size, tied=tied)
    linears = sum(type(m) is torch.nn.Linear for m in model.modules())
    ids = torch.tensor([bytelevel_vocab.encode("weather in Paris, then convert it")] * 2)
    with torch.inference_mode():
        before = model(input_ids=ids).logits
        params_before = sum(p.numel() for p in model.parameters())
        assert pl.pack_linears(model) == linears
        after = model(input_ids=ids).logits
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)
    head = model.get_output_embeddings()
    assert isinstance(head, pl.PackedLinear)
    assert (head.weight is model.get_input_embeddings().weight) == tied
    # Only the parameters a packed weight replaced are gone: biases, norms, embeddings (and a tied head) stay.
    dropped = sum(m.out_features * m.in_features for m in model.modules() if isinstance(m, pl.PackedLinear))
    dropped -= head.out_features * head.in_features if tied else 0
    assert sum(p.numel() for p in model.parameters()) == params_before - dropped


def test_a_module_reached_twice_is_packed_once() -> None:
    shared = torch.nn.Linear(4, 3)
    model = torch.nn.Sequential(shared, torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(3, 4)))
    model.append(shared)
    assert pl.pack_linears(model) == 2
    assert model[0] is model[3] and isinstance(model[0], pl.PackedLinear)


def test_only_float32_cpu_linear_layers_are_packed() -> None:
    class Custom(torch.nn.Linear):
        """A subclass may change forward: it is left alone."""

    model = torch.nn.Sequential(torch.nn.Linear(4, 4).to(torch.bfloat16), Custom(4, 4), torch.nn.Linear(4, 2))
    assert pl.pack_linears(model) == 1
    assert [type(m).__name__ for m in model] == ["Linear", "Custom", "PackedLinear"]


def test_without_onednn_nothing_is_packed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    assert not pl.available()
    assert pl.pack_linears(model) == 0
    assert type(model[0]) is torch.nn.Linear


def test_decoding_with_packed_weights_writes_the_same_calls(bytelevel_vocab) -> None:  # type: ignore[no-untyped-def]
    vocab = bytelevel_vocab
    grammar = Compiler(vocab).compile(TOOLS, "toolken")
    prompts = [vocab.encode(q) for q in ("Tools: weather. a", "the second question is longer than the first", "3?")]

    def decode(model: Any) -> list[list[int]]:
        ctrls = [CallController(grammar, trigger="<", tool_choice="required", max_calls=2) for _ in prompts]
        gens = Decoder(model, vocab).generate(prompts, ctrls, SamplingParams(temperature=1.0, seed=3), max_new_tokens=60)
        return [g.tokens for g in gens]

    model = tiny("qwen2", vocab.size, tied=True, seed=2)
    before = decode(model)
    pl.pack_linears(model)
    assert decode(model) == before
    assert any(before), "the rows wrote something"
