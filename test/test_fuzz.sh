#!/usr/bin/env bash
# The fuzz targets (test/fuzz/, doc/correctness.md "Fuzzing"), briefly, and what they found:
#   1. every target replays its regression inputs (test/fuzz/regress/TARGET: inputs a fuzzer or a
#      seed once broke a reader with) and must pass them;
#   2. every target runs for FUZZ_TEST_SECONDS (default 10) from its committed seeds, in a scratch
#      corpus: no crash, leak, sanitizer report, broken check, hang or oversized allocation;
#   3. the programs themselves on the same regression inputs: ./tokenizer built with
#      AddressSanitizer encodes each text regression as tiktoken does and decodes it back, and
#      the tokenizer file, the safetensors files and the state file are each refused by the
#      program that reads them with one error line and exit status 1.
# Needs clang with libFuzzer (test/setup.sh installs Debian's clang and libclang-rt-dev).
set -u
. "$(dirname "$0")/lib.sh"
fresh_dir test_fuzz
echo 'int LLVMFuzzerTestOneInput(const char* d, long n) { return 0; }' >"$dir/probe.c"
if ! ${FUZZ_CC:-clang} -fsanitize=fuzzer,address,undefined "$dir/probe.c" -o "$dir/probe" 2>"$dir/probe.log"; then
  echo "skipped: ${FUZZ_CC:-clang} cannot build a libFuzzer target ($(head -c 120 "$dir/probe.log")); bash test/setup.sh installs clang and libclang-rt-dev"
  exit 77
fi
make -s -j"$JOBS" fuzz-targets tokenizer infer train_cpu data >/dev/null || { echo "FAIL: make fuzz-targets"; exit 1; }
status=0
targets=$(sed -n 's/^FUZZ_TARGETS := //p' Makefile)

echo "--- 1. regression inputs, replayed by their targets"
for d in test/fuzz/regress/*/; do
  t=$(basename "$d")
  if build/fuzz/fuzz_"$t" "$d"* >"$dir/replay_$t.log" 2>&1; then
    echo "ok   fuzz_$t: $(ls "$d" | wc -l) regression inputs"
  else
    echo "FAIL fuzz_$t on $d:"; grep -E 'ERROR|SUMMARY|fuzz check failed|Running' "$dir/replay_$t.log" | tail -n 4; status=1
  fi
done

echo "--- 2. each target for ${FUZZ_TEST_SECONDS:-10} s from its seeds"
# shellcheck disable=SC2086
FUZZ_WORK="$dir/corpus" bash test/fuzz/run.sh "${FUZZ_TEST_SECONDS:-10}" $targets || status=1

echo "--- 3. the programs on the regression inputs"
refused() {  # NAME PATTERN COMMAND...: exit 1 with one line "error: ...PATTERN..." on stderr
  local name=$1 pattern=$2; shift 2
  "$@" >"$dir/out" 2>"$dir/err" </dev/null
  local rc=$?
  if [ $rc -eq 1 ] && [ "$(wc -l <"$dir/err")" -eq 1 ] && grep -Eq "^error: .*$pattern" "$dir/err"; then
    printf 'ok   %-36s %s\n' "$name" "$(head -c 140 "$dir/err")"
  else
    printf 'FAIL %-36s exit %d, stderr:\n' "$name" $rc; head -n 5 "$dir/err"; status=1
  fi
}
# tokenizer.c with AddressSanitizer: the heap overflow that fuzz_encode found wrote past the end
# of a buffer without crashing the optimised program
$CC -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -o "$dir/tokenizer_asan" tokenizer.c \
  || { echo "FAIL: tokenizer does not build with -fsanitize=address"; exit 1; }
for f in test/fuzz/regress/encode/*; do
  name="encode $(basename "$f")"
  if ! "$dir/tokenizer_asan" encode "$f" >"$dir/ids" 2>"$dir/err" || ! "$dir/tokenizer_asan" decode "$dir/ids" >"$dir/back" 2>>"$dir/err"; then
    echo "FAIL $name:"; head -n 5 "$dir/err"; status=1; continue
  fi
  cmp -s "$f" "$dir/back" || { echo "FAIL $name: decode(encode(x)) != x"; status=1; continue; }
  if command -v node >/dev/null && [ -d test/node_modules/tiktoken ]; then
    node -e '
      const fs = require("fs"), enc = require("./test/node_modules/tiktoken").get_encoding("gpt2");
      const text = new TextDecoder("utf-8", {fatal: true}).decode(fs.readFileSync(process.argv[1]));
      process.stdout.write(Array.from(enc.encode_ordinary(text)).join(" ") + "\n");' "$f" >"$dir/want" 2>/dev/null \
      || { echo "note: $name is not UTF-8: tiktoken cannot take it (round trip checked only)"; continue; }
    cmp -s "$dir/want" "$dir/ids" || { echo "FAIL $name: ids differ from tiktoken's"; status=1; continue; }
    echo "ok   $name: $(wc -w <"$dir/ids") ids, as tiktoken, round trip exact"
  else
    echo "ok   $name: round trip exact (node or tiktoken missing: not compared with tiktoken)"
  fi
done
for f in test/fuzz/regress/tokenizer_file/*; do
  refused "tokenizer -k $(basename "$f")" "is not <\|endoftext\|>" ./tokenizer -k "$f" encode /dev/null
done
for f in test/fuzz/regress/safetensors/*; do
  refused "infer -e $(basename "$f")" "missing|overlap" ./infer -e "$f" -p hi -n 1
  refused "train_cpu -e $(basename "$f")" "missing|overlap" ./train_cpu -e "$f" -x 1
done
# the state regressions are resumed by train_cpu in test_train_badinput ("state of batch 0")

[ $status -eq 0 ] && echo "PASS: fuzz targets clean, regressions fixed in the programs"
exit $status
