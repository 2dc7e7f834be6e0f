#!/usr/bin/env bash
# The one-call GPU check of kiln, for a lent GPU machine where nothing can be installed and
# Debian's packages are absent (the header-only dependencies come from .deps/, made by
# scripts/collect_deps.sh on a Debian machine). Everything it prints goes into $OUT as it
# happens, so a call cut short still returns what it did; one overall deadline (DEADLINE,
# default 540 s) bounds every stage, and the most valuable stages run first:
#   0. environment: GPU, driver, toolkit, cuBLAS/cuDNN versions, PyTorch, ldd of the binaries
#   1. configure (sm_90 only) and build only the GPU test binaries and the CLI (-k 0)
#   2. the GPU tests one by one, each with a time limit, in order of value
#   3. the GPT benchmark (GPT-2 small shape) in bf16, tf32, fp32, kiln then PyTorch
#   4. what time is left: the GPT in bf16 without the fused attention, the other GPU-shape
#      workloads, CPU vs GPU, the kernel ladder, the remaining tests
# Without a GPU it stops after the build and reports the GPU tests as skipped (exit 0).
#
# Usage: scripts/gpu_check.sh [--sanitize] [extra cmake args...]
#   --sanitize: a second call that reruns the tests that failed in the first (listed in
#               $BUILD_DIR/failed_tests.txt) under compute-sanitizer with CUDA_LAUNCH_BLOCKING=1.
# Env:   OUT (logs; default $BUILD_DIR/gpu_check_logs)  DEADLINE (540 s)  BUILD_DIR (build-gpu)
#        CUDA_ARCHS (90)  JOBS (nproc)  TEST_TIMEOUT (60 s a test)  BENCH_TIMED (10 timed steps)
#        CUDNN_ROOT (a folder with include/cudnn.h and lib/libcudnn.so*; searched when unset)
# docs/gpu.md has the plan and what each stage is for.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
T0=$(date +%s)
DEADLINE=${DEADLINE:-540}
BUILD_DIR=${BUILD_DIR:-build-gpu}
CUDA_ARCHS=${CUDA_ARCHS:-90}
JOBS=${JOBS:-$(nproc)}
TEST_TIMEOUT=${TEST_TIMEOUT:-60}
BENCH_TIMED=${BENCH_TIMED:-10}
SANITIZE=0
[ "${1:-}" = "--sanitize" ] && { SANITIZE=1; shift; }
LOGS=${OUT:-$BUILD_DIR/gpu_check_logs}
mkdir -p "$LOGS" "$BUILD_DIR"
SUMMARY=$LOGS/summary.txt
: > "$SUMMARY"
exec > >(tee -a "$LOGS/gpu_check.log") 2>&1   # everything, as it happens

say() { echo "[gpu_check $(( $(date +%s) - T0 ))s] $*"; }
row() { printf '%-34s %s\n' "$1" "$2" | tee -a "$SUMMARY"; }   # a summary line, written at once
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
# limit WANTED: a stage's time limit, cut to what is left before the deadline (minus a margin)
limit() { local l; l=$(( $(left) - 10 )); [ "$1" -lt "$l" ] && echo "$1" || echo "$l"; }
on_exit() {
  row "total time" "$(( $(date +%s) - T0 ))s of the ${DEADLINE}s deadline"
  cp -f "$BUILD_DIR"/*.csv "$LOGS"/ 2>/dev/null || true
}
trap on_exit EXIT
trap 'row "stopped" "by a signal at $(( $(date +%s) - T0 ))s"; exit 143' TERM INT

# ---------------------------------------------------------------- 0. environment
say "stage 0: environment"
HAVE_GPU=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  GPU_INFO=$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null | head -n1)
  [ -n "$GPU_INFO" ] && HAVE_GPU=1
  nvidia-smi > "$LOGS/nvidia-smi.txt" 2>&1
fi
row "GPU (name, driver, memory, clock)" "${GPU_INFO:-none found (nvidia-smi missing or lists no GPU)}"
# the host CPU: its packed GEMM kernels are tested in stage 4 (no other session machine has had AVX-512 and AMX)
row "host CPU" "$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs, $(grep -m1 -o -w -E \
  'avx512f|avx2' /proc/cpuinfo | head -n1)$(grep -m1 -q -w avx512_bf16 /proc/cpuinfo && echo ' avx512_bf16')$(grep \
  -m1 -q -w amx_bf16 /proc/cpuinfo && echo ' amx_bf16')"
NVCC=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$NVCC" ]; then row "nvcc" "not found (set CUDACXX)"; exit 1; fi
row "nvcc" "$NVCC: $("$NVCC" --version | grep -o 'release [0-9.]*, V[0-9.]*' | head -n1)"
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$NVCC")")")}
# The toolkit's libraries first: the cuDNN wheel's RUNPATH points at its own cublas folder,
# while kiln links the toolkit's libcublasLt.
export LD_LIBRARY_PATH="$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
first_file() { for f in "$@"; do [ -e "$f" ] && { echo "$f"; return; }; done; }
py_pkg_dir() { python3 -c "import importlib; m = importlib.import_module('$1'); print(list(m.__path__)[0])" 2>/dev/null || true; }
version_of() { ls "$@" 2>/dev/null | sed -n 's/.*\.so\.\([0-9][0-9.]*\)$/\1/p' | sort -V | tail -n1; }
CUBLAS_LIB=$(first_file "$CUDA_HOME"/lib64/libcublas.so "$CUDA_HOME"/targets/x86_64-linux/lib/libcublas.so)
row "cuBLAS / cuBLASLt" "${CUBLAS_LIB:-not in $CUDA_HOME} (version $(version_of "$CUDA_HOME"/lib64/libcublasLt.so.*))"
CUDNN_INC="" CUDNN_LIB=""
for r in ${CUDNN_ROOT:-} "$CUDA_HOME" /usr /usr/local/cudnn "$(py_pkg_dir nvidia.cudnn)"; do
  [ -n "$r" ] || continue
  inc=$(first_file "$r/include/cudnn.h" "$r/include/x86_64-linux-gnu/cudnn.h")
  lib=$(ls "$r"/lib64/libcudnn.so* "$r"/lib/libcudnn.so* "$r"/lib/x86_64-linux-gnu/libcudnn.so* 2>/dev/null | head -n1)
  if [ -n "$inc" ] && [ -n "$lib" ]; then CUDNN_INC=$(dirname "$inc"); CUDNN_LIB=$lib; break; fi
done
if [ -n "$CUDNN_LIB" ]; then
  CUDNN_VER=$(awk '/define CUDNN_MAJOR/{a=$3} /define CUDNN_MINOR/{b=$3} /define CUDNN_PATCHLEVEL/{c=$3} END{print a"."b"."c}' \
    "$CUDNN_INC/cudnn_version.h" 2>/dev/null)
  row "cuDNN" "$CUDNN_LIB (version ${CUDNN_VER:-?})"
  CUDNN_DIR=$(dirname "$CUDNN_LIB")
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$CUDNN_DIR"   # after the toolkit's folder
else
  row "cuDNN" "not found (set CUDNN_ROOT)"
fi
if python3 -c "import torch" >/dev/null 2>&1; then
  row "PyTorch" "$(python3 -c 'import torch; print(torch.__version__, torch.version.cuda, "cuda ok" if torch.cuda.is_available() else "no cuda")' 2>/dev/null)"
else
  row "PyTorch" "not importable"
fi
row "LD_LIBRARY_PATH" "$LD_LIBRARY_PATH"

# ---------------------------------------------------------------- 1. configure + build
# The GPU tests, most valuable first (runtime and allocator, linalg, nn, reduce, elementwise,
# training parity, optim, conv, shape); the CPU emulations of GPU index math run in CI too.
FIRST_TESTS="test_cuda_runtime test_cuda_device test_cuda_allocator_logic test_cuda_parity_linalg test_cuda_parity_nn
  test_cuda_reduce test_cuda_parity_elementwise test_cuda_training test_cuda_host_sync test_dist test_cuda_parity_optim
  test_cuda_parity_conv test_cuda_parity_shape"
LATER_TESTS="test_cuda_kernel_coverage test_cuda_multi_tensor_index test_cuda_index_math test_cuda_pool_index
  test_cuda_shape_index test_cuda_block_rows test_cuda_flash_attention test_cuda_ladder"
# The host CPU's packed GEMMs (AVX-512, AVX512_BF16, AMX and, with KILN_CPU_SGEMM=avx2, AVX2),
# its 16-lane float <-> 16-bit conversions (test_half) and 16-bit attention paths
# (test_nn_functional), last: a GPU host's Xeon is the only AVX-512 machine a session may get.
CPU_TESTS="test_sgemm test_sgemm_bf16 test_linalg test_half test_nn_functional"
if [ "$SANITIZE" -eq 0 ]; then
  say "stage 1: configure ($BUILD_DIR, sm_$CUDA_ARCHS) and build"
  CMAKE_ARGS=(-S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS"
    -DCMAKE_CUDA_COMPILER="$NVCC" -DKILN_DEPS_DIR="$ROOT/.deps" -DKILN_BENCH_LIBTORCH=OFF
    -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON)
  command -v ninja >/dev/null 2>&1 && [ ! -f "$BUILD_DIR/Makefile" ] && CMAKE_ARGS+=(-G Ninja)
  [ -n "$CUDNN_LIB" ] && CMAKE_ARGS+=(-DKILN_CUDNN_LIB="$CUDNN_LIB" -DKILN_CUDNN_INCLUDE="$CUDNN_INC")
  if [ ! -f /usr/include/zlib.h ] && [ -f .deps/zlib/include/zlib.h ]; then  # zlib1g-dev absent: the copy
    CMAKE_ARGS+=(-DZLIB_INCLUDE_DIR="$ROOT/.deps/zlib/include" -DZLIB_LIBRARY="$ROOT/.deps/zlib/lib/libz.a")
  fi
  [ -d .deps ] || say "warning: no .deps/ (run scripts/collect_deps.sh on a Debian machine and carry it along)"
  if ! timeout "$(limit 120)" cmake "${CMAKE_ARGS[@]}" "$@" > "$LOGS/configure.log" 2>&1; then
    tail -n 30 "$LOGS/configure.log"
    row "configure" "FAILED (configure.log)"
    exit 1
  fi
  row "configure" "ok ($(grep -o 'CUDA backend [A-Z]*' "$LOGS/configure.log" | head -n1))"
  B0=$(date +%s)
  # -k 0 / -k: build everything that can be built, so one broken test leaves the others
  KEEP=$([ -f "$BUILD_DIR/build.ninja" ] && echo "-k 0" || echo "-k")
  # shellcheck disable=SC2086
  timeout "$(limit 300)" cmake --build "$BUILD_DIR" -j "$JOBS" --target kiln_cli ptxas_resources $FIRST_TESTS $LATER_TESTS $CPU_TESTS \
    -- $KEEP \
    > "$LOGS/build.log" 2>&1
  BUILD_RC=$?
  grep -E "error|Error" "$LOGS/build.log" | head -n 30
  row "build" "$([ $BUILD_RC -eq 0 ] && echo ok || echo "FAILED (rc $BUILD_RC, build.log)") in $(( $(date +%s) - B0 ))s"
  # stage 0, continued: what the binaries load, and what they cannot find
  for b in "$BUILD_DIR/kiln" "$BUILD_DIR/tests/test_cuda_runtime"; do
    [ -x "$b" ] || continue
    ldd "$b" > "$LOGS/ldd_$(basename "$b").txt" 2>&1
    missing=$(grep -c "not found" "$LOGS/ldd_$(basename "$b").txt")
    row "ldd $(basename "$b")" "$([ "$missing" -eq 0 ] && echo "all found" || grep "not found" "$LOGS/ldd_$(basename "$b").txt" | tr -s ' \t' ' ' | tr '\n' ';')"
    grep -E "cublas|cudnn|cudart" "$LOGS/ldd_$(basename "$b").txt" | sed 's/^/    /'
  done
  # every kernel's registers / spills / stack / shared memory for sm_$CUDA_ARCHS (ptxas's report)
  if [ -x "$BUILD_DIR/tests/ptxas_resources" ]; then
    "$BUILD_DIR/tests/ptxas_resources" "$BUILD_DIR/CMakeFiles/kiln.dir" > "$LOGS/ptxas_resources.log" 2>&1
    row "ptxas resources" "$([ $? -eq 0 ] && echo ok || echo "OVER A LIMIT") (ptxas_resources.log)"
  fi
fi

# ---------------------------------------------------------------- 2. GPU tests, one by one
FAILED=()
run_test() {  # run_test NAME [wrapper...]: one test program with its own time limit (RUN_AS: its log's name)
  local t=$1; shift
  local name=${RUN_AS:-$t}
  local exe="$BUILD_DIR/tests/$t" secs
  secs=$(limit "$TEST_TIMEOUT")
  if [ "$secs" -lt 5 ]; then row "  $name" "not run: deadline"; return; fi
  if [ ! -x "$exe" ]; then row "  $name" "not built"; FAILED+=("$t"); return; fi
  timeout "$secs" "$@" "$exe" > "$LOGS/$name.log" 2>&1
  local rc=$?
  local counts
  counts=$(grep -E "test cases:" "$LOGS/$name.log" | tail -n1 | sed 's/.*test cases: *//' | tr -s ' ')
  if [ $rc -eq 0 ]; then row "  $name" "ok: ${counts:-?}"
  else row "  $name" "FAILED rc $rc$([ $rc -eq 124 ] && echo " (timeout ${secs}s)"): ${counts:-no summary}"; FAILED+=("$t"); fi
}
if [ "$SANITIZE" -eq 1 ]; then
  say "sanitize: rerunning the failed tests under compute-sanitizer"
  SAN=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
  export CUDA_LAUNCH_BLOCKING=1
  for t in $(cat "$BUILD_DIR/failed_tests.txt" 2>/dev/null); do
    TEST_TIMEOUT=$(( TEST_TIMEOUT * 4 )) run_test "$t" "$SAN" --tool memcheck --print-limit 20
  done
  exit 0
fi
say "stage 2: GPU tests"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
for t in $FIRST_TESTS; do run_test "$t"; done
printf '%s\n' "${FAILED[@]}" > "$BUILD_DIR/failed_tests.txt"
cp "$BUILD_DIR/failed_tests.txt" "$LOGS/" 2>/dev/null
if [ "$HAVE_GPU" -ne 1 ]; then
  row "GPU part" "no GPU: the GPU tests above reported themselves skipped; no benchmark"
  [ ${#FAILED[@]} -eq 0 ]; exit $?
fi

# ---------------------------------------------------------------- 3. the GPT benchmark
KILN=$BUILD_DIR/kiln
bench_stage() {  # bench_stage NAME SECONDS CMD...
  local name=$1 secs; secs=$(limit "$2"); shift 2
  if [ "$secs" -lt 20 ]; then row "$name" "not run: deadline"; return 1; fi
  say "$name: $*"
  if timeout "$secs" "$@" > "$LOGS/$name.log" 2>&1; then row "$name" "ok ($name.log)"
  else row "$name" "FAILED or cut at ${secs}s ($name.log)"; return 1; fi
}
TORCH_OK=0
python3 -c "import torch; assert torch.cuda.is_available()" >/dev/null 2>&1 && TORCH_OK=1
compare() {  # compare NAME: kiln vs PyTorch table from the two CSVs
  local csvs=$LOGS/$1_kiln.csv
  [ -s "$LOGS/$1_torch.csv" ] && csvs=$csvs,$LOGS/$1_torch.csv
  [ -s "$LOGS/$1_kiln.csv" ] && "$KILN" bench --compare "$csvs" --csv "$LOGS/$1_compare.csv" 2>&1 | tee "$LOGS/$1_compare.log"
}
say "stage 3: GPT benchmark"
bench_stage bench_gpt_kiln 150 "$KILN" bench --devices cuda --gpu-shapes --workloads gpt --precision bf16,tf32,fp32 \
  --timed "$BENCH_TIMED" --csv "$LOGS/bench_gpt_kiln.csv"
if [ $TORCH_OK -eq 1 ]; then
  bench_stage bench_gpt_torch 120 python3 bench/torch_bench.py --device cuda --gpu-shapes --workloads gpt \
    --precision bf16,tf32,fp32 --timed "$BENCH_TIMED" --csv "$LOGS/bench_gpt_torch.csv"
else
  row "bench_gpt_torch" "skipped: python3 cannot import torch with CUDA"
fi
compare bench_gpt

# ---------------------------------------------------------------- 4. the rest, while time is left
say "stage 4: the other workloads and tests, while time is left"
# the GPT in bf16 with the fused attention kernels off (the composed cuBLAS path): their gain
bench_stage bench_gpt_composed 60 env KILN_CUDA_FLASH_ATTENTION=0 "$KILN" bench --devices cuda --gpu-shapes \
  --workloads gpt --precision bf16 --timed "$BENCH_TIMED" --csv "$LOGS/bench_gpt_composed.csv"
bench_stage bench_vision_kiln 90 "$KILN" bench --devices cuda --gpu-shapes --workloads mlp,lenet,convnet \
  --precision fp32,tf32,bf16 --timed "$BENCH_TIMED" --csv "$LOGS/bench_vision_kiln.csv" &&
  [ $TORCH_OK -eq 1 ] && bench_stage bench_vision_torch 90 python3 bench/torch_bench.py --device cuda --gpu-shapes \
    --workloads mlp,lenet,convnet --precision fp32,tf32,bf16 --timed "$BENCH_TIMED" --csv "$LOGS/bench_vision_torch.csv"
compare bench_vision
bench_stage bench_cpu_vs_gpu 60 "$KILN" bench --devices cpu,cuda --cpu-shapes --workloads mlp,lenet,convnet,gpt \
  --timed "$BENCH_TIMED" --csv "$LOGS/bench_cpu_vs_gpu.csv"
bench_stage bench_ladder 60 "$KILN" bench --ladder  # the CPU and GPU rungs of docs/course/06-kernel-ladder.md
for t in $LATER_TESTS; do run_test "$t"; done
for t in $CPU_TESTS; do run_test "$t"; RUN_AS=${t}_avx2 run_test "$t" env KILN_CPU_SGEMM=avx2; done
# The AMX kernel's first run on real tiles, where the host's CPU has AMX-BF16
if grep -qw amx_bf16 /proc/cpuinfo; then
  for t in test_sgemm_bf16 test_linalg test_nn_functional; do RUN_AS=${t}_amx run_test "$t" env KILN_CPU_BF16_GEMM=amx; done
else
  row "AMX kernel" "not run: this host's CPU has no AMX-BF16"
fi
printf '%s\n' "${FAILED[@]}" > "$BUILD_DIR/failed_tests.txt"
cp "$BUILD_DIR/failed_tests.txt" "$LOGS/" 2>/dev/null
[ ${#FAILED[@]} -eq 0 ]
