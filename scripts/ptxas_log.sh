#!/bin/sh
# The CUDA compiler launcher of kiln's build (CMakeLists.txt): runs the nvcc command it is
# given (which has --ptxas-options=-v) and keeps ptxas's per-kernel resource report in
# <object>.ptxas.log, for tests/cuda/ptxas_resources.cpp (CTest ptxas_resources). Everything else
# nvcc prints (warnings, errors) still goes to the terminal.
out=""
prev=""
for a in "$@"; do
  [ "$prev" = "-o" ] && out="$a"
  prev="$a"
done
[ -n "$out" ] || exec "$@"
"$@" 2> "$out.ptxas.log"
rc=$?
grep -v -e '^ptxas info' -e '^    [0-9]* bytes stack frame' "$out.ptxas.log" >&2
exit $rc
