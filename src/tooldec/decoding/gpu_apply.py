"""The packed-bitmask apply for logits on a CUDA device: one Triton kernel launch that reads the mask words and
writes -inf where a token's bit is clear (the torch-ops path unpacks every bit into a temporary first: ~4x slower,
benchmarks/results/gpu_apply.md). Used when Triton is importable; it ships with CUDA builds of torch."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch

BLOCK = 1024
"""Vocabulary columns per program: 32 mask words."""


@functools.cache
def _kernel() -> Any:
    """The compiled kernel, or None without Triton (built on first use: importing Triton costs seconds)."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def apply_bitmask(logits, mask, rows, vocab, reach, logits_stride, mask_stride, BLOCK: tl.constexpr):
        row = tl.load(rows + tl.program_id(0)).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        inside = cols < vocab
        words = tl.load(mask + row * mask_stride + cols // 32, mask=inside & (cols < reach), other=0)
        keep = ((words >> (cols % 32)) & 1) != 0
        ptrs = logits + row * logits_stride + cols
        blocked = tl.full((BLOCK,), float("-inf"), tl.float32).to(logits.dtype.element_ty)
        tl.store(ptrs, blocked, mask=inside & ~keep)

    return apply_bitmask


def apply_on_gpu(logits: torch.Tensor, mask: torch.Tensor, indices: Sequence[int] | None = None) -> bool:
    """Apply the `int32[B, W]` packed `mask` (on the logits' device) to the rows `indices` (default all) of the
    2-D CUDA `logits` in place; False (nothing done) without Triton."""
    kernel = _kernel()
    if kernel is None:
        return False
    if indices is None:  # made on the device: a host list would be copied over at every step
        rows = torch.arange(logits.shape[0], dtype=torch.int32, device=logits.device)
    else:
        rows = torch.as_tensor(list(indices), dtype=torch.int32, device=logits.device)
    vocab = logits.shape[1]
    grid = (rows.numel(), (vocab + BLOCK - 1) // BLOCK)
    kernel[grid](logits, mask, rows, vocab, mask.shape[1] * 32, logits.stride(0), mask.stride(0), BLOCK=BLOCK)
    return True
