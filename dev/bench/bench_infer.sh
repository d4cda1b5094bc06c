#!/usr/bin/env bash
# make bench-infer: generation speed of ./infer against the batch size, on a GPT-2 124M-shaped
# model, next to the two limits of this machine, all measured in the same run.
#
# For each batch size B, a file of B requests (the same short prompt, TOKENS new tokens each,
# temperature 1, a seed each, -E 0 so that none stops early) goes through `./infer -f FILE -b B`,
# which decodes the B sequences together: each decode step is one product per weight matrix over
# all of them (doc/infer.md). From infer's report:
#   decode tok/s = (tokens generated - requests) / decode seconds (each request's first token
#                  comes from its prefill, not from a decode step)
#   ms/token     = decode seconds / decode steps: how long each sequence waits for its next token
#   prefill tok/s = prompt tokens / prefill seconds
# A decode step reads every weight once, whatever B, and uses it for B multiply-adds, so two
# limits bind in turn:
#   bandwidth:  tok/s <= B * read bandwidth / bytes read per step
#     bytes per step: all parameters except wpe (a sequence reads only its position's row) as
#     float32, plus each sequence's keys and values in the cache, 2 L C floats per position
#     attended (averaged over the steps). Read bandwidth: dev/bench/membw.c (all threads summing
#     a 1 GiB buffer, the median of its passes), measured before and after every run; a run is
#     compared with the mean of the two, as the machine may be shared and its bandwidth varies.
#   compute:    tok/s <= FMA peak / FLOPs per token
#     FLOPs per token: 2 per parameter except wpe (one multiply-add each), plus attention's
#     QK^T and att.V, 4 L C per position attended. FMA peak: dev/bench/fma_peak.c (all OpenMP
#     threads running independent vector FMA chains), also measured around every run; the limit
#     uses the highest (what the cores can do), as make bench-cpu does.
# At batch 1 the bandwidth limit is far the lower (2 FLOPs per 4 bytes read); it grows with B
# until the FMA peak binds. The table gives each batch's tok/s as a % of the lower limit and of
# the FMA peak.
#
# Where ./infer_gpu is built (make infer_gpu) and nvidia-smi lists a GPU, the same sweep runs on
# it (GPU_BATCHES, up to 256), its limits unmeasured.
#
#   bash dev/bench/bench_infer.sh                 random GPT-2 124M weights (-e d12)
#   MODEL=data/gpt2_124M.safetensors bash dev/bench/bench_infer.sh    any model infer reads
#   knobs: TOKENS=64 (new tokens per request), BATCHES="1 2 4 8 16 32 64",
#          GPU_BATCHES="1 2 4 8 16 32 64 128 256", ROUNDS=1 (sweeps; the table shows each
#          batch's median run by tok/s)
set -euo pipefail
cd "$(dirname "$0")/../.."
CC=${CC:-gcc}
CFLAGS=${CFLAGS:--O3 -march=native -fopenmp}
MODEL=${MODEL:-d12}
TOKENS=${TOKENS:-64}
BATCHES=${BATCHES:-1 2 4 8 16 32 64}
GPU_BATCHES=${GPU_BATCHES:-1 2 4 8 16 32 64 128 256}
ROUNDS=${ROUNDS:-1}
PROMPT="The history of the city begins with a small settlement on the river, where"
[ -x ./infer ] || { echo "bench_infer: ./infer not built (make infer)" >&2; exit 1; }
[ "$ROUNDS" -ge 1 ] 2>/dev/null || { echo "bench_infer: ROUNDS=$ROUNDS: give 1 or more" >&2; exit 1; }
[ "$TOKENS" -ge 2 ] 2>/dev/null || { echo "bench_infer: TOKENS=$TOKENS: give 2 or more (the first token of each request comes from its prefill)" >&2; exit 1; }
dir=build/bench/infer
mkdir -p "$dir"
$CC $CFLAGS -o build/membw dev/bench/membw.c
$CC $CFLAGS -o build/fma_peak dev/bench/fma_peak.c

# Other jobs on the cores hurt infer far more than membw: each step passes ~135 OpenMP barriers,
# and one descheduled thread stalls each of them, the more so when the threads that wait for it
# spin on the core it needs. So, unless told otherwise, GCC's OpenMP spins only briefly before
# its waiting threads sleep (GOMP_SPINCOUNT; the default is 300000; doc/infer.md has the
# measurements). And say how busy the machine was.
[ -z "${OMP_WAIT_POLICY:-}" ] && export GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-3000}
cores=$(getconf _NPROCESSORS_ONLN)
load() { cut -d' ' -f1 /proc/loadavg; }
load_before=$(load)
# The load average is a minute's mean, too slow to tell one disturbed run from the next. So each
# run also gets "others": the share of all cores' time that other processes used during it, from
# the machine's busy time (/proc/stat) less infer's own (this shell's reaped children, in
# /proc/$$/stat). It counts model loading too, when infer leaves a core idle, so a few % is noise.
busy_jiffies() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
child_jiffies() { awk '{ print $16 + $17 }' /proc/$$/stat; }

# B requests, one JSON line each
write_requests() {  # FILE B
  local i
  for ((i = 1; i <= $2; i++)); do
    printf '{"prompt": "%s", "max_tokens": %d, "temperature": 1, "seed": %d}\n' "$PROMPT" "$TOKENS" "$i"
  done > "$1"
}

# infer's report as one line of numbers: params L C maxT requests failed prompt_tokens generated
# decode_steps decode_seconds prefill_seconds peak_batch
read_report() {  # stderr file
  awk '
    /^model:/ { for (i = 1; i <= NF; i++) { split($i, f, "="); gsub(",", "", f[2]); v[f[1]] = f[2]
                                            if ($i == "parameters,") params = $(i-1) } }
    /^requests:/ { req = $2; failed = substr($3, 2); prompt = $5; gen = $8 }
    /^batch:/ { peak = $4; for (i = 1; i <= NF; i++) { if ($i == "decode") { steps = $(i-1); dsec = $(i+3) }
                                                      if ($i == "prefills") psec = $(i+2) } }
    END { print params, v["L"], v["C"], v["maxT"], req, failed, prompt, gen, steps, dsec, psec, peak }' "$1"
}

rows=()     # per batch: "B tok/s ms/token prefill_tok/s load others GB/s params L C maxT prompt_per_req tokens_per_req"
peaks=()    # every FMA peak measured, GFLOP/s
bw_now() { ./build/membw | awk '{print $2}'; }
peak_now() { local p; p=$(./build/fma_peak | awk '{print $2}'); peaks+=("$p"); }

# ROUNDS sweeps over the batch sizes with one program, one run per batch each; a batch's row is
# its median run by decode tok/s. The sweeps alternate (1 2 4 ... 64, 1 2 4 ... 64) so that another
# job's burst of a few seconds disturbs one run of a batch, not all of them. MEASURE=1 measures
# membw and fma_peak around every run. Leaves the model line of the last run in $model_line.
sweep() {  # NAME PROGRAM MEASURE BATCH...
  local name=$1 prog=$2 measure=$3; shift 3
  local B r l err bw_before=- bw_after bw line round=""
  local -A runs=()
  for B in "$@"; do write_requests "$dir/requests_$B.jsonl" "$B"; done
  [ "$measure" = 1 ] && { bw_before=$(bw_now); peak_now; }
  for ((r = 1; r <= ROUNDS; r++)); do
    [ "$ROUNDS" -gt 1 ] && round=" (round $r of $ROUNDS)"
    for B in "$@"; do
      err=$dir/${name}_$B.err
      l=$(load)
      local t0=$EPOCHREALTIME all0 own0 others
      all0=$(busy_jiffies); own0=$(child_jiffies)
      "$prog" -e "$MODEL" -f "$dir/requests_$B.jsonl" -b "$B" -E 0 > "$dir/${name}_$B.out" 2> "$err" ||
        { echo "bench_infer: $prog -e $MODEL -f $dir/requests_$B.jsonl -b $B -E 0 failed:" >&2; cat "$err" >&2; exit 1; }
      others=$(awk -v all="$(( $(busy_jiffies) - all0 ))" -v own="$(( $(child_jiffies) - own0 ))" -v t0="$t0" -v t1="$EPOCHREALTIME" \
                   -v hz="$(getconf CLK_TCK)" -v cores="$cores" 'BEGIN {
                 o = 100 * (all - own) / hz / ((t1 - t0) * cores); printf "%.0f%%", o < 0 ? 0 : o }')
      bw=-
      if [ "$measure" = 1 ]; then
        bw_after=$(bw_now); peak_now
        bw=$(awk -v a="$bw_before" -v b="$bw_after" 'BEGIN { printf "%.1f", (a + b) / 2 }')
        bw_before=$bw_after
      fi
      local params L C maxT req failed prompt gen steps dsec psec peak_batch
      read -r params L C maxT req failed prompt gen steps dsec psec peak_batch < <(read_report "$err")
      if [ "$req" != "$B" ] || [ "$failed" != 0 ] || [ "$gen" != $((B * TOKENS)) ]; then
        echo "bench_infer: $prog at -b $B answered $req requests ($failed failed) with $gen tokens, expected $B with $((B * TOKENS))" >&2
        exit 1
      fi
      [ "$peak_batch" = "$B" ] || echo "  note: $name -b $B decoded at most $peak_batch sequences together (the key-value pool is too small?)"
      line=$(awk -v B="$B" -v gen="$gen" -v steps="$steps" -v dsec="$dsec" -v prompt="$prompt" -v psec="$psec" 'BEGIN {
        printf "%d %.1f %.2f %.1f", B, (gen - B) / dsec, 1000 * dsec / steps, prompt / psec }')
      line="$line $l $others $bw $params $L $C $maxT $((prompt / B)) $TOKENS"
      echo "  $name -b $B$round: $(echo "$line" | awk '{ printf "%s decode tok/s, %s ms/token, prefill %s tok/s", $2, $3, $4 }')" \
           "(load $l, others $others$([ "$bw" != - ] && echo ", memory read $bw GB/s"))"
      runs[$B]+="$line"$'\n'
    done
  done
  rows=()
  for B in "$@"; do
    rows+=("$(printf '%s' "${runs[$B]}" | sort -g -k2 | awk -v n="$ROUNDS" 'NR == int((n + 1) / 2)')")
  done
  model_line=$(grep '^model:' "$dir/${name}_$B.err")
}

# The table of one sweep; LIMITS=1 adds the two limits (needs $peak)
table() {  # TITLE LIMITS
  echo
  echo "== $1"
  printf '%s\n' "${rows[@]}" | awk -v limits="$2" -v peak="${peak:-0}" '
    BEGIN { printf "%5s %8s %8s %13s %5s %6s %9s %15s %13s %14s %13s\n", "batch", "tok/s", "ms/token", "prefill tok/s", "load",
                   "others", "read GB/s", "bandwidth limit", "compute limit", "% of binding", "% of FMA peak" }
    {
      B = $1; tps = $2; bw = $7; params = $8; L = $9; C = $10; maxT = $11; P = $12; n = $13
      pos = P + n / 2                        # positions attended, averaged over the decode steps
      w = params - maxT * C                  # all parameters but wpe
      if (limits) {
        bytes = 4 * w + B * 4 * 2 * L * C * pos
        flops = 2 * w + 4 * L * C * pos
        bwl = B * bw * 1e9 / bytes; cl = peak * 1e9 / flops
        bind = bwl < cl ? bwl : cl
        printf "%5d %8.1f %8.2f %13.1f %5.2f %6s %9.1f %15.1f %13.1f %9.0f%% (%s) %12.1f%%\n", B, tps, $3, $4, $5, $6, bw, bwl, cl,
               100 * tps / bind, bwl < cl ? "bw" : "fma", 100 * tps * flops / (peak * 1e9)
      } else {
        printf "%5d %8.1f %8.2f %13.1f %5.2f %6s %9s %15s %13s %14s %13s\n", B, tps, $3, $4, $5, $6, "-", "unmeasured", "unmeasured", "-", "-"
      }
    }'
}

cpuinfo() { grep -m1 "^$1" /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'; }
threads=$(./build/fma_peak 1000 | sed 's/.*threads \([0-9]*\).*/\1/')
# the model name alone can hide the generation ("AMD EPYC"): family 25 is Zen 3/4, 26 is Zen 5
echo "machine: $(cpuinfo 'model name') (family $(cpuinfo 'cpu family'), model $(cpuinfo 'model')), $cores cores, $threads OpenMP threads; load average $load_before before the run"
echo "sweep: ./infer -e $MODEL -f REQUESTS -b B -E 0 for B in $BATCHES: B requests of \"$PROMPT\"," \
     "$TOKENS new tokens each, temperature 1, seeds 1..B; $ROUNDS sweep(s), the median run of each batch"
sweep infer ./infer 1 $BATCHES
peak=$(printf '%s\n' "${peaks[@]}" | sort -g | tail -1)
low=$(printf '%s\n' "${peaks[@]}" | sort -g | head -1)
cpu_rows=("${rows[@]}")
cpu_table=$(table "infer: decode throughput by batch size ($model_line); FMA peak $peak GFLOP/s (highest of ${#peaks[@]} measurements, lowest $low)" 1)
echo "$cpu_table"
read -r params L C maxT P n < <(echo "${rows[0]}" | awk '{ print $8, $9, $10, $11, $12, $13 }')
awk -v params="$params" -v L="$L" -v C="$C" -v maxT="$maxT" -v P="$P" -v n="$n" 'BEGIN {
  pos = P + n / 2; w = params - maxT * C
  printf "per decode step: %.1f MB of weights (float32, all but wpe) + %.2f MB of cache per sequence; per token %.3f GFLOP" \
         " (%d-token prompt, %d new tokens: %.1f positions attended on average)\n",
         4 * w / 1e6, 4 * 2 * L * C * pos / 1e6, (2 * w + 4 * L * C * pos) / 1e9, P, n, pos }'
awk -v lo="$low" -v hi="$peak" 'BEGIN { if (lo < 0.85 * hi) print "note: the FMA peak varied during the run: other processes were using the cores, the timings are disturbed" }'

# the summary: the largest batch against batch 1, and the issue's goal when the sweep has 1 and 64
first=$(echo "${cpu_rows[0]}" | awk '{print $1, $2, $6}')
last=$(echo "${cpu_rows[${#cpu_rows[@]}-1]}" | awk '{print $1, $2, $6}')
pct_peak=$(echo "$cpu_table" | awk -v B="${last%% *}" '$1 == B { gsub("%", "", $NF); print $NF }')
awk -v f="$first" -v l="$last" -v pct="$pct_peak" 'BEGIN {
  split(f, a, " "); split(l, b, " "); x = b[2] / a[2]
  printf "bench_infer: batch %d = %.1fx the tokens/s of batch %d; batch %d at %.1f%% of the FMA peak", b[1], x, a[1], b[1], pct
  if (a[1] == 1 && b[1] == 64) {
    verdict = (x >= 12 && pct >= 50) ? "met" : (x >= 12) ? "12x met, 50% not" : (pct >= 50) ? "50% met, 12x not" : "not met"
    printf " (goal: >= 12x and >= 50%%: %s)", verdict
  }
  if (a[3] + 0 > 10 || b[3] + 0 > 10)
    printf "; but other processes used %s and %s of the cores during these two runs, so the ratios are unreliable: rerun when the machine is idle, or with ROUNDS=3", a[3], b[3]
  printf "\n" }'

# the GPU twin, where there is one
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU [0-9]' || true)
if [ ! -x ./infer_gpu ]; then
  echo "infer_gpu: skipped (./infer_gpu is not built: make infer_gpu, which needs nvcc)"
elif [ "${gpus:-0}" = 0 ]; then
  echo "infer_gpu: skipped (no GPU: nvidia-smi is missing or lists none)"
else
  sweep infer_gpu ./infer_gpu 0 $GPU_BATCHES
  table "infer_gpu: decode throughput by batch size ($model_line); limits unmeasured" 0
  first=$(echo "${rows[0]}" | awk '{print $1, $2}')
  last=$(echo "${rows[${#rows[@]}-1]}" | awk '{print $1, $2}')
  awk -v f="$first" -v l="$last" 'BEGIN { split(f, a, " "); split(l, b, " ")
    printf "bench_infer: infer_gpu batch %d = %.1fx the tokens/s of batch %d\n", b[1], b[2] / a[2], a[1] }'
fi

load_after=$(load)
echo "load average $load_before before, $load_after after, on $cores cores (includes this benchmark); OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-} GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-}"
if awk -v l="$load_before" -v c="$cores" 'BEGIN {exit !(l > 0.5 * c)}'; then
  echo "warning: the machine was busy before the run (load $load_before on $cores cores): other jobs" \
       "share the cores, and the tok/s above understate infer; rerun when it is idle"
fi
