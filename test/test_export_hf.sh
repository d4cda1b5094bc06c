#!/usr/bin/env bash
# infer --export DIR writes a model in Hugging Face's GPT-2 layout (DIR/model.safetensors and
# DIR/config.json, gpt2_write_hf in gpt2/checkpoint.h). On a tiny model trained 3 steps by
# train_cpu (so its weights are not the initialisation; heads of 32 channels), on the same as a
# bfloat16 checkpoint, on a fresh d1 (GPT-2's vocabulary) and on a model whose width is no
# multiple of 64:
#   (a) the project's own reader reads the export back to the checkpoint's shape and parameters
#       bit for bit (test/infer_check.c same), and exporting the export again gives the same bytes;
#   (b) dev/reference/hf_ref.py reads the export by hand, without the C code: every tensor is the
#       checkpoint's bit for bit (Conv1D matrices transposed, wte without its padding rows), and
#       PyTorch's logits from the export (hf_forward, n_head from config.json) are the C logits
#       of the checkpoint within float32's tolerance (test/infer_check.c hf);
#   (c) the layout is what transformers' save_pretrained writes (names behind "transformer.", no
#       lm_head.weight, F32, {"format": "pt"}, data 8-byte aligned) and config.json matches it;
#   (d) an existing DIR/model.safetensors or DIR/config.json, DIR a file, a missing parent, an
#       unreadable model (no DIR made), --export with -p: one error line, and no file of the
#       user's changed;
#       a config.json beside a safetensors file that contradicts it: one error line;
#   (e) a checkpoint whose wte padding rows are not zero: exported with a note, the rows left out.
# transformers itself is not installed here (no package of it in Debian): the check of the layout
# is by hand, against transformers' source (doc/infer.md).
set -u
. "$(dirname "$0")/lib.sh"
need_python torch numpy
fresh_dir export_hf
make -s infer >/dev/null || { echo "FAIL: infer does not build"; exit 1; }
build_train_cpu
$CC $CFLAGS -o "$dir/infer_check" test/infer_check.c -lm || { echo "FAIL: infer_check does not build"; exit 1; }
ref="$PY dev/reference/hf_ref.py"
status=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL: $*"; status=1; }

# A model of train_cpu's, exported; (a), (b) and (c) on it. name, the checkpoint it came from.
check_export() {
  local name=$1 ckpt=$2 out="$dir/$1"
  if ./infer -e "$ckpt" --export "$out" > "$dir/$name.out" 2> "$dir/$name.err" &&
     grep -q "^wrote $out/model.safetensors" "$dir/$name.out" && grep -q "^wrote $out/config.json" "$dir/$name.out"; then
    ok "$name: $(head -n 1 "$dir/$name.out")"
  else
    bad "$name: infer --export"; cat "$dir/$name.out" "$dir/$name.err"; return
  fi
  "$dir/infer_check" same "$ckpt" "$out/model.safetensors" > "$dir/$name.same" ||
    { bad "$name: not the checkpoint's parameters when read back:"; grep -v '^ok' "$dir/$name.same"; }
  grep -q "all checks passed" "$dir/$name.same" && ok "$name: read back, every parameter is the checkpoint's bit for bit"
  ./infer -e "$out/model.safetensors" --export "$out.again" > /dev/null &&
    cmp -s "$out/model.safetensors" "$out.again/model.safetensors" && cmp -s "$out/config.json" "$out.again/config.json" &&
    ok "$name: the export of the export is the same bytes" || bad "$name: exporting the export changes it"
  $ref --check-export "$out" --checkpoint "$ckpt" --expect "$dir/$name.expect" < /dev/null || bad "$name: hf_ref.py --check-export"
  "$dir/infer_check" hf "$ckpt" "$dir/$name.expect" > "$dir/$name.hf" &&
    ok "$name: PyTorch on the export = C on the checkpoint: $(grep -o 'rel err [^)]*' "$dir/$name.hf" | head -n 1)" ||
    { bad "$name: PyTorch's logits of the export differ from C's of the checkpoint"; cat "$dir/$name.hf"; }
}

# a tiny model (V=97, L=2, NH=2, C=64: heads of 32), trained 3 steps
tiny_run_files 32 64 3000 600 5
./"$dir/train_cpu" -e "$dir/model.bin" -i "$dir/train.bin" -j "$dir/val.bin" -k "$dir/tok.bin" -b 2 -t 16 \
  -x 3 -v 0 -s 0 -o "$dir/run" > "$dir/train.log" 2>&1 || { echo "FAIL: train_cpu"; cat "$dir/train.log"; exit 1; }
trained="$dir/run/model_00000003.bin"
"$dir/infer_check" same "$dir/model.bin" "$trained" > /dev/null &&
  bad "training changed nothing: the test would export the initialisation" || ok "the trained weights are not the initial ones"
check_export tiny "$trained"

# the same as a bfloat16 checkpoint (llm.c's version 5): its values, exported as float32
$ref --bf16-checkpoint "$trained" "$dir/bf16.bin" > /dev/null < /dev/null || bad "hf_ref.py --bf16-checkpoint"
check_export bf16 "$dir/bf16.bin"

# a fresh d1: GPT-2's vocabulary and context (bos and eos 50256 in config.json), as a checkpoint
./"$dir/train_cpu" -e d1 -i "$dir/train.bin" -j "$dir/val.bin" -k "$dir/tok.bin" -b 1 -t 8 -x 0 -v 0 -s 0 \
  -o "$dir/d1" > "$dir/d1.log" 2>&1 || { echo "FAIL: train_cpu -e d1 -x 0"; cat "$dir/d1.log"; exit 1; }
check_export d1 "$dir/d1/model_00000000.bin"

# C = 96, NH = 3: no multiple of 64, so config.json's n_head is the only way to the heads
$PY dev/reference/gpt2_ref.py make-model --model "$dir/wide.bin" --tokens "$dir/wide_tokens.bin" --V 300 \
  --maxT 24 --L 3 --NH 3 --C 96 --ntokens 10 --scale 0.3 > /dev/null || bad "make-model"
check_export c96 "$dir/wide.bin"

# (e) wte's padding rows not zero (no checkpoint of ours has that): said, and left out as always
$PY -c "
import sys; sys.path.insert(0, 'dev/reference'); import gpt2_ref
config, p = gpt2_ref.read_checkpoint('$trained'); p['wte'][config[1]:] = 0.5
gpt2_ref.write_checkpoint('$dir/padded.bin', config, p)" || bad "could not write padded.bin"
./infer -e "$dir/padded.bin" --export "$dir/padded" > /dev/null 2> "$dir/padded.err" &&
  grep -q "^note: wte's padding rows 97..127 are not zero" "$dir/padded.err" &&
  $ref --check-export "$dir/padded" --checkpoint "$dir/padded.bin" < /dev/null > /dev/null &&
  ok "padding rows that are not zero: $(cat "$dir/padded.err")" || { bad "padding rows not zero"; cat "$dir/padded.err"; }

# (d) bad input: one error line, exit status 1, no crash
one_error() {  # what, phrase in the error line, then the command
  local what=$1 phrase=$2; shift 2
  "$@" > "$dir/e.out" 2> "$dir/e.err"
  local rc=$?
  if [ $rc -eq 1 ] && [ "$(wc -l < "$dir/e.err")" -eq 1 ] && grep -q "^error: .*$phrase" "$dir/e.err"; then
    ok "$what: $(cat "$dir/e.err")"
  else
    bad "$what: exit $rc, expected one error line with '$phrase', got:"; cat "$dir/e.err"
  fi
}
cp "$dir/tiny/model.safetensors" "$dir/keep.safetensors"
cp "$dir/tiny/config.json" "$dir/keep.json"
one_error "model.safetensors exists" "tiny/model.safetensors exists; not overwriting" \
  ./infer -e "$dir/d1/model_00000000.bin" --export "$dir/tiny"
cmp -s "$dir/tiny/model.safetensors" "$dir/keep.safetensors" && cmp -s "$dir/tiny/config.json" "$dir/keep.json" &&
  ok "the existing export is unchanged" || bad "an existing export was changed"
mkdir -p "$dir/cfg_only" && echo '{"mine": 1}' > "$dir/cfg_only/config.json"
one_error "config.json exists" "cfg_only/config.json exists" ./infer -e "$trained" --export "$dir/cfg_only"
[ ! -e "$dir/cfg_only/model.safetensors" ] && [ "$(cat "$dir/cfg_only/config.json")" = '{"mine": 1}' ] &&
  ok "beside an existing config.json nothing was written" || bad "wrote beside an existing config.json"
one_error "DIR is a file" "exists and is not a directory" ./infer -e "$trained" --export "$dir/keep.json"
one_error "DIR's parent is missing" "cannot create the directory" ./infer -e "$trained" --export "$dir/no/such"
one_error "no such model" "cannot open $dir/none.bin" ./infer -e "$dir/none.bin" --export "$dir/x1"
one_error "not a model" "neither an llm.c checkpoint" ./infer -e README.md --export "$dir/x2"
[ ! -e "$dir/x1" ] && [ ! -e "$dir/x2" ] && ok "nothing exported from a bad model, no DIR made" ||
  bad "a bad model left DIR behind or was exported"
one_error "--export with -p" "give no -p, -f or --serve" ./infer -e "$trained" -p hi --export "$dir/x3"

# config.json beside a safetensors file is read (n_head), and must agree with the tensors
cfg_case() {  # what, phrase, python expression changing config.json's dict c
  mkdir -p "$dir/cfg_$1" && cp "$dir/tiny/model.safetensors" "$dir/cfg_$1/"
  $PY -c "import json; c = json.load(open('$dir/tiny/config.json')); $3; open('$dir/cfg_$1/config.json', 'w').write(json.dumps(c) if isinstance(c, dict) else c)"
  one_error "config.json: $1" "$2" ./infer -e "$dir/cfg_$1/model.safetensors" -p hi -n 1 -k "$dir/tok.bin"
}
cfg_case n_embd "config.json: n_embd is 65, the tensors beside it say 64" "c['n_embd'] = 65"
cfg_case n_layer "config.json: n_layer is 3, the tensors beside it say 2" "c['n_layer'] = 3"
cfg_case heads "n_head 3 does not divide n_embd 64" "c['n_head'] = 3"
cfg_case no_heads "no n_head" "del c['n_head']"
cfg_case json "config.json.*at byte" "c = '{\"n_head\": 2,'"

[ $status -eq 0 ] && echo "PASS: infer --export writes Hugging Face's GPT-2 layout, read back bit for bit, PyTorch's logits"
exit $status
