"""Serving at engine speed: `tooldec serve` at one client against the backend's own unguided decode loop.

Same model, same threads, same context settings, same run. The script loads the model the way `tooldec serve`
loads it (in this process, for the backend's loop) and starts `tooldec serve` on 127.0.0.1 (serve_load.py's
`start_tooldec`); then, for each round and each tool_choice (`none`: requests without tools; `auto` and
`required`: serve_load.py's four tools), in turn:

- `tooldec-serve`: serve_load.py's level at one client (streamed, greedy; tools guided) over serve_load.py's
  questions, each numbered ("Request 0203: ...") so that no prompt comes twice in a run: the server keeps the
  prompts it saw, and one it saw whole would need no prefill;
- `backend-generate`, right after, on the same prompts, rendered exactly as the server renders them
  (`plan_request` + `encode_prompt`): a plain greedy, unguided loop of the backend's decode steps, decoding from
  each prompt as many tokens as the server returned for it (so both do the same work whatever each writes).
  llama.cpp: `LlamaContext.decode` of one token a step on one sequence, argmax on the numpy view of its logits;
  transformers: the model's forward with its KV cache (`logits_to_keep=1`), argmax. The prompts' common start is
  computed once before the timing and copied per request (`seq_cp`; a copy of the cache under transformers), as
  the server keeps prompts for requests that start alike.

`tokens_per_s` is completion tokens / wall seconds in both: each prompt's own part is prefilled inside the time,
and the server's figure includes the HTTP round trips and the streaming. `decode_tokens_per_s` of the backend
leaves its prefill out; `cpu_ms_per_token` is the process's CPU time (all threads) per token, less sensitive to the
load than wall time. Guided serving feeds a call's forced stretch in one step (jump-forward) where the backend
decodes it token by token, so with tools the server may beat the loop; `none` is the like-for-like pair.

    python benchmarks/serving.py --backend llamacpp --threads 1 --rounds 3 --requests 6
    python benchmarks/serving.py --backend transformers --threads 1 --rounds 2 --requests 4

Appends its rows to benchmarks/results/serving_engine.json (`{setup, tool_choice, clients, tokens_per_s, invalid,
lost, errors_5xx, load, written, ...}`; `--fresh` starts it anew) and writes serving_engine.md (the medians per backend, code
and tool_choice with the ratio serve / backend-generate, then every row). `--table` only rewrites the table from
the JSON file; `--code` names the code measured (default: the commit, `+` when src/ differs from it).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serve_load

ROOT = Path(__file__).resolve().parent
CHOICES = ("none", "auto", "required")


def load() -> list[float]:
    """The load average (1, 5, 15 minutes)."""
    return [round(x, 2) for x in os.getloadavg()]


def commit() -> str:
    """The checkout's commit, with `+` when its tracked files differ from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "src"], cwd=ROOT.parent, check=False).returncode != 0
        return head + ("+" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def prompt_of(lm: Any, template: Any, body: dict[str, Any]) -> list[int]:
    """The prompt tokens `tooldec serve` decodes from for a request `body` (plan_request + encode_prompt)."""
    from tooldec.serve import protocol
    from tooldec.serve.plan import plan_request
    from tooldec.serve.prompt import encode_prompt

    req = protocol.ChatCompletionRequest.model_validate(body)
    plan = plan_request(req, template)
    return encode_prompt(lm, template, req.messages, plan.tools)


def prompts_for(lm: Any, template: Any, model_name: str, tool_choice: str, questions: list[str]) -> list[list[int]]:
    """Each question's prompt as the server renders it for `tool_choice` (none: a request without tools)."""
    out = []
    for q in questions:
        body: dict[str, Any] = {"model": model_name, "messages": [{"role": "user", "content": q}]}
        if tool_choice != "none":
            body.update(tools=serve_load.TOOLS, tool_choice=tool_choice)
        out.append(prompt_of(lm, template, body))
    return out


def questions_for(round_: str, tool_choice: str, n: int) -> list[str]:
    """serve_load.py's questions in turn, each numbered so that no prompt comes twice in a run: the server keeps
    the prompts it saw, and a prompt it saw before would start with nothing to prefill."""
    tag = {"none": 1, "auto": 2, "required": 3}.get(tool_choice, 9)
    return [f"Request {round_}{tag}{i:02d}: {serve_load.QUESTIONS[i % len(serve_load.QUESTIONS)]}" for i in range(n)]


def common_start(prompts: list[list[int]]) -> int:
    """Leading tokens every prompt shares, leaving each at least one token of its own."""
    n = min(len(p) for p in prompts) - 1
    for i in range(n):
        if len({p[i] for p in prompts}) > 1:
            return i
    return max(n, 0)


def generate_llamacpp(lm: Any, prompts: list[list[int]], lengths: list[int]) -> list[dict[str, float]]:
    """The plain decode loop on llama.cpp: one sequence, one token a step, argmax on llama.cpp's buffer; prompt i
    decodes `lengths[i]` tokens (EOS or not)."""
    context = lm.model.context
    lm.model._session = None
    context.clear()
    common = common_start(prompts)
    base, work = 1, 0
    if common:
        context.decode([(base, 0, prompts[0][:common])])
    out = []
    for prompt, length in zip(prompts, lengths, strict=True):
        start, cpu = time.perf_counter(), time.process_time()
        if common:
            context.copy(base, work, common)
        else:
            context.drop(work)
        logits = context.decode([(work, common, prompt[common:])])
        token, tokens, pos = int(np.argmax(logits[0])), 1, len(prompt)
        prefilled = time.perf_counter()
        while tokens < length:
            logits = context.decode([(work, pos, [token])])
            token = int(np.argmax(logits[0]))
            tokens += 1
            pos += 1
        end = time.perf_counter()
        out.append({"tokens": tokens, "seconds": end - start, "decode_seconds": end - prefilled,
                    "cpu_seconds": time.process_time() - cpu})
    context.clear()
    return out


def generate_transformers(lm: Any, prompts: list[list[int]], lengths: list[int]) -> list[dict[str, float]]:
    """The plain decode loop on a transformers model: forward with its KV cache, the last logits, argmax; prompt i
    decodes `lengths[i]` tokens (EOS or not)."""
    import torch

    model = lm.model
    common = common_start(prompts)
    out = []
    with torch.inference_mode():
        base = None
        if common:
            base = model(input_ids=torch.tensor([prompts[0][:common]]), use_cache=True).past_key_values
        for prompt, length in zip(prompts, lengths, strict=True):
            cache = copy.deepcopy(base) if base is not None else None
            start, cpu = time.perf_counter(), time.process_time()
            result = model(input_ids=torch.tensor([prompt[common:]]), past_key_values=cache, use_cache=True,
                           logits_to_keep=1)
            cache = result.past_key_values
            token, tokens = int(torch.argmax(result.logits[0, -1])), 1
            prefilled = time.perf_counter()
            while tokens < length:
                result = model(input_ids=torch.tensor([[token]]), past_key_values=cache, use_cache=True,
                               logits_to_keep=1)
                cache = result.past_key_values
                token = int(torch.argmax(result.logits[0, -1]))
                tokens += 1
            end = time.perf_counter()
            out.append({"tokens": tokens, "seconds": end - start, "decode_seconds": end - prefilled,
                        "cpu_seconds": time.process_time() - cpu})
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def backend_row(lm: Any, prompts: list[list[int]], lengths: list[int]) -> dict[str, Any]:
    """backend-generate over `prompts`, `lengths[i]` tokens from prompt i."""
    before = load()
    run = generate_llamacpp if lm.backend == "llamacpp" else generate_transformers
    records = run(lm, prompts, lengths)
    cpu = sum(r["cpu_seconds"] for r in records)  # the timed part only: not the common start's prefill
    tokens = sum(r["tokens"] for r in records)
    seconds = sum(r["seconds"] for r in records)
    decode_tokens = sum(r["tokens"] - 1 for r in records)
    decode_seconds = sum(r["decode_seconds"] for r in records)
    return {
        "setup": "backend-generate", "requests": len(records), "completion_tokens": tokens,
        "wall_s": round(seconds, 2), "tokens_per_s": round(tokens / seconds, 2),
        "decode_tokens_per_s": round(decode_tokens / decode_seconds, 2) if decode_seconds else None,
        "cpu_ms_per_token": round(1000 * cpu / tokens, 1),
        "invalid": 0, "lost": 0, "errors_5xx": 0, "load": [before, load()],
    }


def serve_row(url: str, tool_choice: str, questions: list[str], args: argparse.Namespace, pid: int
              ) -> dict[str, Any]:
    """tooldec serve (process `pid`) at one client over the same questions."""
    before = load()
    cpu = cpu_seconds(pid)
    level_args = argparse.Namespace(
        tool_choice=tool_choice, max_tokens=args.max_tokens, temperature=0.0, extra_body="{}",
        request_timeout=600.0, no_tools=tool_choice == "none",
    )
    level = asyncio.run(serve_load.run_level(url, args.model_name, 1, len(questions), args.max_seconds, level_args,
                                                     questions))
    cpu = cpu_seconds(pid) - cpu
    return {
        "setup": "tooldec-serve", "requests": level["ok"], "completion_tokens": level["completion_tokens"],
        "wall_s": level["wall_s"], "tokens_per_s": level["tokens_per_s"],
        "cpu_ms_per_token": round(1000 * cpu / max(level["completion_tokens"], 1), 1),
        "request_tokens": level["request_tokens"], "ttft_p50_s": level["ttft_p50_s"], "tool_calls": level["tool_calls"],
        "invalid": level["invalid_calls"], "lost": level["lost"], "errors_5xx": level["errors_5xx"],
        "errors_4xx": level["errors_4xx"], "load": [before, load()],
    }


def table(rows: list[dict[str, Any]], note: str = "") -> str:
    """The Markdown report: medians per (backend, code, tool_choice) with the ratio, then every row."""
    lines = [
        "# Serving at engine speed: tooldec serve at one client vs the backend's own decode loop",
        "",
        ("Made by `benchmarks/serving.py` (its docstring has the command). tokens/s = completion tokens / wall "
        "seconds, greedy, one model and thread count; each server row is followed by the backend's own loop on "
        "the same prompts, decoding as many tokens from each as the server returned. serve / backend is the "
        "median over those pairs. `none` is a request without tools (the like-for-like pair); `auto` and "
        "`required` guide serve_load.py's four tools, which the backend decodes unguided, token by token, where "
        "the server feeds forced stretches in one step. CPU ms / token: each side's process CPU time per "
        "token (-: not measured). Load: the 1-minute load average at each row's start and end (2 cores)."
        + (f" {note}" if note else "")),
        "",
        ("| run | backend | code | threads | tool_choice | backend-generate tok/s | tooldec-serve tok/s "
        "| serve / backend | CPU ms / token, backend / serve | rounds | invalid | lost | 5xx | load (1 min) |"),
        "|---|---|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    lines[-2:-2] = pooled(rows)
    groups: dict[tuple[str, str, str, int, str], dict[str, list[dict[str, Any]]]] = {}
    for r in rows:
        key = (r.get("run", "-"), r["backend"], r["code"], r["threads"], r["tool_choice"])
        groups.setdefault(key, {}).setdefault(r["setup"], []).append(r)
    for key, sets in groups.items():
        backend = [r["tokens_per_s"] for r in sets.get("backend-generate", [])]
        serve = [r["tokens_per_s"] for r in sets.get("tooldec-serve", [])]
        b = statistics.median(backend) if backend else None
        s = statistics.median(serve) if serve else None
        pairs = [sv["tokens_per_s"] / bk["tokens_per_s"]
                 for sv, bk in pairs_of([r for r in rows if (r.get("run", "-"), r["backend"], r["code"], r["threads"],
                                                             r["tool_choice"]) == key])
                 if bk["tokens_per_s"]]
        ratio = f"{statistics.median(pairs):.2f}" if pairs else "-"
        cpu = [_median([r.get("cpu_ms_per_token") for r in sets.get(k, [])])
               for k in ("backend-generate", "tooldec-serve")]
        every = [x for v in sets.values() for x in v]
        loads = [x for r in every for x in (r["load"][0][0], r["load"][1][0])]
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {key[4]} | {_fmt(b)} | {_fmt(s)} | {ratio} | "
            f"{_fmt(cpu[0])} / {_fmt(cpu[1])} | {len(serve)} | "
            f"{sum(r['invalid'] for r in every)} | {sum(r['lost'] for r in every)} | "
            f"{sum(r['errors_5xx'] for r in every)} | {min(loads):.1f}-{max(loads):.1f} |"
        )
    lines += [
        "",
        "Every row (median above; decode = the backend's tokens/s with its prefill left out):",
        "",
        ("| written | backend | code | round | tool_choice | setup | requests | tokens | tok/s | decode tok/s "
        "| CPU ms / token | load start / end |"),
        "|---|---|---|---:|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['written']} | {r['backend']} | {r['code']} | {r['round']} | {r['tool_choice']} | {r['setup']} | "
            f"{r['requests']} | {r['completion_tokens']} | {r['tokens_per_s']} | "
            f"{_fmt(r.get('decode_tokens_per_s'))} | {_fmt(r.get('cpu_ms_per_token'), 1)} | "
            f"{r['load'][0][0]} / {r['load'][1][0]} |"
        )
    return "\n".join(lines) + "\n"


def pairs_of(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(server row, backend row) of each measured pair: the backend row that follows a server row of its run."""
    out = []
    for sv, bk in itertools.pairwise(rows):
        if (sv["setup"], bk["setup"]) == ("tooldec-serve", "backend-generate") and all(
                sv.get(k) == bk.get(k) for k in ("run", "round", "tool_choice", "code", "backend")):
            out.append((sv, bk))
    return out


def pooled(rows: list[dict[str, Any]]) -> list[str]:
    """The summary over every run: per backend, code and tool_choice, the median serve / backend ratio of all
    pairs and each run's own median."""
    groups: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    for sv, bk in pairs_of(rows):
        if bk["tokens_per_s"]:
            runs = groups.setdefault((sv["backend"], sv["code"], sv["tool_choice"]), {})
            runs.setdefault(sv.get("run", "-"), []).append(sv["tokens_per_s"] / bk["tokens_per_s"])
    out = ["| backend | code | tool_choice | runs | pairs | serve / backend (all pairs) | each run's median |",
           "|---|---|---|---:|---:|---:|---|"]
    for (backend, code, choice), runs in groups.items():
        every = [x for v in runs.values() for x in v]
        each = ", ".join(f"{statistics.median(v):.2f}" for v in runs.values())
        out.append(f"| {backend} | {code} | {choice} | {len(runs)} | {len(every)} | {statistics.median(every):.2f} "
                   f"| {each} |")
    return [*out, "", "Each run (its rows in order below):", ""]


def _median(values: list[Any]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="llamacpp", help="llamacpp | transformers (both sides).")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="The model both sides load.")
    parser.add_argument("--threads", type=int, default=1, help="Threads of both sides.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=8, help="Questions per row (serve_load.py's, in turn).")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--max-seconds", type=float, default=300, help="Bound of each serve row.")
    parser.add_argument("--choices", default=",".join(CHOICES), help="tool_choice values, comma list.")
    parser.add_argument("--max-batch", type=int, default=8, help="tooldec serve --max-batch (its default).")
    parser.add_argument("--prefix-cache", type=int, default=8, help="tooldec serve --prefix-cache (its default).")
    parser.add_argument("--llama-ctx", type=int, default=16384, help="tooldec serve --llama-ctx (its default).")
    parser.add_argument("--code", default=None, help="Names the code measured (default: the commit).")
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    parser.add_argument("--stem", default="serving_engine")
    parser.add_argument("--fresh", action="store_true", help="Start the JSON file afresh instead of appending.")
    parser.add_argument("--table", action="store_true", help="Only rewrite the table from the JSON file.")
    args = parser.parse_args()
    path = args.out / f"{args.stem}.json"
    old = {} if args.fresh or not path.exists() else json.loads(path.read_text())
    rows: list[dict[str, Any]] = old.get("rows", [])
    if args.table:
        (args.out / f"{args.stem}.md").write_text(table(rows, old.get("note", "")))
        return

    from tooldec.backends.loader import load_with
    from tooldec.chat import ChatTemplate

    code = args.code or commit()
    run = time.strftime("%Y-%m-%d %H:%M")
    lm = load_with(args.backend, args.model, threads=args.threads, sequences=args.max_batch + args.prefix_cache,
                   n_ctx=args.llama_ctx)
    template = ChatTemplate.probe(lm.tokenizer, "compact")
    args.model_name = "m"
    server_args = argparse.Namespace(
        max_batch=args.max_batch, model=args.model_name, server_model=args.model, threads=args.threads,
        backend=args.backend, stem=f"{args.stem}_{args.backend}", start_timeout=600,
    )
    proc, url = serve_load.start_tooldec(
        server_args, ["--prefix-cache", str(args.prefix_cache), "--llama-ctx", str(args.llama_ctx)])
    choices = [c for c in args.choices.split(",") if c]
    try:
        # one unmeasured request of each kind first: the server compiles each tool set once, the backend warms up
        for c in choices:
            warm = questions_for("warm", c, 1)
            served = serve_row(url, c, warm, args, proc.pid)
            backend_row(lm, prompts_for(lm, template, args.model_name, c, warm), served["request_tokens"])
        for rnd in range(args.rounds):
            for c in choices[rnd % len(choices):] + choices[: rnd % len(choices)]:
                questions = questions_for(str(rnd), c, args.requests)
                prompts = prompts_for(lm, template, args.model_name, c, questions)
                served = serve_row(url, c, questions, args, proc.pid)
                pair = [served, backend_row(lm, prompts, served["request_tokens"])]
                for row in pair:
                    row = {"tool_choice": c, "clients": 1, **row, "backend": lm.backend, "threads": args.threads,
                           "model": args.model, "max_tokens": args.max_tokens, "code": code, "run": run, "round": rnd,
                           "written": time.strftime("%Y-%m-%d %H:%M")}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        proc.terminate()
        proc.wait(60)
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {**old, "script": "benchmarks/serving.py", "cpus": os.cpu_count(), "rows": rows}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    (args.out / f"{args.stem}.md").write_text(table(rows, doc.get("note", "")))
    print(table(rows, doc.get("note", "")))


if __name__ == "__main__":
    main()
