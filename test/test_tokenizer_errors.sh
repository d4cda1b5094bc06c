#!/usr/bin/env bash
# Bad input: each case must exit 1 (not crash: no signal, no 0) with one line on stderr that
# starts with "error:" and says what was wrong, and must leave no output file behind.
cd "$(dirname "$0")/.." || exit 1
make -s tokenizer data >/dev/null || exit 1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
tok=data/gpt2_tokenizer.bin
failed=0

# expect_error "WHAT" "PATTERN" COMMAND...: the command fails cleanly with PATTERN in its message
expect_error() {
  local what="$1" pattern="$2"; shift 2
  "$@" > "$tmp/out" 2> "$tmp/err" < "${STDIN:-/dev/null}"
  local rc=$? lines; lines=$(wc -l < "$tmp/err")
  if [ $rc -ne 1 ] || [ "$lines" -ne 1 ] || ! grep -q '^error: ' "$tmp/err" || ! grep -qE -- "$pattern" "$tmp/err"; then
    echo "FAIL: $what: exit $rc, $lines stderr lines (want exit 1, one line matching '$pattern'):"
    sed 's/^/    /' "$tmp/err"; failed=1
  else
    echo "ok: $what: $(cat "$tmp/err")"
  fi
}

# tokenizer file
expect_error "missing tokenizer file" "cannot open tokenizer file /nonexistent/tok.bin: No such file" ./tokenizer -k /nonexistent/tok.bin encode /dev/null
: > "$tmp/empty.bin"
expect_error "empty tokenizer file" "truncated" ./tokenizer -k "$tmp/empty.bin" encode /dev/null
head -c 600 "$tok" > "$tmp/short_header.bin"
expect_error "file shorter than the header" "truncated" ./tokenizer -k "$tmp/short_header.bin" encode /dev/null
head -c 200000 "$tok" > "$tmp/truncated.bin"
expect_error "truncated tokenizer file" "truncated: it ends inside token [0-9]+ of 50257" ./tokenizer -k "$tmp/truncated.bin" encode /dev/null
head -c 60000 "$tok" > "$tmp/truncated_more.bin"   # 58,976 bytes cannot hold 50,257 records of 2+ bytes
expect_error "tokenizer file far too short" "its header says 50257 tokens, its 58976 bytes after the header hold at most 29488" ./tokenizer -k "$tmp/truncated_more.bin" encode /dev/null
cp data/tinyshakespeare_val.bin "$tmp/wrong_magic.bin"
expect_error "wrong magic (a token file)" "not a tokenizer file \(magic 20240520" ./tokenizer -k "$tmp/wrong_magic.bin" encode /dev/null
{ cat "$tok"; printf 'junk'; } > "$tmp/trailing.bin"
expect_error "bytes after the last token" "4 unexpected bytes" ./tokenizer -k "$tmp/trailing.bin" encode /dev/null
/usr/bin/python3 - "$tok" "$tmp" <<'PY'
import struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
def patched(name, offset, value):
    d = bytearray(data); struct.pack_into("<i", d, offset, value); open(f"{sys.argv[2]}/{name}", "wb").write(d)
patched("version9.bin", 4, 9)
patched("count_huge.bin", 8, 1 << 30)
patched("eot_out.bin", 12, 60000)
d = bytearray(data); d[1024] = 0; open(f"{sys.argv[2]}/zero_length.bin", "wb").write(d)
PY
expect_error "unknown version" "version 9" ./tokenizer -k "$tmp/version9.bin" encode /dev/null
expect_error "absurd token count" "bad header" ./tokenizer -k "$tmp/count_huge.bin" encode /dev/null
expect_error "end-of-text id out of range" "bad header" ./tokenizer -k "$tmp/eot_out.bin" encode /dev/null
expect_error "zero-length token" "length 0|truncated|same bytes|no token for the byte" ./tokenizer -k "$tmp/zero_length.bin" encode /dev/null

# decode input
printf '15496 11 995\n 0 50257 13\n' > "$tmp/ids_range"
expect_error "decode: id out of range" "token id 50257 \(id number 5, line 2\) is out of range: ids are 0\.\.50256" ./tokenizer decode "$tmp/ids_range"
printf '1 2 99999999999999999999999' > "$tmp/ids_huge"
expect_error "decode: huge id" "token id 99999999999999999999999 \(id number 3, line 1\) is out of range" ./tokenizer decode "$tmp/ids_huge"
printf '1 2\n3 x4 5' > "$tmp/ids_text"
expect_error "decode: not a number" "\"x4\" \(id number 4, line 2\) is not a token id" ./tokenizer decode "$tmp/ids_text"
printf '1 -2' > "$tmp/ids_neg"
expect_error "decode: negative id" "\"-2\" \(id number 2, line 1\) is not a token id" ./tokenizer decode "$tmp/ids_neg"
STDIN="$tmp/ids_range" expect_error "decode from stdin" "standard input: token id 50257" ./tokenizer decode

# command line and input files
expect_error "encode: missing input file" "cannot open $tmp/nope.txt" ./tokenizer encode "$tmp/nope.txt"
expect_error "unknown command" "unknown command frobnicate" ./tokenizer frobnicate
expect_error "unknown option" "unknown option -x" ./tokenizer -x encode
expect_error "wrong argument count" "wrong number of arguments for prepare" ./tokenizer prepare onlyone
expect_error "-k without a path" "-k needs a path" ./tokenizer encode -k

# prepare: too short a text for the validation split; no file may appear
printf 'Too short.\n\nReally.\n' > "$tmp/short.txt"
expect_error "prepare: text too short" "only 9 tokens: need more than 32768" ./tokenizer prepare "$tmp/short.txt" "$tmp/tooshort"
ls "$tmp"/tooshort_*.bin >/dev/null 2>&1 && { echo "FAIL: prepare left a token file behind"; failed=1; }

# prepare's inputs, checked before any work; no output file may appear (prep/ stays empty), and
# shards already there are refused and left as they were
mkdir "$tmp/prep"
nothing_written() {
  if [ -n "$(ls -A "$tmp/prep")" ]; then echo "FAIL: $1 left files behind: $(ls -A "$tmp/prep")"; failed=1; fi
}
printf 'A text.\n' > "$tmp/ok.txt"
for bad in 0 -5 2147483648 99999999999999999999 abc 12x ""; do
  expect_error "prepare -n '$bad'" "-n $bad: tokens per shard must be a whole number from 1 to 2147483647" \
    ./tokenizer prepare -n "$bad" "$tmp/ok.txt" "$tmp/prep/s"
  nothing_written "prepare -n '$bad'"
done
expect_error "prepare -n without a number" "-n needs a number" ./tokenizer prepare "$tmp/ok.txt" "$tmp/prep/s" -n
expect_error "-n with another command" "-n is an option of prepare" ./tokenizer -n 100 encode "$tmp/ok.txt"
expect_error "prepare: missing text" "cannot open text $tmp/nope.txt: No such file" \
  ./tokenizer prepare -n 100 "$tmp/ok.txt" "$tmp/nope.txt" "$tmp/prep/s"
nothing_written "prepare: missing text"
expect_error "prepare: a folder as text" "text $tmp/prep is a folder" ./tokenizer prepare "$tmp/prep" "$tmp/prep/s"
nothing_written "prepare: a folder as text"
expect_error "prepare: standard input twice" "standard input \(-\) is given twice" ./tokenizer prepare - - "$tmp/prep/s"
expect_error "prepare: shards into a missing folder" "cannot write shards into $tmp/missing/: No such file" \
  ./tokenizer prepare -n 100 "$tmp/ok.txt" "$tmp/missing/s"
expect_error "prepare: two files into a missing folder" "cannot open $tmp/missing/s_val.bin.tmp for writing" \
  ./tokenizer prepare "$tmp/ok.txt" "$tmp/missing/s"
expect_error "prepare -n: text too short for one shard" \
  "$tmp/short.txt has only 9 tokens: need more than one shard of 9 \(the validation set\)" \
  ./tokenizer prepare -n 9 "$tmp/short.txt" "$tmp/prep/s"
nothing_written "prepare -n: text too short"
STDIN="$tmp/short.txt" expect_error "prepare -n: texts too short" \
  "the 2 texts have only 18 tokens: need more than one shard of 100" \
  ./tokenizer prepare -n 100 "$tmp/short.txt" - "$tmp/prep/s"
nothing_written "prepare -n: texts too short"
printf 'an earlier run' > "$tmp/prep/s_train_000007.bin"
cp "$tmp/prep/s_train_000007.bin" "$tmp/earlier.bin"
expect_error "prepare -n: shards of the prefix exist" "$tmp/prep/s_train_000007.bin exists: shards of an earlier run" \
  ./tokenizer prepare -n 100 data/raw/tinyshakespeare.txt "$tmp/prep/s"
[ "$(ls -A "$tmp/prep")" = "s_train_000007.bin" ] && cmp -s "$tmp/prep/s_train_000007.bin" "$tmp/earlier.bin" \
  || { echo "FAIL: prepare touched the shard already there, or wrote others: $(ls -A "$tmp/prep")"; failed=1; }
(cd "$tmp/prep" && mv s_train_000007.bin s_val_x.bin) || exit 1
expect_error "prepare -n: shards of the prefix exist (no folder in the prefix)" "^error: s_val_x.bin exists" \
  bash -c "cd '$tmp/prep' && '$PWD/tokenizer' -k '$PWD/$tok' prepare -n 100 '$PWD/data/raw/tinyshakespeare.txt' s"

# an output that cannot be written: the error names the file
expect_error "vocab: output in a missing folder" "cannot open $tmp/missing/out.bin.tmp" \
  ./tokenizer vocab data/raw/encoder.json data/raw/vocab.bpe "$tmp/missing/out.bin"

[ $failed -eq 0 ] && echo "PASS"
exit $failed
