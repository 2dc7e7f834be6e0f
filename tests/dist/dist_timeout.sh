#!/usr/bin/env bash
# CTest dist_timeout_np2: rank 1 never enters the barrier rank 0 waits in; with
# KILN_DIST_TIMEOUT=2 the job must end non-zero, with the timeout's message, well before
# the 120 s rank 1 sleeps. Usage: dist_timeout.sh MPIEXEC PROGRAM
set -uo pipefail
MPIEXEC=$1 PROG=$2
log=$(mktemp)
start=$(date +%s)
KILN_DIST_TIMEOUT=2 timeout 90 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 "$PROG" >"$log" 2>&1
rc=$?
secs=$(($(date +%s) - start))
cat "$log"
grep -q "dist::barrier waited more than 2 s" "$log" || { echo "FAIL: no timeout message"; exit 1; }
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "FAIL: exit status $rc (124: the job hung)"; exit 1; }
[ $secs -lt 60 ] || { echo "FAIL: the job took ${secs}s to end"; exit 1; }
echo "a hung rank ended the job in ${secs}s (exit $rc)"
