"""Attention that reads a prompt prefix all rows share once per step, instead of once per row.

A benchmark batch (and an agent's questions) starts every row with the same tool list: RestBench's is about
5,000 tokens. Copied into each row's KV cache, that prefix is read once per row at every step, and on a CPU
this read is most of a step (SmolLM2 on RestBench TMDB at batch 8 spends about 80% of its time in attention). Here
each row's cache holds only its own tokens; the prefix keys and values are kept once, at batch 1, and every
row's queries meet them in one matrix product per key/value head. The softmax runs over the prefix and the
row's own positions together, so the result is the same attention, not an approximation.

The model keeps transformers' SDPA attention for every other call: the function registered here hands over to
it unless a forward pass carries `shared_prefix`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

NAME = "tooldec_shared_prefix"
"""The attention implementation a model is switched to: SDPA, plus the shared prefix when a pass gives one."""

MODEL_TYPES = frozenset({"llama", "qwen2", "qwen3"})
"""Architectures whose attention is plain causal attention over (prefix, own tokens): tested against SDPA."""

SCORE_BUDGET = 1 << 24
"""Most attention scores (float32) one chunk of queries holds: bounds the memory of a long stretch's pass."""


def enable(model: Any) -> bool:
    """Switch `model` to this attention if it is a transformers model of a tested architecture using SDPA with
    full (not sliding-window) attention; whether it now uses it. Calls without a shared prefix behave as SDPA."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "model_type", None) not in MODEL_TYPES:
        return False
    if any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or ()):
        return False
    if config._attn_implementation == NAME:
        return True
    if config._attn_implementation != "sdpa":
        return False
    # imported here: they load much of transformers' modelling code (seconds), which other models never need
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
    return True


def suffix_mask(attention: torch.Tensor, width: int) -> torch.Tensor:
    """The `[rows, 1, width, columns]` boolean mask of a pass over each row's own tokens, from the `[rows, columns]`
    mask of real (1) and padding (0) positions whose last `width` columns are this pass: a query sees the real
    positions up to its own. The shared prefix needs no mask: every query comes after all of it."""
    columns = attention.shape[1]
    causal = torch.arange(columns)[None, :] <= torch.arange(columns - width, columns)[:, None]
    return (attention.bool()[:, None, :] & causal[None, :, :])[:, None, :, :]


def attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *,
    scaling: float | None = None,
    dropout: float = 0.0,
    shared_prefix: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention of each row's queries over the shared prefix (`shared_prefix[layer]`, keys and values of batch 1)
    then the row's own `key`/`value`, under `attention_mask` (`suffix_mask`); SDPA when no prefix is given.
    Returns `[rows, queries, heads, head dim]` as transformers' attention functions do."""
    if shared_prefix is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    if attention_mask is None or attention_mask.dtype != torch.bool:
        raise ValueError("shared-prefix attention needs the boolean mask suffix_mask makes")
    prefix_keys, prefix_values = shared_prefix[module.layer_idx]
    rows, heads, queries, dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    scale = scaling if scaling is not None else dim**-0.5
    chunk = max(1, SCORE_BUDGET // max(1, rows * heads * (prefix_keys.shape[-2] + key.shape[-2])))
    out = torch.cat(
        [
            _attend(
                query[:, :, start : start + chunk],
                key,
                value,
                attention_mask[:, :, start : start + chunk],
                prefix_keys[0],
                prefix_values[0],
                group,
                scale,
            )
            for start in range(0, queries, chunk)
        ],
        dim=2,
    )
    return out.transpose(1, 2).contiguous(), None


def _attend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor,
    prefix_keys: torch.Tensor,
    prefix_values: torch.Tensor,
    group: int,
    scale: float,
) -> torch.Tensor:
    """One chunk of queries `[rows, heads, q, dim]`: scores against the prefix (one product per key/value head for
    all rows) and against each row's own keys, one softmax over both, then the weighted values of each part."""
    rows, heads, queries, dim = query.shape
    kv_heads, prefix_len = prefix_keys.shape[0], prefix_keys.shape[1]
    # Query head h reads key/value head h // group, so each key/value head's queries are contiguous.
    grouped = query.reshape(rows, kv_heads, group * queries, dim)
    stacked = grouped.transpose(0, 1).reshape(kv_heads, rows * group * queries, dim)
    prefix_scores = torch.matmul(stacked, prefix_keys.transpose(-1, -2)).mul_(scale)
    prefix_scores = prefix_scores.reshape(kv_heads, rows, group * queries, prefix_len).transpose(0, 1)
    own_scores = torch.matmul(grouped, key.transpose(-1, -2)).mul_(scale)
    own_mask = mask.expand(rows, group, queries, mask.shape[-1]).reshape(
        rows, 1, group * queries, mask.shape[-1]
    )
    own_scores.masked_fill_(~own_mask, float("-inf"))
    weights = torch.softmax(torch.cat([prefix_scores, own_scores], dim=-1), dim=-1)
    prefix_weights, own_weights = weights.split([prefix_len, key.shape[-2]], dim=-1)
    stacked_weights = prefix_weights.transpose(0, 1).reshape(kv_heads, rows * group * queries, prefix_len)
    out = (
        torch.matmul(stacked_weights, prefix_values)
        .reshape(kv_heads, rows, group * queries, dim)
        .transpose(0, 1)
    )
    out = out + torch.matmul(own_weights, value)
    return out.reshape(rows, heads, queries, dim)
