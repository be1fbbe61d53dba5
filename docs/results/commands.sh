#!/bin/bash
# The exact commands behind docs/results.md: every benchmark cell in three modes (tooldec, free, fuzzy) for one
# model, written straight into docs/results/runs/<cell>-<model>-<mode>[-compressed][-required] (tracked, so a
# partial pass is committed and the next session resumes it). Usage: docs/results/commands.sh MODEL [N]
# (N = only the first N items of each benchmark; default all). Cells run in the order below: the issue's
# "done when" cells (KAMEL 30 and 234) first, then the rest of the KAMEL curve, which is quick. Every run resumes
# where an earlier one stopped. Needs $TOOLDEC_SHARED (or ../shared). Two chains for one model share the work: a
# cell another chain is running (its lock in $locks) is skipped, and a fuzzy replay waits for its free run.
set -u
cd "$(dirname "$0")/../.."
m=$1; n=${2:-all}
source docs/results/ev.sh
modes kamel 1 --tools 30
modes kamel 1 --tools 234
modes kamel 1 --tools 60  # with 30 and 234: the curve of accuracy against the number of tools (KAMEL, Figure 5)
modes kamel 1 --tools 100
modes funcqa-oh 8
modes bfcl-simple 8
modes bfcl-simple 8 --tool-choice required
modes funcqa-mh 8
modes bfcl-multiple 8
modes bfcl-multiple 8 --tool-choice required
# ToolDec's calls in hermes-lines (they may be pretty-printed, as Qwen2.5-Coder writes its ```json blocks; free and
# fuzzy decoding are the same runs as above). SmolLM2 is left out: in auto mode it scores 0-0.5% in every mode.
if [ "$m" = qwen2.5-coder-0.5b ]; then
  for b in bfcl-multiple bfcl-simple; do ev $b tooldec 8 --format hermes-lines; done
fi
for c in parallel parallel-multiple; do
  modes bfcl-$c 8
  modes bfcl-$c 8 --tool-choice required
done
modes bfcl-irrelevance 8
modes restbench-tmdb 8
modes restbench-spotify 8
for s in tmdb spotify; do  # the compressed-prompt runs (ToolDec §3.2): descriptions rewritten by the same model
  short=$runs/compressed-$s-$m.json
  flock "$locks/compress-$s-$m" tooldec compress-tools "$shared/data/restbench/${s}_oas.json" --model "$m" --threads 1 --out "$short"
  modes restbench-$s 8 --compressed "$short"
done
short=$runs/compressed-bfcl-multiple-$m.json  # BFCL: the category with several tools per prompt
flock "$locks/compress-bfcl-multiple-$m" tooldec compress-tools bfcl-multiple --model "$m" --threads 1 --out "$short" --shared "$shared"
modes bfcl-multiple 8 --compressed "$short"
# ToolDec in hermes-lines on the compressed cell too, as on the uncompressed one above (Qwen2.5-Coder only)
if [ "$m" = qwen2.5-coder-0.5b ]; then ev bfcl-multiple tooldec 8 --compressed "$short" --format hermes-lines; fi
