#!/usr/bin/env bash
# Exercise 6 (README.md beside this file): a sliding window for infer's KV cache, -W N. Builds
# ./infer, makes a small random GPT-2 (V = 50257 so that GPT-2's tokenizer applies, context maxT =
# 32) with dev/reference/gpt2_ref.py, and generates greedily far past the context with several windows;
# each continuation must be the text of window_ref.py's, a cache-free float64 PyTorch reference
# that runs a full forward pass over the window for every token. Also: without -W, infer still
# refuses more tokens than the context holds; -W of the context or more is refused, and so is -W
# without -n.
set -uo pipefail
here=doc/exercises/06-kv-window
out=build/exercises/06
mkdir -p "$out"
py=${PYTHON:-/usr/bin/python3}
"$py" -c 'import torch, numpy' 2>/dev/null || { echo "exercise 6 needs $py with torch and numpy (bash test/setup.sh)"; exit 1; }
make -s infer tokenizer >"$out/make.log" 2>&1 || { echo "make infer failed ($out/make.log):"; tail -n 5 "$out/make.log"; exit 1; }
model=$out/model.bin
"$py" dev/reference/gpt2_ref.py make-model --model "$model" --tokens "$out/unused.bin" --V 50257 --maxT 32 --L 2 --NH 2 \
    --C 32 --ntokens 10 --scale 1.0 --seed 2 >/dev/null || { echo "dev/reference/gpt2_ref.py make-model failed"; exit 1; }
tok=data/gpt2_tokenizer.bin

# window N PROMPT: infer's continuation against the reference's
check_window() {
    local w=$1 n=$2 prompt=$3 name="w$1_n$2"
    printf '%s' "$prompt" > "$out/$name.prompt"
    local ids; ids=$(./tokenizer -k "$tok" encode "$out/$name.prompt")
    if ! ./infer -e "$model" -k "$tok" -T 0 -E 0 -n "$n" -W "$w" -p "$prompt" >"$out/$name.infer" 2>"$out/$name.err"; then
        echo "./infer -T 0 -E 0 -n $n -W $w failed: $(head -n 1 "$out/$name.err")"; exit 1
    fi
    # shellcheck disable=SC2086  # the ids are words
    "$py" "$here/window_ref.py" "$model" "$w" "$n" $ids >"$out/$name.ref" 2>"$out/$name.gap" ||
        { echo "window_ref.py failed ($out/$name.gap)"; exit 1; }
    gap=$(sed -n 's/.*logits: //p' "$out/$name.gap")
    awk -v g="$gap" 'BEGIN { exit !(g > 1e-3) }' || { echo "(the check's own model has a near tie, gap $gap: report it)"; exit 1; }
    ./tokenizer -k "$tok" decode "$out/$name.ref" > "$out/$name.ref.txt"
    printf '\n' >> "$out/$name.ref.txt"   # infer ends its output with a newline
    if ! cmp -s "$out/$name.infer" "$out/$name.ref.txt"; then
        echo "-W $w, $n new tokens after a prompt of $(echo $ids | wc -w): infer's text differs from a full forward pass"
        echo "over the window (first difference at byte $(cmp "$out/$name.infer" "$out/$name.ref.txt" | sed -n 's/.*byte \([0-9]*\).*/\1/p'));"
        echo "  files: $out/$name.infer and $out/$name.ref.txt"
        exit 1
    fi
}
check_window 20 80 "To be, or not to be"
check_window 1 40 "Hello"
check_window 31 70 "The quick brown fox jumps over the lazy dog"
check_window 5 45 "A prompt that is longer than the window, of about fifteen tokens here"
# -n within the context: -W changes nothing
./infer -e "$model" -k "$tok" -T 0 -E 0 -n 10 -p "To be" >"$out/plain.txt" 2>/dev/null
./infer -e "$model" -k "$tok" -T 0 -E 0 -n 10 -W 8 -p "To be" >"$out/plain_w.txt" 2>/dev/null
cmp -s "$out/plain.txt" "$out/plain_w.txt" || { echo "-W changes a generation that fits in the context"; exit 1; }
# without -W, too many tokens are refused as before; a window as long as the context is refused
if ./infer -e "$model" -k "$tok" -T 0 -n 40 -p "To be" >/dev/null 2>"$out/refuse.err"; then
    echo "without -W, -n 40 on a context of 32 must still be refused"; exit 1; fi
if ./infer -e "$model" -k "$tok" -T 0 -n 40 -W 32 -p "To be" >/dev/null 2>"$out/refuse_w.err"; then
    echo "-W 32 on a context of 32 tokens must be refused (the window must be shorter)"; exit 1; fi
[ "$(wc -l < "$out/refuse_w.err")" = 1 ] || { echo "-W 32: expected one error line, got:"; cat "$out/refuse_w.err"; exit 1; }
# -W without -n: a full context no longer ends the generation, so -n must bound it; refused with one
# line that names -n, before anything is generated (-E 0: a solution that generates on would not stop
# at end-of-text, hence the timeout)
timeout 20 ./infer -e "$model" -k "$tok" -T 0 -E 0 -W 8 -p "To be" >"$out/no_n.txt" 2>"$out/no_n.err"
rc=$?
if [ $rc = 124 ]; then
    echo "-W 8 without -n must be refused (one error line that names -n): infer still ran after 20 seconds"; exit 1; fi
if [ $rc = 0 ] || [ -s "$out/no_n.txt" ]; then
    echo "-W 8 without -n must be refused (one error line that names -n): infer exited with status $rc"
    echo "  and generated $(wc -c < "$out/no_n.txt") bytes ($out/no_n.txt)"; exit 1; fi
if [ "$(wc -l < "$out/no_n.err")" != 1 ] || ! grep -q -e "-n\b" "$out/no_n.err"; then
    echo "-W 8 without -n: expected one error line that names -n, got:"; cat "$out/no_n.err"; exit 1; fi
echo "exercise 6: solved (four windows match a cache-free full forward; -W refused where it cannot work and without -n)"
