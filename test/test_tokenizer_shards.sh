#!/usr/bin/env bash
# `./tokenizer prepare` streaming, in shards and on threads. On a generated corpus of several
# texts (Tiny Shakespeare; lines of the edge cases of test/tokenizer_edge_cases.txt between
# every kind of line break, Unicode spaces, "<" and "<|endoftext|>"; an empty text; a 700 KB
# section without a blank line, with a 20 KB line in it; a text without a final newline):
#   - the ids of all shards, in order, are the ids of each section of each text encoded whole
#     (tokenizer_encode through test/tokenizer_batch.c), each after <|endoftext|>, with and
#     without -s: cutting long sections into pieces and chunks changes no id;
#   - the shards are the same byte for byte on 1, 2 and 8 threads, and from a build with tiny chunks
#     and pieces (4 KB and 300 bytes: every section cut, every chunk carrying text over, a line
#     longer than a chunk);
#   - the two-file mode (no -n) gives the same ids; standard input ("-") gives what the file gives;
#   - names, counts, headers (llm.c's magic 20240520, version 1, count) and sizes are right, and
#     stdout holds one "wrote" line per shard and nothing else.
. "$(dirname "$0")/lib.sh"
make -s tokenizer data >/dev/null || exit 1
fresh_dir tokenizer_shards
$CC $CFLAGS -o "$dir/tokenizer_batch" test/tokenizer_batch.c -lm || exit 1
$CC $CFLAGS -DPREPARE_CHUNK_BYTES=4096 -DPREPARE_PIECE_BYTES=300 -o "$dir/tokenizer_tiny" tokenizer.c -lm || exit 1

"$PY" - "$dir" <<'PY' || exit 1
import json, random, sys
d = sys.argv[1]
r = random.Random(33)
cases = [json.loads(l) for l in open("test/tokenizer_edge_cases.txt", encoding="utf-8")
         if l.strip() and not l.startswith("#")]
breaks = ["\n"] * 8 + ["\n\n", "\n\n\n", "\n\n\n\n", " \n", "\n ", "  \n", "\n  ", "\r\n", "\t\n", "\n\t",
          "\u3000\n", "\n\u3000", "\n\u00a0", "\u00a0\n", "\n\u0085", "\n\u2028", "\n<", "\n<|endoftext|>",
          "<|endoftext|>\n", "\n<|endoftext|>\n", "\n'", "\n's", "\n1", "\n\u65e5", "\n\u00e9"]
def line():
    return "".join(r.choice(cases) + r.choice(["", " ", "  "]) for _ in range(r.randint(1, 5)))
def text(size, blank_lines):
    out, n = [], 0
    while n < size:
        s = line() + r.choice(breaks)
        if not blank_lines:
            while "\n\n" in s: s = s.replace("\n\n", "\n")
            if out and out[-1].endswith("\n") and s.startswith("\n"): s = s[1:]
        out.append(s)
        n += len(s.encode("utf-8"))
    return "".join(out)
open(f"{d}/mixed.txt", "w", encoding="utf-8").write(text(400_000, True))
long = text(350_000, False) + "x" * 20_000 + " y" * 5_000 + "\n" + text(330_000, False)
while "\n\n" in long: long = long.replace("\n\n", "\n")
open(f"{d}/long.txt", "w", encoding="utf-8").write(long.rstrip("\n") + "\n")
open(f"{d}/noeol.txt", "w", encoding="utf-8").write("".join(line() + "\n" for _ in range(300)) + "the end")
open(f"{d}/empty.txt", "w").close()
# 21 KB where every '\n' is followed by a space U+3000 (3 bytes): no place to cut it, so the tiny
# build's buffer grows past its chunk, and U+3000 lies across the ends of chunks
open(f"{d}/nocut.txt", "w", encoding="utf-8").write("x  \n\u3000" * 3000)
# A vocabulary of its own (the tokenizer file, llm.c's format, version 2): the 256 bytes, then
# every string of 2 to 4 characters of whitespace, "<", "|" and "x", and some that join a '\n'
# with Unicode spaces, then <|endoftext|>. GPT-2's own has no token with a '\n' after its first
# byte, so there a cut next to any '\n' happens to give the same ids; with tokens such as " \n "
# only a cut that is a boundary of the regex's pieces does.
import itertools
alphabet = [b" ", b"\n", b"\t", b"\r", b"<", b"|", b"x"]
toks = [bytes([i]) for i in range(256)]
for n in (2, 3, 4):
    toks += [b"".join(p) for p in itertools.product(alphabet, repeat=n)]
for u in ["\u3000", "\u00a0", "\u0085", "\u2028"]:
    toks += [("\n" + u).encode(), (u + "\n").encode(), (" " + u + "\n").encode(), ("\n" + u + " ").encode()]
toks = list(dict.fromkeys(toks))  # each once
toks.append(b"<|endoftext|>")
with open(f"{d}/ws_tok.bin", "wb") as f:
    f.write((20240328).to_bytes(4, "little") + (2).to_bytes(4, "little") +
            len(toks).to_bytes(4, "little") + (len(toks) - 1).to_bytes(4, "little") + bytes(1008))
    for t in toks: f.write(bytes([len(t)]) + t)
PY
texts="data/raw/tinyshakespeare.txt $dir/mixed.txt $dir/empty.txt $dir/long.txt $dir/nocut.txt $dir/noeol.txt"
failed=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; failed=1; fi; }

# run NAME BINARY THREADS ARGS...: prepare into $dir/NAME/s, stdout kept in $dir/NAME.out
run() {
  local name=$1 bin=$2 threads=$3; shift 3
  mkdir -p "$dir/$name"
  OMP_NUM_THREADS=$threads "$bin" "$@" "$dir/$name/s" > "$dir/$name.out" 2> "$dir/$name.err" \
    || { echo "FAIL: $name: prepare failed:"; cat "$dir/$name.err"; exit 1; }
}
run one ./tokenizer 1 prepare -n 50000 $texts
run two ./tokenizer 2 prepare -n 50000 $texts
run tiny1 "$dir/tokenizer_tiny" 1 prepare -n 50000 $texts
run tiny2 "$dir/tokenizer_tiny" 2 prepare -n 50000 $texts
run tiny8 "$dir/tokenizer_tiny" 8 prepare -n 50000 $texts
run whole ./tokenizer 2 prepare $texts
run special ./tokenizer 2 -s prepare -n 50000 $texts
run special_tiny "$dir/tokenizer_tiny" 2 -s prepare -n 50000 $texts
run own "$dir/tokenizer_tiny" 2 -k "$dir/ws_tok.bin" prepare -n 50000 $texts
run own_special "$dir/tokenizer_tiny" 2 -k "$dir/ws_tok.bin" -s prepare -n 50000 $texts
run stdin ./tokenizer 2 prepare -n 50000 data/raw/tinyshakespeare.txt - $dir/empty.txt $dir/long.txt $dir/nocut.txt $dir/noeol.txt < "$dir/mixed.txt"

same() { [ "$(ls "$dir/$1")" = "$(ls "$dir/$2")" ] && for f in "$dir/$1"/*; do cmp -s "$f" "$dir/$2/${f##*/}" || return 1; done; }
check "2 threads: every shard byte-equal to 1 thread's" "same one two"
check "4 KB chunks, 300-byte pieces, 1 thread: every shard byte-equal" "same one tiny1"
check "4 KB chunks, 300-byte pieces, 2 threads: every shard byte-equal" "same one tiny2"
check "4 KB chunks, 300-byte pieces, 8 threads (pieces finish out of order): every shard byte-equal" "same one tiny8"
check "-s: tiny chunks and pieces give the same shards" "same special special_tiny"
check "standard input (-) gives what the file gives" "same one stdin"

"$PY" - "$dir" $texts <<'PY' || failed=1
import array, os, subprocess, sys
d, texts = sys.argv[1], sys.argv[2:]
bad = 0
def fail(msg):
    global bad
    print("FAIL: " + msg); bad = 1

def read_tokens(path):  # llm.c's token file: 256 int32 (magic, version, count), then uint16 ids
    raw = open(path, "rb").read()
    head = array.array("i", raw[:1024])
    if head[0] != 20240520 or head[1] != 1 or len(raw) != 1024 + 2 * head[2]:
        fail(f"{path}: header {list(head[:3])}, {len(raw)} bytes: not an llm.c token file of version 1")
    return array.array("H", raw[1024:]).tolist()

def shards(name, size):
    files = sorted(os.listdir(f"{d}/{name}"), key=lambda f: f.split("_")[-1])
    want = [f"s_val_000000.bin"] + [f"s_train_{i:06d}.bin" for i in range(1, len(files))]
    if files != want: fail(f"{name}: shards {files[:3]}..., expected {want[:3]}...")
    ids = []
    for i, f in enumerate(files):
        part = read_tokens(f"{d}/{name}/{f}")
        if len(part) != size and i != len(files) - 1 or not 0 < len(part) <= size:
            fail(f"{name}/{f}: {len(part)} tokens, expected {size} (the last one 1..{size})")
        ids += part
    lines = open(f"{d}/{name}.out").read().splitlines()
    want_lines = [f"wrote {d}/{name}/{f}: {os.path.getsize(f'{d}/{name}/{f}') // 2 - 512} tokens" for f in files]
    if lines != want_lines: fail(f"{name}: stdout is not one 'wrote' line per shard: {lines[:2]}...")
    return ids, len(files)

def sections(b):  # as prepare cuts a text: after each "\n\n"; an empty text is one empty section
    parts = b.split(b"\n\n")
    out = [p + b"\n\n" for p in parts[:-1]]
    if parts[-1] or not out: out.append(parts[-1])
    return out

def reference(special, tok="data/gpt2_tokenizer.bin", eot=50256):
    # each section encoded whole, after <|endoftext|>, text after text
    secs = [s for t in texts for s in sections(open(t, "rb").read())]
    records = b"".join(len(s).to_bytes(4, "little") + s for s in secs)
    out = subprocess.run([f"{d}/tokenizer_batch", tok] + (["-s"] if special else []),
                         input=records, capture_output=True, check=True).stdout.decode().splitlines()
    assert len(out) == len(secs)
    ids = []
    for l in out: ids += [eot] + [int(x) for x in l.split()]
    return ids, secs

ids, n = shards("one", 50000)
ref, secs = reference(False)
long_secs = sum(len(s) > 256 * 1024 for s in secs)
print(f"{len(secs)} sections ({long_secs} longer than the default piece, 256 KB), {len(ref)} tokens, {n} shards")
if long_secs == 0: fail("the corpus has no section long enough to be cut into pieces")
if ids != ref:
    i = next((i for i in range(min(len(ids), len(ref))) if ids[i] != ref[i]), min(len(ids), len(ref)))
    fail(f"shards differ from the sections encoded whole at token {i} of {len(ref)}")
else: print("ok: the ids of the shards are those of every section encoded whole, after <|endoftext|>")
whole = read_tokens(f"{d}/whole/s_val.bin") + read_tokens(f"{d}/whole/s_train.bin")
if len(read_tokens(f"{d}/whole/s_val.bin")) != 32768 or whole != ids: fail("the two-file mode gives other ids")
else: print("ok: the two-file mode (no -n) gives the same ids: 32768 in val, the rest in train")
sids, _ = shards("special", 50000)
sref, _ = reference(True)
if sids == sref and sids != ids: print("ok: -s: the ids are those of the sections encoded whole with -s")
else: fail("-s: the shards differ from the sections encoded whole with -s (or -s changed nothing)")
own_eot = array.array("i", open(f"{d}/ws_tok.bin", "rb").read(16))[3]
for special, name in [(False, "own"), (True, "own_special")]:
    oids, _ = shards(name, 50000)
    if oids == reference(special, f"{d}/ws_tok.bin", own_eot)[0]:
        print(f"ok: {name}: with a vocabulary of whitespace and newline tokens too{' (-s)' if special else ''}")
    else: fail(f"{name}: the shards differ from the sections encoded whole with the whitespace vocabulary")
for name in ["two", "tiny1", "tiny2", "tiny8", "stdin", "special_tiny"]:
    shards(name, 50000)  # names, headers, sizes, stdout
sys.exit(bad)
PY

[ $failed -eq 0 ] && echo "PASS"
exit $failed
