"""Issue 5 items 3 and 4: compile time and memory vs number of tools and vocabulary size (plot), and adding one
tool vs compiling the set again. Writes results/scaling.json and results/scaling.png.

    python benchmarks/scaling.py [--shared ../shared] [--engines tooldec,xgrammar,llguidance] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from tooldec.bench.engines import ENGINES
from tooldec.bench.scaling import TOOL_COUNTS, VOCAB_TOKENIZERS, add_one_tool, measure_point, plot


def main() -> None:
    """Measure every point (each in a fresh process) and write the JSON and the plot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=Path(os.environ.get("TOOLDEC_SHARED", "../shared")))
    parser.add_argument("--engines", default="tooldec,xgrammar,llguidance")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    engines = [e for e in args.engines.split(",") if ENGINES[e].missing() is None]
    tokenizers = args.shared / "tokenizers"
    points = []
    for engine in engines:
        for n in TOOL_COUNTS:
            points.append(measure_point(engine, tokenizers / "llama3", n, args.repeats) | {"group": "by_tools"})
            print(json.dumps(points[-1]), flush=True)
        for name in VOCAB_TOKENIZERS:
            points.append(measure_point(engine, tokenizers / name, 200, args.repeats) | {"group": "by_vocab"})
            print(json.dumps(points[-1]), flush=True)
    added = add_one_tool(tokenizers / "llama3", repeats=args.repeats)
    print(json.dumps(added), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"repeats": args.repeats, "points": points, "add_one_tool": added}
    (args.out / "scaling.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    plot(points, args.out / "scaling.png")


if __name__ == "__main__":
    main()
