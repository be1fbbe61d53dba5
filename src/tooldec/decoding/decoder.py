"""tooldec's own generation loop: a batch of sequences, a KV cache, jump-forward and tool results in place.

Every step each live row's policy writes its packed mask into one `int32[B, W]` array (one batched call), the
mask is applied to the step's logits in place (one kernel), and each row samples. Each live row contributes its pending tokens (one sampled token, or several when a forced stretch
or a tool's result is appended); rows are left-padded to the same width and the padding is masked out, so
one forward pass serves the whole batch however many tokens each row adds. Position ids follow the
attention mask, so padding never shifts a row's positions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from tooldec.decoding.controller import CallEvent, Policy, fill_bitmasks
from tooldec.decoding.kv_cache import GrowingCache
from tooldec.decoding.prefix import PromptPrefix
from tooldec.decoding.sampling import SamplingParams, apply_token_bitmask_inplace, sample_token
from tooldec.vocab import Vocabulary

Controller = Policy
OnCall = Callable[[int, CallEvent], str | None]
"""Called when row `int` finishes a call: returns the text to append (a tool's result), or None to end the row."""


@dataclass
class Generation:
    """One sequence's output and what it cost."""

    tokens: list[int]
    text: str
    events: list[CallEvent]
    finish_reason: str
    sampled_tokens: int = 0
    forced_tokens: int = 0
    injected_tokens: int = 0
    forward_passes: int = 0
    seconds: float = 0.0
    model_seconds: float = 0.0
    prefix_tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class Decoder:
    """Generates with a causal LM under CallControllers (one per sequence)."""

    def __init__(self, model: Any, vocab: Vocabulary, *, pad_id: int | None = None) -> None:
        """`model` is a transformers causal LM (or anything with the same forward signature)."""
        self.model = model
        self.vocab = vocab
        self.pad_id = pad_id if pad_id is not None else min(vocab.eos_ids)
        self.device = next(model.parameters()).device

    @torch.inference_mode()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        controllers: Sequence[Controller],
        params: SamplingParams = SamplingParams(),
        *,
        max_new_tokens: int = 256,
        jump_forward: bool = True,
        on_call: OnCall | None = None,
        prefix: PromptPrefix | None = None,
    ) -> list[Generation]:
        """Decode every prompt until its controller is done or `max_new_tokens` are generated.

        `on_call(row, event)` runs when a row finishes a call; the text it returns (a tool's result) is
        appended to that row in text mode and decoding goes on; None ends the row. With `prefix`, the
        leading tokens all prompts share with it come from its cache instead of a forward pass.
        """
        if len(prompts) != len(controllers):
            raise ValueError(f"{len(prompts)} prompts but {len(controllers)} controllers")
        if any(not p for p in prompts):
            raise ValueError("every prompt needs at least one token")
        start = time.perf_counter()
        n = len(prompts)
        gens = [Generation([], "", [], "length") for _ in range(n)]
        live = [not c.done for c in controllers]
        generator = params.generator()
        mask_cols: list[torch.Tensor] = []
        reused = prefix.shared(prompts) if prefix is not None else 0
        cache = prefix.cache(n, reused) if prefix is not None and reused else GrowingCache()
        if reused:
            mask_cols.append(torch.ones((n, reused), dtype=torch.long))
        pending: list[list[int]] = [list(p[reused:]) for p in prompts]
        model_time = 0.0
        bitmask = np.empty((n, (self.vocab.size + 31) // 32), dtype=np.int32)
        for row in range(n):
            if live[row] and jump_forward:
                self._take_forced(row, controllers[row], gens[row], pending[row], on_call)
        while any(live):
            width = max(len(p) for p in pending)
            ids = torch.full((n, width), self.pad_id, dtype=torch.long)
            step_mask = torch.zeros((n, width), dtype=torch.long)
            for row, toks in enumerate(pending):
                if toks:
                    ids[row, width - len(toks) :] = torch.tensor(toks, dtype=torch.long)
                    step_mask[row, width - len(toks) :] = 1
            mask_cols.append(step_mask)
            attention = torch.cat(mask_cols, dim=1)
            positions = (attention.cumsum(dim=1) - 1).clamp(min=0)[:, -width:]
            t_model = time.perf_counter()
            out = self.model(
                input_ids=ids.to(self.device),
                attention_mask=attention.to(self.device),
                position_ids=positions.to(self.device),
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            cache = out.past_key_values
            logits = out.logits[:, -1, :].float().cpu()
            model_time += time.perf_counter() - t_model
            for row in range(n):
                if live[row]:
                    gens[row].forward_passes += 1
            pending = [[] for _ in range(n)]
            rows = []
            for row in range(n):
                if live[row] and gens[row].sampled_tokens + gens[row].forced_tokens >= max_new_tokens:
                    live[row] = False
                elif live[row]:
                    rows.append(row)
            if not rows:
                break
            fill_bitmasks([controllers[r] for r in rows], bitmask, rows)
            apply_token_bitmask_inplace(logits, bitmask, rows)
            for row in rows:
                ctrl, gen = controllers[row], gens[row]
                token = sample_token(logits[row], params, generator)
                gen.sampled_tokens += 1
                pending[row].append(token)
                self._feed(row, ctrl, gen, token, pending[row], on_call)
                if not ctrl.done and jump_forward:
                    self._take_forced(row, ctrl, gen, pending[row], on_call)
                if ctrl.done:
                    live[row] = False
                    gen.finish_reason = "stop"
        elapsed = time.perf_counter() - start
        for ctrl, gen in zip(controllers, gens, strict=True):
            gen.tokens = list(ctrl.tokens)
            gen.text = self.vocab.decode(t for t in ctrl.tokens if t not in self.vocab.eos_ids).decode(
                "utf-8", errors="replace"
            )
            gen.events = list(ctrl.events)
            gen.seconds = elapsed
            gen.model_seconds = model_time
            gen.prefix_tokens = reused
        return gens

    def _feed(
        self,
        row: int,
        ctrl: Controller,
        gen: Generation,
        token: int,
        pending: list[int],
        on_call: OnCall | None,
    ) -> None:
        """Give one token to the controller; a finished call may append the tool's result."""
        event = ctrl.accept_token(token)
        if event is None or on_call is None:
            return
        result = on_call(row, event)
        if result is None:
            ctrl.stop()
        elif result and not ctrl.done:
            tokens = self.vocab.encode(result)
            ctrl.inject(tokens)
            pending.extend(tokens)
            gen.injected_tokens += len(tokens)

    def _take_forced(
        self,
        row: int,
        ctrl: Controller,
        gen: Generation,
        pending: list[int],
        on_call: OnCall | None,
    ) -> None:
        """Append forced tokens (a forced trigger, then the call's forced stretch) without sampling them."""
        while not ctrl.done and (forced := ctrl.forced()):
            for token in forced:
                pending.append(token)
                gen.forced_tokens += 1
                self._feed(row, ctrl, gen, token, pending, on_call)
