# The run helpers docs/results/commands.sh and docs/results/bfcl_rerun.sh share (sourced, not run): ev runs one
# cell into docs/results/runs/<cell>-<model>-<mode>[-compressed][-required][-lines][-llamacpp], resuming it, and
# modes runs a cell in the three decoding modes. Needs $m (model) and $n (item limit or "all") set by the caller.
set -u
runs=docs/results/runs
shared=${TOOLDEC_SHARED:-../shared}
locks=${TMPDIR:-/tmp}/tooldec-run-locks; mkdir -p "$locks"
# glibc keeps freed tensors for reuse instead of unmapping them: a batch's decode steps take a sixth less time
# here (SmolLM2, 8 RestBench prompts, 60 steps: 31.5 -> 26.9 s, system time 6.3 -> 2.1 s); results are the same
export MALLOC_MMAP_THRESHOLD_=1000000000 MALLOC_TRIM_THRESHOLD_=1000000000
ev() {  # ev BENCHMARK DECODING BATCH [options...]: one run into $runs/<name>
  local b=$1 d=$2 bs=$3; shift 3
  local name=$b
  [[ " $* " == *" --tools "* ]] && name=$b-$(sed 's/.*--tools \([0-9]*\).*/\1/' <<< "$*")
  local suffix=""
  [[ " $* " == *" --compressed "* ]] && suffix=-compressed
  [[ " $* " == *" --tool-choice required"* ]] && suffix=$suffix-required
  [[ " $* " == *" --format hermes-lines"* ]] && suffix=$suffix-lines
  [[ " $* " == *" --backend llamacpp"* ]] && suffix=$suffix-llamacpp
  local limit=(); [ "$n" != all ] && limit=(--limit "$n")
  local replay=()  # one-shot benchmarks: fuzzy scores the free run's generations instead of decoding them again
  if [ "$d" = fuzzy ] && [[ $b == kamel || $b == bfcl-* ]]; then
    replay=(--replay "$runs/$name-$m-free$suffix")
    flock "$locks/$name-$m-free$suffix" true  # another chain may still be writing the free run
  fi
  flock -n "$locks/$name-$m-$d$suffix" tooldec eval "$b" --model "$m" --decoding "$d" "${limit[@]}" --threads 1 \
    --batch-size "$bs" --resume --out "$runs/$name-$m-$d$suffix" "${replay[@]}" "$@" \
    || echo "$name-$m-$d$suffix: skipped or failed (status $?)" >&2
}
modes() { for d in tooldec free fuzzy; do ev "$1" $d "${@:2}"; done; }  # modes BENCHMARK BATCH [options...]
