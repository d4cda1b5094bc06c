"""gpt2_ref.py: a PyTorch reference for train_cpu.c's correctness tests.

It builds the same GPT-2 as train_cpu.c from the same llm.c checkpoint file and the same batches,
independently of the C code: the model is written here a second time, in PyTorch, with autograd
for the gradients, torch.nn.utils.clip_grad_norm_ and torch.optim.AdamW for the updates.
test/ref_check.c runs train_cpu.c's functions on the same files and compares against what
`reference` writes; test/compare_run.py compares a real ./train_cpu run against what `train` writes.

    make-model  writes a small random checkpoint (llm.c format, version 3) and a token file
                with random ids < V (doc/formats.md), so tests need nothing from data/.
    make-tokens, make-tokenizer   a token file of random ids; a tokenizer file of the 256 bytes
                (to print samples). These three need NumPy only.
    greedy      loads a checkpoint and prompts (one per line of a text file, token ids separated by
                spaces) and writes, one line per prompt, the token ids that greedy generation
                (argmax of the last position's logits, in float64, the whole sequence rerun for
                each token) appends: up to --n of them, ending early at end-of-text (--eot), which
                is not written. test/test_infer_batch.sh compares ./infer -f with it.
    reference   loads a checkpoint and a token file, takes the first batch (B*T+1 tokens: inputs
                are the first B*T, targets the same shifted by one), and writes a dump (below)
                holding, for a float32 run and a float64 run of the same computation: the logits
                (first V columns), the loss, every parameter gradient, the global gradient norm,
                the losses of `steps` AdamW steps on that same batch, and the parameters after them.
                The float64 run is the "truth" that tells how far float32 itself is from it.
                --precision bf16: the linear layers' products as train_cpu -p bf16 computes them,
                on operands rounded to bf16 (product_bf16), in both runs.
    train       does what `./train_cpu -e MODEL -i TRAIN -j VAL -b B -t T -x STEPS -l LR
                -u WARMUP -q FINAL_FRAC -c WD -v VAL_EVERY -m VAL_BATCHES -s 0` does, taking the
                same flags, once in float32 and once in float64, and writes an .npz (below).
                Step s = 1..STEPS trains on batch (s-1) mod num_batches of TRAIN, num_batches =
                (N-1) // (B*T), batch k being tokens k*B*T .. k*B*T+B*T (inputs the first B*T,
                targets the same shifted by one); clips the gradient norm to 1.0; and takes an
                AdamW step at learning_rate(s) (lr*s/WARMUP for s <= WARMUP, then a cosine from lr
                down to lr*FINAL_FRAC at s = STEPS; constant when FINAL_FRAC is 1). With
                VAL_EVERY > 0 it validates at step 0 and after each step s with s % VAL_EVERY == 0
                or s == STEPS: the mean of the batch losses of the first min(VAL_BATCHES,
                num_val_batches) batches of VAL.

Model (what train_cpu.c must also compute): pre-norm GPT-2, layernorm eps 1e-5, causal
multi-head attention scaled by 1/sqrt(head size), GELU tanh approximation, MLP width 4C, output
layer tied to wte (logits for all Vp rows, the padding columns V..Vp-1 ignored), mean
cross-entropy over B*T. One training step: forward, backward, clip the global gradient norm to
max_norm (torch.nn.utils.clip_grad_norm_), AdamW (torch.optim.AdamW, betas 0.9/0.95, eps 1e-8)
with weight decay only on the matrices wte, wpe, qkvw, attprojw, fcw, fcprojw. In `reference`
every step uses the same batch and max_norm is an option; `train` uses 1.0, as train_cpu does.

Dump format of `reference` (little-endian; this project's own, not an llm.c format):
    header 256 int32: [0] magic 20240901, [1] version 1, [2] B, [3] T, [4] V, [5] Vp,
                      [6] number of parameters P (with padding), [7] steps, [8] runs (2)
    float64 lr, beta1, beta2, eps, weight_decay, max_norm
    int32 inputs (B*T), int32 targets (B*T)
    then for each run (float32 first, then float64), every value stored as float64:
        logits (B, T, V), loss, grad_norm (before clipping), grads (P, the 16 tensors in file
        order), step_losses (steps + 1: the loss before each update, then after the last),
        params after the last update (P)

The .npz of `train` (numpy.savez; TAG is f32 or f64, the run):
    config        [maxT, V, L, NH, C, Vp]; names, sizes: the 16 tensors in file order
    B, T, steps, lr, warmup, final_frac, weight_decay, val_every, val_batches: the options
    lr_step       (steps) the learning rate of each step
    loss_TAG      (steps) each step's loss, before its update
    norm_TAG      (steps) each step's gradient norm, before clipping
    val_step      the steps validated after (0: before the first), val_loss_TAG their losses
    params_TAG    (P) the parameters after the last step, float64, in file order

Run with Debian's PyTorch: /usr/bin/python3 dev/reference/gpt2_ref.py make-model --help
"""

import argparse
import math
import sys

import numpy as np

torch = None   # imported by need_torch() for `reference` and `train` only: the other commands
               # need NumPy alone, and importing torch takes ~1.5 s of a test's time
ProductBf16 = None   # product_bf16's autograd function, defined by need_torch()

CHECKPOINT_MAGIC, CHECKPOINT_VERSION_F32 = 20240326, 3
TOKENS_MAGIC, TOKENS_VERSION = 20240520, 1
TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2
DUMP_MAGIC, DUMP_VERSION = 20240901, 1
HEADER_INTS = 256
LAYERNORM_EPS = 1e-5

# The 16 tensors in file order, and which of them get weight decay.
NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def shapes(maxT, Vp, L, C):
    return {"wte": (Vp, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C),
            "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C), "attprojw": (L, C, C),
            "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C), "fcw": (L, 4 * C, C),
            "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
            "lnfw": (C,), "lnfb": (C,)}


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def need_torch(command):
    global torch, ProductBf16
    try:
        import torch
    except ImportError:
        fail(f"{command} needs PyTorch: run with /usr/bin/python3 (Debian's python3-torch)")

    class ProductBf16(torch.autograd.Function):   # product_bf16's forward and backward
        @staticmethod
        def forward(ctx, x, w):
            xr, wr = to_bf16(x), to_bf16(w)
            ctx.save_for_backward(xr, wr)
            return xr @ wr.T

        @staticmethod
        def backward(ctx, g):
            xr, wr = ctx.saved_tensors
            gr = to_bf16(g)
            dw = gr.reshape(-1, gr.shape[-1]).T @ xr.reshape(-1, xr.shape[-1])
            return gr @ wr, dw


# ---------- files ----------

def read_header(f, path, magic, version):
    raw = f.read(4 * HEADER_INTS)
    if len(raw) != 4 * HEADER_INTS:
        fail(f"{path} is truncated: no complete 1,024-byte header")
    h = np.frombuffer(raw, dtype="<i4")
    if h[0] != magic:
        fail(f"{path}: bad magic {h[0]} (expected {magic})")
    if h[1] != version:
        fail(f"{path}: unsupported version {h[1]} (expected {version})")
    return h


def write_checkpoint(path, config, params):
    maxT, V, L, NH, C, Vp = config
    h = np.zeros(HEADER_INTS, dtype="<i4")
    h[:8] = [CHECKPOINT_MAGIC, CHECKPOINT_VERSION_F32, maxT, V, L, NH, C, Vp]
    with open(path, "wb") as f:
        f.write(h.tobytes())
        for name in NAMES:
            f.write(params[name].astype("<f4").tobytes())


def read_checkpoint(path):
    with open(path, "rb") as f:
        h = read_header(f, path, CHECKPOINT_MAGIC, CHECKPOINT_VERSION_F32)
        maxT, V, L, NH, C, Vp = (int(x) for x in h[2:8])
        params = {}
        for name, shape in shapes(maxT, Vp, L, C).items():
            n = int(np.prod(shape))
            raw = f.read(4 * n)
            if len(raw) != 4 * n:
                fail(f"{path} is truncated in tensor {name}")
            params[name] = np.frombuffer(raw, dtype="<f4").reshape(shape).copy()
    return (maxT, V, L, NH, C, Vp), params


def write_tokens(path, tokens):
    h = np.zeros(HEADER_INTS, dtype="<i4")
    h[:3] = [TOKENS_MAGIC, TOKENS_VERSION, len(tokens)]
    with open(path, "wb") as f:
        f.write(h.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def read_tokens(path):
    with open(path, "rb") as f:
        h = read_header(f, path, TOKENS_MAGIC, TOKENS_VERSION)
        n = int(h[2])
        raw = f.read()
    if len(raw) != 2 * n:
        fail(f"{path}: header says {n} tokens, the file holds {len(raw) // 2}")
    return np.frombuffer(raw, dtype="<u2").astype(np.int64)


# ---------- the model, written from the equations ----------

def layernorm(x, w, b):
    # biased variance, as GPT-2 and train_cpu.c
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + LAYERNORM_EPS) * w + b


def gelu(x):
    # tanh approximation (GPT-2)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def attention(qkv, NH):
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // NH
    q, k, v = qkv.split(C, dim=-1)             # each (B, T, C); head h is channels h*hs..
    q = q.view(B, T, NH, hs).transpose(1, 2)   # (B, NH, T, hs)
    k = k.view(B, T, NH, hs).transpose(1, 2)
    v = v.view(B, T, NH, hs).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
    y = att @ v                                # (B, NH, T, hs)
    return y.transpose(1, 2).contiguous().view(B, T, C)


def to_bf16(t):
    """t rounded to the nearest bf16 (ties to even), kept in t's dtype."""
    return t.to(torch.bfloat16).to(t.dtype)


def product(x, w):
    """x @ w.T: a linear layer's product."""
    return x @ w.T


def product_bf16(x, w):
    """x @ w.T as train_cpu -p bf16 computes it (matmul_forward_bf16, matmul_backward_bf16): on
    x and w rounded to bf16, and in the backward on the output gradient rounded to bf16 too,
    dx = bf16(g) bf16(w) and dw = bf16(g)^T bf16(x). Products of two bf16 numbers are exact in
    float32, so these products differ from train_cpu's only in the order of their float32 sums.
    Autograd through to_bf16 itself would round dx and dw to bf16 as well, which train_cpu does
    not."""
    return ProductBf16.apply(x, w)


def forward(p, config, inputs, targets, linear=product):
    """Returns logits (B, T, Vp) and the mean cross-entropy over the first V columns. linear is
    the product of the five linear layers: product, or product_bf16 (train_cpu -p bf16)."""
    maxT, V, L, NH, C, Vp = config
    B, T = inputs.shape
    x = p["wte"][inputs] + p["wpe"][:T]
    for l in range(L):
        h = layernorm(x, p["ln1w"][l], p["ln1b"][l])
        qkv = linear(h, p["qkvw"][l]) + p["qkvb"][l]
        x = x + linear(attention(qkv, NH), p["attprojw"][l]) + p["attprojb"][l]
        h = layernorm(x, p["ln2w"][l], p["ln2b"][l])
        h = gelu(linear(h, p["fcw"][l]) + p["fcb"][l])
        x = x + linear(h, p["fcprojw"][l]) + p["fcprojb"][l]
    x = layernorm(x, p["lnfw"], p["lnfb"])
    logits = linear(x, p["wte"])               # (B, T, Vp); weight tying
    loss = torch.nn.functional.cross_entropy(logits[:, :, :V].reshape(B * T, V),
                                             targets.reshape(B * T))
    return logits, loss


def run(config, params_np, inputs, targets, hp, steps, dtype, linear=product):
    """One float32 or float64 run: forward/backward once, then `steps` training steps."""
    p = {n: torch.tensor(params_np[n], dtype=dtype, requires_grad=True) for n in NAMES}
    logits, loss = forward(p, config, inputs, targets, linear)
    loss.backward()
    V = config[1]
    out = {"logits": logits[:, :, :V].detach().clone(), "loss": loss.item(),
           "grads": [p[n].grad.detach().clone() for n in NAMES]}
    # torch.nn.utils.clip_grad_norm_ returns the total norm before clipping.
    out["grad_norm"] = float(torch.sqrt(sum((g.double() ** 2).sum() for g in out["grads"])))

    groups = [{"params": [p[n] for n in NAMES if n in DECAYED], "weight_decay": hp["wd"]},
              {"params": [p[n] for n in NAMES if n not in DECAYED], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]),
                            eps=hp["eps"])
    step_losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=False)
        _, loss = forward(p, config, inputs, targets, linear)
        step_losses.append(loss.item())
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p[n] for n in NAMES], hp["max_norm"])
        opt.step()
    with torch.no_grad():
        _, loss = forward(p, config, inputs, targets, linear)
    step_losses.append(loss.item())
    out["step_losses"] = step_losses
    out["params"] = [p[n].detach().clone() for n in NAMES]
    return out


# ---------- commands ----------

def make_model(args):
    V, L, NH, C, maxT = args.V, args.L, args.NH, args.C, args.maxT
    Vp = args.Vp if args.Vp else (V + 127) // 128 * 128
    if C % NH != 0:
        fail(f"C={C} is not a multiple of NH={NH}")
    if Vp < V or V > 65536:
        fail(f"need V <= Vp and V <= 65536 (uint16 tokens), got V={V} Vp={Vp}")
    rng = np.random.default_rng(args.seed)
    params = {}
    for name, shape in shapes(maxT, Vp, L, C).items():
        if name in ("ln1w", "ln2w", "lnfw"):
            t = 1.0 + 0.1 * rng.standard_normal(shape)    # not exactly 1, so dweight matters
        elif name in DECAYED:
            t = args.scale * rng.standard_normal(shape)
        else:
            t = 0.1 * args.scale * rng.standard_normal(shape)   # the biases, not zero either
        params[name] = t.astype(np.float32)
    params["wte"][V:] = 0.0                                 # padding rows are zero
    write_checkpoint(args.model, (maxT, V, L, NH, C, Vp), params)
    write_tokens(args.tokens, rng.integers(0, V, size=args.ntokens))
    print(f"wrote {args.model} (maxT={maxT} V={V} Vp={Vp} L={L} NH={NH} C={C}) and "
          f"{args.tokens} ({args.ntokens} tokens)")


def make_tokens(args):
    rng = np.random.default_rng(args.seed)
    write_tokens(args.out, rng.integers(0, args.V, size=args.n))
    print(f"wrote {args.out} ({args.n} random tokens < {args.V})")


def make_tokenizer(args):
    # the smallest file tokenizer_init accepts: ids 0..255 the single bytes, no merges, then
    # <|endoftext|> as id 256
    eot = b"<|endoftext|>"
    h = np.zeros(HEADER_INTS, dtype="<i4")
    h[:4] = [TOKENIZER_MAGIC, TOKENIZER_VERSION, 257, 256]
    with open(args.out, "wb") as f:
        f.write(h.tobytes())
        for i in range(256):
            f.write(bytes([1, i]))
        f.write(bytes([len(eot)]) + eot)
    print(f"wrote {args.out} (the 256 single bytes and <|endoftext|>)")


def reference(args):
    need_torch("reference")
    config, params = read_checkpoint(args.model)
    maxT, V, L, NH, C, Vp = config
    tokens = read_tokens(args.tokens)
    B, T = args.B, args.T
    if T > maxT:
        fail(f"T={T} > maxT={maxT}")
    if len(tokens) < B * T + 1:
        fail(f"{args.tokens} has {len(tokens)} tokens, a batch needs B*T+1 = {B * T + 1}")
    if tokens.max() >= V:
        fail(f"{args.tokens} holds token id {tokens.max()} >= V={V}")
    batch = torch.tensor(tokens[:B * T + 1])
    inputs, targets = batch[:-1].view(B, T), batch[1:].view(B, T)
    hp = {"lr": args.lr, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "wd": args.wd,
          "max_norm": args.max_norm}
    torch.set_num_threads(1)   # deterministic and polite on a shared machine
    linear = product_bf16 if args.precision == "bf16" else product
    runs = [run(config, params, inputs, targets, hp, args.steps, dt, linear)
            for dt in (torch.float32, torch.float64)]

    r32, r64 = runs
    def rel(a, b):
        return float((a.double() - b).norm() / b.norm()) if b.norm() > 0 else 0.0
    print(f"float32 vs float64 PyTorch: loss {r32['loss']:.8f} vs {r64['loss']:.8f}, "
          f"logits rel err {rel(r32['logits'], r64['logits']):.2e}, "
          f"grad norm {r32['grad_norm']:.6f} vs {r64['grad_norm']:.6f} "
          f"(clipping {'on' if r64['grad_norm'] > args.max_norm else 'off'})")
    worst = max((rel(a, b), n) for a, b, n in zip(r32["grads"], r64["grads"], NAMES))
    dl = max(abs(a - b) for a, b in zip(r32["step_losses"], r64["step_losses"]))
    print(f"  worst grad rel-norm err {worst[0]:.2e} ({worst[1]}), step losses max abs diff "
          f"{dl:.2e}, losses {r64['step_losses'][0]:.5f} -> {r64['step_losses'][-1]:.5f}")

    h = np.zeros(HEADER_INTS, dtype="<i4")
    P = sum(params[n].size for n in NAMES)
    h[:9] = [DUMP_MAGIC, DUMP_VERSION, B, T, V, Vp, P, args.steps, len(runs)]
    with open(args.out, "wb") as f:
        f.write(h.tobytes())
        f.write(np.array([hp["lr"], hp["beta1"], hp["beta2"], hp["eps"], hp["wd"],
                          hp["max_norm"]], dtype="<f8").tobytes())
        f.write(inputs.numpy().astype("<i4").tobytes())
        f.write(targets.numpy().astype("<i4").tobytes())
        for r in runs:
            vals = [r["logits"].reshape(-1), torch.tensor([r["loss"], r["grad_norm"]])]
            vals += [g.reshape(-1) for g in r["grads"]]
            vals += [torch.tensor(r["step_losses"])]
            vals += [q.reshape(-1) for q in r["params"]]
            f.write(torch.cat([v.double() for v in vals]).numpy().astype("<f8").tobytes())
    print(f"wrote {args.out}")


def greedy(args):
    need_torch("greedy")
    config, params_np = read_checkpoint(args.model)
    maxT, V = config[0], config[1]
    p = {n: torch.tensor(params_np[n], dtype=torch.float64) for n in NAMES}
    with open(args.prompts) as f:
        prompts = [[int(x) for x in line.split()] for line in f if line.strip()]
    with open(args.out, "w") as out:
        for ids in prompts:
            seq, new = list(ids), []
            with torch.no_grad():
                while len(new) < args.n and len(seq) < maxT:
                    inputs = torch.tensor([seq], dtype=torch.long)
                    logits, _ = forward(p, config, inputs, torch.zeros_like(inputs))
                    nxt = int(torch.argmax(logits[0, -1, :V]))
                    if nxt == args.eot:
                        break
                    seq.append(nxt)
                    new.append(nxt)
            out.write(" ".join(str(t) for t in new) + "\n")


def learning_rate(step, lr, warmup, steps, final_frac):
    """The learning rate of step `step` (counted from 1): a linear warmup, lr*step/warmup over
    steps 1..warmup, then a cosine from lr at step `warmup` down to lr*final_frac at step `steps`,
    or lr throughout when final_frac >= 1."""
    if step <= warmup:
        return lr * step / warmup
    if final_frac >= 1.0:
        return lr
    progress = (step - warmup) / (steps - warmup)    # in (0, 1]; steps > warmup here
    min_lr = lr * final_frac
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)


def batch(tokens, k, B, T):
    """Batch k of a token file: B*T+1 consecutive tokens from k*B*T, inputs the first B*T and
    targets the same shifted by one."""
    chunk = torch.tensor(tokens[k * B * T: k * B * T + B * T + 1])
    return chunk[:-1].view(B, T), chunk[1:].view(B, T)


def train_run(config, params_np, train_tokens, val_tokens, a, dtype):
    """One float32 or float64 run of train_cpu's training loop with its options `a` (-b, -t,
    -x, -l, -u, -q, -c, -v, -m as a.b, a.t, ...)."""
    B, T, steps, val_every = a.b, a.t, a.x, a.v
    p = {n: torch.tensor(params_np[n], dtype=dtype, requires_grad=True) for n in NAMES}
    groups = [{"params": [p[n] for n in NAMES if n in DECAYED], "weight_decay": a.c},
              {"params": [p[n] for n in NAMES if n not in DECAYED], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.l, betas=(0.9, 0.95), eps=1e-8)
    num_batches = (len(train_tokens) - 1) // (B * T)
    out = {"loss": [], "norm": [], "lr": [], "val_step": [], "val_loss": []}

    def validate(step):
        # the mean of the per-batch mean losses of the first batches of the validation file
        num_val = min(a.m, (len(val_tokens) - 1) // (B * T))
        with torch.no_grad():
            losses = [forward(p, config, *batch(val_tokens, k, B, T))[1].item()
                      for k in range(num_val)]
        out["val_step"].append(step)
        out["val_loss"].append(sum(losses) / num_val)

    if val_every > 0:
        validate(0)
    for step in range(1, steps + 1):
        inputs, targets = batch(train_tokens, (step - 1) % num_batches, B, T)
        opt.zero_grad(set_to_none=False)
        _, loss = forward(p, config, inputs, targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_([p[n] for n in NAMES], 1.0)  # norm before clipping
        lr = learning_rate(step, a.l, a.u, steps, a.q)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        out["loss"].append(loss.item())
        out["norm"].append(norm.item())
        out["lr"].append(lr)
        if val_every > 0 and (step % val_every == 0 or step == steps):
            validate(step)
    out["params"] = torch.cat([p[n].detach().reshape(-1) for n in NAMES]).double().numpy()
    return out


def train(args):
    need_torch("train")
    config, params = read_checkpoint(args.e)
    maxT, V, L, NH, C, Vp = config
    B, T = args.b, args.t
    if T > maxT:
        fail(f"T={T} > maxT={maxT}")
    if args.x < 1 or args.m < 1 or args.v < 0 or not 0.0 <= args.q <= 1.0:
        fail("need -x >= 1, -m >= 1, -v >= 0 and -q between 0 and 1")
    tokens = {}
    for path in (args.i, args.j) if args.v > 0 else (args.i,):   # -j is read only to validate
        tokens[path] = read_tokens(path)
        if len(tokens[path]) < B * T + 1:
            fail(f"{path} has {len(tokens[path])} tokens, a batch needs B*T+1 = {B * T + 1}")
        if tokens[path].max() >= V:
            fail(f"{path} holds token id {tokens[path].max()} >= V={V}")
    torch.set_num_threads(1)   # deterministic and polite on a shared machine
    r32, r64 = (train_run(config, params, tokens[args.i], tokens.get(args.j), args, dt)
                for dt in (torch.float32, torch.float64))

    num_batches = (len(tokens[args.i]) - 1) // (B * T)
    clipped = [s + 1 for s, n in enumerate(r64["norm"]) if n > 1.0]
    print(f"{args.x} steps over {num_batches} training batches, validation at steps "
          f"{r64['val_step']}; clipped at steps {clipped}")
    print(f"  float32 vs float64 PyTorch: losses max abs diff "
          f"{max(abs(x - y) for x, y in zip(r32['loss'], r64['loss'])):.2e}, losses "
          f"{r64['loss'][0]:.5f} -> {r64['loss'][-1]:.5f}, norms {r64['norm'][0]:.4f} -> "
          f"{r64['norm'][-1]:.4f}")
    run_settings = {"B": B, "T": T, "steps": args.x, "lr": args.l, "warmup": args.u,
                    "final_frac": args.q, "weight_decay": args.c, "val_every": args.v,
                    "val_batches": args.m}
    np.savez(args.out, config=np.array(config), names=np.array(NAMES),
             sizes=np.array([params[n].size for n in NAMES]),
             lr_step=np.array(r64["lr"]), val_step=np.array(r64["val_step"], dtype=np.int64),
             **{k: np.array(v) for k, v in run_settings.items()},
             **{f"{k}_{tag}": np.array(r[k]) for tag, r in (("f32", r32), ("f64", r64))
                for k in ("loss", "norm", "val_loss", "params")})
    print(f"wrote {args.out}")


def int_options(parser, **defaults):
    """An option --NAME of type int for each NAME=DEFAULT, in that order (shared with hf_ref.py)."""
    for name, default in defaults.items():
        parser.add_argument(f"--{name}", type=int, default=default)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-model", help="random small checkpoint + random token file")
    m.add_argument("--model", required=True, help="checkpoint to write (.bin)")
    m.add_argument("--tokens", required=True, help="token file to write (.bin)")
    m.add_argument("--V", type=int, default=97)
    m.add_argument("--Vp", type=int, default=0, help="padded vocab (default: V up to 128k)")
    int_options(m, maxT=32, L=2, NH=4, C=32, ntokens=1000)
    m.add_argument("--scale", type=float, default=0.1, help="std of the weight matrices")
    m.add_argument("--seed", type=int, default=1)
    t = sub.add_parser("make-tokens", help="token file of random ids < V")
    t.add_argument("--out", required=True)
    t.add_argument("--V", type=int, default=97)
    t.add_argument("--n", type=int, default=1000)
    t.add_argument("--seed", type=int, default=1)
    k = sub.add_parser("make-tokenizer", help="tokenizer file of the 256 single bytes")
    k.add_argument("--out", required=True)
    g = sub.add_parser("greedy", help="greedy continuations of prompts given as token ids")
    g.add_argument("--model", required=True)
    g.add_argument("--prompts", required=True, help="text file: one prompt per line, token ids")
    g.add_argument("--out", required=True, help="text file: the new token ids, one line per prompt")
    g.add_argument("--n", type=int, required=True, help="new tokens at most")
    g.add_argument("--eot", type=int, default=50256, help="end-of-text token: generation stops there")
    r = sub.add_parser("reference", help="logits, loss, grads and AdamW steps, as a dump")
    r.add_argument("--model", required=True)
    r.add_argument("--tokens", required=True)
    r.add_argument("--out", required=True, help="dump to write")
    r.add_argument("--B", type=int, required=True)
    r.add_argument("--T", type=int, required=True)
    r.add_argument("--steps", type=int, default=10)
    r.add_argument("--lr", type=float, default=1e-3)
    r.add_argument("--wd", type=float, default=0.0)
    r.add_argument("--max_norm", type=float, default=1.0)
    r.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="the linear layers' products: fp32, or on bf16-rounded operands as train_cpu -p bf16")
    # train takes train_cpu's own flags, so that a test passes the same options to both
    tr = sub.add_parser("train", help="what ./train_cpu does with the same options, as an .npz")
    tr.add_argument("--out", required=True, help="reference to write (.npz)")
    for flag, kind, metavar, what in [
            ("-e", str, "MODEL", "checkpoint"), ("-i", str, "TRAIN", "training tokens"),
            ("-j", str, "VAL", "validation tokens (read only with -v > 0)"),
            ("-b", int, "B", "batch size"), ("-t", int, "T", "sequence length"),
            ("-x", int, "STEPS", "training steps"), ("-l", float, "LR", "learning rate"),
            ("-u", int, "WARMUP", "linear warmup steps"),
            ("-q", float, "FINAL_FRAC", "final learning rate fraction (1: constant)"),
            ("-c", float, "WD", "weight decay on the matrices"),
            ("-v", int, "VAL_EVERY", "validate every N steps (0: never)"),
            ("-m", int, "VAL_BATCHES", "validation batches (at most)")]:
        tr.add_argument(flag, type=kind, required=True, metavar=metavar, help=what)
    args = ap.parse_args()
    commands = {"make-model": make_model, "make-tokens": make_tokens,
                "make-tokenizer": make_tokenizer, "greedy": greedy, "reference": reference, "train": train}
    commands[args.cmd](args)


if __name__ == "__main__":
    main()
