"""The serving table: vLLM with and without tooldec, `tooldec serve` and the backend's own decode loop, one run.

Setups (SmolLM2-135M in each, greedy, the same BFCL v4 simple_python entries):

- `vllm`: vLLM's OpenAI server with its Hermes parser as shipped (calls unconstrained in `auto`);
- `vllm-strict`: the same with `--tool-strict-level parameter` (vLLM's xgrammar constrains the arguments);
- `vllm+tooldec`: vLLM with tooldec's parser and logits processor (`tooldec.integrations.vllm_server.CONFIGS`);
- `tooldec-serve`: `tooldec serve` (serve_load.py's `start_tooldec`; llama.cpp, the embedded GGUF by default);
- `backend-generate`: right after tooldec-serve's level at one client, the backend's own greedy, unguided decode
  loop in this process on the prompts the server rendered for those requests, decoding from each as many tokens
  as the server returned (serving.py's `backend_row`, its prefill of each prompt's own part timed).

Each round starts every setup's server in turn (the order reversed every other round), sends one unmeasured
request per tool_choice (the entry after the measured ones), then for each tool_choice and each client count
sends the first `--entries` entries from that many clients at once (vllm_tools.run_requests: the entry's tools in
the system message and in `tools`, calls checked against its schema, BFCL AST-checked) and stops the server.
`auto` is sent with one worked exchange before the question (vllm_tools.FEW_SHOT; SmolLM2 calls nothing in
`auto` without it) unless `--tool-choice auto` names the plain form. Every row: tokens/s = completion tokens /
wall seconds of the level, invalid calls, lost requests (no answer in `--timeout` s, a broken connection) and 5xx
apart, BFCL-correct, the 1-minute load at the level's start and end, the time written.

    python benchmarks/serving_table.py --vllm-python VENV/bin/python --entries 50 --clients 1,8,32 \
        --tool-choice auto-1shot,required --rounds 1

(`VENV`: a Python that has vLLM and this checkout of tooldec, a venv made with `--system-site-packages` whose
site-packages holds a `.pth` line naming the vLLM venv's site-packages, this checkout installed editable in it;
benchmarks/README.md. 72 minutes on the 2-core machine.) Short checks: `--entries 2 --clients 1,8
--tool-choice auto --setups vllm+tooldec --out /tmp/table-check`; `--entries 2 --clients 1 --out /tmp/check`. Writes benchmarks/results/serving.json (`rows`: `{setup,
tool_choice, clients, tokens_per_s, invalid, lost, errors_5xx, bfcl_correct, load, written, ...}`, `meta`) and
serving.md (all setups side by side, the ratios of the issue's bars, every row); `--table` only rewrites the
Markdown from the JSON file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serve_load
import serving
import vllm_tools

from tooldec.eval.data import load_bfcl
from tooldec.integrations.vllm_server import VLLMServer, free_port, server_command

ROOT = Path(__file__).resolve().parent
MODEL_NAME = "smollm2"
VLLM_SETUPS = {"vllm": "vllm", "vllm-strict": "vllm-strict", "vllm+tooldec": "tooldec"}
"""Row label → `vllm_server.CONFIGS` key."""
SETUPS = (*VLLM_SETUPS, "tooldec-serve")
BARS = {"vllm-strict": 1.0, "vllm": 0.95, "backend-generate": 0.9}
"""The least tokens/s ratio the issue asks of tooldec against each (against unguided vllm in auto only)."""
BARS_NOTE = (
    "Bars: vllm+tooldec tokens/s >= vllm-strict's at every level, >= 0.95x unguided vllm's in auto; 0 invalid "
    "calls, 0 lost, 0 5xx; BFCL-correct >= vllm-strict's; tooldec-serve at 1 client >= 0.9x backend-generate."
)


def now() -> str:
    """The time, UTC."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


def load1() -> float:
    """The 1-minute load average."""
    return round(os.getloadavg()[0], 2)


@contextlib.contextmanager
def tooldec_serve(args: argparse.Namespace) -> Iterator[tuple[str, list[str]]]:
    """`tooldec serve` running (the URL and its command line), stopped on leaving."""
    ns = argparse.Namespace(max_batch=args.max_batch, model=MODEL_NAME, server_model=args.serve_model,
                            threads=args.threads, backend=args.backend, stem="serving_table", start_timeout=600)
    proc, url = serve_load.start_tooldec(ns, ["--llama-ctx", str(args.llama_ctx)]
                                         + (["--llama-kv-split"] if args.llama_kv_split else []))
    try:
        yield url, [str(a) for a in proc.args] if isinstance(proc.args, list) else [str(proc.args)]
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextlib.contextmanager
def vllm_serve(setup: str, model: str, args: argparse.Namespace) -> Iterator[tuple[str, list[str]]]:
    """vLLM's OpenAI server in setup `setup` running (the URL and its command line), stopped on leaving."""
    port = free_port()
    cmd = server_command(args.vllm_python, model, port, config=VLLM_SETUPS[setup], served_name=MODEL_NAME,
                         cpu=not args.cuda)
    log = Path(args.out) / f"{args.stem}_{setup.replace('+', '_')}.log"
    with VLLMServer(cmd, port, log_path=log) as server:
        yield server.url, cmd
    log.unlink(missing_ok=True)


def level(url: str, items: list[Any], clients: int, choice: str, args: argparse.Namespace
          ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One level: every item once from `clients` clients; the row and the requests' records."""
    mode, few_shot = choice.removesuffix("-1shot"), choice.endswith("-1shot")
    before = load1()
    r = vllm_tools.run_requests(url, MODEL_NAME, items, concurrency=clients, max_tokens=args.max_tokens,
                                tool_choice=mode, few_shot=few_shot, timeout=args.timeout)
    kinds = vllm_tools.error_kinds(r["records"])
    row = {
        "tool_choice": mode, "few_shot": few_shot, "clients": clients, "tokens_per_s": r["tokens_per_second"],
        "invalid": r["invalid_calls"], "lost": kinds["lost"], "errors_5xx": kinds["5xx"],
        "errors_4xx": kinds["4xx"], "bfcl_correct": r["bfcl_correct"], "load": [before, load1()],
        "requests": r["requests"], "completion_tokens": r["completion_tokens"], "wall_s": r["wall_seconds"],
        "latency_p50_s": r["latency_p50_s"], "latency_p99_s": r["latency_p99_s"], "calls": r["calls"],
        "valid_calls": r["valid_calls"], "unparsed_calls": r["unparsed_calls"], "truncated_calls": r["truncated_calls"],
        "invalid_examples": r["invalid_examples"][:3],
        "error_examples": [x["error"] for x in r["records"] if "error" in x][:3],
    }
    return row, r["records"]


def backend_level(side: tuple[Any, Any], items: list[Any], records: list[dict[str, Any]], choice: str
                  ) -> dict[str, Any]:
    """backend-generate on the prompts tooldec serve rendered for `items`, as many tokens from each as it returned
    (requests without an answer left out)."""
    lm, template = side
    mode, few_shot = choice.removesuffix("-1shot"), choice.endswith("-1shot")
    prompts, lengths = [], []
    for item, record in zip(items, records, strict=True):
        if record.get("completion_tokens"):
            messages, tools = vllm_tools.request_messages(item, few_shot)
            body = {"model": MODEL_NAME, "messages": messages, "tools": tools, "tool_choice": mode}
            prompts.append(serving.prompt_of(lm, template, body))
            lengths.append(record["completion_tokens"])
    row = serving.backend_row(lm, prompts, lengths)
    return {**row, "tool_choice": mode, "few_shot": few_shot, "clients": 1, "bfcl_correct": None,
            "load": [row["load"][0][0], row["load"][1][0]]}


def run_setup(setup: str, items: list[Any], warm: list[Any], model: str, side: tuple[Any, Any] | None,
              args: argparse.Namespace, round_no: int) -> list[dict[str, Any]]:
    """One server of `setup`: every tool_choice at every client count (and backend-generate after tooldec serve's
    level at one client)."""
    serve = tooldec_serve(args) if setup == "tooldec-serve" else vllm_serve(setup, model, args)
    rows = []
    with serve as (url, cmd):
        for choice in args.tool_choice:  # unmeasured: first requests, and the backend's first steps
            if warm:
                _, records = level(url, warm, 1, choice, args)
                if setup == "tooldec-serve" and side is not None:
                    backend_level(side, warm, records, choice)
        for choice in args.tool_choice:
            for clients in args.clients:
                print(f"round {round_no} {setup}: {choice}, {clients} clients, {len(items)} requests",
                      file=sys.stderr, flush=True)
                row, records = level(url, items, clients, choice, args)
                found = [{"setup": setup, **row, "server": shlex.join(cmd)}]
                if setup == "tooldec-serve" and clients == 1 and side is not None:
                    found.append({"setup": "backend-generate", **backend_level(side, items, records, choice)})
                for r in found:
                    backend = "vllm" if setup in VLLM_SETUPS else args.backend
                    r.update(backend=backend, threads=None if setup in VLLM_SETUPS else args.threads,
                             model=model if setup in VLLM_SETUPS else args.serve_model, round=round_no,
                             written=now(), command=args.command)
                    print(json.dumps({k: v for k, v in r.items() if not k.endswith("examples")}), flush=True)
                rows += found
    return rows


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _choice(r: dict[str, Any]) -> str:
    return f"{r['tool_choice']}, 1-shot" if r.get("few_shot") else r["tool_choice"]


def side_by_side(rows: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The table of every setup's median tokens/s per level with the bars' ratios (each the median of the rounds'
    ratios), and the bars' verdicts."""
    setups = [s for s in (*SETUPS, "backend-generate") if any(r["setup"] == s for r in rows)]
    levels = list(dict.fromkeys((_choice(r), r["clients"]) for r in rows))
    by = {(r["setup"], _choice(r), r["clients"], r["round"]): r for r in rows}
    rounds = sorted({r["round"] for r in rows})

    def figures(setup: str, choice: str, clients: int, key: str) -> list[Any]:
        return [by[(setup, choice, clients, n)][key] for n in rounds if (setup, choice, clients, n) in by]

    def ratio(a: str, b: str, choice: str, clients: int) -> float | None:
        pairs = [(by.get((a, choice, clients, n)), by.get((b, choice, clients, n))) for n in rounds]
        return _median([x["tokens_per_s"] / y["tokens_per_s"] for x, y in pairs if x and y and y["tokens_per_s"]])

    ratios = [(a, b) for a, b in (("vllm+tooldec", "vllm-strict"), ("vllm+tooldec", "vllm"),
                                  ("tooldec-serve", "backend-generate")) if a in setups and b in setups]
    guided = [s for s in setups if s != "backend-generate"]
    head = ["tool_choice", "clients", *setups, *(f"{a} / {b}" for a, b in ratios), "BFCL-correct, " + " / ".join(guided)]
    table = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 2) + "---|"]
    bars: list[str] = []
    for choice, clients in levels:
        tps = [_fmt(_median(figures(s, choice, clients, "tokens_per_s"))) for s in setups]
        rs = [ratio(a, b, choice, clients) for a, b in ratios]
        correct = [_fmt(_median(figures(s, choice, clients, "bfcl_correct")), 0) for s in guided]
        table.append("| " + " | ".join([choice, str(clients), *tps, *(_fmt(x) for x in rs), " / ".join(correct)]) + " |")
        for (a, b), x in zip(ratios, rs, strict=True):
            bar = BARS[b]
            if x is not None and (b != "vllm" or choice.startswith("auto")):
                bars.append(f"{a} / {b} {x:.2f} (>= {bar}): {'met' if x >= bar else 'NOT met'}, {choice}, "
                            f"{clients} clients")
        mine = _median(figures("vllm+tooldec", choice, clients, "bfcl_correct"))
        theirs = _median(figures("vllm-strict", choice, clients, "bfcl_correct"))
        if mine is not None and theirs is not None:
            bars.append(f"BFCL-correct vllm+tooldec {mine:.0f} >= vllm-strict {theirs:.0f}: "
                        f"{'met' if mine >= theirs else 'NOT met'}, {choice}, {clients} clients")
    for setup in ("vllm+tooldec", "tooldec-serve"):
        mine_rows = [r for r in rows if r["setup"] == setup]
        if mine_rows:
            totals = {k: sum(r[k] for r in mine_rows) for k in ("invalid", "lost", "errors_5xx")}
            ok = not any(totals.values())
            bars.append(f"{setup}: {totals['invalid']} invalid, {totals['lost']} lost, {totals['errors_5xx']} 5xx "
                        f"over {len(mine_rows)} levels (all 0): {'met' if ok else 'NOT met'}")
    return table, [f"- {b}" for b in bars]


def markdown(doc: dict[str, Any]) -> str:
    """serving.md: the setups side by side, the bars, every row."""
    meta, rows = doc["meta"], doc["rows"]
    loads = [x for r in rows for x in r["load"]]
    table, bars = side_by_side(rows)
    lines = [
        "# Serving table: vLLM, vLLM-strict, vLLM + tooldec, tooldec serve, the backend's own loop",
        "",
        (f"Made by `{meta['command']}` at {meta['code']}, {meta['started']} to {meta['finished']}, "
         f"{meta['machine']}, 1-minute load {min(loads):.1f}-{max(loads):.1f} over the levels"
         if loads else f"Made by `{meta['command']}`") + ".",
        "",
        (f"{meta['entries']} BFCL v4 simple_python entries per level (the first), greedy, max_tokens "
         f"{meta['max_tokens']}, {meta['rounds']} round(s), setups alternating. vLLM {meta['vllm']}: "
         f"{meta['vllm_model']} "
         + ("(on the GPU, vLLM's own dtype and CUDA graphs)" if meta.get("cuda") else
            "(SmolLM2-135M converted from the embedded GGUF unless --vllm-model, float32, eager, vLLM's default of "
            "one core)")
         + f". tooldec serve: {meta['serve_model']} on {meta['backend']}, {meta['threads']} thread(s), "
         f"max batch {meta['max_batch']}; backend-generate the same model, backend and threads in the script's "
         "process, on the prompts tooldec serve rendered at 1 client, as many tokens each as it returned. "
         "tokens/s = completion tokens / wall seconds of the level (median over rounds; ratios: median of each "
         "round's ratio). Calls are checked against each entry's schema (closed objects); auto, 1-shot = "
         "`tool_choice: auto` with one worked exchange before the question. tooldec serve writes its own Hermes "
         "tool instructions into the system message (SmolLM2's template ignores `tools`), so its prompts are "
         "longer than vLLM's."),
        "",
        *table,
        "",
        BARS_NOTE,
        "",
        *bars,
        "",
        "Every level (load = 1-minute load average at its start / end):",
        "",
        ("| round | setup | tool_choice | clients | requests | tokens | tokens/s | p50 s | calls | invalid "
         "| BFCL correct | lost | 5xx | 4xx | load | written |"),
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['round']} | {r['setup']} | {_choice(r)} | {r['clients']} | {r['requests']} | "
            f"{r['completion_tokens']} | {r['tokens_per_s']} | {r.get('latency_p50_s', '-')} | "
            f"{r.get('calls', '-')} | {r['invalid']} | {_fmt(r['bfcl_correct'], 0)} | {r['lost']} | "
            f"{r['errors_5xx']} | {r.get('errors_4xx', 0)} | {r['load'][0]} / {r['load'][1]} | {r['written']} |"
        )
    examples = [(r["setup"], e) for r in rows for e in r.get("invalid_examples", [])[:1]]
    if examples:
        lines += ["", "Invalid calls, one example a level:", ""]
        lines += [f"- {setup}: {text[:160]}" for setup, text in examples[:12]]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Run the rounds and write serving.json and serving.md."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vllm-python", default=os.environ.get("TOOLDEC_VLLM_PYTHON", sys.executable),
                   help="python of an environment with vLLM and this checkout of tooldec")
    p.add_argument("--setups", default=",".join(SETUPS), help=f"comma list of {', '.join(SETUPS)}")
    p.add_argument("--entries", type=int, default=50)
    p.add_argument("--clients", default="1,8,32", help="client counts, comma list")
    p.add_argument("--tool-choice", default="auto-1shot,required",
                   help="comma list of auto-1shot (auto after one worked exchange), auto, required")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=160)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds a request may take before it is lost")
    p.add_argument("--serve-model", default=MODEL_NAME, help="tooldec serve --model (and backend-generate's)")
    p.add_argument("--backend", default="llamacpp", help="tooldec serve --backend (and backend-generate's)")
    p.add_argument("--threads", type=int, default=1, help="tooldec serve's and backend-generate's threads")
    p.add_argument("--max-batch", type=int, default=32, help="tooldec serve --max-batch")
    p.add_argument("--llama-ctx", type=int, default=40960,
                   help="tooldec serve --llama-ctx: KV cells for max-batch rows of ~800 prompt + 160 answer tokens")
    p.add_argument("--cuda", action="store_true", help="vLLM on the GPU (its own dtype, CUDA graphs), not float32 eager")
    p.add_argument("--vllm-model", default=None, help="model folder vLLM serves (default: SmolLM2 from the embedded GGUF)")
    p.add_argument("--llama-kv-split", action="store_true", help="tooldec serve --llama-kv-split (each row its cells)")
    p.add_argument("--shared", default=os.environ.get("TOOLDEC_SHARED", str(ROOT.parent.parent / "shared")))
    p.add_argument("--out", default=str(ROOT / "results"))
    p.add_argument("--stem", default="serving")
    p.add_argument("--table", action="store_true", help="only rewrite the Markdown from the JSON file")
    args = p.parse_args()
    out = Path(args.out)
    target = out / f"{args.stem}.json"
    if args.table:
        (out / f"{args.stem}.md").write_text(markdown(json.loads(target.read_text())))
        return
    args.command = shlex.join(["python", "benchmarks/serving_table.py", *sys.argv[1:]])
    args.clients = [int(c) for c in args.clients.split(",") if c]
    args.tool_choice = [c for c in args.tool_choice.split(",") if c]
    setups = [s for s in args.setups.split(",") if s]
    unknown = [s for s in setups + args.tool_choice if s not in (*SETUPS, "auto", "auto-1shot", "required")]
    if unknown:
        raise SystemExit(f"unknown setup or tool_choice: {', '.join(unknown)}")
    every = list(load_bfcl("simple", args.shared).items)
    items, warm = every[: args.entries], every[args.entries: args.entries + 1]
    model = args.vllm_model or (vllm_tools.smollm2_hf() if any(s in VLLM_SETUPS for s in setups) else "")
    side = None
    if "tooldec-serve" in setups:
        from tooldec.backends.loader import load_with
        from tooldec.chat import ChatTemplate

        lm = load_with(args.backend, args.serve_model, threads=args.threads, sequences=args.max_batch + 8,
                       n_ctx=args.llama_ctx)
        side = (lm, ChatTemplate.probe(lm.tokenizer, "compact"))
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "command": args.command, "code": serving.commit(), "started": now(), "finished": None,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "entries": len(items),
        "max_tokens": args.max_tokens, "rounds": args.rounds, "setups": setups, "clients": args.clients,
        "tool_choice": args.tool_choice, "vllm": vllm_tools._vllm_version(args.vllm_python) if model else None,
        "vllm_python": args.vllm_python, "vllm_model": model, "serve_model": args.serve_model,
        "backend": args.backend, "threads": args.threads, "max_batch": args.max_batch, "llama_ctx": args.llama_ctx,
        "llama_kv_split": args.llama_kv_split,
        "timeout_s": args.timeout, "cuda": args.cuda, "load_start": [round(x, 2) for x in os.getloadavg()],
    }
    rows: list[dict[str, Any]] = []
    for round_no in range(args.rounds):
        for setup in setups if round_no % 2 == 0 else setups[::-1]:
            rows += run_setup(setup, items, warm, model, side, args, round_no)
            doc = {"meta": {**meta, "finished": now(), "load_end": [round(x, 2) for x in os.getloadavg()]},
                   "rows": rows}
            target.write_text(json.dumps(doc, indent=1) + "\n")
            (out / f"{args.stem}.md").write_text(markdown(doc))
    print((out / f"{args.stem}.md").read_text())


if __name__ == "__main__":
    main()
