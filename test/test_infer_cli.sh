#!/usr/bin/env bash
# ./infer from the command line, on a small random llm.c checkpoint with GPT-2's vocabulary
# (L=2 NH=2 C=64 maxT=64): greedy output is deterministic and equals top-k 1; a seed reproduces
# its sample and another seed gives another; the prompt from stdin = the prompt from -p; stderr
# reports the prompt length and both speeds; the default -n stops when the context is full.
# Precision (-w): the header line says fp32 by default and bf16 with -w bf16, with what the bf16
# products run on; a bf16 checkpoint (llm.c's version 5, written here from the float32 one) is
# generated in bf16 without -w (the same text as with -w bf16), and -w fp32 overrides that.
# Bad input stops with one error line: unknown, missing or truncated model file, a prompt longer
# than the context, -n beyond the context, bad flags, -w other than fp32 or bf16.
set -u
cd "$(dirname "$0")/.."
CC=${CC:-gcc}
CFLAGS=${CFLAGS:--O2 -fopenmp -march=native}
PY=${PYTHON:-/usr/bin/python3}
TOK=data/gpt2_tokenizer.bin
if [ ! -f "$TOK" ]; then
  echo "skipped: $TOK not found (make data writes it)"
  exit 77
fi
if ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
  echo "skipped: $PY cannot import torch and numpy (bash test/setup.sh installs python3-torch)"
  exit 77
fi
dir=build/infer_cli
rm -rf "$dir" && mkdir -p "$dir"
$CC $CFLAGS -o build/infer infer.c -lm || { echo "FAIL: infer does not build"; exit 1; }
"$PY" dev/reference/gpt2_ref.py make-model --model "$dir/m.bin" --tokens "$dir/tok.bin" --V 50257 \
  --maxT 64 --L 2 --NH 2 --C 64 --ntokens 10 --scale 0.3 > /dev/null || { echo "FAIL: make-model"; exit 1; }
infer() { ./build/infer -e "$dir/m.bin" -k "$TOK" "$@"; }
# Waiting OpenMP threads sleep instead of spinning: with other jobs on the cores, spinning threads
# take the core from the one they wait for, and ~20 short runs can take minutes instead of seconds.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

status=0
ok() { echo "ok    $1"; }
fail() { echo "FAIL: $1"; status=1; }
prompt="The quick brown fox"

infer -p "$prompt" -n 20 -T 0 > "$dir/g1" 2> "$dir/g1.err" || fail "greedy run exits 0"
infer -p "$prompt" -n 20 -T 0 > "$dir/g2" 2> /dev/null
infer -p "$prompt" -n 20 -T 1 -K 1 -S 9 > "$dir/k1" 2> /dev/null
[ -s "$dir/g1" ] && cmp -s "$dir/g1" "$dir/g2" && ok "greedy output is deterministic" || fail "greedy output is deterministic"
cmp -s "$dir/g1" "$dir/k1" && ok "top-k 1 = greedy" || fail "top-k 1 = greedy"
grep -q "^prompt: 4 tokens, prefill .* tok/s" "$dir/g1.err" &&
  grep -q "^generation: 20 tokens (stop: -n limit), 19 decode steps in .* tok/s" "$dir/g1.err" &&
  ok "stderr: prompt length, prefill and generation tok/s" || { fail "stderr report"; cat "$dir/g1.err"; }

# ---- precision: the header line, the default of a bf16 checkpoint
header_says() {  # WHAT PRECISION FILE: the header line in FILE ends with PRECISION
  if grep -q "^model: .*, cpu, [0-9]* threads, $2\$" "$3"; then ok "$1: $(sed -n 's/^model: .*threads, //p' "$3")"
  else fail "$1: the header line does not end with '$2'"; cat "$3"; fi
}
header_says "the default is fp32" "fp32" "$dir/g1.err"
infer -p "$prompt" -n 20 -T 0 -w bf16 > "$dir/w16" 2> "$dir/w16.err" || fail "-w bf16 exits 0"
header_says "-w bf16 says so, and what the products run on" "bf16 (.*)" "$dir/w16.err"
"$PY" - "$dir/m.bin" "$dir/m16.bin" <<'EOF' || fail "writing a bf16 checkpoint"
import sys, numpy as np
raw = open(sys.argv[1], "rb").read()
header = np.frombuffer(raw[:1024], dtype=np.int32).copy()
header[1] = 5  # llm.c's bf16 checkpoint: the same header, then the parameters as bf16
u = np.frombuffer(raw[1024:], dtype=np.uint32).astype(np.uint64)
u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # to nearest, ties to even (no NaN here)
open(sys.argv[2], "wb").write(header.tobytes() + u.astype(np.uint16).tobytes())
EOF
infer16() { ./build/infer -e "$dir/m16.bin" -k "$TOK" "$@"; }
infer16 -p "$prompt" -n 20 -T 0 > "$dir/c16" 2> "$dir/c16.err" || fail "a bf16 checkpoint exits 0"
header_says "a bf16 checkpoint, no -w: bf16" "bf16 (.*)" "$dir/c16.err"
infer16 -p "$prompt" -n 20 -T 0 -w bf16 > "$dir/c16w" 2> /dev/null
[ -s "$dir/c16" ] && cmp -s "$dir/c16" "$dir/c16w" && ok "a bf16 checkpoint without -w = with -w bf16" ||
  fail "a bf16 checkpoint without -w prints other text than with -w bf16"
infer16 -p "$prompt" -n 20 -T 0 -w fp32 > /dev/null 2> "$dir/c32.err" || fail "a bf16 checkpoint with -w fp32 exits 0"
header_says "a bf16 checkpoint, -w fp32: fp32" "fp32" "$dir/c32.err"

infer -p "$prompt" -n 30 -S 5 -E 0 > "$dir/s1" 2> /dev/null
infer -p "$prompt" -n 30 -S 5 -E 0 > "$dir/s2" 2> /dev/null
infer -p "$prompt" -n 30 -S 6 -E 0 > "$dir/s3" 2> /dev/null
echo -n "$prompt" | infer -n 30 -S 5 -E 0 > "$dir/s4" 2> /dev/null
cmp -s "$dir/s1" "$dir/s2" && ok "the same seed gives the same sample" || fail "the same seed gives the same sample"
cmp -s "$dir/s1" "$dir/s3" && fail "another seed gives another sample" || ok "another seed gives another sample"
cmp -s "$dir/s1" "$dir/s4" && ok "prompt from stdin = prompt from -p" || fail "prompt from stdin = prompt from -p"
infer -p "$prompt" -n 30 -S 5 -K 40 -P 0.9 -T 0.8 -E 0 > /dev/null 2>&1 && ok "top-k, top-p and temperature together run" || fail "-K -P -T"

infer -p "Hi" -E 0 -T 0 > /dev/null 2> "$dir/full.err"
grep -q "^generation: 63 tokens (stop: context full)" "$dir/full.err" &&
  ok "without -n, generation stops when the 64-token context is full" || { fail "context full"; cat "$dir/full.err"; }
infer -p "Hi" -n 63 -T 0 > /dev/null 2>&1 && ok "-n 63 after a 1-token prompt fits the 64-token context" || fail "-n 63 fits"

expect_error() {  # description, phrase, then the command
  local what=$1 phrase=$2; shift 2
  "$@" > /dev/null 2> "$dir/err"
  local rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(wc -l < "$dir/err")" -eq 1 ] && grep -q "^error: .*$phrase" "$dir/err"; then
    ok "$what: $(cat "$dir/err")"
  else
    fail "$what: exit $rc, expected one error line with '$phrase', got:"; cat "$dir/err"
  fi
}
words() { local s="word"; for ((i = 1; i < $1; i++)); do s+=" word"; done; echo -n "$s"; }  # N tokens
expect_error "-n beyond the context" "exceed the model's context of 64 tokens" infer -p "Hi" -n 64
expect_error "prompt longer than the context" "the prompt is 70 tokens" infer -p "$(words 70)"
expect_error "prompt that fills the context" "the prompt is 64 tokens" infer -p "$(words 64)"
infer -p "$(words 63)" -n 1 > /dev/null 2>&1 && ok "a 63-token prompt and -n 1 fit" || fail "a 63-token prompt and -n 1 fit"
head -c 5000 "$dir/m.bin" > "$dir/trunc.bin"
expect_error "truncated checkpoint" "truncated" ./build/infer -e "$dir/trunc.bin" -k "$TOK" -p x
expect_error "unknown model file" "neither an llm.c checkpoint" ./build/infer -e README.md -k "$TOK" -p x
expect_error "missing model file" "cannot open" ./build/infer -e "$dir/nope.bin" -k "$TOK" -p x
expect_error "missing tokenizer file" "cannot open" ./build/infer -e "$dir/m.bin" -k "$dir/nope.tok" -p x
expect_error "no -e" "no model" ./build/infer -p x
expect_error "-P 0" "-P expects" infer -p x -P 0
expect_error "-T negative" "-T expects" infer -p x -T -1
expect_error "unknown flag" "unknown option -z" infer -p x -z 1
expect_error "-w fp16" "-w expects fp32 or bf16, got 'fp16'" infer -p x -w fp16
expect_error "-w BF16" "-w expects fp32 or bf16, got 'BF16'" infer -p x -w BF16
[ $status -eq 0 ] && echo "PASS: infer's command line"
exit $status
