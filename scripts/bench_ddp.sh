#!/usr/bin/env bash
# The data-parallel figures of docs/benchmarks.md on this machine, in one run:
#   - gpt and convnet step time, 2 ranks x 1 thread (mpirun, DDP) against 1 rank x 2
#     threads, INTERLEAVED for ROUNDS rounds (medians of each run, then the median ratio);
#   - the fraction of DDP's all-reduce time hidden behind backward, with the default 25 MiB
#     buckets and with 1 MiB and 256 KiB ones;
#   - dist::all_reduce against a bare MPI_Allreduce on the same buffers.
# Usage: scripts/bench_ddp.sh        Env: BUILD_DIR (build), ROUNDS (3), TIMED (20), SKIP_BUILD=1
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
ROUNDS=${ROUNDS:-3}
TIMED=${TIMED:-20}
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  scripts/install_deps.sh
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target bench_ddp
fi
B="$BUILD_DIR/bench/bench_ddp"
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
ms() { sed -n 's/.* step \([0-9.]*\) ms.*/\1/p'; }
echo "# $(date -u +%Y-%m-%d) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
for w in gpt convnet; do
  ratios=()
  for r in $(seq "$ROUNDS"); do
    one=$(OMP_NUM_THREADS=2 "$B" step --workload "$w" --threads 2 --timed "$TIMED")
    two=$("${MPI[@]}" -np 2 "$B" step --workload "$w" --threads 1 --timed "$TIMED")
    echo "$one"
    echo "$two"
    ratios+=("$(awk -v a="$(echo "$two" | ms)" -v b="$(echo "$one" | ms)" 'BEGIN { printf "%.3f", a / b }')")
  done
  med=$(printf '%s\n' "${ratios[@]}" | sort -n | sed -n "$(((ROUNDS + 1) / 2))p")
  echo "$w: 2 ranks x 1 thread / 1 rank x 2 threads = ${med}x (median of rounds: ${ratios[*]})"
  for mb in 1 0.25; do "${MPI[@]}" -np 2 "$B" step --workload "$w" --threads 1 --timed "$TIMED" --bucket-mb "$mb"; done
done
"${MPI[@]}" -np 2 "$B" allreduce
