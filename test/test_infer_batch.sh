#!/usr/bin/env bash
# ./infer -f REQUESTS -b N, the batching engine, on a small random llm.c checkpoint with GPT-2's
# vocabulary (L=2 NH=4 C=64 maxT=64):
#   1. batch invariance: 16 mixed requests (prompts of 1 to 40 tokens, max_tokens from 1 to
#      "until the context is full", greedy and sampled at several temperatures, top-k, top-p,
#      seeds) give the same answers, every field but the timings, at -b 1, -b 8, -b 16, with a
#      pool of one context's pages (-m 4: requests wait for pages), and in reverse order (every
#      request in another slot beside other requests);
#   2. the answers: one valid JSON line per request in input order, finish_reason and token
#      counts consistent, the peak of pages in use reported and within the pool;
#   3. greedy tokens equal PyTorch's greedy generation (dev/reference/gpt2_ref.py greedy, float64)
#      for 5 prompts run together at -b 4;
#   4. one prompt with -p prints what the same request gets from -f;
#   5. bad requests: one error record each naming the line and what is wrong, the others
#      answered, exit status 1;
#   6. stop strings taken from the greedy answers of 3 (1 to 3 characters, one across two tokens,
#      alone and in an array): each answer is its text cut before the string's first occurrence,
#      with the tokens up to the one that completed it and finish_reason "stop"; a string that
#      never occurs changes nothing;
#   7. -w bf16 (the products in bf16): part 1's batch invariance again (-b 1 = -b 8 = -b 16 =
#      -m 4 = reverse order), and not every answer equal to fp32's; each of part 3's greedy prompts
#      gets fp32's first token (bf16 rounds the logits, so later tokens may part; the share that
#      agrees before the first difference is printed); the header line says bf16 and what its
#      products run on; --serve -w bf16 answers part 3's prompts, sent at once, as -f -w bf16 does.
set -u
. "$(dirname "$0")/lib.sh"
PY=${PYTHON:-/usr/bin/python3}
TOK=data/gpt2_tokenizer.bin
if ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
  echo "skipped: $PY cannot import torch and numpy (bash test/setup.sh installs python3-torch)"
  exit 77
fi
make -s infer tokenizer data >/dev/null || { echo "FAIL: make infer"; exit 1; }
fresh_dir infer_batch
"$PY" dev/reference/gpt2_ref.py make-model --model "$dir/m.bin" --tokens "$dir/tok.bin" --V 50257 \
  --maxT 64 --L 2 --NH 4 --C 64 --ntokens 10 --scale 0.3 > /dev/null || { echo "FAIL: make-model"; exit 1; }
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
infer() { ./infer -e "$dir/m.bin" -k "$TOK" "$@"; }
status=0
ok() { echo "ok    $1"; }
bad() { echo "FAIL: $1"; status=1; }

# ---- 1. the same answers whatever the batch
"$PY" - "$dir/requests.jsonl" <<'EOF'
import json, sys
words = "the quick brown fox jumps over a lazy dog while seven old kings of distant lands watch".split()
reqs = []
for i in range(16):
    n = [1, 3, 40, 7, 12, 25, 2, 9, 33, 5, 18, 1, 14, 28, 6, 11][i]
    r = {"prompt": " ".join(words[(i + j) % len(words)] for j in range(n))}
    if i != 5: r["max_tokens"] = [1, 20, 10, 30, 4, 0, 16, 2, 25, 13, 7, 40, 9, 3, 22, 17][i]
    r["temperature"] = [0, 0.7, 1.3, 0, 1.0][i % 5]
    if i % 3 == 1: r["top_k"] = 40
    if i % 4 == 2: r["top_p"] = 0.9
    if i % 2 == 0: r["seed"] = 100 + i
    if i == 13: r["prompt"] = ""          # an empty prompt starts from end-of-text
    if i == 9: r["unknown_field"] = [1, 2]  # ignored
    reqs.append(r)
with open(sys.argv[1], "w") as f:
    for r in reqs: f.write(json.dumps(r) + "\n")
EOF
compare_answers() {  # WHAT A B [reverse]: every answer of A = B's (timings aside)
  "$PY" - "$@" <<'EOF'
import json, sys
what, a, b = sys.argv[1:4]
rev = len(sys.argv) > 4
A = [json.loads(l) for l in open(a)]
B = [json.loads(l) for l in open(b)]
if rev: B = B[::-1]
keys = ("text", "prompt_tokens", "completion_tokens", "finish_reason")
bad = [i for i, (x, y) in enumerate(zip(A, B)) if any(x[k] != y[k] for k in keys)]
if len(A) != len(B) or bad:
    print(f"FAIL: {what}: {len(A)} and {len(B)} answers, differing at {bad[:5]}")
    for i in bad[:2]: print("  ", A[i], "\n  ", B[i])
    sys.exit(1)
print(f"ok    {what}: {len(A)} answers identical")
EOF
}
infer -f "$dir/requests.jsonl" -b 1 > "$dir/b1.out" 2> "$dir/b1.err" || bad "-b 1 exits 0"
for run in "-b 8" "-b 16" "-b 8 -m 4"; do
  name=$(echo "$run" | tr -d ' -')
  # shellcheck disable=SC2086
  infer -f "$dir/requests.jsonl" $run > "$dir/$name.out" 2> "$dir/$name.err" || bad "$run exits 0"
  compare_answers "$run = -b 1" "$dir/b1.out" "$dir/$name.out" || status=1
done
tac "$dir/requests.jsonl" > "$dir/reversed.jsonl"
infer -f "$dir/reversed.jsonl" -b 8 > "$dir/rev.out" 2>/dev/null || bad "reversed exits 0"
compare_answers "the requests in reverse order, -b 8 = -b 1" "$dir/b1.out" "$dir/rev.out" reverse || status=1
grep -q "^batch: up to 8 sequences (-b 8)" "$dir/b8.err" && ok "-b 8 decodes 8 sequences together" ||
  { bad "-b 8 never ran 8 sequences together"; cat "$dir/b8.err"; }

# ---- 2. the answers themselves
"$PY" - "$dir/requests.jsonl" "$dir/b8.out" <<'EOF' || status=1
import json, sys
reqs = [json.loads(l) for l in open(sys.argv[1])]
ans = [json.loads(l) for l in open(sys.argv[2])]
errs = []
if [a.get("id") for a in ans] != list(range(len(reqs))): errs.append("ids are not 0..15 in order")
for r, a in zip(reqs, ans):
    n, m = a["completion_tokens"], r.get("max_tokens", 0) or 64 - a["prompt_tokens"]
    if a["finish_reason"] not in ("stop", "length"): errs.append(f"{a['id']}: finish_reason {a['finish_reason']}")
    if a["finish_reason"] == "length" and n != m: errs.append(f"{a['id']}: length after {n} of {m} tokens")
    if a["finish_reason"] == "stop" and n >= m: errs.append(f"{a['id']}: stop after {n} of {m} tokens")
    if not (0 <= a["ttft_ms"] <= a["total_ms"]): errs.append(f"{a['id']}: ttft {a['ttft_ms']} total {a['total_ms']}")
    if a["prompt_tokens"] < 1: errs.append(f"{a['id']}: prompt_tokens {a['prompt_tokens']}")
if ans[0]["completion_tokens"] != 1: errs.append("max_tokens 1 gave %d tokens" % ans[0]["completion_tokens"])
if ans[13]["prompt_tokens"] != 1: errs.append("an empty prompt is not end-of-text alone")
print("FAIL: " + "; ".join(errs) if errs else "ok    16 answers in order, each finish_reason and count consistent")
sys.exit(1 if errs else 0)
EOF
for name in b8 b8m4; do
  peak=$(sed -n 's/^kv pages: peak \([0-9]*\) of \([0-9]*\) in use.*/\1 \2/p' "$dir/$name.err")
  read -r p total <<< "${peak:-x x}"
  if [ -n "$peak" ] && [ "$p" -ge 1 ] && [ "$p" -le "$total" ]; then ok "$name: peak pages $p of $total reported"
  else bad "$name: no 'kv pages: peak N of M' report within the pool"; cat "$dir/$name.err"; fi
done
grep -q "^kv pages: peak [1-4] of 4 in use" "$dir/b8m4.err" && ok "-m 4: a pool of 4 pages is never exceeded" ||
  bad "-m 4: pool exceeded or not reported"

# ---- 3. greedy tokens = PyTorch's
prompts=("The history of the city" "Once upon a time there was" "In 1998, the" "A" "quick brown fox jumps over the lazy")
: > "$dir/greedy.jsonl"; : > "$dir/greedy.ids"
for p in "${prompts[@]}"; do
  printf '%s' "$p" > "$dir/p.txt"
  ./tokenizer -k "$TOK" encode "$dir/p.txt" >> "$dir/greedy.ids" && echo >> "$dir/greedy.ids"
  "$PY" -c 'import json, sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": 20, "temperature": 0}))' "$p" >> "$dir/greedy.jsonl"
done
"$PY" dev/reference/gpt2_ref.py greedy --model "$dir/m.bin" --prompts "$dir/greedy.ids" --out "$dir/torch.ids" --n 20 ||
  bad "gpt2_ref.py greedy"
infer -f "$dir/greedy.jsonl" -b 4 > "$dir/greedy.out" 2>/dev/null || bad "greedy -b 4 exits 0"
# the texts of PyTorch's tokens, as ./tokenizer decodes them
: > "$dir/torch.texts"
while IFS= read -r ids; do
  printf '%s' "$ids" | ./tokenizer -k "$TOK" decode | "$PY" -c 'import sys, json; print(json.dumps(sys.stdin.buffer.read().decode("utf-8", "replace")))' >> "$dir/torch.texts"
done < "$dir/torch.ids"
"$PY" - "$dir/greedy.out" "$dir/torch.texts" "$dir/torch.ids" <<'EOF' || status=1
import json, sys
ours = [json.loads(l)["text"] for l in open(sys.argv[1])]
theirs = [json.loads(l) for l in open(sys.argv[2])]
n = sum(len(l.split()) for l in open(sys.argv[3]))
if ours != theirs or len(ours) != 5:
    print("FAIL: greedy tokens differ from PyTorch's:")
    for a, b in zip(ours, theirs): print("   ours ", repr(a), "\n   torch", repr(b))
    sys.exit(1)
print(f"ok    greedy generation of 5 prompts at -b 4 = PyTorch's greedy ({n} tokens)")
EOF

# ---- 4. one prompt = the same request in a file
infer -p "The history of the city" -n 20 -T 0 > "$dir/one.out" 2>/dev/null || bad "-p exits 0"
"$PY" - "$dir/one.out" "$dir/greedy.out" <<'EOF' || status=1
import json, sys
one = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
first = json.loads(open(sys.argv[2]).readline())["text"]
if one != first + "\n":
    print(f"FAIL: -p printed {one!r}, -f answered {first!r}"); sys.exit(1)
print("ok    -p prints what -f answers for the same request")
EOF

# ---- 5. bad requests
long=$(printf 'word %.0s' $(seq 70))
cat > "$dir/mixed.jsonl" <<EOF
{"prompt": "good one", "max_tokens": 3, "temperature": 0}
{"prompt": "unterminated
[1, 2, 3]
{"max_tokens": 5}
{"prompt": "$long", "max_tokens": 2}
{"prompt": "x", "max_tokens": -1}
{"prompt": "x", "max_tokens": 100000}
{"prompt": "x", "temperature": "hot"}
{"prompt": "x", "top_p": 2}
{"prompt": 42}

{"prompt": "good two", "max_tokens": 2, "temperature": 0}
EOF
infer -f "$dir/mixed.jsonl" -b 4 > "$dir/mixed.out" 2> "$dir/mixed.err"
rc=$?
[ $rc -eq 1 ] && ok "a file with bad requests exits 1" || bad "a file with bad requests exits $rc, not 1"
"$PY" - "$dir/mixed.out" <<'EOF' || status=1
import json, sys
ans = [json.loads(l) for l in open(sys.argv[1])]
want = {1: "", 2: "JSON", 3: "object", 4: "prompt", 5: "context", 6: "max_tokens", 7: "context",
        8: "temperature", 9: "top_p", 10: "prompt", 12: ""}
errs = []
if len(ans) != 11: errs.append(f"{len(ans)} records for 11 requests")
for a in ans:
    line = a.get("line")
    if "error" in a:
        if line not in want or not want[line] or want[line].lower() not in a["error"].lower():
            errs.append(f"line {line}: error {a['error']!r}")
    elif "text" not in a or a["id"] not in (0, 10):
        errs.append(f"unexpected record {a}")
if [a["id"] for a in ans] != list(range(11)): errs.append("ids not in order")
print("FAIL: " + "; ".join(errs) if errs else "ok    9 bad requests: an error record each, naming its line; the 2 good ones answered")
sys.exit(1 if errs else 0)
EOF
printf '{"prompt": "a", "max_tokens": 2}' | infer -f - -T 0 > "$dir/stdin.out" 2>/dev/null &&
  grep -q '"completion_tokens": 2' "$dir/stdin.out" && ok "-f - reads standard input; a last line without newline counts" ||
  bad "-f - with a last line without newline"

# ---- 6. stop strings: the greedy answers of part 3 again, each with stop strings taken from its
# own text; the answer must be that text cut before the string's first occurrence, with the tokens
# up to the one that completed it, finish_reason "stop"; a string that never occurs changes nothing
"$PY" - "$TOK" "$dir/greedy.jsonl" "$dir/torch.ids" "$dir/greedy.out" "$dir/stop.jsonl" "$dir/stop.want" <<'EOF' || status=1
import json, struct, sys
tok, prompts, ids, answers, out_requests, out_want = sys.argv[1:7]
raw = open(tok, "rb").read()  # doc/formats.md, section 4: 256 int32, then a length byte and the bytes of each id
pieces, pos = [], 1024
for _ in range(struct.unpack("<256i", raw[:1024])[2]):
    pieces.append(raw[pos + 1:pos + 1 + raw[pos]])
    pos += 1 + raw[pos]
reqs, wants = [], []
for prompt, line, answer in zip(open(prompts), open(ids), open(answers)):
    prompt, answer = json.loads(prompt)["prompt"], json.loads(answer)
    toks = [pieces[int(t)] for t in line.split()]
    text = b"".join(toks)
    if text.decode("utf-8", "replace") != answer["text"]:
        print("FAIL: the tokens of part 3 are not the text answered"); sys.exit(1)
    ends = [sum(len(t) for t in toks[:k + 1]) for k in range(len(toks))]
    s = text.decode("utf-8")
    # a string across two tokens: the last characters of one and the first of the next, where the
    # pair first occurs (so the string is completed by a later token than the one it starts in)
    across = None
    for k in range(len(toks) // 2, len(toks) - 1):
        left, right = toks[k].decode("utf-8", "ignore"), toks[k + 1].decode("utf-8", "ignore")
        for m in (1, 2):
            cand = (left[-m:] + right[:1]).encode()
            if left and right and text.find(cand) == ends[k] - len(left[-m:].encode()):
                across = left[-m:] + right[:1]
                break
        if across: break
    if across is None:
        print("FAIL: no string across two tokens found in", repr(s)); sys.exit(1)
    never = "@@@"
    assert never not in s
    for stop in (s[len(s) // 2], s[len(s) // 3:len(s) // 3 + 2], s[2 * len(s) // 3:2 * len(s) // 3 + 3], across,
                 never, [never, across]):
        strings = stop if isinstance(stop, list) else [stop]
        found = [(text.find(x.encode()), x) for x in strings if text.find(x.encode()) >= 0]
        if found:
            at, x = min(found)
            done = at + len(x.encode())
            want = {"text": text[:at].decode("utf-8", "replace"), "finish_reason": "stop",
                    "completion_tokens": next(k + 1 for k in range(len(toks)) if ends[k] >= done)}
        else:
            want = {k: answer[k] for k in ("text", "finish_reason", "completion_tokens")}
        reqs.append({"prompt": prompt, "max_tokens": 20, "temperature": 0, "stop": stop})
        wants.append(want)
with open(out_requests, "w") as f:
    for r in reqs: f.write(json.dumps(r) + "\n")
with open(out_want, "w") as f:
    for w in wants: f.write(json.dumps(w) + "\n")
EOF
infer -f "$dir/stop.jsonl" -b 4 > "$dir/stop.out" 2>/dev/null || bad "stop strings -b 4 exits 0"
"$PY" - "$dir/stop.jsonl" "$dir/stop.out" "$dir/stop.want" "$dir/greedy.out" <<'EOF' || status=1
import json, sys
reqs = [json.loads(l) for l in open(sys.argv[1])]
got = [json.loads(l) for l in open(sys.argv[2])]
want = [json.loads(l) for l in open(sys.argv[3])]
full = {json.loads(l)["id"]: json.loads(l) for l in open(sys.argv[4])}
errs = []
for i, (r, g, w) in enumerate(zip(reqs, got, want)):
    if any(g.get(k) != w[k] for k in w):
        errs.append(f"stop {r['stop']!r}: got {[g.get(k) for k in w]}, want {list(w.values())}")
    if g.get("completion_tokens", 99) > full[i // 6]["completion_tokens"]:
        errs.append(f"stop {r['stop']!r}: more tokens than without it")
if len(got) != len(reqs): errs.append(f"{len(got)} answers to {len(reqs)} requests")
cut = sum(w["finish_reason"] == "stop" for w in want)
if errs:
    print("FAIL: stop strings:"); [print("  ", e) for e in errs[:6]]; sys.exit(1)
print(f"ok    stop strings: {len(reqs)} greedy requests, {cut} cut before the first occurrence of a string of 1 to 3 "
      f"characters (one across two tokens each), finish_reason stop; one that never occurs changes nothing")
EOF

# ---- 7. bf16: batch invariance, agreement with fp32, the header line, --serve
infer -w bf16 -f "$dir/requests.jsonl" -b 1 > "$dir/bf16_b1.out" 2> "$dir/bf16_b1.err" || bad "-w bf16 -b 1 exits 0"
grep -q "^model: .*, cpu, [0-9]* threads, bf16 (.*)$" "$dir/bf16_b1.err" &&
  ok "-w bf16: the header line says bf16 and what its products run on: $(sed -n 's/^model: .*threads, //p' "$dir/bf16_b1.err")" ||
  { bad "-w bf16: header line"; cat "$dir/bf16_b1.err"; }
for run in "-b 8" "-b 16" "-b 8 -m 4"; do
  name=bf16_$(echo "$run" | tr -d ' -')
  # shellcheck disable=SC2086
  infer -w bf16 -f "$dir/requests.jsonl" $run > "$dir/$name.out" 2> /dev/null || bad "-w bf16 $run exits 0"
  compare_answers "-w bf16 $run = -w bf16 -b 1" "$dir/bf16_b1.out" "$dir/$name.out" || status=1
done
infer -w bf16 -f "$dir/reversed.jsonl" -b 8 > "$dir/bf16_rev.out" 2>/dev/null || bad "-w bf16 reversed exits 0"
compare_answers "-w bf16, the requests in reverse order, -b 8 = -b 1" "$dir/bf16_b1.out" "$dir/bf16_rev.out" reverse || status=1
compare_answers "x" "$dir/b1.out" "$dir/bf16_b1.out" > /dev/null &&
  bad "-w bf16 answers all 16 requests exactly as fp32 does: are its products bf16?"
"$PY" -c 'import json, sys
for l in open(sys.argv[1]): r = json.loads(l); r["max_tokens"] = 1; print(json.dumps(r))' "$dir/greedy.jsonl" > "$dir/first.jsonl"
infer -f "$dir/first.jsonl" -b 4 > "$dir/first32.out" 2>/dev/null
infer -w bf16 -f "$dir/first.jsonl" -b 4 > "$dir/first16.out" 2>/dev/null
infer -w bf16 -f "$dir/greedy.jsonl" -b 4 > "$dir/greedy16.out" 2>/dev/null || bad "-w bf16 greedy -b 4 exits 0"
"$PY" - "$dir/first32.out" "$dir/first16.out" "$dir/greedy.out" "$dir/greedy16.out" <<'EOF' || status=1
import json, sys
f32, f16, g32, g16 = ([json.loads(l) for l in open(p)] for p in sys.argv[1:5])
if len(f16) != 5 or len(g16) != 5: print(f"FAIL: bf16 gave {len(f16)} and {len(g16)} answers to 5"); sys.exit(1)
agree = total = 0
for a, b in zip(g32, g16):
    n = 0
    while n < min(len(a["text"]), len(b["text"])) and a["text"][n] == b["text"][n]: n += 1
    agree += n; total += len(a["text"])
print(f"       bf16 greedy text agreeing with fp32 before the first difference: {agree} of {total} characters "
      f"({100 * agree / total:.0f}%), 5 prompts of 20 tokens")
same = sum(a["text"] == b["text"] and a["completion_tokens"] == b["completion_tokens"] == 1 for a, b in zip(f32, f16))
if same < 5: print(f"FAIL: bf16's first greedy token = fp32's for {same} of 5 prompts"); sys.exit(1)
print("ok    -w bf16: every prompt's first greedy token = fp32's")
EOF

serve_bf16() {
  command -v curl > /dev/null || { echo "skipped --serve -w bf16: no curl"; return; }
  local pid port; pids=()
  trap 'kill -9 "${pids[@]}" 2>/dev/null' EXIT
  if ! serving "$dir/serve.err" ./infer -e "$dir/m.bin" -k "$TOK" -w bf16 -b 4 --serve 127.0.0.1:0; then
    echo "skipped --serve -w bf16: ./infer was built without libmicrohttpd (apt-get install libmicrohttpd-dev)"
    return
  fi
  [ -n "$port" ] || { bad "infer -w bf16 --serve did not start:"; cat "$dir/serve.err"; return; }
  local i=0 curls=()
  while IFS= read -r body; do
    curl -sS --max-time 120 -d "$body" "http://127.0.0.1:$port/v1/completions" > "$dir/serve$i.out" &
    curls+=($!); i=$((i + 1))
  done < "$dir/greedy.jsonl"
  wait "${curls[@]}"
  "$PY" - "$dir" "$dir/greedy16.out" <<'EOF' || status=1
import json, sys
d, want = sys.argv[1], [json.loads(l) for l in open(sys.argv[2])]
got = [json.load(open(f"{d}/serve{i}.out"))["choices"][0] for i in range(5)]
diff = [i for i in range(5) if got[i]["text"] != want[i]["text"]]
if diff: print(f"FAIL: --serve -w bf16 answers differ from -f -w bf16's at {diff}: {got[diff[0]]['text']!r}"); sys.exit(1)
print("ok    --serve -w bf16: 5 greedy requests sent at once = -f -w bf16's answers")
EOF
  grep -q "^model: .*, bf16 (" "$dir/serve.err" && ok "--serve -w bf16 says bf16 in its header line" ||
    { bad "--serve -w bf16: header line"; cat "$dir/serve.err"; }
  kill -TERM "$pid"
  wait "$pid" || bad "infer -w bf16 --serve: SIGTERM, exit status $?"
  trap - EXIT
}
serve_bf16
exit $status
