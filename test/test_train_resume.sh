#!/usr/bin/env bash
# Resuming continues a run bit for bit: a run, and the same run stopped after a checkpoint and
# resumed with -y 1, give the same training and validation losses, the same samples after the
# checkpoint, the same main.log and byte-identical model and state files at the last step.
#   1. stop by design: -x 3, then -x 6 -y 1 (constant learning rate after warmup, so the
#      schedule does not depend on -x)
#   2. stop by accident: a cosine-decay run of -x 6 checkpointing every 3 steps, with everything
#      after step 3 deleted as if it had been killed there, then resumed with -y 1
#   3. stop by accident partway through a later pass: as 2 with -b 1 and -x 12, killed after
#      step 9, where the state holds pass 1 and batch 3 of it (checked): the loader must restore
#      both the pass (each pass has its own shuffled order) and the position in it
# All use a shuffled training file of 3 batches (6 of -b 1 in 3), so that 1 and 2 resume at the
# end of the first pass and start a new one (the loader's epoch and shuffle order are part of the
# saved state), and validation and sampling every 3 steps (the sampler's random state is too).
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
compare() {  # NAME FULLDIR RESUMEDDIR CUT LAST: the runs after step CUT, up to step LAST
  local name=$1 a=$2 b=$3 cut=$4 last=$5 ok=1
  for f in model_$(printf %08d "$last").bin state_$(printf %08d "$last").bin main.log; do
    if [ ! -f "$b/$f" ] || ! cmp -s "$a/$f" "$b/$f"; then
      echo "FAIL $name: $f differs between the uninterrupted and the resumed run"; ok=0
    fi
  done
  if ! diff <(printed_after "$cut" "$a.stdout") <(printed_after "$cut" "$b.stdout2") >"$b.diff"; then
    echo "FAIL $name: the printed losses or samples of steps $((cut + 1))-$last differ:"; head -20 "$b.diff"; ok=0
  fi
  local lines; lines=$(printed_after "$cut" "$a.stdout" | grep -c '^step')
  if [ "$lines" -ne $((last - cut + 1)) ]; then   # the training steps and the validation at the last step
    echo "FAIL $name: expected the output of steps $((cut + 1))-$last ($((last - cut)) steps, 1 validation), found $lines lines"; ok=0
  fi
  if [ $ok -eq 1 ]; then
    echo "ok   $name: steps $((cut + 1))-$last identical; model, state and main.log byte-identical"
  else
    status=1
  fi
}

# 1. -x 3, then resume to 6
train "$dir/full" stdout -x 6 -q 1
train "$dir/part" stdout -x 3 -q 1
train "$dir/part" stdout2 -x 6 -q 1 -y 1
grep -q "resumed from .* at step 3" "$dir/part.stdout2" || { echo "FAIL: did not resume from step 3"; status=1; }
compare "stop at 3, resume" "$dir/full" "$dir/part" 3 6

# 2. cosine decay, killed after the checkpoint of step 3
train "$dir/cos" stdout -x 6 -q 0.1
cut_run "$dir/cos" "$dir/killed" 3
train "$dir/killed" stdout2 -x 6 -q 0.1 -y 1
compare "killed at 3, resume (cosine)" "$dir/cos" "$dir/killed" 3 6

# 3. -b 1: 6 batches per pass; killed after step 9, the fourth batch of the second pass
train "$dir/later" stdout -b 1 -x 12 -q 0.1
state=$dir/later/state_00000009.bin
# the state's header: epoch (passes completed) and batch_index as int64 at int32 8 and 10
read -r epoch batch_index < <(od -An -t d8 -j 32 -N 16 "$state")
if [ "${epoch:-}" != 1 ] || [ "${batch_index:-}" != 3 ]; then
  echo "FAIL: $state holds epoch ${epoch:-?}, batch ${batch_index:-?}; this case needs a checkpoint partway through a later pass (epoch 1, batch 3)"
  status=1
fi
cut_run "$dir/later" "$dir/later_killed" 9
train "$dir/later_killed" stdout2 -b 1 -x 12 -q 0.1 -y 1
compare "killed at 9 in the second pass, resume" "$dir/later" "$dir/later_killed" 9 12

# The runs must have trained: the loss and the weights moved.
if cmp -s "$dir/model.bin" "$dir/full/model_00000006.bin"; then
  echo "FAIL: the model did not change in 6 steps"; status=1
fi
[ $status -eq 0 ] && echo "PASS: resumed runs reproduce uninterrupted ones exactly"
exit $status
