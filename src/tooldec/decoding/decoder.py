"""tooldec's own generation loop: a batch of sequences, a KV cache, jump-forward and tool results in place.

Every step each live row's policy writes its packed mask into one `int32[B, W]` array (one batched call), the
mask is applied to the step's logits in place (one kernel), and each row samples. Each live row contributes its pending tokens (one sampled token, or several when a forced stretch
or a tool's result is appended); rows are left-padded to the same width and the padding is masked out, so
one forward pass serves the whole batch however many tokens each row adds. Position ids follow the
attention mask, so padding never shifts a row's positions.

`ContinuousBatch` is the same step for rows that join and leave between steps (a server's requests): each has
its own policy, sampling parameters and token budget, joiners are prefilled in a pass of their own and slotted
into a cache whose rows come and go without copying the others (`SlotCache`). Both keep a prompt prefix the rows
share once for the whole batch when the model allows it (`shared_attention`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from tooldec.decoding.controller import CallEvent, Policy
from tooldec.decoding.kv_cache import GrowingCache, cache_keyword, returned_cache
from tooldec.decoding.prefix import PromptPrefix
from tooldec.decoding.sampling import SamplingParams, mask_rows, sample_token
from tooldec.decoding.shared_attention import enable as enable_shared_attention
from tooldec.decoding.shared_attention import suffix_mask
from tooldec.vocab import Vocabulary

Controller = Policy
OnCall = Callable[[int, CallEvent], str | None]
"""Called when row `int` finishes a call: returns the text to append (a tool's result), or None to end the row."""
OnToken = Callable[[int, CallEvent | None], None]
"""Called after the policy accepts a token (sampled or forced), with the call that token completed, if any."""


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
    guidance_seconds: float = 0.0
    """This row's guidance work: accepting tokens, forced stretches, and its share of each step's mask fill and
    apply (the batch's fill + apply time divided among the rows that sampled)."""
    prefix_tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class Decoder:
    """Generates with a causal LM under CallControllers (one per sequence)."""

    def __init__(self, model: Any, vocab: Vocabulary, *, pad_id: int | None = None) -> None:
        """`model` is a transformers causal LM (or anything with the same forward signature). A Llama, Qwen2 or
        Qwen3 model under SDPA is switched to shared-prefix attention (`shares_prefix` says whether), so rows
        that start from one `PromptPrefix` read its keys and values once a step instead of a copy each."""
        self.model = model
        self.vocab = vocab
        self.pad_id = pad_id if pad_id is not None else min(vocab.eos_ids)
        self.device = next(model.parameters()).device
        self._cache_keyword = cache_keyword(model)
        self.shares_prefix = enable_shared_attention(model)

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
        explain: bool = False,
    ) -> list[Generation]:
        """Decode every prompt until its controller is done or `max_new_tokens` are generated.

        Each pass feeds every row at most `feed_width` of its pending tokens, so one row's long stretch (a
        tool's result, a forced stretch) does not make the whole batch compute it padded; that row samples
        once its stretch is in.

        With `explain`, every sampled step whose mask banned a token is recorded in `extra["guided_steps"]`
        as (position, probability mass the mask removed, the token the model preferred, the token taken,
        whether the preferred token was banned); the softmax this needs is computed only then.

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
        generators = params.row_generators(n)
        reused = prefix.shared(prompts) if prefix is not None else 0
        shared = None  # the prefix's keys and values, once for all rows (shared-prefix attention)
        cache, attention = GrowingCache(), None
        if prefix is not None and reused and self.shares_prefix:
            shared = prefix.head(reused).layers
        elif prefix is not None and reused:
            cache, attention = prefix.cache(n, reused), torch.ones((n, reused), dtype=torch.long)
        pending: list[list[int]] = [list(p[reused:]) for p in prompts]
        model_time = 0.0
        bitmask = np.empty((n, (self.vocab.size + 31) // 32), dtype=np.int32)
        for row in range(n):
            if live[row] and jump_forward:
                self._take_forced(row, controllers[row], gens[row], pending[row], on_call)
        while any(live):
            pending = [p if live[row] else [] for row, p in enumerate(pending)]  # a finished row feeds nothing
            width = feed_width([len(p) for p in pending if p])
            t_model = time.perf_counter()
            logits, attention, cache = self._forward([p[:width] for p in pending], attention, cache, shared)
            model_time += time.perf_counter() - t_model
            for row in range(n):
                if live[row]:
                    gens[row].forward_passes += 1
            pending = [p[width:] for p in pending]  # a long stretch (a tool's result) goes on next pass
            rows = []
            for row in range(n):
                if live[row] and gens[row].sampled_tokens + gens[row].forced_tokens >= max_new_tokens:
                    live[row] = False
                elif live[row] and not pending[row]:
                    rows.append(row)
            if not rows:
                continue
            raw = logits[rows].clone() if explain else None
            t_mask = time.perf_counter()
            mask_rows([controllers[r] for r in rows], logits, bitmask, rows)
            share = (time.perf_counter() - t_mask) / len(rows)
            for i, row in enumerate(rows):
                gens[row].guidance_seconds += share
                ctrl, gen = controllers[row], gens[row]
                token = sample_token(logits[row], params, generators[row])
                if raw is not None:
                    _explain(gen, raw[i], logits[row], token)
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
            self._finish(ctrl, gen)
            gen.seconds = elapsed
            gen.model_seconds = model_time
            gen.prefix_tokens = reused
        return gens

    def _forward(
        self,
        pending: Sequence[Sequence[int]],
        attention: torch.Tensor | None,
        cache: Any,
        shared: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """One forward pass over each row's pending tokens, left-padded to the longest (a row may add none).

        `attention` is the `[rows, cached]` mask of what `cache` holds (None when it holds nothing); returns the
        last position's logits (float32, CPU, `[rows, V]`), the mask with this step's columns, and the cache.
        With `shared` (every layer's prefix keys and values, batch 1: tooldec.decoding.shared_attention), `cache`
        holds only the rows' own positions, which start after the prefix."""
        n = len(pending)
        width = max(len(p) for p in pending)
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        step_mask = torch.zeros((n, width), dtype=torch.long)
        for row, toks in enumerate(pending):
            if toks:
                ids[row, width - len(toks) :] = torch.tensor(toks, dtype=torch.long)
                step_mask[row, width - len(toks) :] = 1
        attention = step_mask if attention is None else torch.cat([attention, step_mask], dim=1)
        offset = shared[0][0].shape[-2] if shared else 0
        positions = (offset + attention.cumsum(dim=1) - 1).clamp(min=0)[:, -width:]
        extra: dict[str, Any] = {self._cache_keyword: cache}
        if shared is not None:
            extra["shared_prefix"] = shared
        out = self.model(
            input_ids=ids.to(self.device),
            attention_mask=(attention if shared is None else suffix_mask(attention, width)).to(self.device),
            position_ids=positions.to(self.device),
            use_cache=True,
            logits_to_keep=1,
            **extra,
        )
        return out.logits[:, -1, :].float().cpu(), attention, returned_cache(out)

    def _finish(self, ctrl: Controller, gen: Generation) -> None:
        """Copy a finished row's tokens, text and calls from its controller into its Generation."""
        gen.tokens = list(ctrl.tokens)
        gen.text = self.vocab.decode(t for t in ctrl.tokens if t not in self.vocab.eos_ids).decode(
            "utf-8", errors="replace"
        )
        gen.events = list(ctrl.events)

    def _feed(
        self,
        row: int,
        ctrl: Controller,
        gen: Generation,
        token: int,
        pending: list[int],
        on_call: OnCall | None,
        on_token: OnToken | None = None,
    ) -> None:
        """Give one token to the controller; a finished call may append the tool's result."""
        t_accept = time.perf_counter()
        event = ctrl.accept_token(token)
        gen.guidance_seconds += time.perf_counter() - t_accept
        if on_token is not None:
            on_token(token, event)
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
        on_token: OnToken | None = None,
    ) -> None:
        """Append forced tokens (a forced trigger, then the call's forced stretch) without sampling them."""
        while not ctrl.done:
            t_forced = time.perf_counter()
            forced = ctrl.forced()
            gen.guidance_seconds += time.perf_counter() - t_forced
            if not forced:
                break
            for token in forced:
                pending.append(token)
                gen.forced_tokens += 1
                self._feed(row, ctrl, gen, token, pending, on_call, on_token)


STEP_OVERHEAD_TOKENS = 16
"""A forward pass's fixed cost (Python, kernel launches) in token positions, for `feed_width`."""


def _explain(gen: Generation, raw: torch.Tensor, masked: torch.Tensor, token: int) -> None:
    """Record a step whose mask banned tokens: where, the model's probability mass on them, its top token."""
    allowed = torch.isfinite(masked)
    if bool(allowed.all()):
        return
    removed = float(1.0 - torch.softmax(raw, dim=-1)[allowed].sum())
    preferred = int(torch.argmax(raw))
    step = (gen.sampled_tokens + gen.forced_tokens, max(removed, 0.0), preferred, token, not bool(allowed[preferred]))
    gen.extra.setdefault("guided_steps", []).append(step)


def feed_width(pending: Sequence[int], overhead: int = STEP_OVERHEAD_TOKENS) -> int:
    """How many pending tokens each row feeds in one pass, given how many each has.

    Rows are padded to the pass's width, so one row's forced stretch of 20 tokens would make 31 others compute
    20 positions each. The width maximises tokens fed per position computed (plus a fixed cost per pass): alone
    a row feeds its whole stretch (jump-forward's saving), in a large batch a long stretch is fed over several
    steps while the row waits to sample."""
    rows = len(pending)
    best, best_rate = 1, 0.0
    for width in sorted(set(pending)):
        rate = sum(min(p, width) for p in pending) / (rows * width + overhead)
        if width and rate > best_rate:
            best, best_rate = width, rate
    return best


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` shares with `b`, leaving `a` at least one token of its own."""
    n, limit = 0, min(len(a) - 1, len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


class SlotLayer(DynamicLayer):
    """One layer's keys and values for a batch whose rows come and go: buffers with spare rows and columns.

    The live rows are the first `rows` of the buffers and `keys`/`values` are views of them, so a departing row
    costs one row's copy (the last row moves into its slot) and a joining row one row's write, not a copy of the
    whole cache."""

    keys: torch.Tensor
    values: torch.Tensor

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append this step's states after every live row's cached columns."""
        rows, used = self.keys.shape[0], self.keys.shape[-2]
        self._reserve(rows, used + key_states.shape[-2])
        total = used + key_states.shape[-2]
        self._k[:rows, :, used:total] = key_states
        self._v[:rows, :, used:total] = value_states
        self._view(rows, total)
        return self.keys, self.values

    def start(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Hold exactly these rows (batch, heads, positions, head dim)."""
        self.is_initialized = True
        self.device = keys.device
        self._k = keys.new_zeros((0, 0, 0, 0))
        self._v = values.new_zeros((0, 0, 0, 0))
        self.keys, self.values = self._k, self._v
        self._reserve(keys.shape[0], keys.shape[-2], like=(keys, values))
        self._k[: keys.shape[0], :, : keys.shape[-2]] = keys
        self._v[: keys.shape[0], :, : keys.shape[-2]] = values
        self._view(keys.shape[0], keys.shape[-2])

    def add_rows(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Append rows whose positions end where the live rows' do (`keys` no longer than the cache: see
        `pad_left`); their columns before that are zeros."""
        rows, used = self.keys.shape[0], self.keys.shape[-2]
        extra, length = keys.shape[0], keys.shape[-2]
        self._reserve(rows + extra, used)
        for buf, new in ((self._k, keys), (self._v, values)):
            buf[rows : rows + extra, :, : used - length] = 0
            buf[rows : rows + extra, :, used - length : used] = new
        self._view(rows + extra, used)

    def pad_left(self, columns: int) -> None:
        """Insert `columns` empty (zero) positions before every live row's cached ones."""
        rows, used = self.keys.shape[0], self.keys.shape[-2]
        keys, values = self.keys.clone(), self.values.clone()
        self._reserve(rows, used + columns)
        self._k[:rows, :, :columns] = 0
        self._v[:rows, :, :columns] = 0
        self._k[:rows, :, columns : columns + used] = keys
        self._v[:rows, :, columns : columns + used] = values
        self._view(rows, used + columns)

    def prepend(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Insert the same positions (`keys`/`values` of batch 1) before every live row's cached ones."""
        rows, used, extra = self.keys.shape[0], self.keys.shape[-2], keys.shape[-2]
        own_keys, own_values = self.keys.clone(), self.values.clone()
        self._reserve(rows, used + extra)
        for buf, head, own in ((self._k, keys, own_keys), (self._v, values, own_values)):
            buf[:rows, :, :extra] = head
            buf[:rows, :, extra : extra + used] = own
        self._view(rows, used + extra)

    def drop_left(self, columns: int) -> None:
        """Forget the first `columns` positions of every row (positions no live row attends to)."""
        rows, used = self.keys.shape[0], self.keys.shape[-2]
        keys, values = self.keys[:, :, columns:].clone(), self.values[:, :, columns:].clone()
        self._k[:rows, :, : used - columns] = keys
        self._v[:rows, :, : used - columns] = values
        self._view(rows, used - columns)

    def remove_row(self, row: int) -> None:
        """Drop one live row: the last row moves into its slot."""
        rows, used = self.keys.shape[0], self.keys.shape[-2]
        if row != rows - 1:
            self._k[row, :, :used] = self._k[rows - 1, :, :used]
            self._v[row, :, :used] = self._v[rows - 1, :, :used]
        self._view(rows - 1, used)

    def _reserve(self, rows: int, columns: int, like: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
        """Make the buffers hold at least `rows` x `columns` (doubling), keeping the live part."""
        cap_rows, cap_cols = self._k.shape[0], self._k.shape[2]
        if rows <= cap_rows and columns <= cap_cols:
            return
        live_rows, live_cols = self.keys.shape[0], self.keys.shape[-2]
        new_rows = max(rows, 2 * cap_rows if rows > cap_rows else cap_rows, 4)
        new_cols = max(columns, 2 * cap_cols if columns > cap_cols else cap_cols, 64)
        grown = []
        for old, src in zip((self._k, self._v), like or (self.keys, self.values), strict=True):
            buf = src.new_zeros((new_rows, src.shape[1], new_cols, src.shape[-1]))
            if live_rows and live_cols and like is None:
                buf[:live_rows, :, :live_cols] = old[:live_rows, :, :live_cols]
            grown.append(buf)
        self._k, self._v = grown

    def _view(self, rows: int, columns: int) -> None:
        self.keys = self._k[:rows, :, :columns]
        self.values = self._v[:rows, :, :columns]


class SlotCache(DynamicCache):
    """The KV cache of a ContinuousBatch: SlotLayers that rows join and leave between steps."""

    def __init__(self, layers: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """A cache holding `layers`' states (batch, heads, positions, head dim)."""
        self.slots: list[SlotLayer] = []
        for keys, values in layers:
            layer = SlotLayer()
            layer.start(keys, values)
            self.slots.append(layer)
        Cache.__init__(self, layers=list(self.slots))


@dataclass
class BatchRow:
    """One sequence of a ContinuousBatch: its policy, how it samples, its limits and what it produced so far.

    `on_token(token, event)` runs in the stepping thread after each token the policy accepts (sampled or
    forced), with the call that token completed, if any."""

    prompt: list[int]
    policy: Controller
    params: SamplingParams
    max_new_tokens: int
    jump_forward: bool = True
    on_token: Callable[[int, CallEvent | None], None] | None = None
    on_call: Callable[[CallEvent], str | None] | None = None
    gen: Generation = field(default_factory=lambda: Generation([], "", [], "length"))
    generator: torch.Generator | None = None
    pending: list[int] = field(default_factory=list)
    finished: bool = False
    error: str | None = None


class RowBatch:
    """What every continuous batch shares, whatever runs the model: rows join between steps (each with its own
    policy, sampling parameters and token budget) and leave when they finish or their client goes; each is
    sampled and fed through the Decoder's policy steps. Subclasses run the model (`step`)."""

    def __init__(self, decoder: Decoder) -> None:
        self.decoder = decoder
        self.rows: list[BatchRow] = []
        self.joining: list[BatchRow] = []
        self._bitmask = np.empty((0, (decoder.vocab.size + 31) // 32), dtype=np.int32)

    def __len__(self) -> int:
        """Rows live or waiting to join."""
        return len(self.rows) + len(self.joining)

    def add(
        self,
        prompt: Sequence[int],
        policy: Controller,
        params: SamplingParams = SamplingParams(),
        *,
        max_new_tokens: int = 256,
        jump_forward: bool = True,
        on_token: Callable[[int, CallEvent | None], None] | None = None,
        on_call: Callable[[CallEvent], str | None] | None = None,
    ) -> BatchRow:
        """Queue a sequence; it joins the batch at the next step. `on_call` works as in `Decoder.generate`."""
        if not prompt:
            raise ValueError("a prompt needs at least one token")
        row = BatchRow(list(prompt), policy, params, max_new_tokens, jump_forward, on_token, on_call)
        row.generator = params.generator()
        row.pending = list(prompt)
        self.joining.append(row)
        return row

    def remove(self, row: BatchRow) -> None:
        """Drop a row (its client left): it takes no further part, and its place is freed at the next step."""
        row.finished = True
        if row in self.joining:
            self.joining.remove(row)

    def _sample_rows(self, order: list[BatchRow], logits: torch.Tensor, finished: list[BatchRow]) -> list[BatchRow]:
        """After a forward pass whose logits row i is `order[i]`'s: end the rows that are done or out of tokens,
        fill and apply the others' masks in one call each, and sample them; returns `finished` with the rows
        that ended."""
        sampling: list[int] = []
        for i, row in enumerate(order):
            if row.policy.done:
                self._end(row, "stop", finished)
            elif row.gen.sampled_tokens + row.gen.forced_tokens >= row.max_new_tokens:
                self._end(row, "length", finished)
            elif not row.pending:  # else its forced tokens are still being fed: no logits to sample from yet
                sampling.append(i)
        if sampling:
            if self._bitmask.shape[0] < len(order):
                self._bitmask = np.empty((2 * len(order), self._bitmask.shape[1]), dtype=np.int32)
            mask_rows([order[i].policy for i in sampling], logits, self._bitmask[: len(order)], sampling)
        for i in sampling:
            row = order[i]
            self._safely(row, lambda r, i=i: self._sample(r, logits[i]))  # type: ignore[misc]
            if row.finished:
                finished.append(row)
            elif row.policy.done:
                self._end(row, "stop", finished)
        return finished

    def _jump_joiners(self) -> tuple[list[BatchRow], list[BatchRow]]:
        """Take the rows waiting to join, each first taking the text its policy forces; returns (those still
        live, those that finished on the way)."""
        finished: list[BatchRow] = []
        joining, self.joining = self.joining, []
        for row in joining:
            if row.jump_forward and not row.policy.done:
                self._safely(row, self._take_forced)
                if row.finished:
                    finished.append(row)
        return [r for r in joining if not r.finished], finished

    def _sample(self, row: BatchRow, logits: torch.Tensor) -> None:
        """Sample the row's next token and take what follows it (a forced stretch, a tool's result)."""
        token = sample_token(logits, row.params, row.generator)
        row.gen.sampled_tokens += 1
        row.pending.append(token)
        self.decoder._feed(0, row.policy, row.gen, token, row.pending, self._on_call(row), row.on_token)
        if not row.policy.done and row.jump_forward:
            self._take_forced(row)

    def _take_forced(self, row: BatchRow) -> None:
        self.decoder._take_forced(0, row.policy, row.gen, row.pending, self._on_call(row), row.on_token)

    @staticmethod
    def _on_call(row: BatchRow) -> OnCall | None:
        on_call = row.on_call
        return None if on_call is None else (lambda _row, event: on_call(event))

    def _safely(self, row: BatchRow, action: Callable[[BatchRow], None]) -> None:
        """Run one row's part of the step; an error ends that row (finish_reason "error"), not the batch."""
        try:
            action(row)
        except Exception as exc:  # noqa: BLE001 -- one row's failure must not take the others down
            row.error = f"{type(exc).__name__}: {exc}"
            row.finished = True
            row.gen.finish_reason = "error"
            self.decoder._finish(row.policy, row.gen)

    def _end(self, row: BatchRow, reason: str, finished: list[BatchRow]) -> None:
        row.finished = True
        row.gen.finish_reason = reason
        self.decoder._finish(row.policy, row.gen)
        finished.append(row)


class ContinuousBatch(RowBatch):
    """Continuous batching on a Decoder: rows join and leave between steps, each with its own policy,
    sampling parameters and token budget.

    A step runs the live rows' pending tokens through the model in one pass; rows added since the last step are
    prefilled in a second pass and their caches slotted in (left-padded to the batch's positions). Then, as in
    `Decoder.generate`, every row's mask is filled in one batched call, applied to the logits in place, and each
    row samples, takes its forced stretch and reports its tokens. Not thread-safe: call `add`, `remove` and
    `step` from one thread at a time (a server calls `step` in a worker thread and the others between steps).

    With a model under shared-prefix attention (`Decoder.shares_prefix`), rows that join an empty batch
    starting with a kept prompt prefix (the same system message and tools) keep its positions once for the
    whole batch (`shared_attention`); their caches hold only their own positions. A later row joins that
    sharing if its prompt starts with those positions; one that shares fewer makes the batch keep only what
    all rows share, the rest copied into every live row (all of it when that is shorter than `min_prefix`).
    """

    def __init__(self, decoder: Decoder, *, prefixes: int = 8, min_prefix: int = 32) -> None:
        """Decode with `decoder`'s model and vocabulary. The KV cache of the last `prefixes` prompts of at
        least `min_prefix` tokens is kept: a joining prompt that starts with `min_prefix` or more of the same
        tokens (the same system message and tools) takes those positions from it instead of a forward pass."""
        super().__init__(decoder)
        self.max_prefixes = prefixes
        self.min_prefix = min_prefix
        self._prefixes: OrderedDict[tuple[int, ...], PromptPrefix] = OrderedDict()
        self._cache: SlotCache | None = None
        self._attention: torch.Tensor | None = None
        self._shared: PromptPrefix | None = None  # the positions every row reads once (shared-prefix attention)

    @torch.inference_mode()
    def step(self) -> list[BatchRow]:
        """One decoding step of every row; returns the rows that finished in it (stop, length or error)."""
        self._compact()
        joining, finished = self._jump_joiners()
        parts: list[torch.Tensor] = []
        order: list[BatchRow] = []
        t_model = time.perf_counter()
        if self.rows:
            width = feed_width([len(r.pending) for r in self.rows])
            logits, self._attention, _ = self.decoder._forward(
                [r.pending[:width] for r in self.rows], self._attention, self._cache, self._shared_layers()
            )
            for row in self.rows:
                del row.pending[:width]
            parts.append(logits)
            order.extend(self.rows)
        if joining:
            logits, attention, cache = self._prefill(joining)
            self._join(joining, attention, cache)
            parts.append(logits)
            order.extend(joining)
        if not order:
            return finished
        seconds = time.perf_counter() - t_model
        logits = torch.cat(parts) if len(parts) > 1 else parts[0]
        for row in order:
            row.gen.forward_passes += 1
            row.gen.model_seconds += seconds
        return self._sample_rows(order, logits, finished)

    def _compact(self) -> None:
        """Free the slots of finished rows, and positions no live row attends to any more."""
        if self._cache is None or self._attention is None:
            return
        attention = self._attention
        for i in reversed(range(len(self.rows))):
            if not self.rows[i].finished:
                continue
            last = len(self.rows) - 1
            for layer in self._cache.slots:
                layer.remove_row(i)
            attention[i] = attention[last]
            attention = attention[:last]
            self.rows[i] = self.rows[last]
            self.rows.pop()
        if not self.rows:
            self._cache, self._attention, self._shared = None, None, None
            return
        used = attention.any(dim=0)
        first = int(used.int().argmax())
        if first >= 64 and 4 * first >= attention.shape[1]:
            for layer in self._cache.slots:
                layer.drop_left(first)
            attention = attention[:, first:]
        self._attention = attention

    def _prefill(self, rows: list[BatchRow]) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """Run joining rows' prompts (and forced tokens), each starting from its longest kept prompt prefix:
        the batch's shared positions (read, not copied), then any further kept positions copied into its cache."""
        self._share_within(rows)
        reuse = [self._longest_prefix(row.prompt) for row in rows]
        self._settle_shared(rows, reuse)
        start = len(self._shared.tokens) if self._shared is not None else 0
        spans = [(prefix, n - start) if prefix is not None and n > start else (None, 0) for prefix, n in reuse]
        longest = max(n for _, n in spans)
        attention: torch.Tensor | None = None
        cache = GrowingCache()
        if longest:
            attention = torch.zeros((len(rows), longest), dtype=torch.long)
            template = next(p for p, n in spans if n == longest)
            assert template is not None
            layers = []
            for i, pair in enumerate(template.layers):
                keys_values = []
                for which, like in enumerate(pair):  # keys, then values
                    keys_values.append(torch.cat([
                        like.new_zeros((1, like.shape[1], longest, like.shape[-1])) if prefix is None
                        else F.pad(prefix.layers[i][which][:, :, start : start + n], (0, 0, longest - n, 0))
                        for prefix, n in spans
                    ]))
                layers.append((keys_values[0], keys_values[1]))
            cache = GrowingCache(layers)
            for j, (_, n) in enumerate(spans):
                if n:
                    attention[j, longest - n :] = 1
        for row, (_, n) in zip(rows, spans, strict=True):
            row.pending = row.pending[start + n :]
            row.gen.prefix_tokens = start + n
        logits, attention, cache = self.decoder._forward(
            [r.pending for r in rows], attention, cache, self._shared_layers()
        )
        for row in rows:
            row.pending = []
        self._remember(rows, attention, cache)
        return logits, attention, cache

    def _settle_shared(self, rows: list[BatchRow], reuse: list[tuple[PromptPrefix | None, int]]) -> None:
        """Choose the positions the batch shares once joining `rows` are in: into an empty batch, the kept
        prefix the joiners reuse most, cut to what all of them share; into a sharing batch, what its rows and
        the joiners all share (the rest copied into the live rows first)."""
        if not self.decoder.shares_prefix:
            return
        if self._shared is None:
            if self.rows:
                return  # a batch that copies its prefixes goes on copying until it empties
            best = max(reuse, key=lambda pair: pair[1])[0]
            if best is None:
                return
            length = best.shared([row.prompt for row in rows])
            if length >= self.min_prefix:
                self._shared = best.head(length)
            return
        length = self._shared.shared([row.prompt for row in rows])
        if length < len(self._shared.tokens):
            self._unshare(length if length >= self.min_prefix else 0)

    def _unshare(self, keep: int) -> None:
        """Share only the first `keep` positions: copy the rest into every live row's cache, before its own."""
        assert self._shared is not None and self._cache is not None and self._attention is not None
        for layer, (keys, values) in zip(self._cache.slots, self._shared.layers, strict=True):
            layer.prepend(keys[:, :, keep:], values[:, :, keep:])
        moved = len(self._shared.tokens) - keep
        self._attention = F.pad(self._attention, (moved, 0), value=1)
        self._shared = self._shared.head(keep) if keep else None

    def _shared_layers(self) -> tuple[tuple[torch.Tensor, torch.Tensor], ...] | None:
        return self._shared.layers if self._shared is not None else None

    def _share_within(self, rows: list[BatchRow]) -> None:
        """Joining prompts that start alike (requests arriving together with the same system message): their
        longest common start, if longer than any kept prefix, is run once (from the longest kept prefix it
        extends) and kept before they join."""
        if not self.max_prefixes or len(rows) < 2:
            return
        for row in rows:
            prompt = row.prompt
            common = max(_common(prompt, other.prompt) for other in rows if other is not row)
            base, known = self._longest_prefix(prompt)
            if common >= self.min_prefix and common > known:
                prefix = PromptPrefix.build(self.decoder.model, prompt[:common], base=base)
                self._prefixes[prefix.tokens] = prefix
                while len(self._prefixes) > self.max_prefixes:
                    self._prefixes.popitem(last=False)

    def _longest_prefix(self, prompt: list[int]) -> tuple[PromptPrefix | None, int]:
        """The kept prefix sharing the most leading tokens with `prompt` (at least `min_prefix`), and how many."""
        best: tuple[PromptPrefix | None, int] = (None, 0)
        for prefix in self._prefixes.values():
            n = prefix.shared([prompt])
            if n >= self.min_prefix and n > best[1]:
                best = (prefix, n)
        if best[0] is not None:
            self._prefixes.move_to_end(best[0].tokens)
        return best

    def _remember(self, rows: list[BatchRow], attention: torch.Tensor, cache: Any) -> None:
        """Keep the KV cache of each long enough prompt just run (the last `max_prefixes`)."""
        if not self.max_prefixes:
            return
        shared = self._shared.layers if self._shared is not None else None  # the rows' first positions
        start = len(self._shared.tokens) if self._shared is not None else 0
        for j, row in enumerate(rows):
            key = tuple(row.prompt)
            if len(key) < self.min_prefix:
                continue
            if key in self._prefixes:
                self._prefixes.move_to_end(key)
                continue
            columns = attention[j].nonzero().squeeze(1)[: len(key) - start].to(self.decoder.device)
            own = [
                (layer.keys[j : j + 1].index_select(2, columns), layer.values[j : j + 1].index_select(2, columns))
                for layer in cache.layers
            ]
            layers = tuple(
                own
                if shared is None
                else (
                    (torch.cat([sk, k], dim=2), torch.cat([sv, v], dim=2))
                    for (sk, sv), (k, v) in zip(shared, own, strict=True)
                )
            )
            self._prefixes[key] = PromptPrefix(key, layers)
            while len(self._prefixes) > self.max_prefixes:
                self._prefixes.popitem(last=False)

    def _join(self, rows: list[BatchRow], attention: torch.Tensor, cache: GrowingCache) -> None:
        """Slot newly prefilled rows into the batch: the shorter side is left-padded to the other's length."""
        layers: list[tuple[torch.Tensor, torch.Tensor]] = [
            (layer.keys, layer.values) for layer in cache.layers  # type: ignore[union-attr, misc]
        ]
        if self._cache is None or self._attention is None:
            self._cache, self._attention, self.rows = SlotCache(layers), attention, list(rows)
            return
        used, length = self._attention.shape[1], attention.shape[1]
        if length > used:
            for layer in self._cache.slots:
                layer.pad_left(length - used)
            self._attention = F.pad(self._attention, (length - used, 0))
            used = length
        for layer, (keys, values) in zip(self._cache.slots, layers, strict=True):
            layer.add_rows(keys, values)
        self._attention = torch.cat([self._attention, F.pad(attention, (used - length, 0))])
        self.rows.extend(rows)
