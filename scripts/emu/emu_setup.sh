#!/usr/bin/env bash
# Sets up the emulated AVX-512 CPU for scripts/emu/emu_check.sh (idempotent): a virtual
# environment .deps/emu-venv with bochscpu-python 0.4.0 from PyPI (Bochs's CPU as a
# library), its two byte patches (patch_bochscpu.py: Sapphire Rapids model, a
# VCVTNE2PS2BF16 fix) and a shim for its glibc 2.38 symbols on Debian 12's glibc 2.36.
# Prints the environment's absolute path.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=$(realpath -m "${EMU_VENV:-.deps/emu-venv}")
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV" 2>/dev/null || { scripts/install_deps.sh python3-venv >&2; python3 -m venv "$VENV"; }
fi
"$VENV/bin/python" -c "import importlib.metadata as m; assert m.version('bochscpu-python') == '0.4.0'" 2>/dev/null ||
  "$VENV/bin/pip" install -q bochscpu-python==0.4.0 >&2
so=$(ls "$VENV"/lib/python3*/site-packages/bochscpu/_bochscpu*.so)
"$VENV/bin/python" scripts/emu/patch_bochscpu.py "$so" >&2
shim="$VENV/libglibc238_shim.so"
[ "$shim" -nt scripts/emu/glibc238_shim.c ] || cc -shared -fPIC -O2 -o "$shim" scripts/emu/glibc238_shim.c
LD_PRELOAD="$shim" "$VENV/bin/python" -c "import bochscpu" 2>/dev/null ||
  { echo "[emu] bochscpu does not load in $VENV" >&2; exit 1; }
echo "$VENV"
