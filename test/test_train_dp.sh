#!/usr/bin/env bash
# Gradient accumulation (-d) and data-parallel training under mpirun (doc/parallel.md): ./train_cpu
# as make builds it (with Open MPI, which test/setup.sh installs), each process on one OpenMP
# thread (test/lib.sh: mpi_run).
#
# On a small random model (V=97, L=2, NH=2, C=32) and shuffled token files, the run of B=4 rows
# of T=16 per step, split four ways, each against the undivided run:
#   1. -b 2 -d 64 (2 micro-steps); mpirun -np 2 -b 2 (2 processes); mpirun -np 2 -b 1 -d 64
#      (2 processes x 2 micro-steps): the same lines, losses, norms, checkpoint, AdamW state and
#      main.log within float32 rounding (test/compare_gpu_run.py --precision fp32), one summary and
#      one line per step (only rank 0 prints), which name the micro-steps and processes, and
#      each process's line after step 1: its memory and the bytes it sent (its ring all-reduce share);
#   2. the same three splits against PyTorch's undivided run (dev/reference/gpt2_ref.py train, B=4; test/
#      compare_run.py, the tolerances of test_vs_pytorch);
#   3. under the clip: the runs of 1 clip every step (norms above 1), and a clipped step's update
#      does not depend on the scale of the summed gradients, so that there a wrong divisor shows
#      only in the printed norm. A smaller model (C=8) on 128 tokens per step (B=8 x T=16, not
#      shuffled), whose norm stays below 1 on every step (checked), alone and split over 2
#      processes x 4 micro-steps (mpirun -np 2 -b 1 -d 128: the gradients of 8 parts summed).
#      Unclipped, AdamW's m and v scale with the gradients: the split run against the undivided
#      one as in 1, and the moments of both after step 1 against PyTorch's gradient of that step
#      (test/compare_moments.py: m = 0.1 g, v = 0.05 g^2), so that a sum divided by another count
#      than the run's parts (the micro-steps alone, the processes alone, twice the parts) fails;
#   4. resume: a 2-process run cut after its checkpoint at step 3 and resumed by 2 processes ends
#      byte-identical to the uninterrupted one; the undivided run's checkpoint resumed by 2
#      processes, and a 2-process run's by one process with 2 micro-steps (-d taken from the
#      state), follow the undivided run;
#   5. errors, each one line (from one process) and a non-zero exit, within a time limit (never
#      a hang), with no -o folder left behind where the run could not start: -d that does not
#      divide (alone and under mpirun), a resume with another -d, ranks given different options,
#      a rank whose training file is missing, a rank killed during training, and a build without
#      MPI started by mpirun.
set -u
. "$(dirname "$0")/lib.sh"
need_python numpy
command -v mpirun >/dev/null || { echo "skipped: no mpirun (bash test/setup.sh installs openmpi-bin)"; exit 77; }
[ -x ./train_cpu ] || { echo "FAIL: ./train_cpu not found (run make first)"; exit 1; }
fresh_dir train_dp
export OMP_NUM_THREADS=1
tiny_run_files 32 32 700 300 7
STEPS=8
common=(-e "$dir/model.bin" -i "$dir/train.bin" -j "$dir/val.bin" -k "$dir/tok.bin" -t 16 -x $STEPS
        -R 1 -S 3 -l 3e-3 -u 2 -q 0.1 -c 0.1 -v 3 -m 2 -s 4 -g 5 -n 3)
status=0
bad() { echo "FAIL: $*"; status=1; }
compare() {  # NAME [UNDIVIDED]: run NAME against the undivided run UNDIVIDED (default: one)
  local one=${2:-one}
  echo "-- $1 against the undivided run $one"
  $PY test/compare_gpu_run.py --precision fp32 "$dir/$one" "$dir/$one.out" "$dir/$1" "$dir/$1.out" $STEPS ||
    bad "$1 does not follow the undivided run $one"
}

echo "--- 1. splits of the batch against the undivided run (B=4 x T=16 per step)"
train_run one 0 -b 4
train_run accum 0 -b 2 -d 64
train_run ranks 2 -b 2
train_run both 2 -b 1 -d 64
for name in accum ranks both; do compare $name; done
grep -q "| 64 tok/step, 2 micro-steps$" "$dir/accum.out" || bad "accum's progress line does not say its 2 micro-steps"
grep -q "| 64 tok/step, 1 micro-step x 2 processes, all-reduce [0-9.]* ms, comm [0-9.]* ms$" "$dir/ranks.out" ||
  bad "ranks' progress line does not say its 2 processes, the all-reduce time and the time in collectives"
# each process holds the whole model and sends 2 (N-1)/N of the gradients, a ring all-reduce's share
n=$(sed -n -E 's/^model: .*, ([0-9]+) parameters.*/\1/p' "$dir/ranks.out")
mb=$(awk -v n="$n" 'BEGIN { printf "%.2f", n * 4 / 1e6 }')
for r in 0 1; do
  grep -qE "^rank $r \(tp 0, pp 0, dp $r\): layers 0-1, heads 2/2 \| params .* \| sent $mb MB/step \(tp 0.00, pp 0.00, dp $mb, wte 0.00\)$" "$dir/ranks.out" ||
    bad "ranks: rank $r does not print its memory and the $mb MB of its share of the all-reduce"
done
grep -q "^batch: 64 tokens per step = B=1 x T=16 x 2 micro-steps x 2 processes$" "$dir/both.out" ||
  bad "both's summary does not say how its batch is split"
for name in ranks both; do
  [ "$(grep -c '^model:' "$dir/$name.out")" = 1 ] || bad "$name: the summary printed $(grep -c '^model:' "$dir/$name.out") times, not once"
  [ "$(grep -c '^step .*/' "$dir/$name.out")" = $STEPS ] || bad "$name: not one progress line per step"
  [ "$(grep -c '^--- sample' "$dir/$name.out")" = 2 ] || bad "$name: samples printed by more than rank 0"
done

echo "--- 2. the same splits against PyTorch's undivided run"
need_python torch
args=(-e "$dir/model.bin" -i "$dir/train.bin" -j "$dir/val.bin" -t 16 -x $STEPS -l 3e-3 -u 2 -q 0.1 -c 0.1 -v 3 -m 2)
$PY dev/reference/gpt2_ref.py train --out "$dir/ref.npz" "${args[@]}" -b 4 >/dev/null || exit 1
for split in "0 -b 2 -d 64" "2 -b 2" "2 -b 1 -d 64"; do
  read -r np rest <<<"$split"
  out=$dir/torch_$np${rest// /}
  launch "$np" ./train_cpu "${args[@]}" $rest -s 0 -o "$out" >"$out.stdout" 2>&1 || { bad "processes $np, $rest: exited with $?"; continue; }
  echo "-- processes $np, $rest against PyTorch -b 4"
  $PY test/compare_run.py "$dir/ref.npz" "$out.stdout" "$out/model_$(printf %08d $STEPS).bin" ||
    bad "processes $np, $rest does not follow PyTorch"
done

echo "--- 3. under the clip (every norm below 1): 2 processes x 4 micro-steps against the undivided run, both against PyTorch's gradient"
$PY dev/reference/gpt2_ref.py make-model --model "$dir/small.bin" --tokens "$dir/small_train.bin" --V 97 --maxT 32 \
  --L 2 --NH 2 --C 8 --ntokens 700 --seed 11 >/dev/null || exit 1
small=(-e "$dir/small.bin" -i "$dir/small_train.bin" -R 0 -n 1)
train_run small_one 0 "${small[@]}" -b 8
train_run small_both 2 "${small[@]}" -b 1 -d 128
grep -q "| 128 tok/step, 4 micro-steps x 2 processes, all-reduce [0-9.]* ms, comm [0-9.]* ms$" "$dir/small_both.out" ||
  bad "small_both's progress line does not say its 4 micro-steps and 2 processes"
# the norms before clipping, printed with 4 decimals: below the clip of 1 is "0.", and a step at
# or above it would take the clipped branch, where the divisor no longer shows
norms=$(sed -nE 's/^step +[0-9]+\/[0-9]+ \| loss [^ ]+ \| norm ([^ ]+) .*/\1/p' "$dir/small_one.out")
if [ "$(grep -c '^0\.' <<<"$norms")" != $STEPS ]; then
  bad "small_one: not all of its $STEPS steps have a gradient norm below the clip of 1 (norms: $(echo $norms)); make its model or batch smaller"
fi
compare small_both small_one
# the first step reads the first 128 tokens of small_train.bin (-R 0), as gpt2_ref.py reference does
$PY dev/reference/gpt2_ref.py reference --model "$dir/small.bin" --tokens "$dir/small_train.bin" --B 8 --T 16 \
  --steps 0 --out "$dir/small_ref.dump" >/dev/null || exit 1
for name in small_one small_both; do
  echo "-- $name: AdamW's m and v after step 1 against PyTorch's gradient"
  $PY test/compare_moments.py "$dir/small_ref.dump" "$dir/$name" || bad "$name's AdamW moments after step 1 are not PyTorch's gradient's"
done

echo "--- 4. resume with 2 processes, and with another split than the run had"
cut_run "$dir/ranks" "$dir/ranks_resumed" 3
train_run ranks_resumed 2 -b 2 -y 1
same_after_resume ranks ranks_resumed 3 $STEPS "the 2-process run resumed by 2 processes"
cut_run "$dir/one" "$dir/one_by_two" 3
train_run one_by_two 2 -b 2 -y 1
cut_run "$dir/ranks" "$dir/two_by_one" 3
train_run two_by_one 0 -b 2 -y 1
grep -q "^batch: 64 tokens per step = B=2 x T=16 x 2 micro-steps x 1 process$" "$dir/two_by_one.out" ||
  bad "two_by_one did not take the batch of the run it resumed (-d 64, 2 micro-steps)"
for name in one_by_two two_by_one; do
  echo "-- $name against the undivided run"
  # what the run printed: the undivided run's lines up to step 3, then the resumed run's
  { awk '$1 == "step" && $2 ~ /\// && $2 + 0 > 3 {exit} {print}' "$dir/one.out"; cat "$dir/$name.out"; } >"$dir/$name.whole"
  $PY test/compare_gpu_run.py --precision fp32 "$dir/one" "$dir/one.out" "$dir/$name" "$dir/$name.whole" $STEPS ||
    bad "$name does not follow the undivided run"
done

echo "--- 5. errors: one line, a non-zero exit, no hang, nothing left behind"
opts=("${common[@]}" -o "$dir/never")
mpi_error bad-d "-d 100 is not a multiple of B x T x processes = 2 x 16 x 1 = 32 tokens" 0 ./train_cpu "${opts[@]}" -b 2 -d 100
mpi_error bad-d-mpi "-d 96 is not a multiple of B x T x processes = 2 x 16 x 2 = 64 tokens" 2 ./train_cpu "${opts[@]}" -b 2 -d 96
mpi_error resume-other-d "written by a run with batches of 4 x T=16 tokens (-d 64) at step 8; resume with the same -t and -d" \
  2 ./train_cpu "${common[@]}" -o "$dir/ranks_resumed" -b 2 -d 128 -y 1
mpi_error other-options "rank 1 was started with other options than rank 0" 1 \
  ./train_cpu "${opts[@]}" -b 2 : -np 1 ./train_cpu "${opts[@]}" -b 1
mpi_error missing-file "rank 1 of 2: cannot open $dir/missing.bin for reading" 1 \
  ./train_cpu "${opts[@]}" -b 2 : -np 1 ./train_cpu "${opts[@]}" -i "$dir/missing.bin" -b 2
[ -e "$dir/never" ] && bad "a run that could not start left $dir/never behind"
build_train_cpu  # $dir/train_cpu, built without MPI
mpi_error no-mpi "this program was built without MPI, but mpirun started 2 copies" 2 "$dir/train_cpu" "${opts[@]}" -b 2

# a rank killed in the middle of training: mpirun stops the other one
start=$SECONDS
MPI_TIMEOUT=120 mpi_run 2 ./train_cpu "${common[@]}" -x 100000 -v 0 -s 0 -b 2 >"$dir/killed.out" 2>"$dir/killed.err" &
job=$!
for _ in $(seq 600); do grep -q "^step *3/" "$dir/killed.out" 2>/dev/null && break; sleep 0.1; done
victim=$(for p in $(pgrep -f "train_cpu .*-x 100000"); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && echo "$p"; done | head -n 1)
if [ -z "$victim" ]; then bad "kill-rank: could not find rank 1's process"; kill $job 2>/dev/null
else kill -9 "$victim"; fi
wait $job
rc=$?
if [ $rc -eq 124 ]; then bad "kill-rank: the run was still going 120 s after rank 1 was killed (a hang)"
elif [ $rc -eq 0 ]; then bad "kill-rank: exited 0 after rank 1 was killed"
else echo "ok: kill-rank: rank 1 killed at step 3, the run stopped with exit $rc in $((SECONDS - start)) s"
fi

[ $status -eq 0 ] && echo "PASS: accumulation and data-parallel runs follow the undivided run and PyTorch; resume and errors as they should"
exit $status
