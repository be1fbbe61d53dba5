"""Where `tooldec serve`'s time goes at one client: py-spy samples of the running server, summarised.

Starts `tooldec serve` on 127.0.0.1 (serve_load.py's `start_tooldec`), sends one unmeasured request (the tool set
compiles), then records the server with `py-spy record --native` (`pip install py-spy`; it needs ptrace: root, or
`kernel.yama.ptrace_scope` 0) while serve_load.py's one client sends `--requests` numbered questions, and prints:
each thread's share of the samples, the engine thread's innermost Python frames (where the Python outside the
model step goes), the functions under llama.cpp's `llama_decode` (ggml ops), and the event loop's innermost frames.

    python benchmarks/serve_profile.py --tool-choice none --requests 8
    python benchmarks/serve_profile.py --tool-choice auto --requests 8 --raw /tmp/auto.txt   # keep the samples
    python benchmarks/serve_profile.py --summarise /tmp/auto.txt                             # summarise again
    python benchmarks/serve_profile.py --sampling      # one draw over real logits: numpy (served) vs torch (before)

py-spy counts a thread waiting in a lock or a queue as busy where it cannot tell it from work (the engine
thread's wait for its next step shows as `_queue_SimpleQueue_get` or `Condition.wait`); those frames are named,
not hidden. Findings: benchmarks/results/serve_profile.md.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serve_load  # the load tool beside this script
import serving


def summarise(path: Path, top: int = 15) -> str:
    """The summary of py-spy's raw (collapsed) samples in `path`."""
    threads: collections.Counter[str] = collections.Counter()
    leaf: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    ops: collections.Counter[str] = collections.Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        frames = stack.split(";")
        name = re.sub(r"_\d+$", "", frames[0].split(": ", 1)[-1])
        threads[name] += n
        python = [f for f in frames if ".py:" in f]
        leaf[name][re.sub(r":\d+\)", ")", python[-1]) if python else "(native only)"] += n
        if "llama_decode" in stack:
            op = next((f for f in frames if "ggml_compute_forward_" in f), None)
            ops[re.sub(r" \(.*", "", op) if op else "(graph build, scheduling, outputs)"] += n
    total = sum(threads.values())
    out = [f"{total} samples"]
    out += [f"  {100 * n / total:5.1f}%  thread {t}" for t, n in threads.most_common()]
    for t, n in threads.most_common(2):
        out.append(f"\n{t}: innermost Python frame (share of the thread's samples)")
        out += [f"  {100 * v / n:5.1f}%  {k}" for k, v in leaf[t].most_common(top)]
    decode = sum(ops.values())
    if decode:
        out.append(f"\ninside llama_decode ({decode} samples)")
        out += [f"  {100 * v / decode:5.1f}%  {k}" for k, v in ops.most_common(8)]
    return "\n".join(out)


def sampling(args: argparse.Namespace) -> str:
    """Microseconds per `sample_token` draw over 21 real logits rows of the model (a chat prompt, then its greedy
    continuation), on the CPU path the server takes (numpy) and on the torch ops it replaced (`_sample_torch`)."""
    import numpy as np
    import torch

    from tooldec.backends.loader import load_with
    from tooldec.decoding.sampling import SamplingParams, _sample_torch, sample_token

    torch.set_num_threads(args.threads)
    lm = load_with(args.backend, args.model, threads=args.threads, sequences=1, n_ctx=2048)
    if lm.backend != "llamacpp":
        raise SystemExit("--sampling reads the logits through llama.cpp: --backend llamacpp")
    context = lm.model.context
    ids = lm.encode_chat([{"role": "user", "content": "Write a short story about a cat who learns to fly."}])
    logits, pos = context.decode([(0, 0, ids)]), len(ids)
    rows = [logits[0].copy()]
    for _ in range(20):
        logits = context.decode([(0, pos, [int(np.argmax(rows[-1]))])])
        rows.append(logits[0].copy())
        pos += 1
    tensors = [torch.from_numpy(r) for r in rows]

    def per_draw(draw: Any, repeats: int) -> float:
        draw(tensors[0])
        start = time.perf_counter()
        for _ in range(repeats):
            for row in tensors:
                draw(row)
        return 1e6 * (time.perf_counter() - start) / (repeats * len(tensors))

    out = ["| temperature | top_p | numpy (us / draw) | torch (us / draw) |", "|---:|---:|---:|---:|"]
    for params in (SamplingParams(), SamplingParams(temperature=0.7, seed=1), SamplingParams(temperature=1.0, seed=1),
                   SamplingParams(temperature=0.7, top_p=0.9, seed=1),
                   SamplingParams(temperature=1.0, top_p=0.95, seed=1)):
        gen = params.generator()
        fast = per_draw(lambda r, p=params, g=gen: sample_token(r, p, g), 5)
        slow = per_draw(lambda r, p=params, g=gen: _sample_torch(r, p, g), 1)
        out.append(f"| {params.temperature} | {params.top_p} | {fast:.0f} | {slow:.0f} |")
    return "\n".join(out) + f"\n\nload average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tool-choice", default="none", help="none (no tools) | auto | required.")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--backend", default="llamacpp")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second.")
    parser.add_argument("--raw", type=Path, default=None, help="Keep py-spy's raw samples here.")
    parser.add_argument("--summarise", type=Path, default=None, help="Only summarise these raw samples.")
    parser.add_argument("--sampling", action="store_true", help="Only time one sampling draw, numpy vs torch.")
    args = parser.parse_args()
    if args.sampling:
        print(sampling(args))
        return
    if args.summarise:
        print(summarise(args.summarise))
        return
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    raw = args.raw or Path(tempfile.mkstemp(suffix=".txt", prefix="serve_profile_")[1])
    server_args = argparse.Namespace(max_batch=8, model="m", server_model=args.model, threads=args.threads,
                                     backend=args.backend, stem="serve_profile", start_timeout=600)
    proc, url = serve_load.start_tooldec(server_args)
    level_args = argparse.Namespace(tool_choice=args.tool_choice, max_tokens=args.max_tokens, temperature=0.0,
                                    extra_body="{}", request_timeout=600.0, no_tools=args.tool_choice == "none")
    try:
        warm = serving.questions_for("warm", args.tool_choice, 1)
        asyncio.run(serve_load.run_level(url, "m", 1, 1, 600, level_args, warm))
        spying = subprocess.Popen([spy, "record", "--pid", str(proc.pid), "--native", "--threads", "--rate",
                                   str(args.rate), "--format", "raw", "--output", str(raw)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(2)
        questions = serving.questions_for("p", args.tool_choice, args.requests)
        level = asyncio.run(serve_load.run_level(url, "m", 1, len(questions), 1800, level_args, questions))
        spying.send_signal(2)  # SIGINT: py-spy writes what it has
        spying.wait(120)
    finally:
        proc.terminate()
        proc.wait(60)
    print(f"tool_choice {args.tool_choice}: {level['completion_tokens']} tokens in {level['wall_s']} s "
          f"({level['tokens_per_s']} tokens/s); raw samples in {raw}\n")
    print(summarise(raw))


if __name__ == "__main__":
    main()
