"""Algorithm 1 of ToolDec: mask the logits (a packed bitmask applied in place), renormalise, then greedy,
temperature or top-p sampling."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from tooldec import _core
from tooldec.decoding.gpu_apply import apply_on_gpu

if TYPE_CHECKING:
    from tooldec.decoding.controller import MaskSource


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


class Masking(Protocol):
    """What `mask_rows` needs of a row's policy: where its mask comes from."""

    def mask_source(self) -> MaskSource: ...


def mask_rows(policies: Sequence[Masking], logits: torch.Tensor, bitmask: np.ndarray, rows: Sequence[int]) -> None:
    """Ban what each policy disallows: policy i's packed mask into row `rows[i]` of `bitmask` (one call of the
    compiled core for the batch), then applied in place to the same row of `logits` (one kernel). Rows whose
    policy allows every token (free text, text mode with no trigger to watch) are left out of both."""
    sources = []
    which = []
    for policy, row in zip(policies, rows):
        source = policy.mask_source()
        if source is not None:
            sources.append(source)
            which.append(row)
    if not sources:
        return
    _core.fill_bitmasks(bitmask, sources, np.asarray(which, dtype=np.int32), 1)
    apply_token_bitmask_inplace(logits, bitmask, which)


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
    logits: torch.Tensor | np.ndarray,
    params: SamplingParams,
    generator: torch.Generator | None = None,
) -> int:
    """One token id from a 1-D logits row already masked (disallowed = -inf): renormalise (softmax over the
    allowed tokens), then greedy, temperature or top-p. Raises ValueError when nothing is allowed.

    A CPU row (a float32 numpy array, or a tensor on the CPU) is sampled in numpy: over Qwen's 151,936 logits
    on a loaded 2-core machine, a greedy token takes 0.02 ms (2.6 ms in torch: its emptiness check and argmax), a
    temperature draw 1.4 ms (20-24 ms) and a top-p draw 1.4 ms (88 ms: torch sorts the whole vocabulary);
    `benchmarks/serve_profile.py --sampling`. The uniform draw comes from `generator` (torch's global generator
    without one), so seeds work as before, drawing other tokens than torch's multinomial did. Other devices
    sample in torch.
    """
    if isinstance(logits, torch.Tensor):
        if logits.device.type != "cpu":
            return _sample_torch(logits, params, generator)
        logits = logits.detach().float().numpy()
    row = logits if logits.dtype == np.float32 else logits.astype(np.float32)
    best = int(np.argmax(row))
    top = float(row[best])
    if not math.isfinite(top):  # nothing allowed, or +inf / NaN logits: torch's rules, as before
        return _sample_torch(torch.from_numpy(np.ascontiguousarray(row)), params, generator)
    if params.temperature == 0:
        return best
    z = np.subtract(row, np.float32(top), out=_scratch(len(row)))  # allowed tokens <= 0, banned ones stay -inf
    if params.temperature != 1:
        z /= np.float32(params.temperature)
    probs = np.exp(z, out=z)  # unnormalised: banned tokens 0, the best 1
    u = float(torch.rand((), generator=generator, dtype=torch.float64))
    if params.top_p < 1:
        ids, kept = _top_p(probs, params.top_p)
        return int(ids[_inverse_cdf(kept, u)])
    return _inverse_cdf(probs, u)


_local = threading.local()


def _scratch(size: int) -> np.ndarray:
    """This thread's float32 buffer of `size` values, kept between draws: a fresh array of a vocabulary's size is
    mapped and faulted in anew by every allocation."""
    buf = getattr(_local, "buf", None)
    if buf is None or len(buf) != size:
        buf = _local.buf = np.empty(size, dtype=np.float32)
    return buf


BLOCK = 1024
"""Tokens per block of the two-level inverse CDF: a running sum is sequential (about 10 ms over 151,936 float64
values on a loaded core), block sums are vectorised, so only one block is ever summed in turn."""


def _inverse_cdf(probs: np.ndarray, u: float) -> int:
    """The index where `u` (in [0, 1)) of the total mass of `probs` (unnormalised, >= 0, some > 0) falls: the
    blocks' sums first, then the running sum inside the one block it falls in. Never an index of zero mass."""
    full = len(probs) // BLOCK * BLOCK
    sums = probs[:full].reshape(-1, BLOCK).sum(axis=1)  # pairwise in float32: SIMD, ~1e-7 relative error
    if full < len(probs):
        sums = np.append(sums, probs[full:].sum())
    bounds = np.cumsum(sums, dtype=np.float64)
    target = u * bounds[-1]
    b = int(np.searchsorted(bounds, target, side="right"))
    if b >= len(bounds):  # u * total rounded up to the total: the last block with mass
        b = int(np.flatnonzero(sums)[-1])
    seg = probs[b * BLOCK : (b + 1) * BLOCK]
    inside = np.cumsum(seg, dtype=np.float64)
    i = int(np.searchsorted(inside, target - (bounds[b - 1] if b else 0.0), side="right"))
    if i >= len(seg) or seg[i] == 0:  # rounding at the block's end: its last token with mass
        i = int(np.flatnonzero(seg)[-1])
    return b * BLOCK + i


def _top_p(probs: np.ndarray, top_p: float) -> tuple[np.ndarray, np.ndarray]:
    """The smallest set of most likely tokens whose mass reaches `top_p` (of `probs`, unnormalised, the largest
    1; ties broken by id), as their ids and probabilities. No full sort (most of a top-p draw's time in torch):
    thresholds a tenth lower each time until the tokens above one hold more than `top_p`; those above the one
    before are kept unsorted, and only the tokens between the two are sorted to find where the set ends."""
    target = top_p * float(probs.sum())
    sure, sure_mass = np.inf, 0.0  # tokens >= sure hold at most target: all kept
    threshold = 0.1
    while True:
        ids = np.flatnonzero(probs >= threshold)
        mass = float(probs[ids].sum(dtype=np.float64))
        if mass > target or threshold == 0:
            break
        sure, sure_mass = threshold, mass
        threshold = threshold * 0.1 if threshold > 1e-30 else 0.0
    above = probs[ids] >= sure
    band = ids[~above]
    band = band[np.argsort(-probs[band], kind="stable")]
    before = sure_mass + np.cumsum(probs[band], dtype=np.float64) - probs[band]  # mass of the more likely tokens
    ids = np.concatenate([ids[above], band[: int(np.searchsorted(before, target, side="right"))]])
    return ids, probs[ids]  # never empty: the most likely token has nothing before it


def _sample_torch(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    """sample_token in torch ops on the logits' device."""
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
