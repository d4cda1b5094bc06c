#!/usr/bin/env bash
# The whole training program train_gpu.cu, run as a user runs it, against train_cpu:
#   bash test/train_gpu_checks.sh BINARY
# BINARY is ./train_gpu on a GPU machine (test/test_gpu.sh) or build/emu/train_gpu, the same
# program on the CPU emulator of CUDA (test/test_train_gpu_emu.sh). On a small random model (V=97,
# so the padded vocabulary 128 > V; 2 layers, 2 heads, C=32) and a shuffled token file:
#   1. train_cpu and BINARY with the same flags (6 steps, warmup then cosine decay, weight decay,
#      validation, samples and checkpoints every 3 steps): the same lines, losses and norms to
#      float32 rounding, and checkpoint, AdamW state and main.log within test/compare_gpu_run.py's
#      tolerances;
#   2. BINARY's run cut after its checkpoint at step 3 (later files removed, as if it had been
#      killed) and resumed with -y 1 gives byte-identical model, state and main.log at step 6,
#      and prints the same steps 4-6, as the uninterrupted run: every
#      reduction of train_gpu runs in a fixed order, so a step gives the same bits every time.
set -u
. "$(dirname "$0")/lib.sh"
BIN=${1:?usage: test/train_gpu_checks.sh TRAIN_GPU_BINARY}
need_python numpy
fresh_dir "train_gpu_checks_$(basename "$BIN")"
build_train_cpu
ref="$PY dev/gpt2_ref.py"
$ref make-model --model "$dir/model.bin" --tokens "$dir/train.bin" --V 97 --maxT 32 --L 2 \
  --NH 2 --C 32 --ntokens 200 --seed 5 >/dev/null || exit 1
$ref make-tokens --out "$dir/val.bin" --V 97 --n 200 --seed 6 >/dev/null || exit 1
$ref make-tokenizer --out "$dir/tok.bin" >/dev/null || exit 1

# B x T = 3 x 29: rows that are not multiples of 4 floats, tiles that are partly outside
common=(-i "$dir/train.bin" -j "$dir/val.bin" -e "$dir/model.bin" -k "$dir/tok.bin" -b 3 -t 29
        -R 1 -S 11 -l 3e-3 -u 2 -q 0.1 -c 0.1 -v 3 -m 2 -s 3 -g 5 -n 3)
run() {  # PROGRAM OUTDIR STDOUT ARGS...
  local prog=$1 out=$2 log=$3; shift 3
  "$prog" "${common[@]}" -o "$out" "$@" >"$log" 2>&1 ||
    { echo "FAIL: $prog ${common[*]} -o $out $* exited with $?:"; tail -5 "$log"; exit 1; }
}
status=0

echo "--- 1. $BIN against train_cpu, the same flags, 6 steps"
run "$dir/train_cpu" "$dir/cpu" "$dir/cpu.stdout" -x 6
run "$BIN" "$dir/gpu" "$dir/gpu.stdout" -x 6
grep -E '^(step|device)' "$dir/gpu.stdout"
$PY test/compare_gpu_run.py "$dir/cpu" "$dir/cpu.stdout" "$dir/gpu" "$dir/gpu.stdout" 6 || status=1
if cmp -s "$dir/model.bin" "$dir/gpu/model_00000006.bin"; then
  echo "FAIL: the model did not change in 6 steps"; status=1
fi

echo "--- 2. $BIN killed after its checkpoint at step 3, resumed with -y 1"
cut_run "$dir/gpu" "$dir/killed" 3
run "$BIN" "$dir/killed" "$dir/part.stdout2" -x 6 -y 1
grep -q "resumed from .* at step 3" "$dir/part.stdout2" || { echo "FAIL: did not resume from step 3"; status=1; }
if ! diff <(printed_after 3 "$dir/gpu.stdout") <(printed_after 3 "$dir/part.stdout2"); then
  echo "FAIL: the resumed run printed other losses or samples for steps 4-6"; status=1
fi
for f in model_00000006.bin state_00000006.bin main.log; do
  if ! cmp -s "$dir/gpu/$f" "$dir/killed/$f"; then
    echo "FAIL: $f differs between the uninterrupted and the resumed run"; status=1
  fi
done
[ $status -eq 0 ] && echo "ok: $BIN follows train_cpu, and resumes bit for bit"
exit $status
