#!/usr/bin/env python3
"""Generates gpt2/unicode.h: the character classes that GPT-2's pre-tokenizer regex needs.

The regex `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+` sorts
every character into one of four classes, and they never overlap:
    letter      \\p{L}: general category Lu, Ll, Lt, Lm or Lo
    number      \\p{N}: general category Nd, Nl or No
    whitespace  \\s: the Unicode property White_Space (PropList.txt), as in Rust's regex crate,
                which tiktoken uses. So U+0085, U+00A0, U+2028 and U+3000 are whitespace, while
                U+200B (zero-width space), U+180E and U+FEFF are not: they are "other".
    other       everything else, unassigned code points included.

Source: Debian's unicode-data package (/usr/share/unicode), Unicode 15.0 in Debian 12. tiktoken
1.0.22 was built with regex-syntax 0.8.5, whose tables are Unicode 16.0: it knows 5,004 letters
and numbers that 15.0 did not (CJK Extension I, Garay, Todhri, ...). Those are listed in the
committed file dev/data/unicode16_additions.txt and added on top, so that our classes are exactly
tiktoken's. To remake that file, see dev/data/unicode16_classes.mjs and --classes16 below.

The output is a two-stage table, the classic compact form of a per-code-point property: the
code point's high bits (cp >> 8) pick one of a few distinct 256-entry blocks (most blocks are
all "other", or all letters, and are stored once), its low 8 bits pick the entry.

Usage: /usr/bin/python3 dev/data/gen_unicode_tables.py [--ucd DIR] [--classes16 FILE]
  --ucd DIR          folder with UnicodeData.txt and PropList.txt (default /usr/share/unicode;
                     `apt-get install unicode-data` provides it)
  --classes16 FILE   first rewrite dev/data/unicode16_additions.txt from FILE, the Unicode 16.0
                     classes printed by dev/data/unicode16_classes.mjs
"""
import argparse
import os
import sys

OTHER, LETTER, NUMBER, WHITESPACE = 0, 1, 2, 3
CLASS_OF_NAME = {"L": LETTER, "N": NUMBER, "WS": WHITESPACE}
NAME_OF_CLASS = {v: k for k, v in CLASS_OF_NAME.items()}
MAX_CP = 0x110000
BLOCK_SHIFT = 8
BLOCK = 1 << BLOCK_SHIFT

HERE = os.path.dirname(os.path.abspath(__file__))
ADDITIONS = os.path.join(HERE, "unicode16_additions.txt")
OUTPUT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "gpt2", "unicode.h")


def die(msg):
    print(f"gen_unicode_tables: {msg}", file=sys.stderr)
    sys.exit(1)


def read_ucd_version(ucd):
    # ReadMe.txt says "... for Version 15.0.0 of the Unicode Standard."
    try:
        for line in open(os.path.join(ucd, "ReadMe.txt"), encoding="utf-8"):
            if "for Version" in line:
                return line.split("for Version")[1].split()[0]
    except OSError:
        pass
    return "unknown"


def parse_ranges(path):
    """Lines 'XXXX..YYYY ; CLASS' (or 'XXXX ; CLASS'), '#' comments. Yields (first, last, class)."""
    for lineno, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.split("#")[0].strip()
        if not line:
            continue
        try:
            rng, name = [s.strip() for s in line.split(";")]
            first, _, last = rng.partition("..")
            yield int(first, 16), int(last or first, 16), name
        except ValueError:
            die(f"{path}:{lineno}: expected 'XXXX..YYYY ; CLASS', got {line!r}")


def debian_classes(ucd):
    cls = bytearray(MAX_CP)  # all OTHER
    path = os.path.join(ucd, "UnicodeData.txt")
    if not os.path.exists(path):
        die(f"{path} not found: apt-get install unicode-data, or give --ucd DIR")
    first = None
    for line in open(path, encoding="utf-8"):
        fields = line.split(";")
        cp, name, category = int(fields[0], 16), fields[1], fields[2]
        # Large blocks (CJK, Hangul, ...) are given as a pair of lines <..., First> <..., Last>.
        if name.endswith(", First>"):
            first = cp
            continue
        lo = first if name.endswith(", Last>") else cp
        c = LETTER if category[0] == "L" else NUMBER if category[0] == "N" else OTHER
        for x in range(lo, cp + 1):
            cls[x] = c
    path = os.path.join(ucd, "PropList.txt")
    if not os.path.exists(path):
        die(f"{path} not found: apt-get install unicode-data, or give --ucd DIR")
    n_white = 0
    for first, last, prop in parse_ranges(path):
        if prop == "White_Space":
            for x in range(first, last + 1):
                if cls[x] != OTHER:
                    die(f"U+{x:04X} is White_Space and a letter or number")
                cls[x] = WHITESPACE
                n_white += 1
    if n_white != 25:  # the set has been the same 25 code points since Unicode 6.3
        die(f"expected 25 White_Space code points in {path}, found {n_white}")
    return cls


def write_additions(classes16_path, cls):
    """Rewrites unicode16_additions.txt: every code point whose Unicode 16.0 class differs."""
    new = bytearray(MAX_CP)
    for first, last, name in parse_ranges(classes16_path):
        if name not in CLASS_OF_NAME:
            die(f"{classes16_path}: unknown class {name!r}")
        for x in range(first, last + 1):
            new[x] = CLASS_OF_NAME[name]
    lines, cp = [], 0
    while cp < MAX_CP:
        if new[cp] == cls[cp]:
            cp += 1
            continue
        if cls[cp] != OTHER:
            die(f"U+{cp:04X} changes class from {NAME_OF_CLASS[cls[cp]]}: only additions are expected")
        end = cp
        while end + 1 < MAX_CP and new[end + 1] == new[cp] and cls[end + 1] == OTHER and new[end + 1] != cls[end + 1]:
            end += 1
        rng = f"{cp:04X}" if end == cp else f"{cp:04X}..{end:04X}"
        lines.append(f"{rng} ; {NAME_OF_CLASS[new[cp]]}")
        cp = end + 1
    with open(ADDITIONS, "w", encoding="utf-8") as f:
        f.write("# Letters (L) and numbers (N) that Unicode 15.1 and 16.0 added to Unicode 15.0.\n")
        f.write("# tiktoken 1.0.22 matches \\p{L} and \\p{N} with regex-syntax 0.8.5's Unicode 16.0 tables,\n")
        f.write("# Debian 12's unicode-data is 15.0: dev/data/gen_unicode_tables.py adds these on top.\n")
        f.write("# Made by: node dev/data/unicode16_classes.mjs DIR > F; gen_unicode_tables.py --classes16 F\n")
        f.write("\n".join(lines) + "\n")
    print(f"wrote {ADDITIONS}: {len(lines)} ranges")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ucd", default="/usr/share/unicode")
    ap.add_argument("--classes16")
    args = ap.parse_args()

    cls = debian_classes(args.ucd)
    version = read_ucd_version(args.ucd)
    if args.classes16:
        write_additions(args.classes16, cls)
    n_added = 0
    for first, last, name in parse_ranges(ADDITIONS):
        if name not in ("L", "N"):
            die(f"{ADDITIONS}: only L and N may be added, got {name!r}")
        for x in range(first, last + 1):
            if cls[x] not in (OTHER, CLASS_OF_NAME[name]):
                die(f"U+{x:04X} is {NAME_OF_CLASS[cls[x]]} in the UCD but {name} in {ADDITIONS}")
            n_added += cls[x] == OTHER
            cls[x] = CLASS_OF_NAME[name]

    # Two-stage table: distinct blocks, and for each block of code points the index of its block.
    blocks, index = {}, []
    for start in range(0, MAX_CP, BLOCK):
        block = bytes(cls[start:start + BLOCK])
        index.append(blocks.setdefault(block, len(blocks)))
    if len(blocks) > 256:
        die(f"{len(blocks)} distinct blocks do not fit the uint8 index")
    counts = [cls.count(c) for c in (LETTER, NUMBER, WHITESPACE)]

    out = []
    out.append("// gpt2/unicode.h: generated by dev/data/gen_unicode_tables.py; do not edit.")
    out.append(f"// From the Unicode Character Database {version} (Debian's unicode-data) plus the")
    out.append(f"// {n_added} letters and numbers of dev/data/unicode16_additions.txt (Unicode 16.0, as tiktoken).")
    out.append(f"// {counts[0]} letters (\\p{{L}}), {counts[1]} numbers (\\p{{N}}), {counts[2]} whitespace (\\s = White_Space).")
    out.append("// Class of code point cp: unicode_blocks[unicode_block_index[cp >> 8]][cp & 255].")
    out.append("#ifndef GPT2_UNICODE_H")
    out.append("#define GPT2_UNICODE_H")
    out.append("")
    out.append("#define UCLASS_OTHER 0")
    out.append("#define UCLASS_LETTER 1")
    out.append("#define UCLASS_NUMBER 2")
    out.append("#define UCLASS_SPACE 3")
    out.append(f"#define UNICODE_BLOCK_SHIFT {BLOCK_SHIFT}")
    out.append(f"#define UNICODE_N_BLOCKS {len(blocks)}")
    out.append("")
    out.append(f"static const unsigned char unicode_block_index[{len(index)}] = {{")
    for i in range(0, len(index), 32):
        out.append("    " + ",".join(str(v) for v in index[i:i + 32]) + ",")
    out.append("};")
    out.append("")
    out.append(f"static const unsigned char unicode_blocks[UNICODE_N_BLOCKS][{BLOCK}] = {{")
    # One block a line: dicts keep insertion order, so block number k is the k-th line.
    for block in blocks:
        out.append("    {" + ",".join(str(v) for v in block) + "},")
    out.append("};")
    out.append("")
    out.append("#endif // GPT2_UNICODE_H")
    with open(OUTPUT, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    print(f"wrote {OUTPUT}: UCD {version} + {n_added} additions, {len(blocks)} blocks")


if __name__ == "__main__":
    main()
