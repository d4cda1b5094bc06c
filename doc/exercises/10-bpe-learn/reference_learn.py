"""Exercise 10's check (check.sh runs it): `./tokenizer learn TEXT N ENCODER_JSON VOCAB_BPE`
against a BPE learner written here from the definition in README.md, with none of the project's
C code. The pieces come from GPT-2's regex (pretokens, in exercise 2's reference_bpe.py).

For each corpus below it writes the text, runs the learner, and compares vocab.bpe merge by
merge and encoder.json entry by entry with its own; then `./tokenizer vocab` must accept the two
files, and encoding the corpus with the tokenizer file they make, then decoding, must give the
corpus back.

usage: python3 reference_learn.py TOKENIZER_PROGRAM DATA_RAW_DIR WORK_DIR
"""
import json
import os
import subprocess
import sys
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "02-tokenizer-merges"))
from reference_bpe import bytes_to_unicode, pretokens  # noqa: E402


def learn(data, n):
    """The merges (left id, right id) that README.md's definition learns from data (bytes), at
    most n of them, and each token's bytes (id -> bytes)."""
    text = data.decode("utf-8", "surrogateescape")  # a byte that is not UTF-8: one character
    words = {tuple(piece): count for piece, count in Counter(pretokens(text)).items()}
    token = {b: bytes([b]) for b in range(256)}
    merges = []
    while len(merges) < n:
        counts = Counter()
        for word, count in words.items():
            for pair in zip(word, word[1:]):  # every position: "aaa" holds (a, a) twice
                counts[pair] += count
        if not counts:  # every piece is one token
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))  # most frequent, then lowest ids
        new = 256 + len(merges)
        merges.append(best)
        token[new] = token[best[0]] + token[best[1]]
        merged = Counter()
        for word, count in words.items():
            out, i = [], 0
            while i < len(word):  # left to right: "a a a" -> "aa a"
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(new)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += count
        words = merged
    return merges, token


# name, text, merges to ask for, what the corpus checks (printed when it fails). Every pair
# occurs at least twice except in "stop", so a learner that stops at a count of 1 fails there.
CORPORA = [
    ("pieces", b"!ab!ab!ab!ab\n" * 3, 10,
     "merges never cross the pre-tokenizer's pieces: cut the text with pretoken_length first"),
    ("ties", b"zy ab ba az cd dc\n" * 2, 12,
     "on a tie the pair with the lowest left id wins, then the lowest right id"),
    ("frequency", b" the the the the the xa xb xc\n" * 2, 10,
     "a pair's count is the sum over the distinct pieces it is in of how often the piece occurs"),
    ("overlap", b"aaa bcbc bcbc bcbc aaa aaa aaa ab\n" * 2, 10,
     "a pair is counted at every position (\"aaa\" holds a,a twice) and merged left to right "
     "(\"aaa\" becomes \"aa\" \"a\")"),
    ("stop", b"hello world, hello there\n", 200,
     "a pair that occurs once is merged too, and learning stops when every piece is one token"),
    ("bytes", "naïve café \"quoted\" back\\slash\ttab\r\n日本語 日本 🙂🙂 ".encode("utf-8")
     + b"\xff\xfe\x80 \xad\xa0 \x00\x01 <|endoftext|>\n", 80,
     "bytes above 0x7f are tokens 128..255, every byte is written in GPT-2's byte mapping, and "
     "\" and \\ are escaped in encoder.json"),
]


def to_text(table, b):
    return "".join(table[x] for x in b)


def fail(*lines):
    print("\n".join(lines))
    sys.exit(1)


def read_merges(path, to_byte, where):
    """vocab.bpe -> [(left bytes, right bytes)]"""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if not lines or lines[0] != "#version: 0.2":
        fail(f"{where}: the first line of vocab.bpe is {lines[0][:40]!r}, not '#version: 0.2'")
    merges = []
    for k, line in enumerate(lines[1:], 2):
        if line == "":
            continue
        halves = line.split(" ")
        if len(halves) != 2 or not all(halves) or any(c not in to_byte for h in halves for c in h):
            fail(f"{where}: vocab.bpe line {k} {line!r} is not two tokens in GPT-2's byte mapping, "
                 f"separated by one space")
        merges.append(tuple(bytes(to_byte[c] for c in h) for h in halves))
    return merges


def check_corpus(program, work, name, data, n, hint, table, to_byte):
    corpus = os.path.join(work, f"{name}.txt")
    enc, bpe, tok = (os.path.join(work, f"{name}.{ext}") for ext in ("json", "bpe", "bin"))
    with open(corpus, "wb") as f:
        f.write(data)
    for p in (enc, bpe):
        if os.path.exists(p):
            os.remove(p)
    cmd = f"./tokenizer learn {corpus} {n} {enc} {bpe}"
    where = f"corpus '{name}' ({cmd})"
    run = subprocess.run([program, "learn", corpus, str(n), enc, bpe], capture_output=True)
    if run.returncode != 0:
        first = (run.stderr or run.stdout).decode("utf-8", "replace").strip().split("\n")[0]
        if "unknown command" in first:
            fail("exercise 10: ./tokenizer has no command learn yet: "
                 "doc/exercises/10-bpe-learn/README.md says what to write")
        fail(f"{where} failed: {first} (this corpus checks that {hint})")
    for p in (enc, bpe):
        if not os.path.exists(p):
            fail(f"{where} wrote no {p}")

    want_merges, token = learn(data, n)
    want = [(token[a], token[b]) for a, b in want_merges]
    got = read_merges(bpe, to_byte, where)
    for k, (g, w) in enumerate(zip(got, want)):
        if g != w:
            fail(f"{where}: merge {k} (vocab.bpe line {k + 2}) is {g[0]!r} + {g[1]!r}, the definition's "
                 f"is {w[0]!r} + {w[1]!r} (this corpus checks that {hint})")
    if len(got) < len(want):
        fail(f"{where}: vocab.bpe has {len(got)} merges, the definition learns {len(want)}; the next is "
             f"{want[len(got)][0]!r} + {want[len(got)][1]!r} (this corpus checks that {hint})")
    if len(got) > len(want):
        fail(f"{where}: vocab.bpe has {len(got)} merges, the definition learns {len(want)}"
             + (", then every piece is one token" if len(want) < n else f" (N is {n})"))

    with open(enc, "rb") as f:
        raw = f.read()
    try:
        encoder = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        fail(f"{where}: encoder.json is not valid JSON ({e}): are \" and \\ escaped?")
    expect = {to_text(table, b): i for i, b in token.items()}
    expect["<|endoftext|>"] = len(token)
    if not isinstance(encoder, dict):
        fail(f"{where}: encoder.json is not a JSON object")
    for text, i in sorted(expect.items(), key=lambda e: e[1]):
        if encoder.get(text) != i:
            fail(f"{where}: encoder.json gives {text!r} the id {encoder.get(text)}, the definition {i} "
                 f"(ids 0..255: byte b is id b; merge i makes 256 + i; <|endoftext|> last)")
    if len(encoder) != len(expect):
        extra = next(t for t in encoder if t not in expect)
        fail(f"{where}: encoder.json has {len(encoder)} tokens, the definition {len(expect)}: "
             f"{extra!r} is one too many")

    run = subprocess.run([program, "vocab", enc, bpe, tok], capture_output=True)
    if run.returncode != 0:
        fail(f"{where}: ./tokenizer vocab refuses the files: "
             + (run.stderr or run.stdout).decode("utf-8", "replace").strip().split("\n")[0])
    ids = subprocess.run([program, "-k", tok, "encode", corpus], capture_output=True, check=True).stdout
    back = subprocess.run([program, "-k", tok, "decode"], input=ids, capture_output=True, check=True).stdout
    if back != data:
        fail(f"{where}: encoding the corpus with the learned tokenizer, then decoding, does not give it back")
    return len(data), len(ids.split())


def main():
    program, raw, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    table = bytes_to_unicode()
    to_byte = {c: b for b, c in table.items()}
    with open(os.path.join(raw, "tinyshakespeare.txt"), "rb") as f:
        shakespeare = f.read(20000)
    corpora = CORPORA + [("shakespeare", shakespeare, 300,
                          "a real text gives the definition's merges; the corpora before it each check one rule")]
    for name, data, n, hint in corpora:
        size, tokens = check_corpus(program, work, name, data, n, hint, table, to_byte)
        print(f"corpus {name}: {size} bytes, {tokens} tokens with the learned merges")


if __name__ == "__main__":
    main()
