#!/usr/bin/env bash
# Runs the whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer (the clang
# build of scripts/asan_build.sh, which scripts/fuzz.sh reuses); any sanitizer report fails
# the run. CI's second stage. Usage: scripts/sanitize.sh [ctest -R regex]
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${BUILD_DIR:-build-asan}
scripts/asan_build.sh
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# the kill test spawns the (slow) ASan binary: 10 kills here, CI's first stage does 50
export KILN_KILLS=${KILN_KILLS:-10}
# install_consumer configures a project against the installed package: not a sanitizer matter
# not run here: the install test (a second build), the exercises' starters, deliberately
# wrong code whose tests must fail (the first stage checks that they do), and the bf16
# model trainings of test_amp_models (90 s here, over kernels the other tests run), and the
# tests labelled `timing` (course chapters that time the kernels the unit tests run)
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${JOBS:-$(nproc)}" \
  -E 'install_consumer|_starter$|^test_amp_models$' -LE '^timing$' ${1:+-R "$1"}
