"""The engine: one asyncio task owns the model and runs continuous batching.

Requests wait in a queue; between steps the engine drops the rows of clients that left and lets waiting
requests join (up to `max_batch` rows). Each step runs in a single worker thread, so the event loop keeps
serving while the model computes; after it, every streaming request gets the deltas its row produced and
finished rows get their end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
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
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="tooldec-step")
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def _new_batch(self) -> ContinuousBatch:
        """The model's own continuous batch where its backend has one (llama.cpp's sequences), else the
        Decoder's."""
        own = getattr(self.decoder.model, "continuous_batch", None)
        if callable(own):
            batch: ContinuousBatch = own(self.decoder, prefixes=self.prefix_cache)
            return batch
        return ContinuousBatch(self.decoder, prefixes=self.prefix_cache)

    def start(self) -> None:
        """Start the engine task on the running event loop."""
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="tooldec-engine")

    async def stop(self) -> None:
        """Stop the engine task (running requests end with an error) and the worker thread."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        for job in [*self.running.values(), *self.waiting]:
            self._end(job, "error", "the server is shutting down")
        self._pool.shutdown(wait=False, cancel_futures=True)

    def submit(self, job: Job) -> None:
        """Queue a request; raises APIError 429 when the queue is full."""
        if len(self.waiting) >= self.max_waiting:
            raise APIError(
                f"the server has {len(self.waiting)} requests waiting; try again later",
                status=429, type="rate_limit_error", code="server_busy",
            )
        self.waiting.append(job)
        self._poke()

    def cancel(self, job: Job) -> None:
        """The client left: free its row at the next step (nothing happens to a finished job)."""
        if not job.done.is_set():
            job.cancelled = True
            self._poke()

    @property
    def stats(self) -> dict[str, int]:
        """Rows running, requests waiting, steps taken."""
        return {"running": len(self.running), "waiting": len(self.waiting), "steps": self.steps}

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._wake is not None
        while True:
            try:
                self._admit()
                if not self.running:
                    self._wake.clear()
                    if not self.waiting:
                        await self._wake.wait()
                    continue
                finished = await loop.run_in_executor(self._pool, self.batch.step)
                self.steps += 1
                for job in self.running.values():
                    self._flush(job)
                for row in finished:
                    if id(row) in self.running:
                        job = self.running.pop(id(row))
                        job.completion_tokens = len(row.gen.tokens)
                        self._end(job, row.gen.finish_reason, row.error)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("decoding step failed")
                for job in list(self.running.values()):
                    self._end(job, "error", f"decoding failed: {type(exc).__name__}: {exc}")
                self.running.clear()
                self.batch = self._new_batch()

    def _admit(self) -> None:
        """Drop rows whose clients left; let waiting requests join while there is room."""
        for key, job in list(self.running.items()):
            if job.cancelled and job.row is not None:
                self.batch.remove(job.row)
                del self.running[key]
                self._end(job, "cancelled", None)
        while self.waiting and len(self.running) < self.max_batch:
            job = self.waiting.popleft()
            if job.cancelled:
                self._end(job, "cancelled", None)
                continue
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
            job.updates.put_nowait(deltas)

    def _end(self, job: Job, reason: str, error: str | None) -> None:
        if job.done.is_set():
            return
        job.builder.finish()
        self._flush(job)
        job.finish_reason = reason
        job.error = error
        if job.builder.mismatches:
            log.error("streamed calls differ from parsed calls: %s", job.builder.mismatches)
        job.done.set()
        job.updates.put_nowait(None)
