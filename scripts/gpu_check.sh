#!/usr/bin/env bash
# The one-call GPU check of kiln, for a GPU machine where nothing can be installed and
# Debian's packages are absent: prints the environment (GPU, driver, nvcc, where cuBLAS
# and cuDNN were found), configures for sm_90 with the header-only dependencies of .deps/
# (scripts/collect_deps.sh, run beforehand on a Debian machine), builds the library, the
# `kiln` command and the CUDA tests, runs the CUDA tests (ctest -R cuda), then the GPU
# benchmark (CPU vs GPU on the CPU shapes; the GPU shapes in fp32/tf32/bf16 against PyTorch
# when python3 can import torch), and prints a short table last.
# Without a GPU it stops after the build and the GPU-less tests, and exits 0.
#
# Usage: scripts/gpu_check.sh [extra cmake args...]
# Env:   BUILD_DIR (build-gpu)  CUDA_ARCHS (90)  JOBS (nproc)  BUILD_TIMEOUT (420 s)
#        BENCH_TIMED (10: timed steps per benchmark workload)
#        CUDNN_ROOT (a folder with
#        include/cudnn.h and lib/libcudnn.so*; searched for when unset)
#        OUT: when set (the device tool's output folder), the logs are copied there.
# Budget: under 8 minutes on a 16-core GPU machine (build ~3 min, tests ~1 min, bench at most
# 90 + 100 + 100 s by its time limits, less in practice).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build-gpu}
CUDA_ARCHS=${CUDA_ARCHS:-90}
JOBS=${JOBS:-$(nproc)}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-420}
LOGS=$BUILD_DIR/gpu_check_logs
mkdir -p "$LOGS"
T0=$(date +%s)
declare -a ROWS=()   # "key|value" lines of the final table
row() { ROWS+=("$1|$2"); }
say() { echo "[gpu_check] $*"; }
elapsed() { echo $(( $(date +%s) - T0 ))s; }

finish() {  # finish EXIT_CODE: copy logs, print the table, exit
  row "total time" "$(elapsed)"
  if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then cp "$LOGS"/*.log "$LOGS"/*.txt "$OUT"/ 2>/dev/null || true; fi
  {
    echo
    echo "==================== kiln GPU check ($(date -u +%Y-%m-%dT%H:%MZ)) ===================="
    for r in "${ROWS[@]}"; do printf '%-32s %s\n' "${r%%|*}" "${r#*|}"; done
  } | tee "$LOGS/summary.txt"
  exit "$1"
}

# ---------------------------------------------------------------- environment
say "environment"
HAVE_GPU=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  GPU_INFO=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n1)
  [ -n "$GPU_INFO" ] && HAVE_GPU=1
fi
row "GPU (name, driver, memory)" "${GPU_INFO:-none found (nvidia-smi missing or lists no GPU)}"
NVCC=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ -x "$NVCC" ]; then
  row "nvcc" "$NVCC: $("$NVCC" --version | grep -o 'release [0-9.]*, V[0-9.]*' | head -n1)"
else
  row "nvcc" "not found"
  say "error: no nvcc (set CUDACXX)"; finish 1
fi
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$NVCC")")")}
row "cmake" "$(cmake --version | head -n1) ($(command -v ninja >/dev/null && echo ninja || echo make), $JOBS jobs)"

py_pkg_dir() {  # the folder of a pip 'nvidia' package (nvidia.cudnn, nvidia.cublas), if python3 has it
  python3 -c "import importlib, sys; m = importlib.import_module('$1'); print(list(m.__path__)[0])" 2>/dev/null || true
}
first_file() { for f in "$@"; do [ -e "$f" ] && { echo "$f"; return; }; done; }

CUBLAS_LIB=$(first_file "$CUDA_HOME"/lib64/libcublas.so "$CUDA_HOME"/targets/x86_64-linux/lib/libcublas.so \
  /usr/lib/x86_64-linux-gnu/libcublas.so)
row "cuBLAS" "${CUBLAS_LIB:-not in the toolkit ($CUDA_HOME); the CUDA::cublas target will fail}"

CUDNN_INC="" CUDNN_LIB=""
for root in ${CUDNN_ROOT:-} "$CUDA_HOME" /usr /usr/local/cudnn "$(py_pkg_dir nvidia.cudnn)"; do
  [ -n "$root" ] || continue
  inc=$(first_file "$root/include/cudnn.h" "$root/include/x86_64-linux-gnu/cudnn.h")
  lib=$(ls "$root"/lib64/libcudnn.so* "$root"/lib/libcudnn.so* "$root"/lib/x86_64-linux-gnu/libcudnn.so* 2>/dev/null | head -n1)
  if [ -n "$inc" ] && [ -n "$lib" ]; then CUDNN_INC=$(dirname "$inc"); CUDNN_LIB=$lib; break; fi
done
if [ -n "$CUDNN_LIB" ]; then
  row "cuDNN" "$CUDNN_LIB (header $CUDNN_INC/cudnn.h)"
  CUDNN_DIR=$(dirname "$CUDNN_LIB")
  export LD_LIBRARY_PATH="$CUDNN_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  row "cuDNN" "not found (set CUDNN_ROOT)"
fi
if python3 -c "import torch" >/dev/null 2>&1; then
  row "PyTorch" "$(python3 -c 'import torch; print(torch.__version__, "cuda" if torch.cuda.is_available() else "no cuda")' 2>/dev/null)"
else
  row "PyTorch" "not importable"
fi
for r in "${ROWS[@]}"; do printf '  %-32s %s\n' "${r%%|*}" "${r#*|}"; done

# ---------------------------------------------------------------- configure
say "configure ($BUILD_DIR, sm_$CUDA_ARCHS)"
CMAKE_ARGS=(-S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS"
  -DCMAKE_CUDA_COMPILER="$NVCC" -DKILN_DEPS_DIR="$ROOT/.deps" -DKILN_BENCH_LIBTORCH=OFF
  -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON)
command -v ninja >/dev/null 2>&1 && [ ! -f "$BUILD_DIR/Makefile" ] && CMAKE_ARGS+=(-G Ninja)
[ -n "$CUDNN_LIB" ] && CMAKE_ARGS+=(-DKILN_CUDNN_LIB="$CUDNN_LIB" -DKILN_CUDNN_INCLUDE="$CUDNN_INC")
if [ ! -f /usr/include/zlib.h ] && [ -f .deps/zlib/include/zlib.h ]; then  # zlib1g-dev absent: the copy
  CMAKE_ARGS+=(-DZLIB_INCLUDE_DIR="$ROOT/.deps/zlib/include" -DZLIB_LIBRARY="$ROOT/.deps/zlib/lib/libz.a")
fi
[ -d .deps ] || say "warning: no .deps/ (run scripts/collect_deps.sh on a Debian machine and carry it along)"
if ! cmake "${CMAKE_ARGS[@]}" "$@" > "$LOGS/configure.log" 2>&1; then
  tail -n 30 "$LOGS/configure.log"
  row "configure" "FAILED (see $LOGS/configure.log)"
  finish 1
fi
row "configure" "ok ($(grep -o 'CUDA backend [A-Z]*' "$LOGS/configure.log" | head -n1))"

# ---------------------------------------------------------------- build
TESTS=$(ctest --test-dir "$BUILD_DIR" -N -R cuda 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: *//p')
say "build: kiln, kiln_cli, $(echo $TESTS | tr '\n' ' ')"
B0=$(date +%s)
# shellcheck disable=SC2086
if ! timeout "$BUILD_TIMEOUT" cmake --build "$BUILD_DIR" -j "$JOBS" --target kiln kiln_cli $TESTS > "$LOGS/build.log" 2>&1; then
  grep -E "error|Error" "$LOGS/build.log" | head -n 30
  tail -n 20 "$LOGS/build.log"
  row "build" "FAILED after $(( $(date +%s) - B0 ))s (see $LOGS/build.log)"
  finish 1
fi
row "build" "ok in $(( $(date +%s) - B0 ))s"

# ---------------------------------------------------------------- CUDA tests
say "ctest -R cuda"
timeout 240 ctest --test-dir "$BUILD_DIR" -R cuda -V > "$LOGS/ctest.log" 2>&1
CTEST_RC=$?
grep -E "tests passed|tests failed|Failed|\*\*\*" "$LOGS/ctest.log" | tail -n 15
row "ctest -R cuda" "$(grep -E '% tests passed' "$LOGS/ctest.log" | tail -n1 | sed 's/^ *//')"
# doctest's own counts per test program (skipped test cases show up here)
while IFS= read -r t; do
  counts=$(awk -v t="$t" '$0 ~ "Test command: .*/"t"$" {on=1} on && /test cases:/ {sub(/.*test cases: */, ""); print; exit}' \
    "$LOGS/ctest.log" | tr -s ' ')
  row "  $t" "${counts:-no doctest summary (crashed?)}"
done <<< "$TESTS"
grep -h "skipped:\|MESSAGE\|a failing CUDA call" "$LOGS/ctest.log" | head -n 5 > "$LOGS/messages.txt" || true

if [ "$HAVE_GPU" -ne 1 ]; then
  row "GPU part" "no GPU: stopped after the build and the GPU-less tests"
  say "no GPU: stopped after build (the CUDA tests that need a GPU reported themselves skipped)"
  [ "$CTEST_RC" -eq 0 ] && finish 0 || finish 1
fi

# ---------------------------------------------------------------- benchmark
# 1. CPU vs GPU on the CPU shapes (the same model and batch on both devices: the speedup);
# 2. the GPU shapes (WORKLOADS.md: large batches, GPT-2 small) in fp32, tf32 and bf16, kiln
#    and then PyTorch (bench/torch_bench.py, when `import torch` works), merged by
#    `kiln bench --compare` into the kiln/PyTorch table. Each stage has its own time limit.
KILN=$BUILD_DIR/kiln
BENCH_TIMED=${BENCH_TIMED:-10}
bench_stage() {  # bench_stage NAME SECONDS CMD...: run, log, one table row
  local name=$1 secs=$2; shift 2
  say "$name: $*"
  if timeout "$secs" "$@" > "$LOGS/$name.log" 2>&1; then row "$name" "ok ($LOGS/$name.log)"
  else row "$name" "FAILED or timed out after ${secs}s ($LOGS/$name.log)"; fi
}
if [ -x "$KILN" ]; then
  bench_stage bench_cpu_vs_gpu 90 "$KILN" bench --devices cpu,cuda --cpu-shapes --workloads mlp,lenet,convnet,gpt \
    --timed "$BENCH_TIMED" --csv "$LOGS/bench_cpu_vs_gpu.csv"
  bench_stage bench_gpu_kiln 100 "$KILN" bench --devices cuda --gpu-shapes --precision fp32,tf32,bf16 \
    --timed "$BENCH_TIMED" --csv "$LOGS/bench_gpu_kiln.csv"
  CSVS=$LOGS/bench_gpu_kiln.csv
  if python3 -c "import torch; assert torch.cuda.is_available()" >/dev/null 2>&1; then
    bench_stage bench_gpu_pytorch 100 python3 bench/torch_bench.py --device cuda --gpu-shapes \
      --precision fp32,tf32,bf16 --timed "$BENCH_TIMED" --csv "$LOGS/bench_gpu_pytorch.csv"
    [ -s "$LOGS/bench_gpu_pytorch.csv" ] && CSVS=$CSVS,$LOGS/bench_gpu_pytorch.csv
  else
    row "bench_gpu_pytorch" "skipped: python3 cannot import torch with CUDA here"
  fi
  echo "---- CPU vs GPU (CPU shapes; GPU speedup table last) ----"
  tail -n 14 "$LOGS/bench_cpu_vs_gpu.log"
  echo "---- GPU shapes: kiln vs PyTorch ----"
  if [ -s "$LOGS/bench_gpu_kiln.csv" ]; then
    "$KILN" bench --compare "$CSVS" --csv "$LOGS/bench_gpu_compare.csv" 2>&1 | tee "$LOGS/bench_gpu_compare.log"
  else
    tail -n 20 "$LOGS/bench_gpu_kiln.log"
  fi
else
  row "kiln bench" "no kiln binary in $BUILD_DIR"
fi
[ "$CTEST_RC" -eq 0 ] && finish 0 || finish 1
