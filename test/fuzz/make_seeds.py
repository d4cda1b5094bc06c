"""make_seeds.py: writes the fuzz targets' seed corpora, test/fuzz/corpus/TARGET/.

A fuzzer finds its way faster from valid inputs: each corpus holds small files that the reader
accepts (tiny models, a 300-token vocabulary) and a few edge cases it must refuse. The files are
committed; this script says how they were made and makes them again (same bytes: fixed seeds).
Needs GPT-2's encoder.json and vocab.bpe (data/raw/, which `make data` fills) and NumPy (through
dev/reference/gpt2_ref.py, whose magics and tensor shapes it uses).

    /usr/bin/python3 test/fuzz/make_seeds.py [RAW_DIR]
"""
import json
import math
import os
import random
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "dev", "reference"))
# the file formats' magics and the model's tensor shapes, as the PyTorch reference writes them
from gpt2_ref import CHECKPOINT_MAGIC, TOKENS_MAGIC, TOKENIZER_MAGIC, shapes  # noqa: E402
# GPT-2's printable stand-in for each byte, as the tokenizer exercise's reference writes it
sys.path.insert(0, os.path.join(ROOT, "doc", "exercises", "02-tokenizer-merges"))
from reference_bpe import bytes_to_unicode  # noqa: E402

RAW = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "data", "raw")
rng = random.Random(2026)

STATE_MAGIC = 20240527  # the training state is train_cpu's own (gpt2/io.h); gpt2_ref never writes one
STATE_PARAMS = 24   # fuzz_state.c's FUZZ_PARAMS
MERGES = 40         # the small vocabulary: 256 bytes, the first 40 merges, <|endoftext|>


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def header(magic, version, *ints):
    h = [magic, version, *ints] + [0] * (256 - 2 - len(ints))
    return struct.pack("<256i", *h)


def f32(values):
    return struct.pack("<%df" % len(values), *values)


def bf16(values):
    return b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0])[2:] for v in values)


def f16(values):
    return struct.pack("<%de" % len(values), *values)


def randoms(n):
    return [rng.uniform(-0.1, 0.1) for _ in range(n)]


# ---------- GPT-2's vocabulary, shrunk ----------

def small_vocab():
    """The first 256 + MERGES tokens of GPT-2 and <|endoftext|>: encoder entries and merge lines."""
    with open(os.path.join(RAW, "encoder.json"), encoding="utf-8") as f:
        encoder = json.load(f)
    with open(os.path.join(RAW, "vocab.bpe"), encoding="utf-8") as f:
        merges = f.read().split("\n")[1:1 + MERGES]
    by_id = {i: s for s, i in encoder.items() if i < 256 + MERGES}
    by_id[256 + MERGES] = "<|endoftext|>"
    return by_id, merges


def token_bytes(s, u2b):
    return bytes(u2b[c] for c in s)


def main():
    by_id, merges = small_vocab()
    u2b = {c: b for b, c in bytes_to_unicode().items()}

    # vocab: encoder.json, a NUL, vocab.bpe
    enc = {by_id[i]: i for i in sorted(by_id)}
    bpe = "#version: 0.2\n" + "\n".join(merges) + "\n"
    write("vocab", "small", json.dumps(enc, ensure_ascii=False).encode() + b"\0" + bpe.encode())
    write("vocab", "small_ascii_escapes", json.dumps(enc, indent=1).encode() + b"\0" + bpe.replace("\n", "\r\n").encode())
    write("vocab", "merge_out_of_order", json.dumps(enc).encode() + b"\0" + ("\n".join(merges[1:] + merges[:1])).encode())
    write("vocab", "empty", b"{}\0")
    with open(os.path.join(RAW, "vocab.bpe"), encoding="utf-8") as f:
        one_more = f.read().split("\n")[1 + MERGES]
    write("vocab", "more_merges_than_tokens", json.dumps(enc).encode() + b"\0" + (bpe + one_more + "\n").encode())

    # tokenizer_file: llm.c's format, version 2, from the same vocabulary
    n = len(by_id)
    body = b"".join(bytes([len(b)]) + b for b in (token_bytes(by_id[i], u2b) if i != n - 1 else b"<|endoftext|>"
                                                  for i in range(n)))
    write("tokenizer_file", "small_v2", header(TOKENIZER_MAGIC, 2, n, n - 1) + body)
    write("tokenizer_file", "eot_first_merge", header(TOKENIZER_MAGIC, 2, n, 256) + body)
    write("tokenizer_file", "truncated", header(TOKENIZER_MAGIC, 2, n, n - 1) + body[:-5])
    write("tokenizer_file", "header_only", header(TOKENIZER_MAGIC, 2, 0, 0))

    # encode: texts
    with open(os.path.join(RAW, "tinyshakespeare.txt"), "rb") as f:
        shakespeare = f.read()
    write("encode", "shakespeare", shakespeare[:600])
    write("encode", "special", b"<|endoftext|>Hello<|endoftext|><|endoftext|> world <|endoftext")
    write("encode", "spaces", b"a  b\t\t\n\n   c \r\n  \xe2\x80\x83x  ")
    write("encode", "contractions", b"It's they'll I'm we'VE don't 're 'd's")
    write("encode", "unicode", "caf\u00e9 \u4e2d\u6587 \U0001F600\U0001F600 \u0661\u0662 x\u0301".encode())
    write("encode", "invalid_utf8", b"a\xc0\x80b \xed\xa0\x80c \xf4\x90\x80\x80d \x80e \xe2\x82 f\xf0\x9f\x98")
    write("encode", "numbers", b"12345678901234567890 3.14159 -42 1e10")

    # decode: id lists
    write("decode", "hello", b"15496 11 995 0")
    write("decode", "lines", b"50256\n198\t 628\r\n00040")
    write("decode", "out_of_range", b"1 50257")
    write("decode", "not_a_number", b"12 3x 4")
    write("decode", "huge", b"99999999999999999999999")

    # checkpoint: llm.c format, maxT=8 V=10 (padded to 16) L=1 or 2, NH=2, C=8
    def llmc(version, L, maxT=8, V=10, Vp=16, NH=2, C=8):
        count = sum(math.prod(shape) for shape in shapes(maxT, Vp, L, C).values())
        values = randoms(count)
        raw = f32(values) if version == 3 else bf16(values)
        return header(CHECKPOINT_MAGIC, version, maxT, V, L, NH, C, Vp) + raw
    write("checkpoint", "f32_L1", llmc(3, 1))
    write("checkpoint", "bf16_L2", llmc(5, 2))
    write("checkpoint", "f32_truncated", llmc(3, 1)[:-4])
    write("checkpoint", "version4", header(CHECKPOINT_MAGIC, 4, 8, 10, 1, 2, 8, 16))

    # safetensors: GPT-2 in Hugging Face's names, C=64 (one head), V=5, maxT=3, L=1
    def safetensors(tensors, dtype="F16", blobs_by_name=None):
        head, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
        for name, shape in tensors:
            count = 1
            for d in shape:
                count *= d
            pack = {"F32": f32, "F16": f16, "BF16": bf16}[dtype]
            blob = (blobs_by_name or {}).get(name) or pack(randoms(count))
            head[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
            blobs.append(blob)
            offset += len(blob)
        text = json.dumps(head, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        return struct.pack("<Q", len(text)) + text + b"".join(blobs)

    def gpt2_tensors(prefix, V=5, maxT=3, C=64, L=1, buffers=False):
        t = [(prefix + "wte.weight", [V, C]), (prefix + "wpe.weight", [maxT, C])]
        for l in range(L):
            p = "%sh.%d." % (prefix, l)
            t += [(p + "ln_1.weight", [C]), (p + "ln_1.bias", [C]), (p + "attn.c_attn.weight", [C, 3 * C]),
                  (p + "attn.c_attn.bias", [3 * C]), (p + "attn.c_proj.weight", [C, C]), (p + "attn.c_proj.bias", [C]),
                  (p + "ln_2.weight", [C]), (p + "ln_2.bias", [C]), (p + "mlp.c_fc.weight", [C, 4 * C]),
                  (p + "mlp.c_fc.bias", [4 * C]), (p + "mlp.c_proj.weight", [4 * C, C]), (p + "mlp.c_proj.bias", [C])]
            if buffers:
                t += [(p + "attn.bias", [1, 1, maxT, maxT]), (p + "attn.masked_bias", [])]
        return t + [(prefix + "ln_f.weight", [C]), (prefix + "ln_f.bias", [C])]

    write("safetensors", "gpt2_f16", safetensors(gpt2_tensors("")))
    write("safetensors", "gpt2_bf16_prefix_buffers", safetensors(gpt2_tensors("transformer.", buffers=True), "BF16"))
    write("safetensors", "two_tensors_f32", safetensors([("a", [2, 3]), ("b.c", [4])], "F32"))
    write("safetensors", "scalar_and_empty", safetensors([("s", []), ("e", [0, 7])], "F32"))
    write("safetensors", "header_only", b"\x02\0\0\0\0\0\0\0{}")

    # tokens: ids below fuzz_tokens.c's V=50, and one above
    def tokens(ids):
        return header(TOKENS_MAGIC, 1, len(ids)) + struct.pack("<%dH" % len(ids), *ids)
    write("tokens", "t9", tokens([rng.randrange(50) for _ in range(9)]))
    write("tokens", "t40", tokens([rng.randrange(50) for _ in range(40)]))
    write("tokens", "id_too_large", tokens([1, 2, 3, 50, 4, 5, 6, 7, 8, 9]))
    write("tokens", "count_too_large", header(TOKENS_MAGIC, 1, 1000) + b"\1\0" * 10)

    # shards: fuzz_shards.c's input is a count byte, the first two files' lengths (uint16), then
    # the files end to end
    def shards(*files):
        lengths = [len(f) for f in files[:2]] + [0, 0]
        return bytes([len(files) - 1]) + struct.pack("<2H", *lengths[:2]) + b"".join(files)
    srng = random.Random(33)  # its own, so that the seeds written after these stay as they were
    write("shards", "one", shards(tokens([srng.randrange(50) for _ in range(20)])))
    write("shards", "three", shards(tokens([srng.randrange(50) for _ in range(9)]), tokens([1, 2]),
                                   tokens([srng.randrange(50) for _ in range(30)])))
    write("shards", "second_too_large", shards(tokens([1, 2, 3, 4, 5, 6, 7]), tokens([1, 2, 3, 50, 4, 5])))
    write("shards", "second_version_2", shards(tokens([1, 2, 3, 4, 5, 6, 7]), header(TOKENS_MAGIC, 2, 2) + b"\1\0\0\0" * 2))

    # state: fuzz_state.c's model of 24 parameters
    def state(step, B, T, epoch, batch, rngstate):
        h = list(struct.unpack("<256i", header(STATE_MAGIC, 1, step, B, T)))
        for k, v in ((8, epoch), (10, batch), (12, rngstate), (14, STATE_PARAMS)):
            h[k], h[k + 1] = struct.unpack("<2i", struct.pack("<Q", v))
        return struct.pack("<256i", *h) + f32(randoms(2 * STATE_PARAMS))
    write("state", "step5", state(5, 4, 64, 0, 5, 0x9E3779B97F4A7C15))
    write("state", "far_position", state(1000, 2, 3, 7, 3, 12345))
    write("state", "zero_batch", state(3, 0, 64, 0, 1, 99))

    # the model loader's own checks, each on an otherwise complete model, where one changed byte
    # does not reach them: lm_head.weight tied to wte (a changed byte unties it), an unknown
    # tensor, a tensor of the wrong shape, C not a multiple of 64
    wte = f16(randoms(5 * 64))
    tied = gpt2_tensors("") + [("lm_head.weight", [5, 64])]
    write("safetensors", "gpt2_lm_head_tied", safetensors(tied, blobs_by_name={"wte.weight": wte, "lm_head.weight": wte}))
    write("safetensors", "gpt2_unknown_tensor", safetensors(gpt2_tensors("") + [("h.0.attn.extra", [3])]))
    wrong = [(n, [64, 64] if n == "h.0.mlp.c_fc.weight" else s) for n, s in gpt2_tensors("")]
    write("safetensors", "gpt2_wrong_shape", safetensors(wrong))
    write("safetensors", "gpt2_c32", safetensors(gpt2_tensors("", C=32)))

    # json: JSON texts for the reader alone (gpt2/json.h), valid ones and a few edge cases: a
    # request line of the kind text generation will read, every kind of value, every escape,
    # numbers at the edges of the grammar and of the doubles, nesting at the depth limit
    texts = {
        "request": b'{"prompt": "Once upon a time", "max_tokens": 64, "temperature": 0.8, "top_k": 40, '
                   b'"top_p": 0.95, "seed": 7, "stop": null, "echo": false}\n',
        "values": b' [0, -1, 0.8, 1e-3, 2E+5, -0.0e0, 123456789012345, true, false, null, "", {}, []] ',
        "escapes": b'{"a\\"\\\\\\/\\b\\f\\n\\r\\t": "\\u00e9\\u4E2D\\ud83d\\ude00", "raw": "caf\xc3\xa9 \xf0\x9f\x98\x80"}',
        "numbers_edges": b"[1.7976931348623157e308, 5e-324, 1e-400, -9007199254740993, 0.000001]",
        "out_of_range": b"[1, 2e308]",
        "leading_zero": b"[01]",
        "lone_surrogate": b'["\\ud800x"]',
        "nested_16": b"[" * 15 + b'{"a": 1}' + b"]" * 15,
        "nested_17": b"[" * 17 + b"]" * 17,
    }
    for name, text in texts.items():
        write("json", name, text)

    # request: files of requests as infer -f reads them (gpt2/requests.h): every field, null,
    # unknown fields, blank and CRLF lines, each kind of complaint, text that is not JSON, escapes,
    # a line over fuzz_request.c's small limit of 64 bytes, a last line without a newline; and
    # bytes that are not UTF-8, for the writer
    requests = {
        "fields": b'{"prompt": "Once upon a time", "max_tokens": 64, "temperature": 0.8, "top_k": 40, '
                  b'"top_p": 0.95, "seed": 7}\n{"prompt": "x"}\n'
                  b'{"prompt": "", "max_tokens": null, "temperature": null, "top_k": null, "top_p": null, '
                  b'"seed": null}\n',
        "unknown_and_blank": b'\n  \t\r\n{"model": "gpt2", "prompt": "a", "stop": ["\\n"], "echo": false, '
                             b'"n": {"k": [1, {}]}}\r\n\n',
        "complaints": b'{"prompt": "a", "max_tokens": -3}\n{"prompt": "a", "temperature": "hot"}\n'
                      b'{"prompt": "a", "top_k": 2.5}\n{"prompt": "a", "top_p": 0}\n'
                      b'{"prompt": "a", "seed": 9007199254740992}\n{}\n[1]\n{"prompt": 1}\n'
                      b'{"prompt": "a", "top_k": 1, "top_k": 2}\n',
        "not_json": b'{"prompt": "a"} x\n{"prompt": "a", "seed": 1e999}\n{"prompt": "abc\nhello\n'
                    b'{"prompt": "\xff"}\n',
        "escapes": b'{"prompt": "caf\\u00e9 \\ud83d\\ude00 a\\u0000b \\"q\\" \\\\ \\/ \\t", "\\u0074op_k": 3}\n',
        "long_line": b'{"prompt": "' + b"x" * 80 + b'"}\n{"prompt": "after"}',
        "text_not_utf8": b"a\xe2\x82\n\x80\x80\xc0\x80\xed\xa0\x80\xf4\x90\x80\x80\xf0\x9f\x98",
    }
    for name, text in requests.items():
        write("request", name, text)

    # completion: bodies of the server's completions API (gpt2/completions.h) as clients send
    # them: every field, a prompt array, streaming with its options, stop strings, the fields the
    # server cannot honour at their neutral values and not, fields nobody knows, a body of
    # requests.h's fields alone (read alike by request_parse), complaints, as many prompts as
    # allowed, a long model name, and a body cut short
    bodies = {
        "every_field": {"model": "gpt2", "prompt": "Once upon a time", "max_tokens": 32, "temperature": 0.8,
                        "top_k": 40, "top_p": 0.95, "seed": 7, "stop": ["\n\n", "THE END"], "n": 2,
                        "stream": True, "stream_options": {"include_usage": True}},
        "prompt_array": {"prompt": ["a", "caf\u00e9 \U0001F600", ""], "n": 16, "stop": "\n", "stream": False,
                         "stream_options": None},
        "neutral": {"prompt": "x", "echo": False, "logprobs": None, "suffix": None, "best_of": 1,
                    "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}, "user": "me"},
        "not_neutral": {"prompt": "x", "echo": True, "logprobs": 1, "best_of": 2, "logit_bias": {"50256": -100}},
        "unknown_nested": {"prompt": "x", "metadata": {"a": [1, {"b": None}], "c": "d"}, "tools": [[], {}],
                           "stop": None, "seed": None},
        "request_fields": {"prompt": "a\u0000b", "max_tokens": 5, "temperature": 0, "top_k": 0, "top_p": 1,
                           "seed": 9007199254740991, "stop": ["a", "b", "c", "d"]},
        "complaints": {"prompt": [], "n": 17, "stream": "yes", "stop": ["a", "b", "c", "d", "e"]},
        "prompts_64": {"prompt": [str(i) for i in range(64)]},  # COMPLETION_MAX_PROMPTS
    }
    for name, body in bodies.items():
        write("completion", name, json.dumps(body).encode())
    # a model name near COMPLETION_MAX_MODEL (256 bytes), characters of 1 to 4 bytes across it
    write("completion", "long_model", json.dumps({"prompt": "x", "model": "m" * 250 + "\u00e9\u4e2d\U0001F600" * 3},
                                                 ensure_ascii=False).encode())
    write("completion", "compact", b'{"prompt":["x","y"],"stop":[""],"n":1.5,"model":42}')
    write("completion", "not_json", b'{"prompt": "a", "stop": ["ab')


if __name__ == "__main__":
    main()
