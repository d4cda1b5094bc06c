"""train_torch.py: GPT-2 training in PyTorch, the PyTorch rows of `make bench-gpu-peers`.

Written for that comparison with the recipe a PyTorch user reaches for (nanoGPT's): one module per
block, each holding its own parameters, bf16 autocast over float32 weights,
F.scaled_dot_product_attention(is_causal=True), fused AdamW, and torch.compile as an option. The
model is train_cpu's: pre-norm GPT-2, layernorm eps 1e-5, GELU's tanh form, output layer tied to
wte, the mean cross-entropy over the first V of the Vp logits; AdamW betas 0.9/0.95, eps 1e-8,
weight decay on the matrices only, the gradient norm clipped to 1.0. dev/reference/gpt2_ref.py
checks train_cpu the other way round, with the equations written out; its file readers and tensor
names are reused here. test/test_vs_pytorch.sh runs this file on the CPU in float32 from a
checkpoint of train_cpu and checks its losses and gradient norms against train_cpu's.

It takes train_cpu's flags for what it does, reads the same token files and takes batch k of the
file as train_cpu does (tokens k*B*T .. k*B*T+B*T, inputs and targets one apart), at a constant
learning rate, and prints train_cpu's progress line, so that one parser reads all the trainers.
A step is timed from the batch's upload to the end of AdamW, the GPU synchronised at both ends.

    python3 dev/bench/train_torch.py -e d12 -b 8 -t 1024 -x 25 -i data/tinyshakespeare_train.bin
    python3 dev/bench/train_torch.py ... --compile      the model under torch.compile
    python3 dev/bench/train_torch.py -e model.bin ... --device cpu    float32 on the CPU (the test)
"""

import argparse
import contextlib
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reference"))
from gpt2_ref import DECAYED, LAYERNORM_EPS, NAMES, read_checkpoint, read_tokens  # noqa: E402

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")  # PyTorch 2.0 on

# dN: train_gpu's and llm.c's shapes (gpt2_config_for_depth in gpt2/model.h)
DEPTH_SHAPES = {12: (768, 12), 24: (1024, 16), 36: (1280, 20), 48: (1600, 25)}


def attention(q, k, v):
    """Causal attention of (B, NH, T, hs) heads, scaled by 1/sqrt(hs)."""
    if HAS_SDPA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # PyTorch before 2.0 (Debian's 1.13, the test's): the same, written out
    T = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    return att.masked_fill(future, float("-inf")).softmax(dim=-1) @ v


class Block(nn.Module):
    """One transformer block; its parameters are GPT-2's ln1w, ln1b, qkvw, ... of one layer."""

    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1 = nn.LayerNorm(C, eps=LAYERNORM_EPS)
        self.qkv = nn.Linear(C, 3 * C)          # weight (3C, C), as qkvw
        self.attproj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C, eps=LAYERNORM_EPS)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        y = attention(q, k, v).transpose(1, 2).reshape(B, T, C)
        x = x + self.attproj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


# where each of the 16 tensors of a checkpoint lives: (block module, its parameter); None: the top's
PLACES = {"wte": None, "wpe": None, "ln1w": ("ln1", "weight"), "ln1b": ("ln1", "bias"),
          "qkvw": ("qkv", "weight"), "qkvb": ("qkv", "bias"), "attprojw": ("attproj", "weight"),
          "attprojb": ("attproj", "bias"), "ln2w": ("ln2", "weight"), "ln2b": ("ln2", "bias"),
          "fcw": ("fc", "weight"), "fcb": ("fc", "bias"), "fcprojw": ("fcproj", "weight"),
          "fcprojb": ("fcproj", "bias"), "lnfw": None, "lnfb": None}


class GPT2(nn.Module):
    def __init__(self, config):
        super().__init__()
        maxT, self.V, L, NH, C, Vp = config
        self.wte = nn.Parameter(torch.zeros(Vp, C))   # (Vp, C), also the output layer
        self.wpe = nn.Parameter(torch.zeros(maxT, C))
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C, eps=LAYERNORM_EPS)

    def tensor(self, name, layer=0):
        """The parameter that holds checkpoint tensor `name` (of `layer`, for a block's)."""
        if PLACES[name] is None:
            return {"wte": self.wte, "wpe": self.wpe, "lnfw": self.lnf.weight, "lnfb": self.lnf.bias}[name]
        module, param = PLACES[name]
        return getattr(getattr(self.blocks[layer], module), param)

    def forward(self, inputs, targets):
        T = inputs.shape[1]
        x = F.embedding(inputs, self.wte) + self.wpe[:T]
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.lnf(x), self.wte)      # (B, T, Vp), weight tying
        # the padding columns left out; float32, as autocast computes the loss anyway
        logits = logits[..., :self.V].float()
        return F.cross_entropy(logits.view(-1, self.V), targets.reshape(-1))


def load_checkpoint(model, params):
    """Copies an llm.c checkpoint's tensors (gpt2_ref.read_checkpoint's dict) into the model."""
    with torch.no_grad():
        for name in NAMES:
            if PLACES[name] is None:
                model.tensor(name).copy_(torch.from_numpy(params[name]))
            else:
                for l, block_tensor in enumerate(params[name]):
                    model.tensor(name, l).copy_(torch.from_numpy(block_tensor))


def init_gpt2(model, L, seed):
    """GPT-2's initialisation, as train_gpu's: normal(0, 0.02), the residual projections
    0.02/sqrt(2L), zero biases, unit layernorm weights, wte's padding rows zero."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name in NAMES:
            for l in range(L if PLACES[name] else 1):
                p = model.tensor(name, l)
                if name in DECAYED:
                    std = 0.02 / math.sqrt(2 * L) if name in ("attprojw", "fcprojw") else 0.02
                    p.copy_(torch.randn(p.shape, generator=gen) * std)
                else:
                    p.fill_(1.0 if name in ("ln1w", "ln2w", "lnfw") else 0.0)
        model.wte[model.V:] = 0.0


def build(init, seed):
    """The model of -e: a checkpoint file, or dN for a fresh one (train_gpu's shapes)."""
    if init.startswith("d") and init[1:].isdigit():
        L = int(init[1:])
        C, NH = DEPTH_SHAPES.get(L, (64 * L, L))
        model = GPT2((1024, 50257, L, NH, C, 50304))
        init_gpt2(model, L, seed)
        return model, L, NH, C
    config, params = read_checkpoint(init)
    model = GPT2(config)
    load_checkpoint(model, params)
    return model, config[2], config[3], config[4]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-e", default="d12", help="checkpoint (llm.c float32 .bin) or dN, a fresh model (default d12)")
    ap.add_argument("-i", default="data/tinyshakespeare_train.bin", help="training tokens")
    ap.add_argument("-b", type=int, default=8, help="batch size B (default 8)")
    ap.add_argument("-t", type=int, default=1024, help="sequence length T (default 1024)")
    ap.add_argument("-x", type=int, default=25, help="training steps (default 25)")
    ap.add_argument("-l", type=float, default=3e-4, help="learning rate, constant (default 3e-4)")
    ap.add_argument("-c", type=float, default=0.0, help="weight decay on the matrices (default 0)")
    ap.add_argument("-S", type=int, default=1337, help="seed of a fresh model's weights (default 1337)")
    ap.add_argument("--device", default="cuda", help="cuda (bf16 autocast) or cpu (float32)")
    ap.add_argument("--compile", action="store_true", help="the model under torch.compile")
    a = ap.parse_args()

    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit(f"error: torch {torch.__version__} sees no CUDA GPU (give --device cpu, or a torch built for CUDA)")
    if cuda and not HAS_SDPA:
        sys.exit(f"error: torch {torch.__version__} has no scaled_dot_product_attention: the GPU rows need PyTorch 2.0 or newer")
    if a.compile and not hasattr(torch, "compile"):
        sys.exit(f"error: torch {torch.__version__} has no torch.compile (PyTorch 2.0 or newer)")
    if not cuda:
        torch.set_num_threads(1)   # deterministic and polite on a shared machine
    model, L, NH, C = build(a.e, a.S)
    model.to(a.device)
    tokens = torch.from_numpy(read_tokens(a.i))
    B, T = a.b, a.t
    num_batches = (len(tokens) - 1) // (B * T)
    if num_batches < 1:
        sys.exit(f"error: {a.i} has {len(tokens)} tokens, a batch needs B*T+1 = {B * T + 1}")
    if cuda:
        tokens = tokens.pin_memory()   # so that each batch's upload is one plain copy

    params = list(model.parameters())
    decayed = [model.tensor(n, l) for n in NAMES if n in DECAYED for l in range(L if PLACES[n] else 1)]
    groups = [{"params": decayed, "weight_decay": a.c},
              {"params": [p for p in params if all(p is not d for d in decayed)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.l, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if cuda else {}))
    step_model = torch.compile(model) if a.compile else model
    count = sum(p.numel() for p in params)
    print(f"model: L={L} NH={NH} C={C} V={model.V} (padded {model.wte.shape[0]}), {count} parameters")
    where = torch.cuda.get_device_name() if cuda else "CPU, float32, 1 thread"
    print(f"torch {torch.__version__} on {where}: "
          f"{'bf16 autocast, fused AdamW' if cuda else 'AdamW'}, "
          f"attention {'scaled_dot_product_attention' if HAS_SDPA else 'written out (no scaled_dot_product_attention)'}"
          f"{', torch.compile' if a.compile else ''}")
    print(f"train: {a.i} ({len(tokens)} tokens, {num_batches} batches), B={B} T={T}, {a.x} steps")

    for step in range(1, a.x + 1):
        k = (step - 1) % num_batches
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        chunk = tokens[k * B * T: k * B * T + B * T + 1].to(a.device, non_blocking=True)
        inputs, targets = chunk[:-1].view(B, T), chunk[1:].view(B, T)
        with torch.autocast("cuda", dtype=torch.bfloat16) if cuda else contextlib.nullcontext():
            loss = step_model(inputs, targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)   # the norm before clipping
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        print(f"step {step:4d}/{a.x} | loss {loss.item():.6f} | norm {norm.item():.4f} | lr {a.l:.2e} | "
              f"{dt * 1e3:.2f} ms | {B * T / dt:.0f} tok/s", flush=True)
    if cuda:
        print(f"torch.cuda.max_memory_allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, "
              f"max_memory_reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
