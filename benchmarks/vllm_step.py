"""vLLM's engine step with tooldec's logits processor: two builds of tooldec side by side, vLLM's peers in the same
run, and optionally where the engine core's time goes (py-spy).

Each setup is `LABEL=PYTHON:CONFIG`: vLLM's OpenAI server run by PYTHON (an environment with vLLM and one build of
tooldec installed) in one of `tooldec.integrations.vllm_server.CONFIGS` (`tooldec`, `vllm`: Hermes parser, calls
unconstrained in `auto`, `vllm-strict`: vLLM's xgrammar structural tag). Each round starts every setup's server in
turn (the order reversed every other round, so that before and after alternate), sends the first `--entries`
BFCL simple_python entries with `--concurrency` clients in each tool_choice mode (vllm_tools.run_requests: greedy,
calls checked against the entry's schema), and stops it. Per level: tokens/s, invalid calls, HTTP errors by kind
(5xx, 4xx, lost: no answer within `--timeout` or a broken connection) and the load average at its start and end.

With `--profile DIR` the API server, its engine core and the engine's worker (the model, the sampler and the
logits processors run there) are recorded with `py-spy record --subprocesses --nonblocking` during each level (raw collapsed stacks in DIR;
`--native` adds C++ frames but stops the processes at every sample) and each recording is summarised: the share
of the active samples under tooldec's frames, vLLM's structured output (xgrammar), the model's forward, the
sampler, and tooldec's functions.

    python benchmarks/vllm_step.py --setup before=/venv-a/bin/python:tooldec --setup after=/venv-b/bin/python:tooldec \\
        --setup vllm-strict=/venv-b/bin/python:vllm-strict --setup vllm=/venv-b/bin/python:vllm --rounds 2
    python benchmarks/vllm_step.py --summarise DIR/tooldec-auto-1shot-r0.txt

Writes benchmarks/results/vllm_step.json and .md (`--out`, `--name`).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vllm_tools  # the BFCL requests and their scoring, beside this script

from tooldec.eval.data import load_bfcl
from tooldec.integrations.vllm_server import VLLMServer, free_port, server_command

ROOT = Path(__file__).resolve().parent

MARKERS = {
    "tooldec (all)": "(tooldec/",
    "tooldec sync (accept tokens)": "sync (tooldec/integrations/batch.py",
    "tooldec fill + apply": "fill_bitmasks",
    "tooldec batch update (new requests)": "update (tooldec/integrations/batch.py",
    "vLLM structured output (xgrammar)": "structured_output",
    "model forward": "model_executor",
    "sampler": "sample/sampler.py",
    "engine core waiting for the worker (spin)": "SpinCondition.wait",
    "API server: tooldec's request checks": "validate_params (tooldec/",
    "API server: tool parser": "tool_parsers",
}
"""Share of the engine core's samples whose stack holds each text."""


def summarise(path: Path, top: int = 12) -> dict[str, Any]:
    """Shares of py-spy's raw samples (engine core and its worker, active samples only): MARKERS, each process,
    and tooldec's functions by the outermost and the innermost tooldec frame."""
    procs: collections.Counter[str] = collections.Counter()
    marks: collections.Counter[str] = collections.Counter()
    outer: collections.Counter[str] = collections.Counter()
    inner: collections.Counter[str] = collections.Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        frames = stack.split(";")
        named = [f for f in frames if f.startswith("process ")]  # py-spy nests a child under its parent
        procs[re.sub(r"^process \d+:", "", named[-1]).strip('"')[:60] if named else "?"] += n
        for name, text in MARKERS.items():
            if text in stack:
                marks[name] += n
        ours = [re.sub(r":\d+\)", ")", f) for f in frames if "(tooldec/" in f]
        if ours:
            outer[ours[0]] += n
            inner[ours[-1]] += n
    total = sum(procs.values())
    if not total:
        return {"samples": 0}
    pct = lambda n: round(100 * n / total, 1)
    return {
        "samples": total,
        "processes": {k: pct(v) for k, v in procs.most_common()},
        "shares": {name: pct(marks[name]) for name in MARKERS},
        "tooldec_outermost": {k: pct(v) for k, v in outer.most_common(top)},
        "tooldec_innermost": {k: pct(v) for k, v in inner.most_common(top)},
    }


def profile_text(summary: dict[str, Any]) -> str:
    """A recording's summary as text."""
    if not summary.get("samples"):
        return "no samples"
    out = [f"{summary['samples']} active samples"]
    out += [f"  {v:5.1f}%  process {k}" for k, v in summary["processes"].items()]
    out += [f"  {v:5.1f}%  {k}" for k, v in summary["shares"].items()]
    for key in ("tooldec_outermost", "tooldec_innermost"):
        if summary[key]:
            out.append(f" {key.replace('_', ' ')} frame:")
            out += [f"  {v:5.1f}%  {k}" for k, v in summary[key].items()]
    return "\n".join(out)


def run_setup(label: str, python: str, config: str, model: str, items: list[Any], args: argparse.Namespace,
              round_no: int) -> list[dict[str, Any]]:
    """One server of one setup: every tool_choice mode at the concurrency, optionally recorded by py-spy."""
    out = Path(args.out)
    port = free_port()
    cmd = server_command(python, model, port, config=config, served_name="smollm2")
    rows = []
    with VLLMServer(cmd, port, log_path=out / f"{args.name}_{label}.log") as server:
        assert server.process is not None
        for choice in args.tool_choice:
            mode, few_shot = choice.removesuffix("-1shot"), choice.endswith("-1shot")
            print(f"round {round_no} {label}: {choice}, {len(items)} requests", file=sys.stderr, flush=True)
            spying, raw = None, None
            if args.profile:  # the API server, its engine core and the worker
                raw = Path(args.profile) / f"{label}-{choice}-r{round_no}.txt"
                spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
                native = ["--native"] if args.native else ["--nonblocking"]
                spying = subprocess.Popen([spy, "record", "--pid", str(server.process.pid), "--subprocesses", "--rate",
                                           str(args.rate), *native, "--format", "raw", "--output", str(raw)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            load_before = os.getloadavg()[0]
            r = vllm_tools.run_requests(server.url, "smollm2", items, concurrency=args.concurrency,
                                        max_tokens=args.max_tokens, tool_choice=mode, few_shot=few_shot,
                                        timeout=args.timeout)
            row = {"label": label, "config": config, "round": round_no, "load_start": round(load_before, 2),
                   "load_end": round(os.getloadavg()[0], 2), **vllm_tools.error_kinds(r["records"]), **r}
            if spying is not None and raw is not None:
                spying.send_signal(2)  # SIGINT: py-spy writes what it has
                spying.wait(120)
                row["profile"] = summarise(raw)
                print(profile_text(row["profile"]), file=sys.stderr, flush=True)
            rows.append(row)
    (out / f"{args.name}_{label}.log").unlink(missing_ok=True)
    return rows


def markdown(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The per-level table, then each setup's median tokens/s over the rounds as a ratio to the first setup's."""
    lines = [
        "# vLLM's engine step with tooldec: before / after, vLLM's peers in the same run",
        "",
        f"{meta['entries']} BFCL simple_python entries per level, {meta['concurrency']} clients, greedy, max_tokens "
        f"{meta['max_tokens']}, SmolLM2-135M (float32, eager, one vLLM core), vLLM {meta['vllm']} on "
        f"{meta['machine']}; setups alternate within each round, the order reversed every other round. Load = "
        "1-minute load average at the level's start / end. Invalid = calls that are unparseable, name an unknown "
        "tool or break the schema. Setups: " + "; ".join(f"`{k}` = {v}" for k, v in meta["setups"].items()) + ".",
        "",
        "| round | setup | tool_choice | requests | tokens/s | p50 s | calls | invalid | 5xx | 4xx | lost | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['round']} | {r['label']} | {r['tool_choice']} | {r['requests']} | {r['tokens_per_second']} | "
            f"{r['latency_p50_s']} | {r['calls']} | {r['invalid_calls']} | {r['5xx']} | {r['4xx']} | {r['lost']} | "
            f"{r['load_start']} / {r['load_end']} |"
        )
    labels = list(dict.fromkeys(r["label"] for r in results))
    choices = list(dict.fromkeys(r["tool_choice"] for r in results))
    lines += ["", "Median tokens/s over the rounds, and the ratio to `" + labels[0] + "`'s in each round (median):",
              "", "| setup | " + " | ".join(choices) + " |", "|---|" + "---|" * len(choices)]
    for label in labels:
        cells = []
        for choice in choices:
            mine = {r["round"]: r["tokens_per_second"] for r in results if r["label"] == label
                    and r["tool_choice"] == choice}
            base = {r["round"]: r["tokens_per_second"] for r in results if r["label"] == labels[0]
                    and r["tool_choice"] == choice}
            ratios = [mine[k] / base[k] for k in mine if base.get(k)]
            cells.append(f"{statistics.median(mine.values()):.1f} ({statistics.median(ratios):.2f}x)"
                         if mine and ratios else "")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    profiled = [r for r in results if r.get("profile", {}).get("samples")]
    if profiled:
        lines += ["", "Engine core and worker, share of the active py-spy samples:", "",
                  "| setup | tool_choice | samples | " + " | ".join(MARKERS) + " |",
                  "|---|---|---|" + "---|" * len(MARKERS)]
        for r in profiled:
            p = r["profile"]
            lines.append(f"| {r['label']} | {r['tool_choice']} | {p['samples']} | "
                         + " | ".join(f"{p['shares'][m]}%" for m in MARKERS) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    """Run the rounds and write the results."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--setup", action="append", default=[], help="LABEL=PYTHON:CONFIG (repeat)")
    p.add_argument("--model", default=None, help="HF model folder (default: the embedded SmolLM2, converted)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--entries", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=160)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds a request may take before it is lost")
    p.add_argument("--tool-choice", nargs="+", default=["auto-1shot", "required"],
                   choices=["auto", "auto-1shot", "required"])
    p.add_argument("--profile", default=None, help="record the engine core with py-spy into this folder")
    p.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    p.add_argument("--native", action="store_true",
                   help="py-spy --native (C++ frames; it stops the processes at every sample: slow on a small machine)")
    p.add_argument("--summarise", type=Path, default=None, help="only summarise this raw py-spy recording")
    p.add_argument("--shared", default=os.environ.get("TOOLDEC_SHARED", str(ROOT.parent.parent / "shared")))
    p.add_argument("--out", default=str(ROOT / "results"))
    p.add_argument("--name", default="vllm_step")
    p.add_argument("--append", action="store_true",
                   help="add these rounds to the results file's (same setups), numbered after them")
    args = p.parse_args()
    if args.summarise:
        print(profile_text(summarise(args.summarise)))
        return
    setups = {}
    for spec in args.setup:
        label, _, rest = spec.partition("=")
        python, _, config = rest.rpartition(":")
        setups[label] = (python, config)
    if not setups:
        raise SystemExit("no --setup given")
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    model = args.model
    if model is None:
        model = vllm_tools.smollm2_hf()
    items = list(load_bfcl("simple", args.shared).items[: args.entries])
    Path(args.out).mkdir(parents=True, exist_ok=True)
    target = Path(args.out) / f"{args.name}.json"
    results: list[dict[str, Any]] = json.loads(target.read_text())["results"] if args.append else []
    first = 1 + max((r["round"] for r in results), default=-1)
    for round_no in range(first, first + args.rounds):
        order = list(setups) if round_no % 2 == 0 else list(reversed(setups))
        for label in order:
            python, config = setups[label]
            results += run_setup(label, python, config, model, items, args, round_no)
    meta = {
        "entries": len(items), "concurrency": args.concurrency, "max_tokens": args.max_tokens,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "model": model,
        "vllm": vllm_tools._vllm_version(next(iter(setups.values()))[0]),
        "setups": {label: f"{config} ({python})" for label, (python, config) in setups.items()},
    }
    for r in results:
        r.pop("records", None)
    target.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    (Path(args.out) / f"{args.name}.md").write_text(markdown(results, meta))
    print(markdown(results, meta))


if __name__ == "__main__":
    main()
