#!/usr/bin/env bash
# train_cpu -p bf16, mixed precision (doc/train_cpu.md): ./train_cpu as make builds it.
#   1. against -p fp32 with the same flags, on the small random model and run of
#      test/train_gpu_checks.sh (V=97, 2 layers, 2 heads, C=32, B x T = 3 x 29, 20 steps, warmup
#      then cosine decay, weight decay, validation, samples and checkpoints every 3 steps): losses,
#      norms, checkpoint, AdamW state and main.log within the tolerances train_gpu -p bf16 is held
#      to against train_cpu (test/compare_gpu_run.py --precision bf16; doc/correctness.md, section
#      4), and yet not float32's run: some loss differs by more than float32's tolerance (1e-5
#      relative), or the bf16 products did not run;
#   2. the bf16 run cut after its checkpoint at step 3 (later files removed, as if it had been
#      killed) and resumed with -p bf16 -y 1: the same steps printed after 3 and byte-identical
#      model, state and main.log at step 20 (the products round the float32 master weights, which
#      the checkpoint holds, so resuming loses nothing). Resuming it with -p fp32 is allowed, as
#      in train_gpu: the checkpoint and state are float32 in both precisions;
#   3. the thread count changes no bit: a fresh 2-layer model (-e d2, GPT-2's vocabulary: a
#      classifier of 50,304 columns) on the Tiny Shakespeare files of `make data`, B x T = 4 x 25,
#      4 steps on OMP_NUM_THREADS=1, 2 and 3: the same printed steps, validation losses and
#      samples, byte-identical main.log, model and state (as test_train_threads in fp32);
#   4. data parallel under mpirun: 2 processes of B=2 against one of B=4, both -p bf16, within
#      bf16's tolerances (the split sums the same float32 gradients in another order, which moves
#      a weight's bf16 rounding now and then, as test/train_gpu_checks.sh says of train_gpu).
#      Skipped, saying so, without mpirun or an MPI build;
#   5. -p fp16: one error line naming the choices, exit 1, no output folder made;
#   6. against PyTorch: the gradient of a first step (AdamW's moments after it, test/
#      compare_moments.py, on the C=8 model of test_train_dp whose norm stays below the clip)
#      against PyTorch's with the products on the same bf16-rounded operands
#      (dev/reference/gpt2_ref.py reference --precision bf16): the weight matrices' gradients
#      agree to float32 rounding in most elements (compare_moments.py --precision bf16 says why
#      not in all). This is what 1 cannot tell: a product left in float32, or rounding what
#      train_cpu keeps in float32, moves every element of a weight's gradient by about 2^-8 of
#      its terms. For ./train_cpu and the LAYERS=naive build; and -p fp32, whose products skip
#      the rounding, must fail it. Skipped, saying so, without PyTorch.
set -u
. "$(dirname "$0")/lib.sh"
need_python numpy
[ -x ./train_cpu ] || { echo "FAIL: ./train_cpu not found (run make first)"; exit 1; }
fresh_dir train_bf16
tiny_run_files 32 32 200 200 5
STEPS=20
last=$(printf '%08d' $STEPS)
common=(-i "$dir/train.bin" -j "$dir/val.bin" -e "$dir/model.bin" -k "$dir/tok.bin" -b 3 -t 29
        -R 1 -S 11 -l 3e-3 -u 2 -q 0.1 -c 0.1 -v 3 -m 2 -s 3 -g 5 -n 3 -x $STEPS)
status=0
bad() { echo "FAIL: $*"; status=1; }
run() {  # NAME ARGS...: ./train_cpu with the common options, -o $dir/NAME, stdout in NAME.out
  local name=$1; shift
  ./train_cpu "${common[@]}" -o "$dir/$name" "$@" >"$dir/$name.out" 2>&1 ||
    { bad "./train_cpu ${common[*]} -o $dir/$name $* exited with $?:"; tail -5 "$dir/$name.out"; return 1; }
}

echo "--- 1. -p bf16 against -p fp32, the same flags, $STEPS steps"
run fp32 -p fp32 && run bf16 -p bf16 || exit 1
grep -q '^precision fp32' "$dir/fp32.out" || bad "-p fp32 does not say 'precision fp32'"
grep -q '^precision bf16 (float32 master weights)' "$dir/bf16.out" || bad "-p bf16 does not say 'precision bf16'"
grep '^precision' "$dir/bf16.out"
$PY test/compare_gpu_run.py --precision bf16 "$dir/fp32" "$dir/fp32.out" "$dir/bf16" "$dir/bf16.out" $STEPS ||
  bad "-p bf16 does not follow -p fp32 within bf16's tolerances"
# each step's loss, relative to fp32's; float32 alone moves it by about 1e-7
worst=$(paste <(grep -oE '^step +[0-9]+/[0-9]+ \| loss [0-9.]+' "$dir/fp32.out" | awk '{print $NF}') \
              <(grep -oE '^step +[0-9]+/[0-9]+ \| loss [0-9.]+' "$dir/bf16.out" | awk '{print $NF}') |
        awk '{ d = ($2 - $1) / $1; if (d < 0) d = -d; if (d > m) m = d } END { printf "%.1e", m }')
echo "largest relative loss difference between bf16 and fp32: $worst"
awk -v w="$worst" 'BEGIN { exit !(w > 1e-5) }' ||
  bad "-p bf16 printed fp32's losses to within 1e-5 (largest difference $worst): its products did not run in bf16"
cmp -s "$dir/fp32/model_$last.bin" "$dir/bf16/model_$last.bin" && bad "-p bf16 wrote fp32's checkpoint"

echo "--- 2. -p bf16 killed after its checkpoint at step 3, resumed with -y 1"
cut_run "$dir/bf16" "$dir/resumed" 3
run resumed -p bf16 -y 1
same_after_resume bf16 resumed 3 $STEPS "the resumed bf16 run"
cut_run "$dir/bf16" "$dir/resumed_fp32" 3
run resumed_fp32 -p fp32 -y 1 -x 6 &&
  grep -q "resumed from .* at step 3" "$dir/resumed_fp32.out" && grep -q '^step    6/6 | loss' "$dir/resumed_fp32.out" ||
  bad "the bf16 run's checkpoint did not resume with -p fp32"

echo "--- 3. -p bf16 on 1, 2 and 3 threads (-e d2 on Tiny Shakespeare)"
for f in data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin data/gpt2_tokenizer.bin; do
  [ -f "$f" ] || { echo "FAIL: $f not found (run make data first)"; exit 1; }
done
args=(-e d2 -b 4 -t 25 -x 4 -l 1e-3 -u 2 -c 0.1 -v 2 -m 2 -s 4 -g 8 -n 4 -p bf16)
for n in 1 2 3; do
  OMP_NUM_THREADS=$n ./train_cpu "${args[@]}" -o "$dir/t$n" >"$dir/t$n.out" 2>&1 ||
    { bad "OMP_NUM_THREADS=$n ./train_cpu ${args[*]} exited with $?:"; tail -5 "$dir/t$n.out"; continue; }
  grep -q ", threads $n\$" "$dir/t$n.out" || bad "the run with OMP_NUM_THREADS=$n does not say 'threads $n'"
done
[ "$(grep -c '^step .*/4 | loss' "$dir/t1.out")" -eq 4 ] || bad "the run on 1 thread did not print 4 steps"
for n in 2 3; do
  diff <(printed_after 0 "$dir/t1.out") <(printed_after 0 "$dir/t$n.out") || bad "1 and $n threads print different steps"
  for f in main.log model_00000004.bin state_00000004.bin; do
    cmp -s "$dir/t1/$f" "$dir/t$n/$f" || bad "$f differs between 1 and $n threads"
  done
done

echo "--- 4. -p bf16 data parallel: 2 processes of B=2 against 1 of B=4"
if ! command -v mpirun >/dev/null; then
  echo "skipped: the run under mpirun (no mpirun here; bash test/setup.sh installs openmpi-bin)"
elif ! ldd ./train_cpu 2>/dev/null | grep -q libmpi; then
  echo "skipped: the run under mpirun (./train_cpu was built without MPI)"
else
  run whole -p bf16 -b 4
  mpi_run 2 ./train_cpu "${common[@]}" -o "$dir/ranks" -p bf16 -b 2 >"$dir/ranks.out" 2>&1 ||
    { bad "mpirun -np 2 ./train_cpu -p bf16 -b 2 exited with $?:"; tail -5 "$dir/ranks.out"; }
  grep -q "| 116 tok/step, 1 micro-step x 2 processes" "$dir/ranks.out" || bad "the run under mpirun does not say its 2 processes"
  $PY test/compare_gpu_run.py --precision bf16 "$dir/whole" "$dir/whole.out" "$dir/ranks" "$dir/ranks.out" $STEPS ||
    bad "-p bf16 on 2 processes does not follow its undivided run"
fi

echo "--- 5. -p with another value"
./train_cpu "${common[@]}" -o "$dir/fp16" -p fp16 >"$dir/fp16.out" 2>"$dir/fp16.err"
rc=$?
if [ $rc -eq 1 ] && [ "$(wc -l <"$dir/fp16.err")" -eq 1 ] && grep -qx 'error: -p expects fp32 or bf16, got fp16' "$dir/fp16.err" &&
   [ ! -e "$dir/fp16" ]; then
  echo "ok   -p fp16: $(cat "$dir/fp16.err")"
else
  bad "-p fp16: expected exit 1, the line 'error: -p expects fp32 or bf16, got fp16' and no $dir/fp16; got exit $rc:"
  head -3 "$dir/fp16.err"
fi

echo "--- 6. the first step's gradient against PyTorch's with bf16-rounded products"
if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "skipped: PyTorch (bash test/setup.sh installs Debian's python3-torch)"
else
  $PY dev/reference/gpt2_ref.py make-model --model "$dir/small.bin" --tokens "$dir/small_train.bin" --V 97 --maxT 32 \
    --L 2 --NH 2 --C 8 --ntokens 700 --seed 11 >/dev/null || exit 1
  # the first step reads the first 128 tokens of small_train.bin (-R 0), as gpt2_ref.py reference does
  $PY dev/reference/gpt2_ref.py reference --model "$dir/small.bin" --tokens "$dir/small_train.bin" --B 8 --T 16 \
    --steps 0 --precision bf16 --out "$dir/small_ref.dump" >/dev/null || exit 1
  $CC $CFLAGS -DLAYERS_NAIVE -o "$dir/train_cpu_naive" train_cpu.c -lm || { echo "FAIL: the LAYERS=naive build does not build"; exit 1; }
  for run in "./train_cpu bf16" "$dir/train_cpu_naive bf16" "./train_cpu fp32"; do
    read -r bin p <<<"$run"
    out=$dir/small_$(basename "$bin")_$p
    "$bin" -e "$dir/small.bin" -i "$dir/small_train.bin" -t 16 -b 8 -x 1 -n 1 -R 0 -v 0 -s 0 -p $p -o "$out" \
      >"$out.out" 2>&1 || { bad "$bin -p $p on the C=8 model exited with $?:"; tail -5 "$out.out"; continue; }
    echo "-- $bin -p $p: AdamW's m and v after step 1 against PyTorch's gradient with bf16 products"
    $PY test/compare_moments.py --precision bf16 "$dir/small_ref.dump" "$out" >"$out.compare"
    rc=$?
    if [ $p = bf16 ]; then
      cat "$out.compare"
      [ $rc -eq 0 ] || bad "$bin -p bf16: the first step's gradient is not PyTorch's with bf16 products"
    elif [ $rc -eq 0 ]; then
      cat "$out.compare"; bad "-p fp32's gradient passes as PyTorch's with bf16 products: the check cannot tell them apart"
    else
      echo "ok   -p fp32's gradient fails it, as it must ($(grep -c '^FAIL ' "$out.compare") checks)"
    fi
  done
fi

[ $status -eq 0 ] && echo "PASS: -p bf16 follows fp32 within bf16's tolerances and PyTorch's gradient in bf16, resumes and runs on any thread count bit for bit, and splits its batch"
exit $status
