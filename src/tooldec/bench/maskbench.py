"""MaskBench side by side (`tooldec bench --workloads maskbench`): JSONSchemaBench's mask benchmark on a fixed,
seeded sample of `SHARED/data/maskbench`, every engine in one run.

Each file holds `{"schema": ..., "tests": [{"valid": bool, "data": ...}]}`. Every engine compiles each file's
schema once (cache off) and walks each of its instances token by token: fill the mask of the current state, check
the token is in it, advance; then EOS. An instance is accepted when every token, EOS included, is allowed and
accepted in one of its spellings: tooldec's canonical one (schema key order, an enum's value as the schema writes
it, `", "` and `": "`, the separators every engine is configured with), else the value as written (its own key
order, Python's number spelling). Each is tokenized once by the tokenizer, so every engine walks the same tokens.

An engine runs in a worker process of its own (spawned), which the runner kills when a compile runs past the
compile limit or the walks of one file past the walk limit (a timeout), or which dies (a crash); the next file
gets a fresh worker. The worker times with the bench's clock, and the limits are on the same clock (`--clock
cpu`: the worker's own CPU time, with elapsed time capped at WALL_FACTOR times the limit).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from tooldec.grammar.canonical import CanonicalWriter
from tooldec.grammar.syntax import JSON
from tooldec.vocab import Vocabulary

SAMPLE_SEED = "maskbench-1"
"""The sample is the files whose sha256 of `<seed>:<file name>` is smallest: fixed, and blind to the contents."""
DEFAULT_FILES = 150
COMPILE_TIMEOUT_S = 10.0
WALK_TIMEOUT_S = 120.0
"""Limit on walking all instances of one file."""
START_TIMEOUT_S = 600.0
"""Limit on a worker's start (imports and the engine's tokenizer preparation)."""
WALL_FACTOR = 10.0
"""With the CPU clock, limits are the worker's CPU seconds, and elapsed time is capped at this many times them."""
POLL_S = 0.05
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

Progress = Callable[[str, int], None]
"""Called with a description and a number of finished files."""


@dataclass(frozen=True)
class Instance:
    """One test instance: whether it is valid, and the tokens then EOS of each of its spellings, canonical first
    (none: a value JSON cannot write, NaN and the like, rejected without a walk)."""

    valid: bool
    spellings: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class SchemaFile:
    """One MaskBench file: its name, schema and instances."""

    name: str
    schema: Any
    instances: tuple[Instance, ...]


@dataclass
class FileOutcome:
    """One engine on one file. Status: compiled, failed (the engine refused the schema), timeout (compile or walks
    past their limit) or crashed (the worker died)."""

    file: str
    status: str
    reason: str = ""
    compile_ms: float | None = None
    first_mask_us: list[float] = field(default_factory=list)
    steps_us: list[float] = field(default_factory=list)
    """Mask + advance of every token after the first, valid instances only."""
    mask_us: list[float] = field(default_factory=list)
    """The mask alone of the same tokens."""
    valid_total: int = 0
    valid_accepted: int = 0
    invalid_total: int = 0
    invalid_rejected: int = 0
    wrong: list[str] = field(default_factory=list)
    """The wrong verdicts: `valid #i rejected at token k`, `invalid #i accepted`."""


@dataclass
class EngineRun:
    """One engine over the sample: ok, skipped (package missing) or failed (its preparation failed)."""

    engine: str
    status: str = "ok"
    reason: str = ""
    version: str = ""
    prep_ms: float | None = None
    outcomes: list[FileOutcome] = field(default_factory=list)


def maskbench_folder(shared: Path) -> Path:
    """`SHARED/data/maskbench`, the folder of the MaskBench files."""
    return shared / "data" / "maskbench"


def sample_files(folder: Path, count: int, seed: str = SAMPLE_SEED) -> list[Path]:
    """The `count` files of `folder` (0: all) with the smallest sha256 of `<seed>:<name>`, in name order;
    FileNotFoundError when the folder has no JSON file."""
    files = sorted(folder.glob("*.json"))
    if not files:
        raise FileNotFoundError(
            f"workload maskbench: no *.json in {folder} (set --shared or $TOOLDEC_SHARED to the folder holding "
            f"data/maskbench/)"
        )
    ranked = sorted(files, key=lambda p: hashlib.sha256(f"{seed}:{p.name}".encode()).hexdigest())
    return sorted(ranked[:count] if count else ranked)


def spellings(writer: CanonicalWriter | None, value: Any) -> list[str]:
    """The instance's texts: tooldec's canonical spelling, then the value as written where that differs (the
    value's own key order, the same separators); none for a value with no JSON spelling."""
    out = []
    if writer is not None:
        try:
            out.append(writer.dumps(value))
        except (ValueError, TypeError):
            return []
        except Exception:  # noqa: BLE001 - the writer only picks key orders: the value's own order then
            writer = None
    try:
        out.append(JSON.dumps(value))
    except (ValueError, TypeError):
        return []
    return list(dict.fromkeys(out))


def load_file(path: Path, vocab: Vocabulary, eos_id: int) -> SchemaFile:
    """Read one MaskBench file and tokenize its instances (canonical text, then EOS)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    schema = doc["schema"]
    try:
        writer: CanonicalWriter | None = CanonicalWriter(schema)
    except Exception:  # noqa: BLE001 - a schema jsonschema cannot read is still one the engines may compile
        writer = None
    instances = []
    for test in doc.get("tests", []):
        texts = spellings(writer, test.get("data"))
        instances.append(Instance(bool(test.get("valid")), tuple((*vocab.encode(t), eos_id) for t in texts)))
    return SchemaFile(path.name, schema, tuple(instances))


def _walk(engine: Any, compiled: Any, tokens: Sequence[int], now: Callable[[], float]) -> tuple[int | None, list[float]]:
    """Walk one instance: the token index where it was refused (None: accepted) and its timings: the mask of
    each token and its mask + advance, interleaved (mask0, step0, mask1, step1, ...)."""
    session = engine.start(compiled)
    times: list[float] = []
    for k, token in enumerate(tokens):
        a = now()
        session.fill_mask()
        b = now()
        if not session.allowed(token):
            return k, times
        c = now()
        ok = session.advance(token)
        d = now()
        times += [b - a, (b - a) + (d - c)]
        if not ok:
            return k, times
    return None, times


def walk_file(engine: Any, compiled: Any, instances: Sequence[tuple[bool, Sequence[tuple[int, ...]]]]) -> dict[str, Any]:
    """Every instance of a compiled file (`compiled` None: the schema admits no value, so all are rejected), each
    spelling in turn until one is accepted: the counts, the wrong verdicts and the timings of the valid instances'
    walks."""
    from tooldec.bench.measure import now_us

    out: dict[str, Any] = {"first_mask_us": [], "steps_us": [], "mask_us": [], "valid_total": 0,
                           "valid_accepted": 0, "invalid_total": 0, "invalid_rejected": 0, "wrong": []}
    for i, (valid, texts) in enumerate(instances):
        walks: list[list[float]] = []
        refusals = []
        if compiled is None:
            refusals.append("unwalked: the schema admits no value")
        elif not texts:
            refusals.append("unwalked: no JSON spelling")
        for tokens in texts if compiled is not None else ():
            try:
                at, times = _walk(engine, compiled, tokens, now_us)
            except Exception as exc:  # noqa: BLE001 - an engine error on a token is its refusal, with the error
                at, times = -1, []
                refusals.append(f"by {type(exc).__name__}: {exc}"[:200])
            walks.append(times)
            if at is None:
                refusals = []
                break
            if at >= 0:
                refusals.append(f"at token {at} of {len(tokens)}")
        accepted = not refusals
        if valid:
            out["valid_total"] += 1
            out["valid_accepted"] += accepted
            for times in filter(None, walks):
                out["first_mask_us"].append(times[0])
                out["mask_us"].extend(times[2::2])
                out["steps_us"].extend(times[3::2])
            if not accepted:
                out["wrong"].append(f"valid #{i} rejected " + "; ".join(refusals))
        else:
            out["invalid_total"] += 1
            out["invalid_rejected"] += not accepted
            if accepted:
                out["wrong"].append(f"invalid #{i} accepted")
    return out


def _serve(conn: Connection, engine_name: str, tokenizer_dir: Path, eos_id: int, clock: str) -> None:
    """The worker process: prepare the engine, then compile and walk each file it is sent until None."""
    from tooldec.bench.engines import ENGINES
    from tooldec.bench.measure import now_us, use_clock
    from tooldec.errors import EmptyGrammarError

    use_clock(clock)
    cls = ENGINES[engine_name]
    try:
        cls.preload()
        vocab = Vocabulary.from_file(tokenizer_dir)
        t0 = now_us()
        engine = cls(tokenizer_dir, vocab, eos_id)
        conn.send(("ready", (now_us() - t0) / 1000.0, cls.version()))
    except Exception as exc:  # noqa: BLE001 - a peer failing to load is reported, not fatal
        conn.send(("error", f"tokenizer: {type(exc).__name__}: {exc}"[:300]))
        return
    while (job := conn.recv()) is not None:
        schema, instances = job
        t0 = now_us()
        try:
            compiled = engine.compile_schema(schema)
        except EmptyGrammarError:
            compiled = None
        except Exception as exc:  # noqa: BLE001 - any error is the engine refusing the schema, with its text
            conn.send(("failed", f"{type(exc).__name__}: {exc}"))
            continue
        conn.send(("compiled", (now_us() - t0) / 1000.0, compiled is None))
        conn.send(("walked", walk_file(engine, compiled, instances)))


class EngineUnavailable(Exception):
    """An engine whose worker could not prepare it (the reason is the message)."""


class Worker:
    """One engine's worker process: started on demand, killed on a timeout, restarted for the next file."""

    def __init__(self, engine: str, tokenizer_dir: Path, eos_id: int, clock: str) -> None:
        self.engine, self.tokenizer_dir, self.eos_id, self.clock = engine, tokenizer_dir, eos_id, clock
        self.process: Any = None
        self.conn: Connection | None = None
        self.prep_ms: float | None = None
        self.version = ""

    def _start(self) -> None:
        """Spawn the worker and wait for its engine; EngineUnavailable if it cannot prepare it."""
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, self.engine, self.tokenizer_dir, self.eos_id,
                                                        self.clock), daemon=True)
        self.process.start()
        child.close()
        reply = self._receive(START_TIMEOUT_S)
        if reply[0] != "ready":
            self.stop()
            raise EngineUnavailable(reply[1] if reply[0] == "error" else f"worker start: {reply[0]}")
        if self.prep_ms is None:
            self.prep_ms, self.version = reply[1], reply[2]

    def _cpu_s(self) -> float:
        """The worker's CPU time so far (all its threads), seconds; 0 where /proc is unavailable."""
        try:
            with open(f"/proc/{self.process.pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return 0.0
        return (int(fields[11]) + int(fields[12])) / _TICKS

    def _receive(self, timeout: float) -> tuple[Any, ...]:
        """The worker's next message, ("timeout",) past `timeout` seconds, or ("crashed", exit code).

        With the CPU clock the limit is the worker's CPU time, so a loaded machine does not turn slow compiles
        into timeouts; elapsed time is then capped at WALL_FACTOR times the limit.
        """
        assert self.conn is not None
        cpu = self.clock == "cpu"
        wall_limit = timeout * (WALL_FACTOR if cpu else 1.0)
        start_wall, start_cpu = time.monotonic(), self._cpu_s() if cpu else 0.0
        try:
            while True:
                if self.conn.poll(min(POLL_S, timeout)):
                    return tuple(self.conn.recv())
                over_cpu = cpu and self._cpu_s() - start_cpu > timeout
                if over_cpu or time.monotonic() - start_wall > wall_limit:
                    return ("timeout",)
        except (EOFError, OSError):
            pass
        self.process.join(5)
        return ("crashed", self.process.exitcode)

    def stop(self) -> None:
        """Kill the worker (a compile cannot be interrupted any other way)."""
        if self.process is not None:
            self.process.kill()
            self.process.join()
        if self.conn is not None:
            self.conn.close()
        self.process = self.conn = None

    def close(self) -> None:
        """Let the worker end on its own, then make sure it has."""
        if self.conn is not None:
            try:
                self.conn.send(None)
            except (OSError, ValueError):
                pass
            self.process.join(10)
        self.stop()

    def run(self, file: SchemaFile, compile_timeout: float, walk_timeout: float) -> FileOutcome:
        """Compile one file in the worker and walk its instances; a timeout or crash kills the worker."""
        job = (file.schema, [(i.valid, i.spellings) for i in file.instances])
        for attempt in range(2):
            if self.process is None:
                self._start()
            assert self.conn is not None
            try:
                self.conn.send(job)
                break
            except OSError:  # the worker died between files: a fresh one takes the file
                self.stop()
                if attempt:
                    raise
        reply = self._receive(compile_timeout)
        if reply[0] == "failed":
            return FileOutcome(file.name, "failed", reply[1])
        if reply[0] != "compiled":
            return self._lost(file, reply, f"compile over {compile_timeout:g} s")
        outcome = FileOutcome(file.name, "compiled", "the schema admits no value" if reply[2] else "", reply[1])
        walked = self._receive(walk_timeout)
        if walked[0] != "walked":
            lost = self._lost(file, walked, f"walking its instances over {walk_timeout:g} s")
            lost.compile_ms = outcome.compile_ms
            return lost
        for key, value in walked[1].items():
            setattr(outcome, key, value)
        return outcome

    def _lost(self, file: SchemaFile, reply: tuple[Any, ...], limit: str) -> FileOutcome:
        """The outcome of a file whose worker timed out (killed here) or died."""
        self.stop()
        if reply[0] == "timeout":
            return FileOutcome(file.name, "timeout", limit)
        return FileOutcome(file.name, "crashed", f"the worker died (exit code {reply[1]})")


def run_maskbench(
    engines: Sequence[str],
    files: Sequence[SchemaFile],
    tokenizer_dir: Path,
    eos_id: int,
    *,
    compile_timeout: float = COMPILE_TIMEOUT_S,
    walk_timeout: float = WALK_TIMEOUT_S,
    clock: str = "wall",
    progress: Progress | None = None,
) -> list[EngineRun]:
    """Every engine over every file, one engine at a time, each in its own worker process."""
    from tooldec.bench.engines import ENGINES

    tick = progress or (lambda _d, _n: None)
    runs = []
    for name in engines:
        run = EngineRun(name)
        runs.append(run)
        if (missing := ENGINES[name].missing()) is not None:
            run.status, run.reason = "skipped", missing
            tick(f"{name}: skipped", len(files))
            continue
        worker = Worker(name, tokenizer_dir, eos_id, clock)
        try:
            for k, file in enumerate(files):
                try:
                    run.outcomes.append(worker.run(file, compile_timeout, walk_timeout))
                except EngineUnavailable as exc:
                    run.status, run.reason, run.outcomes = "failed", str(exc), []
                    tick(f"{name}: failed", len(files) - k)
                    break
                tick(f"{name} {run.outcomes[-1].status[:4]} {file.name[:40]}", 1)
        except BaseException:
            worker.stop()
            raise
        worker.close()
        run.prep_ms, run.version = worker.prep_ms, worker.version
    return runs


def failure_text(reason: str) -> str:
    """A reason's gist: its first line (a traceback's last), at most 120 characters."""
    lines = reason.strip().splitlines() or [""]
    return (lines[-1] if lines[0].startswith("Traceback") else lines[0])[:120]

