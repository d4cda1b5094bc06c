#!/usr/bin/env bash
# Resuming continues a run bit for bit: a run of 6 steps, and the same run stopped after step 3
# and resumed with -y 1, give the same training and validation losses, the same samples, the
# same main.log and byte-identical model_00000006.bin and state_00000006.bin.
#   1. stop by design: -x 3, then -x 6 -y 1 (constant learning rate after warmup, so the
#      schedule does not depend on -x)
#   2. stop by accident: a cosine-decay run of -x 6 checkpointing every 3 steps, with everything
#      after step 3 deleted as if it had been killed there, then resumed with -y 1
# Both use a shuffled training file of 3 batches, so the resumed run starts a new pass over the
# data (the loader's epoch and shuffle order are part of the saved state), and validation and
# sampling every 3 steps (the sampler's random state is too).
set -u
. "$(dirname "$0")/lib.sh"
need_python numpy
fresh_dir test_train_resume
build_train_cpu
tiny_run_files 16 16 50 100 3

common=(-i "$dir/train.bin" -j "$dir/val.bin" -e "$dir/model.bin" -k "$dir/tok.bin" -b 2 -t 8
        -R 1 -S 7 -u 2 -c 0.1 -v 3 -m 2 -s 3 -g 6 -n 3)
train() {  # OUTDIR LOGNAME ARGS...: runs train_cpu, stdout to OUTDIR/LOGNAME
  local out=$1 name=$2; shift 2
  "$dir/train_cpu" "${common[@]}" -o "$out" "$@" >"$out.$name" 2>&1 ||
    { echo "FAIL: train_cpu $* exited with $?:"; tail -5 "$out.$name"; exit 1; }
}

status=0
compare() {  # NAME FULLDIR RESUMEDDIR
  local name=$1 a=$2 b=$3 ok=1
  for f in model_00000006.bin state_00000006.bin main.log; do
    if [ ! -f "$b/$f" ] || ! cmp -s "$a/$f" "$b/$f"; then
      echo "FAIL $name: $f differs between the uninterrupted and the resumed run"; ok=0
    fi
  done
  if ! diff <(printed_after 3 "$a.stdout") <(printed_after 3 "$b.stdout2") >"$b.diff"; then
    echo "FAIL $name: the printed losses or samples of steps 4-6 differ:"; head -20 "$b.diff"; ok=0
  fi
  local lines; lines=$(printed_after 3 "$a.stdout" | grep -c '^step')
  if [ "$lines" -ne 4 ]; then   # 3 training steps and the validation at step 6
    echo "FAIL $name: expected the output of steps 4-6 (3 steps, 1 validation), found $lines lines"; ok=0
  fi
  if [ $ok -eq 1 ]; then
    echo "ok   $name: steps 4-6 identical; model, state and main.log byte-identical"
  else
    status=1
  fi
}

# 1. -x 3, then resume to 6
train "$dir/full" stdout -x 6 -q 1
train "$dir/part" stdout -x 3 -q 1
train "$dir/part" stdout2 -x 6 -q 1 -y 1
grep -q "resumed from .* at step 3" "$dir/part.stdout2" || { echo "FAIL: did not resume from step 3"; status=1; }
compare "stop at 3, resume" "$dir/full" "$dir/part"

# 2. cosine decay, killed after the checkpoint of step 3
train "$dir/cos" stdout -x 6 -q 0.1
cut_run "$dir/cos" "$dir/killed" 3
train "$dir/killed" stdout2 -x 6 -q 0.1 -y 1
compare "killed at 3, resume (cosine)" "$dir/cos" "$dir/killed"

# The runs must have trained: the loss and the weights moved.
if cmp -s "$dir/model.bin" "$dir/full/model_00000006.bin"; then
  echo "FAIL: the model did not change in 6 steps"; status=1
fi
[ $status -eq 0 ] && echo "PASS: resumed runs reproduce uninterrupted ones exactly"
exit $status
