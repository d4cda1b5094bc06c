#!/usr/bin/env bash
# The thread count does not change a bit of training: ./train_cpu as make builds it runs the same
# few whole steps (forward, backward, clipping, AdamW with weight decay, a warmup, validation and
# a sample) on OMP_NUM_THREADS=1, 2 and 3, and every run must print the same lines (losses, norms,
# learning rates, validation losses and sampled text, all their digits; only the timings and the
# thread count may differ) and write a main.log, model and AdamW state byte-identical to the run
# on one thread. Three threads on a machine of two cores only run slower; three is there because
# it divides no power of two, so the rows, columns and chunks the loops split come out uneven.
# A fresh 2-layer model (-e d2: the GPT-2 vocabulary, so the classifier is a product of 50,304
# columns) on the Tiny Shakespeare files of `make data`, B x T = 4 x 25 = 100 rows.
set -u
. "$(dirname "$0")/lib.sh"
[ -x ./train_cpu ] || { echo "FAIL: ./train_cpu not found (run make first)"; exit 1; }
for f in data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin data/gpt2_tokenizer.bin; do
  [ -f "$f" ] || { echo "FAIL: $f not found (run make data first)"; exit 1; }
done
fresh_dir train_threads
STEPS=4
args=(-e d2 -b 4 -t 25 -x $STEPS -l 1e-3 -u 2 -c 0.1 -v 2 -m 2 -s $STEPS -g 8)
last=$(printf %08d $STEPS)

# what a run printed, less what may differ: each step's time, speed and MFU, the average of those,
# the peak measured on the run's threads, the thread count of the summary line, the output folder
# in the "wrote" line
printed() {
  sed -E -e 's/ \| [0-9.]+ ms \| .*$//' -e 's/, threads [0-9]+$//' -e "s#$dir/t[0-9]+/##g" "$1" |
    grep -v -e '^average' -e '^peak: '
}

status=0
for n in 1 2 3; do
  out=$dir/t$n
  OMP_NUM_THREADS=$n ./train_cpu "${args[@]}" -o "$out" >"$out.stdout" 2>&1 ||
    { echo "FAIL: OMP_NUM_THREADS=$n ./train_cpu ${args[*]} exited with $?:"; tail -5 "$out.stdout"; exit 1; }
  grep -q ", threads $n\$" "$out.stdout" ||
    { echo "FAIL: the run with OMP_NUM_THREADS=$n does not say 'threads $n'"; status=1; }
  [ "$(grep -c '^step .*/.* | loss' "$out.stdout")" -eq $STEPS ] ||
    { echo "FAIL: the run with OMP_NUM_THREADS=$n did not print $STEPS steps"; status=1; }
done

for n in 2 3; do
  ok=1
  if ! diff <(printed "$dir/t1.stdout") <(printed "$dir/t$n.stdout") >"$dir/t$n.diff"; then
    echo "FAIL: 1 and $n threads print different lines (< 1 thread, > $n threads):"; head -20 "$dir/t$n.diff"; ok=0
  fi
  for f in main.log model_$last.bin state_$last.bin; do
    if [ ! -f "$dir/t$n/$f" ] || ! cmp -s "$dir/t1/$f" "$dir/t$n/$f"; then
      echo "FAIL: $f differs between 1 and $n threads"; ok=0
    fi
  done
  if [ $ok -eq 1 ]; then
    echo "ok   1 and $n threads: the same printed lines; main.log, model and state byte-identical"
  else
    status=1
  fi
done

# the runs must have trained, or there was nothing to compare
if [ "$(grep '^step    1/' "$dir/t1.stdout" | cut -d'|' -f2)" = "$(grep "^step    $STEPS/" "$dir/t1.stdout" | cut -d'|' -f2)" ]; then
  echo "FAIL: the loss did not change over $STEPS steps"; status=1
fi
[ $status -eq 0 ] && echo "PASS: 1, 2 and 3 threads train to the same bits"
exit $status
