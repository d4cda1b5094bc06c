#!/usr/bin/env bash
# Hugging Face GPT-2 safetensors files (written by dev/reference/hf_ref.py in transformers' naming and
# layout: Conv1D weights (in, out), wte without padding) load through gpt2_build_from_checkpoint
# and give PyTorch's logits, on the full forward and on KV-cache decode steps; with and without
# the `transformer.` prefix and the attn.bias buffers, in F32, F16 and BF16, at two model shapes.
# train_cpu -e accepts the same file (fine-tuning from Hugging Face weights): its -x 0 checkpoint
# gives the same logits. Broken files (missing tensor, wrong shape, truncated, not a model at
# all, bad JSON) stop with one clear error line.
set -u
cd "$(dirname "$0")/.."
CC=${CC:-gcc}
CFLAGS=${CFLAGS:--O2 -fopenmp -march=native}
PY=${PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
  echo "skipped: $PY cannot import torch and numpy (bash test/setup.sh installs python3-torch)"
  exit 77
fi
dir=build/infer_hf
rm -rf "$dir" && mkdir -p "$dir"
$CC $CFLAGS -o build/infer_check test/infer_check.c -lm || { echo "FAIL: infer_check does not build"; exit 1; }
$CC $CFLAGS -o build/train_cpu train_cpu.c -lm || { echo "FAIL: train_cpu does not build"; exit 1; }

status=0
good() {  # name, hf_ref.py options
  local name=$1; shift
  echo "== $name: $*"
  "$PY" dev/reference/hf_ref.py --out "$dir/$name.safetensors" --expect "$dir/$name.expect" "$@" &&
    ./build/infer_check hf "$dir/$name.safetensors" "$dir/$name.expect" || { echo "FAIL: $name"; status=1; }
}
good f32_plain   --dtype F32 --buffers
good f32_prefix  --dtype F32 --prefix
good f16_prefix  --dtype F16 --prefix --buffers
good bf16_plain  --dtype BF16
good f32_shape2  --dtype F32 --prefix --buffers --L 3 --C 192 --V 50 --maxT 16 --T 16 --seed 7

# fine-tuning from the same file: train_cpu -e FILE -x 0 -o DIR writes it as an llm.c checkpoint
"$PY" -c "
import sys; sys.path.insert(0, 'dev/reference'); import gpt2_ref, numpy as np
gpt2_ref.write_tokens('$dir/tokens.bin', np.random.default_rng(0).integers(0, 300, 2000))"
if ./build/train_cpu -e "$dir/f32_prefix.safetensors" -i "$dir/tokens.bin" -j "$dir/tokens.bin" \
     -b 2 -t 8 -x 0 -v 0 -s 0 -o "$dir/run" > "$dir/train.log" 2>&1 &&
   ./build/infer_check hf "$dir/run/model_00000000.bin" "$dir/f32_prefix.expect"; then
  echo "ok    train_cpu -e model.safetensors loads it (its checkpoint gives PyTorch's logits)"
else
  echo "FAIL: train_cpu -e model.safetensors"; cat "$dir/train.log"; status=1
fi

bad() {  # name, expected phrase in the error, then how to make the file (a command)
  local name=$1 phrase=$2; shift 2
  "$@" > /dev/null || { echo "FAIL: could not make $name"; status=1; return; }
  ./build/infer_check hf "$dir/$name.safetensors" "$dir/f32_plain.expect" > "$dir/$name.out" 2> "$dir/$name.err"
  local rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "^error: .*$phrase" "$dir/$name.err" &&
     [ "$(wc -l < "$dir/$name.err")" -eq 1 ]; then
    echo "ok    $name: $(cat "$dir/$name.err")"
  else
    echo "FAIL: $name: exit $rc, expected one error line with '$phrase', got:"; cat "$dir/$name.err"; status=1
  fi
}
hf() { "$PY" dev/reference/hf_ref.py --out "$dir/$1.safetensors" "${@:2}"; }
bad missing     "tensor h.1.mlp.c_fc.bias is missing"   hf missing --drop h.1.mlp.c_fc.bias
bad missing_lnf "tensor transformer.ln_f.weight is missing" hf missing_lnf --prefix --drop ln_f.weight
bad shape       "has shape (129, 384), expected (128, 384)" hf shape --bad-shape h.0.attn.c_attn.weight
bad shape_bias  "has shape (129), expected (128)"      hf shape_bias --bad-shape h.1.ln_2.bias
bad truncated   "outside the"                           hf truncated --truncate 1000
bad no_wte      "not a GPT-2 safetensors file"          hf no_wte --drop wte.weight
bad text        "neither an llm.c checkpoint"           cp README.md "$dir/text.safetensors"
bad empty       "neither an llm.c checkpoint"           truncate -s 0 "$dir/empty.safetensors"
bad json        "malformed safetensors header"          "$PY" -c "
import struct; h = b'{\"wte.weight\": {\"dtype\": \"F32\", \"shape\": [2, 64' + b' ' * 7
open('$dir/json.safetensors', 'wb').write(struct.pack('<Q', len(h)) + h + bytes(512))"
bad dtype       "unknown dtype F8"                      "$PY" -c "
import struct; h = b'{\"wte.weight\":{\"dtype\":\"F8\",\"shape\":[2],\"data_offsets\":[0,2]}}'
open('$dir/dtype.safetensors', 'wb').write(struct.pack('<Q', len(h)) + h + bytes(2))"
[ $status -eq 0 ] && echo "PASS: safetensors files load with PyTorch's logits; broken ones are refused"
exit $status
