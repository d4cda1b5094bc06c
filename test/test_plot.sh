#!/usr/bin/env bash
# make plot and the benchmark charts (dev/bench/plot.py), driven as a user drives them:
#   1. two short training runs with -o, then `make plot LOG="a/main.log b/main.log" OUT=...`: a PNG,
#      and what plot.py says it read equals the losses in each main.log (counts and the last one)
#   2. the training progress line ends its timings with an ETA, 0s at the last step
#   3. bad input (no log, a file that is not a main.log, OUT not a .png): one "plot:" line, a
#      non-zero exit, and an existing picture left as it was
#   4. the bench-cpu chart from the committed doc/results/bench_cpu.txt and from a summary in the
#      form dev/bench/bench_cpu.sh writes (fp32 and bf16 per model), the bench-gpu chart from a
#      table in the form dev/bench/gpu_speedup.sh writes, the bench-infer chart from tables in the
#      form dev/bench/bench_infer.sh prints (fp32, bf16 and the GPU), the bench-serve chart from a
#      table in the form dev/bench/bench_serve.sh prints, the bench-parallel chart from the
#      committed doc/results/bench_parallel.txt, and the bench-gpu-peers chart from a table in the
#      form dev/bench/bench_gpu_peers.sh writes, each naming the figures it drew
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
# bench-cpu: the committed doc/results/bench_cpu.txt (rows "NAME PRECISION: ..."; before bf16,
# "NAME: ... of FMA peak"), and a summary in the form of dev/bench/bench_cpu.sh with both precisions
cat > "$dir/cpu.txt" <<'TABLE'
machine: a text in the form of dev/bench/bench_cpu.sh, 2 cores, 2 OpenMP threads
== summary: peaks on 2 threads: fp32 500.0 GFLOP/s (float32 FMA; highest of 8 measurements, lowest 490.0), bf16 1000.0 GFLOP/s (vdpbf16ps; highest of 8, lowest 980.0)
d12 fp32: 800.0 ms/step (median; fastest 790.0), 320 tok/s, 239.0 GFLOP/s = 47.8% of fp32 peak [6*P*B*T = 191.2 GFLOP/step, P=124475904, B=4, T=64]; PyTorch 20000.0 ms/step = 25.00x the time of train_cpu
d12 bf16: 500.0 ms/step (median; fastest 490.0), 512 tok/s, 382.4 GFLOP/s = 38.2% of bf16 peak [6*P*B*T = 191.2 GFLOP/step, P=124475904, B=4, T=64]; 1.60x the speed of fp32 (goal: >= 1.5x: met)
default fp32: 250.0 ms/step (median; fastest 245.0), 2048 tok/s, 200.4 GFLOP/s = 40.1% of fp32 peak [6*P*B*T = 50.1 GFLOP/step, P=16299520, B=8, T=64]
default bf16: 200.0 ms/step (median; fastest 195.0), 2560 tok/s, 250.4 GFLOP/s = 25.0% of bf16 peak [6*P*B*T = 50.1 GFLOP/step, P=16299520, B=8, T=64]; 1.25x the speed of fp32
TABLE
for text in doc/results/bench_cpu.txt "$dir/cpu.txt"; do
  "$PY" dev/bench/plot.py bench-cpu "$dir/bench_cpu.png" "$text" > "$dir/bench_cpu.out" 2>&1 ||
    { bad "bench-cpu chart of $text:"; cat "$dir/bench_cpu.out"; }
  is_png "$dir/bench_cpu.png" || bad "no bench-cpu chart of $text"
  rows=0
  while IFS='|' read -r name ms gflops pct; do
    rows=$((rows + 1))
    grep -qF "$name: train_cpu $ms ms/step, $gflops GFLOP/s ($pct% of peak" "$dir/bench_cpu.out" ||
      { bad "the bench-cpu chart of $text does not show $name's $ms ms/step, $gflops GFLOP/s:"; cat "$dir/bench_cpu.out"; }
  done < <(sed -nE 's/^(\S+( fp32| bf16)?): ([0-9.]+) ms\/step \(median.*, ([0-9.]+) GFLOP\/s = ([0-9.]+)% of (FMA|fp32|bf16) peak.*/\1|\3|\4|\5/p' "$text")
  [ "$rows" -ge 2 ] || bad "$text has $rows bench-cpu summary rows, expected 2 or more"
done
# the sample: each precision against its own peak, bf16's speed-up over fp32, PyTorch beside fp32
grep -qxF "d12 fp32: train_cpu 800.0 ms/step, 239.0 GFLOP/s (47.8% of peak 500.0), PyTorch 20000.0 ms/step" "$dir/bench_cpu.out" &&
  grep -qxF "d12 bf16: train_cpu 500.0 ms/step, 382.4 GFLOP/s (38.2% of peak 1000.0), 1.60x the speed of fp32" "$dir/bench_cpu.out" &&
  grep -qxF "default bf16: train_cpu 200.0 ms/step, 250.4 GFLOP/s (25.0% of peak 1000.0), 1.25x the speed of fp32" "$dir/bench_cpu.out" ||
  { bad "the bench-cpu chart does not show the two precisions of the sample:"; cat "$dir/bench_cpu.out"; }
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
cat > "$dir/infer.txt" <<'TABLE'
machine: a text in the form of dev/bench/bench_infer.sh, 2 cores, 2 OpenMP threads; load average 0.50 before the run
  infer -b 1: 50.0 decode tok/s, 20.00 ms/token, prefill 300.0 tok/s (load 0.50, others 1%, memory read 30.0 GB/s)

== infer: decode throughput by batch size (model: L=12 NH=12 C=768 V=50257 maxT=1024, 124475904 parameters, cpu, 2 threads, fp32); FMA peak 230.0 GFLOP/s
batch    tok/s ms/token prefill tok/s  load others read GB/s bandwidth limit compute limit   % of binding % of FMA peak
    1     50.0    20.00         300.0  0.50     1%      30.0            60.0         900.0        83% (bw)          5.6%
    8    300.0    26.67         310.0  0.60     0%      30.0           470.0         900.0        64% (bw)         33.3%
   64    640.0   100.00         305.0  0.70     2%      29.0          2600.0         900.0        71% (fma)        71.1%
bench_infer: batch 64 = 12.8x the tokens/s of batch 1; batch 64 at 71.1% of the FMA peak (goal: >= 12x and >= 50%: met)

== infer -w bf16: decode throughput by batch size (model: L=12 NH=12 C=768 V=50257 maxT=1024, 124475904 parameters, cpu, 2 threads, bf16); bf16 peak 460.0 GFLOP/s (vdpbf16ps; highest of 7 measurements, lowest 450.0)
batch    tok/s ms/token prefill tok/s  load others read GB/s bandwidth limit compute limit   % of binding     % of peak
    1     90.0    11.11         300.0  0.50     1%      30.0           120.0        1800.0        75% (bw)          5.0%
    8    600.0    13.33         310.0  0.60     0%      30.0           940.0        1800.0        64% (bw)         33.3%
   64   1280.0    50.00         305.0  0.70     2%      29.0          5200.0        1800.0        71% (fma)        71.1%

== bf16 against fp32: decode tok/s of the runs above (each batch's two precisions ran one after the other)
batch fp32 tok/s bf16 tok/s bf16/fp32 bf16 % of bw limit
    1       50.0       90.0     1.80x                75%
    8      300.0      600.0     2.00x                64%
   64      640.0     1280.0     2.00x                25%
bench_infer: bf16 at batch 1 = 1.80x the tokens/s of fp32, at 75% of its own bandwidth limit (goal: >= 1.7x and >= 85%: 1.7x met, 85% not)

== infer_gpu: decode throughput by batch size (model: L=12 NH=12 C=768 V=50257 maxT=1024, 124475904 parameters, a GPU, bf16); limits unmeasured
batch    tok/s ms/token prefill tok/s  load others read GB/s bandwidth limit compute limit   % of binding % of FMA peak
    1    400.0     2.50        5000.0  0.50     0%         -      unmeasured    unmeasured              -             -
  256  51200.0     5.00        5000.0  0.50     0%         -      unmeasured    unmeasured              -             -
TABLE
"$PY" dev/bench/plot.py bench-infer "$dir/bench_infer.png" "$dir/infer.txt" > "$dir/bench_infer.out" 2>&1 || { bad "bench-infer chart:"; cat "$dir/bench_infer.out"; }
is_png "$dir/bench_infer.png" || bad "no bench-infer chart"
grep -qxF "infer: 3 batch sizes, batch 1 at 50.0 tok/s to batch 64 at 640.0 tok/s (12.8x); bandwidth limit 60.0 to 2600.0 tok/s, compute limit 900.0 tok/s" "$dir/bench_infer.out" &&
  grep -qxF "infer -w bf16: 3 batch sizes, batch 1 at 90.0 tok/s to batch 64 at 1280.0 tok/s (14.2x); bandwidth limit 120.0 to 5200.0 tok/s, compute limit 1800.0 tok/s" "$dir/bench_infer.out" &&
  grep -qxF "bf16 over fp32: batch 1 1.80x, batch 8 2.00x, batch 64 2.00x" "$dir/bench_infer.out" &&
  grep -qxF "infer_gpu: 2 batch sizes, batch 1 at 400.0 tok/s to batch 256 at 51200.0 tok/s (128.0x); limits unmeasured" "$dir/bench_infer.out" ||
  { bad "the bench-infer chart does not show the three sweeps of the table and bf16's speed-up:"; cat "$dir/bench_infer.out"; }
cat > "$dir/serve.txt" <<'TABLE'
machine: a text in the form of dev/bench/bench_serve.sh, 2 cores; Node v20.0.0; load average 0.50 before the run
  server -b 1: 1 clients x 4 requests, 256 tokens in 256 events, 80.0 tok/s, TTFT p50 30.00 p99 40.00 ms (load 0.50, others 1%, client 3%, server 98%)

== server: ./infer --serve against ./infer -f at the same batch (model: L=12 NH=12 C=768 V=50257 maxT=1024, 124475904 parameters, cpu, 2 threads, fp32)
clients    tok/s offline tok/s % of offline TTFT p50 TTFT p99  ms/token p50  ms/token p99 offline ms/token p50  load others client
      1     80.0         100.0        80.0%     30.0     40.0         12.00         13.00            10.00  0.50     1%     3%
     64    900.0        1000.0        90.0%    900.0   1500.0         60.00         70.00            55.00  0.70     2%     5%
(TTFT: ms from sending a request to its first token; ms/token: (last token - first) / (tokens - 1) per request; p50 and p99 over the requests)
TABLE
"$PY" dev/bench/plot.py bench-serve "$dir/bench_serve.png" "$dir/serve.txt" > "$dir/bench_serve.out" 2>&1 || { bad "bench-serve chart:"; cat "$dir/bench_serve.out"; }
is_png "$dir/bench_serve.png" || bad "no bench-serve chart"
grep -qxF "tokens/s: server 80.0 to 900.0, offline 100.0 to 1000.0, the server at 80.0% to 90.0% of the offline engine" "$dir/bench_serve.out" &&
  grep -qxF "time to first token: p50 30.0 to 900.0 ms, p99 40.0 to 1500.0 ms" "$dir/bench_serve.out" &&
  grep -qxF "ms per token after it: p50 12.0 to 60.0 ms, p99 13.0 to 70.0 ms" "$dir/bench_serve.out" ||
  { bad "the bench-serve chart does not show the table's rows:"; cat "$dir/bench_serve.out"; }
"$PY" dev/bench/plot.py bench-parallel "$dir/bench_parallel.png" doc/results/bench_parallel.txt > "$dir/bench_parallel.out" 2>&1 ||
  { bad "bench-parallel chart:"; cat "$dir/bench_parallel.out"; }
is_png "$dir/bench_parallel.png" || bad "no bench-parallel chart"
rows=0
while IFS='|' read -r label np ms speedup mb; do
  rows=$((rows + 1))
  p=processes; [ "$np" = 1 ] && p=process
  grep -qF "$label: $np $p, $ms ms/step (${speedup}x), compute " "$dir/bench_parallel.out" &&
    grep -q "^$label: .* ms, $mb MB per process$" "$dir/bench_parallel.out" ||
    { bad "the bench-parallel chart does not show the row $label ($ms ms/step, ${speedup}x, $mb MB):"; cat "$dir/bench_parallel.out"; }
done < <(sed -nE 's/^(\S.*\S)\s{2,}([0-9]+)\s+([0-9.]+)\s+[0-9]+\s+([0-9.]+)x\s+([0-9.]+) \(.*/\1|\2|\3|\4|\5/p' doc/results/bench_parallel.txt)
[ "$rows" = 6 ] && [ "$(grep -c ' MB per process$' "$dir/bench_parallel.out")" = 6 ] ||
  bad "doc/results/bench_parallel.txt has $rows table rows and the chart drew $(grep -c ' MB per process$' "$dir/bench_parallel.out"), expected 6"
cat > "$dir/peers.md" <<'TABLE'
- GPU: a table in the form of dev/bench/bench_gpu_peers.sh, 580.00
| trainer | B | tokens/s | ms/step | vs train_gpu | peak GPU memory | loss, first -> last step |
|---|---:|---:|---:|---:|---:|---|
| train_gpu -p bf16 | 8 | 150,000 | 54.6 | 1.00x | 12.0 GiB | 11.00 -> 7.00 |
| llm.c train_gpt2cu -r 0 | 8 | 300,000 | 27.3 | 2.00x | 6.5 GiB | 11.00 -> 7.10 |
| train_gpu -p bf16 | 64 | 170,000 | 385.5 | 1.00x | 60.2 GiB | 11.00 -> 6.00 |
| llm.c train_gpt2cu -r 0 | 64 | failed: out of memory (exit 1, llmc_b64.log) | - | - | 139.0 GiB | - |
TABLE
"$PY" dev/bench/plot.py bench-gpu-peers "$dir/peers.png" "$dir/peers.md" > "$dir/peers.out" 2>&1 || { bad "bench-gpu-peers chart:"; cat "$dir/peers.out"; }
is_png "$dir/peers.png" || bad "no bench-gpu-peers chart"
printf '%s\n' "train_gpu -p bf16, B=8: 150000 tokens/s, 12.0 GiB" "llm.c train_gpt2cu -r 0, B=8: 300000 tokens/s, 6.5 GiB" \
  "train_gpu -p bf16, B=64: 170000 tokens/s, 60.2 GiB" "llm.c train_gpt2cu -r 0, B=64: no figures, 139.0 GiB" "wrote $dir/peers.png" |
  cmp -s - "$dir/peers.out" || { bad "the bench-gpu-peers chart does not show the table's rows:"; cat "$dir/peers.out"; }
[ $status = 0 ] && echo "make plot, the ETA and the benchmark charts: ok"
exit $status
