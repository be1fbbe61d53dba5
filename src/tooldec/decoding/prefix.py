"""A prompt prefix shared by many generations (few-shot examples, a tool list): its KV cache is computed once.

Every item of a benchmark, and every question an agent answers with the same instructions, starts with the
same tokens. `PromptPrefix.build` runs the model over them once; `Decoder.generate(..., prefix=...)` then starts
each row from the longest stretch its prompt shares with the prefix, copying that part of the cache instead of
recomputing it. Prompts that share nothing with it are simply decoded in full.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tooldec.decoding.kv_cache import GrowingCache, cache_keyword, returned_cache


@dataclass(frozen=True)
class PromptPrefix:
    """The tokens of a shared prefix and every layer's (keys, values) for them, batch size 1."""

    tokens: tuple[int, ...]
    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]

    @classmethod
    @torch.inference_mode()
    def build(cls, model: Any, tokens: Sequence[int], *, base: PromptPrefix | None = None) -> PromptPrefix:
        """Run `model` once over `tokens` and keep its KV cache. With `base` (a prefix of the same model), the
        leading tokens it shares with `tokens` come from its cache and only the rest is run."""
        if not tokens:
            raise ValueError("a prompt prefix needs at least one token")
        own = getattr(model, "build_prefix", None)  # a backend that keeps its cache itself (llama.cpp)
        if callable(own):
            prefix: PromptPrefix = own(tokens)
            return prefix
        device = next(model.parameters()).device
        reused = base.shared([tokens]) if base is not None else 0
        extra: dict[str, Any] = {}
        if base is not None and reused:
            extra[cache_keyword(model)] = base.cache(1, reused)
            extra["position_ids"] = torch.arange(reused, len(tokens), device=device)[None, :]
        ids = torch.tensor([list(tokens[reused:])], device=device)
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1, **extra)
        cache = returned_cache(out)
        layers = tuple((layer.keys, layer.values) for layer in cache.layers)
        return cls(tuple(tokens), layers)

    def shared(self, prompts: Sequence[Sequence[int]]) -> int:
        """How many leading tokens every prompt shares with the prefix, leaving each prompt one token to run."""
        length = len(self.tokens)
        for prompt in prompts:
            limit = min(length, len(prompt) - 1)
            same = 0
            while same < limit and prompt[same] == self.tokens[same]:
                same += 1
            length = same
        return max(length, 0)

    def head(self, length: int) -> PromptPrefix:
        """The first `length` positions of this prefix (views of its keys and values, no copy)."""
        layers = tuple((k[:, :, :length], v[:, :, :length]) for k, v in self.layers)
        return PromptPrefix(self.tokens[:length], layers)

    def cache(self, batch: int, length: int) -> GrowingCache:
        """A fresh cache holding the first `length` prefix positions for each of `batch` rows."""
        return GrowingCache(
            [
                (k[:, :, :length].expand(batch, -1, -1, -1), v[:, :, :length].expand(batch, -1, -1, -1))
                for k, v in self.layers
            ]
        )
