#!/usr/bin/env bash
# No quadratic blow-up: 1 MB pieces of one class (letters, spaces, digits, punctuation, newlines,
# 2- and 3-byte letters, random letters and digits) each encode in well under LIMIT seconds and
# decode back exactly. A merge loop that rescans the piece after every merge (tiktoken's) needs
# ~10^11 steps on such a piece, hours; ours takes a heap step per merge, under a second here.
# (Exactness on long pieces against tiktoken is in test_tokenizer_cases, at 5,000 characters.)
cd "$(dirname "$0")/.." || exit 1
make -s tokenizer data >/dev/null || exit 1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
LIMIT=10
/usr/bin/python3 - "$tmp" <<'PY' || exit 1
import random, sys
r, M, d = random.Random(1), 1 << 20, sys.argv[1]
files = {
    "letters": b"a" * M, "spaces": b" " * M, "digits": b"7" * M, "punctuation": b"!" * M,
    "newlines": b"\n" * M, "spaces_then_word": b" " * M + b"word", "e_acute": "\u00e9".encode() * (M // 2),
    "random_letters": bytes(r.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(M)),
    "random_digits": bytes(r.choice(b"0123456789") for _ in range(M)),
    "cjk": "".join(r.choice("\u4f60\u597d\u4e16\u754c\u65e5\u672c\u8a9e") for _ in range(M // 3)).encode(),
}
for name, data in files.items():
    open(f"{d}/{name}.txt", "wb").write(data)
PY
failed=0
for f in "$tmp"/*.txt; do
  name=$(basename "$f" .txt)
  start=$(date +%s%N)
  timeout $((LIMIT * 3)) ./tokenizer encode "$f" > "$tmp/ids" || { echo "FAIL: $name: encode failed or ran past $((LIMIT * 3)) s"; failed=1; continue; }
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  ./tokenizer decode "$tmp/ids" | cmp -s - "$f" || { echo "FAIL: $name: decode(encode(x)) != x"; failed=1; }
  if [ $ms -gt $((LIMIT * 1000)) ]; then
    echo "FAIL: $name: $ms ms (limit $LIMIT s)"; failed=1
  else
    printf 'ok: %-16s %8d bytes -> %7d tokens in %5d ms\n' "$name" "$(wc -c < "$f")" "$(wc -w < "$tmp/ids")" "$ms"
  fi
done
[ $failed -eq 0 ] && echo "PASS"
exit $failed
