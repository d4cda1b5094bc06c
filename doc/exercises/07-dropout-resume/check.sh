#!/usr/bin/env bash
# Exercise 7 (README.md beside this file): dropout on the residual branches, -D P, that survives a
# resume. Builds ./train_cpu and dropout_check.c (beside this file), then checks:
#   1. -D 0 trains bit for bit as a run without -D;
#   2. -D 0.2 changes the training losses but not the validation loss before training (dropout
#      is off in validation);
#   3. dropout_check: the backward pass is the derivative of the forward with the same masks; the
#      masks drop a fraction p of each branch (within 5 binomial standard deviations), a mask of
#      their own on each branch, and scale the kept values by 1/(1-p);
#   4. a -D 0.2 run of 6 steps, and the same run stopped at step 3 and resumed with -y 1, give
#      the same losses and a byte-identical final checkpoint;
#   5. dropout is off in evaluation after training steps too: the -D 0.2 run's validation loss and
#      sample at step 3 are those of its model_00000003.bin evaluated by a run without -D.
# Run from the root of the tree.
set -uo pipefail
here=doc/exercises/07-dropout-resume
out=build/exercises/07
rm -rf "$out" && mkdir -p "$out"
make -s train_cpu >"$out/make.log" 2>&1 || { echo "make train_cpu failed ($out/make.log):"; tail -n 5 "$out/make.log"; exit 1; }
export OMP_WAIT_POLICY=passive
common=(-e d2 -b 2 -t 16 -v 3 -m 2 -s 0 -S 11)
# the lines of a run without timings (the part two runs must share)
losses() { grep -E '^step( +[0-9]+/| [0-9]+:)' "$1" | sed -E 's/ \| [0-9.]+ ms \|.*$//'; }
run() {  # NAME ARGS...
    local name=$1; shift
    ./train_cpu "${common[@]}" "$@" >"$out/$name.txt" 2>&1 || {
        echo "./train_cpu ${common[*]} $*: $(grep -m 1 error "$out/$name.txt" || tail -n 1 "$out/$name.txt")"; exit 1; }
}

run plain -x 4
run d0 -x 4 -D 0
cmp -s <(losses "$out/plain.txt") <(losses "$out/d0.txt") || { echo "-D 0 changes the run: it must be the run without -D, bit for bit"; exit 1; }
run d2 -x 4 -D 0.2
if cmp -s <(losses "$out/plain.txt") <(losses "$out/d2.txt"); then echo "-D 0.2 trains exactly as without dropout: no dropout happens"; exit 1; fi
[ "$(grep -m 1 'val loss' "$out/plain.txt")" = "$(grep -m 1 'val loss' "$out/d2.txt")" ] ||
    { echo "-D 0.2 changes the validation loss before any training: dropout must be off in validation"; exit 1; }

"${CC:-gcc}" -O2 -fopenmp -I. "$here/dropout_check.c" -o "$out/dropout_check" -lm >"$out/compile.log" 2>&1 || {
    echo "$here/dropout_check.c does not compile: does GPT2 (gpt2/model.h) have the fields dropout and dropout_seed? ($out/compile.log)"
    grep -m 2 error "$out/compile.log"; exit 1; }
"$out/dropout_check" >"$out/dropout_check.txt" 2>&1 || { cat "$out/dropout_check.txt"; exit 1; }

run full -x 6 -D 0.2 -n 3 -o "$out/full" -s 3 -g 8
run first -x 3 -D 0.2 -n 3 -o "$out/resumed"
run second -x 6 -D 0.2 -n 3 -o "$out/resumed" -y 1
if ! cmp -s <(losses "$out/full.txt" | awk '/^step +[4-6]\// || /^step [4-6]:/') <(losses "$out/second.txt"); then
    echo "-D 0.2: the run resumed at step 3 gives other losses than the run that went straight to step 6:"
    diff <(losses "$out/full.txt" | awk '/^step +[4-6]\// || /^step [4-6]:/') <(losses "$out/second.txt") | head -n 6
    exit 1
fi
cmp -s "$out/full/model_00000006.bin" "$out/resumed/model_00000006.bin" ||
    { echo "-D 0.2: the resumed run's model_00000006.bin differs from the straight run's"; exit 1; }

# the model of step 3 without dropout: its validation loss before any step, and after a step at
# learning rate 0 (which leaves the weights as they are) its first sample, drawn with the same
# random numbers as the -D 0.2 run's first, at step 3
run eval -e "$out/full/model_00000003.bin" -x 1 -l 0 -v 1 -s 1 -g 8
sample() { awk -v s="--- sample at step $2 ---" '$0 == s {on = 1; next} on && /^---$/ {exit} on' "$1"; }
trained=$(grep -m 1 '^step 3: val loss' "$out/full.txt" | sed 's/.*val loss //')
evaluated=$(grep -m 1 '^step 0: val loss' "$out/eval.txt" | sed 's/.*val loss //')
[ "$trained" = "$evaluated" ] || {
    echo "-D 0.2: the validation loss at step 3 is $trained, but the model of step 3 (model_00000003.bin) without"
    echo "dropout has $evaluated: dropout must be off in every validation, not only the first"; exit 1; }
[ -n "$(sample "$out/full.txt" 3)" ] && [ "$(sample "$out/full.txt" 3)" = "$(sample "$out/eval.txt" 1)" ] || {
    echo "-D 0.2: the sample at step 3 is not the one the model of step 3 (model_00000003.bin) writes without"
    echo "dropout, from the same random numbers: dropout must be off in samples"; exit 1; }
cat "$out/dropout_check.txt"
echo "exercise 7: solved (-D 0 unchanged, the masks' statistics, backward = derivative, resume bit for bit, dropout off in evaluation)"
