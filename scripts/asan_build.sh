#!/usr/bin/env bash
# The clang build shared by scripts/sanitize.sh and scripts/fuzz.sh: CPU only, -O1, ASan +
# UBSan, with the libFuzzer targets (KILN_FUZZ=ON), so one compile of kiln serves both.
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
cmake -S . -B "$BUILD_DIR" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKILN_CUDA=OFF -DKILN_MPI=OFF -DKILN_FUZZ=ON -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" >/dev/null
[ $# -eq 0 ] || set -- --target "$@"
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" "$@"
