#!/usr/bin/env bash
# The `kiln` command under mpirun (CTest: kiln_train_np2): two ranks of one thread train
# LeNet data-parallel, a checkpoint written by 2 ranks resumes on 2 and on 1 rank, and
# one rank failing (MPMD: rank 1 gets a missing --data) ends the whole job with the error
# text and a non-zero exit within seconds.
# Usage: kiln_np2.sh KILN_BINARY TINY_DATA_DIR SCRATCH_DIR
set -uo pipefail
KILN=$1 DATA=$2 TMP=$3
MPI=(mpirun --allow-run-as-root --oversubscribe)
export OMP_NUM_THREADS=1
rm -rf "$TMP" && mkdir -p "$TMP"
common=(mnist --model lenet --data "$DATA" --batch-size 16 --threads 1 --no-progress --metrics "$TMP/m.csv")
fail() { echo "FAIL: $*"; exit 1; }

"${MPI[@]}" -np 2 "$KILN" train "${common[@]}" --epochs 1 --save "$TMP/ck.safetensors" > "$TMP/a.log" 2>&1 ||
  { cat "$TMP/a.log"; fail "2-rank training"; }
grep -q "data-parallel: 2 ranks" "$TMP/a.log" || fail "no data-parallel line"
grep -q "final test accuracy" "$TMP/a.log" || fail "no final accuracy"
[ "$(grep -c "final test accuracy" "$TMP/a.log")" -eq 1 ] || fail "more than one rank logged"

"${MPI[@]}" -np 2 "$KILN" train mnist --resume "$TMP/ck.safetensors" --epochs 2 --threads 1 --no-progress > "$TMP/b.log" 2>&1 ||
  { cat "$TMP/b.log"; fail "resume on 2 ranks"; }
grep -q "resuming from .*epoch 1" "$TMP/b.log" || fail "resume on 2 ranks did not start at epoch 1"
"$KILN" train mnist --resume "$TMP/ck.safetensors" --epochs 3 --threads 1 --no-progress > "$TMP/c.log" 2>&1 ||
  { cat "$TMP/c.log"; fail "resume on 1 rank"; }
grep -q "resuming from .*epoch 2" "$TMP/c.log" || fail "resume on 1 rank did not start at epoch 2"
grep -q "final test accuracy" "$TMP/c.log" || fail "resume on 1 rank did not finish"

start=$(date +%s)
timeout 60 "${MPI[@]}" -np 1 "$KILN" train "${common[@]}" --epochs 1 : \
  -np 1 "$KILN" train mnist --model lenet --data "$TMP/missing" --batch-size 16 --threads 1 --no-progress \
  > "$TMP/d.log" 2>&1
rc=$?
secs=$(( $(date +%s) - start ))
[ $rc -ne 0 ] || fail "a failing rank did not fail the job"
[ $rc -ne 124 ] || fail "the job hung after one rank failed"
grep -q "missing" "$TMP/d.log" || { cat "$TMP/d.log"; fail "the error text did not reach the output"; }
echo "one failing rank ended the job in ${secs}s with exit $rc"
echo "kiln under mpirun: all checks passed"
