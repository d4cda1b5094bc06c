#!/usr/bin/env bash
# Runs fuzz targets (built by `make fuzz-targets` into build/fuzz/) for SECONDS each, as many at
# once as there are cores (FUZZ_JOBS sets another number; each target is one process on one core,
# so each still gets SECONDS of a core; a target named twice runs once), and exits non-zero if any
# found a crash, a leak, a sanitizer report, a broken check, a timeout or an out-of-memory. What a
# target finds is saved as build/fuzz/found/TARGET-KIND-HASH (replay it: build/fuzz/fuzz_TARGET
# FILE; shrink it: add -minimize_crash=1 -runs=10000).
#
# Usage: test/fuzz/run.sh SECONDS TARGET...
#   Each target starts from its committed seeds (test/fuzz/corpus/TARGET), its regression inputs
#   (test/fuzz/regress/TARGET) and what it found before in the working corpus FUZZ_WORK/TARGET
#   (default build/fuzz/corpus: kept between runs until make clean, so time adds up), where new
#   inputs go. One line per target: runs, speed, coverage (cov: code edges reached, ft: features),
#   corpus size, and the CPU time it used, in the order the targets were given; the full libFuzzer
#   output is in build/fuzz/TARGET.log.
#   FUZZ_OUT (default build/fuzz) is where the binaries are and where logs and findings go.
cd "$(dirname "$0")/../.." || exit 1
seconds=${1:?usage: test/fuzz/run.sh SECONDS TARGET...}
shift
out=${FUZZ_OUT:-build/fuzz}
work=${FUZZ_WORK:-$out/corpus}
mkdir -p "$out/found" "$work"
status=0

max_len() {  # inputs a little larger than the largest seed
  case $1 in
    safetensors) echo 131072 ;;
    checkpoint|vocab|tokenizer_file) echo 16384 ;;
    encode) echo 8192 ;;
    decode) echo 16384 ;;   # long enough for ids whose bytes outgrow the decoder's first buffer
    *) echo 4096 ;;
  esac
}

# fuzz_target TARGET: runs it, prints its line (ending ": ok") or what it found
fuzz_target() {
  local target=$1
  local bin=$out/fuzz_$target
  [ -x "$bin" ] || { echo "FAIL: $bin is not built (make fuzz-targets)"; return 1; }
  mkdir -p "$work/$target"
  dirs=("$work/$target" "test/fuzz/corpus/$target")
  [ -d "test/fuzz/regress/$target" ] && dirs+=("test/fuzz/regress/$target")
  dict=()
  [ -f "test/fuzz/$target.dict" ] && dict=(-dict="test/fuzz/$target.dict")
  case $target in vocab) dict=(-dict=test/fuzz/encoder.dict) ;; esac
  log=$out/$target.log
  # -close_fd_mask=2: the readers' error lines are not output (sanitizer reports still are);
  # -timeout: an input that takes 10 s is a hang; -rss_limit_mb: memory for all of a process
  start=$(date +%s)
  TIMEFORMAT='%U %S'
  { time "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2560 -max_len="$(max_len "$target")" \
      -close_fd_mask=2 -print_final_stats=1 -artifact_prefix="$out/found/$target-" \
      "${dict[@]}" "${dirs[@]}" >"$log" 2>&1; } 2>"$log.time"
  rc=$?
  secs=$(( $(date +%s) - start ))
  cpu=$(awk '{printf "%d", $1 + $2}' "$log.time")
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}')
  last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
  cov=$(echo "$last" | grep -o 'cov: [0-9]*' | awk '{print $2}')
  ft=$(echo "$last" | grep -o 'ft: [0-9]*' | awk '{print $2}')
  corp=$(echo "$last" | grep -o 'corp: [0-9]*' | awk '{print $2}')
  rate=$(( ${runs:-0} / (secs > 0 ? secs : 1) ))
  line="fuzz_$target: ${secs} s (${cpu} s CPU), ${runs:-?} runs ($rate/s), cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?}"
  if [ $rc -eq 0 ]; then
    echo "$line: ok"
  else
    echo "$line: FOUND (exit $rc); from $log:"
    grep -E 'ERROR|SUMMARY|fuzz check failed|Test unit written|error:' "$log" | head -n 8 | sed 's/^/    /'
  fi
}

# each target's lines in $out/TARGET.result, its verdict in the last word of the first (ok)
jobs_max=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}
declare -A seen
targets=()
for target in "$@"; do [ -n "${seen[$target]:-}" ] || { seen[$target]=1; targets+=("$target"); }; done
for target in "${targets[@]}"; do
  rm -f "$out/$target.result"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
  fuzz_target "$target" >"$out/$target.result" 2>&1 &
done
wait
for target in "${targets[@]}"; do
  if [ -f "$out/$target.result" ]; then cat "$out/$target.result"; else echo "FAIL: fuzz_$target gave no result"; fi
  head -n 1 "$out/$target.result" 2>/dev/null | grep -q ': ok$' || status=1
done
exit $status
