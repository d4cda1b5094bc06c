"""hf_ref.py: small GPT-2 models in Hugging Face's safetensors layout, and their PyTorch logits.

The check for the safetensors loader (gpt2_read_safetensors, gpt2/checkpoint.h) and for infer.c:
this script writes a random GPT-2 the way Hugging Face publishes `model.safetensors`, computes
its logits on random tokens with a PyTorch forward written in that same layout, and the C test
(test/infer_check.c, `hf` mode) loads the file and compares. The `safetensors` package is not
available here, so the file is written by hand (write_safetensors below): an 8-byte little-endian
header length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}} padded
with spaces to a multiple of 8, then the raw tensor bytes.

And the check for the exporter (infer --export DIR, gpt2_write_hf): --check-export DIR reads
DIR/model.safetensors and DIR/config.json here, by hand again (read_safetensors), without the C
code; checks the file's layout against what transformers' GPT2LMHeadModel.save_pretrained writes
(the names behind `transformer.`, no lm_head.weight, F32, the format metadata, the data 8-byte
aligned and laid end to end) and config.json against the tensors; with --checkpoint, that every
tensor is the llm.c checkpoint's, bit for bit (the Conv1D matrices transposed, wte without its
padding rows); and writes --expect: the logits of hf_forward on the file's tensors, with
config.json's n_head, for test/infer_check.c to compare with the C logits of the checkpoint.
--bf16-checkpoint IN OUT writes the llm.c checkpoint IN (float32) as a bfloat16 one (version 5).

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
    /usr/bin/python3 dev/reference/hf_ref.py --check-export DIR [--checkpoint MODEL.bin] --expect m.expect
        [--T 20] [--seed 1]
    /usr/bin/python3 dev/reference/hf_ref.py --bf16-checkpoint IN.bin OUT.bin

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


def hf_forward(t, L, C, tokens, NH=None):
    """Logits (T, V) of GPT-2 in transformers' layout: Conv1D computes x @ W + b. NH: the heads
    (config.json's n_head), by default heads of 64 channels."""
    NH = NH or C // HEAD_SIZE
    T = len(tokens)
    x = t["wte.weight"][tokens] + t["wpe.weight"][:T]
    for l in range(L):
        p = f"h.{l}."
        h = layernorm(x, t[p + "ln_1.weight"], t[p + "ln_1.bias"])
        qkv = h @ t[p + "attn.c_attn.weight"] + t[p + "attn.c_attn.bias"]
        y = attention(qkv.unsqueeze(0), NH).squeeze(0)
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


# ---------- reading an export ----------

LAYER_TENSORS = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                 "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                 "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"]
# transformers' name (after h.N.) -> the llm.c tensor, and whether the file holds its transpose
LLMC_OF = {"ln_1.weight": ("ln1w", False), "ln_1.bias": ("ln1b", False),
           "attn.c_attn.weight": ("qkvw", True), "attn.c_attn.bias": ("qkvb", False),
           "attn.c_proj.weight": ("attprojw", True), "attn.c_proj.bias": ("attprojb", False),
           "ln_2.weight": ("ln2w", False), "ln_2.bias": ("ln2b", False),
           "mlp.c_fc.weight": ("fcw", True), "mlp.c_fc.bias": ("fcb", False),
           "mlp.c_proj.weight": ("fcprojw", True), "mlp.c_proj.bias": ("fcprojb", False)}


def read_safetensors(path):
    """(metadata, {name: float32 numpy array}, {name: dtype}, header length) of a safetensors file,
    checked as the
    format says: the JSON header, each tensor's byte range matching its dtype and shape, the
    ranges laid end to end from 0 to the end of the file."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        fail(f"{path}: only {len(data)} bytes")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        fail(f"{path}: header length {n} beyond the file's {len(data)} bytes")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", None)
    body = data[8 + n:]
    np_dtypes = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}
    tensors, dtypes, end = {}, {}, 0
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, stop = e["data_offsets"]
        if begin != end:
            fail(f"{path}: tensor {name} starts at {begin}, the one before ends at {end}")
        dtype = np_dtypes.get(e["dtype"]) or fail(f"{path}: tensor {name}: dtype {e['dtype']}")
        a = np.frombuffer(body[begin:stop], dtype=dtype)
        if a.nbytes != stop - begin or a.size != int(np.prod(e["shape"], dtype=np.int64)):
            fail(f"{path}: tensor {name}: {stop - begin} bytes for shape {e['shape']} {e['dtype']}")
        if e["dtype"] == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = a.astype(np.float32).reshape(e["shape"])
        dtypes[name] = e["dtype"]
        end = stop
    if end != len(body):
        fail(f"{path}: the tensors end at byte {end} of {len(body)} bytes of data")
    return meta, tensors, dtypes, n


def read_llmc(path):
    """An llm.c checkpoint, version 3 (float32) or 5 (bfloat16): (config, {name: float32 array})."""
    with open(path, "rb") as f:
        h = np.frombuffer(f.read(4 * gpt2_ref.HEADER_INTS), dtype="<i4")
        if h[0] != gpt2_ref.CHECKPOINT_MAGIC or h[1] not in (3, 5):
            fail(f"{path}: not an llm.c checkpoint of version 3 or 5")
        maxT, V, L, NH, C, Vp = (int(x) for x in h[2:8])
        params = {}
        for name, shape in gpt2_ref.shapes(maxT, Vp, L, C).items():
            n = int(np.prod(shape))
            if h[1] == 3:
                a = np.frombuffer(f.read(4 * n), dtype="<f4")
            else:
                a = (np.frombuffer(f.read(2 * n), dtype="<u2").astype(np.uint32) << 16).view(np.float32)
            if a.size != n:
                fail(f"{path} is truncated in tensor {name}")
            params[name] = a.reshape(shape)
    return (maxT, V, L, NH, C, Vp), params


def write_bf16_checkpoint(src, dst):
    """The float32 checkpoint src as version 5: every tensor rounded to bfloat16 (to nearest even)."""
    config, params = gpt2_ref.read_checkpoint(src)
    maxT, V, L, NH, C, Vp = config
    h = np.zeros(gpt2_ref.HEADER_INTS, dtype="<i4")
    h[:8] = [gpt2_ref.CHECKPOINT_MAGIC, 5, maxT, V, L, NH, C, Vp]
    with open(dst, "wb") as f:
        f.write(h.tobytes())
        for name in gpt2_ref.NAMES:
            t = torch.from_numpy(params[name].astype(np.float32)).to(torch.bfloat16)
            f.write(t.view(torch.int16).numpy().astype("<i2").tobytes())
    print(f"wrote {dst} (bfloat16, from {src})")


def check_export(args):
    """--check-export DIR: the export's layout and config.json, its tensors against --checkpoint,
    and its PyTorch logits into --expect."""
    d = args.check_export
    problems = []
    meta, t, dtypes, header_len = read_safetensors(os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    if meta != {"format": "pt"}:
        problems.append(f"__metadata__ is {meta}, transformers needs {{'format': 'pt'}}")
    if set(dtypes.values()) != {"F32"}:
        problems.append(f"dtypes {sorted(set(dtypes.values()))}, expected F32 alone")
    if (8 + header_len) % 8 != 0:
        problems.append(f"the data starts at byte {8 + header_len}, not a multiple of 8")
    wte, wpe = t.get("transformer.wte.weight"), t.get("transformer.wpe.weight")
    if wte is None or wpe is None:
        fail(f"{d}: no transformer.wte.weight or transformer.wpe.weight")
    (V, C), maxT = wte.shape, wpe.shape[0]
    L = cfg.get("n_layer", -1)
    names = ["transformer.wte.weight", "transformer.wpe.weight"]
    names += [f"transformer.h.{l}.{n}" for l in range(L) for n in LAYER_TENSORS]
    names += ["transformer.ln_f.weight", "transformer.ln_f.bias"]
    extra, missing = [n for n in t if n not in names], [n for n in names if n not in t]
    if extra or missing:   # save_pretrained's names: lm_head.weight, tied to wte, is not among them
        problems.append(f"tensors not in transformers' layout: {extra} too many, {missing} missing")
    elif list(t) != names:
        problems.append(f"tensors in the order {list(t)}, not the model's {names}")
    want = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": V,
            "n_positions": maxT, "n_ctx": maxT, "n_embd": C, "n_layer": L,
            "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True,
            "bos_token_id": 50256 if V == 50257 else None, "eos_token_id": 50256 if V == 50257 else None,
            "torch_dtype": "float32", "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    for k, v in want.items():
        if cfg.get(k, "(missing)") != v:
            problems.append(f"config.json {k} = {cfg.get(k, '(missing)')}, expected {v}")
    NH = cfg.get("n_head", 0)
    if not isinstance(NH, int) or NH <= 0 or C % NH != 0:
        problems.append(f"config.json n_head = {NH} does not divide n_embd {C}")
        NH = 1
    for name, x in t.items():
        if not name.startswith("transformer.h.") or name.count(".") < 3:
            continue
        rest = name.split(".", 3)[3]
        out, inn = {"attn.c_attn.weight": (3 * C, C), "attn.c_proj.weight": (C, C),
                    "mlp.c_fc.weight": (4 * C, C), "mlp.c_proj.weight": (C, 4 * C)}.get(rest, (None, None))
        if out is not None and x.shape != (inn, out):
            problems.append(f"{name} has shape {x.shape}, Conv1D's (in, out) is ({inn}, {out})")
    if args.checkpoint:
        (cmaxT, cV, cL, cNH, cC, cVp), p = read_llmc(args.checkpoint)
        if (cmaxT, cV, cL, cNH, cC) != (maxT, V, L, NH, C):
            problems.append(f"shape maxT V L NH C = {(maxT, V, L, NH, C)}, the checkpoint's "
                            f"{(cmaxT, cV, cL, cNH, cC)}")
        else:
            ours = {"transformer.wte.weight": p["wte"][:V], "transformer.wpe.weight": p["wpe"],
                    "transformer.ln_f.weight": p["lnfw"], "transformer.ln_f.bias": p["lnfb"]}
            for l in range(L):
                for n, (llmc, transposed) in LLMC_OF.items():
                    ours[f"transformer.h.{l}.{n}"] = p[llmc][l].T if transposed else p[llmc][l]
            differ = [n for n in names if n in t and not np.array_equal(t[n].view(np.uint32),
                                                                        np.ascontiguousarray(ours[n]).view(np.uint32))]
            if differ:
                problems.append(f"not the checkpoint's bits: {differ}")
            else:
                print(f"ok    all {len(names)} tensors are the checkpoint's bit for bit "
                      f"(Conv1D transposed, wte without its {cVp - V} padding rows)")
    for p_ in problems:
        print(f"FAIL: {p_}")
    if problems:
        sys.exit(1)
    print(f"ok    layout and config.json: L={L} NH={NH} C={C} V={V} maxT={maxT}, {len(t)} tensors")
    if args.expect:
        T = min(args.T, maxT)
        tokens = np.random.default_rng(args.seed).integers(0, V, size=T)
        plain = {n[len("transformer."):]: torch.from_numpy(x) for n, x in t.items()}
        with torch.no_grad():
            logits = hf_forward(plain, L, C, torch.tensor(tokens), NH)
        with open(args.expect, "wb") as f:
            f.write(struct.pack("<ii", T, V))
            f.write(tokens.astype("<i4").tobytes())
            f.write(logits.numpy().astype("<f4").tobytes())
        print(f"wrote {args.expect}: PyTorch's logits of the export on {T} tokens")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="safetensors file to write")
    ap.add_argument("--check-export", metavar="DIR", help="check the export in DIR (see above)")
    ap.add_argument("--checkpoint", help="with --check-export: the llm.c checkpoint it was made from")
    ap.add_argument("--bf16-checkpoint", nargs=2, metavar=("IN", "OUT"), help="IN as a bfloat16 checkpoint")
    ap.add_argument("--expect", help="file for the tokens and PyTorch logits")
    ap.add_argument("--prefix", action="store_true", help="names behind `transformer.`")
    ap.add_argument("--buffers", action="store_true", help="add h.N.attn.bias/masked_bias")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="F32")
    gpt2_ref.int_options(ap, L=2, C=128, V=300, maxT=24)
    ap.add_argument("--T", type=int, default=20, help="tokens of the reference sequence")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--drop", help="leave this tensor out (a broken file)")
    ap.add_argument("--bad-shape", help="give this tensor one extra row (a broken file)")
    ap.add_argument("--truncate", type=int, default=0, help="cut this many bytes off the end")
    args = ap.parse_args()
    if args.bf16_checkpoint:
        return write_bf16_checkpoint(*args.bf16_checkpoint)
    if args.check_export:
        return check_export(args)
    if not args.out:
        fail("give --out FILE, --check-export DIR or --bf16-checkpoint IN OUT")
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
