#!/usr/bin/env bash
# Our encoding through the C API against tiktoken's gpt2 encoding: the committed edge cases
# (test/tokenizer_edge_cases.txt), 3,000 random strings glued from their pieces (fixed seed), the
# <|endoftext|> option, long one-class pieces, and a sweep over the Unicode code points in
# contexts that show their class. Every string is also decoded back and compared.
cd "$(dirname "$0")/.." || exit 1
[ -d test/node_modules/tiktoken ] || { echo "skipped: tiktoken not installed (run bash test/setup.sh)"; exit 77; }
make -s tokenizer data >/dev/null || exit 1
mkdir -p build
${CC:-gcc} -O2 -Wall -Wextra -Werror -o build/tokenizer_batch.tmp$$ test/tokenizer_batch.c \
  && mv build/tokenizer_batch.tmp$$ build/tokenizer_batch || exit 1
node test/tokenizer_compare.js build/tokenizer_batch data/gpt2_tokenizer.bin \
  cases test/tokenizer_edge_cases.txt random 3000 20240520 special long 7 unicode || exit 1
echo "PASS"
