"""Schema conformance: compile MaskBench-style files as single-value grammars and feed their test instances.

Each file holds `{"schema": ..., "tests": [{"valid": bool, "data": ...}]}`. A schema either compiles, is
refused with UnsupportedSchemaError / SchemaError (counted as unsupported, with the reason), runs past the
time limit (counted as unsupported, reason "timeout") or crashes (a bug). Every test instance is written in
the grammar's canonical form, tokenised, and fed token by token; it is accepted when every token is allowed
and the end state accepts.
"""

from __future__ import annotations

import json
import signal
import statistics
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tooldec.compiler import CompiledGrammar, Compiler
from tooldec.errors import EmptyGrammarError, ToolSpecError, UnsupportedSchemaError
from tooldec.grammar.canonical import CanonicalWriter
from tooldec.guide import Guide
from tooldec.vocab import Vocabulary


class _Timeout(Exception):
    pass


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise _Timeout in the main thread after `seconds` (SIGALRM; a no-op limit where that is unavailable)."""
    if seconds <= 0 or not hasattr(signal, "setitimer"):
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise _Timeout()

    old = signal.signal(signal.SIGALRM, handler)
    # repeating every 50 ms: an exception raised where Python swallows it (a gc callback, seen in CI under
    # hypothesis) would otherwise lose the limit for the rest of the file
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.05)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass
class FileResult:
    """The outcome for one schema file."""

    file: str
    status: str  # compiled | unsupported | crashed
    reason: str = ""
    compile_ms: float | None = None
    valid_total: int = 0
    valid_accepted: int = 0
    invalid_total: int = 0
    invalid_rejected: int = 0
    failures: list[str] = field(default_factory=list)


def feed(guide: Guide, ids: list[int]) -> bool:
    """Whether the guide takes every token in turn and ends in an accepting state."""
    for t in ids:
        if not guide.accepts(t):
            return False
        guide.advance(t)
    return guide.is_accepting()


@dataclass
class Compiled:
    """A schema compiled the way check-schemas compiles it, or why it was not."""

    status: str  # compiled | unsupported | crashed
    reason: str = ""
    grammar: CompiledGrammar | None = None  # None when compiled but empty (every instance is rejected)
    compile_ms: float | None = None


def compile_checked(
    schema: Any, compiler: Compiler, *, timeout_s: float = 10.0, additional_properties: bool = True
) -> Compiled:
    """Compile one schema as a single value, classifying every failure.

    With JSON Schema's open objects by default, as check-schemas reads a schema; `additional_properties=False`
    is the strict reading of tool calls (an object without `additionalProperties` admits only declared keys).
    Refusals (UnsupportedSchemaError, an invalid schema, a timeout, nesting past Python's recursion limit) are
    "unsupported"; any other exception is a tooldec bug, "crashed" with its traceback.
    """
    out = Compiled(status="compiled")
    try:
        t0 = time.perf_counter()
        with time_limit(timeout_s):
            try:
                out.grammar = compiler.compile_schema(
                    schema, additional_properties=additional_properties, use_cache=False
                )
            except EmptyGrammarError:
                out.reason = "the schema admits no value: every instance is rejected"
        out.compile_ms = (time.perf_counter() - t0) * 1000
    except UnsupportedSchemaError as exc:
        return Compiled(status="unsupported", reason=f"{exc.keyword}: {exc}")
    except ToolSpecError as exc:
        return Compiled(status="unsupported", reason=f"invalid schema: {exc}")
    except _Timeout:
        return Compiled(status="unsupported", reason=f"timeout: compile over {timeout_s}s")
    except RecursionError:
        return Compiled(status="unsupported", reason="size: schema nested too deeply")
    except Exception:  # noqa: BLE001 - any other exception is a tooldec bug, recorded as a crash
        return Compiled(status="crashed", reason=traceback.format_exc(limit=8))
    return out


def accepts(compiled: Compiled, writer: CanonicalWriter, vocab: Vocabulary, value: Any) -> bool:
    """Whether the guide takes `value` in its canonical text, token by token, and ends accepting.

    A value with no JSON spelling (NaN, ...) is not one the grammar can produce: rejected.
    """
    try:
        text = writer.dumps(value)
        ids = vocab.encode(text)
    except (ValueError, TypeError):
        return False
    return compiled.grammar is not None and feed(compiled.grammar.guide(), ids)


def check_file(path: Path, compiler: Compiler, *, timeout_s: float = 10.0) -> FileResult:
    """Compile one file's schema and run its tests."""
    try:
        doc = json.loads(path.read_text())
        schema = doc["schema"]
        tests = doc.get("tests", [])
    except (OSError, ValueError, KeyError) as exc:
        return FileResult(file=path.name, status="crashed", reason=f"unreadable: {exc}")
    compiled = compile_checked(schema, compiler, timeout_s=timeout_s)
    res = FileResult(file=path.name, status=compiled.status, reason=compiled.reason, compile_ms=compiled.compile_ms)
    if compiled.status != "compiled":
        return res
    writer = CanonicalWriter(schema)
    for i, test in enumerate(tests):
        valid = bool(test.get("valid"))
        try:
            with time_limit(timeout_s):
                ok = accepts(compiled, writer, compiler.vocab, test.get("data"))
        except _Timeout:
            ok = False
            res.failures.append(f"test {i}: timeout")
        except Exception:  # noqa: BLE001 - recorded as a crash, see above
            res.status = "crashed"
            res.reason = traceback.format_exc(limit=8)
            return res
        if valid:
            res.valid_total += 1
            res.valid_accepted += ok
        else:
            res.invalid_total += 1
            res.invalid_rejected += not ok
        if ok != valid:
            res.failures.append(f"test {i}: valid={valid} accepted={ok}")
    return res


def summarize(results: list[FileResult]) -> dict[str, Any]:
    """The summary object of `tooldec check-schemas --json`."""
    compiled = [r for r in results if r.status == "compiled"]
    times = sorted(r.compile_ms for r in compiled if r.compile_ms is not None)

    def pct(q: float) -> float | None:
        if not times:
            return None
        return round(times[min(len(times) - 1, int(q * len(times)))], 3)

    return {
        "files": len(results),
        "compiled": len(compiled),
        "unsupported": sum(r.status == "unsupported" for r in results),
        "crashed": sum(r.status == "crashed" for r in results),
        "valid_total": sum(r.valid_total for r in compiled),
        "valid_accepted": sum(r.valid_accepted for r in compiled),
        "invalid_total": sum(r.invalid_total for r in compiled),
        "invalid_rejected": sum(r.invalid_rejected for r in compiled),
        "compile_ms_median": round(statistics.median(times), 3) if times else None,
        "compile_ms_p95": pct(0.95),
    }


def result_line(r: FileResult) -> dict[str, Any]:
    """One per-file JSON line for --verbose."""
    d = asdict(r)
    d["failures"] = d["failures"][:5]
    return d


def baseline_entry(r: FileResult) -> dict[str, Any]:
    """A file's line in a conformance baseline: status, reason (its first line, or a traceback's last, shortened),
    valid accepted of valid, invalid accepted."""
    lines = r.reason.strip().splitlines() or [""]
    return {
        "status": r.status,
        "reason": (lines[-1] if lines[0].startswith("Traceback") else lines[0])[:160],
        "valid_accepted": r.valid_accepted,
        "valid_total": r.valid_total,
        "invalid_accepted": r.invalid_total - r.invalid_rejected,
    }


def regressions(results: list[FileResult], baseline: dict[str, dict[str, Any]]) -> list[str]:
    """How `results` fall short of `baseline` (file name -> baseline_entry), one line per file.

    A regression is a crash, a file that compiled and now does not, fewer valid instances accepted, or any
    invalid instance accepted (zero is the floor, whatever the baseline says). Files the baseline lacks are
    held to the floor only.
    """
    out = []
    for r in results:
        now = baseline_entry(r)
        was = baseline.get(r.file, {})
        why = []
        if r.status == "crashed":
            why.append(f"crashed: {now['reason']}")
        elif was.get("status") == "compiled" and r.status != "compiled":
            why.append(f"compiled before, now {r.status}: {now['reason']}")
        if r.status == "compiled" and now["valid_accepted"] < was.get("valid_accepted", 0):
            why.append(f"valid accepted {was['valid_accepted']} -> {now['valid_accepted']} of {now['valid_total']}")
        if now["invalid_accepted"]:
            why.append(f"{now['invalid_accepted']} invalid instance(s) accepted")
        if why:
            out.append(f"{r.file}: " + "; ".join(why) + (f" ({r.failures[:3]})" if r.failures else ""))
    return out


def improvements(results: list[FileResult], baseline: dict[str, dict[str, Any]]) -> list[str]:
    """Where `results` do better than `baseline`: newly compiled files, more valid instances accepted."""
    out = []
    for r in results:
        was = baseline.get(r.file)
        if was is None:
            continue
        if r.status == "compiled" and was["status"] != "compiled":
            out.append(f"{r.file}: now compiles (was {was['status']}: {was['reason']})")
        elif r.status == "compiled" and r.valid_accepted > was["valid_accepted"]:
            out.append(f"{r.file}: valid accepted {was['valid_accepted']} -> {r.valid_accepted} of {r.valid_total}")
    return out
