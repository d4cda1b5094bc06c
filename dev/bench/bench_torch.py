"""bench_torch.py: PyTorch's time for one GPT-2 training step on the CPU, the reference point for
train_cpu.c in `make bench-cpu` (dev/bench/bench_cpu.sh).

It loads the very checkpoint train_cpu starts from (train_cpu -x 0 -o DIR writes it), so the model
is the same to the last parameter, and times the same step train_cpu times: zero the gradients,
forward with the mean cross-entropy loss, backward, clip the global gradient norm to 1, AdamW.
The model is written with the fused library operations a PyTorch user would reach for
(F.linear, F.layer_norm, F.gelu(approximate="tanh"), F.cross_entropy, AdamW with foreach), not
with the spelled-out equations of dev/reference/gpt2_ref.py, which exist to check train_cpu.c, not to be
fast. Batches are random token ids with a fixed seed (the values do not change the work).

Prints one line per timed step and a summary line
    torch_ms_per_step MEDIAN (threads N, B=4, T=64, steps S after W warm-up; torch X.Y)
    torch_blas /path/of/the/libblas.so.3/it/loaded

    /usr/bin/python3 dev/bench/bench_torch.py build/bench/d12/model_00000000.bin -b 4 -t 64 --threads 2
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reference"))
from gpt2_ref import DECAYED, LAYERNORM_EPS, NAMES, read_checkpoint  # noqa: E402


def forward(p, config, inputs, targets, mask):
    # mask (T, T): True above the diagonal, where attention to future positions is cut
    maxT, V, L, NH, C, Vp = config
    B, T = inputs.shape
    hs = C // NH
    x = F.embedding(inputs, p["wte"]) + p["wpe"][:T]
    for l in range(L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], LAYERNORM_EPS)
        q, k, v = F.linear(h, p["qkvw"][l], p["qkvb"][l]).split(C, dim=-1)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / hs ** 0.5)
        att = att.masked_fill(mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, p["attprojw"][l], p["attprojb"][l])
        h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], LAYERNORM_EPS)
        h = F.gelu(F.linear(h, p["fcw"][l], p["fcb"][l]), approximate="tanh")
        x = x + F.linear(h, p["fcprojw"][l], p["fcprojb"][l])
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], LAYERNORM_EPS)
    logits = F.linear(x, p["wte"])  # (B, T, Vp), tied weights; padding columns ignored below
    return F.cross_entropy(logits[:, :, :V].reshape(B * T, V), targets.reshape(B * T))


def blas_library():
    """The BLAS library this process loaded (Debian's torch uses whichever libblas.so.3 the
    system's alternatives select: the netlib reference BLAS is ~30x slower than OpenBLAS)."""
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "blas" in line.lower() and "/" in line}
    return ", ".join(sorted(libs)) or "none found"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint", help="llm.c float32 checkpoint (train_cpu -x 0 -o DIR writes one)")
    ap.add_argument("-b", type=int, default=4, help="batch size B")
    ap.add_argument("-t", type=int, default=64, help="sequence length T")
    ap.add_argument("--steps", type=int, default=5, help="timed steps (the median is reported)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch.set_num_threads")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config, params_np = read_checkpoint(args.checkpoint)
    V, maxT = config[1], config[0]
    if args.t > maxT:
        sys.exit(f"error: -t {args.t} exceeds the model's context {maxT}")
    p = {n: torch.tensor(params_np[n], requires_grad=True) for n in NAMES}
    del params_np
    mask = ~torch.tril(torch.ones(args.t, args.t, dtype=torch.bool))
    groups = [{"params": [p[n] for n in NAMES if n in DECAYED], "weight_decay": 0.0},
              {"params": [p[n] for n in NAMES if n not in DECAYED], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, foreach=True)

    times = []
    for step in range(args.warmup + args.steps):
        tokens = torch.randint(0, V, (args.b, args.t + 1))
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = forward(p, config, inputs, targets, mask)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p[n] for n in NAMES], 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        timed = step >= args.warmup
        if timed:
            times.append(dt)
        print(f"torch step {step + 1}: loss {loss.item():.4f}, {dt * 1e3:.1f} ms{'' if timed else ' (warm-up)'}")
    print(f"torch_ms_per_step {statistics.median(times) * 1e3:.1f} (threads {args.threads}, "
          f"B={args.b}, T={args.t}, steps {args.steps} after {args.warmup} warm-up; torch {torch.__version__})")
    print(f"torch_blas {blas_library()}")


if __name__ == "__main__":
    main()
