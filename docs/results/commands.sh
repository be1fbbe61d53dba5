#!/bin/bash
# The exact commands behind docs/results.md. Usage: docs/results/commands.sh MODEL KAMEL_N BFCL_N FUNCQA_N REST_N
# (N = the first N items of the benchmark, or "all"). Every run resumes where an earlier one stopped, so running
# this again with larger N extends the results instead of starting over. Needs $TOOLDEC_SHARED (or ../shared).
set -u
m=$1; lk=$2; lb=$3; lf=$4; lr=$5
ev() {  # ev BENCHMARK DECODING N [options...]: one run into runs/full/<benchmark>[-K]-<model>-<decoding>[-required]
  local b=$1 d=$2 n=$3; shift 3
  local name=$b
  [[ " $* " == *" --tools "* ]] && name=$b-$(sed 's/.*--tools \([0-9]*\).*/\1/' <<< "$*")
  local suffix=""; [[ " $* " == *" --tool-choice required"* ]] && suffix=-required
  local limit=(); [ "$n" != all ] && limit=(--limit "$n")
  local replay=()  # one-shot benchmarks: fuzzy scores the free run's generations instead of decoding them again
  [ "$d" = fuzzy ] && [[ $b == kamel || $b == bfcl-* ]] && replay=(--replay "runs/full/$name-$m-free$suffix")
  tooldec eval "$b" --model "$m" --decoding "$d" "${limit[@]}" --threads 1 --resume \
    --out "runs/full/$name-$m-$d$suffix" "${replay[@]}" "$@"
}
for b in funcqa-oh funcqa-mh; do for d in tooldec free fuzzy; do ev $b $d "$lf" --batch-size 8; done; done
for k in 30 234; do for d in tooldec free fuzzy; do ev kamel $d "$lk" --tools $k --batch-size 1; done; done
for b in bfcl-simple bfcl-multiple; do
  for d in tooldec free fuzzy; do ev $b $d "$lb" --batch-size 8; done
  for d in tooldec free fuzzy; do ev $b $d "$lb" --batch-size 8 --tool-choice required; done
done
for d in tooldec free fuzzy; do ev restbench-tmdb $d "$lr" --batch-size 8; done
