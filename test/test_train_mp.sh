#!/usr/bin/env bash
# Model parallelism (doc/parallel.md): ./train_cpu under mpirun with tensor parallel (-tp),
# pipeline parallel (-pp, 1F1B and GPipe), ZeRO-1 (-z 1), and compositions, each against the same
# run in one process, on a model whose sizes are not powers of two (V=97, L=3, NH=6, C=48, hs=8:
# 3 layers over 2 stages is an uneven split), one OpenMP thread per process.
#   1. 2 processes: -tp 2; -pp 2 (1F1B); -pp 2 -ps gpipe; -z 1 (dp 2). 4 processes: -tp 2 -pp 2;
#      -pp 2 -z 1 (dp 2); -tp 2 -z 1 (dp 2); -tp 2 and -pp 2 with plain dp 2. 3 processes: -pp 3. Every run: 10 steps of 4
#      micro-steps, validation, samples and checkpoints every 5 steps; against the undivided run,
#      test/compare_gpu_run.py --precision fp32 (every loss and validation loss within 1e-5
#      relative, norms, the same lines and samples, the gathered checkpoint and AdamW state
#      tensor by tensor, main.log). The largest relative loss difference of each is printed.
#   2. 1F1B and GPipe run the same micro-steps in the same order on every stage: the same losses,
#      to the printed digit; GPipe keeps 4 batches of activations on both stages, 1F1B 2 and 1.
#   3. Checkpoints are whole llm.c files: the undivided run's checkpoint at step 5 resumed by
#      -tp 2 -pp 2, and -tp 2 -pp 2's resumed by one process, follow the undivided run.
#   4. Errors: one line, a non-zero exit, no hang, nothing left behind: -tp that does not divide
#      the heads, more stages than layers, too few processes for tp x pp, -ps and -z values.
set -u
. "$(dirname "$0")/lib.sh"
need_python numpy
command -v mpirun >/dev/null || { echo "skipped: no mpirun (bash test/setup.sh installs openmpi-bin)"; exit 77; }
[ -x ./train_cpu ] || { echo "FAIL: ./train_cpu not found (run make first)"; exit 1; }
./train_cpu -h 2>&1 | grep -q -- "-tp N" || { echo "FAIL: ./train_cpu -h does not list -tp"; exit 1; }
fresh_dir train_mp
export OMP_NUM_THREADS=1
ref="$PY dev/reference/gpt2_ref.py"
$ref make-model --model "$dir/model.bin" --tokens "$dir/train.bin" --V 97 --maxT 24 --L 3 --NH 6 --C 48 \
  --ntokens 900 --seed 5 >/dev/null || exit 1
$ref make-tokens --out "$dir/val.bin" --V 97 --n 300 --seed 6 >/dev/null || exit 1
$ref make-tokenizer --out "$dir/tok.bin" >/dev/null || exit 1
STEPS=10
common=(-e "$dir/model.bin" -i "$dir/train.bin" -j "$dir/val.bin" -k "$dir/tok.bin" -t 12 -d 96 -x $STEPS
        -R 1 -S 3 -l 3e-3 -u 2 -q 0.1 -c 0.1 -v 5 -m 2 -s 5 -g 4 -n 5)
status=0
bad() { echo "FAIL: $*"; status=1; }
# the largest relative difference of the step and validation losses of two runs' stdout
max_rel() {
  $PY - "$1" "$2" <<'EOF'
import re, sys
def losses(path):
    return [float(x) for x in re.findall(r"(?:\| loss|val loss) ([0-9.]+)", open(path).read())]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
print("%.1e" % max(abs(x - y) / abs(x) for x, y in zip(a, b)) if a and len(a) == len(b) else "nan")
EOF
}
compare() {  # NAME [UNDIVIDED] [STDOUT]
  local one=${2:-one} out=${3:-$dir/$1.out}
  if $PY test/compare_gpu_run.py --precision fp32 "$dir/$one" "$dir/$one.out" "$dir/$1" "$out" $STEPS >"$dir/$1.cmp" 2>&1; then
    echo "ok: $1 follows the undivided run: largest relative loss difference $(max_rel "$dir/$one.out" "$out")"
  else
    cat "$dir/$1.cmp"; bad "$1 does not follow the undivided run $one"
  fi
}

echo "--- 1. every split against the undivided run (B=2 x T=12, 4 micro-steps per step)"
train_run one 0 -b 2
train_run tp2 2 -b 2 -tp 2
train_run pp2 2 -b 2 -pp 2
train_run pp2_gpipe 2 -b 2 -pp 2 -ps gpipe
train_run z1 2 -b 1 -z 1
train_run tp2_pp2 4 -b 2 -tp 2 -pp 2
train_run pp2_z1 4 -b 1 -pp 2 -z 1
train_run tp2_z1 4 -b 1 -tp 2 -z 1
train_run tp2_dp2 4 -b 1 -tp 2
train_run pp2_dp2 4 -b 1 -pp 2
train_run pp3 3 -b 2 -pp 3
for name in tp2 pp2 pp2_gpipe z1 tp2_pp2 pp2_z1 tp2_z1 tp2_dp2 pp2_dp2 pp3; do compare $name; done
grep -q "^rank 3 (tp 1, pp 1, dp 0): layers 2-2, heads 3/6 | params" "$dir/tp2_pp2.out" ||
  bad "tp2_pp2 does not print rank 3's part (stage 1: layer 2; 3 of the 6 heads)"
grep -q "^rank 1 (tp 0, pp 0, dp 1): .* AdamW 0.4 MB, .* sent [0-9.]* MB/step (tp 0.00, pp 0.00, dp 0.[0-9]*, wte 0.00)$" "$dir/z1.out" ||
  bad "z1 does not print rank 1's half of AdamW's moments (0.4 of the undivided 0.7 MB) and its dp traffic"
grep -q "^pipeline: 2 stages, 1F1B schedule, 4 micro-steps per step: bubble (P-1)/(M+P-1) = 20.0%$" "$dir/pp2.out" ||
  bad "pp2 does not print its schedule and bubble"

echo "--- 2. 1F1B against GPipe: the same losses; the activations each keeps"
diff <(grep -oE "(loss|norm) [0-9.]+" "$dir/pp2.out") <(grep -oE "(loss|norm) [0-9.]+" "$dir/pp2_gpipe.out") >/dev/null ||
  bad "1F1B and GPipe printed other losses or norms"
slots() { sed -nE "s/^rank $2 .*activations [0-9.]+ MB \(([0-9]+) slots?\).*/\1/p" "$dir/$1.out" | tr '\n' ' '; }
echo "batches whose activations stage 0 and stage 1 keep: 1F1B $(slots pp2 0; slots pp2 1), GPipe $(slots pp2_gpipe 0; slots pp2_gpipe 1)"
[ "$(slots pp2 0; slots pp2 1; slots pp2_gpipe 0; slots pp2_gpipe 1)" = "2 1 4 4 " ] ||
  bad "the stages do not keep 1F1B's 2 and 1 batches of activations and GPipe's 4 and 4"

echo "--- 3. checkpoints: whole files, resumed under another split"
cut_run "$dir/one" "$dir/one_by_tp2_pp2" 5
train_run one_by_tp2_pp2 4 -b 2 -tp 2 -pp 2 -y 1
cut_run "$dir/tp2_pp2" "$dir/tp2_pp2_by_one" 5
train_run tp2_pp2_by_one 0 -b 2 -y 1
for name in one_by_tp2_pp2 tp2_pp2_by_one; do
  grep -q "resumed from .* at step 5" "$dir/$name.out" || bad "$name did not resume from step 5"
  { awk '$1 == "step" && $2 ~ /\// && $2 + 0 > 5 {exit} {print}' "$dir/one.out"; cat "$dir/$name.out"; } >"$dir/$name.whole"
  compare $name one "$dir/$name.whole"
done

echo "--- 4. errors: one line, a non-zero exit, no hang, nothing left behind"
opts=("${common[@]}" -o "$dir/never" -b 2)
mpi_error tp-heads "-tp 4 must divide the model's 6 heads" 4 ./train_cpu "${opts[@]}" -tp 4
mpi_error pp-layers "-pp 4: the model has 3 layers, and every pipeline stage needs at least one" 4 ./train_cpu "${opts[@]}" -pp 4
mpi_error too-few "-tp 2 -pp 2 need a multiple of tp x pp = 4 processes, and this run has 2" 2 ./train_cpu "${opts[@]}" -tp 2 -pp 2
mpi_error alone "-tp 2 -pp 1 need a multiple of tp x pp = 2 processes, and this run has 1" 0 ./train_cpu "${opts[@]}" -tp 2
mpi_error schedule "-ps expects 1f1b or gpipe, got 'zb'" 0 ./train_cpu "${opts[@]}" -pp 2 -ps zb
mpi_error zero "-z expects 0 or 1 (ZeRO stage 1), got 2" 0 ./train_cpu "${opts[@]}" -z 2
[ -e "$dir/never" ] && bad "a run that could not start left $dir/never behind"

[ $status -eq 0 ] && echo "PASS: every model-parallel split follows the undivided run; checkpoints resume under any split; errors as they should"
exit $status
