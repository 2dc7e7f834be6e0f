#!/usr/bin/env bash
# Fuzzes every loader of outside bytes (tests/fuzz, one libFuzzer target per folder of
# tests/fuzz/corpus) under ASan + UBSan, each from a scratch copy of its seed corpus, and
# fails if any target finds a crash, hang, leak or out-of-memory. CI's third stage.
# Usage: scripts/fuzz.sh [target ...]       (default: every target)
# Env: FUZZ_SECONDS per target (default 15), or FUZZ_RUNS=N to run N executions per target
#      instead (the long measurement of docs/reliability.md); FUZZ_SEED (1; 0: random);
#      BUILD_DIR (build-asan); JOBS (targets fuzzed at once; default nproc).
# Each target's log and any crashing input land in $BUILD_DIR/fuzz/<target>/; a crash
# found becomes a test by copying it to tests/fuzz/corpus/<target>/crashes/.
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${BUILD_DIR:-build-asan}
scripts/asan_build.sh kiln_fuzzers
targets=("$@")
[ ${#targets[@]} -gt 0 ] || for d in tests/fuzz/corpus/*/; do targets+=("$(basename "$d")"); done
if [ -n "${FUZZ_RUNS:-}" ]; then limit=(-runs="$FUZZ_RUNS"); else limit=(-max_total_time="${FUZZ_SECONDS:-15}"); fi
# A fixed seed makes CI's short run the first seconds of the long FUZZ_RUNS runs of
# docs/reliability.md (same seed), so a landing is not failed by chance; FUZZ_SEED=0 picks
# a random seed, for exploring further.
limit+=(-seed="${FUZZ_SEED:-1}")
# harnesses write each input to a file under TMPDIR: on disk, writeback makes that 10x slower
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# one target: its log, any crashing input and its result line land in $BUILD_DIR/fuzz/<target>/
fuzz_one() {
  local t=$1 work="$BUILD_DIR/fuzz/$1" rc=0 start ms execs cov ft result=ok
  rm -rf "$work" && mkdir -p "$work/corpus" "$work/artifacts"
  cp -r "tests/fuzz/corpus/$t/." "$work/corpus/"
  start=$(date +%s%N)
  "$BUILD_DIR/tests/fuzz/fuzz_$t" "${limit[@]}" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/" "$work/corpus" >"$work/log.txt" 2>&1 || rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log.txt" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$work/log.txt" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$work/log.txt" | tail -1 | cut -d' ' -f2)
  [ "$rc" -eq 0 ] || result="FAILED (exit $rc): see $work/log.txt, inputs in $work/artifacts/"
  printf '%-14s %10s %6d.%d %7s %7s  %s\n' "$t" "${execs:-?}" $((ms / 1000)) $((ms % 1000 / 100)) "${cov:-?}" \
    "${ft:-?}" "$result" >"$work/result.txt"
}
# JOBS targets at a time (default: one per core; each fuzzer is one single-threaded process)
jobs_max=${JOBS:-$(nproc)}
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  fuzz_one "$t" &
done
wait
failed=()
printf '%-14s %10s %8s %7s %7s  %s\n' target executions seconds cov ft result
for t in "${targets[@]}"; do
  cat "$BUILD_DIR/fuzz/$t/result.txt"
  grep -q ' ok$' "$BUILD_DIR/fuzz/$t/result.txt" || failed+=("$t")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "[kiln] fuzzing found failures in: ${failed[*]}" >&2
  for t in "${failed[@]}"; do tail -n 40 "$BUILD_DIR/fuzz/$t/log.txt" >&2; done
  exit 1
fi
echo "[kiln] fuzzing: ${#targets[@]} targets, no failure"
