#!/usr/bin/env bash
# The whole training program train_gpu.cu, run as a user runs it, against train_cpu:
#   bash test/train_gpu_checks.sh BINARY fp32|bf16
# BINARY is ./train_gpu on a GPU machine (test/test_gpu.sh) or build/emu/train_gpu, the same
# program on the CPU emulator of CUDA (test/test_train_gpu_emu.sh), run with -p fp32 or -p bf16.
# On a small random model (V=97, so the padded vocabulary 128 > V; 2 layers, 2 heads, C=32) and a
# shuffled token file:
#   1. train_cpu and BINARY with the same flags (fp32: 6 steps, bf16: 20; warmup then cosine
#      decay, weight decay, validation, samples and checkpoints every 3 steps): the same lines, and
#      losses, norms, checkpoint, AdamW state and main.log within test/compare_gpu_run.py's
#      tolerances for that precision (fp32: float32 rounding; bf16: doc/correctness.md);
#   2. BINARY's run cut after its checkpoint at step 3 (later files removed, as if it had been
#      killed) and resumed with -y 1 gives byte-identical model, state and main.log at the last
#      step, and prints the same steps after 3, as the uninterrupted run: every reduction of
#      train_gpu runs in a fixed order, so a step gives the same bits every time (and bf16's
#      weight copy is the float32 master copy rounded to nearest, which resuming remakes exactly);
#   3. the batch of 4 x 29 split (doc/parallel.md), against BINARY's undivided run (-b 4) with 1's
#      tolerances: BINARY -b 2 -d 116 (2 micro-steps); under mpirun, NP processes with NCCL, -b 1
#      -d 116 (NP = 2 on the emulator, which then shows 2 GPUs; on a GPU machine the GPUs it has,
#      at most 2), and 1 process; and that 1-process run against the same run without mpirun: the
#      same printed lines (one rank's all-reduce changes no bit). The split runs add the same
#      gradients in another order, which in bf16 moves a weight's rounding now and then, so they
#      drift from the undivided run as bf16 runs drift from train_cpu. The runs under mpirun are
#      skipped, saying so, where mpirun is missing or BINARY was built without MPI and NCCL;
#   4. fp32 only (the gradients are summed, scaled and clipped by the same code in both
#      precisions): the runs of 1 and 3 clip every step (norms above 1), and a clipped step's
#      update does not depend on the scale of the summed gradients, so that there a sum divided by
#      the wrong count shows only in the printed norm. A smaller model (C=8) on 128 tokens per
#      step (B=8 x T=16), whose norm stays below 1 on every step (checked), where AdamW's m and v
#      scale with the gradients: BINARY -b 1 -d 128 under mpirun as in 3 (on the emulator 2
#      processes x 4 micro-steps; without mpirun, 8 micro-steps) against train_cpu -b 8 with 1's
#      tolerances (test_train_dp holds train_cpu's moments to PyTorch's gradient);
#   5. the model split over 2 processes (doc/parallel.md), on a model whose sizes are no powers of
#      two (V=97, 3 layers, 6 heads, C=48; C=96 in bf16, for flash attention's head sizes), 4
#      micro-steps of B x T = 1 x 16 per step: under mpirun with NCCL, -tp 2 (3 heads and a part
#      of the MLP each), -pp 2 (1F1B over stages of 2 and 1 layers; in fp32 GPipe too) and -z 1
#      (2 data-parallel replicas, each updating half of the parameters; in bf16 keeping the
#      float32 master copy of its half only), against one process with the same flags: in fp32
#      train_cpu, with 1's tolerances (losses, norms and validation losses within 1e-5 relative;
#      the checkpoint and AdamW state each gathers); in bf16 BINARY's own run, with bf16's (the
#      split sums partial products in bf16). And -z 1 against the same 2 processes without it:
#      the same printed numbers and byte-identical checkpoint and state files (ZeRO-1 changes who
#      computes, not what), the same again when stopped at step 3 and resumed, and each
#      process's memory as it should be (and, without ZeRO, the bytes of its all-reduce).
#      Skipped, saying so, without mpirun, MPI and NCCL, or 2 GPUs.
set -u
. "$(dirname "$0")/lib.sh"
# why LOG: what a failed run said: its error lines (Open MPI's closing banner hides them), else its end
why() { grep -m 5 -iE "error|fail|abort" "$1" | grep -v "MPI_ABORT causes" || tail -5 "$1"; }
BIN=${1:?usage: test/train_gpu_checks.sh TRAIN_GPU_BINARY fp32|bf16}
PREC=${2:?usage: test/train_gpu_checks.sh TRAIN_GPU_BINARY fp32|bf16}
case $PREC in fp32) STEPS=6 ;; bf16) STEPS=20 ;; *) echo "FAIL: precision $PREC: expected fp32 or bf16"; exit 1 ;; esac
need_python numpy
fresh_dir "train_gpu_checks_$(basename "$BIN")_$PREC"
build_train_cpu
tiny_run_files 32 32 200 200 5

# B x T = 3 x 29: rows that are not multiples of 4 floats, tiles that are partly outside
common=(-i "$dir/train.bin" -j "$dir/val.bin" -e "$dir/model.bin" -k "$dir/tok.bin" -b 3 -t 29
        -R 1 -S 11 -l 3e-3 -u 2 -q 0.1 -c 0.1 -v 3 -m 2 -s 3 -g 5 -n 3)
run() {  # PROGRAM OUTDIR STDOUT ARGS...
  local prog=$1 out=$2 log=$3; shift 3
  "$prog" "${common[@]}" -o "$out" "$@" >"$log" 2>&1 ||
    { echo "FAIL: $prog ${common[*]} -o $out $* exited with $?:"; tail -5 "$log"; exit 1; }
}
status=0
last=$(printf '%08d' $STEPS)

echo "--- 1. $BIN -p $PREC against train_cpu, the same flags, $STEPS steps"
run "$dir/train_cpu" "$dir/cpu" "$dir/cpu.stdout" -x $STEPS
run "$BIN" "$dir/gpu" "$dir/gpu.stdout" -x $STEPS -p $PREC
grep -E '^(step|device|precision)' "$dir/gpu.stdout"
grep -q "^precision $PREC" "$dir/gpu.stdout" || { echo "FAIL: $BIN -p $PREC did not say it runs in $PREC"; status=1; }
$PY test/compare_gpu_run.py --precision $PREC "$dir/cpu" "$dir/cpu.stdout" "$dir/gpu" "$dir/gpu.stdout" $STEPS || status=1
if cmp -s "$dir/model.bin" "$dir/gpu/model_$last.bin"; then
  echo "FAIL: the model did not change in $STEPS steps"; status=1
fi

echo "--- 2. $BIN -p $PREC killed after its checkpoint at step 3, resumed with -y 1"
cut_run "$dir/gpu" "$dir/killed" 3
run "$BIN" "$dir/killed" "$dir/part.stdout2" -x $STEPS -p $PREC -y 1
grep -q "resumed from .* at step 3" "$dir/part.stdout2" || { echo "FAIL: did not resume from step 3"; status=1; }
if ! diff <(printed_after 3 "$dir/gpu.stdout") <(printed_after 3 "$dir/part.stdout2"); then
  echo "FAIL: the resumed run printed other losses or samples for steps 4-$STEPS"; status=1
fi
for f in model_$last.bin state_$last.bin main.log; do
  if ! cmp -s "$dir/gpu/$f" "$dir/killed/$f"; then
    echo "FAIL: $f differs between the uninterrupted and the resumed run"; status=1
  fi
done
echo "--- 3. $BIN -p $PREC with the batch split over micro-steps and processes, against its undivided run"
run "$BIN" "$dir/whole" "$dir/whole.stdout" -x $STEPS -p $PREC -b 4
run "$BIN" "$dir/accum" "$dir/accum.stdout" -x $STEPS -p $PREC -b 2 -d 116
grep -q "| 116 tok/step, 2 micro-steps$" "$dir/accum.stdout" || { echo "FAIL: -d 116 did not take 2 micro-steps"; status=1; }
$PY test/compare_gpu_run.py --precision $PREC "$dir/whole" "$dir/whole.stdout" "$dir/accum" "$dir/accum.stdout" $STEPS || status=1
if [[ "$BIN" == *emu* ]]; then np=2; export CUDA_EMU_DEVICES=2
else np=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); [ "$np" -gt 2 ] && np=2
fi
no_mpi=""  # why BINARY cannot run under mpirun here
if ! command -v mpirun >/dev/null; then no_mpi="no mpirun here; bash test/setup.sh installs openmpi-bin"
elif ! ldd "$BIN" 2>/dev/null | grep -q libmpi; then no_mpi="$BIN was built without MPI and NCCL"
fi
if [ -n "$no_mpi" ]; then
  echo "skipped: the runs under mpirun ($no_mpi)"
else
  ranks="$np"; [ "$np" -ne 1 ] && ranks="$np 1"
  for n in $ranks; do
    name=ranks$n
    mpi_run $n "$BIN" "${common[@]}" -o "$dir/$name" -x $STEPS -p $PREC -b 1 -d 116 >"$dir/$name.stdout" 2>&1 ||
      { echo "FAIL: mpirun -np $n $BIN -b 1 -d 116 exited with $?:"; why "$dir/$name.stdout"; status=1; continue; }
    grep -q "x $n process" "$dir/$name.stdout" || { echo "FAIL: mpirun -np $n: the run does not say it has $n processes"; status=1; }
    $PY test/compare_gpu_run.py --precision $PREC "$dir/whole" "$dir/whole.stdout" "$dir/$name" "$dir/$name.stdout" $STEPS || status=1
  done
  run "$BIN" "$dir/alone" "$dir/alone.stdout" -x $STEPS -p $PREC -b 1 -d 116
  if ! diff <(printed_after 0 "$dir/alone.stdout") <(printed_after 0 "$dir/ranks1.stdout"); then
    echo "FAIL: one process under mpirun (NCCL) printed other steps than the same run without mpirun"; status=1
  fi
fi

if [ "$PREC" = fp32 ]; then
  echo "--- 4. $BIN -p fp32 under the clip (every norm below 1), the batch split, against train_cpu's undivided run"
  $PY dev/reference/gpt2_ref.py make-model --model "$dir/small.bin" --tokens "$dir/small_train.bin" --V 97 --maxT 32 \
    --L 2 --NH 2 --C 8 --ntokens 700 --seed 11 >/dev/null || exit 1
  small=(-e "$dir/small.bin" -i "$dir/small_train.bin" -t 16 -x $STEPS)
  run "$dir/train_cpu" "$dir/small_cpu" "$dir/small_cpu.stdout" "${small[@]}" -b 8
  # the norms before clipping, printed with 4 decimals: below the clip of 1 is "0.", and a step at
  # or above it would take the clipped branch, where the divisor no longer shows
  norms=$(sed -nE 's/^step +[0-9]+\/[0-9]+ \| loss [^ ]+ \| norm ([^ ]+) .*/\1/p' "$dir/small_cpu.stdout")
  if [ "$(grep -c '^0\.' <<<"$norms")" != $STEPS ]; then
    echo "FAIL: train_cpu -b 8: not all of its $STEPS steps have a gradient norm below the clip of 1 (norms: $(echo $norms)); make its model or batch smaller"
    status=1
  fi
  if [ -n "$no_mpi" ]; then
    echo "(without mpirun: $no_mpi)"
    run "$BIN" "$dir/small_split" "$dir/small_split.stdout" "${small[@]}" -p fp32 -b 1 -d 128
  else
    mpi_run $np "$BIN" "${common[@]}" -o "$dir/small_split" "${small[@]}" -p fp32 -b 1 -d 128 >"$dir/small_split.stdout" 2>&1 ||
      { echo "FAIL: mpirun -np $np $BIN -b 1 -d 128 on the C=8 model exited with $?:"; why "$dir/small_split.stdout"; status=1; }
  fi
  grep -E '^batch:' "$dir/small_split.stdout"
  $PY test/compare_gpu_run.py --precision fp32 "$dir/small_cpu" "$dir/small_cpu.stdout" "$dir/small_split" \
    "$dir/small_split.stdout" $STEPS || status=1
fi

echo "--- 5. $BIN -p $PREC with the model split over 2 processes (-tp 2; -pp 2 over 4 micro-steps; -z 1), against one process"
if [ -n "$no_mpi" ]; then
  echo "skipped: the model split under mpirun ($no_mpi)"
elif [ "$np" -lt 2 ]; then
  echo "skipped: the model split needs 2 GPUs, and this machine has $np"
else
  # sizes that are no powers of two: V=97, 3 layers (2 + 1 stages), 6 heads (3 per part), C=48,
  # in bf16 C=96 (flash attention is built for head sizes from 16)
  start=$SECONDS
  if [ "$PREC" = fp32 ]; then C=48 MP_STEPS=10; ref="$dir/train_cpu"; else C=96 MP_STEPS=6; ref="$BIN"; fi
  $PY dev/reference/gpt2_ref.py make-model --model "$dir/mp.bin" --tokens "$dir/mp_train.bin" --V 97 --maxT 24 \
    --L 3 --NH 6 --C $C --ntokens 2000 --seed 13 >/dev/null || exit 1
  mp=(-e "$dir/mp.bin" -i "$dir/mp_train.bin" -j "$dir/val.bin" -k "$dir/tok.bin" -b 1 -t 16 -d 64 -x $MP_STEPS
      -l 3e-3 -u 2 -c 0.1 -v 5 -m 1 -s $MP_STEPS -g 3 -n 3 -p $PREC)
  # the reference: train_cpu in fp32 (float32 rounding apart, the same numbers); in bf16,
  # BINARY's own undivided run (the split sums the blocks' bf16 partial products in bf16)
  OMP_NUM_THREADS=1 "$ref" "${mp[@]}" -o "$dir/mp_one" >"$dir/mp_one.stdout" 2>&1 ||
    { echo "FAIL: $ref ${mp[*]} exited with $?:"; why "$dir/mp_one.stdout"; exit 1; }
  splits=("-tp 2:tp 2 x pp 1 x dp 1;" "-pp 2:tp 1 x pp 2 x dp 1;" "-z 1:tp 1 x pp 1 x dp 2, ZeRO-1 over dp;")
  # fp32 also under GPipe's schedule: every forward pass before the backward passes, each slot
  # keeping its own gradient of the loss
  [ "$PREC" = fp32 ] && splits+=("-pp 2 -ps gpipe:tp 1 x pp 2 x dp 1;")
  for parts in "${splits[@]}"; do
    grid=${parts#*:}; parts=${parts%:*}; name=mp_${parts//[- ]/}
    mpi_run 2 "$BIN" "${mp[@]}" $parts -o "$dir/$name" >"$dir/$name.stdout" 2>&1 ||
      { echo "FAIL: mpirun -np 2 $BIN $parts exited with $?:"; why "$dir/$name.stdout"; status=1; continue; }
    grep -qF "split: 2 processes = $grid" "$dir/$name.stdout" ||
      { echo "FAIL: $parts: the run does not say it is split as $grid"; status=1; }
    $PY test/compare_gpu_run.py --precision $PREC "$dir/mp_one" "$dir/mp_one.stdout" "$dir/$name" "$dir/$name.stdout" \
      $MP_STEPS >"$dir/$name.compare" || { cat "$dir/$name.compare"; status=1; }
    echo "$parts: $(grep -c '^ok' "$dir/$name.compare") checks ok; largest relative loss difference $(
      sed -nE 's/.*loss .* \(rel ([^,)]+).*/\1/p' "$dir/$name.compare" | sort -g | tail -1)"
  done
  # ZeRO-1 computes what data parallelism without it computes: each gradient the sum of the two
  # replicas' (a + b in either order: the same bits), the same AdamW, done by one replica per
  # part; in bf16 with the float32 master copy split too, and the bf16 copy and the float32
  # tensors the passes read gathered. So the same printed numbers, and the same gathered files.
  mpi_run 2 "$BIN" "${mp[@]}" -o "$dir/mp_dp2" >"$dir/mp_dp2.stdout" 2>&1 ||
    { echo "FAIL: mpirun -np 2 $BIN (data parallel) exited with $?:"; why "$dir/mp_dp2.stdout"; status=1; }
  if ! diff <(grep -oE "(loss|norm) [0-9.]+" "$dir/mp_dp2.stdout") <(grep -oE "(loss|norm) [0-9.]+" "$dir/mp_z1.stdout"); then
    echo "FAIL: -z 1 printed other losses or norms than the same 2 processes without it"; status=1
  fi
  mp_last=$(printf '%08d' $MP_STEPS)
  for f in model_$mp_last.bin state_$mp_last.bin; do
    cmp -s "$dir/mp_dp2/$f" "$dir/mp_z1/$f" || { echo "FAIL: -z 1 wrote another $f than the run without it"; status=1; }
  done
  # -z 1 stopped after its checkpoint at step 3 and resumed by -z 1 (each process takes its part
  # of the whole files again): the uninterrupted run's steps and files, to the bit
  cut_run "$dir/mp_z1" "$dir/mp_z1_resumed" 3
  mpi_run 2 "$BIN" "${mp[@]}" -z 1 -o "$dir/mp_z1_resumed" -y 1 >"$dir/mp_z1_resumed.stdout" 2>&1 ||
    { echo "FAIL: mpirun -np 2 $BIN -z 1 -y 1 exited with $?:"; why "$dir/mp_z1_resumed.stdout"; status=1; }
  if ! diff <(printed_after 3 "$dir/mp_z1.stdout") <(printed_after 3 "$dir/mp_z1_resumed.stdout"); then
    echo "FAIL: -z 1 resumed at step 3 printed other steps than the run never stopped"; status=1
  fi
  for f in model_$mp_last.bin state_$mp_last.bin; do
    cmp -s "$dir/mp_z1/$f" "$dir/mp_z1_resumed/$f" || { echo "FAIL: -z 1 resumed at step 3 wrote another $f"; status=1; }
  done
  # the memory each process of -z 1 reports: float32 parameters and moments of half of them; in
  # bf16, the bf16 copy and the float32 tensors the passes read (all but the 12 L C^2 of the
  # blocks' matrices), and as optimizer state the moments and float32 master copy of half
  n=$(sed -nE 's/^model: .*, ([0-9]+) parameters .*/\1/p' "$dir/mp_z1.stdout")
  half=$(( (n + 1) / 2 ))
  # plain data parallel: each process sends 2 (N-1)/N of the float32 gradients (a ring all-reduce)
  mb=$($PY -c "print('%.2f' % (4 * $n / 1e6))")
  for r in 0 1; do
    grep -qE "^rank $r \(tp 0, pp 0, dp $r\): layers 0-2, heads 6/6 \| .* \| sent $mb MB/step \(tp 0.00, pp 0.00, dp $mb, wte 0.00\)$" \
      "$dir/mp_dp2.stdout" || { echo "FAIL: data parallel: rank $r does not report the $mb MB of its all-reduce"; status=1; }
  done
  if [ "$PREC" = fp32 ]; then params=$((4 * n)) adamw=$((8 * half))
  else params=$((2 * 2 * half + 4 * (n - 12 * 3 * C * C))) adamw=$((12 * half))
  fi
  want=$($PY -c "print('params %.1f MB, grads %.1f MB, AdamW %.1f MB' % ($params / 1e6, 8 * $half / 1e6, $adamw / 1e6))")
  if grep -qF "| $want," "$dir/mp_z1.stdout"; then echo "-z 1: each process: $want"
  else echo "FAIL: -z 1 does not report $want:"; grep '^rank' "$dir/mp_z1.stdout"; status=1
  fi
  echo "(the model split: $((SECONDS - start)) s)"
fi

[ $status -eq 0 ] && echo "ok: $BIN -p $PREC follows train_cpu, resumes bit for bit, splits its batch and its model"
exit $status
