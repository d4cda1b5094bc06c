#!/usr/bin/env bash
# make bench-infer: generation speed of ./infer against the batch size, on a GPT-2 124M-shaped
# model, with float32 weights (-w fp32) and with bf16 weights (-w bf16), next to the two limits
# of this machine in each precision, all measured in the same run.
#
# For each batch size B, a file of B requests (the same short prompt, TOKENS new tokens each,
# temperature 1, a seed each, -E 0 so that none stops early) goes through `./infer -f FILE -b B
# -w PRECISION`, which decodes the B sequences together: each decode step is one product per
# weight matrix over all of them (doc/infer.md). The two precisions run one after the other at
# each batch size, so that a disturbance of the machine hits both alike. From infer's report:
#   decode tok/s = (tokens generated - requests) / decode seconds (each request's first token
#                  comes from its prefill, not from a decode step)
#   ms/token     = decode seconds / decode steps: how long each sequence waits for its next token
#   prefill tok/s = prompt tokens / prefill seconds
# A decode step reads every weight once, whatever B, and uses it for B multiply-adds, so two
# limits bind in turn:
#   bandwidth:  tok/s <= B * read bandwidth / bytes read per step
#     bytes per step: all parameters except wpe (a sequence reads only its position's row), 4
#     bytes each in float32, 2 in bf16 (counted as if all were bf16: the layernorms and biases
#     are 0.1% of them), plus each sequence's keys and values in the cache, 2 L C values per
#     position attended (averaged over the steps), of the size infer's "kv pages" line reports.
#     Read bandwidth: dev/bench/membw.c (all threads summing a 1 GiB buffer, the median of its
#     passes), measured before and after every run; a run is compared with the mean of the two,
#     as the machine may be shared and its bandwidth varies.
#   compute:    tok/s <= peak / FLOPs per token
#     FLOPs per token: 2 per parameter except wpe (one multiply-add each), plus attention's
#     QK^T and att.V, 4 L C per position attended. Peak: dev/bench/fma_peak.c (gpt2/cpu_peak.h;
#     all OpenMP threads running independent vector chains) of the precision: float32 FMAs for
#     fp32, AVX512_BF16's vdpbf16ps for bf16, or AMX's tdpbf16ps where the bf16 products run on
#     AMX (gpt2/cpu_amx.h; where the build has no AVX512_BF16, its bf16 products run on FMAs, and
#     the FMA peak is bf16's too). Both are measured around every run;
#     a limit uses the highest (what the cores can do), as make bench-cpu does.
# At batch 1 the bandwidth limit is far the lower (2 FLOPs per 4 bytes read in float32, per 2 in
# bf16); it grows with B until the peak binds. Each precision's table gives each batch's tok/s as
# a % of its lower limit and of its peak; then bf16's tok/s over fp32's at each batch.
#
# Where ./infer_gpu is built (make infer_gpu) and nvidia-smi lists a GPU, the same sweep runs on
# it (GPU_BATCHES, up to 256), in its default precision, its limits unmeasured.
#
#   bash dev/bench/bench_infer.sh                 random GPT-2 124M weights (-e d12)
#   MODEL=data/gpt2_124M.safetensors bash dev/bench/bench_infer.sh    any model infer reads
#   knobs: TOKENS=64 (new tokens per request), BATCHES="1 2 4 8 16 32 64",
#          GPU_BATCHES="1 2 4 8 16 32 64 128 256", ROUNDS=1 (sweeps; the table shows each
#          batch's median run by tok/s), PRECISIONS="fp32 bf16" (infer's -w, in this order)
set -euo pipefail
cd "$(dirname "$0")/../.."
CC=${CC:-gcc}
CFLAGS=${CFLAGS:--O3 -march=native -fopenmp}
MODEL=${MODEL:-d12}
TOKENS=${TOKENS:-64}
BATCHES=${BATCHES:-1 2 4 8 16 32 64}
GPU_BATCHES=${GPU_BATCHES:-1 2 4 8 16 32 64 128 256}
ROUNDS=${ROUNDS:-1}
PRECISIONS=${PRECISIONS:-fp32 bf16}
PROMPT="The history of the city begins with a small settlement on the river, where"
[ -x ./infer ] || { echo "bench_infer: ./infer not built (make infer)" >&2; exit 1; }
[ "$ROUNDS" -ge 1 ] 2>/dev/null || { echo "bench_infer: ROUNDS=$ROUNDS: give 1 or more" >&2; exit 1; }
[ "$TOKENS" -ge 2 ] 2>/dev/null || { echo "bench_infer: TOKENS=$TOKENS: give 2 or more (the first token of each request comes from its prefill)" >&2; exit 1; }
for p in $PRECISIONS; do
  [ "$p" = fp32 ] || [ "$p" = bf16 ] || { echo "bench_infer: PRECISIONS=\"$PRECISIONS\": each one fp32 or bf16" >&2; exit 1; }
done
[ -n "${PRECISIONS// /}" ] || { echo "bench_infer: PRECISIONS is empty: give fp32, bf16 or both" >&2; exit 1; }
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
# decode_steps decode_seconds prefill_seconds peak_batch page_positions page_MB
read_report() {  # stderr file
  awk '
    /^model:/ { for (i = 1; i <= NF; i++) { split($i, f, "="); gsub(",", "", f[2]); v[f[1]] = f[2]
                                            if ($i == "parameters,") params = $(i-1) } }
    /^requests:/ { req = $2; failed = substr($3, 2); prompt = $5; gen = $8 }
    /^batch:/ { peak = $4; for (i = 1; i <= NF; i++) { if ($i == "decode") { steps = $(i-1); dsec = $(i+3) }
                                                      if ($i == "prefills") psec = $(i+2) } }
    /^kv pages:/ { for (i = 1; i <= NF; i++) { if ($i == "positions") ppos = substr($(i-1), 2)
                                               if ($i == "MB") pmb = $(i-1) } }
    END { print params, v["L"], v["C"], v["maxT"], req, failed, prompt, gen, steps, dsec, psec, peak, ppos, pmb }' "$1"
}

# The peaks, every measurement kept, in GFLOP/s: fp32 (float32 FMA) and bf16 (vdpbf16ps or AMX's
# tdpbf16ps; the FMA peak where this build has no AVX512_BF16, fma_peak's exit status 2)
peaks_fp32=()
peaks_bf16=()
bf16_instruction=vdpbf16ps
bw_now() { ./build/membw | awk '{print $2}'; }
peak_of() {  # PRECISION
  local out rc=0
  out=$(./build/fma_peak "$1" 2>&1) || rc=$?
  if [ "$1" = bf16 ] && [ $rc = 2 ]; then
    out=$(./build/fma_peak fp32)
  elif [ $rc != 0 ]; then
    echo "bench_infer: ./build/fma_peak $1 failed: $out" >&2; exit 1
  fi
  echo "$out" | awk '{print $2}'
}
if ! probe=$(./build/fma_peak bf16 1000 2>/dev/null); then
  bf16_instruction="float32 FMA: this build has no AVX512_BF16"
elif [[ "$probe" == *AMX* ]]; then
  bf16_instruction="AMX tdpbf16ps"
fi
peaks_now() { peaks_fp32+=("$(peak_of fp32)"); peaks_bf16+=("$(peak_of bf16)"); }

# ROUNDS sweeps over the batch sizes, one run per batch and precision each; a batch's row is its
# median run by decode tok/s. The sweeps alternate (1 2 4 ... 64, 1 2 4 ... 64), and within a
# batch the precisions, so that another job's burst of a few seconds disturbs one run, not all of
# a batch's or a precision's. MEASURE=1 measures membw and both peaks around every run.
# PRECISIONS "-": the program's default, no -w. Leaves each precision's rows (one line per batch,
# see `line` below) in rows_of[PRECISION], and its model line in model_of[PRECISION].
declare -A rows_of model_of
sweep() {  # NAME PROGRAM MEASURE "PRECISIONS" BATCH...
  local name=$1 prog=$2 measure=$3 precisions=$4; shift 4
  local B r p l err out bw_before=- bw_after bw line round="" wflag
  local -A runs=()
  for B in "$@"; do write_requests "$dir/requests_$B.jsonl" "$B"; done
  [ "$measure" = 1 ] && { bw_before=$(bw_now); peaks_now; }
  for ((r = 1; r <= ROUNDS; r++)); do
    [ "$ROUNDS" -gt 1 ] && round=" (round $r of $ROUNDS)"
    for B in "$@"; do
      for p in $precisions; do
        wflag=(); [ "$p" != - ] && wflag=(-w "$p")
        out=$dir/${name}_${p}_$B
        err=$out.err
        l=$(load)
        local t0=$EPOCHREALTIME all0 own0 others
        all0=$(busy_jiffies); own0=$(child_jiffies)
        "$prog" -e "$MODEL" -f "$dir/requests_$B.jsonl" -b "$B" -E 0 "${wflag[@]}" > "$out.out" 2> "$err" ||
          { echo "bench_infer: $prog -e $MODEL -f $dir/requests_$B.jsonl -b $B -E 0 ${wflag[*]} failed:" >&2; cat "$err" >&2; exit 1; }
        others=$(awk -v all="$(( $(busy_jiffies) - all0 ))" -v own="$(( $(child_jiffies) - own0 ))" -v t0="$t0" -v t1="$EPOCHREALTIME" \
                     -v hz="$(getconf CLK_TCK)" -v cores="$cores" 'BEGIN {
                   o = 100 * (all - own) / hz / ((t1 - t0) * cores); printf "%.0f%%", o < 0 ? 0 : o }')
        bw=-
        if [ "$measure" = 1 ]; then
          bw_after=$(bw_now); peaks_now
          bw=$(awk -v a="$bw_before" -v b="$bw_after" 'BEGIN { printf "%.1f", (a + b) / 2 }')
          bw_before=$bw_after
        fi
        local params L C maxT req failed prompt gen steps dsec psec peak_batch ppos pmb
        read -r params L C maxT req failed prompt gen steps dsec psec peak_batch ppos pmb < <(read_report "$err")
        if [ "$req" != "$B" ] || [ "$failed" != 0 ] || [ "$gen" != $((B * TOKENS)) ]; then
          echo "bench_infer: $prog at -b $B ${wflag[*]} answered $req requests ($failed failed) with $gen tokens, expected $B with $((B * TOKENS))" >&2
          exit 1
        fi
        [ "$peak_batch" = "$B" ] || echo "  note: $name -b $B ${wflag[*]} decoded at most $peak_batch sequences together (the key-value pool is too small?)"
        # bytes of one cached value: a page holds ppos positions of 2 L C values (keys and values);
        # its size in MB is rounded, so the nearer of bf16's 2 and float32's 4
        local vbytes
        vbytes=$(awk -v mb="${pmb:-0}" -v pos="${ppos:-0}" -v L="$L" -v C="$C" 'BEGIN {
          b = pos > 0 ? mb * 1e6 / (pos * 2 * L * C) : 4; print (b < 3 ? 2 : 4) }')
        line=$(awk -v B="$B" -v gen="$gen" -v steps="$steps" -v dsec="$dsec" -v prompt="$prompt" -v psec="$psec" 'BEGIN {
          printf "%d %.1f %.2f %.1f", B, (gen - B) / dsec, 1000 * dsec / steps, prompt / psec }')
        line="$line $l $others $bw $params $L $C $maxT $((prompt / B)) $TOKENS $vbytes"
        echo "  $name -b $B${wflag[*]:+ ${wflag[*]}}$round: $(echo "$line" | awk '{ printf "%s decode tok/s, %s ms/token, prefill %s tok/s", $2, $3, $4 }')" \
             "(load $l, others $others$([ "$bw" != - ] && echo ", memory read $bw GB/s"))"
        runs["$p $B"]+="$line"$'\n'
      done
    done
  done
  for p in $precisions; do
    rows_of[$p]=""
    for B in "$@"; do
      rows_of[$p]+="$(printf '%s' "${runs["$p $B"]}" | sort -g -k2 | awk -v n="$ROUNDS" 'NR == int((n + 1) / 2)')"$'\n'
    done
    model_of[$p]=$(grep '^model:' "$dir/${name}_${p}_$B.err")
  done
}

# The table of one precision's rows; with a peak (GFLOP/s) and the bytes of a weight, the two
# limits, else "unmeasured"
table() {  # TITLE ROWS PEAK WEIGHT_BYTES
  echo
  echo "== $1"
  printf '%s' "$2" | awk -v peak="$3" -v wbytes="$4" '
    BEGIN { printf "%5s %8s %8s %13s %5s %6s %9s %15s %13s %14s %13s\n", "batch", "tok/s", "ms/token", "prefill tok/s", "load",
                   "others", "read GB/s", "bandwidth limit", "compute limit", "% of binding", "% of peak" }
    {
      B = $1; tps = $2; bw = $7; params = $8; L = $9; C = $10; maxT = $11; P = $12; n = $13; vbytes = $14
      pos = P + n / 2                        # positions attended, averaged over the decode steps
      w = params - maxT * C                  # all parameters but wpe
      if (peak > 0) {
        bytes = wbytes * w + B * vbytes * 2 * L * C * pos
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
echo "sweep: ./infer -e $MODEL -f REQUESTS -b B -E 0 -w PRECISION for B in $BATCHES and PRECISION in $PRECISIONS: B requests of \"$PROMPT\"," \
     "$TOKENS new tokens each, temperature 1, seeds 1..B; $ROUNDS sweep(s), the median run of each batch"
sweep infer ./infer 1 "$PRECISIONS" $BATCHES
highest() { printf '%s\n' "$@" | sort -g | tail -1; }
lowest() { printf '%s\n' "$@" | sort -g | head -1; }
declare -A peak_of_p=([fp32]=$(highest "${peaks_fp32[@]}") [bf16]=$(highest "${peaks_bf16[@]}"))
declare -A low_of_p=([fp32]=$(lowest "${peaks_fp32[@]}") [bf16]=$(lowest "${peaks_bf16[@]}"))
declare -A count_of_p=([fp32]=${#peaks_fp32[@]} [bf16]=${#peaks_bf16[@]})
declare -A what_of_p=([fp32]="float32 FMA" [bf16]=$bf16_instruction)
declare -A wbytes_of_p=([fp32]=4 [bf16]=2)
declare -A title_of_p=([fp32]=infer [bf16]="infer -w bf16")
declare -A table_of_p
for p in $PRECISIONS; do
  table_of_p[$p]=$(table "${title_of_p[$p]}: decode throughput by batch size (${model_of[$p]}); $p peak ${peak_of_p[$p]} GFLOP/s (${what_of_p[$p]}; highest of ${count_of_p[$p]} measurements, lowest ${low_of_p[$p]})" \
                         "${rows_of[$p]}" "${peak_of_p[$p]}" "${wbytes_of_p[$p]}")
  echo "${table_of_p[$p]}"
  read -r params L C maxT P n vbytes < <(echo "${rows_of[$p]}" | head -1 | awk '{ print $8, $9, $10, $11, $12, $13, $14 }')
  awk -v params="$params" -v L="$L" -v C="$C" -v maxT="$maxT" -v P="$P" -v n="$n" -v vbytes="$vbytes" -v wbytes="${wbytes_of_p[$p]}" -v p="$p" 'BEGIN {
    pos = P + n / 2; w = params - maxT * C
    printf "per decode step: %.1f MB of weights (%s, all but wpe) + %.2f MB of cache per sequence (%d bytes a value); per token %.3f GFLOP" \
           " (%d-token prompt, %d new tokens: %.1f positions attended on average)\n",
           wbytes * w / 1e6, p == "bf16" ? "bf16" : "float32", vbytes * 2 * L * C * pos / 1e6, vbytes, (2 * w + 4 * L * C * pos) / 1e9, P, n, pos }'
  awk -v lo="${low_of_p[$p]}" -v hi="${peak_of_p[$p]}" -v p="$p" 'BEGIN {
    if (lo < 0.85 * hi) printf "note: the %s peak varied during the run: other processes were using the cores, the timings are disturbed\n", p }'

  # the largest batch against batch 1, and for fp32 the goal of batched generation when the
  # sweep has 1 and 64
  first=$(echo "${rows_of[$p]}" | head -1 | awk '{print $1, $2, $6}')
  last=$(echo "${rows_of[$p]}" | grep . | tail -1 | awk '{print $1, $2, $6}')
  pct_peak=$(echo "${table_of_p[$p]}" | awk -v B="${last%% *}" '$1 == B { gsub("%", "", $NF); print $NF }')
  who=bench_infer; [ "$p" = bf16 ] && who="bench_infer -w bf16"
  awk -v f="$first" -v l="$last" -v pct="$pct_peak" -v who="$who" -v p="$p" 'BEGIN {
    split(f, a, " "); split(l, b, " "); x = b[2] / a[2]
    printf "%s: batch %d = %.1fx the tokens/s of batch %d; batch %d at %.1f%% of the %s peak", who, b[1], x, a[1], b[1], pct, p
    if (p == "fp32" && a[1] == 1 && b[1] == 64) {
      verdict = (x >= 12 && pct >= 50) ? "met" : (x >= 12) ? "12x met, 50% not" : (pct >= 50) ? "50% met, 12x not" : "not met"
      printf " (goal: >= 12x and >= 50%%: %s)", verdict
    }
    if (a[3] + 0 > 10 || b[3] + 0 > 10)
      printf "; but other processes used %s and %s of the cores during these two runs, so the ratios are unreliable: rerun when the machine is idle, or with ROUNDS=3", a[3], b[3]
    printf "\n" }'
done

# bf16 against fp32, batch by batch, from the same sweep; at batch 1 the issue's goal: bf16 at
# >= 1.7x fp32's tokens/s and >= 85% of its own bandwidth limit
if [ -n "${rows_of[fp32]:-}" ] && [ -n "${rows_of[bf16]:-}" ]; then
  echo
  echo "== bf16 against fp32: decode tok/s of the runs above (each batch's two precisions ran one after the other)"
  paste -d' ' <(echo "${table_of_p[fp32]}" | awk '$1 ~ /^[0-9]+$/ { print $1, $2, $6 }') \
              <(echo "${table_of_p[bf16]}" | awk '$1 ~ /^[0-9]+$/ { print $1, $2, 100 * $2 / $8, $6 }') |
    awk 'BEGIN { printf "%5s %10s %10s %9s %18s\n", "batch", "fp32 tok/s", "bf16 tok/s", "bf16/fp32", "bf16 % of bw limit" }
         # fields: batch, fp32 tok/s, its others; batch, bf16 tok/s, % of its bandwidth limit, its others
         $1 != $4 { print "bench_infer: the fp32 and bf16 tables have different batches" > "/dev/stderr"; exit 1 }
         { printf "%5d %10.1f %10.1f %8.2fx %17.0f%%\n", $1, $2, $5, $5 / $2, $6
           if ($1 == 1) { x1 = $5 / $2; pct1 = $6; o32 = $3; o16 = $7; have1 = 1 } }
         END { if (have1) {
           verdict = (x1 >= 1.7 && pct1 >= 85) ? "met" : (x1 >= 1.7) ? "1.7x met, 85% not" : (pct1 >= 85) ? "85% met, 1.7x not" : "not met"
           printf "bench_infer: bf16 at batch 1 = %.2fx the tokens/s of fp32, at %.0f%% of its own bandwidth limit (goal: >= 1.7x and >= 85%%: %s)",
                  x1, pct1, verdict
           if (o32 + 0 > 10 || o16 + 0 > 10)
             printf "; but other processes used %s and %s of the cores during these two runs, so the ratio is unreliable: rerun when the machine is idle, or with ROUNDS=3", o32, o16
           printf "\n" } }'
fi

# the GPU twin, where there is one
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU [0-9]' || true)
if [ ! -x ./infer_gpu ]; then
  echo "infer_gpu: skipped (./infer_gpu is not built: make infer_gpu, which needs nvcc)"
elif [ "${gpus:-0}" = 0 ]; then
  echo "infer_gpu: skipped (no GPU: nvidia-smi is missing or lists none)"
else
  sweep infer_gpu ./infer_gpu 0 - $GPU_BATCHES
  table "infer_gpu: decode throughput by batch size (${model_of[-]}); limits unmeasured" "${rows_of[-]}" 0 0
  first=$(echo "${rows_of[-]}" | head -1 | awk '{print $1, $2}')
  last=$(echo "${rows_of[-]}" | grep . | tail -1 | awk '{print $1, $2}')
  awk -v f="$first" -v l="$last" 'BEGIN { split(f, a, " "); split(l, b, " ")
    printf "bench_infer: infer_gpu batch %d = %.1fx the tokens/s of batch %d\n", b[1], b[2] / a[2], a[1] }'
fi

load_after=$(load)
echo "load average $load_before before, $load_after after, on $cores cores (includes this benchmark); OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-} GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-}"
if awk -v l="$load_before" -v c="$cores" 'BEGIN {exit !(l > 0.5 * c)}'; then
  echo "warning: the machine was busy before the run (load $load_before on $cores cores): other jobs" \
       "share the cores, and the tok/s above understate infer; rerun when it is idle"
fi
