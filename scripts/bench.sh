#!/usr/bin/env bash
# kiln against libtorch (and/or PyTorch 2.x) on the reference workloads (shared/WORKLOADS.md),
# in one run: installs libtorch-dev and OpenBLAS, builds `kiln` and bench/libtorch, runs
# them INTERLEAVED (kiln, libtorch, kiln, libtorch, ...: ROUNDS rounds per workload, same
# threads), then merges the runs with `kiln bench --compare` into a table of medians,
# ratios and peak memory, with JSON / CSV / PNG under $OUT, one per reference framework.
#
# Usage: scripts/bench.sh [--smoke] [workload ...]      (default: all five workloads)
# Env:   BUILD_DIR (build-bench), THREADS (2), ROUNDS (3), DEVICES (cpu),
#        PRECISION (fp32; comma-separated fp32, bf16, fp16, tf32, given to every bench),
#        REFERENCES ("libtorch"; "pytorch" or "libtorch pytorch": PyTorch TORCH_VERSION
#        (2.15.0) from PyPI, installed into the virtual environment TORCH_VENV
#        (.deps/torch-venv; about 5 GB with its CUDA wheels, which a CPU run never loads)
#        and timed by bench/torch_bench.py, CPU autocast for bf16 and fp16),
#        OUT (out/bench/<UTC date-time>), JOBS (nproc), KILN_CUDA (OFF for DEVICES=cpu:
#        Debian's libtorch is CPU-only, so a CPU comparison builds without CUDA; AUTO when
#        DEVICES names cuda),
#        SKIP_DEPS=1 (do not install packages), SKIP_BUILD=1 (use the binaries already in
#        BUILD_DIR), EXTRA_ARGS (passed to kiln and libtorch, e.g. "--batch 32").
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build-bench}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
DEVICES=${DEVICES:-cpu}
JOBS=${JOBS:-$(nproc)}
OUT=${OUT:-out/bench/$(date -u +%Y-%m-%dT%H%M%SZ)}
SMOKE=()
WORKLOADS=()
for a in "$@"; do
  case "$a" in
    --smoke) SMOKE=(--smoke) ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    -*) echo "bench.sh: unknown option $a (valid: --smoke)" >&2; exit 2 ;;
    *) WORKLOADS+=("$a") ;;
  esac
done
[ ${#WORKLOADS[@]} -eq 0 ] && WORKLOADS=(mlp lenet convnet gpt sgemm)

# ---- dependencies: libtorch, and OpenBLAS behind libblas.so.3 ----
# Debian's libtorch calls sgemm through libblas.so.3, which is the slow reference BLAS
# unless an optimised one is installed: libopenblas0-openmp registers itself with
# update-alternatives at a higher priority (95 > 10), so libtorch then runs OpenBLAS.
PRECISION=${PRECISION:-fp32}
REFERENCES=${REFERENCES:-libtorch}
TORCH_VENV=${TORCH_VENV:-.deps/torch-venv}
TORCH_VERSION=${TORCH_VERSION:-2.15.0}
for ref in $REFERENCES; do
  case "$ref" in libtorch|pytorch) ;; *) echo "bench.sh: unknown reference $ref (valid: libtorch, pytorch)" >&2; exit 2 ;; esac
done
if [ "${SKIP_DEPS:-0}" != 1 ]; then
  scripts/install_deps.sh libtorch-dev libopenblas0-openmp
  case " $REFERENCES " in *" pytorch "*)
    if ! "$TORCH_VENV/bin/python" -c "import torch; assert torch.__version__.startswith('$TORCH_VERSION')" 2>/dev/null; then
      echo "[bench] installing PyTorch $TORCH_VERSION from PyPI into $TORCH_VENV"
      scripts/install_deps.sh python3-venv
      python3 -m venv "$TORCH_VENV"
      "$TORCH_VENV/bin/pip" install --quiet "torch==$TORCH_VERSION" numpy
    fi ;;
  esac
fi
echo "[bench] libblas.so.3 -> $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo 'not found')"

# ---- build ----
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  case ",${DEVICES:-cpu}," in *,cuda,*) CUDA_DEFAULT=AUTO ;; *) CUDA_DEFAULT=OFF ;; esac
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA="${KILN_CUDA:-$CUDA_DEFAULT}" \
    -DCMAKE_CUDA_ARCHITECTURES="${KILN_CUDA_ARCHS:-80}" -DKILN_BENCH_LIBTORCH=ON >/dev/null
  cmake --build "$BUILD_DIR" -j "$JOBS" --target kiln_cli bench_libtorch
fi
KILN="$BUILD_DIR/kiln"
TORCH="$BUILD_DIR/bench/bench_libtorch"

# ---- interleaved runs ----
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
# OpenBLAS picks its kernels from the CPU model; a model newer than the library (Debian 12's
# 0.3.21 does not know e.g. family 6 model 207) falls back to the generic "Prescott" SSE3
# kernels, 4-5x slower at sgemm. Name the kernel set from the CPU's flags instead, unless
# the caller chose one. bench_libtorch prints OPENBLAS_CORETYPE in its header line.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell
  fi
fi
echo "[bench] OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(auto)}"
mkdir -p "$OUT/runs"
common=(--threads "$THREADS" --devices "$DEVICES" --precision "$PRECISION" "${SMOKE[@]}")
# shellcheck disable=SC2206
extra=(${EXTRA_ARGS:-})
csvs=()
for w in "${WORKLOADS[@]}"; do
  for r in $(seq 1 "$ROUNDS"); do
    for fw in kiln $REFERENCES; do
      base="$OUT/runs/${w}_${fw}_r${r}"
      case "$fw" in
        kiln) cmd=("$KILN" bench --workloads "$w" "${common[@]}" "${extra[@]}" --json "$base.json") ;;
        libtorch) cmd=("$TORCH" --workloads "$w" "${common[@]}" "${extra[@]}" --json "$base.json") ;;
        pytorch) cmd=("$TORCH_VENV/bin/python" bench/torch_bench.py --workloads "$w" --device "$DEVICES"
                      --threads "$THREADS" --precision "$PRECISION" "${SMOKE[@]}") ;;
      esac
      echo "[bench] $w round $r/$ROUNDS: $fw"
      # Each run is its own process: its RSS high-water mark covers this workload only.
      # A failed run is reported and left out of the comparison; the others go on.
      if "${cmd[@]}" --csv "$base.csv" >"$base.txt" 2>"$base.log"; then
        csvs+=("$base.csv")
      else
        echo "[bench] warning: $fw $w round $r failed (see $base.log)" >&2
        [ -f "$base.csv" ] && csvs+=("$base.csv")
      fi
    done
  done
done
[ ${#csvs[@]} -gt 0 ] || { echo "[bench] error: no run produced results" >&2; exit 1; }

# ---- summary: one table per reference framework ----
kiln_csvs=() ; for c in "${csvs[@]}"; do case "$c" in *_kiln_r*) kiln_csvs+=("$c") ;; esac; done
first=1
for ref in $REFERENCES; do
  ref_csvs=() ; for c in "${csvs[@]}"; do case "$c" in *_${ref}_r*) ref_csvs+=("$c") ;; esac; done
  [ ${#ref_csvs[@]} -gt 0 ] || { echo "[bench] warning: no $ref run produced results" >&2; continue; }
  echo
  echo "kiln vs $ref, $THREADS threads, $ROUNDS interleaved rounds, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  if [ "$ref" = libtorch ]; then
    torch_header=$(head -n 1 "$OUT/runs/${WORKLOADS[0]}_libtorch_r1.txt" 2>/dev/null || echo '?')
    echo "$torch_header"
    case "$torch_header" in
      *openblas*|*mkl*|*blis*) ;;
      *) echo "[bench] warning: libtorch did not load an optimised BLAS (see the line above): its GEMMs" \
              "run the slow reference BLAS and the ratios flatter kiln (install libopenblas0-openmp)" >&2 ;;
    esac
  else
    "$TORCH_VENV/bin/python" -c "import torch; print('PyTorch', torch.__version__, '(' + torch.backends.cpu.get_cpu_capability() + ')')"
  fi
  # the first reference keeps the summary.* names; the others get summary_<ref>.*
  name=summary; [ $first = 1 ] || name=summary_$ref
  list=$(IFS=,; echo "${kiln_csvs[*]},${ref_csvs[*]}")
  [ $first = 1 ] || mkdir -p "$OUT/$name-plots"
  "$KILN" bench --compare "$list" --json "$OUT/$name.json" --csv "$OUT/$name.csv" \
    --plot-dir "$([ $first = 1 ] && echo "$OUT" || echo "$OUT/$name-plots")" | tee "$OUT/$name.txt"
  first=0
done
echo "[bench] per-run tables, JSON and CSV: $OUT/runs/   summaries: $OUT/summary*.{txt,json,csv}, $OUT/step_time.png"
