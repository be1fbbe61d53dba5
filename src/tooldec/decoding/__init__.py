"""Decoding with a model: mode switching between free text and guided calls, sampling, jump-forward.

`CallController` is one sequence's policy (which tokens may come next, which are forced); `Decoder` is
tooldec's own generation loop with a KV cache and a batch; `ToolDecLogitsProcessor` plugs the same
controllers into `model.generate(...)`.
"""

from tooldec.decoding.controller import CallController, CallEvent, FreeController, Mode
from tooldec.decoding.sampling import SamplingParams, sample_token
from tooldec.decoding.trigger import Trigger

__all__ = ["CallController", "CallEvent", "FreeController", "Mode", "SamplingParams", "Trigger", "sample_token"]
