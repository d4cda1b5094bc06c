#!/usr/bin/env bash
# Runs every test/test_*.sh and counts the results. A test exits 0 when it passes, 77 when it
# cannot run on this machine (skipped, with the reason on its last line), anything else when it fails.
# Usage: test/run.sh [PATTERN]  (runs only the tests whose name contains PATTERN)
cd "$(dirname "$0")/.."
pass=0; fail=0; skip=0; failed=()
mkdir -p build/test-logs
for t in test/test_*.sh; do
  name=$(basename "$t" .sh)
  [ -n "${1:-}" ] && [[ "$name" != *"$1"* ]] && continue
  log="build/test-logs/$name.log"
  start=$(date +%s)
  bash "$t" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then
    pass=$((pass + 1)); echo "PASS  $name (${secs}s)"
  elif [ $rc -eq 77 ]; then
    skip=$((skip + 1)); echo "SKIP  $name: $(tail -n 1 "$log")"
  else
    fail=$((fail + 1)); failed+=("$name"); echo "FAIL  $name (exit $rc, ${secs}s); last lines of $log:"
    tail -n 15 "$log" | sed 's/^/      /'
  fi
done
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
