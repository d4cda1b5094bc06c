#!/usr/bin/env bash
# Exercise 2 (README.md beside this file): ./tokenizer explain TEXT. Checks its output for a
# handful of texts against reference_bpe.py, a byte-pair encoder written from OpenAI's
# encoder.json and vocab.bpe alone. Run from the root of the tree.
set -uo pipefail
here=doc/exercises/02-tokenizer-merges
out=build/exercises/02
mkdir -p "$out"

[ -f data/raw/encoder.json ] && [ -f data/raw/vocab.bpe ] || {
    echo "data/raw/encoder.json and vocab.bpe are missing: run make data"; exit 1; }
make -s tokenizer >"$out/make.log" 2>&1 || {
    echo "make tokenizer failed (the compiler's messages: $out/make.log):"; tail -n 5 "$out/make.log"; exit 1; }

# Common words (pieces that are tokens), non-ASCII letters, characters of several tokens, a long
# word, runs of one byte (ties: the leftmost pair first), contractions, numbers, whitespace; then
# texts where the pieces matter: a blank line (merged across pieces, "\n\n" is one token, 628),
# double spaces, digits against letters, contractions against words.
"${PYTHON:-python3}" "$here/reference_bpe.py" ./tokenizer data/raw \
    "Hello, world! It's 2024." \
    "naïve café, Ångström" \
    "日本語のテキスト 🙂 Привет мир" \
    "Pneumonoultramicroscopicsilicovolcanoconiosis" \
    "aaaaaaaaaaaaaaaaa 1111111111 ====" \
    $'  ROMEO:\n\tI\'ll   go  ' \
    $'First Citizen:\nBefore we proceed.\n\nAll:\nSpeak, speak.' \
    "a  word  and  x2y ab12cd34, they'll we've isn't" || exit 1
echo "exercise 2: solved (every merge is the lowest-rank pair, and the ids are encode's)"
