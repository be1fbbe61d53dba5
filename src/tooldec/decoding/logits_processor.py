"""ToolDec as a Hugging Face `LogitsProcessor`: `model.generate(..., logits_processor=[ToolDecLogitsProcessor(...)])`.

Each row of the batch has its own CallController. Before scoring step n the processor feeds every row the
token generated at step n-1, then masks the row's logits; a finished row may only emit EOS, so `generate`
stops at the end of the call. Forced tokens are not jumped over here (generate samples one token per pass);
tooldec's own Decoder does that.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from transformers import LogitsProcessor

from tooldec.decoding.controller import CallController, CallEvent, fill_bitmasks
from tooldec.decoding.sampling import apply_token_bitmask_inplace


class ToolDecLogitsProcessor(LogitsProcessor):
    """Masks each row's logits to the tokens its controller allows (one batched fill, one in-place apply)."""

    def __init__(self, controllers: Sequence[CallController]) -> None:
        """One controller per row of the batch given to `generate` (times num_return_sequences)."""
        self.controllers = list(controllers)
        self._prompt_length: int | None = None
        self.events: list[list[CallEvent]] = [[] for _ in self.controllers]
        self._bitmask: np.ndarray | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """Feed the last generated token to each row's controller, then mask the rows' scores in place."""
        if input_ids.shape[0] != len(self.controllers):
            raise ValueError(f"batch of {input_ids.shape[0]} rows but {len(self.controllers)} controllers")
        if self._prompt_length is None:
            self._prompt_length = input_ids.shape[1]
        elif input_ids.shape[1] > self._prompt_length:
            last = input_ids[:, -1].tolist()
            for row, ctrl in enumerate(self.controllers):
                if not ctrl.done:
                    event = ctrl.accept_token(int(last[row]))
                    if event is not None:
                        self.events[row].append(event)
        if self._bitmask is None:
            words = (self.controllers[0].vocab.size + 31) // 32 if self.controllers else 0
            self._bitmask = np.empty((len(self.controllers), words), dtype=np.int32)
        fill_bitmasks(self.controllers, self._bitmask)
        apply_token_bitmask_inplace(scores, self._bitmask)
        return scores
