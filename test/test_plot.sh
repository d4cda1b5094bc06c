#!/usr/bin/env bash
# make plot and the benchmark charts (dev/bench/plot.py), driven as a user drives them:
#   1. two short training runs with -o, then `make plot LOG="a/main.log b/main.log" OUT=...`: a PNG,
#      and what plot.py says it read equals the losses in each main.log (counts and the last one)
#   2. the training progress line ends its timings with an ETA, 0s at the last step
#   3. bad input (no log, a file that is not a main.log, OUT not a .png): one "plot:" line, a
#      non-zero exit, and an existing picture left as it was
#   4. the bench-cpu chart from the committed doc/results/bench_cpu.txt, and the bench-gpu chart
#      from a table in the form dev/bench/gpu_speedup.sh writes, each naming the figures it drew
set -u
. "$(dirname "$0")/lib.sh"
if ! out=$(TEST_OFFLINE=${TEST_OFFLINE:-0} bash dev/bench/setup_plot.sh 2>&1); then
  echo "$out"; echo "skipped: no matplotlib for $PY (dev/bench/setup_plot.sh installs python3-matplotlib)"; exit 77
fi
fresh_dir test_plot
status=0
bad() { echo "FAIL: $*"; status=1; }
is_png() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] && [ "$(stat -c %s "$1")" -gt 10000 ]; }

# 1. two runs (the second with another learning rate), one picture
for run in a:1e-3 b:3e-3; do
  name=${run%%:*}
  ./train_cpu -e d2 -b 2 -t 16 -x 12 -v 4 -m 2 -s 0 -l "${run#*:}" -o "$dir/$name" > "$dir/$name.out" 2>&1 ||
    { bad "train_cpu run $name:"; tail -3 "$dir/$name.out"; exit 1; }
done
make -s plot LOG="$dir/a/main.log $dir/b/main.log" OUT="$dir/loss.png" > "$dir/plot.out" 2>&1 ||
  { bad "make plot exited non-zero:"; cat "$dir/plot.out"; exit 1; }
is_png "$dir/loss.png" || bad "make plot did not write a PNG picture to $dir/loss.png"
for name in a b; do
  log=$dir/$name/main.log
  ntrain=$(grep -c ' trl:' "$log"); nval=$(grep -c ' tel:' "$log")
  last=$(grep ' tel:' "$log" | tail -n 1 | sed -E 's/s:([0-9]+) tel:(.*)/\2 at step \1/')
  last=$(awk -v v="${last% at*}" -v rest="${last#* at}" 'BEGIN { printf "%.4f at%s", v, rest }')
  expect="$name: $ntrain training losses, $nval validation losses, last val loss $last"
  [ "$ntrain" = 12 ] && [ "$nval" = 4 ] || bad "run $name: main.log has $ntrain training and $nval validation losses, expected 12 and 4"
  grep -qxF "$expect" "$dir/plot.out" || { bad "make plot did not report what run $name's main.log holds ($expect):"; cat "$dir/plot.out"; }
done

# 2. the ETA of the progress line
steps=$(grep -c '^step .*| ETA [0-9hms]* |' "$dir/a.out")
[ "$steps" = 12 ] || bad "$steps of 12 progress lines have an ETA"
grep -q '^step   12/12 .*| ETA 0s |' "$dir/a.out" || bad "the last step's ETA is not 0s"

# 3. bad input: one line, non-zero, the existing picture kept
cp "$dir/loss.png" "$dir/keep.png"
printf 's:1 trl:5.0\nthis is not a log line\n' > "$dir/garbage.log"
: > "$dir/empty.log"
try_bad() {  # EXPECTED-TEXT MAKE-ARGS...
  local want=$1; shift
  if make -s plot "$@" > "$dir/bad.out" 2>&1; then bad "make plot $* succeeded"; return; fi
  grep -q "$want" "$dir/bad.out" || { bad "make plot $*: no message containing '$want':"; cat "$dir/bad.out"; }
  [ "$(grep -c '^plot:\|^make plot:' "$dir/bad.out")" = 1 ] || { bad "make plot $*: not exactly one error line:"; cat "$dir/bad.out"; }
  cmp -s "$dir/loss.png" "$dir/keep.png" || bad "make plot $* changed the existing picture"
}
try_bad "not a main.log line" LOG="$dir/garbage.log" OUT="$dir/loss.png"
try_bad "has no loss lines" LOG="$dir/empty.log" OUT="$dir/loss.png"
try_bad "cannot read" LOG="$dir/missing/main.log" OUT="$dir/loss.png"
try_bad "name it NAME.png" LOG="$dir/a/main.log" OUT="$dir/loss.pdf"
try_bad "give LOG" OUT="$dir/loss.png"
ls "$dir"/tmp*.png >/dev/null 2>&1 && bad "a temporary picture was left behind"

# 4. the benchmark charts
"$PY" dev/bench/plot.py bench-cpu "$dir/bench_cpu.png" doc/results/bench_cpu.txt > "$dir/bench_cpu.out" 2>&1 ||
  { bad "bench-cpu chart:"; cat "$dir/bench_cpu.out"; }
is_png "$dir/bench_cpu.png" || bad "no bench-cpu chart"
while read -r name ms gflops pct; do
  grep -q "^$name: train_cpu $ms ms/step, $gflops GFLOP/s ($pct% of peak" "$dir/bench_cpu.out" ||
    { bad "the bench-cpu chart does not show $name's $ms ms/step, $gflops GFLOP/s:"; cat "$dir/bench_cpu.out"; }
done < <(sed -nE 's/^(\S+): ([0-9.]+) ms\/step \(median.*, ([0-9.]+) GFLOP\/s = ([0-9.]+)% of FMA peak.*/\1 \2 \3 \4/p' doc/results/bench_cpu.txt)
cat > "$dir/gpu.md" <<'TABLE'
- GPU: a table in the form of dev/bench/gpu_speedup.sh
| model | parameters | CPU ms/step | CPU tok/s | GPU fp32 ms/step | fp32 tok/s | fp32 MFU | GPU bf16 ms/step | bf16 tok/s | bf16 MFU | speedup fp32 | speedup bf16 |
|---|---|---|---|---|---|---|---|---|---|---|---|
| d2 | 7.7M | 900.0 | 4551 | 12.50 | 327680 | 4.0% | 6.00 | 682667 | 2.0% | 72x | 150x |
| d12 | 124.5M | 40000.0 | 102 | 160.00 | 25600 | 30.0% | 50.00 | 81920 | 12.0% | 250x | 800x |
TABLE
"$PY" dev/bench/plot.py bench-gpu "$dir/bench_gpu.png" "$dir/gpu.md" > "$dir/bench_gpu.out" 2>&1 || { bad "bench-gpu chart:"; cat "$dir/bench_gpu.out"; }
is_png "$dir/bench_gpu.png" || bad "no bench-gpu chart"
grep -qx "d12: CPU 40000.0 ms/step, GPU fp32 160.0 ms (250x), bf16 50.0 ms (800x)" "$dir/bench_gpu.out" ||
  { bad "the bench-gpu chart does not show the d12 row:"; cat "$dir/bench_gpu.out"; }
[ $status = 0 ] && echo "make plot, the ETA and the benchmark charts: ok"
exit $status
