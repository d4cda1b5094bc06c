#!/usr/bin/env bash
# The CUDA emulator's speed (dev/emu/cuda_emu.h): the emulated programs and kernel checks that the
# tests run, timed in one or more columns side by side, one workload at a time in each column, so
# that the machine's noise falls on all of them alike.
#   bash dev/bench/bench_emu.sh [COLUMN...]     (default: this checkout; make bench-emu)
# A column is a checkout, DIR, or a checkout with settings, DIR,VAR=VALUE[,VAR=VALUE...]: give an
# older checkout first to compare emulators (its programs are built there by its own Makefile; where
# the first and last columns are two checkouts, a last column gives the first's seconds over the
# last's), or one checkout in several modes, e.g.
#   bash dev/bench/bench_emu.sh .,CUDA_EMU_WORKERS=1 . .,CUDA_EMU_SCHEDULE=random:1,CUDA_EMU_ASYNC=random:1
# BENCH_EMU_BUILD=1 also times, per checkout, the build of every program timed here from nothing
# (its build/emu is removed first), with make -j as many jobs as cores.
# Workloads (seconds of wall time):
#   train_gpu fp32 / bf16   build/emu/train_gpu (AddressSanitizer, UBSan) on test/train_gpu_checks.sh's
#                           model and flags: 6 steps in fp32, 20 in bf16
#   train_gpu_race bf16     the race detector's build, the same 20 steps
#   gpu_check               build/emu/gpu_check --quick: every kernel check
#   gpu_check_race          build/emu/gpu_check_race --quick: the same under the race detector
#   kernels-emu             dev/kernels/run.sh emu: the ladder, each step in two orders and raced
#                           (the median of 5 runs in each column, the columns in turn)
set -u
cd "$(dirname "$0")/../.."
here=$(pwd)
[ $# -gt 0 ] || set -- "$here"
dirs=() envs=() labels=()
for col in "$@"; do
  d=${col%%,*}
  [ "$d" = "$col" ] && e="" || e=${col#*,}
  d=$(cd "$d" 2>/dev/null && pwd) || { echo "bench_emu: no checkout at ${col%%,*}" >&2; exit 2; }
  dirs+=("$d"); envs+=("$e"); labels+=("$(basename "$d")${e:+ $e}")
done
PY=${PYTHON:-/usr/bin/python3}
work=$here/build/bench_emu
rm -rf "$work"; mkdir -p "$work"
ref="$PY $here/dev/reference/gpt2_ref.py"
$ref make-model --model "$work/model.bin" --tokens "$work/train.bin" --V 97 --maxT 32 --L 2 --NH 2 --C 32 \
  --ntokens 200 --seed 5 >/dev/null || exit 1
$ref make-tokens --out "$work/val.bin" --V 97 --n 200 --seed 6 >/dev/null || exit 1
$ref make-tokenizer --out "$work/tok.bin" >/dev/null || exit 1

steps=$(cd dev/kernels && ls [0-9][0-9]_*.cu | sed 's/\.cu$//')
programs="build/emu/train_gpu build/emu/train_gpu_race build/emu/gpu_check build/emu/gpu_check_race
          $(for s in $steps; do echo build/emu/kernels/$s build/emu/kernels/${s}_race; done)"
declare -A built
for d in "${dirs[@]}"; do
  [ -n "${built[$d]:-}" ] && continue
  built[$d]=1
  if [ "${BENCH_EMU_BUILD:-0}" = 1 ]; then
    rm -rf "$d/build/emu"
    start=$(date +%s.%N)
  fi
  (cd "$d" && make -s -j"$(nproc)" $programs) >"$work/build.log" 2>&1 ||
    { echo "FAIL: the emulator's programs do not build in $d"; tail -5 "$work/build.log"; exit 1; }
  [ "${BENCH_EMU_BUILD:-0}" = 1 ] && printf 'build of the emulated programs in %s: %.1f s\n' "$d" \
    "$(echo "$(date +%s.%N) - $start" | bc)"
done

common=(-i "$work/train.bin" -j "$work/val.bin" -e "$work/model.bin" -k "$work/tok.bin" -b 3 -t 29
        -R 1 -S 11 -l 3e-3 -u 2 -q 0.1 -c 0.1 -v 3 -m 2 -s 3 -g 5 -n 3)
names=("train_gpu fp32" "train_gpu bf16" "train_gpu_race bf16" "gpu_check" "gpu_check_race" "kernels-emu")
workload() {  # N OUT: runs workload N in the current directory
  case $1 in
  0) build/emu/train_gpu "${common[@]}" -o "$2" -x 6 -p fp32 ;;
  1) build/emu/train_gpu "${common[@]}" -o "$2" -x 20 -p bf16 ;;
  2) build/emu/train_gpu_race "${common[@]}" -o "$2" -x 20 -p bf16 ;;
  3) build/emu/gpu_check --quick ;;
  4) build/emu/gpu_check_race --quick ;;
  5) bash dev/kernels/run.sh emu $steps ;;
  esac
}
export ASAN_OPTIONS=detect_leaks=0 OMP_WAIT_POLICY=passive
unset CUDA_EMU_SCHEDULE CUDA_EMU_ASYNC CUDA_EMU_WORKERS CUDA_VISIBLE_DEVICES
printf '%-20s' workload; for l in "${labels[@]}"; do printf ' | %s' "$l"; done
ratio=0  # the first column's seconds over the last's: two emulators, not two modes of one
[ ${#dirs[@]} -gt 1 ] && [ "${dirs[0]}" != "${dirs[-1]}" ] && ratio=1
[ $ratio = 1 ] && printf ' | ratio'
echo
# median SECONDS...: the middle of an odd number of times
median() { printf '%s\n' "$@" | sort -n | sed -n "$((($# + 1) / 2))p"; }
for n in "${!names[@]}"; do
  printf '%-20s' "${names[$n]}"
  # The ladder's run is under a second, where the machine's noise is a large part: it runs 5 times
  # in each column, the columns in turn, and its median counts.
  reps=1; [ "${names[$n]}" = kernels-emu ] && reps=5
  times=() fail=()
  for r in $(seq "$reps"); do
    for i in "${!dirs[@]}"; do
      out="$work/run_${n}_$i"
      start=$(date +%s.%N)
      (cd "${dirs[$i]}" && env ${envs[$i]//,/ } bash -c "$(declare -p common steps); $(declare -f workload); workload $n $out.dir") \
        >"$out.log" 2>&1
      rc=$?
      times[$i]="${times[$i]:-} $(echo "$(date +%s.%N) - $start" | bc)"
      [ $rc -eq 0 ] || fail[$i]=$rc
    done
  done
  secs=()
  for i in "${!dirs[@]}"; do
    if [ -n "${fail[$i]:-}" ]; then s="fail(${fail[$i]})"; else s=$(median ${times[$i]}); fi
    secs+=("$s")
    [[ "$s" == fail* ]] && printf ' | %s' "$s" || printf ' | %.2f' "$s"
  done
  if [ $ratio = 1 ] && [[ "${secs[0]}" != fail* ]] && [[ "${secs[-1]}" != fail* ]]; then
    printf ' | %.1fx' "$(echo "${secs[0]} / ${secs[-1]}" | bc -l)"
  fi
  echo
done
