#!/usr/bin/env bash
# The whole train_gpu program without a GPU, in its other modes: build/emu/train_gpu (make
# train_gpu_emu) is train_gpu.cu with its kernels run on the CPU by the CUDA emulator
# (dev/emu/cuda_emu.h), under AddressSanitizer and UBSan (test_train_gpu_emu checks it against
# train_cpu). Run as a user runs it:
#   1. start-up: "no CUDA device" only when there is none (or CUDA_VISIBLE_DEVICES hides every
#      GPU); a driver older than the runtime, or another CUDA error, is a failure that names it
#      (the emulator plays each case: CUDA_EMU_DRIVER=none|nodevice|old|broken). One line on
#      stderr, exit 1, nothing on stdout. Under mpirun, with 2 emulated GPUs (CUDA_EMU_DEVICES):
#      2 ranks each given its own GPU by CUDA_VISIBLE_DEVICES, as a scheduler does, train; 2 ranks
#      given the same GPU, 2 ranks on a machine of one GPU, and 3 ranks on 2 GPUs stop with one
#      error line, a non-zero exit, and no hang;
#   2. a kernel that faults (CUDA_EMU_FAULT=NAME makes the emulator report an illegal address
#      asynchronously, as a GPU does): the run stops with one line naming the CUDA error and the
#      call that saw it; with GPU_DEBUG=1 the line names the kernel (at head size 64 the bf16
#      forward's flash attention is Hopper's wgmma kernel: the run names it);
#   3. divergence (a learning rate of 1e30) stops the run with one line at step 2, in fp32 and bf16;
#      precision: bf16 by default on the emulated H100; a bad -p (to train_gpu and to train_cpu)
#      and a head size flash attention is not built for are one-line errors (-p fp32 trains that
#      model);
#   4. schedules and races: a short run with validation and a sample, in fp32 and bf16, with the
#      warps interleaved, the cp.async copies landing and the blocks shared out to workers in other
#      ways (CUDA_EMU_SCHEDULE, CUDA_EMU_ASYNC, CUDA_EMU_WORKERS=1 and 3), and under the
#      shared-memory race detector (build/emu/train_gpu_race): every run must write the same bytes,
#      since no kernel's result may depend on the order of its warps or on which blocks run together.
set -u
. "$(dirname "$0")/lib.sh"
emu_train_gpu_setup
status=0

fresh_dir test_train_gpu_emu_modes
# expect_run NAME EXPECTED_TEXT PROGRAM ARGS...: it must exit 1 with exactly one line on stderr
# containing EXPECTED_TEXT
expect_run() {
  local name=$1 text=$2; shift 2
  "$@" >"$dir/$name.out" 2>"$dir/$name.err"
  local rc=$? lines; lines=$(wc -l <"$dir/$name.err")
  if [ $rc -eq 1 ] && [ "$lines" -eq 1 ] && grep -qF -- "$text" "$dir/$name.err"; then
    echo "ok   $name: $(cat "$dir/$name.err")"
  else
    echo "FAIL $name: expected exit 1 and one line with \"$text\"; got exit $rc, $lines lines:"
    head -5 "$dir/$name.err"; status=1
  fi
}
# expect NAME EXPECTED_TEXT [ENV=VALUE...]: the same for build/emu/train_gpu on a tiny run with
# these variables (a model of 1 layer, 2 heads of 16 channels, V=97, which runs every kind of
# kernel of a training step)
$PY dev/reference/gpt2_ref.py make-model --model "$dir/tiny.bin" --tokens "$dir/tiny_tokens.bin" --V 97 --maxT 16 \
  --L 1 --NH 2 --C 32 --ntokens 100 --seed 7 >/dev/null || { echo "FAIL: make-model"; exit 1; }
tiny=(-e "$dir/tiny.bin" -i "$dir/tiny_tokens.bin" -b 1 -t 8 -x 1 -v 0 -s 0)
expect() {
  local name=$1 text=$2; shift 2
  expect_run "$name" "$text" env "$@" build/emu/train_gpu "${tiny[@]}"
}
expect_quiet_stdout() {  # start-up failures come before anything is printed
  [ -s "$dir/$1.out" ] && { echo "FAIL $1: printed to stdout before failing:"; head -3 "$dir/$1.out"; status=1; }
}

echo "--- start-up"
expect no-driver "no CUDA device found (no NVIDIA driver is installed); use ./train_cpu instead" CUDA_EMU_DRIVER=none
expect no-gpu "no CUDA device found (the NVIDIA driver sees no GPU); use ./train_cpu instead" CUDA_EMU_DRIVER=nodevice
expect hidden-gpus 'no CUDA device found (the NVIDIA driver sees no GPU, or none that CUDA_VISIBLE_DEVICES="2" names)' \
  CUDA_EMU_DEVICES=2 CUDA_VISIBLE_DEVICES=2
expect old-driver "the NVIDIA driver supports CUDA up to 12.4, but train_gpu was built with CUDA 13.0: update the driver (CUDA 13 needs the 580 series or newer), or rebuild with a CUDA toolkit no newer than 12.4: NVCC=/path/to/nvcc make train_gpu (e.g. NVCC=/usr/local/cuda-12.4/bin/nvcc)" CUDA_EMU_DRIVER=old
expect broken-driver "CUDA cannot use the GPU: system has unsupported display driver / cuda driver combination (cudaErrorSystemDriverMismatch)" CUDA_EMU_DRIVER=broken
for name in no-driver no-gpu hidden-gpus old-driver broken-driver; do expect_quiet_stdout $name; done
for name in old-driver broken-driver; do
  grep -q "no CUDA device" "$dir/$name.err" && { echo "FAIL $name: a GPU that is there but unusable reported as no device"; status=1; }
done

echo "--- one GPU per process, under mpirun"
if ! command -v mpirun >/dev/null || ! ldd build/emu/train_gpu 2>/dev/null | grep -q libmpi; then
  echo "skipped: the runs under mpirun (no mpirun here, or build/emu/train_gpu was built without MPI)"
else
  $PY dev/reference/gpt2_ref.py make-model --model "$dir/gpus.bin" --tokens "$dir/gpus_tokens.bin" --V 97 --maxT 16 \
    --L 1 --NH 2 --C 32 --ntokens 100 --seed 5 >/dev/null || exit 1
  small=(build/emu/train_gpu -e "$dir/gpus.bin" -i "$dir/gpus_tokens.bin" -b 1 -t 8 -x 1 -v 0 -s 0)
  # each rank given its own GPU, as a scheduler does (mpirun's "-np 1 A : -np 1 B" starts rank 0
  # as A, rank 1 as B): each sees one GPU and takes it
  CUDA_EMU_DEVICES=2 MPI_TIMEOUT=60 mpi_run 1 env CUDA_VISIBLE_DEVICES=0 "${small[@]}" : \
    -np 1 env CUDA_VISIBLE_DEVICES=1 "${small[@]}" >"$dir/own-gpus.out" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && grep -q "^step    1/1 | loss .* x 2 processes" "$dir/own-gpus.out"; then
    echo "ok   own-gpus: 2 ranks, CUDA_VISIBLE_DEVICES=0 and 1, train"
  else
    echo "FAIL own-gpus: 2 ranks given CUDA_VISIBLE_DEVICES=0 and 1 should train; exit $rc:"; tail -5 "$dir/own-gpus.out"
    status=1
  fi
  # expect_mpi NAME TEXT ARGS...: mpirun ARGS (test/lib.sh: mpi_run) stops within 60 s with a
  # non-zero exit and exactly one error line, which contains TEXT (mpirun adds its own notice)
  expect_mpi() {
    local name=$1 text=$2 start=$SECONDS; shift 2
    MPI_TIMEOUT=60 mpi_run "$@" >"$dir/$name.out" 2>"$dir/$name.err"
    local rc=$? lines; lines=$(grep -c '^error: ' "$dir/$name.err")
    if [ $rc -eq 124 ]; then
      echo "FAIL $name: still running after 60 s (a hang)"; status=1
    elif [ $rc -ne 0 ] && [ "$lines" -eq 1 ] && grep '^error: ' "$dir/$name.err" | grep -qF -- "$text"; then
      echo "ok   $name: exit $rc in $((SECONDS - start)) s: $(grep '^error: ' "$dir/$name.err")"
    else
      echo "FAIL $name: expected a non-zero exit and one error line with \"$text\"; got exit $rc, $lines error lines:"
      cat "$dir/$name.err"; status=1
    fi
  }
  same_gpu="rank 1 of 2: ranks 0 and 1 both use the GPU at PCI bus id 0000:01:00.0 of their machine: give each process its own GPU"
  CUDA_EMU_DEVICES=2 expect_mpi same-visible-gpu "$same_gpu" 1 env CUDA_VISIBLE_DEVICES=0 "${small[@]}" : \
    -np 1 env CUDA_VISIBLE_DEVICES=0 "${small[@]}"
  CUDA_EMU_DEVICES=1 expect_mpi one-gpu-two-ranks "$same_gpu" 2 "${small[@]}"
  CUDA_EMU_DEVICES=2 expect_mpi three-ranks-two-gpus \
    "rank 2 of 3: this process is number 3 of those started on this machine, and sees 2 GPUs: start at most one process per GPU" \
    3 "${small[@]}"
fi

echo "--- a kernel that faults"
expect fault "an illegal memory access was encountered" CUDA_EMU_FAULT=layernorm_forward_kernel
grep -q "GPU_DEBUG=1" "$dir/fault.err" || { echo "FAIL fault: the line should say that GPU_DEBUG=1 names the kernel"; status=1; }
grep -q "layernorm_forward_kernel" "$dir/fault.err" && { echo "FAIL fault: without GPU_DEBUG the fault cannot be placed yet, but the line names a kernel"; status=1; }
expect fault-debug "kernel layernorm_forward_kernel (gpt2/gpu/layernorm.cuh:" CUDA_EMU_FAULT=layernorm_forward_kernel GPU_DEBUG=1
expect fault-debug-adamw "kernel adamw_kernel (gpt2/gpu/optimizer.cuh:" CUDA_EMU_FAULT=adamw_kernel GPU_DEBUG=1
expect fault-debug-wgmma "kernel gemm_bf16_wgmma_kernel (gpt2/gpu/matmul_wgmma.cuh:" CUDA_EMU_FAULT=gemm_bf16_wgmma_kernel GPU_DEBUG=1
expect fault-debug-flash "kernel flash_attention_backward_dq_mma_kernel (gpt2/gpu/flash_attention_mma.cuh:" CUDA_EMU_FAULT=flash_attention_backward_dq_mma_kernel GPU_DEBUG=1
# at head size 64 (one head of 64 channels) the forward runs on Hopper's wgmma, as on an H100
$PY dev/reference/gpt2_ref.py make-model --model "$dir/hs64.bin" --tokens "$dir/hs64_tokens.bin" --V 97 --maxT 16 --L 1 \
  --NH 1 --C 64 --ntokens 100 --seed 3 >/dev/null || exit 1
expect_run fault-debug-flash-wgmma "kernel flash_attention_forward_wgmma_kernel (gpt2/gpu/flash_attention_wgmma.cuh:" \
  env CUDA_EMU_FAULT=flash_attention_forward_wgmma_kernel GPU_DEBUG=1 build/emu/train_gpu -e "$dir/hs64.bin" \
  -i "$dir/hs64_tokens.bin" -b 1 -t 8 -x 1 -v 0 -s 0

echo "--- divergence"
# a learning rate of 1e30 makes step 2's loss NaN: the loss, the norm and the clip stay on the GPU
# during a step, and AdamW skips the update there; the run stops with one line, no NaN printed
for p in fp32 bf16; do
  expect_run diverges-$p "training diverged at step 2 " build/emu/train_gpu "${tiny[@]}" -p $p -x 4 -l 1e30
  grep -qi nan "$dir/diverges-$p.out" && { echo "FAIL diverges-$p: a NaN printed as progress"; status=1; }
done

echo "--- precision"
expect_run bad-precision "-p expects fp32 or bf16, got fp16" build/emu/train_gpu "${tiny[@]}" -p fp16
build_train_cpu
expect_run cpu-bad-precision "-p expects fp32 or bf16, got fp16" "$dir/train_cpu" "${tiny[@]}" -p fp16
# a head size flash attention is not built for (C=48 in one head): bf16 refuses it before -o is
# made; fp32 trains it
$PY dev/reference/gpt2_ref.py make-model --model "$dir/hs48.bin" --tokens "$dir/hs48_tokens.bin" --V 97 --maxT 16 --L 1 \
  --NH 1 --C 48 --ntokens 100 --seed 3 >/dev/null || exit 1
hs48=(-e "$dir/hs48.bin" -i "$dir/hs48_tokens.bin" -b 1 -t 8 -x 1 -v 0 -s 0)
expect_run head-size-48 "-p bf16: flash attention is built for head sizes 16, 32, 64 and 128, and this model's is 48" \
  build/emu/train_gpu "${hs48[@]}" -p bf16 -o "$dir/hs48_run"
[ -e "$dir/hs48_run" ] && { echo "FAIL head-size-48: the refused run left $dir/hs48_run behind"; status=1; }
if build/emu/train_gpu "${hs48[@]}" -p fp32 >"$dir/hs48_fp32.out" 2>&1 && grep -q "^step    1/1 | loss" "$dir/hs48_fp32.out"; then
  echo "ok   head-size-48 -p fp32 trains"
else
  echo "FAIL head-size-48 -p fp32 should train:"; tail -3 "$dir/hs48_fp32.out"; status=1
fi
if build/emu/train_gpu "${tiny[@]}" >"$dir/default.out" 2>&1 && grep -q "^precision bf16" "$dir/default.out"; then
  echo "ok   the default precision on compute capability 9.0 is bf16"
else
  echo "FAIL: the default run on the emulated H100 should say precision bf16:"; head -3 "$dir/default.out"; status=1
fi

echo "--- 4. the same run in several schedules, and under the race detector"
$PY dev/reference/gpt2_ref.py make-model --model "$dir/sched.bin" --tokens "$dir/sched_tokens.bin" --V 97 --maxT 32 \
  --L 2 --NH 2 --C 32 --ntokens 2000 --seed 5 >/dev/null || exit 1
sched=(-e "$dir/sched.bin" -i "$dir/sched_tokens.bin" -j "$dir/sched_tokens.bin" -b 2 -t 32 -x 3 -v 3 -s 3 -g 8)
for prec in fp32 bf16; do
  n=0
  for mode in "" "CUDA_EMU_SCHEDULE=reverse CUDA_EMU_WORKERS=1" "CUDA_EMU_SCHEDULE=ahead CUDA_EMU_ASYNC=issue CUDA_EMU_WORKERS=3" \
              "CUDA_EMU_SCHEDULE=random:3 CUDA_EMU_ASYNC=random:4" race; do
    n=$((n + 1)); out="$dir/sched_${prec}_$n"
    bin=build/emu/train_gpu; [ "$mode" = race ] && bin=build/emu/train_gpu_race && mode=""
    what="${mode:-the default schedule}"; [ "$bin" = build/emu/train_gpu_race ] && what="the race detector"
    if ! env $mode $bin "${sched[@]}" -p $prec -o "$out" >"$out.stdout" 2>&1; then
      echo "FAIL: -p $prec under $what:"; tail -8 "$out.stdout"; status=1; continue
    fi
    if [ $n -gt 1 ]; then
      for f in model_00000003.bin state_00000003.bin; do
        cmp -s "$dir/sched_${prec}_1/$f" "$out/$f" ||
          { echo "FAIL: -p $prec under $what wrote another $f than in the default schedule"; status=1; }
      done
      diff <(grep -v "ms\|wrote" "$dir/sched_${prec}_1.stdout") <(grep -v "ms\|wrote" "$out.stdout") >/dev/null ||
        { echo "FAIL: -p $prec under $what printed other losses or samples than in the default schedule"; status=1; }
    fi
    echo "ok   -p $prec under $what: $(grep '^step    3/3' "$out.stdout" | cut -d'|' -f1-2)"
  done
done

[ $status -eq 0 ] && echo "ok: the emulated train_gpu gives the same bytes in every schedule with no shared-memory race, and reports start-up, precision and kernel failures"
exit $status
