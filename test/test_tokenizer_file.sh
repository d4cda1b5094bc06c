#!/usr/bin/env bash
# The tokenizer file that `./tokenizer vocab` writes from encoder.json + vocab.bpe: every token's
# bytes equal tiktoken's for the same id, and the header is llm.c's version 2. Then files that
# disagree (merges out of order, a wrong id, a missing merge, broken JSON) are refused with one
# clear error, and a good file already at OUT is left as it was.
cd "$(dirname "$0")/.." || exit 1
make -s tokenizer data >/dev/null || exit 1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
json=data/raw/encoder.json bpe=data/raw/vocab.bpe
failed=0

./tokenizer vocab "$json" "$bpe" "$tmp/tok.bin" || exit 1
cmp -s "$tmp/tok.bin" data/gpt2_tokenizer.bin || { echo "FAIL: vocab output differs from data/gpt2_tokenizer.bin"; exit 1; }
if [ -d test/node_modules/tiktoken ]; then
  node -e '
    const { get_encoding } = require("./test/node_modules/tiktoken");
    const enc = get_encoding("gpt2");
    const b = require("fs").readFileSync(process.argv[1]);
    const h = [0, 1, 2, 3].map((i) => b.readInt32LE(4 * i));
    if (h.join() !== "20240328,2,50257,50256") { console.log("FAIL: header " + h); process.exit(1); }
    let pos = 1024, bad = 0;
    for (let id = 0; id < 50257; id++) {
      const len = b[pos], mine = b.subarray(pos + 1, pos + 1 + len); pos += 1 + len;
      const want = id === 50256 ? Buffer.from("<|endoftext|>") : Buffer.from(enc.decode_single_token_bytes(id));
      if (!mine.equals(want)) { if (bad++ < 5) console.log(`FAIL: token ${id}: ${mine.toString("hex")} vs tiktoken ${want.toString("hex")}`); }
    }
    if (pos !== b.length) { console.log(`FAIL: ${b.length - pos} bytes after the last token`); bad++; }
    console.log(`tokenizer file: 50257 tokens, ${bad} differ from tiktoken`);
    process.exit(bad ? 1 : 0);
  ' "$tmp/tok.bin" || exit 1
else
  echo "note: tiktoken not installed: the per-token comparison is left out"
fi

# expect_refused "WHAT" "PATTERN" JSON BPE: vocab fails with one error line, and OUT is untouched
cp "$tmp/tok.bin" "$tmp/out.bin"
expect_refused() {
  ./tokenizer vocab "$3" "$4" "$tmp/out.bin" > /dev/null 2> "$tmp/err"
  local rc=$?
  if [ $rc -ne 1 ] || [ "$(wc -l < "$tmp/err")" -ne 1 ] || ! grep -qE -- "^error: .*$2" "$tmp/err"; then
    echo "FAIL: $1: exit $rc (want 1 and one line matching '$2'):"; sed 's/^/    /' "$tmp/err"; failed=1
  elif ! cmp -s "$tmp/out.bin" "$tmp/tok.bin" || [ -e "$tmp/out.bin.tmp" ]; then
    echo "FAIL: $1: the existing output file was changed"; failed=1
  else
    echo "ok: $1: $(cat "$tmp/err")"
  fi
}
awk 'NR==101 {held=$0; next} NR==102 {print; print held; next} {print}' "$bpe" > "$tmp/swapped.bpe"
expect_refused "two merges swapped" "line 101: merge 99 should make id 355" "$json" "$tmp/swapped.bpe"
head -n 40000 "$bpe" > "$tmp/short.bpe"
expect_refused "merges missing" "39999 merges, but .* has 50000 tokens between" "$json" "$tmp/short.bpe"
{ cat "$bpe"; echo "a b"; } > "$tmp/long.bpe"
expect_refused "one merge too many" "more merges than" "$json" "$tmp/long.bpe"
sed 's/"\\u0120the": 262/"\\u0120the": 263/' "$json" > "$tmp/dup_id.json"
expect_refused "an id given twice" "token id 263 given twice" "$tmp/dup_id.json" "$bpe"
sed 's/"\\u0120the": 262/"\\u0120the": 50257/' "$json" > "$tmp/gap.json"
expect_refused "an id out of order" "no id 262" "$tmp/gap.json" "$bpe"
head -c 1000 "$json" > "$tmp/cut.json"
expect_refused "truncated JSON" "unterminated string at byte 1000" "$tmp/cut.json" "$bpe"
sed 's/"!": 0/"!": x/' "$json" > "$tmp/bad.json"
expect_refused "not a number" "expected a non-negative integer" "$tmp/bad.json" "$bpe"
sed 's/"\\u0120the": 262/"\\u0120th\\u4e00": 262/' "$json" > "$tmp/unmapped.json"
expect_refused "a character outside the byte mapping" "outside GPT-2's byte mapping" "$tmp/unmapped.json" "$bpe"
printf '{"!": 0, "\\"": 90}' > "$tmp/far_id.json"   # 2 tokens in 18 bytes cannot have id 90
expect_refused "an id beyond what the file can hold" "token id too large for the size of the file at byte 8" "$tmp/far_id.json" "$bpe"
expect_refused "missing encoder.json" "cannot open $tmp/none.json" "$tmp/none.json" "$bpe"

[ $failed -eq 0 ] && echo "PASS"
exit $failed
