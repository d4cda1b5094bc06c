#!/usr/bin/env bash
# train_cpu built with AddressSanitizer and UndefinedBehaviorSanitizer runs clean: a tiny model
# trained with checkpoints, validation, sampling (through a tokenizer), shuffling, warmup and
# cosine decay, then resumed from its checkpoint; and a fresh -e d1 model (GPT-2's vocabulary,
# gpt2_build_init) for one step. Any report (out-of-bounds access, use after free, leak, signed
# overflow, misaligned access, ...) stops the program with a non-zero exit and fails the test.
set -u
. "$(dirname "$0")/lib.sh"
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=0:exitcode=99
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=99
need_python numpy
fresh_dir test_train_sanitizers
SAN="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all"
if ! echo 'int main(void){return 0;}' | $CC $SAN -x c - -o "$dir/probe" 2>/dev/null ||
   ! "$dir/probe"; then
  echo "skipped: $CC cannot build or run programs with -fsanitize=address,undefined here"
  exit 77
fi
# $CFLAGS first (OpenMP, -march=native: the same vector kernels as the real build), then -O1 -g
$CC $CFLAGS $SAN -o "$dir/train_cpu" train_cpu.c -lm || { echo "FAIL: train_cpu does not build"; exit 1; }

tiny_run_files 16 16 50 100 3

status=0
run() {  # NAME ARGS...
  local name=$1; shift
  "$dir/train_cpu" "$@" >"$dir/$name.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ] || grep -q 'Sanitizer\|runtime error' "$dir/$name.log"; then
    echo "FAIL $name (exit $rc):"; grep -A 25 'Sanitizer\|runtime error\|error:' "$dir/$name.log" | head -40
    status=1
  else
    echo "ok   $name: $(grep -c '^step ' "$dir/$name.log") step/validation lines, clean"
  fi
}
common=(-i "$dir/train.bin" -j "$dir/val.bin" -e "$dir/model.bin" -k "$dir/tok.bin" -b 2 -t 8
        -R 1 -u 1 -q 0.1 -c 0.1 -v 2 -m 2 -s 2 -g 6 -n 2 -o "$dir/out")
run "train 4 steps"  "${common[@]}" -x 4
run "resume to 6"    "${common[@]}" -x 6 -y 1
[ -f "$dir/out/model_00000006.bin" ] || { echo "FAIL: no checkpoint at step 6"; status=1; }
run "fresh d1"       -e d1 -i "$dir/train.bin" -j "$dir/val.bin" -k "$dir/tok.bin" -b 1 -t 8 \
                     -x 1 -v 1 -m 1 -s 1 -g 3
[ $status -eq 0 ] && echo "PASS: no sanitizer reports"
exit $status
