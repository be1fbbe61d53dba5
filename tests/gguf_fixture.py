"""A tiny GGUF model written in the test: a transformers Llama's weights and a byte-level BPE tokenizer, no download.

`write_gguf` stores the model as llama.cpp's own converter would (architecture `llama`, float32 tensors, the
query and key rows permuted to llama.cpp's rotary layout) with the tokenizer as a `gpt2` vocabulary, so that
llama.cpp and transformers compute the same logits from the same weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """Rows of a query/key projection from transformers' rotary layout (halves) to llama.cpp's (pairs)."""
    rows = weights.shape[0]
    return weights.reshape(heads, 2, rows // heads // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


def write_gguf(path: Path, model: Any, tokenizer: Tokenizer, *, eos: str = "</s>") -> Path:
    """Write `model` (a transformers LlamaForCausalLM) with `tokenizer`'s vocabulary to `path`."""
    import gguf

    cfg = model.config
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
    spec = json.loads(tokenizer.to_str())
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    tokens = sorted(vocab, key=vocab.__getitem__)
    special = {t["content"] for t in spec["added_tokens"] if t.get("special")}
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-test-llama")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_rope_freq_base(getattr(cfg, "rope_theta", None) or cfg.rope_parameters["rope_theta"])
    writer.add_rope_dimension_count(cfg.hidden_size // heads)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(
        [gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens]
    )
    writer.add_token_merges(merges)
    writer.add_eos_token_id(vocab[eos])
    writer.add_bos_token_id(vocab[eos])
    writer.add_add_bos_token(False)
    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    writer.add_tensor("token_embd.weight", state["model.embed_tokens.weight"])
    names = {
        "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
    }  # fmt: skip
    for layer in range(cfg.num_hidden_layers):
        for hf, ours in names.items():
            weights = state[f"model.layers.{layer}.{hf}.weight"]
            if ours == "attn_q":
                weights = _permute(weights, heads)
            elif ours == "attn_k":
                weights = _permute(weights, kv_heads)
            writer.add_tensor(f"blk.{layer}.{ours}.weight", np.ascontiguousarray(weights))
    writer.add_tensor("output_norm.weight", state["model.norm.weight"])
    writer.add_tensor("output.weight", state["lm_head.weight"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_tokenizer_gguf(
    path: Path,
    tokens: list[str],
    merges: list[str],
    *,
    architecture: str = "qwen2",
    model: str = "gpt2",
    pre: str | None = "qwen2",
    token_types: list[int] | None = None,
    bos: int | None = None,
    eos: int | None = None,
    pad: int | None = None,
    unk: int | None = None,
    add_bos: bool | None = None,
    chat_template: str | None = None,
) -> Path:
    """A GGUF file holding only a tokenizer (and the few config keys transformers reads its config from), written
    with the `gguf` package as llama.cpp's converter writes one: `tokens` in id order, `merges` as "a b"."""
    import gguf

    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("tiny-tokenizer")
    writer.add_context_length(256)
    writer.add_embedding_length(8)
    writer.add_block_count(1)
    writer.add_feed_forward_length(16)
    writer.add_head_count(2)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model(model)
    if pre is not None:
        writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(token_types if token_types is not None else [gguf.TokenType.NORMAL] * len(tokens))
    writer.add_token_merges(merges)
    for token_id, add in ((bos, writer.add_bos_token_id), (eos, writer.add_eos_token_id),
                          (pad, writer.add_pad_token_id), (unk, writer.add_unk_token_id)):  # fmt: skip
        if token_id is not None:
            add(token_id)
    if add_bos is not None:
        writer.add_add_bos_token(add_bos)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
