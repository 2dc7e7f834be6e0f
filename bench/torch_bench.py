#!/usr/bin/env python3
"""The reference workloads of shared/WORKLOADS.md in PyTorch (Python), for the GPU and CPU comparisons.

scripts/gpu_check.sh runs it on a GPU machine where `import torch` works (nothing can be
installed there, so the C++ libtorch bench cannot be built), and scripts/bench.sh with
REFERENCES=pytorch on the CPU, in a virtual environment with PyTorch 2.x from PyPI (CPU
autocast for bf16 and fp16); each merges its CSV with kiln's through `kiln bench --compare`. The models, batches, warm-up/timed counts and the CSV
columns are those of bench/workload_spec.h, bench/report.h and
bench/libtorch/bench_libtorch.cpp; the FLOP columns are left empty (the compare table uses
step times and memory peaks only).

  python3 bench/torch_bench.py --device cuda --gpu-shapes --precision fp32,bf16 --csv out.csv
"""
import argparse
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HEADER = ("framework,workload,device,precision,shapes,batch,items_per_step,warmup,timed,threads,status,median_ms,"
          "min_ms,max_ms,items_per_s,flops_per_step,gflops,peak_gflops,mfu,alloc_peak_bytes,rss_peak_bytes")


def config(name, gpu_shapes):
    """WORKLOADS.md's shapes (bench/workload_spec.h default_config)."""
    c = dict(name=name, shapes="gpt2-small" if gpu_shapes and name == "gpt" else "reference")
    if name == "mlp":
        c.update(batch=4096 if gpu_shapes else 128, warmup=5, timed=50)
    elif name == "lenet":
        c.update(batch=1024 if gpu_shapes else 64, warmup=5, timed=50)
    elif name == "convnet":
        c.update(batch=1024 if gpu_shapes else 64, warmup=3, timed=20)
    elif name == "gpt":
        c.update(warmup=3, timed=20)
        if gpu_shapes:
            c.update(batch=64, vocab=50304, context=256, layers=12, heads=12, width=768)
        else:
            c.update(batch=16, vocab=96, context=128, layers=4, heads=4, width=128)
    elif name == "sgemm":
        c.update(batch=None, warmup=2, timed=10)
    else:
        sys.exit(f"torch_bench: unknown workload '{name}'; valid: mlp, lenet, convnet, gpt, sgemm")
    return c


def conv_bn_relu(cin, cout):
    return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(c["vocab"], c["width"]), nn.Embedding(c["context"], c["width"])
        self.blocks = nn.Sequential(*[Block(c["width"], c["heads"]) for _ in range(c["layers"])])
        self.ln_f = nn.LayerNorm(c["width"])
        self.head = nn.Linear(c["width"], c["vocab"], bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln_f(self.blocks(self.wte(idx) + self.wpe(pos))))


def model_step(c, dev):
    """(model, optimizer, inputs, targets, loss function) of one workload."""
    B = c["batch"]
    if c["name"] == "mlp":
        m = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
        x, y = torch.randn(B, 784), torch.randint(0, 10, (B,))
        opt = lambda p: torch.optim.Adam(p, lr=1e-3)
    elif c["name"] == "lenet":
        m = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84),
                          nn.ReLU(), nn.Linear(84, 10))
        x, y = torch.randn(B, 1, 28, 28), torch.randint(0, 10, (B,))
        opt = lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9)
    elif c["name"] == "convnet":
        m = nn.Sequential(*conv_bn_relu(1, 32), *conv_bn_relu(32, 32), nn.MaxPool2d(2), *conv_bn_relu(32, 64),
                          *conv_bn_relu(64, 64), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(),
                          nn.Linear(128, 10))
        x, y = torch.randn(B, 1, 28, 28), torch.randint(0, 10, (B,))
        opt = lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9)
    else:  # gpt
        m = GPT(c)
        x = torch.randint(0, c["vocab"], (B, c["context"]))
        y = torch.randint(0, c["vocab"], (B, c["context"]))
        opt = lambda p: torch.optim.AdamW(p, lr=3e-4, weight_decay=0.1)
    m = m.to(dev)
    loss_fn = lambda out, t: F.cross_entropy(out.reshape(-1, out.shape[-1]), t.reshape(-1))
    return m, opt(m.parameters()), x.to(dev), y.to(dev), loss_fn


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_steps(step, c, dev):
    for _ in range(c["warmup"]):
        step()
    sync(dev)
    times = []
    for _ in range(c["timed"]):
        t0 = time.perf_counter()
        step()
        sync(dev)
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def run(c, dev, precision):
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    amp = precision in ("bf16", "fp16")
    low = torch.float16 if precision == "fp16" else torch.bfloat16
    if c["name"] == "sgemm":  # under autocast in bf16 / fp16, as kiln bench's sgemm
        n = c["batch"]
        a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)

        def step():
            with torch.autocast(dev.type, dtype=low, enabled=amp):
                return torch.mm(a, b)
    else:
        m, opt, x, y, loss_fn = model_step(c, dev)
        # fp16: PyTorch's recipe, a GradScaler (kiln bench's fp16 step does the same)
        scaler = torch.amp.GradScaler(dev.type, enabled=precision == "fp16")

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast(dev.type, dtype=low, enabled=amp):
                loss = loss_fn(m(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    times = time_steps(step, c, dev)
    peak = torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else 0
    return times, peak


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default="mlp,lenet,convnet,gpt,sgemm")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precision", default="fp32", help="comma-separated: fp32, tf32, bf16, fp16 (autocast; fp16 "
                    "with a GradScaler)")
    ap.add_argument("--gpu-shapes", action="store_true", help="WORKLOADS.md's GPU batches and GPT-2 small")
    ap.add_argument("--timed", type=int, default=0, help="timed steps (default: per workload)")
    ap.add_argument("--smoke", action="store_true", help="1 warm-up + 1 timed step at a small batch (kiln bench --smoke)")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads")
    ap.add_argument("--csv", required=True)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    rows = [HEADER]
    for name in a.workloads.split(","):
        base = config(name, a.gpu_shapes)
        sizes = ([1024, 4096, 8192] if a.gpu_shapes else [256, 1024, 2048]) if name == "sgemm" else [base["batch"]]
        if a.smoke:  # bench/workload_spec.cpp make_smoke
            sizes = [{"mlp": 16, "lenet": 8, "convnet": 8, "gpt": 2, "sgemm": 128}[name]]
        for n in sizes:
            c = dict(base, batch=n)
            if a.smoke:
                c.update(warmup=1, timed=1)
            if a.timed:
                c["timed"] = a.timed
            for prec in a.precision.split(","):
                items = 0 if name == "sgemm" else c["batch"] * c.get("context", 1)
                status, med, lo, hi, ips, peak = "ok", "", "", "", "", 0
                try:
                    if name == "sgemm" and prec == "fp16" and dev.type == "cpu":
                        # a float16 GEMM on a CPU without AVX512_FP16 / AMX-FP16 takes PyTorch's slow
                        # path (the mlp workload in fp16 shows it): minutes at 2048^3
                        raise RuntimeError("skipped: PyTorch's float16 GEMM on this CPU is a slow fallback")
                    times, peak = run(c, dev, prec)
                    med, lo, hi = statistics.median(times), min(times), max(times)
                    ips = items / (med / 1e3) if items else ""
                except Exception as e:  # one failed workload does not stop the others
                    msg = str(e) if str(e).startswith("skipped:") else "error: " + str(e)
                    status = msg.replace(",", ";").replace("\n", " ")[:200]
                rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
                fmt = lambda v: "" if v == "" else f"{v:.6g}"
                rows.append(",".join(str(v) for v in [
                    "pytorch", name, a.device.split(":")[0], prec, c["shapes"], c["batch"], items, c["warmup"],
                    c["timed"], a.threads, status, fmt(med), fmt(lo), fmt(hi), fmt(ips), "", "", "", "", peak, rss]))
                print(f"pytorch {name:8s} {prec:5s} batch {c['batch']:5d}: "
                      + (f"{med:8.2f} ms median" if status == "ok" else status), flush=True)
    tmp = a.csv + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(rows) + "\n")
    os.replace(tmp, a.csv)


if __name__ == "__main__":
    main()
