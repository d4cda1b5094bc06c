#!/usr/bin/env bash
# dev/gpu_all.sh OUTDIR [STAGE...]: everything a machine with an NVIDIA GPU should check and
# measure, in one command, every raw output written into OUTDIR:
#
#   env        env.txt        nvidia-smi -L and -q summary, driver, nvcc, the CPU, the commit
#   build      build.txt      train_cpu, train_gpu, build/gpu_check, build/instruction_check and
#                             build/gpu_check_cublas for this machine's GPU (GPU_ARCH from
#                             nvidia-smi), data from DATA_DIR
#   gpu        gpu_test.txt   test/test_gpu.sh: the tensor-core instructions against their
#                             definitions (build/instruction_check), every kernel and the model
#                             against the CPU with timings at GPT-2 124M's shapes, the bf16 path's
#                             and the device copy bandwidth (build/gpu_check), compute-sanitizer
#                             memcheck, racecheck, synccheck and initcheck, train_gpu against
#                             train_cpu in fp32 and bf16, resume
#   train      train_gpu.txt  ./train_gpu as a user runs it: d12, T=1024, B=8, 100 steps (bf16 on
#                             8.0+); then 10 steps of -p bf16 and of -p fp32 at the largest B that
#                             train_gpu computes fits, or that the training data fills if fewer
#   sass       sass.txt       the Hopper kernels' machine code: ptxas -v's registers and spills for
#                             the wgmma GEMM and flash attention's kernels (sm_90a), and the HGMMA
#                             instructions that cuobjdump --dump-sass finds in the GEMM and the
#                             wgmma flash forward (wgmma; HMMA would be mma.sync)
#   roofline   roofline.txt   build/gpu_check roofline: every kernel of a training step of GPT-2 124M
#                             (B=8, T=1024, bf16 and fp32) timed against its floor on an H100 SXM and
#                             on this GPU (dev/gpu/roofline.h), and the whole step
#   cublas     cublas.txt     build/gpu_check_cublas copy matmul matmul_bf16: cuBLAS (float32 and
#                             bf16) on the same matmul shapes as ours, timed in the same call; the
#                             bf16 products of GPT-2 124M at B=8 and B=64 (forward, dinp, dweight)
#                             on wgmma (128 and 256 wide tiles), mma.sync and cuBLAS, and their
#                             table (ours / cuBLAS)
#   kernels    kernels.txt    make kernels: every step of the kernel ladder (dev/kernels/) checked
#                             and timed, its table; and kernels.png, the table's bar chart
#   bench      bench_gpu.txt  make bench-gpu: train_cpu against train_gpu, d2..d12, this CPU named
#                             (its bar chart: dev/bench/plot.py bench-gpu on the table, where matplotlib is)
#   peers      peers.txt      make bench-gpu-peers: train_gpu beside llm.c's train_gpt2cu (LLMC_DIR
#                             or LLMC_BIN from the environment; without them its rows say so) and
#                             PyTorch, eager and compiled, at B=8 and B=64; its logs, table and chart
#                             in OUTDIR/peers/
#   test       test.txt       make test, offline (TEST_OFFLINE=1: what it would install is skipped)
#
# and summary.txt: one line per stage, its exit status and seconds. With GPU_ALL_PACK=1, the files
# end up packed in OUTDIR/gpu_all.tar.gz beside summary.txt (for a machine that returns only a
# few files: every stage together writes thirteen and the folder peers/). Stages run in this order
# (or the ones named), each under a time limit, and the whole under GPU_ALL_SECONDS (default 560,
# for a 10-minute call); a stage cut short says so in the summary, and can be run again on its
# own in a second call: `dev/gpu_all.sh OUT2 test`. Where there is no GPU it stops at once, with
# one line, before building or writing anything.
#
# The machine needs no network: give it the data as a folder (DATA_DIR, default shared/data when
# that exists: a copy of ../shared/data inside the checkout travels with it), and PYTHON (default:
# python3 or /usr/bin/python3, the first with numpy) with numpy and, for the PyTorch tests, torch.
set -u
for v in LLMC_DIR LLMC_BIN; do   # the peers stage's llm.c, given relative to where this was started
  [ -n "${!v:-}" ] && [[ ${!v} != /* ]] && export "$v=$PWD/${!v}"
done
cd "$(dirname "$0")/.."
usage="usage: dev/gpu_all.sh OUTDIR [env build sass gpu train roofline cublas kernels bench peers test]"
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
out=$1; shift
ALL_STAGES="env build sass gpu train roofline cublas kernels bench peers test"
stages=${*:-$ALL_STAGES}
for s in $stages; do
  [[ " $ALL_STAGES " == *" $s "* ]] || { echo "gpu_all: unknown stage '$s'; $usage" >&2; exit 2; }
done

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU [0-9]')
if [ "$gpus" -eq 0 ]; then
  echo "gpu_all: no NVIDIA GPU here (nvidia-smi is missing or lists none): nothing built or measured" >&2
  exit 1
fi
NVCC=${NVCC:-$(command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)}
[ -n "$NVCC" ] || { echo "gpu_all: nvcc not found (set NVCC=)" >&2; exit 1; }
export NVCC
if [ -z "${PYTHON:-}" ]; then  # the first Python that has numpy
  for PYTHON in python3 /usr/bin/python3; do "$PYTHON" -c 'import numpy' 2>/dev/null && break; done
fi
export PYTHON
if [ -z "${DATA_DIR:-}" ] && [ -d shared/data ]; then export DATA_DIR=shared/data; fi
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)

start_all=$(date +%s)
budget=${GPU_ALL_SECONDS:-560}
: >"$out/summary.txt"
# stage NAME FILE LIMIT COMMAND...: runs COMMAND with its output in OUTDIR/FILE, for at most
# LIMIT seconds or what is left of the budget (STAGE_SECONDS in COMMAND's environment)
stage() {
  local name=$1 file=$2 limit=$3; shift 3
  [[ " $stages " == *" $name "* ]] || return 0
  local left=$(( budget - ($(date +%s) - start_all) ))
  [ $left -lt $limit ] && limit=$left
  if [ $limit -le 5 ]; then
    echo "$name: not run, the time budget is spent (run it alone: dev/gpu_all.sh OUT2 $name)" | tee -a "$out/summary.txt"
    return 0
  fi
  local t0; t0=$(date +%s)
  echo "=== $name ($file, at most $limit s)"
  { echo "\$ $*"; echo "(commit $(git rev-parse --short HEAD 2>/dev/null), $(date -u '+%Y-%m-%d %H:%M:%S') UTC)"; } >"$out/$file"
  STAGE_SECONDS=$limit timeout -k 10 $limit bash -c "$*" >>"$out/$file" 2>&1
  local rc=$? secs=$(( $(date +%s) - t0 ))
  local what="exit $rc"
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && what="cut at the time limit ($limit s)"
  echo "$name: $what, $secs s ($file)" | tee -a "$out/summary.txt"
  tail -n 3 "$out/$file" | sed 's/^/    /'
}

env_report() {
  nvidia-smi -L; echo; nvidia-smi; echo
  nvidia-smi -q | grep -E "Product Name|Driver Version|CUDA Version|Persistence Mode|Power Limit" | head -20
  echo; "$NVCC" --version | tail -n 2; echo
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) threads"
  free -g | head -2
  echo "python: $PYTHON"; "$PYTHON" -c 'import numpy, torch; print("numpy", numpy.__version__, "torch", torch.__version__)'
  echo "commit: $(git log -1 --format='%h %s' 2>/dev/null)"
}
export -f env_report
train_report() {
  ./train_gpu || return 1
  local p b info ntok
  for p in bf16 fp32; do
    info=$(./train_gpu -p $p -x 0 -v 0 -s 0)
    b=$(sed -n 's/^largest batch .*: B=\([0-9]*\)$/\1/p' <<<"$info")
    echo; echo "--- ./train_gpu -p $p at the largest batch that fits: B=${b:-?}"
    [ -n "$b" ] && [ "$b" -gt 0 ] || return 1
    # and that the training data fills: B*T+1 tokens (T=1024)
    ntok=$(sed -n 's/^train: .* (\([0-9]*\) tokens.*/\1/p' <<<"$info")
    [ -n "$ntok" ] && [ $(( (ntok - 1) / 1024 )) -lt "$b" ] &&
      { b=$(( (ntok - 1) / 1024 )); echo "(the training data's $ntok tokens fill B=$b at most)"; }
    ./train_gpu -p $p -b "$b" -x 10 -v 0 -s 0 || return 1
  done
}
export -f train_report
sass_report() {
  local ptxas dump=${CUOBJDUMP:-$(dirname "$NVCC")/cuobjdump} k
  ptxas=$("$NVCC" -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Xptxas -v -Xcompiler -fopenmp -I. \
    -c dev/gpu/gpu_check.cu -o /dev/null 2>&1)
  for k in gemm_bf16_wgmma_kernel flash_attention_forward_wgmma_kernel flash_attention_forward_mma_kernel \
           flash_attention_backward_dkv_mma_kernel flash_attention_backward_dq_mma_kernel; do
    echo "--- ptxas -v (sm_90a): $k's registers and spills"
    grep -A 3 "entry function '_Z[0-9]*$k" <<<"$ptxas" | grep -v "^--"
  done
  for k in gemm_bf16_wgmma_kernel flash_attention_forward_wgmma_kernel; do
    echo; echo "--- $dump --dump-sass build/gpu_check: instructions of $k, by kind"
    "$dump" --dump-sass build/gpu_check |
      awk -v k="$k" '/Function : /{f = index($0, k) > 0} f && /HGMMA|HMMA|UTMALDG|SYNCS/ {
             match($0, /(HGMMA|HMMA|UTMALDG|SYNCS)[.A-Z0-9_]*/); n[substr($0, RSTART, RLENGTH)]++ }
           END { for (i in n) { print n[i], i; if (i ~ /^HGMMA/) hgmma = 1 }
                 if (!hgmma) print "(no HGMMA in it: not on wgmma)" }' | sort -k2
  done
}
export -f sass_report
stage env env.txt 20 env_report
stage build build.txt 180 'make -j"$(nproc)" train_cpu train_gpu build/gpu_check build/instruction_check build/gpu_check_cublas'
stage gpu gpu_test.txt 240 'bash test/test_gpu.sh'
stage train train_gpu.txt 150 train_report
stage sass sass.txt 90 sass_report
stage roofline roofline.txt 60 'build/gpu_check roofline'
stage cublas cublas.txt 120 'build/gpu_check_cublas copy matmul matmul_bf16'
stage kernels kernels.txt 150 'make -j"$(nproc)" kernels && { [ ! -f build/kernels/ladder.png ] || cp build/kernels/ladder.png "'"$out"'/kernels.png"; }'
stage bench bench_gpu.txt 150 'TEST_OFFLINE=1 make bench-gpu && cat doc/results/gpu_speedup.md'
# the benchmark's own budget inside the stage's, so that its table is printed before the stage ends
stage peers peers.txt 300 'TEST_OFFLINE=1 BENCH_SECONDS=$((STAGE_SECONDS - 20)) BENCH_OUT="'"$out"'/peers" make bench-gpu-peers'
stage test test.txt 300 'TEST_OFFLINE=1 make test'
echo "=== summary ($out/summary.txt)"
cat "$out/summary.txt"
if [ "${GPU_ALL_PACK:-0}" = 1 ]; then
  (cd "$out" && files=$(ls | grep -vx -e summary.txt -e gpu_all.tar.gz) && [ -n "$files" ] &&
    tar czf gpu_all.tar.gz $files && rm -rf $files && echo "packed: $out/gpu_all.tar.gz ($(echo $files))")
fi
! grep -qv ": exit 0," "$out/summary.txt"
