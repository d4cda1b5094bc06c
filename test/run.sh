#!/usr/bin/env bash
# Runs every test/test_*.sh and counts the results. A test exits 0 when it passes, 77 when it
# cannot run on this machine (skipped, with the reason on its last line), anything else when it fails.
# Usage: test/run.sh [PATTERN]  (runs only the tests whose name contains PATTERN)
# TEST_JOBS tests run at once (default: 2, or 1 on a machine of one core), so that one test's
# single-threaded stretches overlap another's; each test's line is printed in name order, once it
# and the tests before it are done. The long tests (those of the list below, or, where
# build/test-logs holds the times of an earlier run, those of a minute or more) start first,
# longest first, and while one runs, the slots beside it go to short tests: two long ones, each
# busy on every core, would slow each other down to twice their time. (In the list, the float32
# train_gpu test comes before the bf16 one, the longest: the first of them builds the emulated
# train_gpu, a minute, and the bf16 one would pass 3 minutes with it.)
cd "$(dirname "$0")/.."
pass=0; fail=0; skip=0; failed=()
mkdir -p build/test-logs
jobs=${TEST_JOBS:-$(( $(nproc 2>/dev/null || echo 1) > 1 ? 2 : 1 ))}
long="test_exercises test_fuzz test_train_gpu_emu test_train_gpu_emu_bf16 test_kernels test_gpu_emu test_train_gpu_emu_modes
      test_infer_gpu_emu"

names=()
for t in test/test_*.sh; do
  name=$(basename "$t" .sh)
  [ -n "${1:-}" ] && [[ "$name" != *"$1"* ]] && continue
  names+=("$name")
done
# the long tests and the short ones, each in the order to start them in: by the seconds of the
# last run where known, else the list's long ones first
order=$(for name in "${names[@]}"; do
  secs=$(cat "build/test-logs/$name.secs" 2>/dev/null)
  rank=$(echo $long | tr ' ' '\n' | grep -nx "$name" | cut -d: -f1)
  echo "${secs:-$(( rank ? 100000 - rank : 0 ))} $name"
done | sort -k1,1nr -k2)
longs=($(awk '$1 >= 60 {print $2}' <<<"$order"))
shorts=($(awk '$1 < 60 {print $2}' <<<"$order"))
# the programs most tests run, built once before they start side by side (else two tests could
# build the same one at once)
[ "$jobs" -gt 1 ] && [ ${#names[@]} -gt 1 ] && make -s tokenizer train_cpu infer data >/dev/null 2>&1

# run NAME: the test, its output to its log, then its exit status and seconds to NAME.done
run() {
  local start=$(date +%s)
  bash "test/$1.sh" >"build/test-logs/$1.log" 2>&1
  local rc=$?
  echo "$rc $(( $(date +%s) - start ))" >"build/test-logs/$1.done.tmp"
  mv "build/test-logs/$1.done.tmp" "build/test-logs/$1.done"  # whole, as the loop below reads it
}
report() {  # NAME: its line, and the counts
  local name=$1 log="build/test-logs/$1.log" rc secs
  read -r rc secs <"build/test-logs/$name.done"
  echo "$secs" >"build/test-logs/$name.secs"
  if [ "$rc" -eq 0 ]; then
    pass=$((pass + 1)); echo "PASS  $name (${secs}s)"
  elif [ "$rc" -eq 77 ]; then
    skip=$((skip + 1)); echo "SKIP  $name: $(tail -n 1 "$log")"
  else
    fail=$((fail + 1)); failed+=("$name"); echo "FAIL  $name (exit $rc, ${secs}s); last lines of $log:"
    tail -n 15 "$log" | sed 's/^/      /'
  fi
}
for name in "${names[@]}"; do rm -f "build/test-logs/$name.done"; done
running=0 printed=0 long_running=""
while [ $printed -lt ${#names[@]} ]; do
  # a long test is done once its result is there
  [ -n "$long_running" ] && [ -f "build/test-logs/$long_running.done" ] && long_running=""
  while [ $running -lt "$jobs" ] && [ $(( ${#longs[@]} + ${#shorts[@]} )) -gt 0 ]; do
    if [ ${#longs[@]} -gt 0 ] && { [ -z "$long_running" ] || [ ${#shorts[@]} -eq 0 ]; }; then
      name=${longs[0]}; longs=("${longs[@]:1}"); long_running=$name
    else
      name=${shorts[0]}; shorts=("${shorts[@]:1}")
    fi
    run "$name" &
    running=$((running + 1))
  done
  while [ $printed -lt ${#names[@]} ] && [ -f "build/test-logs/${names[$printed]}.done" ]; do
    report "${names[$printed]}"; printed=$((printed + 1))
  done
  [ $printed -lt ${#names[@]} ] || break
  if [ $running -eq 0 ]; then  # nothing left to wait for: the test's runner was killed
    echo "1 0" >"build/test-logs/${names[$printed]}.done"; continue
  fi
  wait -n; running=$((running - 1))
done
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
