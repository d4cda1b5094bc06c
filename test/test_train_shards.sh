#!/usr/bin/env bash
# Training on a data set of shards (gpt2/dataloader.h): -i and -j name token files by a glob or a
# comma-separated list, in llm.c's FineWeb naming (NAME_val_000000.bin, NAME_train_000001.bin, ...;
# test/shards_make.py writes them as llm.c's scripts do), one shard in memory at a time.
#   1. the loader's order (test/shards_check.c): every batch of every shard once per pass, a
#      shard's batches together, shuffled shards and batches, disjoint parts for ranks and
#      micro-steps, seek = read on, globs and lists;
#   2. resume: a shuffled run over 4 shards of different sizes (one too small for a batch),
#      killed after a checkpoint taken partway through a shard of its second pass (the state
#      records pass, shard and batch: checked) and resumed with -y 1, ends byte-identical to the
#      uninterrupted run, printing the same after the cut;
#   3. data parallel: 2 processes of -b 1 follow the one process of -b 2 on the same shards;
#   4. memory: a run over 4 shards of 100 MB holds no more than 64 MB more at its peak than the
#      same run over a 1 KB file (the old loader read all 400 MB);
#   5. bad data, each one error line naming the file, before any step and with no -o folder left
#      behind: a glob that matches nothing, an empty list entry, a missing file, a truncated shard,
#      a shard of version 2, one of llm.c's llama-3 shards (uint32 ids), an id past the vocabulary
#      in the third shard, no shard holding a batch, a bad validation shard, and resuming with
#      other shards than the run read.
set -u
. "$(dirname "$0")/lib.sh"
need_python numpy
fresh_dir test_train_shards
build_train_cpu
tiny_run_files 16 16 400 100 3
status=0
bad() { echo "FAIL: $*"; status=1; }
SM="$PY test/shards_make.py"

echo "--- 1. the loader's order"
${CC:-gcc} -O2 -Wall -o "$dir/shards_check" test/shards_check.c -lm || exit 1
mkdir -p "$dir/order"
"$dir/shards_check" "$dir/order" || status=1

echo "--- 2. a shuffled sharded run, killed partway through a shard of its second pass and resumed"
$SM split "$dir/train.bin" "$dir/fw" 90,130,10 || exit 1     # 5, 8, 0 and 10 batches of 2 x 8 + 1
cp "$dir/val.bin" "$dir/fw_val_000000.bin"
common=(-i "$dir/fw_train_*.bin" -j "$dir/fw_val_*.bin" -e "$dir/model.bin" -k "$dir/tok.bin" -b 2 -t 8
        -R 1 -S 11 -u 2 -c 0.1 -v 4 -m 2 -s 6 -g 4 -n 2 -x 34)
"$dir/train_cpu" "${common[@]}" -o "$dir/full" > "$dir/full.stdout" 2>&1 || { cat "$dir/full.stdout"; exit 1; }
grep -q "^train: $dir/fw_train_\*.bin (4 shards, 400 tokens, 23 batches) shuffled" "$dir/full.stdout" ||
  bad "the header line does not name 4 shards of 400 tokens, 23 batches: $(grep '^train:' "$dir/full.stdout")"
cut=""
for s in $(seq 24 2 32); do  # the first checkpoint of pass 2 that is partway through a later shard
  pos=$($SM state "$dir/full/state_$(printf %08d $s).bin")
  read -r _ pass _ shard _ batch _ shards _ batches <<< "$pos"
  if [ "$pass" = 1 ] && [ "$shard" -ge 1 ] && [ "$batch" -ge 1 ]; then cut=$s; break; fi
done
if [ -z "$cut" ] || [ "$shards" != 4 ] || [ "$batches" != 23 ]; then
  bad "no checkpoint of steps 24-32 is partway through a later shard of pass 2 ($pos)"
else
  echo "ok    cut after step $cut: the state says $pos"
  cut_run "$dir/full" "$dir/resumed" "$cut"
  "$dir/train_cpu" "${common[@]}" -o "$dir/resumed" -y 1 > "$dir/resumed.stdout2" 2>&1 ||
    { bad "the resumed run failed:"; tail -3 "$dir/resumed.stdout2"; }
  for f in model_00000034.bin state_00000034.bin main.log; do
    cmp -s "$dir/full/$f" "$dir/resumed/$f" || bad "$f differs between the uninterrupted and the resumed run"
  done
  diff <(printed_after "$cut" "$dir/full.stdout") <(printed_after "$cut" "$dir/resumed.stdout2") > "$dir/resumed.diff" ||
    { bad "the resumed run prints other losses or samples after step $cut:"; head -5 "$dir/resumed.diff"; }
  [ $status = 0 ] && echo "ok    resumed run = uninterrupted run (model, state, main.log, printed losses and samples)"
fi

echo "--- 3. data parallel over shards: 2 processes of -b 1 against one process of -b 2"
if command -v mpirun > /dev/null; then
  dp=(-i "$dir/fw_train_000001.bin,$dir/fw_train_00000[234].bin" -j "$dir/fw_val_000000.bin" -e "$dir/model.bin"
      -k "$dir/tok.bin" -t 8 -R 1 -S 5 -u 2 -v 3 -m 2 -s 0 -n 3 -x 9)
  ./train_cpu "${dp[@]}" -b 2 -o "$dir/one" > "$dir/one.out" 2>&1 || { bad "one process:"; tail -3 "$dir/one.out"; }
  mpi_run 2 ./train_cpu "${dp[@]}" -b 1 -o "$dir/two" > "$dir/two.out" 2>&1 || { bad "two processes:"; tail -3 "$dir/two.out"; }
  $PY test/compare_gpu_run.py --precision fp32 "$dir/one" "$dir/one.out" "$dir/two" "$dir/two.out" 9 > "$dir/dp.cmp" ||
    { bad "2 processes do not follow one:"; grep -v "^ok" "$dir/dp.cmp" | head -5; }
  [ -s "$dir/dp.cmp" ] && grep -q . "$dir/dp.cmp" && ! grep -q FAIL "$dir/dp.cmp" && echo "ok    2 processes follow one"
else
  echo "skip  no mpirun (test/setup.sh installs Open MPI)"
fi

echo "--- 4. memory: 400 MB of shards against 1 KB of tokens"
$SM big "$dir/big" 4 50000000 97 || exit 1
small=$($SM rss ./train_cpu -i "$dir/val.bin" -e "$dir/model.bin" -b 2 -t 8 -x 3 -v 0 -s 0 -R 1) || bad "the small run failed"
large=$($SM rss ./train_cpu -i "$dir/big_train_*.bin" -e "$dir/model.bin" -b 2 -t 8 -x 3 -v 0 -s 0 -R 1) || bad "the large run failed"
rm -f "$dir"/big_train_*.bin
if [ -n "$small" ] && [ -n "$large" ] && [ "$large" -le $((small + 64)) ]; then
  echo "ok    peak resident memory: $large MB on 400 MB of shards, $small MB on 1 KB"
else
  bad "peak resident memory $large MB on 400 MB of shards, $small MB on 1 KB (allowed: 64 MB more)"
fi

echo "--- 5. bad data: one line naming the file, before any step"
$SM write "$dir/v2_train_000001.bin" 2 "$(seq -s, 1 40)"
$SM write "$dir/llama_train_000001.bin" 7 "$(seq -s, 1 40)"
$SM write "$dir/past_train_000003.bin" 1 "$(seq -s, 1 30),97,$(seq -s, 1 10)"
cp "$dir/fw_train_000001.bin" "$dir/past_train_000001.bin"; cp "$dir/fw_train_000002.bin" "$dir/past_train_000002.bin"
head -c 1100 "$dir/fw_train_000002.bin" > "$dir/cut_train_000002.bin"; cp "$dir/fw_train_000001.bin" "$dir/cut_train_000001.bin"
$SM write "$dir/tiny_train_000001.bin" 1 "1,2,3"; $SM write "$dir/tiny_train_000002.bin" 1 "4,5,6,7"
expect() {  # WHAT PHRASE -i ARG [MORE ARGS]: one error line with PHRASE, no step, no -o folder
  local what=$1 phrase=$2; shift 2
  rm -rf "$dir/badrun"
  timeout 60 ./train_cpu -e "$dir/model.bin" -j "$dir/val.bin" -b 2 -t 8 -x 2 -o "$dir/badrun" "$@" > "$dir/bad.out" 2> "$dir/bad.err"
  local rc=$?
  if [ $rc = 1 ] && [ "$(wc -l < "$dir/bad.err")" = 1 ] && grep -q "^error: .*$phrase" "$dir/bad.err" &&
     ! grep -q "^step" "$dir/bad.out" && [ ! -e "$dir/badrun" ]; then
    echo "ok    $what: $(cat "$dir/bad.err")"
  else
    bad "$what: exit $rc, expected one line with '$phrase'; got: $(head -3 "$dir/bad.err")"
  fi
}
expect "a glob that matches nothing" "no token file matches $dir/nothing_\*.bin" -i "$dir/nothing_*.bin"
expect "an empty entry in a list" "an empty name in the list" -i "$dir/fw_train_000001.bin,,$dir/fw_train_000002.bin"
expect "a missing file in a list" "$dir/fw_train_000009.bin" -i "$dir/fw_train_000001.bin,$dir/fw_train_000009.bin"
expect "a truncated shard" "$dir/cut_train_000002.bin is truncated" -i "$dir/cut_train_*.bin"
expect "version 2" "$dir/v2_train_000001.bin: token file version 2" -i "$dir/fw_train_000001.bin,$dir/v2_train_*.bin"
expect "llm.c's llama-3 tokens" "$dir/llama_train_000001.bin holds llm.c's llama-3 tokens" -i "$dir/fw_train_000001.bin,$dir/llama_train_000001.bin"
expect "an id past the vocabulary in the third shard" "$dir/past_train_000003.bin: token id 97 at position 30" -i "$dir/past_train_*.bin"
expect "no shard holds a batch" "has no shard that holds a batch: the largest holds 4 tokens" -i "$dir/tiny_train_*.bin"
expect "a bad validation shard" "$dir/cut_train_000002.bin is truncated" -i "$dir/fw_train_*.bin" -j "$dir/cut_train_*.bin" -v 1
rm -rf "$dir/other" && cp -r "$dir/full" "$dir/other"
"$dir/train_cpu" "${common[@]}" -i "$dir/fw_train_00000[12].bin" -o "$dir/other" -y 1 > "$dir/other.out" 2> "$dir/other.err"
if [ $? = 1 ] && [ "$(wc -l < "$dir/other.err")" = 1 ] && grep -q "resume with the same training data" "$dir/other.err" &&
   ! grep -q "^step" "$dir/other.out"; then
  echo "ok    resuming over other shards: $(cat "$dir/other.err")"
else
  bad "resuming over other shards: $(head -3 "$dir/other.err")"
fi
exit $status
