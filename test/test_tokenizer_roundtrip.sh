#!/usr/bin/env bash
# decode(encode(x)) == x for byte strings that are not valid UTF-8: 3,000 random strings through
# the C API (with and without the <|endoftext|> option), then the command line on every byte
# value, on classic malformed sequences, and on 1 MB of seeded random bytes.
cd "$(dirname "$0")/.." || exit 1
make -s tokenizer data >/dev/null || exit 1
mkdir -p build
${CC:-gcc} -O2 -Wall -Wextra -Werror -o build/tokenizer_batch.tmp$$ test/tokenizer_batch.c \
  && mv build/tokenizer_batch.tmp$$ build/tokenizer_batch || exit 1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

if ! command -v node >/dev/null; then
  echo "note: node not found: the C API part (random byte strings) is left out"
else
  node test/tokenizer_compare.js build/tokenizer_batch data/gpt2_tokenizer.bin bytes 3000 77 || exit 1
fi

roundtrip() {  # FILE NAME
  ./tokenizer encode "$1" > "$tmp/ids" || { echo "FAIL: encode of $2 failed"; exit 1; }
  ./tokenizer decode "$tmp/ids" > "$tmp/back" || { echo "FAIL: decode of $2 failed"; exit 1; }
  cmp -s "$1" "$tmp/back" || { echo "FAIL: decode(encode(x)) != x for $2"; exit 1; }
  echo "round trip exact: $2 ($(wc -c < "$1") bytes, $(wc -w < "$tmp/ids") tokens)"
}
/usr/bin/python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)) + bytes(range(255, -1, -1)))' > "$tmp/all_bytes"
roundtrip "$tmp/all_bytes" "every byte value"
# overlong, surrogate, past U+10FFFF, lone continuation bytes, cut-off sequences, 0xFE/0xFF,
# each between letters and spaces so that they meet every pre-tokenizer rule
printf "a\xc0\x80b \xed\xa0\x80c \xf4\x90\x80\x80d \x80\x80e \xe2\x82 f\xf0\x9f\x98 g\xfe\xff h\xc3 \xc3\xa9' \x27\xc3s \xe2\x80\xa8\xe2\x80 x\xf0" > "$tmp/malformed"
roundtrip "$tmp/malformed" "malformed UTF-8"
/usr/bin/python3 -c 'import random, sys; r = random.Random(5); sys.stdout.buffer.write(bytes(r.getrandbits(8) for _ in range(1 << 20)))' > "$tmp/random"
roundtrip "$tmp/random" "1 MB of random bytes"
printf "" > "$tmp/empty"
roundtrip "$tmp/empty" "the empty text"
echo "PASS"
