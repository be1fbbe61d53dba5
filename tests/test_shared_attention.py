"""Shared-prefix attention: the same attention as SDPA over the prefix copied into every row, and the same decoding."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tool_fixtures import TOOLS

from tooldec.compiler import Compiler
from tooldec.decoding import CallController, SamplingParams
from tooldec.decoding import shared_attention as sa
from tooldec.decoding.decoder import Decoder
from tooldec.decoding.prefix import PromptPrefix


def tiny(kind: str, vocab_size: int, seed: int = 0, **extra: Any) -> Any:
    """A 2-layer random model of one architecture, grouped-query attention (4 query heads, 2 key/value heads)."""
    torch.manual_seed(seed)
    common = {
        "vocab_size": vocab_size,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
    }
    configs = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config}
    cfg = configs[kind](**common, **extra)
    return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()


class Layer:
    """The one attribute the attention function reads off the attention module."""

    layer_idx = 0


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 4),
    kv_heads=st.integers(1, 3),
    group=st.integers(1, 3),
    prefix_len=st.integers(1, 40),
    cached=st.integers(0, 12),
    queries=st.integers(1, 9),
    budget=st.sampled_from([sa.SCORE_BUDGET, 1]),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_attention_equals_sdpa_over_the_prefix_copied_into_every_row(
    rows: int,
    kv_heads: int,
    group: int,
    prefix_len: int,
    cached: int,
    queries: int,
    budget: int,
    seed: int,
    data: st.DataObject,
) -> None:
    gen = torch.Generator().manual_seed(seed)
    dim, heads = 8, kv_heads * group
    own = cached + queries
    query = torch.randn(rows, heads, queries, dim, generator=gen)
    key, value = (torch.randn(rows, kv_heads, own, dim, generator=gen) for _ in range(2))
    prefix = [tuple(torch.randn(1, kv_heads, prefix_len, dim, generator=gen) for _ in range(2))]
    # Left padding: each row's real positions of this pass are its last ones; earlier passes may hold padding.
    attention = torch.tensor(
        [[data.draw(st.integers(0, 1)) for _ in range(cached)] + [1] * queries for _ in range(rows)]
    )
    for row in range(rows):
        attention[row, cached : cached + data.draw(st.integers(0, queries - 1))] = 0
    mask = sa.suffix_mask(attention, queries)
    old_budget, sa.SCORE_BUDGET = sa.SCORE_BUDGET, budget
    try:
        got, _ = sa.attention(Layer(), query, key, value, mask, scaling=0.3, shared_prefix=prefix)
    finally:
        sa.SCORE_BUDGET = old_budget
    full_keys = torch.cat([prefix[0][0].expand(rows, -1, -1, -1), key], dim=2).repeat_interleave(group, dim=1)
    full_values = torch.cat([prefix[0][1].expand(rows, -1, -1, -1), value], dim=2).repeat_interleave(group, dim=1)
    full_mask = torch.cat([torch.ones(rows, 1, queries, prefix_len, dtype=torch.bool), mask], dim=-1)
    want = torch.nn.functional.scaled_dot_product_attention(query, full_keys, full_values, attn_mask=full_mask, scale=0.3)
    assert got.shape == (rows, queries, heads, dim)
    torch.testing.assert_close(got, want.transpose(1, 2), rtol=1e-5, atol=1e-5)


def test_suffix_mask_sees_real_positions_up_to_each_query() -> None:
    attention = torch.tensor([[1, 0, 1, 1], [0, 1, 0, 1]])
    mask = sa.suffix_mask(attention, 2)
    assert mask.shape == (2, 1, 2, 4)
    assert mask[0, 0].tolist() == [[True, False, True, False], [True, False, True, True]]
    assert mask[1, 0].tolist() == [[False, True, False, False], [False, True, False, True]]


def test_attention_needs_the_boolean_suffix_mask() -> None:
    q = torch.zeros(1, 2, 1, 4)
    kv = torch.zeros(1, 2, 1, 4)
    prefix = [(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))]
    with pytest.raises(ValueError, match="boolean mask"):
        sa.attention(Layer(), q, kv, kv, torch.zeros(1, 1, 1, 1), shared_prefix=prefix)


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_enabled_model_is_sdpa_without_a_prefix(kind: str) -> None:
    before = tiny(kind, 64)
    after = tiny(kind, 64)
    assert sa.enable(after) and after.config._attn_implementation == sa.NAME
    assert sa.enable(after), "enabling twice keeps it on"
    ids = torch.tensor([[5, 6, 7, 8, 9], [0, 0, 3, 4, 5]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    with torch.inference_mode():
        want = before(input_ids=ids, attention_mask=mask).logits
        got = after(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(got, want)


def test_enable_leaves_other_attention_alone() -> None:
    eager = tiny("llama", 64)
    eager.set_attn_implementation("eager")
    assert not sa.enable(eager) and eager.config._attn_implementation == "eager"
    sliding = tiny("qwen2", 64, use_sliding_window=True, sliding_window=8, max_window_layers=0)
    assert not sa.enable(sliding)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2))
    assert not sa.enable(gpt2)
    assert not sa.enable(object())


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_decoding_from_a_shared_prefix_writes_what_copying_it_does(bytelevel_vocab, kind: str) -> None:  # type: ignore[no-untyped-def]
    vocab = bytelevel_vocab
    model = tiny(kind, vocab.size, seed=1)
    grammar = Compiler(vocab).compile(TOOLS, "toolken")
    head = vocab.encode("Tools: " + ", ".join(TOOLS.names) + ". Answer each question, calling tools.")
    prompts = [head + vocab.encode(q) for q in (" a", " the second question is longer than the first", " 3?")]
    prefix = PromptPrefix.build(model, head)

    def decode(shares: bool) -> list[Any]:
        decoder = Decoder(model, vocab)
        assert decoder.shares_prefix
        decoder.shares_prefix = shares
        ctrls = [
            CallController(grammar, trigger="<", tool_choice="required", after_call="text", max_calls=2)
            for _ in prompts
        ]
        return decoder.generate(
            prompts,
            ctrls,
            SamplingParams(temperature=1.0, seed=7),
            max_new_tokens=80,
            prefix=prefix,
            on_call=lambda row, event: " a tool's result, long enough to be fed over several passes " * (row + 1),
        )

    shared, copied = decode(True), decode(False)
    assert [g.prefix_tokens for g in shared] == [len(head)] * len(prompts)
    assert [g.tokens for g in shared] == [g.tokens for g in copied]
    assert any(g.injected_tokens for g in shared), "a tool result was fed"
