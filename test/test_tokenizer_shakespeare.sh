#!/usr/bin/env bash
# Tiny Shakespeare: our encoding is identical to tiktoken's (encode_ordinary, CLI path), the
# token files hold 32,768 + 305,260 tokens exactly as llm.c prepares them with tiktoken, and
# decode(encode(text)) gives the text back byte for byte.
cd "$(dirname "$0")/.." || exit 1
[ -d test/node_modules/tiktoken ] || { echo "skipped: tiktoken not installed (run bash test/setup.sh)"; exit 77; }
make -s tokenizer data >/dev/null || exit 1
text=data/raw/tinyshakespeare.txt
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

./tokenizer encode "$text" > "$tmp/ours.txt" || exit 1
node -e '
  const { get_encoding } = require("./test/node_modules/tiktoken");
  const enc = get_encoding("gpt2");
  process.stdout.write(Array.from(enc.encode_ordinary(require("fs").readFileSync(process.argv[1], "utf8"))).join(" ") + "\n");
' "$text" > "$tmp/tiktoken.txt" || exit 1
if ! cmp -s "$tmp/ours.txt" "$tmp/tiktoken.txt"; then
  echo "FAIL: ./tokenizer encode differs from tiktoken on $text"; cmp "$tmp/ours.txt" "$tmp/tiktoken.txt"; exit 1
fi
echo "encode: $(wc -w < "$tmp/ours.txt") tokens, identical to tiktoken"

./tokenizer decode "$tmp/ours.txt" > "$tmp/back.txt" || exit 1
cmp -s "$tmp/back.txt" "$text" || { echo "FAIL: decode(encode(text)) != text"; exit 1; }
echo "decode: round trip exact"

# prepare again into a fresh prefix, so that the files checked are the ones this build writes
./tokenizer prepare "$text" "$tmp/ts" || exit 1
node test/tokenizer_shakespeare.js "$text" "$tmp/ts_val.bin" "$tmp/ts_train.bin" || exit 1
cmp -s "$tmp/ts_val.bin" data/tinyshakespeare_val.bin && cmp -s "$tmp/ts_train.bin" data/tinyshakespeare_train.bin \
  || { echo "FAIL: data/tinyshakespeare_*.bin differ from a fresh prepare"; exit 1; }
echo "PASS"
