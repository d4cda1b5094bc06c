#!/usr/bin/env bash
# Encode throughput of ./tokenizer against tiktoken (npm tiktoken 1.0.22, gpt2, encode_ordinary),
# on the same texts in the same run, one thread each. Both time the encode call only: the file
# and the tokenizer are loaded before the clock starts. Median of REPEATS runs (default 10).
# Texts: Tiny Shakespeare (1.1 MB, English), and a mixed one made here from it with a fixed seed:
# its lines interleaved with the multilingual edge cases (CJK, Arabic, Hebrew, emoji, Unicode
# spaces, digits) of test/tokenizer_edge_cases.txt.
# Then `./tokenizer prepare -n` (reading, cutting, encoding, writing shards; the rate it prints,
# which leaves out loading the tokenizer) on one thread and on all (OMP_NUM_THREADS unset), on
# the two texts three times (8.7 MB), median of REPEATS runs each; the shards of the two must be the
# same byte for byte, or the bench fails.
# Usage: dev/bench/bench_tokenizer.sh [REPEATS]   (make bench-tokenizer)
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats=${1:-10}
[ -d test/node_modules/tiktoken ] || { echo "bench_tokenizer: tiktoken not installed: run bash test/setup.sh" >&2; exit 1; }
make -s tokenizer data >/dev/null
mkdir -p build
mixed=build/bench_mixed.txt
/usr/bin/python3 - data/raw/tinyshakespeare.txt test/tokenizer_edge_cases.txt "$mixed" <<'PY'
import json, random, sys
r = random.Random(2024)
lines = open(sys.argv[1], encoding="utf-8").read().split("\n")
cases = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8") if l.strip() and not l.startswith("#")]
cases = [c for c in cases if any(ord(ch) > 127 for ch in c)]  # the non-ASCII ones
out = []
for line in lines:
    out.append(line)
    if r.random() < 0.5:
        out.append(" ".join(r.choice(cases) for _ in range(r.randint(1, 6))))
open(sys.argv[3], "w", encoding="utf-8").write("\n".join(out))
PY
echo "encode throughput, one thread, median of $repeats runs (MB = 10^6 bytes)"
for text in data/raw/tinyshakespeare.txt "$mixed"; do
  ours=$(./tokenizer bench "$text" "$repeats")
  theirs=$(node dev/bench/bench_tiktoken.js "$text" "$repeats")
  echo "  $ours"
  echo "  $theirs"
  o=$(echo "$ours" | sed -E 's/.* ([0-9.]+) MB\/s$/\1/')
  t=$(echo "$theirs" | sed -E 's/.* ([0-9.]+) MB\/s$/\1/')
  nt_o=$(echo "$ours" | sed -E 's/.* -> ([0-9]+) tokens.*/\1/')
  nt_t=$(echo "$theirs" | sed -E 's/.* -> ([0-9]+) tokens.*/\1/')
  [ "$nt_o" = "$nt_t" ] || { echo "bench_tokenizer: token counts differ on $text ($nt_o vs $nt_t)" >&2; exit 1; }
  awk -v o="$o" -v t="$t" -v f="$text" 'BEGIN { printf "  %s: ours / tiktoken = %.1fx\n", f, o / t }'
done

# prepare on one thread and on all
big=build/bench_prepare.txt
for i in 1 2 3; do cat data/raw/tinyshakespeare.txt "$mixed"; done > "$big"
prepare_rate() {  # prepare_rate DIR [ENV...]: the MB/s of one run into DIR/s_*.bin (made afresh)
  local out=$1; shift
  rm -rf "$out"; mkdir -p "$out"
  env "$@" ./tokenizer prepare -n 1000000 "$big" "$out/s" 2>&1 >/dev/null | sed -nE 's/.* ([0-9.]+) MB\/s on ([0-9]+) threads?$/\1 \2/p'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
one=() all=() threads=1
for ((r = 0; r < repeats; r++)); do
  read -r rate _ < <(prepare_rate build/bench_prepare_1 OMP_NUM_THREADS=1); one+=("$rate")
  read -r rate threads < <(prepare_rate build/bench_prepare_all -u OMP_NUM_THREADS); all+=("$rate")
done
for f in build/bench_prepare_1/*.bin; do
  cmp -s "$f" "build/bench_prepare_all/${f##*/}" || { echo "bench_tokenizer: prepare on $threads threads wrote another ${f##*/} than on one" >&2; exit 1; }
done
[ "$(ls build/bench_prepare_1)" = "$(ls build/bench_prepare_all)" ] || { echo "bench_tokenizer: prepare wrote other shards on $threads threads" >&2; exit 1; }
o=$(printf '%s\n' "${one[@]}" | median)
a=$(printf '%s\n' "${all[@]}" | median)
echo "prepare throughput, $big ($(wc -c < "$big") bytes, $(ls build/bench_prepare_1 | wc -l) shards), median of $repeats runs"
echo "  1 thread: $o MB/s"
echo "  $threads threads: $a MB/s, the same shards byte for byte"
awk -v o="$o" -v a="$a" -v n="$threads" 'BEGIN { printf "  %d threads / 1 thread = %.2fx\n", n, a / o }'
