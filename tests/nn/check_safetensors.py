#!/usr/bin/env python3
"""Opens a safetensors file written by kiln and prints what Python sees in it.

Usage: check_safetensors.py PATH

Uses the `safetensors` package (safe_open, numpy framework) when it is importable, else a
stdlib-only parser of the format; both paths are checked against each other when the
package is present. Output, one item per line (read by tests/nn/test_serialize.cpp):
    reader safetensors 0.4.5        (or: reader stdlib)
    metadata KEY=VALUE
    tensor name=NAME dtype=F32 shape=2,3 values=V1,V2,...   (first 8 values, row-major)
Exits 1 with a message on stderr when the file is malformed.
"""
import json
import math
import struct
import sys

# safetensors dtype -> (struct format, bytes per element); BF16 is decoded by hand
FORMATS = {"F64": ("d", 8), "F32": ("f", 4), "F16": ("e", 2), "BF16": (None, 2), "I64": ("q", 8),
           "I32": ("i", 4), "I16": ("h", 2), "I8": ("b", 1), "U8": ("B", 1), "BOOL": ("?", 1)}
SHOWN = 8


def decode(dtype, raw, count):
    fmt, size = FORMATS[dtype]
    if dtype == "BF16":
        halves = struct.unpack("<%dH" % count, raw[:2 * count])
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]
    return list(struct.unpack("<%d%s" % (count, fmt), raw[:size * count]))


def read_stdlib(path):
    """(metadata, [(name, dtype, shape, first values)]) in file order, validating the layout."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("file too short")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError("header length %d larger than the file" % n)
    header = json.loads(data[8:8 + n].decode("utf-8"))
    buf = data[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    tensors, pos = [], 0
    for name, info in sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"])):
        begin, end = info["data_offsets"]
        dtype, shape = info["dtype"], info["shape"]
        numel = math.prod(shape)
        if begin != pos or end - begin != numel * FORMATS[dtype][1] or end > len(buf):
            raise ValueError("bad data_offsets for %s" % name)
        pos = end
        tensors.append((name, dtype, list(shape), decode(dtype, buf[begin:end], min(numel, SHOWN))))
    if pos != len(buf):
        raise ValueError("tensors do not cover the buffer")
    return meta, tensors


def read_library(path, reference):
    """The same, read through the safetensors package (numpy has no bfloat16: those come
    from the stdlib reader, their dtype and shape from the package)."""
    from safetensors import safe_open
    meta, tensors = {}, []
    ref = {t[0]: t for t in reference}
    with safe_open(path, framework="np") as f:
        meta = f.metadata() or {}
        for name in f.keys():
            sl = f.get_slice(name)
            dtype, shape = sl.get_dtype(), list(sl.get_shape())
            if dtype == "BF16":
                values = ref[name][3]
            else:
                arr = f.get_tensor(name)
                assert list(arr.shape) == shape, name
                values = [v.item() for v in arr.reshape(-1)[:SHOWN]]
            tensors.append((name, dtype, shape, values))
    order = {t[0]: i for i, t in enumerate(reference)}
    tensors.sort(key=lambda t: order.get(t[0], -1))
    return meta, tensors


def fmt_value(v):
    if isinstance(v, bool):
        return "1" if v else "0"
    return repr(float(v)) if isinstance(v, float) else str(int(v))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check_safetensors.py PATH")
    path = sys.argv[1]
    try:
        meta, tensors = read_stdlib(path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, struct.error) as e:
        sys.exit("check_safetensors.py: %s: %s" % (path, e))
    try:
        import numpy  # noqa: F401  (the package's numpy framework needs it)
        import safetensors
    except ImportError:
        safetensors = None
    reader = "stdlib"
    if safetensors is not None:
        reader = "safetensors " + getattr(safetensors, "__version__", "?")
        lib_meta, lib_tensors = read_library(path, tensors)
        same = lambda a, b: len(a) == len(b) and all(x == y or (x != x and y != y) for x, y in zip(a, b))
        if lib_meta != meta or [t[:3] for t in lib_tensors] != [t[:3] for t in tensors] or not all(
                same(a[3], b[3]) for a, b in zip(lib_tensors, tensors)):
            sys.exit("check_safetensors.py: the safetensors package and the stdlib reader disagree on " + path)
        meta, tensors = lib_meta, lib_tensors
    print("reader", reader)
    for k, v in sorted(meta.items()):
        print("metadata %s=%s" % (k, v))
    for name, dtype, shape, values in tensors:
        print("tensor name=%s dtype=%s shape=%s values=%s" % (
            name, dtype, ",".join(map(str, shape)), ",".join(fmt_value(v) for v in values)))


if __name__ == "__main__":
    main()
