"""The runner: for each tokenizer, engine and workload, check the engine constrains, then time it.

Per (engine, workload, tokenizer) cell: one-time tokenizer preparation; a check on its own compile (every
token of each forced call allowed by the mask and accepted, then EOS; a call of an unknown tool refused; for a
grammar workload the forced text is the grammar's sample, and the first mask must refuse some token);
then `repeats` timed rounds, each compiling every case afresh (cache off) and forcing one call token by token.
A step is `fill_mask` + `advance`; the first mask of a round is reported apart, the steps after it are
pooled over rounds and cases for the median and p99. Then, with batch sizes given, the batch measurement
(`tooldec.bench.batch`: fill + apply of B rows per step through each engine's batch API).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tooldec.bench.batch import DEFAULT_BATCH_STEPS, LogitsSource, run_batch
from tooldec.bench.calls import forced_calls, unknown_call_text
from tooldec.bench.cfg import GrammarCase
from tooldec.bench.engines import ENGINES, Engine
from tooldec.bench.measure import median, now_us, p99, rss_bytes
from tooldec.bench.workloads import Case, Workload
from tooldec.vocab import Vocabulary

Progress = Callable[[str, int], None]
"""Called with a description and a number of finished units (compiles)."""


class CheckFailed(Exception):
    """An engine that does not constrain as it must (or cannot compile a case): not timed."""


@dataclass
class CellResult:
    """The figures of one (engine, workload, tokenizer) cell; times in ms or µs, memory in MB."""

    engine: str
    workload: str
    tokenizer: str
    status: str = "ok"
    reason: str = ""
    version: str = ""
    prep_ms: float | None = None
    compile_ms: float | None = None
    mask_us_median: float | None = None
    mask_us_p99: float | None = None
    first_mask_us: float | None = None
    request_ms: float | None = None
    """Compile, start and every mask and advance of one call: what guidance costs a request with a new tool set."""
    rss_mb: float | None = None
    repeats: int = 0
    cases: int = 0
    steps: int = 0
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    batch: list[dict[str, Any]] = field(default_factory=list)
    """One entry per batch size: `batch_size, status, reason`, then `step_us_*` (fill + apply), `fill_us_*`,
    `advance_us_*` (median, p99), `steps`, `check_steps`, `threads`."""

    def as_dict(self) -> dict[str, Any]:
        """Flat JSON object (the extra figures beside the standard ones)."""
        d = asdict(self)
        d.update(d.pop("extra"))
        return d


@dataclass(frozen=True)
class CaseCalls:
    """A case with its forced token sequences (each a valid call or grammar sample, then EOS) and an unknown-tool
    call (empty for a grammar)."""

    case: Case | GrammarCase
    calls: tuple[tuple[int, ...], ...]
    unknown: tuple[int, ...]


def prepare_calls(workload: Workload, vocab: Vocabulary, eos_id: int) -> list[CaseCalls]:
    """Tokenize each case's forced calls (a grammar's: its sample) once with the tokenizer, EOS appended to the
    valid ones."""
    out = []
    for case in workload.cases:
        if isinstance(case, GrammarCase):
            out.append(CaseCalls(case, ((*vocab.encode(case.sample), eos_id),), ()))
            continue
        calls = tuple((*vocab.encode(text), eos_id) for text in forced_calls(case.tools, vocab))
        out.append(CaseCalls(case, calls, tuple(vocab.encode(unknown_call_text(case.tools)))))
    return out


def _compile_checked(engine: Engine, item: CaseCalls) -> Any:
    """The engine's compile of the case; CheckFailed("compile …") with the engine's error text."""
    try:
        return item.case.compile(engine)
    except Exception as exc:  # any peer error fails the case, with its text
        raise CheckFailed(f"compile {item.case.name}: {type(exc).__name__}: {exc}"[:300]) from exc


def _force(engine: Engine, compiled: Any, item: CaseCalls) -> None:
    """Force every call of the case through a fresh session; CheckFailed at the first token not allowed or
    refused."""
    for tokens in item.calls:
        session = engine.start(compiled)
        for k, token in enumerate(tokens):
            session.fill_mask()
            if not session.allowed(token):
                raise CheckFailed(f"{item.case.name}: forced token {k} ({token}) not in the mask")
            if not session.advance(token):
                raise CheckFailed(f"{item.case.name}: forced token {k} ({token}) refused by advance")


def check_engine(engine: Engine, item: CaseCalls) -> None:
    """Raise CheckFailed unless every forced token is allowed and accepted and the unknown tool is refused."""
    compiled = _compile_checked(engine, item)
    _force(engine, compiled, item)
    session = engine.start(compiled)
    for token in item.unknown:
        session.fill_mask()
        if not session.allowed(token) or not session.advance(token):
            return
    raise CheckFailed(f"{item.case.name}: a call of an unknown tool was allowed")


def check_sample(engine: Engine, item: CaseCalls) -> None:
    """Raise CheckFailed unless every token of the grammar's sample, then EOS, is allowed and accepted, and the
    first mask refuses some token (an engine that allows everything passes any sample)."""
    compiled = _compile_checked(engine, item)
    _force(engine, compiled, item)
    session = engine.start(compiled)
    session.fill_mask()
    full_words = np.asarray(session.mask, dtype=np.int32).reshape(-1)[:-1]
    if full_words.size and bool((full_words == -1).all()):
        raise CheckFailed(f"{item.case.name}: the first mask allows every token")


@dataclass
class _Samples:
    """Raw timings of one cell."""

    compile_ms: list[float] = field(default_factory=list)
    first_mask_us: list[float] = field(default_factory=list)
    first_step_us: list[float] = field(default_factory=list)
    request_ms: list[float] = field(default_factory=list)
    steps_us: list[float] = field(default_factory=list)
    mask_us: list[float] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)


def _timed_round(engine: Engine, item: CaseCalls, tokens: Sequence[int], samples: _Samples) -> None:
    """Compile the case afresh and force `tokens`, recording compile, first mask, steps, the request's sum and
    memory."""
    gc.collect()
    rss0 = rss_bytes()
    t0 = now_us()
    compiled = item.case.compile(engine)
    samples.compile_ms.append((now_us() - t0) / 1000.0)
    t1 = now_us()
    session = engine.start(compiled)
    spent = now_us() - t1 + samples.compile_ms[-1] * 1000.0
    for k, token in enumerate(tokens):
        a = now_us()
        session.fill_mask()
        b = now_us()
        session.advance(token)
        c = now_us()
        spent += c - a
        if k == 0:
            samples.first_mask_us.append(b - a)
            samples.first_step_us.append(c - a)
        else:
            samples.steps_us.append(c - a)
            samples.mask_us.append(b - a)
    samples.request_ms.append(spent / 1000.0)
    samples.rss.append(rss_bytes() - rss0)


@dataclass(frozen=True)
class BatchSettings:
    """The batch measurement: batch sizes (none: no batch figures), timed steps per size, threads per engine."""

    sizes: tuple[int, ...] = ()
    steps: int = DEFAULT_BATCH_STEPS
    threads: int = 1
    logits: LogitsSource = field(default_factory=LogitsSource, compare=False)


def _no_batch(result: CellResult, batch: BatchSettings) -> None:
    """Batch entries of a cell that was not timed (same status and reason as the cell)."""
    result.batch = [{"batch_size": b, "status": result.status, "reason": result.reason} for b in batch.sizes]


def run_cell(
    engine: Engine,
    items: list[CaseCalls],
    result: CellResult,
    repeats: int,
    progress: Progress | None = None,
    batch: BatchSettings | None = None,
) -> CellResult:
    """Check then time one engine on one workload's cases (and its batch path); fills and returns `result`."""
    tick = progress or (lambda _d, _n: None)
    batch = batch or BatchSettings()
    check = check_sample if items and isinstance(items[0].case, GrammarCase) else check_engine
    passed, failed = [], []
    for item in items:
        try:
            check(engine, item)
            passed.append(item)
        except CheckFailed as exc:
            if not str(exc).startswith("compile "):
                result.status, result.reason = "failed", str(exc)
                _no_batch(result, batch)
                return result
            failed.append(str(exc))
        tick(f"{result.engine} {result.workload}: check", 1)
    if not passed:
        result.status, result.reason = "failed", failed[0]
        _no_batch(result, batch)
        return result
    samples = _Samples()
    for r in range(repeats):
        for item in passed:
            _timed_round(engine, item, item.calls[r % len(item.calls)], samples)
            tick(f"{result.engine} {result.workload}: round {r + 1}", 1)
    result.compile_ms = median(samples.compile_ms)
    result.mask_us_median = median(samples.steps_us)
    result.mask_us_p99 = p99(samples.steps_us)
    result.first_mask_us = median(samples.first_mask_us)
    result.request_ms = median(samples.request_ms)
    result.rss_mb = max(samples.rss) / 2**20
    result.repeats, result.cases, result.steps = repeats, len(passed), len(samples.steps_us)
    result.extra = {
        "compile_ms_max": max(samples.compile_ms),
        "first_step_us": median(samples.first_step_us),
        "mask_only_us_median": median(samples.mask_us),
        "tokens_per_call": median([float(len(t)) for item in passed for t in item.calls]),
    }
    if failed:
        result.note += ("; " if result.note else "") + f"{len(failed)} of {len(items)} cases failed to compile, e.g. {failed[0]}"
    if batch.sizes:
        result.batch = run_batch(engine, passed, batch.sizes, batch.steps, batch.threads, batch.logits, tick)
    return result


def is_grammar(workload: Workload) -> bool:
    """Whether the workload's cases are grammars (`cfg-*`) rather than tool sets."""
    return any(isinstance(case, GrammarCase) for case in workload.cases)


def units(workloads: list[Workload], repeats: int, batch_sizes: Sequence[int] = ()) -> int:
    """Progress units of one (engine, tokenizer) pair over `workloads`."""
    return sum(len(w.cases) * (1 + repeats) + len(batch_sizes) for w in workloads)


def run(
    engines: list[str],
    workloads: list[Workload],
    tokenizers: dict[str, Path],
    repeats: int,
    progress: Progress | None = None,
    batch: BatchSettings | None = None,
) -> list[CellResult]:
    """Every cell of engines × workloads × tokenizers; missing or failing engines give skipped/failed rows."""
    tick = progress or (lambda _d, _n: None)
    batch = batch or BatchSettings()
    results = []
    for tok_name, tok_dir in tokenizers.items():
        vocab = Vocabulary.from_file(tok_dir)
        eos_id = min(vocab.eos_ids)
        items = {w.name: prepare_calls(w, vocab, eos_id) for w in workloads}
        for engine_name in engines:
            cls = ENGINES[engine_name]
            rows = [CellResult(engine_name, w.name, tok_name, note=w.note) for w in workloads]
            results.extend(rows)
            missing = cls.missing()
            if missing is not None:
                for row in rows:
                    row.status, row.reason = "skipped", missing
                    _no_batch(row, batch)
                tick(f"{engine_name}: skipped", units(workloads, repeats, batch.sizes))
                continue
            try:
                cls.preload()
                t0 = now_us()
                engine = cls(tok_dir, vocab, eos_id)
            except Exception as exc:  # noqa: BLE001 - a peer failing to load is reported, not fatal
                for row in rows:
                    row.status, row.reason = "failed", f"tokenizer: {type(exc).__name__}: {exc}"[:300]
                    _no_batch(row, batch)
                tick(f"{engine_name}: failed", units(workloads, repeats, batch.sizes))
                continue
            prep_ms = (now_us() - t0) / 1000.0
            for workload, row in zip(workloads, rows, strict=True):
                row.prep_ms, row.version = prep_ms, cls.version()
                if is_grammar(workload) and (why := cls.grammar_missing()) is not None:
                    row.status, row.reason = "skipped", why
                    _no_batch(row, batch)
                    tick(f"{engine_name} {workload.name}: skipped", units([workload], repeats, batch.sizes))
                    continue
                done = [0]

                def counted(description: str, n: int, done: list[int] = done) -> None:
                    done[0] += n
                    tick(description, n)

                run_cell(engine, items[workload.name], row, repeats, counted, batch)
                tick(f"{engine_name} {workload.name}: {row.status}",
                     units([workload], repeats, batch.sizes) - done[0])
            del engine
    return results
