#!/usr/bin/env bash
# Runs kiln's AVX-512 code on an emulated Sapphire Rapids CPU, on any x86-64 machine.
#
# kiln's AVX-512 GEMM kernel, its AVX512_BF16 kernel and the 16-lane half-precision
# conversions are compiled only where the compiler targets AVX-512 (-march=native on such
# a CPU), so a machine without AVX-512 never runs them. This builds the library and the
# tests that reach that code with -march=sapphirerapids, statically, into build-emu/, and
# runs each test binary under scripts/emu/emu_run.py (Bochs's CPU, one instruction at a
# time: ~200x slower than native; the default list takes about 20 minutes, its build 5
# on 2 cores).
#
# Usage: scripts/emu/emu_check.sh [test[:ENV=VALUE] ...]   (default: the list below)
# Environment: JOBS (build), EMU_TIMEOUT (seconds per test, default 1800), OUT (logs,
# default build-emu/emu-logs), SKIP_BUILD=1.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD_DIR:-build-emu}
OUT=${OUT:-$BUILD/emu-logs}
JOBS=${JOBS:-$(nproc)}
TIMEOUT=${EMU_TIMEOUT:-1800}

# test binary[:one environment variable], cheapest first. KILN_CPU_BF16_GEMM=1: the
# AVX512_BF16 kernel also where it is not the default (Intel); test_conv's float32 cases
# run the AVX-512 float32 kernels in the same run. Emulated minutes: 0.1, 0.1, 0.1, 0.1,
# 0.5, 0.5, 3, 7, 9.
DEFAULT=(test_half test_autocast test_linalg test_linalg:KILN_CPU_BF16_GEMM=1
         test_nn_functional test_nn_functional:KILN_CPU_BF16_GEMM=1 test_sgemm
         test_conv:KILN_CPU_BF16_GEMM=1 test_sgemm_bf16)
TESTS=("$@")
[ ${#TESTS[@]} -gt 0 ] || TESTS=("${DEFAULT[@]}")

VENV=$(scripts/emu/emu_setup.sh) || exit 1
SHIM="$VENV/libglibc238_shim.so"

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  # Static (the emulator has no dynamic loader), so zlib, libgomp and spdlog (header-only)
  # are taken as archives. No compiler-made gathers: this Bochs mis-decodes an EVEX gather
  # whose index register is xmm16-31 (#UD); kiln's own code has no gathers. (CMakeLists.txt
  # adds -fno-tree-slp-vectorize itself: GCC 12 with AVX-512VL.)
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKILN_NATIVE=OFF -DKILN_CUDA=OFF -DKILN_MPI=OFF \
    -DBUILD_SHARED_LIBS=OFF -DCMAKE_EXE_LINKER_FLAGS=-static -DCMAKE_DISABLE_FIND_PACKAGE_spdlog=ON \
    -DZLIB_LIBRARY_RELEASE="$(gcc -print-file-name=libz.a)" \
    -DOpenMP_gomp_LIBRARY="$(gcc -print-file-name=libgomp.a)" \
    -DCMAKE_CXX_FLAGS="-march=sapphirerapids -mtune-ctrl=^use_gather_2parts,^use_gather_4parts,^use_gather" \
    >/dev/null || exit 1
  targets=$(printf '%s\n' "${TESTS[@]}" | cut -d: -f1 | sort -u)
  cmake --build "$BUILD" -j "$JOBS" --target $targets 2>&1 | grep -E "error|warning: [^U]" ; true
fi

mkdir -p "$OUT"
fail=0
for t in "${TESTS[@]}"; do
  bin=${t%%:*}
  envs=()
  [ "$bin" != "$t" ] && envs=(--env "${t#*:}")
  log="$OUT/$(echo "$t" | tr ':=' '__').log"
  start=$(date +%s)
  LD_PRELOAD="$SHIM" timeout "$TIMEOUT" "$VENV/bin/python" scripts/emu/emu_run.py "${envs[@]}" \
    "$BUILD/tests/$bin" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  summary=$(grep -E "^\[doctest\] (test cases|assertions)" "$log" | tr -s ' ' | tr '\n' ' ')
  if [ $rc -eq 0 ]; then
    echo "[emu] PASS $t (${secs} s) $summary"
  else
    echo "[emu] FAIL $t (exit $rc, ${secs} s) $summary: see $log"
    grep -E "emu_run:|ERROR|CHECK" "$log" | grep -v "^emu_run: .* exited" | head -5
    fail=1
  fi
done
exit $fail
