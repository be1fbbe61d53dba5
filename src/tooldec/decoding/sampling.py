"""Algorithm 1 of ToolDec: mask the logits, renormalise, then greedy, temperature or top-p sampling."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is chosen among the allowed ones; temperature 0 means greedy."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        """Reject settings that have no meaning."""
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    def generator(self) -> torch.Generator | None:
        """A seeded torch generator, or None to use torch's global one."""
        if self.seed is None:
            return None
        return torch.Generator().manual_seed(self.seed)


def apply_mask(logits: torch.Tensor, allowed: np.ndarray | None) -> torch.Tensor:
    """Logits with every token outside the boolean `allowed` mask set to -inf (None allows every token)."""
    if allowed is None:
        return logits
    n = logits.shape[-1]
    keep = torch.zeros(n, dtype=torch.bool)
    m = min(n, len(allowed))
    keep[:m] = torch.from_numpy(allowed[:m])
    return logits.masked_fill(~keep.to(logits.device), float("-inf"))


def sample_token(
    logits: torch.Tensor,
    allowed: np.ndarray | None,
    params: SamplingParams,
    generator: torch.Generator | None = None,
) -> int:
    """One token id from a 1-D logits row: mask, renormalise (softmax over allowed), then greedy or sample."""
    masked = apply_mask(logits.float(), allowed)
    if not torch.isfinite(masked).any():
        raise ValueError("no token is allowed: the mask is empty")
    if params.temperature == 0:
        return int(torch.argmax(masked))
    probs = torch.softmax(masked / params.temperature, dim=-1)
    if params.top_p < 1:
        sorted_probs, order = torch.sort(probs, descending=True)
        cumulative = torch.cumsum(sorted_probs, dim=-1)
        cut = cumulative - sorted_probs > params.top_p  # keep the smallest prefix reaching top_p
        sorted_probs = sorted_probs.masked_fill(cut, 0.0)
        probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
    return int(torch.multinomial(probs.cpu(), 1, generator=generator))
