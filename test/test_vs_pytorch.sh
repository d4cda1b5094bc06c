#!/usr/bin/env bash
# train_cpu.c against the PyTorch reference (dev/reference/gpt2_ref.py), in two parts.
#
# 1. Its model functions (test/ref_check.c, which holds the tolerances; doc/correctness.md
#    explains them), on two small random models and one batch: logits, loss, every parameter
#    gradient, the gradient norm, what only the functions expose.
#   A: L=2 NH=4 C=32 V=97 (Vp=128), B=3 T=5: B*T=15 is not a multiple of 8
#   B: L=3 NH=2 C=48 V=211 (Vp=256), B=2 T=16
#
# 2. The real program: ./train_cpu (built by make; TRAIN_CPU=path runs another) trains for a
#    dozen steps with validation and writes its checkpoint, and `dev/reference/gpt2_ref.py train` does the
#    same run in PyTorch from the same options; test/compare_run.py checks every printed step's
#    loss, gradient norm and learning rate, every validation loss, the number of those lines and
#    the final parameters. This catches what part 1 cannot: main's loop, the schedule, the loader
#    moving through the file, AdamW's step count. Then again with a -DLAYERS_NAIVE build.
#   R1: L=2 NH=4 C=16 V=97, B=7 T=9 (63, not a multiple of 8; maxT 32), 12 steps over a training
#       file of 5 batches (the loader wraps twice), warmup 3 then cosine decay to 0.1, weight
#       decay 0.1, validation every 4 steps on 2 of the 3 validation batches
#   R2: L=3 NH=2 C=48 V=211, B=4 T=16 (maxT 64), 11 steps over 12 batches, constant learning
#       rate, no weight decay, validation every 5 steps and after the last (11) on both of the
#       2 validation batches (-m 10 asks for more)
#   In both the gradient norm crosses 1.0 (R1: clipped except at steps 6 and 11; R2: clipped at
#   steps 1-5 only); compare_run.py --mixed-clipping checks that this still holds.
#
# 3. The PyTorch trainer of make bench-gpu-peers (dev/bench/train_torch.py: nn.Module blocks,
#    PyTorch's own layer norm, GELU and attention) is train_cpu's model: on the CPU in float32, from
#    the same checkpoint and tokens (P1: L=2 NH=4 C=64 V=211 Vp=256, weights at 0.1, so that GELU's
#    form and the layernorm epsilon show in the loss, as they do not at GPT-2's 0.02), B=4 T=32,
#    4 steps at lr 1e-3, weight decay 0.5, the norm clipped at every step: each step's loss within
#    2e-6 + 2e-6 relative (the prints' rounding and float32's), its gradient norm within 1e-4 (the
#    prints' rounding) + 5e-5 relative. Step 1 is the model as loaded, steps 2-4 follow AdamW steps.
set -u
. "$(dirname "$0")/lib.sh"
need_python torch numpy
fresh_dir vs_pytorch
$CC $CFLAGS -o build/ref_check test/ref_check.c -lm || { echo "FAIL: ref_check does not build"; exit 1; }

status=0
check() {  # name, make-model args, reference args
  local name=$1 model_args=$2 ref_args=$3
  echo "== config $name"
  "$PY" dev/reference/gpt2_ref.py make-model --model "$dir/$name.bin" --tokens "$dir/${name}_tok.bin" \
    $model_args || return 1
  "$PY" dev/reference/gpt2_ref.py reference --model "$dir/$name.bin" --tokens "$dir/${name}_tok.bin" \
    --out "$dir/$name.dump" --steps 0 $ref_args || return 1
  ./build/ref_check "$dir/$name.bin" "$dir/${name}_tok.bin" "$dir/$name.dump"
}
check A "--V 97 --Vp 128 --maxT 32 --L 2 --NH 4 --C 32 --seed 1" \
        "--B 3 --T 5 --lr 1e-3 --wd 0.1 --max_norm 1.0" || status=1
check B "--V 211 --Vp 256 --maxT 64 --L 3 --NH 2 --C 48 --seed 2" \
        "--B 2 --T 16 --lr 1e-3 --wd 0.0 --max_norm 3.0" || status=1

# ---------- 2. the real program ----------
TRAIN_CPU=${TRAIN_CPU:-./train_cpu}
if [ ! -x "$TRAIN_CPU" ]; then
  echo "FAIL: $TRAIN_CPU not found (run make first)"; exit 1
fi
naive=$dir/train_cpu_naive
$CC $CFLAGS -DLAYERS_NAIVE -o "$naive" train_cpu.c -lm || { echo "FAIL: $naive does not build"; exit 1; }

real_run() {  # name, V, make-model args, validation tokens, steps, the other train_cpu options
  local name=$1 V=$2 model_args=$3 nval=$4 steps=$5 opts=$6
  local base=$dir/run_$name rc=0
  echo "== real run $name"
  "$PY" dev/reference/gpt2_ref.py make-model --model "$base.bin" --tokens "${base}_train.bin" --V "$V" \
    $model_args || return 1
  "$PY" dev/reference/gpt2_ref.py make-tokens --out "${base}_val.bin" --V "$V" --n "$nval" --seed 99 ||
    return 1
  # the same options for both sides
  local args="-e $base.bin -i ${base}_train.bin -j ${base}_val.bin -x $steps $opts"
  "$PY" dev/reference/gpt2_ref.py train --out "$base.npz" $args || return 1
  local bin out
  for bin in "$TRAIN_CPU" "$naive"; do
    [ "$bin" = "$naive" ] && out=$base.naive || out=$base.out
    echo "-- $bin $args"
    rm -rf "$out"
    "$bin" $args -s 0 -o "$out" >"$out.stdout" || { echo "FAIL: $bin exited with status $?"; rc=1; }
    "$PY" test/compare_run.py "$base.npz" "$out.stdout" "$out/model_$(printf %08d "$steps").bin" \
      --mixed-clipping || rc=1
  done
  return $rc
}
real_run R1 97 "--Vp 128 --maxT 32 --L 2 --NH 4 --C 16 --scale 0.1 --seed 3 --ntokens 330" 200 12 \
  "-b 7 -t 9 -l 3e-3 -u 3 -q 0.1 -c 0.1 -v 4 -m 2" || status=1
real_run R2 211 "--Vp 256 --maxT 64 --L 3 --NH 2 --C 48 --scale 0.02 --seed 6 --ntokens 800" 150 11 \
  "-b 4 -t 16 -l 3e-3 -u 0 -q 1 -c 0 -v 5 -m 10" || status=1

# ---------- 3. the PyTorch trainer of make bench-gpu-peers ----------
peer_run() {  # name, make-model args, the trainers' options
  local name=$1 model_args=$2 opts=$3 base=$dir/peer_$1
  echo "== dev/bench/train_torch.py against train_cpu: $name"
  "$PY" dev/reference/gpt2_ref.py make-model --model "$base.bin" --tokens "${base}_tok.bin" $model_args || return 1
  "$TRAIN_CPU" -e "$base.bin" -i "${base}_tok.bin" $opts -v 0 -s 0 >"$base.cpu" || { echo "FAIL: train_cpu exited with $?"; return 1; }
  "$PY" dev/bench/train_torch.py -e "$base.bin" -i "${base}_tok.bin" $opts --device cpu >"$base.torch" ||
    { echo "FAIL: train_torch.py exited with $?"; return 1; }
  grep '^torch ' "$base.torch"
  # each progress line's loss and norm, side by side
  awk -F' [|] ' '/^step +[0-9]+\// { split($2, l, " "); split($3, n, " "); print l[2], n[2] }' "$base.cpu" >"$base.cpu.ln"
  awk -F' [|] ' '/^step +[0-9]+\// { split($2, l, " "); split($3, n, " "); print l[2], n[2] }' "$base.torch" >"$base.torch.ln"
  paste -d' ' "$base.cpu.ln" "$base.torch.ln" | awk -v want="$(grep -cE '^step +[0-9]+/' "$base.cpu")" '
    function abs(x) { return x < 0 ? -x : x }
    { s++; lt = 2e-6 + 2e-6 * abs($1); nt = 1e-4 + 5e-5 * abs($2)
      ok = abs($1 - $3) <= lt && abs($2 - $4) <= nt && NF == 4
      bad += !ok
      printf "%s step %d: loss %s vs %s (|diff| %.1e, tol %.1e), norm %s vs %s (|diff| %.1e, tol %.1e)\n",
             ok ? "ok  " : "FAIL", s, $1, $3, abs($1 - $3), lt, $2, $4, abs($2 - $4), nt }
    END { if (s != want || s == 0) { print "FAIL: " s " steps compared, train_cpu printed " want; exit 1 } exit bad > 0 }'
}
peer_run P1 "--V 211 --Vp 256 --maxT 64 --L 2 --NH 4 --C 64 --scale 0.1 --seed 7 --ntokens 2000" \
  "-b 4 -t 32 -x 4 -l 1e-3 -c 0.5" || status=1

[ $status -eq 0 ] && echo "PASS: train_cpu's functions and its real runs agree with PyTorch, and so does make bench-gpu-peers' PyTorch model"
exit $status
