"""The batch measurement: per decoding step, fill the bitmask of B rows and apply it to float32 logits.

Each row is its own sequence, forced through the workload's calls one token per step: the calls of all cases
(three per case) form one cyclic stream of L tokens, row i starts at stream position ⌊i·L/B⌋ (so rows sit at
different calls and offsets, different cases too in bfcl-multiple), and a row that consumes a call's EOS starts
the next call of the stream on a fresh sequence (outside the timing). Every engine goes through its own batch API
(`BatchDriver`): one fill of the `int32[B, ceil(V/32)]` bitmask, its apply to a `[B, V]` float32 logits tensor
(V = the tokenizer's vocabulary size; seeded normal values, copied in afresh before each step, untimed), and
the advance of every row by its forced token, timed apart from the step (never inside fill + apply).

Before timing, the same schedule runs with a single-row session beside every row (the engine's `start()`, the
path the single-row figures time): at every step each batch row must equal its row's single-row mask (the
first V bits) and allow the forced token, and on the first step the applied logits must equal the logits with
every disallowed token set to -inf. The check runs long enough to visit every stream position the timed steps
visit, on the same compiled grammars: the timed steps are warm (states indexed lazily, lexer states, the apply
kernels' torch.compile are built by then); first-visit costs are in the single-row figures.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tooldec.bench.engines import BatchDriver, Engine, Session, bit_set
from tooldec.bench.measure import median, now_us, p99

DEFAULT_BATCH_SIZES = (1, 32, 256)
DEFAULT_BATCH_STEPS = 200
LOGITS_SEED = 0


class BatchCheckFailed(Exception):
    """An engine whose batch masks differ from its single-row masks (or that refuses a forced token)."""


@dataclass(frozen=True)
class Track:
    """One forced call of the stream: the case it belongs to and its tokens (EOS last)."""

    case: int
    name: str
    tokens: tuple[int, ...]


def tracks(items: Sequence[Any]) -> list[Track]:
    """The stream of forced calls: every call of every case (`CaseCalls`), in order."""
    return [Track(c, item.case.name, tuple(call)) for c, item in enumerate(items) for call in item.calls]


def starts(stream: Sequence[Track], batch: int) -> list[tuple[int, int]]:
    """(track, offset) of each row's first position: row i at stream position ⌊i·L/B⌋."""
    total = sum(len(t.tokens) for t in stream)
    out = []
    for i in range(batch):
        pos = (i * total) // batch
        k = 0
        while pos >= len(stream[k].tokens):
            pos -= len(stream[k].tokens)
            k += 1
        out.append((k, pos))
    return out


def check_steps(stream: Sequence[Track], batch: int, steps: int) -> int:
    """Steps of the check: enough for the rows to cover every stream position the timed steps visit."""
    total = sum(len(t.tokens) for t in stream)
    return min(steps, -(-total // batch) + 1)


class Rows:
    """B rows walking the stream, one token per step, each through the driver's row objects (and, for the
    check, a single-row session of the engine beside each)."""

    def __init__(self, driver: BatchDriver, compiled: Sequence[Any], stream: Sequence[Track], batch: int,
                 engine: Engine | None = None) -> None:
        """Place the rows at their start positions (advanced through the call so far: untimed)."""
        self.driver, self.compiled, self.stream, self.engine = driver, compiled, stream, engine
        self.where = starts(stream, batch)
        self.objs: list[Any] = []
        self.sessions: list[Session] = []
        for i, (k, offset) in enumerate(self.where):
            self._open(i, k)
            for token in stream[k].tokens[:offset]:
                if not driver.advance([self.objs[i]], [token])[0]:
                    raise BatchCheckFailed(f"{stream[k].name}: row {i} refused token {token} while placed")
                if self.sessions and not self.sessions[i].advance(token):
                    raise BatchCheckFailed(f"{stream[k].name}: single-row session refused token {token}")

    def _open(self, i: int, k: int) -> None:
        """A fresh sequence for row i at the start of track k."""
        obj = self.driver.row(self.compiled[self.stream[k].case])
        session = self.engine.start(self.compiled[self.stream[k].case]) if self.engine is not None else None
        if i == len(self.objs):
            self.objs.append(obj)
            if session is not None:
                self.sessions.append(session)
        else:
            self.objs[i] = obj
            if session is not None:
                self.sessions[i] = session

    def tokens(self) -> list[int]:
        """Each row's forced token now."""
        return [self.stream[k].tokens[o] for k, o in self.where]

    def label(self, i: int) -> str:
        """Where row i is, for messages."""
        k, o = self.where[i]
        return f"{self.stream[k].name} call {k} token {o}"

    def moved(self) -> None:
        """Every row consumed its token: step on; a row past its call's EOS starts the next call afresh."""
        for i, (k, o) in enumerate(self.where):
            if o + 1 < len(self.stream[k].tokens):
                self.where[i] = (k, o + 1)
            else:
                k = (k + 1) % len(self.stream)
                self.where[i] = (k, 0)
                self._open(i, k)


class LogitsSource:
    """Seeded float32 logits `[B, V]` (normal values), kept per shape, and a working copy to apply into."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, int], tuple[Any, Any]] = {}

    def get(self, batch: int, vocab: int) -> tuple[Any, Any]:
        """(base, work) tensors of shape [batch, vocab]; the cache keeps one vocabulary size at a time."""
        import torch

        if (batch, vocab) not in self._cache:
            if any(v != vocab for _, v in self._cache):
                self._cache.clear()
            gen = torch.Generator().manual_seed(LOGITS_SEED)
            base = torch.randn((batch, vocab), generator=gen, dtype=torch.float32)
            self._cache[(batch, vocab)] = (base, base.clone())
        return self._cache[(batch, vocab)]


def unpacked(mask: np.ndarray, vocab: int) -> np.ndarray:
    """Bool `[B, vocab]`: bit t of each packed row (bit t & 31 of word t >> 5)."""
    rows = np.ascontiguousarray(mask, dtype=np.int32).reshape(mask.shape[0] if mask.ndim == 2 else 1, -1)
    return np.unpackbits(rows.view(np.uint8), axis=1, bitorder="little")[:, :vocab].astype(bool)


def check_batch(engine: Engine, driver: BatchDriver, compiled: Sequence[Any], stream: Sequence[Track],
                batch: int, steps: int, logits: LogitsSource) -> int:
    """Run the schedule with single-row sessions beside the rows; raise BatchCheckFailed on any difference.
    Returns the number of steps checked."""
    import torch

    vocab = driver.size
    rows = Rows(driver, compiled, stream, batch, engine)
    bitmask = driver.bitmask(batch)
    n = check_steps(stream, batch, steps)
    for step in range(n):
        tokens = rows.tokens()
        driver.fill(rows.objs, bitmask)
        packed = driver.as_numpy(bitmask)
        got = unpacked(packed, vocab)
        for i, session in enumerate(rows.sessions):
            session.fill_mask()
            single = unpacked(np.asarray(session.mask).reshape(1, -1), vocab)[0]
            if not np.array_equal(got[i], single):
                diff = int(np.count_nonzero(got[i] != single))
                raise BatchCheckFailed(f"B={batch} step {step} row {i} ({rows.label(i)}): batch mask differs from "
                                       f"the single-row mask in {diff} tokens")
            if not bit_set(packed[i], tokens[i]):
                raise BatchCheckFailed(f"B={batch} step {step} row {i} ({rows.label(i)}): forced token "
                                       f"{tokens[i]} not in the batch mask")
        if step == 0:
            base, work = logits.get(batch, vocab)
            work.copy_(base)
            driver.warm(work, bitmask)
            work.copy_(base)
            driver.apply(work, bitmask)
            expected = torch.where(torch.from_numpy(got), base, torch.tensor(float("-inf")))
            if not torch.equal(work, expected):
                wrong = int((work != expected).sum())
                raise BatchCheckFailed(f"B={batch}: the apply left {wrong} logits different from the mask's")
        for i, ok in enumerate(driver.advance(rows.objs, tokens)):
            if not ok:
                raise BatchCheckFailed(f"B={batch} step {step} row {i} ({rows.label(i)}): token refused")
        for i, session in enumerate(rows.sessions):
            if not session.advance(tokens[i]):
                raise BatchCheckFailed(f"B={batch} step {step} row {i}: single-row session refused the token")
        rows.moved()
    return n


def time_batch(driver: BatchDriver, compiled: Sequence[Any], stream: Sequence[Track], batch: int, steps: int,
               logits: LogitsSource) -> dict[str, float | None]:
    """`steps` timed steps of B rows: fill, then apply (timed together and the fill alone), then the advance of
    every row (timed apart). Fresh logits are copied in before each step, untimed."""
    rows = Rows(driver, compiled, stream, batch)
    bitmask = driver.bitmask(batch)
    base, work = logits.get(batch, driver.size)
    work.copy_(base)
    driver.warm(work, bitmask)
    fill_us, step_us, advance_us = [], [], []
    gc.collect()
    for _ in range(steps):
        work.copy_(base)
        tokens = rows.tokens()
        a = now_us()
        driver.fill(rows.objs, bitmask)
        b = now_us()
        driver.apply(work, bitmask)
        c = now_us()
        done = driver.advance(rows.objs, tokens)
        d = now_us()
        if not all(done):
            raise BatchCheckFailed(f"B={batch}: a forced token was refused while timing")
        fill_us.append(b - a)
        step_us.append(c - a)
        advance_us.append(d - c)
        rows.moved()
    return {
        "step_us_median": median(step_us),
        "step_us_p99": p99(step_us),
        "fill_us_median": median(fill_us),
        "fill_us_p99": p99(fill_us),
        "advance_us_median": median(advance_us),
        "advance_us_p99": p99(advance_us),
    }


def run_batch(engine: Engine, items: Sequence[Any], batch_sizes: Sequence[int], steps: int, threads: int,
              logits: LogitsSource, tick: Any = None) -> list[dict[str, Any]]:
    """The batch figures of one cell, one entry per batch size: compile every case once (fresh), then per B
    check the batch masks against single-row ones and time `steps` steps."""
    import torch

    tick = tick or (lambda _d, _n: None)
    entries: list[dict[str, Any]] = []
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        try:
            driver = items[0].case.driver(engine, threads)
            compiled = [item.case.compile(engine) for item in items]
            stream = tracks(items)
        except Exception as exc:  # noqa: BLE001 - reported in the entries
            why = f"batch setup: {type(exc).__name__}: {exc}"[:300]
            for b in batch_sizes:
                entries.append({"batch_size": b, "status": "failed", "reason": why})
                tick(f"{engine.name}: batch failed", 1)
            return entries
        for b in batch_sizes:
            entry: dict[str, Any] = {"batch_size": b, "status": "ok", "reason": "", "threads": threads}
            try:
                entry["check_steps"] = check_batch(engine, driver, compiled, stream, b, steps, logits)
                entry.update(time_batch(driver, compiled, stream, b, steps, logits))
                entry["steps"] = steps
            except BatchCheckFailed as exc:
                entry["status"], entry["reason"] = "failed", str(exc)[:300]
            except Exception as exc:  # noqa: BLE001 - a peer's error fails this batch size, with its text
                entry["status"], entry["reason"] = "failed", f"{type(exc).__name__}: {exc}"[:300]
            entries.append(entry)
            tick(f"{engine.name}: batch {b}", 1)
    finally:
        torch.set_num_threads(saved)
    return entries
