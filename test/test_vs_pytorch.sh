#!/usr/bin/env bash
# train_cpu.c against the PyTorch reference (dev/gpt2_ref.py), on two small random models:
# logits, loss, every parameter gradient, the gradient norm, the losses of 10 AdamW steps and the
# parameters after them (test/ref_check.c holds the tolerances; doc/correctness.md explains them).
#   A: L=2 NH=4 C=32 V=97 (Vp=128), B=3 T=5: B*T=15 is not a multiple of 8; weight decay 0.1,
#      max_norm 1 (the gradient is clipped at every step)
#   B: L=3 NH=2 C=48 V=211 (Vp=256), B=2 T=16; no weight decay, max_norm 3 (clipped at the first
#      step only, so both sides of the clipping condition run)
set -u
cd "$(dirname "$0")/.."
CC=${CC:-gcc}
CFLAGS=${CFLAGS:--O2 -fopenmp}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}   # see test_train_resume.sh
PY=${PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
  echo "skipped: $PY cannot import torch and numpy (bash test/setup.sh installs python3-torch)"
  exit 77
fi
dir=build/vs_pytorch
mkdir -p "$dir"
$CC $CFLAGS -o build/ref_check test/ref_check.c -lm || { echo "FAIL: ref_check does not build"; exit 1; }

status=0
check() {  # name, make-model args, reference args
  local name=$1 model_args=$2 ref_args=$3
  echo "== config $name"
  "$PY" dev/gpt2_ref.py make-model --model "$dir/$name.bin" --tokens "$dir/${name}_tok.bin" \
    $model_args || return 1
  "$PY" dev/gpt2_ref.py reference --model "$dir/$name.bin" --tokens "$dir/${name}_tok.bin" \
    --out "$dir/$name.dump" --steps 10 $ref_args || return 1
  ./build/ref_check "$dir/$name.bin" "$dir/${name}_tok.bin" "$dir/$name.dump"
}
check A "--V 97 --Vp 128 --maxT 32 --L 2 --NH 4 --C 32 --seed 1" \
        "--B 3 --T 5 --lr 1e-3 --wd 0.1 --max_norm 1.0" || status=1
check B "--V 211 --Vp 256 --maxT 64 --L 3 --NH 2 --C 48 --seed 2" \
        "--B 2 --T 16 --lr 1e-3 --wd 0.0 --max_norm 3.0" || status=1
[ $status -eq 0 ] && echo "PASS: train_cpu agrees with PyTorch on both configurations"
exit $status
