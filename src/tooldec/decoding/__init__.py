"""Decoding with a model: mode switching between free text and guided calls, sampling, jump-forward.

`CallController` is one sequence's policy (torch-free: packed masks, accept, rollback, forced tokens);
`Decoder` is tooldec's own generation loop with a KV cache and a batch; `ToolDecLogitsProcessor` plugs the
same controllers into `model.generate(...)`. The policy imports without torch; the torch parts load on use.
"""

from typing import Any

from tooldec.decoding.controller import CallController, CallEvent, FreeController, Mode, Policy, fill_bitmasks
from tooldec.decoding.trigger import Trigger

_TORCH_NAMES = {"SamplingParams", "sample_token", "apply_token_bitmask_inplace"}

__all__ = [
    "CallController",
    "CallEvent",
    "FreeController",
    "Mode",
    "Policy",
    "SamplingParams",
    "Trigger",
    "apply_token_bitmask_inplace",
    "fill_bitmasks",
    "sample_token",
]


def __getattr__(name: str) -> Any:
    """Load the torch-based sampling names on first use."""
    if name in _TORCH_NAMES:
        from tooldec.decoding import sampling

        return getattr(sampling, name)
    raise AttributeError(f"module 'tooldec.decoding' has no attribute {name!r}")
