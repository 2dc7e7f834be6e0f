#!/usr/bin/env bash
# The `kiln` command under mpirun (CTest: kiln_train_np2): two ranks of one thread train
# LeNet data-parallel, a checkpoint written by 2 ranks resumes on 2 and on 1 rank, ZeRO-1
# (--zero) trains and resumes exactly as plain DDP, SIGUSR1 to mpirun stops every rank with a
# checkpoint, and
# one rank failing (MPMD: rank 1 gets a missing --data) ends the whole job with the error
# text and a non-zero exit within seconds.
# Usage: kiln_np2.sh KILN_BINARY TINY_DATA_DIR SCRATCH_DIR
set -uo pipefail
KILN=$1 DATA=$2 TMP=$3
MPI=(mpirun --allow-run-as-root --oversubscribe)
export OMP_NUM_THREADS=1
rm -rf "$TMP" && mkdir -p "$TMP"
common=(mnist --model lenet --data "$DATA" --batch-size 16 --threads 1 --no-progress)
fail() { echo "FAIL: $*"; exit 1; }

"${MPI[@]}" -np 2 "$KILN" train "${common[@]}" --epochs 1 --metrics "$TMP/m.csv" --save "$TMP/ck.safetensors" \
  > "$TMP/a.log" 2>&1 ||
  { cat "$TMP/a.log"; fail "2-rank training"; }
grep -q "data-parallel: 2 ranks" "$TMP/a.log" || fail "no data-parallel line"
grep -q "final test accuracy" "$TMP/a.log" || fail "no final accuracy"
[ "$(grep -c "final test accuracy" "$TMP/a.log")" -eq 1 ] || fail "more than one rank logged"

"${MPI[@]}" -np 2 "$KILN" train mnist --resume "$TMP/ck.safetensors" --save "$TMP/ck2.safetensors" --epochs 2 --threads 1 \
  --no-progress --metrics "$TMP/b.csv" > "$TMP/b.log" 2>&1 ||
  { cat "$TMP/b.log"; fail "resume on 2 ranks"; }
grep -q "resuming from .*epoch 1" "$TMP/b.log" || fail "resume on 2 ranks did not start at epoch 1"
"$KILN" train mnist --resume "$TMP/ck2.safetensors" --epochs 3 --threads 1 --no-progress > "$TMP/c.log" 2>&1 ||
  { cat "$TMP/c.log"; fail "resume on 1 rank"; }
grep -q "resuming from .*epoch 2" "$TMP/c.log" || fail "resume on 1 rank did not start at epoch 2"
grep -q "final test accuracy" "$TMP/c.log" || fail "resume on 1 rank did not finish"

# ZeRO-1: the same first epoch as plain DDP (the loss column of the CSV), and its checkpoint
# (the full optimizer state) resumes on 2 ranks with ZeRO-1 as DDP's does without, and on 1 rank
"${MPI[@]}" -np 2 "$KILN" train "${common[@]}" --epochs 1 --zero --metrics "$TMP/z.csv" --save "$TMP/z.safetensors" \
  > "$TMP/z.log" 2>&1 || { cat "$TMP/z.log"; fail "2-rank ZeRO-1 training"; }
grep -q "ZeRO-1" "$TMP/z.log" || fail "no ZeRO-1 in the data-parallel line"
loss() { awk -F, -v e="$2" '$2 == e { print $3 }' "$1"; }
[ "$(loss "$TMP/m.csv" 1)" = "$(loss "$TMP/z.csv" 1)" ] || fail "ZeRO-1 epoch 1 loss $(loss "$TMP/z.csv" 1) != DDP's $(loss "$TMP/m.csv" 1)"
"${MPI[@]}" -np 2 "$KILN" train mnist --resume "$TMP/z.safetensors" --save "$TMP/z2.safetensors" --zero --epochs 2 \
  --threads 1 --no-progress --metrics "$TMP/z2.csv" > "$TMP/z2.log" 2>&1 || { cat "$TMP/z2.log"; fail "ZeRO-1 resume on 2 ranks"; }
[ "$(loss "$TMP/b.csv" 2)" = "$(loss "$TMP/z2.csv" 2)" ] || fail "ZeRO-1 epoch 2 loss $(loss "$TMP/z2.csv" 2) != DDP's $(loss "$TMP/b.csv" 2)"
"$KILN" train mnist --resume "$TMP/z.safetensors" --save "$TMP/z3.safetensors" --epochs 2 --threads 1 --no-progress \
  --metrics "$TMP/z3.csv" > "$TMP/z3.log" 2>&1 || { cat "$TMP/z3.log"; fail "ZeRO-1 checkpoint resumed on 1 rank"; }

# SIGUSR1 to mpirun, which forwards it to every rank as it is (a SIGTERM to mpirun reaches the
# ranks with a SIGKILL one second later): the ranks stop after the same step, rank 0 saves, exit 138
"${MPI[@]}" -np 2 "$KILN" train "${common[@]}" --epochs 100000 --save "$TMP/u.safetensors" > "$TMP/u.log" 2>&1 &
mp=$!
# a watchdog that ends with the job (not `timeout`: it would take the signal itself)
( for _ in $(seq 1200); do kill -0 $mp 2>/dev/null || exit 0; sleep 0.1; done; kill -KILL $mp ) 2>/dev/null &
for _ in $(seq 600); do [ -f "$TMP/u.safetensors" ] && break; sleep 0.1; done
sleep 1
kill -USR1 $mp
wait $mp
rc=$?
[ $rc -eq 138 ] || { cat "$TMP/u.log"; fail "SIGUSR1 to mpirun: exit $rc, expected 138"; }
[ "$(grep -c "stopping after step [0-9]* (SIGUSR1): saved" "$TMP/u.log")" -eq 1 ] ||
  { cat "$TMP/u.log"; fail "SIGUSR1 to mpirun: no (or more than one) 'stopping after step' line"; }
ls "$TMP" | grep -q "u.safetensors.tmp" && fail "SIGUSR1 to mpirun: a temp file was left"

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
