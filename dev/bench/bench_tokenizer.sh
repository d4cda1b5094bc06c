#!/usr/bin/env bash
# Encode throughput of ./tokenizer against tiktoken (npm tiktoken 1.0.22, gpt2, encode_ordinary),
# on the same texts in the same run, one thread each. Both time the encode call only: the file
# and the tokenizer are loaded before the clock starts. Median of REPEATS runs (default 10).
# Texts: Tiny Shakespeare (1.1 MB, English), and a mixed one made here from it with a fixed seed:
# its lines interleaved with the multilingual edge cases (CJK, Arabic, Hebrew, emoji, Unicode
# spaces, digits) of test/tokenizer_edge_cases.txt.
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
