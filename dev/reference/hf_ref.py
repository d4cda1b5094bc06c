"""hf_ref.py: small GPT-2 models in Hugging Face's safetensors layout, and their PyTorch logits.

The check for the safetensors loader (gpt2_read_safetensors, gpt2/checkpoint.h) and for infer.c:
this script writes a random GPT-2 the way Hugging Face publishes `model.safetensors`, computes
its logits on random tokens with a PyTorch forward written in that same layout, and the C test
(test/infer_check.c, `hf` mode) loads the file and compares. The `safetensors` package is not
available here, so the file is written by hand (write_safetensors below): an 8-byte little-endian
header length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}} padded
with spaces to a multiple of 8, then the raw tensor bytes.

What the layout has that an llm.c checkpoint does not (and the loader must handle):
  - names of transformers' GPT2Model (`wte.weight`, `h.0.attn.c_attn.weight`, `ln_f.bias`, ...),
    behind a `transformer.` prefix in files saved from GPT2LMHeadModel (--prefix);
  - Conv1D weights stored (in, out): the forward here computes x @ W + b, as transformers'
    Conv1D does, so a loader that forgets to transpose gives different logits;
  - wte with exactly V rows (no padding), wpe with maxT rows;
  - `h.N.attn.bias` (the causal mask buffer, (1, 1, maxT, maxT)) and `h.N.attn.masked_bias`
    buffers in older files, which are not parameters (--buffers);
  - F16 or BF16 tensors (--dtype; the reference then uses the same rounded weights).
The number of heads is not in the file: GPT-2 uses head size 64 at every size, so NH = C / 64.

    /usr/bin/python3 dev/reference/hf_ref.py --out m.safetensors --expect m.expect [--prefix] [--buffers]
        [--dtype F32|F16|BF16] [--L 2] [--C 128] [--V 300] [--maxT 24] [--T 20] [--seed 1]
        [--drop NAME] [--bad-shape NAME] [--truncate BYTES]

The expect file (this project's own, little-endian): int32 T, int32 V, int32 tokens[T],
float32 logits[T][V].
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_ref  # noqa: E402
from gpt2_ref import attention, fail, gelu, layernorm   # noqa: E402  (the shared layer math)

gpt2_ref.need_torch("hf_ref.py")  # gpt2_ref imports torch only when a command needs it

HEAD_SIZE = 64   # every GPT-2 size uses 64-wide heads: NH = C / 64
DTYPES = {"F32": (torch.float32, 4), "F16": (torch.float16, 2), "BF16": (torch.bfloat16, 2)}


def hf_tensors(L, C, V, maxT, rng):
    """Random GPT-2 weights with transformers' names and shapes (no prefix)."""
    def normal(*shape, std=0.1):
        return torch.tensor(std * rng.standard_normal(shape), dtype=torch.float32)
    t = {"wte.weight": normal(V, C), "wpe.weight": normal(maxT, C)}
    for l in range(L):
        p = f"h.{l}."
        t[p + "ln_1.weight"] = 1.0 + normal(C)
        t[p + "ln_1.bias"] = normal(C, std=0.02)
        t[p + "attn.c_attn.weight"] = normal(C, 3 * C)      # Conv1D: (in, out)
        t[p + "attn.c_attn.bias"] = normal(3 * C, std=0.02)
        t[p + "attn.c_proj.weight"] = normal(C, C)
        t[p + "attn.c_proj.bias"] = normal(C, std=0.02)
        t[p + "ln_2.weight"] = 1.0 + normal(C)
        t[p + "ln_2.bias"] = normal(C, std=0.02)
        t[p + "mlp.c_fc.weight"] = normal(C, 4 * C)
        t[p + "mlp.c_fc.bias"] = normal(4 * C, std=0.02)
        t[p + "mlp.c_proj.weight"] = normal(4 * C, C)
        t[p + "mlp.c_proj.bias"] = normal(C, std=0.02)
    t["ln_f.weight"] = 1.0 + normal(C)
    t["ln_f.bias"] = normal(C, std=0.02)
    return t


def hf_forward(t, L, C, tokens):
    """Logits (T, V) of GPT-2 in transformers' layout: Conv1D computes x @ W + b."""
    T = len(tokens)
    x = t["wte.weight"][tokens] + t["wpe.weight"][:T]
    for l in range(L):
        p = f"h.{l}."
        h = layernorm(x, t[p + "ln_1.weight"], t[p + "ln_1.bias"])
        qkv = h @ t[p + "attn.c_attn.weight"] + t[p + "attn.c_attn.bias"]
        y = attention(qkv.unsqueeze(0), C // HEAD_SIZE).squeeze(0)
        x = x + y @ t[p + "attn.c_proj.weight"] + t[p + "attn.c_proj.bias"]
        h = layernorm(x, t[p + "ln_2.weight"], t[p + "ln_2.bias"])
        h = gelu(h @ t[p + "mlp.c_fc.weight"] + t[p + "mlp.c_fc.bias"])
        x = x + h @ t[p + "mlp.c_proj.weight"] + t[p + "mlp.c_proj.bias"]
    x = layernorm(x, t["ln_f.weight"], t["ln_f.bias"])
    return x @ t["wte.weight"].T                               # weight tying


def write_safetensors(path, tensors, dtype, truncate=0):
    """The safetensors format by hand: u64 header length, JSON header, raw little-endian data."""
    torch_dtype, size = DTYPES[dtype]
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        raw = t.to(torch_dtype).contiguous()
        if size == 2:
            raw = raw.view(torch.int16)   # numpy has no bfloat16: move the bits as int16
        blob = raw.numpy().astype(raw.numpy().dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)                              # data starts 8-byte aligned
    data = struct.pack("<Q", len(text)) + text + b"".join(blobs)
    if truncate:
        data = data[:len(data) - truncate]
    with open(path, "wb") as f:
        f.write(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="safetensors file to write")
    ap.add_argument("--expect", help="file for the tokens and PyTorch logits")
    ap.add_argument("--prefix", action="store_true", help="names behind `transformer.`")
    ap.add_argument("--buffers", action="store_true", help="add h.N.attn.bias/masked_bias")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="F32")
    ap.add_argument("--L", type=int, default=2)
    ap.add_argument("--C", type=int, default=128)
    ap.add_argument("--V", type=int, default=300)
    ap.add_argument("--maxT", type=int, default=24)
    ap.add_argument("--T", type=int, default=20, help="tokens of the reference sequence")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--drop", help="leave this tensor out (a broken file)")
    ap.add_argument("--bad-shape", help="give this tensor one extra row (a broken file)")
    ap.add_argument("--truncate", type=int, default=0, help="cut this many bytes off the end")
    args = ap.parse_args()
    L, C, V, maxT, T = args.L, args.C, args.V, args.maxT, args.T
    if C % HEAD_SIZE != 0 or T > maxT:
        fail(f"need C a multiple of {HEAD_SIZE} and T <= maxT, got C={C} T={T} maxT={maxT}")

    rng = np.random.default_rng(args.seed)
    t = hf_tensors(L, C, V, maxT, rng)
    # the reference sees exactly the weights the file holds
    t = {n: x.to(DTYPES[args.dtype][0]).to(torch.float32) for n, x in t.items()}
    tokens = rng.integers(0, V, size=T)
    with torch.no_grad():
        logits = hf_forward(t, L, C, torch.tensor(tokens))

    out = {}
    for name, x in t.items():
        out[name] = x
        if args.buffers and name.endswith("ln_1.bias"):
            l = name.split(".")[1]
            out[f"h.{l}.attn.bias"] = torch.tril(torch.ones(maxT, maxT)).view(1, 1, maxT, maxT)
            out[f"h.{l}.attn.masked_bias"] = torch.tensor(-1e4)
    if args.drop:
        if args.drop not in out:
            fail(f"--drop {args.drop}: no such tensor")
        del out[args.drop]
    if args.bad_shape:
        if args.bad_shape not in out:
            fail(f"--bad-shape {args.bad_shape}: no such tensor")
        x = out[args.bad_shape]
        out[args.bad_shape] = torch.cat([x, x[:1]]) if x.dim() > 0 else x
    if args.prefix:
        out = {"transformer." + n: x for n, x in out.items()}
    write_safetensors(args.out, out, args.dtype, args.truncate)

    if args.expect:
        with open(args.expect, "wb") as f:
            f.write(struct.pack("<ii", T, V))
            f.write(tokens.astype("<i4").tobytes())
            f.write(logits.numpy().astype("<f4").tobytes())
    print(f"wrote {args.out} (L={L} C={C} NH={C // HEAD_SIZE} V={V} maxT={maxT} {args.dtype}"
          f"{' prefix' if args.prefix else ''}{' buffers' if args.buffers else ''})")


if __name__ == "__main__":
    main()
