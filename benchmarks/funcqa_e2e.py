"""End to end on the default model: FuncQA questions with guidance (jump-forward on and off) and without.

Reports tokens per second, forward passes, the share of passes jump-forward saves, and the guidance overhead
(time outside the model's forward pass, as a share of the model step), and the guidance share: the time spent
filling and applying masks and accepting tokens into the policies (Generation.guidance_seconds) over the model's
forward time. Not a test: figures depend on the load.

    python benchmarks/funcqa_e2e.py [--n 20] [--shared ../shared] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

from rich.console import Console
from rich.progress import track
from rich.table import Table

from tooldec.agents import ToolExecutor
from tooldec.agents.toolken import ToolkenAgent
from tooldec.backends import load_model
from tooldec.toolsets import FUNCQA_FUNCTIONS, funcqa_tools

MODES = {
    "tooldec": {"guided": True, "jump_forward": True},
    "tooldec, no jump-forward": {"guided": True, "jump_forward": False},
    "free": {"guided": False, "jump_forward": False},
}


def main() -> None:
    """Run every mode on the first N one-hop FuncQA questions and write JSON + Markdown."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--shared", default=os.environ.get("TOOLDEC_SHARED", "../shared"))
    ap.add_argument("--model", default=None)
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    questions = [q["question"] for q in json.loads(Path(args.shared, "data/funcqa/funcqa_oh.json").read_text())]
    questions = questions[: args.n]
    lm = load_model(args.model)
    executor = ToolExecutor(FUNCQA_FUNCTIONS, funcqa_tools())
    ToolkenAgent(lm, executor).run("warm-up: what is 1 plus 1?")
    rows = []
    for mode, kw in MODES.items():
        results = [ToolkenAgent(lm, executor, **kw).run(q) for q in track(questions, description=mode)]
        tokens = sum(r.tokens for r in results)
        seconds = sum(r.seconds for r in results)
        model = sum(r.model_seconds for r in results)
        passes = sum(r.forward_passes for r in results)
        rows.append(
            {
                "mode": mode,
                "questions": len(results),
                "calls": sum(len(r.calls) for r in results),
                "call_errors": sum(len(r.errors) for r in results),
                "tokens": tokens,
                "forward_passes": passes,
                "forced_tokens": sum(r.forced_tokens for r in results),
                "seconds": round(seconds, 2),
                "tokens_per_s": round(tokens / seconds, 2),
                "seconds_per_question": round(statistics.mean(r.seconds for r in results), 3),
                "overhead_share_of_model_step": round((seconds - model) / model, 4),
                "guidance_share_of_model_time": round(sum(r.guidance_seconds for r in results) / model, 5),
            }
        )
    base = {r["mode"]: r for r in rows}
    on, off = base["tooldec"], base["tooldec, no jump-forward"]
    summary = {
        "model": lm.name,
        "passes_saved_by_jump_forward": round(1 - on["forward_passes"] / off["forward_passes"], 4),
        "forced_share_of_tokens": round(on["forced_tokens"] / on["tokens"], 4),
        "rows": rows,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "funcqa_e2e.json").write_text(json.dumps(summary, indent=2) + "\n")
    table = Table(title=f"FuncQA one-hop, first {len(questions)} questions, {lm.name}")
    for key in rows[0]:
        table.add_column(key)
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    Console().print(table)
    md = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    md += ["| " + " | ".join(str(v) for v in row.values()) + " |" for row in rows]
    md.append("")
    md.append(f"Jump-forward saves {summary['passes_saved_by_jump_forward']:.1%} of forward passes; "
              f"{summary['forced_share_of_tokens']:.1%} of guided tokens are forced.")
    (out / "funcqa_e2e.md").write_text("\n".join(md) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
