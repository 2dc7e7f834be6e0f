#!/usr/bin/env bash
# The README's test command: installs missing Debian packages, configures, builds and
# runs the whole test suite with CTest. Usage: scripts/test.sh [extra cmake args...]
# Env: BUILD_DIR (default build), KILN_CUDA (AUTO), KILN_CUDA_ARCHS (80: one arch keeps
# the CUDA build short; the library's own default is "80;90"), JOBS (nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA="${KILN_CUDA:-AUTO}" \
  -DCMAKE_CUDA_ARCHITECTURES="${KILN_CUDA_ARCHS:-80}" "$@"
cmake --build "$BUILD_DIR" -j "$JOBS"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"
