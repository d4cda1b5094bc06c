#!/usr/bin/env bash
# Bad input stops train_cpu with one clear line on stderr ("error: ...", naming the problem) and a
# non-zero exit, without a crash and without touching the output directory. Each case differs
# from a good run in one thing only, and the output directory holds a stand-in
# model_00000002.bin that a run of -x 2 would overwrite had it gone ahead: every file's bytes,
# inputs and outputs, and the list of files must be unchanged afterwards.
set -u
. "$(dirname "$0")/lib.sh"
need_python numpy
fresh_dir test_train_badinput
build_train_cpu
"$PY" dev/reference/gpt2_ref.py make-model --model "$dir/model.bin" --tokens "$dir/train.bin" --V 97 \
  --maxT 16 --L 1 --NH 2 --C 16 --ntokens 60 --seed 5 >/dev/null || exit 1

# The bad files: each a good file with one thing wrong.
"$PY" - "$dir" <<'EOF' || exit 1
import sys
import numpy as np
d = sys.argv[1]
model = open(f"{d}/model.bin", "rb").read()
tokens = open(f"{d}/train.bin", "rb").read()
def with_int(data, index, value, dtype="<i4", offset=0):
    b = bytearray(data)
    size = np.dtype(dtype).itemsize
    b[offset + size * index: offset + size * (index + 1)] = np.array(value, dtype=dtype).tobytes()
    return bytes(b)
files = {
    "ck_magic.bin": with_int(model, 0, 12345),
    "ck_version.bin": with_int(model, 1, 4),
    "ck_truncated.bin": model[:-100],
    "ck_header_only.bin": model[:500],
    "ck_longer.bin": model + bytes(4),
    "ck_shape.bin": with_int(model, 5, 3),                    # NH=3 does not divide C=16
    "tok_magic.bin": with_int(tokens, 0, 1),
    "tok_version.bin": with_int(tokens, 1, 2),
    "tok_truncated.bin": tokens[:-1],
    "tok_oov.bin": with_int(tokens, 20, 97, "<u2", 1024),     # V = 97
    "tok_short.bin": with_int(tokens, 2, 16)[:1024 + 2 * 16], # B*T+1 = 17 needed
}
for name, data in files.items():
    open(f"{d}/{name}", "wb").write(data)
EOF

# A finished run to resume from (for the -y cases), and a stand-in output directory.
good=(-e "$dir/model.bin" -i "$dir/train.bin" -j "$dir/train.bin" -b 2 -t 8 -x 2 -v 0 -s 0)
"$dir/train_cpu" "${good[@]}" -o "$dir/run" >/dev/null 2>&1 || { echo "FAIL: the good run failed"; exit 1; }
mkdir -p "$dir/out"
head -c 1000 /dev/urandom >"$dir/out/model_00000002.bin"
echo "not a directory" >"$dir/file"

snapshot() {  # every file here (inputs, output directories) with its checksum
  (cd "$dir" && find . -type f ! -name stdout ! -name stderr | sort | xargs sha256sum)
}

status=0
# NAME, a regex the message must match, then the arguments that differ from the good run.
expect_error() {
  local name=$1 pattern=$2; shift 2
  local before; before=$(snapshot)
  "$dir/train_cpu" "${good[@]}" -o "$dir/out" "$@" >"$dir/stdout" 2>"$dir/stderr"
  local rc=$? ok=1 why=""
  local lines; lines=$(wc -l <"$dir/stderr")
  if [ $rc -eq 0 ]; then ok=0; why="exit 0";
  elif [ $rc -ge 128 ]; then ok=0; why="killed by signal $((rc - 128))";
  elif [ "$lines" -ne 1 ] || ! head -n 1 "$dir/stderr" | grep -q '^error: '; then
    ok=0; why="stderr is not one 'error: ...' line";
  elif ! grep -Eq "$pattern" "$dir/stderr"; then ok=0; why="message does not match /$pattern/";
  elif [ "$before" != "$(snapshot)" ]; then ok=0; why="files in the output directory changed";
  fi
  if [ $ok -eq 1 ]; then
    printf 'ok   %-34s exit %d: %s\n' "$name" $rc "$(head -c 150 "$dir/stderr")"
  else
    printf 'FAIL %-34s %s (exit %d); stderr:\n' "$name" "$why" $rc; head -n 5 "$dir/stderr"
    status=1
  fi
}

expect_error "checkpoint: wrong magic"          "magic" -e "$dir/ck_magic.bin"
expect_error "checkpoint: unsupported version"  "version 4" -e "$dir/ck_version.bin"
expect_error "checkpoint: truncated"            "truncated" -e "$dir/ck_truncated.bin"
expect_error "checkpoint: header only"          "truncated" -e "$dir/ck_header_only.bin"
expect_error "checkpoint: longer than header"   "longer" -e "$dir/ck_longer.bin"
expect_error "checkpoint: C not divisible by NH" "divisible" -e "$dir/ck_shape.bin"
expect_error "checkpoint: missing"              "cannot open" -e "$dir/nonexistent.bin"
expect_error "tokens: wrong magic"              "not a token file" -i "$dir/tok_magic.bin"
expect_error "tokens: unsupported version"      "version 2" -i "$dir/tok_version.bin"
expect_error "tokens: truncated"                "truncated" -i "$dir/tok_truncated.bin"
expect_error "tokens: id >= V (train)"          "token id 97" -i "$dir/tok_oov.bin"
expect_error "tokens: id >= V (validation)"     "token id 97" -v 1 -j "$dir/tok_oov.bin"
expect_error "tokens: fewer than B*T+1"         "fewer than one batch" -i "$dir/tok_short.bin"
expect_error "T > maxT"                         "maxT" -t 32
expect_error "fresh model of 0 layers"          "1 to 128 layers" -e d0
expect_error "output path is a file"            "not a directory" -o "$dir/file"
expect_error "output dir cannot be created"     "cannot create" -o "$dir/file/sub"
if [ "$(id -u)" -ne 0 ]; then   # root writes through any permission bits
  mkdir -p "$dir/readonly" && chmod 555 "$dir/readonly"
  expect_error "output dir not writable"        "not writable" -o "$dir/readonly"
  chmod 755 "$dir/readonly"
elif [ -d /sys ] && ! touch /sys/.write_test 2>/dev/null; then
  # root writes through permission bits, but not into sysfs: an existing directory nobody can write
  expect_error "output dir not writable"        "not writable" -o /sys
else
  echo "note: running as root without an unwritable directory, so that case is left out"
fi
# resuming: the run in $dir/run must stay as it is
expect_error "new run over an old one"          "already exists" -o "$dir/run"
expect_error "resume with another -d"           "same -t and -d" -o "$dir/run" -y 1 -x 4 -d 32
expect_error "resume with another -t"           "same -t and -d" -o "$dir/run" -y 1 -x 4 -t 4
expect_error "resume, -b not dividing its batch" "the resumed run's batch of 16 tokens \(-d\) is not a multiple" -o "$dir/run" -y 1 -x 4 -b 3
expect_error "resume with nothing to resume"    "no model_" -o "$dir/out" -y 1
cp -r "$dir/run" "$dir/run_bad_state"
head -c 2000 "$dir/run/state_00000002.bin" >"$dir/run_bad_state/state_00000002.bin"
expect_error "resume from a truncated state"    "truncated|does not match" -o "$dir/run_bad_state" -y 1 -x 4
# a state whose batch is 0 rows (header[3]; a fuzzer's find): without the check the run went on
# with the batch of this run's -b instead of the resumed one's
cp "$dir/run/state_00000002.bin" "$dir/run_bad_state/state_00000002.bin"
printf '\0\0\0\0' | dd of="$dir/run_bad_state/state_00000002.bin" bs=1 seek=12 conv=notrunc status=none
expect_error "resume from a state of batch 0"   "is corrupt: step 2, batch 0 x" -o "$dir/run_bad_state" -y 1 -x 4

# Divergence: a learning rate of 1e30 makes the loss NaN at step 2; the run must stop there with
# one error line, before that step's update and without printing NaN losses as progress.
"$dir/train_cpu" "${good[@]}" -x 4 -l 1e30 >"$dir/stdout" 2>"$dir/stderr"
rc=$?
if [ $rc -eq 1 ] && [ "$(wc -l <"$dir/stderr")" -eq 1 ] && grep -q '^error: training diverged at step 2 ' "$dir/stderr" \
   && ! grep -qi 'nan' "$dir/stdout"; then
  printf 'ok   %-34s exit %d: %s\n' "training diverges" $rc "$(head -c 150 "$dir/stderr")"
else
  printf 'FAIL %-34s exit %d; stderr:\n' "training diverges" $rc; head -n 5 "$dir/stderr"; status=1
fi

[ $status -eq 0 ] && echo "PASS: every bad input stops train_cpu cleanly, nothing overwritten"
exit $status
