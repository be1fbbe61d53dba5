"""The MaskBench conformance ratchet (issue 14): check-schemas over ../shared/data/maskbench against the committed
per-file baseline tests/conformance/maskbench_llama3.json.

    python tests/conformance/ratchet.py            # check every file; exit 1 on a regression
    python tests/conformance/ratchet.py --sample   # the deterministic tenth that CI checks
    python tests/conformance/ratchet.py --update   # check every file and rewrite the baseline (on purpose)
    python tests/conformance/ratchet.py --jobs 2   # files side by side in 2 processes
    python tests/conformance/ratchet.py --files A.json B.json [--update]   # only these files (their entries)

A regression is a crash, a file that compiled and now does not, fewer valid instances accepted, or any invalid
instance accepted. Improvements are listed; they only stick once the baseline is updated with --update and
committed (the commit says why). With --files, --update rewrites only those files' entries and moves the summary
by their difference (each file's test counts read from the file); the head lists such partial updates, and
the compile times stay those of the last full run. tests/test_conformance_ratchet.py runs the sample in the slow tier.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tooldec.compiler import Compiler
from tooldec.conformance import FileResult, baseline_entry, check_file, improvements, regressions, summarize
from tooldec.vocab import Vocabulary

BASELINE = Path(__file__).with_name("maskbench_llama3.json")
SHARED = Path(os.environ.get("TOOLDEC_SHARED", Path(__file__).resolve().parents[3] / "shared"))
TOKENIZER = "llama3"
TIMEOUT_S = 10.0  # per compile and per test, as `tooldec check-schemas --timeout 10`
SAMPLE_ONE_IN = 10


def maskbench_files(shared: Path = SHARED, *, sample: bool = False) -> list[Path]:
    """The MaskBench files, or the deterministic sample (name hash) of one in SAMPLE_ONE_IN."""
    files = sorted((shared / "data" / "maskbench").glob("*.json"))
    if sample:
        files = [f for f in files if int(hashlib.sha1(f.name.encode()).hexdigest(), 16) % SAMPLE_ONE_IN == 0]
    return files


def load_baseline(path: Path = BASELINE) -> dict[str, dict]:
    """File name -> baseline entry."""
    return json.loads(path.read_text(encoding="utf-8"))["files"]


def write_baseline(results: list[FileResult], seconds: float, path: Path = BASELINE) -> None:
    """The baseline document of a full run: settings, the summary, then one line per file."""
    head = {
        "command": f"tooldec check-schemas ../shared/data/maskbench --tokenizer ../shared/tokenizers/{TOKENIZER} "
        f"--timeout {TIMEOUT_S:g} --json",
        "update": "python tests/conformance/ratchet.py --update",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "seconds": round(seconds),
        "summary": summarize(results),
    }
    _write(head, {r.file: baseline_entry(r) for r in results}, path)


def _write(head: dict[str, Any], entries: dict[str, dict[str, Any]], path: Path) -> None:
    """The head, then one line per file in name order (so that diffs stay readable)."""
    lines = [json.dumps(head, indent=1)[:-2] + ',\n "files": {']
    names = sorted(entries)
    for i, name in enumerate(names):
        comma = "," if i < len(names) - 1 else ""
        lines.append(f"  {json.dumps(name)}: {json.dumps(entries[name], ensure_ascii=False)}{comma}")
    lines.append(" }\n}\n")
    path.write_text("\n".join(lines), encoding="utf-8")


def _counted(entry: dict[str, Any] | None, invalid_total: int) -> Counter[str]:
    """A baseline entry's share of the summary (a file's invalid instances count only when it compiled)."""
    if entry is None:
        return Counter()
    out = Counter({"files": 1, entry["status"]: 1})
    if entry["status"] == "compiled":
        out["valid_total"] += entry["valid_total"]
        out["valid_accepted"] += entry["valid_accepted"]
        out["invalid_total"] += invalid_total
        out["invalid_rejected"] += invalid_total - entry["invalid_accepted"]
    return out


def update_entries(results: list[FileResult], shared: Path = SHARED, path: Path = BASELINE) -> dict[str, Any]:
    """Rewrite the baseline entries of `results` only, moving the summary by their difference; the new summary."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    entries = doc.pop("files")
    summary = doc["summary"]
    for r in results:
        tests = json.loads((shared / "data" / "maskbench" / r.file).read_text()).get("tests", [])
        invalid = sum(not t.get("valid") for t in tests)
        new = baseline_entry(r)
        diff = _counted(new, invalid)
        diff.subtract(_counted(entries.get(r.file), invalid))
        for key, delta in diff.items():
            summary[key] = summary.get(key, 0) + delta
        entries[r.file] = new
    doc.setdefault("partial_updates", []).append(
        {"date": time.strftime("%Y-%m-%d", time.gmtime()), "files": sorted(r.file for r in results)}
    )
    _write(doc, entries, path)
    return summary


_worker: Compiler | None = None


def _start_worker(tokenizer: Path) -> None:
    global _worker
    sys.set_int_max_str_digits(0)
    _worker = Compiler(Vocabulary.from_file(tokenizer))


def _check_in_worker(path: Path, timeout_s: float) -> FileResult:
    assert _worker is not None
    return check_file(path, _worker, timeout_s=timeout_s)


def run(files: list[Path], tokenizer: Path, *, timeout_s: float = TIMEOUT_S, jobs: int = 1) -> list[FileResult]:
    """check-schemas over `files` in `jobs` processes (each with its own Compiler), results in file order, with a
    progress bar on a terminal."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task("maskbench", total=len(files))
        if jobs <= 1:
            _start_worker(tokenizer)
            results = []
            for f in files:
                results.append(_check_in_worker(f, timeout_s))
                bar.update(task, advance=1)
            return results
        with ProcessPoolExecutor(jobs, initializer=_start_worker, initargs=(tokenizer,)) as pool:
            futures = [pool.submit(_check_in_worker, f, timeout_s) for f in files]
            for fut in as_completed(futures):
                bar.update(task, advance=1)
            return [fut.result() for fut in futures]


def main() -> None:
    """Check, print the summary, regressions and improvements; rewrite the baseline with --update."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="Rewrite the baseline from a full run.")
    parser.add_argument("--sample", action="store_true", help="Only the deterministic sample CI checks.")
    parser.add_argument("--shared", type=Path, default=SHARED)
    parser.add_argument("--jobs", type=int, default=1, help="Processes checking files side by side.")
    parser.add_argument("--files", nargs="+", metavar="NAME", help="Only these MaskBench files (names).")
    args = parser.parse_args()
    sys.set_int_max_str_digits(0)
    if args.files:
        files = [args.shared / "data" / "maskbench" / name for name in args.files]
    else:
        files = maskbench_files(args.shared, sample=args.sample and not args.update)
    t0 = time.perf_counter()
    results = run(files, args.shared / "tokenizers" / TOKENIZER, jobs=args.jobs)
    seconds = time.perf_counter() - t0
    print(json.dumps(summarize(results) | {"seconds": round(seconds, 1)}))
    baseline = load_baseline() if BASELINE.exists() else {}
    worse, better = regressions(results, baseline), improvements(results, baseline)
    for line in better:
        print("improved:", line)
    for line in worse:
        print("REGRESSION:", line)
    if args.update and args.files:
        print(json.dumps({"baseline_summary": update_entries(results, args.shared)}))
        print(f"baseline entries rewritten: {len(results)} in {BASELINE}")
    elif args.update:
        write_baseline(results, seconds)
        print(f"baseline written: {BASELINE}")
    elif worse:
        sys.exit(1)


if __name__ == "__main__":
    main()
