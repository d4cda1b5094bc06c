#!/usr/bin/env bash
# The thread count does not change a bit of training: ./train_cpu as make builds it runs the same
# few whole steps (forward, backward, clipping, AdamW with weight decay, a warmup, validation and
# a sample) on OMP_NUM_THREADS=1, 2 and 3, and every run must print the same lines (losses, norms,
# learning rates, validation losses and sampled text, all their digits; only the timings and the
# thread count may differ) and write a main.log, model and AdamW state byte-identical to the run
# on one thread. Three threads on a machine of two cores only run slower; three is there because
# it divides no power of two, so the rows, columns and chunks the loops split come out uneven.
# GPT2_TIME_PRODUCTS=1, which times every matrix product, changes no bit either, and prints a line
# per product's shape and pass with the calls it made (a run split in micro-steps, against the same
# run without the timers).
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

# GPT2_TIME_PRODUCTS=1 times every matrix product and changes no bit: the same run on 2 threads,
# its batch in 2 micro-steps (so that both backward products run: the first after zeroing, which
# writes the weights' gradients, and the next, which adds to them), prints the same lines as
# without it, writes the same files and, after the run, one line per training product's shape
# and pass with its calls (d2: 2 layers' four products and the classifier, backward once a
# micro-step)
split=(-b 2 -d 100)
for name in split timed; do
  out=$dir/$name
  timing=0; [ $name = timed ] && timing=1
  OMP_NUM_THREADS=2 GPT2_TIME_PRODUCTS=$timing ./train_cpu "${args[@]}" "${split[@]}" -o "$out" >"$out.stdout" 2>&1 ||
    { echo "FAIL: GPT2_TIME_PRODUCTS=$timing ./train_cpu ${args[*]} ${split[*]} exited with $?:"; tail -5 "$out.stdout"; exit 1; }
done
out=$dir/timed
ok=1
grep -q "^products timed" "$dir/split.stdout" && { echo "FAIL: GPT2_TIME_PRODUCTS=0 printed the products' table"; ok=0; }
if ! diff <(printed "$dir/split.stdout" | sed "s#$dir/split/##") <(sed '/^products timed/,$d' "$out.stdout" | printed /dev/stdin | sed "s#$out/##") >"$out.diff"; then
  echo "FAIL: GPT2_TIME_PRODUCTS=1 printed other lines than the run without it:"; head -20 "$out.diff"; ok=0
fi
for f in main.log model_$last.bin state_$last.bin; do
  cmp -s "$dir/split/$f" "$out/$f" || { echo "FAIL: GPT2_TIME_PRODUCTS=1: $f differs from the run without it"; ok=0; }
done
rows=$((2 * 25)) micro=2
expected=$(for shape in "128 -> 384" "128 -> 128" "128 -> 512" "512 -> 128"; do
             echo "$rows x $shape forward $((2 * micro * STEPS))"; echo "$rows x $shape backward $((2 * micro * STEPS))"
           done
           echo "$rows x 128 -> 50304 forward $((micro * STEPS))"; echo "$rows x 128 -> 50304 backward $((micro * STEPS))")
# the table's rows, as "SHAPE PASS CALLS", forward calls less validation's (its batches, of the
# same size, run forward only: -v 2 over 4 steps gives 3 evaluations of -m 2 batches, each in
# micro-steps too)
got=$(awk -v L=2 -v micro=$micro '/^[0-9]+ x [0-9]+ -> [0-9]+ +(forward|backward) / {
        calls = $7; if ($6 == "forward") calls -= 3 * 2 * micro * ($5 == 50304 ? 1 : L)
        if ($8 + 0 <= 0 || $9 + 0 <= 0) calls = "bad: " $8 " ms, " $9 " GFLOP/s"
        print $1, $2, $3, $4, $5, $6, calls }' "$out.stdout")
if [ "$got" != "$expected" ]; then
  echo "FAIL: GPT2_TIME_PRODUCTS=1's table: expected (shape, pass, training calls)"; echo "$expected"; echo "got:"; echo "$got"
  sed -n '/^products timed/,$p' "$out.stdout"; ok=0
fi
grep -q "^all products: [0-9.]* s" "$out.stdout" || { echo "FAIL: GPT2_TIME_PRODUCTS=1 printed no total"; ok=0; }
[ $ok -eq 1 ] && echo "ok   GPT2_TIME_PRODUCTS=1: the same lines and bits, and a line per product's shape and pass" || status=1

# the runs must have trained, or there was nothing to compare
if [ "$(grep '^step    1/' "$dir/t1.stdout" | cut -d'|' -f2)" = "$(grep "^step    $STEPS/" "$dir/t1.stdout" | cut -d'|' -f2)" ]; then
  echo "FAIL: the loss did not change over $STEPS steps"; status=1
fi
[ $status -eq 0 ] && echo "PASS: 1, 2 and 3 threads train to the same bits"
exit $status
