#!/usr/bin/env bash
# The clang build shared by scripts/sanitize.sh and scripts/fuzz.sh: CPU only, ASan + UBSan,
# with the libFuzzer targets (KILN_FUZZ=ON), so one compile of kiln serves both.
# Usage: scripts/asan_build.sh [cmake --build target ...]  (default: everything)
# Env: BUILD_DIR (default build-asan), JOBS (nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh clang libclang-rt-14-dev
BUILD_DIR=${BUILD_DIR:-build-asan}
if [ -f "$BUILD_DIR/CMakeCache.txt" ] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang' "$BUILD_DIR/CMakeCache.txt"; then
  echo "[kiln] $BUILD_DIR was configured with another compiler (an older GCC sanitizer build): starting it over"
  rm -rf "$BUILD_DIR"
fi
# MPI off: LeakSanitizer reports Open MPI's own allocations (the MPI tests run in test.sh).
# The libraries at -O1, where the tests and fuzzers spend their time; the rest (tests, examples,
# the CLI's front end, harnesses) at -O0, 2-3x faster to compile under the sanitizers. Line
# tables are all the reports' stack traces need (full -g costs another 10% of compile time).
cmake -S . -B "$BUILD_DIR" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKILN_CUDA=OFF -DKILN_MPI=OFF -DKILN_FUZZ=ON -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -gline-tables-only" \
  -DKILN_LIBRARY_FLAGS=-O1 >/dev/null
[ $# -eq 0 ] || set -- --target "$@"
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" "$@"
