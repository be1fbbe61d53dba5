"""The engine: one thread owns the model and runs continuous batching.

Requests wait in a queue; between steps the engine thread drops the rows of clients that left and lets waiting
requests join (up to `max_batch` rows), then steps again at once: the model never waits for the event loop.
After each step it hands every streaming request the deltas its row produced, and finished rows their end, to
the event loop in one callback (`call_soon_threadsafe`), which the loop delivers while the next step computes.
A row's output builder is only touched by the engine thread (tokens in, deltas out); the loop reads a job's
builder once its `done` is set.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tooldec.decoding import Policy
from tooldec.decoding.decoder import BatchRow, ContinuousBatch, Decoder
from tooldec.decoding.sampling import SamplingParams
from tooldec.serve.errors import APIError
from tooldec.serve.output import OutputBuilder

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Job:
    """One request in the engine: its prompt, policy, sampling, budget, and how its output gets out."""

    prompt: list[int]
    policy: Policy
    params: SamplingParams
    max_tokens: int
    builder: OutputBuilder
    stream: bool = False
    updates: asyncio.Queue[list[dict[str, Any]] | None] = field(default_factory=asyncio.Queue)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    row: BatchRow | None = None
    cancelled: bool = False
    ended: bool = False
    """Set by the engine thread when the job ends (`done` follows on the event loop)."""
    finish_reason: str | None = None
    error: str | None = None
    completion_tokens: int = 0
    queued_at: float = field(default_factory=time.perf_counter)


class Engine:
    """Continuous batching over one model for many concurrent requests."""

    def __init__(
        self, decoder: Decoder, *, max_batch: int = 8, max_waiting: int = 256, prefix_cache: int = 8
    ) -> None:
        """`max_batch` rows decode together; beyond `max_waiting` queued requests, new ones get a 429; the KV
        cache of the last `prefix_cache` prompts is kept for requests that start the same way."""
        self.decoder = decoder
        self.prefix_cache = prefix_cache
        self.batch = self._new_batch()
        self.max_batch = max_batch
        self.max_waiting = max_waiting
        self.waiting: deque[Job] = deque()
        self.running: dict[int, Job] = {}
        self.steps = 0
        self._wake = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._outbox: list[Callable[[], None]] = []
        """What the engine thread has for the event loop since its last hand-over (deltas, ends)."""

    def _new_batch(self) -> ContinuousBatch:
        """The model's own continuous batch where its backend has one (llama.cpp's sequences), else the
        Decoder's."""
        own = getattr(self.decoder.model, "continuous_batch", None)
        if callable(own):
            batch: ContinuousBatch = own(self.decoder, prefixes=self.prefix_cache)
            return batch
        return ContinuousBatch(self.decoder, prefixes=self.prefix_cache)

    def start(self) -> None:
        """Start the engine thread; its outputs go to the running event loop."""
        self._loop = asyncio.get_running_loop()
        self._stopping = False
        self._thread = threading.Thread(target=self._work, name="tooldec-engine", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Stop the engine thread (after the step it is in); running and waiting requests end with an error."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
            self._thread = None
        for job in [*self.running.values(), *self.waiting]:
            self._end(job, "error", "the server is shutting down")
        self.running.clear()
        self.waiting.clear()
        self._hand_over()

    def submit(self, job: Job) -> None:
        """Queue a request; raises APIError 429 when the queue is full."""
        if len(self.waiting) >= self.max_waiting:
            raise APIError(
                f"the server has {len(self.waiting)} requests waiting; try again later",
                status=429, type="rate_limit_error", code="server_busy",
            )
        with self._wake:
            self.waiting.append(job)
            self._wake.notify()

    def cancel(self, job: Job) -> None:
        """The client left: free its row at the next step (nothing happens to a finished job)."""
        if not job.done.is_set():
            job.cancelled = True
            with self._wake:
                self._wake.notify()

    @property
    def stats(self) -> dict[str, int]:
        """Rows running, requests waiting, steps taken."""
        return {"running": len(self.running), "waiting": len(self.waiting), "steps": self.steps}

    def _work(self) -> None:
        """The engine thread: admit, step, hand the step's output to the event loop; sleep while there is
        nothing to run."""
        while True:
            with self._wake:
                while not self._stopping and not self.running and not self.waiting:
                    self._wake.wait()
                if self._stopping:
                    return
            try:
                self._admit()
                if self.running:
                    self._step()
            except Exception as exc:  # the engine outlives a failed step; its rows end
                log.exception("decoding step failed")
                for job in list(self.running.values()):
                    self._end(job, "error", f"decoding failed: {type(exc).__name__}: {exc}")
                self.running.clear()
                self.batch = self._new_batch()
            self._hand_over()

    def _step(self) -> None:
        """One step of every running row; their deltas and the ends of the rows that finished go out."""
        finished = self.batch.step()
        self.steps += 1
        for job in self.running.values():
            self._flush(job)
        for row in finished:
            if id(row) in self.running:
                job = self.running.pop(id(row))
                job.completion_tokens = len(row.gen.tokens)
                self._end(job, row.gen.finish_reason, row.error)

    def _admit(self) -> None:
        """Drop rows whose clients left; let waiting requests join while there is room."""
        for key, job in list(self.running.items()):
            if job.cancelled and job.row is not None:
                self.batch.remove(job.row)
                del self.running[key]
                self._end(job, "cancelled", None)
        with self._wake:  # the event loop appends to `waiting`
            left = [j for j in self.waiting if j.cancelled]
            for job in left:
                self.waiting.remove(job)
            room = min(len(self.waiting), self.max_batch - len(self.running))
            joining = [self.waiting.popleft() for _ in range(room)]
        for job in left:
            self._end(job, "cancelled", None)
        for job in joining:
            try:
                job.row = self.batch.add(
                    job.prompt, job.policy, job.params, max_new_tokens=job.max_tokens, on_token=job.builder.on_token
                )
            except Exception as exc:  # noqa: BLE001 -- a request that cannot join fails alone
                self._end(job, "error", f"{type(exc).__name__}: {exc}")
                continue
            self.running[id(job.row)] = job

    def _flush(self, job: Job) -> None:
        deltas = job.builder.drain()
        if job.stream and deltas:
            self._outbox.append(lambda: job.updates.put_nowait(deltas))

    def _end(self, job: Job, reason: str, error: str | None) -> None:
        """Finish the job's output (in the thread that owns its builder) and, on the loop, wake its request."""
        if job.ended:
            return
        job.ended = True
        job.builder.finish()
        self._flush(job)
        job.finish_reason = reason
        job.error = error
        if job.builder.mismatches:
            log.error("streamed calls differ from parsed calls: %s", job.builder.mismatches)

        def wake() -> None:
            job.done.set()
            job.updates.put_nowait(None)

        self._outbox.append(wake)

    def _hand_over(self) -> None:
        """Run what the engine thread produced on the event loop, in order, in one callback."""
        if not self._outbox or self._loop is None:
            return
        calls, self._outbox = self._outbox, []

        def deliver() -> None:
            for call in calls:
                call()

        if threading.current_thread() is self._thread:
            try:
                self._loop.call_soon_threadsafe(deliver)
            except RuntimeError:  # the loop is closed: nobody is left to tell
                pass
        else:
            deliver()
