"""Exercise 2's check (check.sh runs it): `./tokenizer explain TEXT` against a byte-pair encoder
written here from OpenAI's two files, data/raw/encoder.json and data/raw/vocab.bpe, with none
of the project's code.

For each piece that explain prints, this replays its merges from the piece's bytes: each must be
the adjacent pair of lowest rank at that moment (the leftmost on ties), none may be left when
they stop, and the tokens must be the piece's ids. The pieces must make up the text, and their
ids together must be `./tokenizer encode`'s. The output format is in README.md.

usage: python3 reference_bpe.py TOKENIZER_PROGRAM DATA_RAW_DIR TEXT...
"""
import json
import re
import shlex
import subprocess
import sys
import unicodedata


def bytes_to_unicode():
    """GPT-2's printable stand-in for each byte (encoder.py's bytes_to_unicode): the 188
    printable bytes stand for themselves, the other 68 for U+0100, U+0101, ... in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, shifted = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table


def _category_class(prefix):
    """The code points whose Unicode category starts with prefix ("L": the letters, \\p{L}; "N":
    the numbers, \\p{N}), as the ranges of a regex character class: Python's re has no \\p{..}."""
    ranges, start = [], None
    for cp in range(sys.maxunicode + 2):
        inside = cp <= sys.maxunicode and unicodedata.category(chr(cp)).startswith(prefix)
        if inside and start is None:
            start = cp
        elif not inside and start is not None:
            ranges.append(f"\\U{start:08x}-\\U{cp - 1:08x}")
            start = None
    return "".join(ranges)


_PRETOKEN = None


def pretokens(text):
    """The pieces GPT-2's regex cuts text (a str) into, as UTF-8 bytes: OpenAI's pattern, with
    \\p{L} and \\p{N} spelled out. Python's \\s also matches the controls 0x1C-0x1F, which Unicode's
    White_Space does not: the texts checked here have none."""
    global _PRETOKEN
    if _PRETOKEN is None:
        letter, number = _category_class("L"), _category_class("N")
        _PRETOKEN = re.compile(rf"'s|'t|'re|'ve|'m|'ll|'d| ?[{letter}]+| ?[{number}]+"
                               rf"| ?[^\s{letter}{number}]+|\s+(?!\S)|\s+")
    return [piece.encode("utf-8", "surrogateescape") for piece in _PRETOKEN.findall(text)]


def load_vocabulary(raw):
    """token bytes -> id, from encoder.json. In GPT-2 merge i of vocab.bpe makes token 256 + i,
    so a token's id is the rank of the merge that makes it: checked here on every line."""
    to_byte = {c: b for b, c in bytes_to_unicode().items()}
    with open(f"{raw}/encoder.json", encoding="utf-8") as f:
        encoder = json.load(f)
    ids = {bytes(to_byte[c] for c in text): i for text, i in encoder.items() if text != "<|endoftext|>"}
    with open(f"{raw}/vocab.bpe", encoding="utf-8") as f:
        merges = [line.split() for line in f.read().split("\n")[1:] if line]
    for i, (a, b) in enumerate(merges):
        if encoder.get(a + b) != 256 + i:
            sys.exit(f"{raw}/vocab.bpe line {i + 2} does not make token {256 + i}: run `make data` again")
    return ids


def shell_word(text):
    """text as one word of a shell command line, to show the command that failed"""
    if text.isprintable():
        return shlex.quote(text)
    return "$'" + text.encode("unicode_escape").decode("ascii").replace("'", "\\'") + "'"


def fail(*lines):
    print("\n".join(lines))
    sys.exit(1)


def show(token_bytes):
    return repr(bytes(token_bytes))[1:]


def parse(output, cmd):
    """explain's output -> [(piece bytes, [(left, right, merged)], [ids])]: the lines that start
    (after spaces) with "piece", "merge" or "ids", up to a '#'; other lines are left alone."""
    pieces = []
    for n, line in enumerate(output.decode("utf-8", "replace").split("\n"), 1):
        words = line.split("#")[0].split()
        if not words or words[0] not in ("piece", "merge", "ids"):
            continue
        try:
            if words[0] == "piece":
                pieces.append((bytes(int(h, 16) for h in words[1:]), [], None))
            elif not pieces or pieces[-1][2] is not None:
                fail(f"{cmd}: line {n} '{line.strip()}' is not inside a piece (a 'piece' line, its "
                     f"'merge' lines, then one 'ids' line: README)")
            elif words[0] == "merge":
                if len(words) != 5 or words[3] != "->":
                    raise ValueError
                pieces[-1][1].append((int(words[1]), int(words[2]), int(words[4])))
            else:
                pieces[-1] = (pieces[-1][0], pieces[-1][1], [int(w) for w in words[1:]])
        except ValueError:
            fail(f"{cmd}: cannot read line {n}: '{line.strip()}' (the format is in README.md)")
    for piece, _, ids in pieces:
        if ids is None:
            fail(f"{cmd}: the piece {show(piece)} has no 'ids' line")
    return pieces


def check_piece(piece, merges, ids, vocab, token_bytes, cmd):
    parts = [vocab[bytes([b])] for b in piece]  # one token per byte to start

    def lowest_pair():  # (rank, position) of the pair to merge next, or None
        ranks = [(vocab[token_bytes[a] + token_bytes[b]], j)
                 for j, (a, b) in enumerate(zip(parts, parts[1:])) if token_bytes[a] + token_bytes[b] in vocab]
        return min(ranks) if ranks else None

    where = f"{cmd}: in the piece {show(piece)}"
    for k, (left, right, merged) in enumerate(merges, 1):
        best = lowest_pair()
        if best is None:
            fail(f"{where}, merge {k} is {left} {right} -> {merged}, but no adjacent pair merges any more",
                 f"  the parts by then: {parts}")
        rank, j = best
        if (left, right, merged) != (parts[j], parts[j + 1], rank):
            fail(f"{where}, merge {k} is {left} {right} -> {merged}; the lowest-rank pair then is "
                 f"{parts[j]} {parts[j + 1]} -> {rank} ({show(token_bytes[rank])}, parts {j} and {j + 1})",
                 f"  the parts before merge {k}: {parts}")
        parts[j:j + 2] = [rank]
    best = lowest_pair()
    if best is not None:
        rank, j = best
        hint = ""
        if not merges and len(piece) > 1:
            hint = "\n  (a piece that is itself a token must be merged from its bytes too: README)"
        fail(f"{where}, the merges stop after {len(merges)} while {parts[j]} {parts[j + 1]} still merge into "
             f"{rank} ({show(token_bytes[rank])}){hint}")
    if ids != parts:
        fail(f"{where}, the ids line says {ids}, but the merges printed give {parts}")


def main():
    program, raw, texts = sys.argv[1], sys.argv[2], sys.argv[3:]
    vocab = load_vocabulary(raw)
    token_bytes = {i: b for b, i in vocab.items()}
    for text in texts:
        data = text.encode("utf-8")
        cmd = "./tokenizer explain " + shell_word(text)
        run = subprocess.run([program, "explain", data], capture_output=True)
        if run.returncode != 0:
            first = (run.stderr or run.stdout).decode("utf-8", "replace").strip().split("\n")[0]
            fail(f"{cmd} failed: {first}", "  (the command to write is in doc/exercises/02-tokenizer-merges/README.md)")
        pieces = parse(run.stdout, cmd)
        if b"".join(p for p, _, _ in pieces) != data:
            fail(f"{cmd}: its pieces {[show(p) for p, _, _ in pieces]} do not make up the text")
        want_pieces = pretokens(text)
        got_pieces = [p for p, _, _ in pieces]
        if got_pieces != want_pieces:
            k = next(k for k, (a, b) in enumerate(zip(got_pieces + [b""], want_pieces + [b""])) if a != b)
            fail(f"{cmd}: piece {k + 1} is {show(got_pieces[k]) if k < len(got_pieces) else 'missing'}, but "
                 f"GPT-2's regex cuts {show(want_pieces[k]) if k < len(want_pieces) else 'nothing more'} there "
                 f"(merges never cross the pre-tokenizer's pieces: pretoken_length, README)")
        for piece, merges, ids in pieces:
            check_piece(piece, merges, ids, vocab, token_bytes, cmd)
        encoded = subprocess.run([program, "encode"], input=data, capture_output=True, check=True)
        want = [int(w) for w in encoded.stdout.split()]
        got = [i for _, _, ids in pieces for i in ids]
        if got != want:
            fail(f"{cmd}: its ids {got} differ from ./tokenizer encode's {want}")


if __name__ == "__main__":
    main()
