"""Linear layers whose weights are packed once for oneDNN: a CPU float32 decoding step's matrix products run
about twice as fast, with the same results up to float rounding.

transformers' `nn.Linear` multiplies through MKL's sgemm. A decoding step multiplies a handful of rows (one per
sequence) by every weight matrix, a shape where sgemm reaches a small part of the CPU's throughput: on this
project's machine (AMD EPYC, AVX-512) Qwen2.5-Coder's 4864x896 MLP weight at 8 rows takes 3.0 ms through
`nn.Linear` and 1.2 ms through PyTorch's oneDNN linear given the weight reordered into oneDNN's blocked layout
once. `pack_linears` swaps a model's float32 CPU `nn.Linear` modules for `PackedLinear`, which keeps only the
packed weight; a weight tied to another module (an output layer sharing the input embeddings) stays shared and
its packed copy is the one extra (Qwen2.5-Coder-0.5B: 0.5 GB on 2.4 GB). transformers maps a safetensors file's
weights instead of reading them, and the mapping lives while any tensor views it, so the parameters left are
copied out of it: the replaced weights' pages are then released. `benchmarks/packed_linear.py` times whole
decoding runs both ways.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

ROWS_HINT = 8
"""The row count oneDNN's weight layout is chosen for: a decoding batch. Any row count works with it (measured
from 1 to 80 rows, never slower than `nn.Linear`)."""


def available() -> bool:
    """Whether this PyTorch build has the oneDNN linear operators `PackedLinear` calls."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        torch.ops.mkldnn._reorder_linear_weight  # noqa: B018 -- looking an operator up raises if it is missing
        torch.ops.mkldnn._linear_pointwise  # noqa: B018
    except (AttributeError, RuntimeError):
        return False
    return True


class PackedLinear(nn.Module):
    """`nn.Linear`'s forward on a weight packed for oneDNN (float32, CPU); `weight` gives the dense weight back."""

    def __init__(self, linear: nn.Linear, *, keep_weight: bool = False) -> None:
        """Pack `linear`'s weight. With `keep_weight` (the weight is shared with another module) the dense
        parameter is kept too, so the sharing holds; otherwise only the packed copy is."""
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), ROWS_HINT)
        self.bias = linear.bias
        self.tied = linear.weight if keep_weight else None

    @property
    def weight(self) -> torch.Tensor:
        """The dense `[out_features, in_features]` weight: the shared parameter, or unpacked on demand."""
        return self.tied if self.tied is not None else self.packed.to_dense()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`x @ weight.T + bias` over the last dimension, as `nn.Linear`."""
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        """The shape, as `nn.Linear` prints it."""
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def pack_linears(model: Any) -> int:
    """Replace every float32 CPU `nn.Linear` of `model` by a `PackedLinear`; how many were replaced (0 when
    this PyTorch has no oneDNN). Weights other modules also hold (tied embeddings) stay shared; the remaining
    parameters are copied into memory of their own (see the module's docstring)."""
    if not available():
        return 0
    owners: dict[int, int] = {}
    for module in model.modules():
        for param in module.parameters(recurse=False):
            owners[id(param)] = owners.get(id(param), 0) + 1
    swaps = [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent._modules.items()  # named_children() would name a twice-held module once
        if type(child) is nn.Linear and child.weight.dtype == torch.float32 and child.weight.device.type == "cpu"
    ]
    packed: dict[int, PackedLinear] = {}  # a module reached by two paths is packed once
    for parent, name, child in swaps:
        if id(child) not in packed:
            packed[id(child)] = PackedLinear(child, keep_weight=owners[id(child.weight)] > 1)
        setattr(parent, name, packed[id(child)])
    if packed:
        for param in model.parameters():  # off the file mapping, so the replaced weights' pages can go
            param.data = param.data.clone()
    return len(packed)
