#!/usr/bin/env python3
"""Writes tests/models/golden/*.txt: PyTorch reference losses and gradients for kiln's
reference models (MLP, LeNet5, ConvNet, GPT, ResNet20), read by tests/models/test_models_golden.cpp
(ResNet20: tests/models/test_models.cpp).

Run with a Python that has torch (Debian: apt-get install python3-torch; /usr/bin/python3):
    /usr/bin/python3 scripts/make_golden.py [--out DIR] [CASE ...]
CASE is one of mlp, lenet, convnet, gpt, resnet20 (default: all); --out writes elsewhere
(e.g. to compare with the committed files without overwriting them).

Initial weights are not stored (LeNet/ConvNet would be too large): parameter number k
(PyTorch's order; names are kiln's dotted names, the C++ side matches them by name) gets
    p[i] = offset + scale * sin(0.7 * i + 1.3 * k + 0.5)     (computed in float64, cast to float32)
and the file lists (name, k, scale, offset, shape) so the C++ test fills kiln's model the same
way. Then 3 plain SGD steps (lr 0.1; ConvNet and ResNet20 0.02, since train-mode batch norm on a batch
of 2 diverges at 0.1) on a fixed batch with mean cross-entropy; the file holds the lr, the
input, targets, the 3 losses and the gradients of chosen parameters after the first backward.

File format (text, one record per line):
    param NAME K SCALE OFFSET NDIM D0 D1 ...
    tensor NAME NDIM D0 D1 ... V0 V1 ...
"""
import argparse
import math
import os

import torch
import torch.nn as tnn
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models", "golden")
torch.set_default_dtype(torch.float32)


def det_values(numel, k, scale, offset):
    return torch.tensor([offset + scale * math.sin(0.7 * i + 1.3 * k + 0.5) for i in range(numel)],
                        dtype=torch.float64).float()


def init_params(named):
    """named: list of (kiln_name, torch_param). Returns the 'param' records."""
    recs = []
    for k, (name, p) in enumerate(named):
        if p.dim() >= 2:
            scale, offset = 1.0 / math.sqrt(p[0].numel()), 0.0
        elif name.endswith("weight"):  # norm weights
            scale, offset = 0.1, 1.0
        else:  # biases
            scale, offset = 0.1, 0.0
        with torch.no_grad():
            p.copy_(det_values(p.numel(), k, scale, offset).reshape(p.shape))
        recs.append("param %s %d %.17g %.17g %d %s" % (name, k, scale, offset, p.dim(), " ".join(map(str, p.shape))))
    return recs


def trec(name, t):
    shape = list(t.shape)
    vals = " ".join("%.9g" % v for v in t.detach().double().reshape(-1).tolist())
    return "tensor %s %d %s %s" % (name, len(shape), " ".join(map(str, shape)), vals)


def run(fname, model, named, x, y, grad_names, seq=False, lr=0.1):
    recs = init_params(named)
    model.train()
    params = dict(named)
    opt = torch.optim.SGD([p for _, p in named], lr=lr)
    losses, grads = [], []
    for step in range(3):
        opt.zero_grad()
        logits = model(x)
        if seq:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        else:
            loss = F.cross_entropy(logits, y)
        loss.backward()
        if step == 0:
            grads = [trec("grad." + n, params[n].grad) for n in grad_names]
        losses.append(loss.item())
        opt.step()
    recs.append(trec("input", x.double() if x.dtype == torch.int64 else x))
    recs.append(trec("target", y.double()))
    recs.append(trec("lr", torch.tensor([lr], dtype=torch.float64)))
    recs.append(trec("losses", torch.tensor(losses, dtype=torch.float64)))
    recs += grads
    path = os.path.join(OUT, fname)
    with open(path, "w") as f:
        f.write("\n".join(recs) + "\n")
    print(path, os.path.getsize(path), "bytes, losses", losses)


def named_with_prefix(module, prefix):
    return [(prefix + n, p) for n, p in module.named_parameters()]


def mlp():
    net = tnn.Sequential(tnn.Linear(8, 16), tnn.ReLU(), tnn.Linear(16, 4))
    torch.manual_seed(0)
    x = torch.randn(6, 8)
    y = torch.tensor([0, 1, 2, 3, 1, 2])
    run("mlp.txt", net, named_with_prefix(net, "net."), x, y, ["net.0.weight", "net.0.bias", "net.2.bias"])


class Two(tnn.Module):
    def __init__(self, features, classifier):
        super().__init__()
        self.features, self.classifier = features, classifier

    def forward(self, x):
        return self.classifier(self.features(x))


def lenet():
    m = Two(tnn.Sequential(tnn.Conv2d(1, 6, 5, padding=2), tnn.ReLU(), tnn.MaxPool2d(2), tnn.Conv2d(6, 16, 5),
                           tnn.ReLU(), tnn.MaxPool2d(2)),
            tnn.Sequential(tnn.Flatten(), tnn.Linear(400, 120), tnn.ReLU(), tnn.Linear(120, 84), tnn.ReLU(),
                           tnn.Linear(84, 10)))
    torch.manual_seed(1)
    x = torch.randn(2, 1, 28, 28)
    y = torch.tensor([3, 7])
    run("lenet.txt", m, list(m.named_parameters()), x, y,
        ["features.0.weight", "features.0.bias", "features.3.bias", "classifier.5.weight"])


def convnet():
    def cbr(i, o):
        return [tnn.Conv2d(i, o, 3, padding=1, bias=False), tnn.BatchNorm2d(o), tnn.ReLU()]
    m = Two(tnn.Sequential(*cbr(1, 32), *cbr(32, 32), tnn.MaxPool2d(2), *cbr(32, 64), *cbr(64, 64), tnn.MaxPool2d(2)),
            tnn.Sequential(tnn.Flatten(), tnn.Linear(3136, 128), tnn.ReLU(), tnn.Linear(128, 10)))
    torch.manual_seed(2)
    x = torch.randn(2, 1, 28, 28)
    y = torch.tensor([4, 9])
    run("convnet.txt", m, list(m.named_parameters()), x, y,
        ["features.0.weight", "features.1.weight", "features.1.bias", "features.11.bias", "classifier.3.weight"], lr=0.02)


class Attn(tnn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.qkv, self.proj, self.h = tnn.Linear(c, 3 * c), tnn.Linear(c, c), h

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        heads = lambda t: t.reshape(B, T, self.h, C // self.h).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.h)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.proj(y)


class Block(tnn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.ln1, self.attn, self.ln2 = tnn.LayerNorm(c), Attn(c, h), tnn.LayerNorm(c)
        self.mlp = tnn.Sequential(tnn.Linear(c, 4 * c), tnn.GELU(approximate="tanh"), tnn.Linear(4 * c, c))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(tnn.Module):
    def __init__(self, vocab, context, layers, heads, width):
        super().__init__()
        self.wte, self.wpe = tnn.Embedding(vocab, width), tnn.Embedding(context, width)
        self.blocks = tnn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.ln_f = tnn.LayerNorm(width)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()  # tied head


def gpt():
    m = GPT(11, 8, 2, 2, 16)
    torch.manual_seed(3)
    x = torch.randint(0, 11, (2, 8))
    y = torch.randint(0, 11, (2, 8))
    run("gpt.txt", m, list(m.named_parameters()), x, y,
        ["wte.weight", "wpe.weight", "blocks.0.attn.qkv.weight", "blocks.1.mlp.0.bias", "ln_f.weight"], seq=True)


class BasicBlock(tnn.Module):
    """models/resnet.cpp's BasicBlock: same children, in the same order."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = tnn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = tnn.BatchNorm2d(cout)
        self.conv2 = tnn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = tnn.BatchNorm2d(cout)
        self.shortcut = None  # identity
        if stride != 1 or cin != cout:  # projection (option B)
            self.shortcut = tnn.Sequential(tnn.Conv2d(cin, cout, 1, stride=stride, bias=False), tnn.BatchNorm2d(cout))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + (x if self.shortcut is None else self.shortcut(x)))


class ResNet20(tnn.Module):
    def __init__(self, width=16, blocks=3, classes=10):
        super().__init__()
        self.conv1 = tnn.Conv2d(3, width, 3, padding=1, bias=False)
        self.bn1 = tnn.BatchNorm2d(width)

        def stage(cin, cout, stride):
            return tnn.Sequential(*[BasicBlock(cin if i == 0 else cout, cout, stride if i == 0 else 1)
                                    for i in range(blocks)])
        self.layer1 = stage(width, width, 1)
        self.layer2 = stage(width, 2 * width, 2)
        self.layer3 = stage(2 * width, 4 * width, 2)
        self.fc = tnn.Linear(4 * width, classes)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.layer3(self.layer2(self.layer1(h)))
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


def resnet20():
    m = ResNet20()
    torch.manual_seed(4)
    # Inputs rounded to multiples of 1/8 (exact in float32, short in the file).
    x = torch.round(torch.randn(2, 3, 32, 32) * 8) / 8
    y = torch.tensor([1, 8])
    run("resnet20.txt", m, list(m.named_parameters()), x, y,
        ["conv1.weight", "bn1.bias", "layer1.0.bn2.weight", "layer2.0.shortcut.0.weight",
         "layer3.2.bn2.weight", "fc.bias"], lr=0.02)


CASES = {"mlp": mlp, "lenet": lenet, "convnet": convnet, "gpt": gpt, "resnet20": resnet20}

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Writes PyTorch golden values for kiln's model tests.")
    ap.add_argument("--out", default=OUT, help="output folder (default: tests/models/golden)")
    ap.add_argument("cases", nargs="*", help="cases to write: %s (default: all)" % ", ".join(CASES))
    args = ap.parse_args()
    for name in args.cases:
        if name not in CASES:
            ap.error("unknown case %r (expected one of %s)" % (name, ", ".join(CASES)))
    OUT = args.out
    os.makedirs(OUT, exist_ok=True)
    for name in args.cases or CASES:
        CASES[name]()
