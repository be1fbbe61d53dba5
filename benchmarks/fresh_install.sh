#!/usr/bin/env bash
# The README's first command as a new user meets it (issue 35): a fresh clone of this checkout, a fresh venv and
# empty pip and tooldec caches under $DIR (default /tmp/fresh), then the command run twice; prints each stage's
# seconds. Measure on an idle machine: `uptime` is printed before and after.
#   bash benchmarks/fresh_install.sh [DIR]
set -euo pipefail
SRC="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${1:-/tmp/fresh}"
rm -rf "$DIR" && mkdir -p "$DIR" && cd "$DIR"
git clone -q "$SRC" repo && cd repo
python -m venv "$DIR/venv" && source "$DIR/venv/bin/activate"
export PIP_CACHE_DIR="$DIR/pipcache" TOOLDEC_CACHE="$DIR/tdcache" HF_HOME="$DIR/hf"
uptime
t0=$(date +%s.%N)
pip install -q torch==2.13.0
t1=$(date +%s.%N)
pip install -q -e ".[models]"
t2=$(date +%s.%N)
tooldec run "What is 3.14 times 123?"
t3=$(date +%s.%N)
tooldec run "What is 3.14 times 123?"
t4=$(date +%s.%N)
uptime
python - "$t0" "$t1" "$t2" "$t3" "$t4" <<'P'
import sys
t = [float(x) for x in sys.argv[1:]]
print(f"torch {t[1]-t[0]:.1f} s, install {t[2]-t[1]:.1f} s, first run {t[3]-t[2]:.1f} s: "
      f"{t[3]-t[0]:.1f} s to the first answer; second run {t[4]-t[3]:.1f} s")
P
