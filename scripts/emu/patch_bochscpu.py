#!/usr/bin/env python3
"""Two byte patches to bochscpu-python 0.4.0's Linux wheel (its _bochscpu*.so), so that it
emulates the CPU kiln's AVX-512 code is written for. Applied once by emu_setup.sh; each
patch checks the bytes it replaces, and the file's SHA-256 before and after.

1. The CPU model. The wheel's parameter table defaults "cpu.model" to index 27 of 28 names,
   Bochs's Cannon Lake (AVX-512F/BW/DQ/VL, no AVX512_BF16). Index 30 is Bochs's Sapphire
   Rapids (AVX512_BF16, AVX512_FP16); the table is made 31 long so that index passes its
   bounds check (the names past 28 are never read). Bochs's AMX is not in this build: its
   CPUID shows no AMX, so the AMX kernel cannot run here.
2. A Bochs bug in VCVTNE2PS2BF16 (fixed in later Bochs): the upper half of the result
   was converted from src1's elements [half, 2*half) (past its end: src2's bytes) instead of
   [0, half). The second loop's base pointer becomes src1 - half elements.
"""
import hashlib
import os
import sys

ORIGINAL = "a872ef067d57b4d9de17370e1e26a41e2790960518729363627adb50fbd035fe"
PATCHES = [
    # (file offset, old bytes, new bytes, what)
    (0x44A6FC, "41b81c000000" "41b91b000000", "41b81f000000" "41b91e000000",
     "ParamEnum(cpu.model): 31 names, default 30 (sapphire_rapids)"),
    (0x35DB80, "4c8d7c2410" "488d9c2490000000", "4d89e7" "49f7df" "4e8d7cbc10" "6690",
     "VCVTNE2PS2BF16: lea 0x10(%rsp,-half*4),%r15 (src1's first element at index half)"),
]


def main(path):
    data = bytearray(open(path, "rb").read())
    digest = hashlib.sha256(data).hexdigest()
    if all(data[off:off + len(bytes.fromhex(new))] == bytes.fromhex(new) for off, _, new, _ in PATCHES):
        print(f"patch_bochscpu: {path} is already patched")
        return 0
    if digest != ORIGINAL:
        print(f"patch_bochscpu: {path} has SHA-256 {digest}, not bochscpu-python 0.4.0's "
              f"({ORIGINAL}); not patching", file=sys.stderr)
        return 1
    for off, old, new, what in PATCHES:
        old, new = bytes.fromhex(old), bytes.fromhex(new)
        assert len(old) == len(new) and data[off:off + len(old)] == old, what
        data[off:off + len(new)] = new
        print(f"patch_bochscpu: {what}")
    tmp = path + ".tmp"
    open(tmp, "wb").write(data)
    os.replace(tmp, path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
