#!/usr/bin/env bash
# make bench-gpu-peers (dev/bench/bench_gpu_peers.sh) where it cannot run, and its table:
#   1. without a GPU (nvidia-smi failing, or listing none: a stand-in first on PATH, so that this
#      holds on a GPU machine too) make bench-gpu-peers prints one line, exits non-zero and builds
#      nothing: run in a copy of the Makefile and the script, the copy gains no file but the two
#      stamps that parsing the Makefile writes (build/flags, build/nvcc_flags)
#   2. the table (--table) from made-up runs in the formats train_gpu, llm.c's train_gpt2cu and
#      dev/bench/train_torch.py print: each median over the steps after the warm-up, tokens/s,
#      the ratio to train_gpu, the peak memory, the losses; a run out of memory, one cut at its
#      time limit and one not run each get a row that says so
# (train_torch.py's model against train_cpu's: test/test_vs_pytorch.sh, part 3.)
set -u
. "$(dirname "$0")/lib.sh"
fresh_dir bench_peers
status=0
bad() { echo "FAIL: $*"; status=1; }

# ---------- 1. no GPU ----------
# stand-ins first on PATH: nvidia-smi failing or listing none, and an nvcc that answers --version
# (the Makefile asks) and leaves a mark when asked to compile
printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver."\nexit 9\n' >"$dir/failing"
printf '#!/bin/sh\necho "No devices were found"\nexit 6\n' >"$dir/none"
printf '#!/bin/sh\n[ "$1" = --version ] && echo "Cuda compilation tools, release 13.0, V13.0.88" && exit 0\ntouch "$0.ran"; exit 1\n' >"$dir/nvcc"
chmod +x "$dir/failing" "$dir/none" "$dir/nvcc"
want="make bench-gpu-peers: no NVIDIA GPU here (nvidia-smi lists none): nothing built or run"
for smi in failing none; do
  copy=$dir/tree_$smi   # the sources, without build/ or data/
  mkdir -p "$copy/stand-in"
  cp -r Makefile ./*.c ./*.cu gpt2 dev "$copy/" || exit 1
  cp "$dir/$smi" "$copy/stand-in/nvidia-smi"; cp "$dir/nvcc" "$copy/stand-in/nvcc"
  (cd "$copy" && find . | sort) >"$dir/before_$smi"
  PATH=$PWD/$copy/stand-in:$PATH make -s -C "$copy" NVCC="$PWD/$copy/stand-in/nvcc" bench-gpu-peers >"$dir/$smi.out" 2>&1
  rc=$?
  # make's own line for the failed target ("make[1]: ..." when make test runs this under make)
  lines=$(grep -vE '^make(\[[0-9]+\])?: \*\*\* \[Makefile:[0-9]+: bench-gpu-peers\] Error 1$' "$dir/$smi.out")
  [ $rc -ne 0 ] || bad "nvidia-smi $smi: make bench-gpu-peers exited 0"
  [ "$lines" = "$want" ] || { bad "nvidia-smi $smi: make bench-gpu-peers did not print the one line '$want':"; cat "$dir/$smi.out"; }
  # what parsing the Makefile writes, and nothing else
  new=$(cd "$copy" && find . | sort | comm -13 "$OLDPWD/$dir/before_$smi" - | grep -vx -e ./build -e ./build/flags -e ./build/nvcc_flags)
  [ -z "$new" ] || bad "nvidia-smi $smi: make bench-gpu-peers wrote" $new
  [ $status -ne 0 ] || echo "ok: nvidia-smi $smi: exit $rc, '$lines', nothing written"
done

# ---------- 2. the table ----------
runs=$dir/runs
mkdir -p "$runs"
echo "model: d12 (GPT-2 124M) from random weights, T=1024, 9 steps (4 of warm-up), data/x.bin" >"$runs/settings.txt"
# train_gpu, B=8: 9 steps of 80 ms, then 50..54 after the warm-up: the median 52 ms, 157,538 tokens/s
{ echo "\$ ./train_gpu ..."; for s in 1 2 3 4 5 6 7 8 9; do
    printf 'step %4d/9 | loss %.6f | norm 1.0000 | lr 3.00e-04 | %.1f ms | 1 tok/s | MFU 1.0%% | ETA 0s | 8192 tok/step, 1 micro-step\n' \
      $s "$((12 - s)).5" "$([ $s -le 4 ] && echo 80 || echo $((45 + s)))"
  done; echo "average 55.0 ms per step, 1 tok/s"; } >"$runs/ours_b8.log"
printf '300\n300\n5000\n12588\n12000\n' >"$runs/ours_b8.mem"   # 12288 MiB over the 300 before: 12.0 GiB
# llm.c, B=8: 25.00, 25.10, 25.20, 25.30 after the warm-up (median 25.15 ms, 325,726 tokens/s)
{ echo "\$ train_gpt2cu -e d12 -t 1024 -x 8 -b 8 -r 0 -v 1000000 -m 1 -s 0"; echo "val loss 11.0"; for s in 1 2 3 4 5 6 7 8; do
    printf 'step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)| lr %.2e | %.2f ms | %.1f%% bf16 MFU | %.0f tok/s\n' \
      $s 8 11.25 0.5 2.0 -0.2 3e-4 "$([ $s -le 4 ] && echo 99 || echo "25.$(( (s - 5) * 10 ))")" 30.0 1
  done; } >"$runs/llmc_b8.log"
printf '300\n300\n6444\n' >"$runs/llmc_b8.mem"   # 6.0 GiB
# PyTorch, B=8: 30.40 and 30.60 after the warm-up (median 30.5 ms, 268,590 tokens/s), no memory samples
{ echo "torch 2.11.0 on NVIDIA H200: bf16 autocast, fused AdamW"; for s in 1 2 3 4 5 6; do
    printf 'step %4d/6 | loss 10.950000 | norm 1.0000 | lr 3.00e-04 | %s ms | 1 tok/s\n' $s "$([ $s -le 4 ] && echo 500.00 || echo "30.$(( s * 2 - 6 ))0")"
  done; } >"$runs/torch_b8.log"
: >"$runs/torch_b8.mem"
echo "not run: no torch 2.0+ with CUDA" >"$runs/torch_compile_b8.skip"
# B=64: llm.c out of memory (its cudaCheck's lines), train_gpu cut at its time limit
printf '$ train_gpt2cu -e d12 -t 1024 -x 8 -b 64 -r 0 -v 1000000 -m 1 -s 0\n[CUDA ERROR] at file llmc/cuda_utils.cuh:215:\nout of memory\n' >"$runs/llmc_b64.log"
printf '300\n300\n144000\n' >"$runs/llmc_b64.mem"
printf '$ ./train_gpu ...\nstep    1/9 | loss 11.000000 | norm 1.0000 | lr 3.00e-04 | 900.0 ms | 1 tok/s\n' >"$runs/ours_b64.log"
for f in ours_b8:0 llmc_b8:0 torch_b8:0 llmc_b64:1 ours_b64:124; do echo "${f#*:}" >"$runs/${f%:*}.rc"; done

TEST_OFFLINE=1 bash dev/bench/bench_gpu_peers.sh --table "$runs" >"$dir/table.out" 2>&1 ||
  bad "--table exited non-zero"
expect=(
  "| train_gpu -p bf16 | 8 | 157,538 | 52.0 | 1.00x | 12.0 GiB | 11.50 -> 3.50 |"
  "| llm.c train_gpt2cu -r 0 | 8 | 325,726 | 25.1 | 2.07x | 6.0 GiB | 11.25 -> 11.25 |"
  "| PyTorch 2.11.0 eager | 8 | 268,590 | 30.5 | 1.70x | - | 10.95 -> 10.95 |"
  "| PyTorch 2.11.0 torch.compile | 8 | not run: no torch 2.0+ with CUDA | - | - | - | - |"
  "| train_gpu -p bf16 | 64 | failed: cut at its time limit (ours_b64.log) | - | - | - | - |"
  "| llm.c train_gpt2cu -r 0 | 64 | failed: out of memory (exit 1, llmc_b64.log) | - | - | 140.3 GiB | - |"
)
for row in "${expect[@]}"; do
  grep -qxF -- "$row" "$dir/table.out" || bad "the table has no row '$row'"
done
rows=$(grep -cE '^\| .* \| [0-9]+ \| ' "$dir/table.out")
[ "$rows" = ${#expect[@]} ] || bad "the table has $rows rows, not ${#expect[@]}"
[ $status -eq 0 ] || { echo "the table printed:"; cat "$dir/table.out"; }
tail -n $(( ${#expect[@]} + 3 )) "$dir/table.out" | head -n 1 | grep -q '^| trainer | B | tokens/s |' &&
  tail -n 1 "$dir/table.out" | grep -q '^(the table and the settings: ' || bad "the table is not printed last"

[ $status -eq 0 ] && echo "PASS: make bench-gpu-peers stops in one line without a GPU, and its table reads the three trainers' logs"
exit $status
