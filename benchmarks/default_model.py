"""What the default model of `tooldec run` answers, and in how many seconds: the table of docs/models.md.

Four parts, the first three through the code path of `tooldec run` (cli.make_agent and cli.answer: the same agents,
prompts and stored prompt prefix):

1. cold/warm: the README command `tooldec run "What is 3.14 times 123?" --backend B` as its own process, first
   with this prompt's stored prefix deleted (the model already fetched and converted), then again; wall and CPU
   seconds of each, where they went (start-up and imports, the load stage, the answer stage) and the answer's
   tokens/s, `--pairs` times back to back for each of `--backends`.
2. FuncQA: the first `--funcqa` one-hop questions with the FuncQA math tools (toolken format, as `tooldec run`
   without `--tools`); right when within 0.1% of the gold answer (ToolkenGPT's tolerance).
3. everyday: 10 questions on weather, currency and units with `--tools examples/everyday_tools.py` (ReAct, as
   `tooldec run --tools FILE`); right when the answer holds the gold call's result (numbers within 1%).
4. `--speed`: prompt and decoding tokens/s of the model under llama.cpp (where installed) and transformers,
   back to back: one forward over the README command's prompt, then 20 single-token forwards.

Seconds per question are the agent's whole answer (prefill of the question, decoding, tool calls) with the model
loaded once. The machine's 1-minute load average is recorded beside each part: on a shared machine every
figure is inflated by the other work.

    nice python benchmarks/default_model.py [--model NAME] [--funcqa 30] [--pairs 2] [--backends transformers,llamacpp]
        [--everyday 10] [--formats react,chat] [--speed] [--shared ../shared] [--out benchmarks/results] [--stem NAME] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
from tooldec.agents.executor import load_executor
from tooldec.backends import DEFAULT_MODEL, load_model
from tooldec.backends.loader import idle_cores, load_with
from tooldec.backends.prefix_store import PrefixStore, prefix_kind, stable_prefix
from tooldec.backends.progress import quiet_libraries
from tooldec.cli import answer, make_agent
from tooldec.decoding import SamplingParams
from tooldec.eval import data as datasets
from tooldec.eval.metrics import funcqa_correct

README_QUESTION = "What is 3.14 times 123?"
EVERYDAY = [  # question, the call that answers it, what the answer must say besides the call's number
    ("What's the weather in Paris right now?", "get_weather", {"city": "Paris"}),
    ("Is it sunny in Tokyo today?", "get_weather", {"city": "Tokyo"}),
    (
        "What is the temperature in New York in Fahrenheit?",
        "get_weather",
        {"city": "New York", "unit": "fahrenheit"},
    ),
    (
        "How much is 50 US dollars in euros?",
        "convert_currency",
        {"amount": 50, "from_currency": "USD", "to_currency": "EUR"},
    ),
    (
        "Convert 200 euros to Japanese yen.",
        "convert_currency",
        {"amount": 200, "from_currency": "EUR", "to_currency": "JPY"},
    ),
    (
        "How many British pounds do I get for 120 Swiss francs?",
        "convert_currency",
        {"amount": 120, "from_currency": "CHF", "to_currency": "GBP"},
    ),
    (
        "How many kilometers is a 26.2 mile marathon?",
        "convert_units",
        {"value": 26.2, "from_unit": "mile", "to_unit": "km"},
    ),
    (
        "What is 100 degrees Fahrenheit in Celsius?",
        "convert_units",
        {"value": 100, "from_unit": "fahrenheit", "to_unit": "celsius"},
    ),
    (
        "How many pounds is 70 kilograms?",
        "convert_units",
        {"value": 70, "from_unit": "kg", "to_unit": "pound"},
    ),
    (
        "How many liters are in 5 gallons?",
        "convert_units",
        {"value": 5, "from_unit": "gallon", "to_unit": "liter"},
    ),
]
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def load_average() -> float:
    """The 1-minute load average."""
    return round(os.getloadavg()[0], 2)


CALL_LINE = re.compile(r"^\s*\{\s*\"name\"\s*:")


def everyday_right(answer_text: str | None, gold: Any) -> bool:
    """Whether an answer states the gold result: its first number within 1%, or for a weather line
    ("23 °C, sunny") its temperature or its conditions. A line that is call text (`{"name": ...`, a call the
    model wrote outside the trigger) is not an answer, so an argument repeating the result does not count."""
    answer_text = "\n".join(line for line in (answer_text or "").splitlines() if not CALL_LINE.match(line))
    if not answer_text.strip():
        return False
    if isinstance(gold, str) and gold.partition(", ")[2].lower() in answer_text.lower():
        return True
    first = NUMBER.search(str(gold))
    target = float(first.group().replace(",", "")) if first else float(gold)
    return any(
        abs(float(n.replace(",", "")) - target) <= abs(target) * 0.01 for n in NUMBER.findall(answer_text)
    )


STAGE = re.compile(r"^  (\w+)\s.* (\d+\.\d) s$")


def run_once(cmd: list[str]) -> dict[str, Any]:
    """One `tooldec run` process: wall and CPU seconds, each stage's seconds (from its stderr lines), the answer and
    its tokens/s (tokens written over the answer's decoding seconds, the question's prefill included)."""
    load = load_average()
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    stages = {m[1]: float(m[2]) for line in done.stderr.splitlines() if (m := STAGE.match(line))}
    return {
        "seconds": round(seconds, 1),
        "cpu_seconds": round(after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime, 1),
        "load": load,
        "load_after": load_average(),
        "stages": stages,
        "startup_seconds": round(seconds - sum(stages.values()), 1),
        "answer": out["answer"],
        "stored_prefix": out["warm_start"]["stored"],
        "prefix_tokens": out["warm_start"]["prefix_tokens"],
        "tokens": out["tokens"],
        "decode_seconds": out["seconds"],
        "tokens_per_s": round(out["tokens"] / out["seconds"], 2) if out["seconds"] else None,
    }


def cold_warm(model: str, lm: Any | None, pairs: int, backends: list[str]) -> list[dict[str, Any]]:
    """The README command in its own process with this prompt's stored prefix deleted, then kept, for each backend
    in turn, `pairs` times."""
    store = PrefixStore()
    paths = {}
    for backend in backends:
        loaded = lm if lm is not None and lm.backend == backend else load_with(backend, model)
        _, render = make_agent(loaded, load_executor(None), "toolken")
        kind = prefix_kind(loaded.model)
        paths[backend] = store.path(store.key(kind, stable_prefix(loaded.tokenizer.encode, render)))
        del loaded, kind
    rows = []
    for _ in range(pairs):
        for backend in backends:
            cmd = [sys.executable, "-m", "tooldec", "run", README_QUESTION, "--json", "--model", model]
            paths[backend].unlink(missing_ok=True)
            row: dict[str, Any] = {"backend": backend}
            for label in ("cold", "warm"):
                row[label] = run_once([*cmd, "--backend", backend])
                print(backend, label, row[label], flush=True)
            rows.append(row)
    return rows


def backend_speed(model: str, threads: int, steps: int = 20) -> list[dict[str, Any]]:
    """Prompt and decoding tokens/s of `model` under each installed backend, back to back: one forward over the
    README command's prompt, then `steps` single-token greedy forwards (the Decoder's own calls, no guidance)."""
    import torch

    from tooldec.agents.toolken import toolken_prompt
    from tooldec.backends.llamacpp import load_llamacpp
    from tooldec.toolsets import FUNCQA_FUNCTIONS

    rows = []
    for backend in ("llamacpp", "transformers"):
        try:
            lm = (
                load_llamacpp(model, threads=threads)
                if backend == "llamacpp"
                else load_model(model, threads=threads)
            )
        except Exception as exc:  # noqa: BLE001 - a backend that is not installed is reported, not fatal
            rows.append({"backend": backend, "error": str(exc)[:200]})
            continue
        ids = lm.tokenizer.encode(toolken_prompt(README_QUESTION, list(FUNCQA_FUNCTIONS)))
        load = load_average()
        with torch.inference_mode(), quiet_libraries():
            start = time.perf_counter()
            out = lm.model(input_ids=torch.tensor([ids]), use_cache=True)
            prompt_s = time.perf_counter() - start
            start = time.perf_counter()
            for _ in range(steps):
                token = int(out.logits[0, -1].argmax())
                out = lm.model(
                    input_ids=torch.tensor([[token]]), past_key_values=out.past_key_values, use_cache=True
                )
            decode_s = time.perf_counter() - start
        rows.append(
            {
                "backend": backend,
                "prompt_tokens": len(ids),
                "prompt_tps": round(len(ids) / prompt_s, 1),
                "decode_tps": round(steps / decode_s, 2),
                "load": load,
            }
        )
        print(rows[-1], flush=True)
        del lm, out
    return rows


def run_questions(agent: Any, render: Any, items: list[tuple[str, Any]], right: Any) -> list[dict[str, Any]]:
    """Answer each (question, gold) with the warm start; seconds, answer, calls and whether it is right."""
    rows = []
    for question, gold in items:
        load = load_average()
        start = time.perf_counter()
        with quiet_libraries():
            result, _ = answer(agent, render, question)
        seconds = time.perf_counter() - start
        row = {
            "question": question,
            "gold": gold,
            "answer": result.answer,
            "right": bool(right(result.answer, gold)),
            "calls": [f"{c.name}({json.dumps(c.arguments)})" for c in result.calls],
            "tokens": result.tokens,
            "seconds": round(seconds, 2),
            "load": load,
            "text": result.text,
        }
        print(
            json.dumps({k: row[k] for k in ("question", "answer", "right", "calls", "seconds", "load")}),
            flush=True,
        )
        rows.append(row)
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Right answers and seconds per question of one part."""
    seconds = [r["seconds"] for r in rows]
    return {
        "questions": len(rows),
        "right": sum(r["right"] for r in rows),
        "median_s": round(statistics.median(seconds), 1),
        "mean_s": round(statistics.fmean(seconds), 1),
        "load": f"{min(r['load'] for r in rows):.1f}-{max(r['load'] for r in rows):.1f}",
    }


def markdown(doc: dict[str, Any]) -> str:
    """The results as markdown: the summary table, cold/warm runs, then every question."""
    lines = [
        f"Model `{doc['model']}`, torch threads {doc['threads']}, made by:",
        "",
        *[f"- {c}" for c in doc["commands"]],
        "",
        "| set | questions | right | median s/question | mean s/question | load average (2 cores) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, part in doc["parts"].items():
        s = part["summary"]
        lines.append(
            f"| {name} | {s['questions']} | {s['right']} | {s['median_s']} | {s['mean_s']} | {s['load']} |"
        )
    if doc["cold_warm"]:
        lines += [
            "",
            (
                "| README command | backend | empty prefix cache (s) | stored prefix (s) | warm / cold "
                "| CPU s cold, warm | load average |"
            ),
            "|---|---|---:|---:|---:|---|---|",
        ]
        for i, row in enumerate(doc["cold_warm"], start=1):
            cold, warm = row["cold"], row["warm"]
            lines.append(
                f"| run pair {i} | {row.get('backend', 'transformers')} | {cold['seconds']} | {warm['seconds']} | "
                f"{warm['seconds'] / cold['seconds']:.2f} | {cold.get('cpu_seconds', '')}, {warm.get('cpu_seconds', '')} "
                f"| {cold['load']}, {warm['load']} |"
            )
        lines += [
            "",
            (
                "| run | backend | wall s | start-up and imports s | load stage s | answer stage s | prefix tokens "
                "| answer tokens | answer tokens/s | load average |"
            ),
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for i, row in enumerate(doc["cold_warm"], start=1):
            for label in ("cold", "warm"):
                r = row[label]
                if "stages" not in r:
                    continue
                lines.append(
                    f"| {i} {label} | {row['backend']} | {r['seconds']} | {r['startup_seconds']} | "
                    f"{r['stages'].get('load', '')} | {r['stages'].get('answer', '')} | {r['prefix_tokens']} | "
                    f"{r['tokens']} | {r['tokens_per_s']} | {r['load']}, {r['load_after']} |"
                )
    if doc.get("speed"):
        lines += [
            "",
            "| backend (one model, back to back) | prompt tokens | prompt tokens/s | decoding tokens/s | load |",
            "|---|---:|---:|---:|---:|",
        ]
        for r in doc["speed"]:
            if "error" in r:
                lines.append(f"| {r['backend']} | not run: {r['error']} | | | |")
            else:
                lines.append(
                    f"| {r['backend']} | {r['prompt_tokens']} | {r['prompt_tps']} | {r['decode_tps']} | {r['load']} |"
                )
    for name, part in doc["parts"].items():
        lines += [
            "",
            f"### {name}",
            "",
            "| question | answer | right | calls | s | load |",
            "|---|---|---|---|---:|---:|",
        ]
        for r in part["rows"]:
            answer_text = str(r["answer"]).replace("|", "/").replace("\n", " ")[:60]
            lines.append(
                f"| {r['question'][:80]} | {answer_text} | {'yes' if r['right'] else 'no'} | "
                f"{'; '.join(r['calls'])[:80]} | {r['seconds']} | {r['load']} |"
            )
    return "\n".join(lines) + "\n"


def save(doc: dict[str, Any], out: Path, stem: str) -> str:
    """Write the results so far to out/stem.json and out/stem.md (after every part: a long run keeps its parts)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    text = markdown(doc)
    (out / f"{stem}.md").write_text(text)
    return text


def main() -> None:
    """Run the parts asked for and write default_model.json and default_model.md to --out."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--funcqa", type=int, default=30, help="first N FuncQA one-hop questions (0: none)")
    parser.add_argument(
        "--pairs", type=int, default=2, help="cold/warm pairs of the README command (0: none)"
    )
    parser.add_argument(
        "--backends", default="transformers", help="backends of the cold/warm pairs (transformers, llamacpp)"
    )
    parser.add_argument("--everyday", type=int, default=len(EVERYDAY), help="first N everyday questions")
    parser.add_argument("--formats", default="react", help="formats for the everyday questions (react, chat)")
    parser.add_argument("--shared", default=os.environ.get("TOOLDEC_SHARED", str(ROOT.parent / "shared")))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--stem", default="default_model")
    parser.add_argument("--speed", action="store_true", help="tokens/s under llama.cpp and transformers")
    parser.add_argument(
        "--backend", default="transformers", help="backend of the FuncQA and everyday parts (auto, llamacpp, transformers)"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the parts of out/stem.json that are not run again"
    )
    args = parser.parse_args()

    threads = idle_cores()
    needs_model = args.pairs or args.funcqa or (args.everyday and args.formats.strip())
    lm = load_with(args.backend, args.model, threads=threads, progress=True) if needs_model else None
    params = SamplingParams()
    command = "nice python benchmarks/default_model.py " + " ".join(sys.argv[1:])
    doc: dict[str, Any] = {
        "model": args.model,
        "threads": threads,
        "backend": lm.backend if lm is not None else None,
        "commands": [],
        "cold_warm": [],
        "parts": {},
    }
    if args.keep and (args.out / f"{args.stem}.json").is_file():
        doc = json.loads((args.out / f"{args.stem}.json").read_text())
    doc["commands"].append(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {command}")
    if args.speed:
        doc["speed"] = backend_speed(args.model, threads)
        save(doc, args.out, args.stem)
    if args.pairs:
        backends = [b.strip() for b in args.backends.split(",") if b.strip()]
        doc["cold_warm"] = cold_warm(args.model, lm, args.pairs, backends)
        save(doc, args.out, args.stem)
    if args.funcqa:
        data = datasets.load_funcqa("oh", args.shared)
        agent, render = make_agent(lm, load_executor(None), "toolken", params=params, max_new_tokens=256)
        items = [(item.question, item.answer) for item in data.items[: args.funcqa]]
        rows = run_questions(agent, render, items, funcqa_correct)
        doc["parts"][f"FuncQA one-hop, first {len(rows)} (toolken)"] = {
            "summary": summary(rows),
            "rows": rows,
        }
        save(doc, args.out, args.stem)
    tools = str(ROOT / "examples" / "everyday_tools.py")
    functions = load_executor(tools).functions
    for fmt in [f.strip() for f in args.formats.split(",") if f.strip()]:
        agent, render = make_agent(lm, load_executor(tools), fmt, params=params, max_new_tokens=256)
        items = [(q, functions[name](**arguments)) for q, name, arguments in EVERYDAY[: args.everyday]]
        rows = run_questions(agent, render, items, everyday_right)
        doc["parts"][f"everyday, --tools examples/everyday_tools.py ({fmt})"] = {
            "summary": summary(rows),
            "rows": rows,
        }
        save(doc, args.out, args.stem)
    print(markdown(doc))


if __name__ == "__main__":
    main()
