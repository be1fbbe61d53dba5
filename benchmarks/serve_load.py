"""Load on an OpenAI-compatible server: N concurrent clients, a bounded number of tool-calling requests.

By default the script starts `tooldec serve` (the embedded default model) on 127.0.0.1 on a free port, runs
each concurrency level in turn and stops the server; `--url` measures a server already running instead (any
OpenAI-compatible one, e.g. `vllm serve`), with `--label` naming it in the results. Every request streams
(`stream_options.include_usage`), so that the time to the first token is measured on the client; per level it
reports:

- throughput: completion tokens (the server's `usage`) / wall seconds of the level, and requests / s;
- latency p50 / p99 (request sent → stream done) and time to first token p50 / p99 (first content or tool-call
  delta);
- tool calls returned, and invalid ones: unknown tool, arguments that are not JSON or break the tool's schema
  (jsonschema; tools are closed objects, as tooldec and OpenAI strict mode read them); calls cut by max_tokens
  (`finish_reason` "length" with a call open) are counted apart as truncated;
- errors by HTTP status (4xx, 5xx) and requests lost (no answer or a broken stream): must all be 0.

A level ends after `--requests` requests (default 2 N, at least 8) or `--max-seconds`, whichever comes first
(requests in flight then finish). Traffic stays on 127.0.0.1 unless `--url` says otherwise.

    python benchmarks/serve_load.py --clients 1,8,32                 # tooldec serve on smollm2
    python benchmarks/serve_load.py --url http://127.0.0.1:8000/v1 --model my-model --label vllm --clients 1,8

Writes benchmarks/results/serve_load[_LABEL].json and .md (`--out`, `--stem`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import jsonschema

from tooldec.specs.normalize import closed_objects

ROOT = Path(__file__).resolve().parent

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        }, "required": ["city"]},
    }},
    {"type": "function", "function": {
        "name": "multiply", "description": "Multiply two numbers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                       "required": ["a", "b"]},
    }},
    {"type": "function", "function": {
        "name": "convert_currency", "description": "Convert an amount of money from one currency to another.",
        "parameters": {"type": "object", "properties": {
            "amount": {"type": "number"},
            "from_currency": {"type": "string", "enum": ["USD", "EUR", "GBP", "JPY"]},
            "to_currency": {"type": "string", "enum": ["USD", "EUR", "GBP", "JPY"]},
        }, "required": ["amount", "from_currency", "to_currency"]},
    }},
    {"type": "function", "function": {
        "name": "search_flights", "description": "Find flights between two airports on a date.",
        "parameters": {"type": "object", "properties": {
            "origin": {"type": "string", "description": "IATA code"},
            "destination": {"type": "string", "description": "IATA code"},
            "date": {"type": "string", "format": "date"},
            "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
        }, "required": ["origin", "destination", "date"]},
    }},
]
QUESTIONS = [
    "What's the weather like in Paris right now?",
    "What is 3.14 times 123?",
    "How much is 250 US dollars in euros?",
    "Find me a flight from JFK to LHR on 2025-03-14 for 2 people.",
    "Is it raining in Tokyo? Tell me in fahrenheit.",
    "Multiply 17 by 42, please.",
    "Convert 1000 yen to British pounds.",
    "I need flights from SFO to CDG on 2025-06-01.",
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


VALIDATORS = {name: jsonschema.Draft202012Validator(closed_objects(s), format_checker=jsonschema.FormatChecker())
              for name, s in SCHEMAS.items()}


def check_call(name: str, arguments: str) -> str | None:
    """Why a returned call is invalid, or None."""
    if name not in VALIDATORS:
        return f"unknown tool {name!r}"
    try:
        args = json.loads(arguments)
    except ValueError:
        return "arguments are not JSON"
    errors = list(VALIDATORS[name].iter_errors(args))
    return errors[0].message if errors else None


def percentile(values: list[float], q: float) -> float | None:
    """The q-quantile (nearest rank) of `values`."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def one_request(http: httpx.AsyncClient, url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Send one streaming request; returns its timings, tokens, calls and outcome."""
    rec: dict[str, Any] = {"status": None, "error": None, "ttft": None, "latency": None, "tokens": 0,
                           "calls": [], "finish": None, "content": ""}
    sent = time.perf_counter()
    calls: dict[int, dict[str, str]] = {}
    try:
        async with http.stream("POST", url + "/chat/completions", json=body, timeout=timeout) as resp:
            rec["status"] = resp.status_code
            if resp.status_code != 200:
                rec["error"] = (await resp.aread()).decode(errors="replace")[:300]
                return rec
            done = False
            async for line in resp.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[len("data: "):]
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    rec["error"] = json.dumps(chunk["error"])[:300]
                    continue
                if chunk.get("usage"):
                    rec["tokens"] = chunk["usage"].get("completion_tokens", 0)
                for choice in chunk.get("choices", []):
                    delta = choice.get("delta") or {}
                    if rec["ttft"] is None and (delta.get("content") or delta.get("tool_calls")):
                        rec["ttft"] = time.perf_counter() - sent
                    rec["content"] += delta.get("content") or ""
                    for tc in delta.get("tool_calls") or []:
                        call = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
                        fn = tc.get("function") or {}
                        call["name"] += fn.get("name") or ""
                        call["arguments"] += fn.get("arguments") or ""
                    rec["finish"] = choice.get("finish_reason") or rec["finish"]
            if not done:
                rec["error"] = "stream ended without [DONE]"
    except (httpx.HTTPError, ValueError) as exc:
        rec["error"] = f"{type(exc).__name__}: {exc}"
    rec["latency"] = time.perf_counter() - sent
    rec["calls"] = list(calls.values())
    return rec


async def run_level(url: str, model: str, clients: int, requests: int, max_seconds: float, args: argparse.Namespace,
                    questions: list[str] | None = None) -> dict[str, Any]:
    """`clients` concurrent clients until `requests` are answered or `max_seconds` pass, asking `questions` (default
    QUESTIONS) in turn."""
    questions = questions or QUESTIONS
    records: list[dict[str, Any]] = []
    issued = 0
    start = time.perf_counter()

    def next_body() -> dict[str, Any] | None:
        nonlocal issued
        if issued >= requests or time.perf_counter() - start > max_seconds:
            return None
        question = questions[issued % len(questions)]
        issued += 1
        tools = {} if getattr(args, "no_tools", False) else {"tools": TOOLS, "tool_choice": args.tool_choice}
        body = {"model": model, "messages": [{"role": "user", "content": question}], **tools,
                "max_tokens": args.max_tokens, "temperature": args.temperature,
                "stream": True, "stream_options": {"include_usage": True}, **json.loads(args.extra_body)}
        if args.temperature > 0:
            body["seed"] = issued
        return body

    async def client(http: httpx.AsyncClient) -> None:
        while (body := next_body()) is not None:
            records.append(await one_request(http, url, body, args.request_timeout))

    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(limits=limits) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    wall = time.perf_counter() - start
    ok = [r for r in records if r["status"] == 200 and r["error"] is None]
    invalid, truncated, total_calls = [], 0, 0
    for r in ok:
        for i, call in enumerate(r["calls"]):
            if r["finish"] == "length" and i == len(r["calls"]) - 1 and check_call(call["name"], call["arguments"]):
                truncated += 1  # the last call of an answer cut by max_tokens
                continue
            total_calls += 1
            why = check_call(call["name"], call["arguments"])
            if why:
                invalid.append({"name": call["name"], "arguments": call["arguments"][:200], "why": why})
    tokens = sum(r["tokens"] for r in ok)
    finishes: dict[str, int] = {}
    for r in ok:
        finishes[str(r["finish"])] = finishes.get(str(r["finish"]), 0) + 1
    return {
        "clients": clients,
        "requests": len(records),
        "ok": len(ok),
        "errors_4xx": sum(1 for r in records if r["status"] and 400 <= r["status"] < 500),
        "errors_5xx": sum(1 for r in records if r["status"] and r["status"] >= 500),
        "lost": sum(1 for r in records if r["status"] in (None, 200) and r["error"] is not None),
        "wall_s": round(wall, 2),
        "completion_tokens": tokens,
        "tokens_per_s": round(tokens / wall, 2) if wall else None,
        "requests_per_s": round(len(ok) / wall, 3) if wall else None,
        "latency_p50_s": _round(percentile([r["latency"] for r in ok], 0.5)),
        "latency_p99_s": _round(percentile([r["latency"] for r in ok], 0.99)),
        "ttft_p50_s": _round(percentile([r["ttft"] for r in ok if r["ttft"] is not None], 0.5)),
        "ttft_p99_s": _round(percentile([r["ttft"] for r in ok if r["ttft"] is not None], 0.99)),
        "tool_calls": total_calls,
        "invalid_calls": len(invalid),
        "truncated_calls": truncated,
        "answers_with_calls": sum(1 for r in ok if r["calls"]),
        "finish_reasons": finishes,
        "request_tokens": [r["tokens"] for r in records],
        "invalid_examples": invalid[:5],
        "error_examples": [r["error"] for r in records if r["error"]][:5],
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_tooldec(args: argparse.Namespace, extra: Sequence[str] = ()) -> tuple[subprocess.Popen[bytes], str]:
    """`tooldec serve` on a free port of 127.0.0.1 (`extra`: more of its flags); waits for /health."""
    port = free_port()
    cmd = [sys.executable, "-m", "tooldec", "serve", "--port", str(port), "--max-batch", str(args.max_batch),
           "--log-level", "warning", "--served-model-name", args.model]
    if args.server_model:
        cmd += ["--model", args.server_model]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.backend:
        cmd += ["--backend", args.backend]
    cmd += list(extra)
    log = open(Path(tempfile.gettempdir()) / f"{args.stem}_server.log", "wb")  # noqa: SIM115 -- kept open while it runs
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + args.start_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"tooldec serve exited with {proc.returncode}; see {log.name}")
        try:
            if httpx.get(base + "/health", timeout=2).status_code == 200:
                return proc, base + "/v1"
        except httpx.HTTPError:
            pass
        time.sleep(1)
    proc.terminate()
    raise SystemExit("tooldec serve did not answer /health in time")


def markdown(doc: dict[str, Any]) -> str:
    s = doc["settings"]
    lines = [
        f"# Serving load: {s['label']} ({s['model']})",
        "",
        (f"{doc['date']}, {doc['machine']['cpus']} CPUs, load average at the end {doc['machine']['load_average_end']}. "
        f"Streaming requests, tool_choice `{s['tool_choice']}`, temperature {s['temperature']}, max_tokens "
        f"{s['max_tokens']}, {len(TOOLS)} tools; server max batch {s['max_batch']}."),
        "",
        ("| clients | requests | tokens/s | req/s | latency p50 / p99 (s) | TTFT p50 / p99 (s) | calls | invalid "
        "| truncated | 4xx | 5xx | lost |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["results"]:
        lines.append(
            f"| {r['clients']} | {r['ok']}/{r['requests']} | {r['tokens_per_s']} | {r['requests_per_s']} | "
            f"{r['latency_p50_s']} / {r['latency_p99_s']} | {r['ttft_p50_s']} / {r['ttft_p99_s']} | "
            f"{r['tool_calls']} | {r['invalid_calls']} | {r['truncated_calls']} | {r['errors_4xx']} | "
            f"{r['errors_5xx']} | {r['lost']} |"
        )
    if s.get("note"):
        lines += ["", s["note"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="An OpenAI-compatible base URL (…/v1); default: start tooldec serve.")
    parser.add_argument("--label", default="tooldec", help="Name of the server in the results.")
    parser.add_argument("--model", default="smollm2", help="The model id sent in requests.")
    parser.add_argument("--server-model", default=None, help="tooldec serve --model (default: embedded smollm2).")
    parser.add_argument("--clients", default="1,8,32", help="Concurrency levels, comma list.")
    parser.add_argument("--requests", type=int, default=0, help="Requests per level (default 2 N, at least 8).")
    parser.add_argument("--max-seconds", type=float, default=600, help="Stop issuing requests after this.")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--tool-choice", default="auto", help="auto | required | none.")
    parser.add_argument("--no-tools", action="store_true", help="Send requests without tools (plain chat).")
    parser.add_argument("--extra-body", default="{}", help="JSON merged into every request (e.g. vllm_xargs).")
    parser.add_argument("--max-batch", type=int, default=32, help="tooldec serve --max-batch.")
    parser.add_argument("--threads", type=int, default=None, help="tooldec serve --threads.")
    parser.add_argument("--backend", default=None, help="tooldec serve --backend (default: its own, transformers).")
    parser.add_argument("--request-timeout", type=float, default=900)
    parser.add_argument("--start-timeout", type=float, default=600)
    parser.add_argument("--note", default="", help="A line for the report.")
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    parser.add_argument("--stem", default=None, help="File names (default serve_load, or serve_load_LABEL).")
    args = parser.parse_args()
    args.stem = args.stem or ("serve_load" if args.label == "tooldec" else f"serve_load_{args.label}")
    args.out.mkdir(parents=True, exist_ok=True)
    proc = None
    url = args.url
    if url is None:
        proc, url = start_tooldec(args)
    results = []
    try:
        for clients in (int(c) for c in args.clients.split(",") if c.strip()):
            requests = args.requests or max(8, 2 * clients)
            row = asyncio.run(run_level(url.rstrip("/"), args.model, clients, requests, args.max_seconds, args))
            results.append(row)
            print(json.dumps({k: v for k, v in row.items() if not k.endswith("examples")}), flush=True)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(60)
    doc = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_end": [round(x, 2) for x in os.getloadavg()]},
        "settings": {"label": args.label, "url": url if args.url else "tooldec serve (started by the script)",
                     "model": args.model, "server_model": args.server_model or "smollm2 (embedded default)",
                     "clients": args.clients, "requests": args.requests or "2N, at least 8",
                     "max_seconds": args.max_seconds, "max_tokens": args.max_tokens,
                     "temperature": args.temperature,
                     "tool_choice": "no tools" if args.no_tools else args.tool_choice, "max_batch": args.max_batch,
                     "extra_body": json.loads(args.extra_body), "note": args.note},
        "results": results,
    }
    (args.out / f"{args.stem}.json").write_text(json.dumps(doc, indent=2) + "\n")
    (args.out / f"{args.stem}.md").write_text(markdown(doc))
    print(markdown(doc))


if __name__ == "__main__":
    main()
