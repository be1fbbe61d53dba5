"""Algorithm 1 of ToolDec: mask the logits (a packed bitmask applied in place), renormalise, then greedy,
temperature or top-p sampling."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from tooldec import _core
from tooldec.decoding.gpu_apply import apply_on_gpu


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

    def row_generators(self, rows: int) -> list[torch.Generator | None]:
        """One seeded generator per row of a batch (seed + row), so that what a row samples does not depend on
        when the other rows sample; None for each row without a seed."""
        if self.seed is None:
            return [None] * rows
        return [torch.Generator().manual_seed(self.seed + row) for row in range(rows)]


def apply_token_bitmask_inplace(
    logits: torch.Tensor, bitmask: np.ndarray | torch.Tensor, indices: Sequence[int] | None = None
) -> None:
    """Set the logits of disallowed tokens to -inf in place: row r of `logits` by row r of the packed
    `int32[B, W]` bitmask, for the rows in `indices` (default all). Columns past the mask's reach are disallowed.

    A contiguous float32 CPU tensor goes through the compiled kernel (no copy, no GIL), a CUDA tensor through one
    Triton kernel (`gpu_apply`) where Triton is installed; anything else through torch's own ops on its device."""
    if logits.dim() == 1:
        apply_token_bitmask_inplace(logits.unsqueeze(0), _as_2d(bitmask), indices)
        return
    rows, vocab = logits.shape
    mask = _as_2d(bitmask)
    if indices is not None and any(not 0 <= int(i) < rows for i in indices):
        raise IndexError(f"row indices {list(indices)} outside the {rows} rows of logits")
    if mask.shape[0] != rows:
        raise ValueError(f"{rows} rows of logits but {mask.shape[0]} rows of bitmask")
    if (
        logits.device.type == "cpu"
        and logits.dtype == torch.float32
        and logits.stride(1) == 1
        and isinstance(mask, np.ndarray)
        and mask.dtype == np.int32
        and mask.flags.c_contiguous
    ):
        which = None if indices is None else np.ascontiguousarray(indices, dtype=np.int32)
        _core.apply_bitmask_f32(
            logits.data_ptr(), rows, vocab, logits.stride(0), mask.ctypes.data, mask.shape[1],
            0 if which is None else which.ctypes.data, 0 if which is None else which.size,
        )
        return
    words = torch.as_tensor(mask, device=logits.device)
    gpu = logits.is_cuda and logits.stride(1) == 1 and words.dtype == torch.int32
    if gpu and apply_on_gpu(logits, words.contiguous(), indices):
        return
    apply_with_torch_ops(logits, words, indices)


def apply_with_torch_ops(logits: torch.Tensor, words: torch.Tensor, indices: Sequence[int] | None = None) -> None:
    """The apply in torch ops on the logits' device (any dtype): every bit unpacked into a bool mask first."""
    rows, vocab = logits.shape
    shifts = torch.arange(32, device=logits.device, dtype=torch.int32)
    bits = ((words.unsqueeze(-1) >> shifts) & 1).bool().reshape(rows, -1)
    keep = torch.zeros((rows, vocab), dtype=torch.bool, device=logits.device)
    reach = min(vocab, bits.shape[1])
    keep[:, :reach] = bits[:, :reach]
    if indices is None:
        logits.masked_fill_(~keep, float("-inf"))
    else:
        idx = torch.as_tensor(list(indices), dtype=torch.long, device=logits.device)
        logits[idx] = logits[idx].masked_fill(~keep[idx], float("-inf"))


def _as_2d(bitmask: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    return bitmask.reshape(1, -1) if bitmask.ndim == 1 else bitmask


def sample_token(
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None = None,
) -> int:
    """One token id from a 1-D logits row already masked (disallowed = -inf): renormalise (softmax over the
    allowed tokens), then greedy, temperature or top-p. Raises ValueError when nothing is allowed."""
    masked = logits.float()
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
