#!/usr/bin/env bash
# Exercise 10 (README.md beside this file): ./tokenizer learn TEXT N ENCODER_JSON VOCAB_BPE.
# Runs it on seven small corpora and compares the merges and encoder.json with
# reference_learn.py, a learner written from the definition in README.md; then the project's
# tokenizer must load the files and encode each corpus so that decoding gives it back. Run from
# the root of the tree.
set -uo pipefail
here=doc/exercises/10-bpe-learn
out=build/exercises/10
mkdir -p "$out"

[ -f data/raw/tinyshakespeare.txt ] || { echo "data/raw/tinyshakespeare.txt is missing: run make data"; exit 1; }
make -s tokenizer >"$out/make.log" 2>&1 || {
    echo "make tokenizer failed (the compiler's messages: $out/make.log):"; tail -n 5 "$out/make.log"; exit 1; }

"${PYTHON:-python3}" "$here/reference_learn.py" ./tokenizer data/raw "$out" || exit 1
echo "exercise 10: solved (the merges and encoder.json are the definition's, and the tokenizer reads them)"
