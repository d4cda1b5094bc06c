#!/usr/bin/env bash
# make bench-gpu-peers: ./train_gpu's training speed beside llm.c's train_gpt2cu and a PyTorch GPT-2
# (dev/bench/train_torch.py: eager, and under torch.compile where that works), on one GPU: GPT-2 124M
# (d12) from random weights, the same token file, T=1024, B=8 and B=64, bf16 products over float32
# master weights, AdamW. doc/gpu.md ("Side by side with llm.c and PyTorch") gives each peer's flags
# and why they are fair.
#
#   tokens/s: B*T over the median of a run's own step times, the WARMUP first steps left out.
#   peak memory: nvidia-smi's memory.used of the GPU, polled every 0.2 s during the run, less its
#   value before the run (the process's memory and its CUDA context).
#   Out (BENCH_OUT, default build/bench_gpu_peers): each run's output NAME_bB.log, exit status .rc,
#   memory samples .mem (or .skip: why it did not run), the table peers.md (printed last), its
#   chart peers.png. Exit status 1 when a run that was tried failed.
#
#   LLMC_DIR=/path/to/llm.c make bench-gpu-peers   llm.c built from that checkout, in a copy
#   LLMC_BIN=/path/to/train_gpt2cu ...             or a binary built before (--build-llmc)
#   knobs: BATCHES="8 64" T=1024 STEPS=25 WARMUP=5 LLMC_RECOMPUTE=0 TORCH_COMPILE=1
#          TORCH_PYTHON (default: the first Python whose torch sees a GPU) BENCH_SECONDS=270
#   bash dev/bench/bench_gpu_peers.sh --build-llmc   only build llm.c (LLMC_DIR; LLMC_ARCH=90 without a GPU)
#   bash dev/bench/bench_gpu_peers.sh --table DIR    only the table, from the runs' files in DIR
set -uo pipefail
caller=$PWD
cd "$(dirname "$0")/../.."
here() { case $1 in /*|'') echo "$1" ;; *) echo "$caller/$1" ;; esac; }   # a path the caller gave
BATCHES=${BATCHES:-8 64}
T=${T:-1024}
STEPS=${STEPS:-25}
WARMUP=${WARMUP:-5}
LLMC_RECOMPUTE=${LLMC_RECOMPUTE:-0}
TORCH_COMPILE=${TORCH_COMPILE:-1}
budget=${BENCH_SECONDS:-270}
out=$(here "${BENCH_OUT:-}"); out=${out:-build/bench_gpu_peers}
LLMC_DIR=$(here "${LLMC_DIR:-}")
LLMC_BIN=$(here "${LLMC_BIN:-}")
llmc_build=build/bench_gpu_peers_llmc   # llm.c's copy and binary, never in the user's checkout
TRAINERS="ours llmc torch torch_compile"
start=$SECONDS

# ---------- the table, from the runs' files ----------

# step times (ms) after the warm-up, from the progress lines all three print: "step S/N | ... | X ms |"
timed_ms() {
  sed -nE 's/^step +([0-9]+)\/[0-9]+ \|.*\| ([0-9.]+) ms \|.*/\1 \2/p' "$1" | awk -v w="$WARMUP" '$1 > w { print $2 }'
}
median() {
  sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# the losses of the first and the last step: "10.99 -> 7.51"
losses() {
  sed -nE 's/^step +[0-9]+\/[0-9]+ \| loss ([-0-9.naif]+).*/\1/p' "$1" | sed -n '1p;$p' |
    awk '{ v[NR] = $1 } END { if (NR) printf "%.2f -> %.2f", v[1], v[NR] }'
}
# peak memory in GiB: the largest sample less the first line (the value before the run)
peak_gib() {
  [ -s "$1" ] && awk 'NR == 1 { base = $1 } NR > 1 && $1 ~ /^[0-9]+$/ && $1 > peak { peak = $1 }
    END { if (peak) printf "%.1f GiB", (peak - base) / 1024 }' "$1"
}
# why a run has no figures; empty when it has them
failure() {
  local base=$1 rc
  if [ -f "$base.skip" ]; then cat "$base.skip"; return; fi
  [ -f "$base.rc" ] || { echo "not run"; return; }
  rc=$(cat "$base.rc")
  case $rc in
    0) timed_ms "$base.log" | median >/dev/null || echo "failed: no step after the $WARMUP of warm-up ($(basename "$base").log)" ;;
    124|137) echo "failed: cut at its time limit ($(basename "$base").log)" ;;
    *) if grep -qi 'out of memory' "$base.log"; then echo "failed: out of memory (exit $rc, $(basename "$base").log)"
       else echo "failed: exit $rc, $(tail -n 1 "$base.log" | tr -d '|' | cut -c1-80) ($(basename "$base").log)"; fi ;;
  esac
}
label() {  # the trainer's name in the table, with what its log says of its version
  local version
  case $1 in
    ours) echo "train_gpu -p bf16" ;;
    llmc) version=$(sed -n 's/^llm.c commit: \([0-9a-f]*\)$/ \1/p' "$2/settings.txt" 2>/dev/null)
          echo "llm.c$version train_gpt2cu$(sed -n '1s/.* \(-r [0-9]\) .*/ \1/p' "$2"/llmc_b*.log 2>/dev/null | head -n 1)" ;;
    torch*) version=$(sed -n 's/^torch \([^ ]*\) on .*/ \1/p' "$2"/torch*_b*.log 2>/dev/null | head -n 1)
            [ "$1" = torch ] && echo "PyTorch$version eager" || echo "PyTorch$version torch.compile" ;;
  esac
}

table() {  # DIR: the markdown table of the runs in DIR
  local dir=$1 b name base ms tps ours_tps fail mem
  # T and the warm-up of the runs, as settings.txt records them
  T=$(sed -nE 's/.* T=([0-9]+),.*/\1/p' "$dir/settings.txt" 2>/dev/null | grep . || echo "$T")
  WARMUP=$(sed -nE 's/.*steps \(([0-9]+) of warm-up\).*/\1/p' "$dir/settings.txt" 2>/dev/null | grep . || echo "$WARMUP")
  local batches; batches=$(ls "$dir" | sed -nE 's/^[a-z_]+_b([0-9]+)\.(rc|skip)$/\1/p' | sort -un)
  echo "| trainer | B | tokens/s | ms/step | vs train_gpu | peak GPU memory | loss, first -> last step |"
  echo "|---|---:|---:|---:|---:|---:|---|"
  for b in $batches; do
    ours_tps=""
    for name in $TRAINERS; do
      base=$dir/${name}_b$b
      [ -f "$base.rc" ] || [ -f "$base.skip" ] || continue
      fail=$(failure "$base")
      if [ -n "$fail" ]; then
        mem=$(peak_gib "$base.mem")
        echo "| $(label $name "$dir") | $b | $fail | - | - | ${mem:--} | - |"
        continue
      fi
      ms=$(timed_ms "$base.log" | median)
      tps=$(awk -v b="$b" -v t="$T" -v ms="$ms" 'BEGIN { printf "%.0f", b * t / ms * 1e3 }')
      [ "$name" = ours ] && ours_tps=$tps
      awk -v l="$(label $name "$dir")" -v b="$b" -v ms="$ms" -v tps="$tps" -v o="$ours_tps" \
          -v mem="$(peak_gib "$base.mem")" -v loss="$(losses "$base.log")" 'BEGIN {
        for (s = tps; length(s) > 3; s = substr(s, 1, length(s) - 3)) r = "," substr(s, length(s) - 2) r
        printf "| %s | %d | %s | %.1f | %s | %s | %s |\n", l, b, s r, ms, o ? sprintf("%.2fx", tps / o) : "-", mem ? mem : "-", loss }'
    done
  done
}

summary() {  # DIR: peers.md (the settings, the machine, the table), the chart, the table printed
  local dir=$1
  {
    echo "# train_gpu beside llm.c and PyTorch"
    echo
    echo "Measured by \`make bench-gpu-peers\` (dev/bench/bench_gpu_peers.sh); doc/gpu.md says what each runs."
    cat "$dir/settings.txt" 2>/dev/null | sed 's/^/- /'
    echo "- tokens/s: B x T over the median step time after the warm-up; peak GPU memory: nvidia-smi's"
    echo "  memory.used polled every 0.2 s during the run, less its value before (the process and its CUDA context)"
    echo
    table "$dir"
  } >"$dir/peers.md"
  if bash dev/bench/setup_plot.sh >/dev/null 2>&1; then
    "${PYTHON:-/usr/bin/python3}" dev/bench/plot.py bench-gpu-peers "$dir/peers.png" "$dir/peers.md" ||
      echo "bench-gpu-peers: no chart (the table is in $dir/peers.md)"
  else
    echo "bench-gpu-peers: no chart, no matplotlib for ${PYTHON:-/usr/bin/python3} (the table is in $dir/peers.md)"
  fi
  echo
  sed -n '/^| trainer/,$p' "$dir/peers.md"
  echo "(the table and the settings: $dir/peers.md)"
}

if [ "${1:-}" = --table ]; then
  dir=$(here "${2:-}")
  [ -d "$dir" ] || { echo "bench-gpu-peers: --table needs the folder of a run's files" >&2; exit 2; }
  summary "$dir"
  exit 0
fi

# ---------- llm.c: a copy of the checkout, patched for CUDA 13 where needed, built ----------

NVCC=${NVCC:-$(command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)}
# build_llmc ARCH: $llmc_build/train_gpt2cu from LLMC_DIR, its output in $llmc_build.log
build_llmc() {
  local cuda release ldflags
  [ -n "$NVCC" ] || { echo "nvcc not found (set NVCC=)"; return 1; }
  rm -rf "$llmc_build" && mkdir -p "$llmc_build" &&
    cp -r "$LLMC_DIR/train_gpt2.cu" "$LLMC_DIR/llmc" "$LLMC_DIR/Makefile" "$llmc_build/" || return 1
  release=$("$NVCC" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
  # CUDA 13 dropped cudaMemAdvise's int device argument for a cudaMemLocation (llm.c's fallback to
  # managed memory, taken only when cudaMalloc fails)
  if [ "${release:-0}" -ge 13 ]; then
    sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
      "$llmc_build/llmc/cuda_utils.cuh"
  fi
  # NVML only where the toolkit has nvml.h (llm.c calls it only then); its library from the stubs
  cuda=$(dirname "$(dirname "$NVCC")")
  ldflags="-lcublas -lcublasLt"
  [ -f "$cuda/include/nvml.h" ] && ldflags="$ldflags -L$cuda/lib64/stubs -lnvidia-ml"
  make -C "$llmc_build" train_gpt2cu NVCC="$NVCC" GPU_COMPUTE_CAPABILITY="$1" USE_CUDNN=0 NO_MULTI_GPU=1 \
    NO_USE_MPI=1 NVCC_LDFLAGS="$ldflags" >"$llmc_build.log" 2>&1 || { tail -n 3 "$llmc_build.log"; return 1; }
}
llmc_checkout_ok() {
  [ -n "${LLMC_DIR:-}" ] && [ -f "$LLMC_DIR/train_gpt2.cu" ] && [ -d "$LLMC_DIR/llmc" ]
}

if [ "${1:-}" = --build-llmc ]; then
  llmc_checkout_ok || { echo "bench-gpu-peers: LLMC_DIR must be a checkout of llm.c (train_gpt2.cu, llmc/)" >&2; exit 2; }
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d .)
  build_llmc "${arch:-${LLMC_ARCH:-90}}" || { echo "bench-gpu-peers: llm.c did not build ($llmc_build.log)" >&2; exit 1; }
  echo "built $llmc_build/train_gpt2cu for compute capability ${arch:-${LLMC_ARCH:-90}}: give it as LLMC_BIN"
  exit 0
fi

# ---------- the benchmark ----------

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU [0-9]')
if [ "$gpus" -eq 0 ]; then
  echo "make bench-gpu-peers: no NVIDIA GPU here (nvidia-smi lists none): nothing built or run"
  exit 1
fi
mkdir -p "$out" || exit 1
for name in $TRAINERS; do rm -f "$out/${name}"_b*.{log,rc,mem,skip}; done   # an earlier run's, only
rm -f "$out"/{build_train_gpu.log,settings.txt,peers.md,peers.png}
gpu=${CUDA_VISIBLE_DEVICES:-0}; gpu=${gpu%%,*}   # nvidia-smi -i takes an index or a UUID
skip() {  # NAME REASON: every B of trainer NAME not run, for REASON
  local b; for b in $BATCHES; do echo "not run: $2" >"$out/${1}_b$b.skip"; done
}
elapsed() { echo "$((SECONDS - start)) s of $budget"; }

# what runs: ours, llm.c, PyTorch, each missing one said in one line
llmc=""
if [ -n "${LLMC_BIN:-}" ]; then
  [ -x "$LLMC_BIN" ] && llmc=$LLMC_BIN ||
    { echo "llm.c: LLMC_BIN=$LLMC_BIN is not an executable file: its rows are left out"; skip llmc "LLMC_BIN is not executable"; }
elif llmc_checkout_ok; then
  llmc=build
else
  echo "llm.c: ${LLMC_DIR:+LLMC_DIR=$LLMC_DIR is not a checkout of llm.c (no train_gpt2.cu and llmc/); }its rows are left out: give LLMC_DIR=/path/to/llm.c (a clone of karpathy/llm.c) or LLMC_BIN=/path/to/train_gpt2cu"
  skip llmc "no llm.c (LLMC_DIR or LLMC_BIN)"
fi
torch_ok='import sys, torch, torch.nn.functional as F
sys.exit(0 if torch.cuda.is_available() and hasattr(F, "scaled_dot_product_attention") else 1)'
if [ -z "${TORCH_PYTHON:-}" ]; then
  for TORCH_PYTHON in ${PYTHON:-} python3 /usr/bin/python3; do "$TORCH_PYTHON" -c "$torch_ok" 2>/dev/null && break; done
fi
compile_ok='import torch; print(torch.compile(lambda x: x * 2)(torch.ones(8, device="cuda")).sum().item())'
if "$TORCH_PYTHON" -c "$torch_ok" 2>/dev/null; then
  if [ "$TORCH_COMPILE" != 1 ]; then skip torch_compile "TORCH_COMPILE=$TORCH_COMPILE"
  elif ! why=$(timeout 120 "$TORCH_PYTHON" -c "$compile_ok" 2>&1); then   # a compiler, Triton, ...
    why=$(tail -n 1 <<<"$why" | cut -c1-100)
    echo "PyTorch: torch.compile does not work here ($why): its rows are left out"
    skip torch_compile "torch.compile does not work here ($why)"
  fi
else
  echo "PyTorch: no Python here has torch 2.0 or newer that sees the GPU (tried ${TORCH_PYTHON}): its rows are left out; give TORCH_PYTHON=/path/to/python with torch for CUDA"
  skip torch "no torch 2.0+ with CUDA"; skip torch_compile "no torch 2.0+ with CUDA"
fi

# the data, then the builds
echo "building: make data train_gpu"
make -s data >"$out/build_train_gpu.log" 2>&1 ||
  { echo "bench-gpu-peers: make data failed ($out/build_train_gpu.log; offline, give DATA_DIR=)"; exit 1; }
ours=1
make -s train_gpu >>"$out/build_train_gpu.log" 2>&1 ||
  { ours=0; echo "train_gpu did not build ($out/build_train_gpu.log)"; skip ours "make train_gpu failed (build_train_gpu.log)"; }
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i "$gpu" 2>/dev/null | head -n 1 | tr -d .)
if [ "$llmc" = build ]; then
  echo "building: llm.c's train_gpt2cu from $LLMC_DIR in $llmc_build (compute capability $cc)"
  if build_llmc "$cc"; then llmc=$llmc_build/train_gpt2cu
  else llmc=""; echo "llm.c did not build ($llmc_build.log)"; skip llmc "llm.c did not build ($llmc_build.log)"; fi
fi
echo "builds done at $(elapsed)"

{
  echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader -i "$gpu" 2>/dev/null), nvcc $("$NVCC" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\),.*/\1/p')"
  echo "date: $(date -u '+%Y-%m-%d %H:%M') UTC, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  [ -n "$llmc" ] && [ -n "${LLMC_DIR:-}" ] && echo "llm.c commit: $(git -C "$LLMC_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "model: d12 (GPT-2 124M) from random weights, T=$T, $STEPS steps ($WARMUP of warm-up), data/tinyshakespeare_train.bin"
} >"$out/settings.txt"

# run_row NAME B LIMIT CMD...: CMD for at most LIMIT seconds (or what the budget has left), its
# output in NAME_bB.log, its exit status in .rc, the GPU's memory samples in .mem
mem_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "$gpu" 2>/dev/null | head -n 1; }
run_row() {
  local name=$1 b=$2 limit=$3; shift 3
  local base=$out/${name}_b$b left=$((budget - (SECONDS - start))) t0=$SECONDS poll
  if [ "$left" -lt 30 ]; then
    echo "not run: the time budget was spent (BENCH_SECONDS=$budget)" >"$base.skip"
    echo "$name B=$b: not run, the time budget is spent"; return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  mem_used >"$base.mem"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "$gpu" -lms 200 >>"$base.mem" 2>/dev/null &
  poll=$!
  { echo "\$ $*"; timeout -k 10 "$limit" "$@"; } >"$base.log" 2>&1
  echo $? >"$base.rc"
  kill "$poll" 2>/dev/null; wait "$poll" 2>/dev/null
  local fail; fail=$(failure "$base")
  echo "$name B=$b: ${fail:-$(timed_ms "$base.log" | median) ms a step}, $((SECONDS - t0)) s (at $(elapsed))"
}

data=data/tinyshakespeare_train.bin
common="-e d12 -t $T -x $STEPS -l 3e-4 -c 0.1 -i $data"
for b in $BATCHES; do
  [ $ours = 1 ] && run_row ours "$b" 120 ./train_gpu $common -b "$b" -p bf16 -v 0 -s 0
  # validation on the training file, at step 0 and after the last only (untimed): the validation
  # file's 32,768 tokens are fewer than B=64 needs, and -v 0 would divide by zero
  [ -n "$llmc" ] && run_row llmc "$b" 120 "$llmc" $common -b "$b" -r "$LLMC_RECOMPUTE" -v 1000000 -m 1 -s 0 -j $data
  [ ! -f "$out/torch_b$b.skip" ] && run_row torch "$b" 120 "$TORCH_PYTHON" dev/bench/train_torch.py $common -b "$b"
done
for b in $BATCHES; do   # last: compiling takes a minute or more
  [ ! -f "$out/torch_compile_b$b.skip" ] && run_row torch_compile "$b" 240 "$TORCH_PYTHON" dev/bench/train_torch.py $common -b "$b" --compile
done

summary "$out"
echo "done at $(elapsed)"
for name in $TRAINERS; do
  for b in $BATCHES; do
    [ -f "$out/${name}_b$b.rc" ] && [ -n "$(failure "$out/${name}_b$b")" ] && exit 1
  done
done
exit 0
