"""Continuous batching on llama.cpp: the server's rows as llama.cpp sequences, all decoded in one `llama_decode`.

The same contract as tooldec.decoding.decoder.ContinuousBatch (`add`, `remove`, `step`, rows with their own
policy, sampling and budget), but where that one moves key/value tensors in Python, here every row owns one
sequence of the model's llama.cpp context: joining rows' prompts and live rows' new tokens go into one batch,
each row's last logits come back as a view of llama.cpp's buffer, and the policies' masks are applied to it in
place (the compiled core's kernel, one call) before each row samples. Prompts of `min_prefix` tokens or more are
kept as sequences of their own (the last `prefixes`; in a unified context no more than rows run); a joining
prompt that starts the same way takes those positions with `seq_cp` instead of computing them again: it shares
the cells in a unified context, and copies them where each sequence has its own (`kv_split`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence

import torch

from tooldec.backends.llamacpp import LlamaCppModel
from tooldec.decoding.decoder import BatchRow, Decoder, RowBatch, feed_width


class LlamaBatch(RowBatch):
    """Rows that join and leave between steps, each on its own llama.cpp sequence. Not thread-safe: call
    `add`, `remove` and `step` from one thread at a time."""

    def __init__(self, decoder: Decoder, *, prefixes: int = 8, min_prefix: int = 8) -> None:
        """Decode with `decoder` (whose model is a LlamaCppModel); keep the last `prefixes` prompts of at least
        `min_prefix` tokens for rows that start the same way (each holds a sequence while kept; `_remember` says
        how many a unified context keeps). Taking a kept start costs a `seq_cp` (shared cells, or a copy of memory
        in a split context), never a prefill, so even a short one is worth it: Qwen's default system prompt and
        the chat markup around it are 24 tokens that every plain chat request shares (a second of prefill on a
        loaded core when the threshold was 32)."""
        if not isinstance(decoder.model, LlamaCppModel):
            raise TypeError("LlamaBatch needs a decoder on a LlamaCppModel")
        super().__init__(decoder)
        self.context = decoder.model.context
        decoder.model._session = None  # the context's sequences are this batch's from now on
        self.context.clear()
        self.max_prefixes = prefixes
        self.min_prefix = min_prefix
        self._free = list(range(self.context.sequences))
        self._seq: dict[int, int] = {}  # id(row) -> its sequence
        self._length: dict[int, int] = {}  # id(row) -> positions its sequence holds
        self._prefixes: OrderedDict[tuple[int, ...], int] = OrderedDict()  # prompt -> its sequence

    @torch.inference_mode()
    def step(self) -> list[BatchRow]:
        """One decoding step of every row; returns the rows that finished in it (stop, length or error)."""
        self._release()
        joining, finished = self._jump_joiners()
        self._share_within(joining)
        for row in joining:
            self._join(row)
        width = feed_width([len(r.pending) for r in self.rows if r.pending])
        order = [r for r in self.rows if r.pending]
        if not order:
            return finished
        feeds = [r.pending[: len(r.pending) if r in joining else width] for r in order]
        batch = [(self._seq[id(r)], self._length[id(r)], f) for r, f in zip(order, feeds, strict=True)]
        t_model = time.perf_counter()
        logits = torch.from_numpy(self.context.decode(batch))
        seconds = time.perf_counter() - t_model
        for row, fed in zip(order, feeds, strict=True):
            self._length[id(row)] += len(fed)
            del row.pending[: len(fed)]
            row.gen.forward_passes += 1
            row.gen.model_seconds += seconds
        self._remember([r for r in joining if not r.finished])
        return self._sample_rows(order, logits, finished)

    def _join(self, row: BatchRow) -> None:
        """Give a joining row a sequence, starting from the kept prompt it shares most with."""
        seq = self._take_sequence()
        key, reused = self._best(row.prompt)
        if key is not None:
            self.context.copy(self._prefixes[key], seq, reused)
        self._seq[id(row)], self._length[id(row)] = seq, reused
        del row.pending[:reused]
        row.gen.prefix_tokens = reused
        self.rows.append(row)

    def _best(self, prompt: Sequence[int]) -> tuple[tuple[int, ...] | None, int]:
        """The kept prompt sharing the most leading tokens with `prompt` (at least `min_prefix`, leaving it one
        token to run), and how many; marked as just used."""
        best: tuple[tuple[int, ...] | None, int] = (None, 0)
        for key in self._prefixes:
            n = _shared(key, prompt)
            if n >= self.min_prefix and n > best[1]:
                best = (key, n)
        if best[0] is not None:
            self._prefixes.move_to_end(best[0])
        return best

    def _share_within(self, rows: list[BatchRow]) -> None:
        """Joining prompts that start alike (requests arriving together with one system prompt and tool list):
        their longest common start, if longer than what a kept prompt gives, runs once as a kept prompt of its
        own, which they then share instead of each computing it."""
        if not self.max_prefixes or len(rows) < 2:
            return
        for row in rows:
            common = max(_shared(other.prompt, row.prompt) for other in rows if other is not row)
            base, known = self._best(row.prompt)
            if common < self.min_prefix or common <= known:
                continue
            if self._prefixes and (len(self._prefixes) >= self.max_prefixes or not self._free):
                self._forget_oldest()
                base, known = self._best(row.prompt)
            if not self._free:
                return
            seq = self._free.pop()
            if base is not None:
                self.context.copy(self._prefixes[base], seq, known)
            self.context.decode([(seq, known, row.prompt[known:common])])
            self._prefixes[tuple(row.prompt[:common])] = seq

    def _remember(self, rows: list[BatchRow]) -> None:
        """Keep the prompts just run that are long enough, each as a sequence sharing the row's cells. In a
        unified context no more are kept than rows run (at least one): every row's attention reads every used
        cell there, kept prompts' too, so eight kept BFCL prompts (~500 tokens each) beside one row made each
        step (prefill most) read ~4,000 more cells, and one client got 0.79x the plain loop's tokens/s (1.02x
        keeping one)."""
        if not self.max_prefixes:
            return
        for row in rows:
            key = tuple(row.prompt)
            if len(key) < self.min_prefix:
                continue
            if key in self._prefixes:
                self._prefixes.move_to_end(key)
                continue
            if len(self._prefixes) >= self.max_prefixes:
                self._forget_oldest()
            if not self._free and self._prefixes:
                self._forget_oldest()
            if not self._free:
                break
            seq = self._free.pop()
            self.context.copy(self._seq[id(row)], seq, len(key))
            self._prefixes[key] = seq
        while self.context.unified and len(self._prefixes) > max(1, len(self.rows)):
            self._forget_oldest()

    def _take_sequence(self) -> int:
        """A free sequence, forgetting the oldest kept prompt if none is free."""
        if not self._free and self._prefixes:
            self._forget_oldest()
        if not self._free:
            raise RuntimeError(f"every one of the context's {self.context.sequences} sequences is in use")
        return self._free.pop()

    def _forget_oldest(self) -> None:
        _, seq = self._prefixes.popitem(last=False)
        self.context.drop(seq)
        self._free.append(seq)

    def _release(self) -> None:
        """Free the sequences of finished rows."""
        for row in [r for r in self.rows if r.finished]:
            seq = self._seq.pop(id(row))
            self._length.pop(id(row))
            self.context.drop(seq)
            self._free.append(seq)
        self.rows = [r for r in self.rows if not r.finished]


def _shared(a: Sequence[int], b: Sequence[int]) -> int:
    """Leading tokens `a` and `b` share, leaving `b` at least one token to run."""
    limit = min(len(a), len(b) - 1)
    n = 0
    while n < limit and a[n] == b[n]:
        n += 1
    return n
