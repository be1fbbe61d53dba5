"""A KV cache that appends in place: each layer keeps spare capacity and doubles it when full.

transformers' DynamicCache concatenates every step, copying the whole cache each time: with a long shared prompt
(RestBench's tool list is about 5,000 tokens) and a batch of rows, that copy costs more than the model's matmuls
on a CPU. Appending into spare room makes a step's cache cost proportional to the tokens it adds.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

MIN_CAPACITY = 64


def cache_keyword(model: Any) -> str:
    """The keyword a model's forward takes its KV cache by: `cache` where transformers renamed it (5.x deprecates
    `past_key_values`, removed in 5.40), else `past_key_values` (older transformers, the llama.cpp backend)."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def returned_cache(out: Any) -> Any:
    """The KV cache a forward returned, under either name (see `cache_keyword`)."""
    got = getattr(out, "cache", None)
    return got if got is not None else out.past_key_values


class GrowingLayer(DynamicLayer):
    """One layer's keys and values as views of larger buffers, grown by doubling."""

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new states after the cached ones and return the keys and values so far."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        used = self.get_seq_length()
        total = used + key_states.shape[-2]
        buffers = getattr(self, "_buffers", None)
        if buffers is None or buffers[0].shape[-2] < total:
            capacity = max(2 * total, MIN_CAPACITY)
            grown = tuple(s.new_empty((*s.shape[:2], capacity, s.shape[-1])) for s in (key_states, value_states))
            if used:
                grown[0][:, :, :used] = self.keys
                grown[1][:, :, :used] = self.values
            self._buffers = buffers = grown
        buffers[0][:, :, used:total] = key_states
        buffers[1][:, :, used:total] = value_states
        self.keys, self.values = buffers[0][:, :, :total], buffers[1][:, :, :total]
        return self.keys, self.values


class GrowingCache(DynamicCache):
    """A DynamicCache whose layers are GrowingLayers, optionally starting from given (keys, values) per layer."""

    def __init__(self, layers: Sequence[tuple[torch.Tensor, torch.Tensor]] = ()) -> None:
        """An empty cache, or one holding `layers`' states (batch, heads, positions, head dim)."""
        if not layers:
            Cache.__init__(self, layer_class_to_replicate=GrowingLayer)
            return
        filled = []
        for keys, values in layers:
            layer = GrowingLayer()
            layer.update(keys, values)
            filled.append(layer)
        Cache.__init__(self, layers=filled)
