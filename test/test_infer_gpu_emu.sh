#!/usr/bin/env bash
# The whole infer_gpu program without a GPU: build/emu/infer_gpu (make infer_gpu_emu) is
# infer_gpu.cu compiled for the CUDA emulator (dev/emu/cuda_emu.h). On a small random llm.c
# checkpoint (L=2 NH=4 C=64 maxT=64, V=320) with the byte-level tokenizer of gpt2_ref.py:
#   1. float32 (-w fp32): the greedy answers of 6 requests of different lengths, decoded 4 at a
#      time over pages of different lengths, equal ./infer's, text and counts; so does one prompt
#      with -p, and so does a model with heads of 4 channels (attention for any head size);
#   2. bf16 (-w bf16, the prefill through flash attention): the share of greedy tokens that agree
#      with ./infer before the first that differs is printed, and the first token of every
#      request must agree (bf16 rounds the logits, the CPU does not);
#   3. the same float32 run in the emulator's other schedules (reverse, random warps with cp.async
#      landing at random) and under its shared-memory race detector (build/emu/infer_gpu_race)
#      gives the same answers;
#   4. -w with another value, and -h, behave as infer's flags do; without a GPU, one line suggests ./infer;
#   5. --serve (gpt2/server.h on the GPU's engine): a greedy request answered at once and streamed
#      gets the text infer_gpu -f gives it (test_serve checks the server itself on the CPU).
set -u
. "$(dirname "$0")/lib.sh"
PY=${PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import numpy' 2>/dev/null; then
  echo "skipped: $PY cannot import numpy (bash test/setup.sh installs it)"
  exit 77
fi
make -s -j"$JOBS" infer infer_gpu_emu build/emu/infer_gpu_race >/dev/null ||
  { echo "FAIL: infer, build/emu/infer_gpu or build/emu/infer_gpu_race does not build"; exit 1; }
fresh_dir infer_gpu_emu
"$PY" dev/reference/gpt2_ref.py make-model --model "$dir/m.bin" --tokens "$dir/t.bin" --V 320 --maxT 64 --L 2 \
  --NH 4 --C 64 --ntokens 10 --scale 0.3 > /dev/null || { echo "FAIL: make-model"; exit 1; }
"$PY" dev/reference/gpt2_ref.py make-tokenizer --out "$dir/tok.bin" > /dev/null || { echo "FAIL: make-tokenizer"; exit 1; }
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
status=0
ok() { echo "ok    $1"; }
bad() { echo "FAIL: $1"; status=1; }
cat > "$dir/requests.jsonl" <<'EOF'
{"prompt": "To be, or not to be", "max_tokens": 12, "temperature": 0}
{"prompt": "A", "max_tokens": 20, "temperature": 0}
{"prompt": "The quick brown fox jumps over the lazy dog, twice over", "max_tokens": 6, "temperature": 0}
{"prompt": "Hello", "max_tokens": 30, "temperature": 0}
{"prompt": "xy", "max_tokens": 3, "temperature": 0}
{"prompt": "Once upon a midnight dreary, while I pondered", "max_tokens": 16, "temperature": 0}
EOF
run() {  # NAME COMMAND...: the requests answered by COMMAND, in $dir/NAME.out
  local name=$1; shift
  "$@" -e "$dir/m.bin" -k "$dir/tok.bin" -f "$dir/requests.jsonl" -b 4 -E 0 \
    > "$dir/$name.out" 2> "$dir/$name.err" || { bad "$name exits non-zero:"; tail -3 "$dir/$name.err"; }
}
same_answers() {  # WHAT A B: text and counts of every answer equal
  "$PY" - "$@" <<'EOF'
import json, sys
what, a, b = sys.argv[1:4]
keys = ("text", "prompt_tokens", "completion_tokens", "finish_reason")
A = [json.loads(l) for l in open(a)]
B = [json.loads(l) for l in open(b)]
diff = [i for i, (x, y) in enumerate(zip(A, B)) if any(x[k] != y[k] for k in keys)]
if len(A) != 6 or len(B) != 6 or diff:
    print(f"FAIL: {what}: {len(A)} and {len(B)} answers, differing at {diff}")
    for i in diff[:2]: print("  ", A[i], "\n  ", B[i])
    sys.exit(1)
print(f"ok    {what}: 6 answers, {sum(x['completion_tokens'] for x in A)} tokens, identical")
EOF
}

# ---- 1. float32 = infer
run cpu ./infer
run fp32 build/emu/infer_gpu -w fp32
same_answers "infer_gpu -w fp32 (emulated) = infer, greedy, -b 4" "$dir/cpu.out" "$dir/fp32.out" || status=1
grep -q "^kv pages: peak [0-9]* of" "$dir/fp32.err" && ok "infer_gpu reports the pages in use at the peak" ||
  bad "no kv pages report from infer_gpu"
./infer -e "$dir/m.bin" -k "$dir/tok.bin" -p "Hello" -n 10 -T 0 -E 0 > "$dir/one_cpu.out" 2>/dev/null
build/emu/infer_gpu -w fp32 -e "$dir/m.bin" -k "$dir/tok.bin" -p "Hello" -n 10 -T 0 -E 0 > "$dir/one_gpu.out" 2>"$dir/one_gpu.err"
cmp -s "$dir/one_cpu.out" "$dir/one_gpu.out" && [ -s "$dir/one_gpu.out" ] && ok "one prompt with -p: infer_gpu prints what infer prints" ||
  { bad "-p: infer_gpu printed other text than infer"; cat "$dir/one_gpu.err"; }

# heads of 4 channels (the kernel for any head size), past one chunk of positions
"$PY" dev/reference/gpt2_ref.py make-model --model "$dir/m4.bin" --tokens "$dir/t4.bin" --V 320 --maxT 96 --L 2 \
  --NH 2 --C 8 --ntokens 10 --scale 0.5 > /dev/null || { echo "FAIL: make-model"; exit 1; }
printf '{"prompt": "abc", "max_tokens": 80, "temperature": 0}\n{"prompt": "hello world", "max_tokens": 30}\n' > "$dir/r4.jsonl"
./infer -e "$dir/m4.bin" -k "$dir/tok.bin" -f "$dir/r4.jsonl" -E 0 > "$dir/hs4_cpu.out" 2>/dev/null
build/emu/infer_gpu -w fp32 -e "$dir/m4.bin" -k "$dir/tok.bin" -f "$dir/r4.jsonl" -E 0 > "$dir/hs4_gpu.out" 2>"$dir/hs4.err" ||
  { bad "heads of 4: infer_gpu exits non-zero"; tail -2 "$dir/hs4.err"; }
"$PY" - "$dir/hs4_cpu.out" "$dir/hs4_gpu.out" <<'EOF' || status=1
import json, sys
keys = ("text", "completion_tokens", "finish_reason")
A = [json.loads(l) for l in open(sys.argv[1])]
B = [json.loads(l) for l in open(sys.argv[2])]
if len(A) != 2 or [[a[k] for k in keys] for a in A] != [[b[k] for k in keys] for b in B]:
    print("FAIL: heads of 4: infer_gpu -w fp32 answers differ from infer's"); sys.exit(1)
print("ok    heads of 4 (any head size), 83 positions, greedy and sampled: infer_gpu -w fp32 = infer")
EOF

# ---- 2. bf16: agreement with the CPU
run bf16 build/emu/infer_gpu -w bf16
"$PY" - "$dir/cpu.out" "$dir/bf16.out" <<'EOF' || status=1
import json, sys
A = [json.loads(l) for l in open(sys.argv[1])]
B = [json.loads(l) for l in open(sys.argv[2])]
if len(B) != 6: print(f"FAIL: bf16 gave {len(B)} answers"); sys.exit(1)
agree = total = first = 0
for a, b in zip(A, B):
    n = 0
    while n < min(len(a["text"]), len(b["text"])) and a["text"][n] == b["text"][n]: n += 1
    agree += n; total += len(a["text"]); first += n > 0   # byte tokens: one character each
print(f"       bf16 greedy text (one character per byte token) agreeing with infer before the first difference: {agree} of {total} ({100 * agree / total:.0f}%); first token: {first} of 6")
if first < 6: print("FAIL: bf16's first token differs from the CPU's"); sys.exit(1)
print("ok    infer_gpu -w bf16 (emulated): every request's first greedy token = infer's")
EOF

# ---- 3. other schedules and the race detector
run reverse env CUDA_EMU_SCHEDULE=reverse build/emu/infer_gpu -w fp32
same_answers "schedule reverse" "$dir/fp32.out" "$dir/reverse.out" || status=1
run random env CUDA_EMU_SCHEDULE=random:7 CUDA_EMU_ASYNC=random:8 build/emu/infer_gpu -w bf16
same_answers "bf16 in schedule random:7 with cp.async landing random:8" "$dir/bf16.out" "$dir/random.out" || status=1
run race build/emu/infer_gpu_race -w bf16
same_answers "bf16 under the race detector" "$dir/bf16.out" "$dir/race.out" || status=1
grep -q "race" "$dir/race.err" && { bad "the race detector reported:"; grep -m3 race "$dir/race.err"; }

# ---- 4. flags
build/emu/infer_gpu -e "$dir/m.bin" -k "$dir/tok.bin" -p x -w fp16 > /dev/null 2> "$dir/w.err"
[ $? -eq 1 ] && grep -q "^error: -w expects fp32 or bf16" "$dir/w.err" && ok "-w fp16: one error line" ||
  { bad "-w fp16"; cat "$dir/w.err"; }
build/emu/infer_gpu -h 2>&1 | grep -q -- "-f FILE" && ok "-h lists the flags" || bad "-h"
# without a GPU: one line that points to infer_gpu's CPU twin
CUDA_EMU_DRIVER=none build/emu/infer_gpu -e "$dir/m.bin" -k "$dir/tok.bin" -p x > /dev/null 2> "$dir/nogpu.err"
[ $? -eq 1 ] && [ "$(cat "$dir/nogpu.err")" = "error: no CUDA device found (no NVIDIA driver is installed); use ./infer instead" ] &&
  ok "no GPU: one line suggesting ./infer" || { bad "no GPU"; cat "$dir/nogpu.err"; }

# ---- 5. --serve
serve_check() {
  command -v curl > /dev/null || { echo "skipped --serve: no curl"; return; }
  local pid port body='{"prompt": "To be, or not to be", "max_tokens": 12, "temperature": 0}'
  pids=()
  trap 'kill -9 "${pids[@]}" 2>/dev/null' EXIT
  if ! serving "$dir/serve.err" build/emu/infer_gpu -w fp32 -e "$dir/m.bin" -k "$dir/tok.bin" --serve 127.0.0.1:0; then
    echo "skipped --serve: build/emu/infer_gpu was built without libmicrohttpd (apt-get install libmicrohttpd-dev)"
    return
  fi
  [ -n "$port" ] || { bad "infer_gpu --serve did not start:"; cat "$dir/serve.err"; return; }
  echo "$body" > "$dir/serve.jsonl"
  build/emu/infer_gpu -w fp32 -e "$dir/m.bin" -k "$dir/tok.bin" -f "$dir/serve.jsonl" > "$dir/serve_f.out" 2> /dev/null
  curl -sS --max-time 60 -d "$body" "http://127.0.0.1:$port/v1/completions" > "$dir/serve.out"
  curl -sSN --max-time 60 -d "${body%\}}, \"stream\": true}" "http://127.0.0.1:$port/v1/completions" > "$dir/serve_stream.out"
  "$PY" - "$dir" <<'EOF' || status=1
import json, sys
d = sys.argv[1]
want = json.loads(open(f"{d}/serve_f.out").readline())
whole = json.load(open(f"{d}/serve.out"))["choices"][0]
raw = open(f"{d}/serve_stream.out").read()
events = [json.loads(b[len("data: "):]) for b in raw.split("\n\n")[:-2]]
streamed = "".join(c["text"] for e in events for c in e["choices"])
if raw.split("\n\n")[-2:] != ["data: [DONE]", ""] or not (want["text"] == whole["text"] == streamed) or \
   whole["finish_reason"] != want["finish_reason"] or events[-1]["choices"][0]["finish_reason"] != want["finish_reason"]:
    print(f"FAIL: --serve: -f {want['text']!r}, at once {whole['text']!r}, streamed {streamed!r}"); sys.exit(1)
print(f"ok    infer_gpu -w fp32 --serve: a greedy request at once and streamed ({len(events)} events) = infer_gpu -f")
EOF
  kill -TERM "$pid"
  wait "$pid" && ok "infer_gpu --serve: SIGTERM, exit 0" || bad "infer_gpu --serve: SIGTERM, exit status $?"
}
serve_check
exit $status
