#!/usr/bin/env bash
# ./infer --serve, OpenAI's completions API over HTTP (gpt2/server.h), driven by curl and by OpenAI's
# client library, on a small random llm.c checkpoint with GPT-2's vocabulary (L=2 NH=4 C=64 maxT=64,
# "tiny.bin") and, where a request must last seconds, on a fresh random model of 8 layers (-e d8):
#   1. the endpoints: GET /health, /v1/models, /v1/models/NAME; a completion's shape (id, object,
#      created, model, choices, usage); a stream is server-sent events "data: {json}" with a blank
#      line after each, "data: [DONE]" last, its text that of the same request answered at once,
#      include_usage a last event with the usage; a prompt array with n: the choices in order, choice
#      i sampled with seed+i; stop strings: the text cut before one, finish_reason "stop", and no
#      part of it streamed; 16 requests at once whose choices end at their first token;
#   2. the server's answers are ./infer -f's for the same request lines (greedy, seeded sampling,
#      top-k, top-p, stop strings), one at a time, and 8 at once (4 streamed) on 4 slots;
#   3. a client that leaves mid-stream, or mid-answer, frees its slot and pages within a moment;
#   4. abuse: malformed HTTP, bad JSON, wrong types and ranges, a prompt too long for the context,
#      a body over 1 MiB, unknown paths, wrong methods, a wrong model, an unsupported field each
#      get their HTTP status and OpenAI's error object, and the server goes on serving; a full
#      queue (-q) answers 429 and a client gone from the queue leaves it; a request over its time
#      (-t) gets 503, or an error event when streamed; connections beyond -c are closed;
#   5. OpenAI's client library (npm openai, test/serve_client.js) gets the same text streamed and
#      not, and BadRequestError for a bad request;
#   6. SIGTERM lets requests in flight finish and exits 0; a second SIGTERM cuts them short, a
#      stream whose client reads nothing too; SIGINT on an idle server exits 0 at once.
set -u
. "$(dirname "$0")/lib.sh"
TOK=data/gpt2_tokenizer.bin
need_python numpy
command -v curl > /dev/null || { echo "skipped: no curl (apt-get install curl)"; exit 77; }
make -s infer tokenizer data >/dev/null || { echo "FAIL: make infer"; exit 1; }
fresh_dir serve
"$PY" dev/reference/gpt2_ref.py make-model --model "$dir/tiny.bin" --tokens "$dir/tok.bin" --V 50257 \
  --maxT 64 --L 2 --NH 4 --C 64 --ntokens 10 --scale 0.3 > /dev/null || { echo "FAIL: make-model"; exit 1; }
status=0
ok() { echo "ok    $1"; }
bad() { echo "FAIL: $1"; status=1; }
pids=()  # every process started in the background, killed at the end whatever happens
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done' EXIT

serve() {  # NAME MODEL FLAGS...: a server on a free port, its stderr in $dir/NAME.err; sets pid, url
  local name=$1 model=$2 port; shift 2
  if ! serving "$dir/$name.err" ./infer -e "$model" -k "$TOK" --serve 127.0.0.1:0 "$@"; then
    echo "skipped: ./infer was built without libmicrohttpd (bash test/setup.sh installs libmicrohttpd-dev; then make clean && make)"
    exit 77
  fi
  [ -n "$port" ] || { echo "FAIL: the server $name did not start:"; cat "$dir/$name.err"; exit 1; }
  url=http://127.0.0.1:$port
}
post() {  # NAME BODY [URL]: POST BODY to /v1/completions; the answer in $dir/NAME.out, its HTTP status in $dir/NAME.code
  : > "$dir/$1.out"
  curl -sS --max-time 60 -o "$dir/$1.out" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary "$2" "${3:-$url}/v1/completions" > "$dir/$1.code" 2> "$dir/$1.curl"
}
get() {  # NAME PATH [CURL FLAGS...]: the same for a GET (or what the flags ask)
  local name=$1 path=$2; shift 2
  : > "$dir/$name.out"
  curl -sS --max-time 60 -o "$dir/$name.out" -w '%{http_code}' "$@" "$url$path" > "$dir/$name.code" 2> "$dir/$name.curl"
}
alive() {  # the main server still answers, or the test ends here
  curl -s --max-time 5 -o /dev/null "$main_url/health" && return
  echo "FAIL: the server no longer answers; the end of its stderr:"; tail -5 "$dir/main.err"; exit 1
}
plus() {  # BODY FIELDS: the JSON object BODY with FIELDS added
  printf '%s, %s}' "${1%\}}" "$2"
}
stopped_within() {  # PID SECONDS: waits for PID to end; 0 if it did in time (its status in $rc)
  local i
  for _ in $(seq "$(( $2 * 20 ))"); do
    kill -0 "$1" 2>/dev/null || { wait "$1"; rc=$?; return 0; }
    sleep 0.05
  done
  return 1
}
exits_0_within() {  # PID SECONDS WHAT: PID, told to stop (at $start, from date +%s%N), ends within SECONDS with exit 0
  if stopped_within "$1" "$2"; then
    local ms=$(( ($(date +%s%N) - start) / 1000000 ))
    [ $rc -eq 0 ] && ok "$3: exit 0 after $ms ms" || bad "$3: exit status $rc"
  else
    bad "$3: still running $2 s later"
  fi
}
term_twice() {  # SIGTERM to the server $pid, and again 0.3 s later, at $start
  kill -TERM "$pid"
  sleep 0.3
  start=$(date +%s%N)
  kill -TERM "$pid"
}
health_within() {  # SECONDS CONDITION [SINCE]: polls /health until CONDITION (Python, of its JSON h) holds;
                   # prints how long that took from SINCE (date +%s.%N; default now), or /health when it did not
  "$PY" - "$url" "$@" <<'EOF'
import json, sys, time, urllib.request
url, limit, cond = sys.argv[1], float(sys.argv[2]), sys.argv[3]
since = float(sys.argv[4]) if len(sys.argv) > 4 else time.time()
while True:
    h = json.load(urllib.request.urlopen(url + "/health", timeout=5))
    if eval(cond): break
    if time.time() - since > limit: print(f"{h} after {limit} s"); sys.exit(1)
    time.sleep(0.02)
print(f"{1000 * (time.time() - since):.0f} ms")
EOF
}
IDLE='h["active"] == h["waiting"] == h["kv_pages_in_use"] == 0'

# What the Python checks share: an answer, read whether streamed or not, and OpenAI's error object.
cat > "$dir/serve_answers.py" <<'EOF'
import json, time

def events(raw):
    """The events of a stream, without the final [DONE]; ValueError unless it is server-sent events as
    OpenAI sends them: lines "data: JSON", each followed by a blank line, the last "data: [DONE]"."""
    if not raw.endswith("\n\n"): raise ValueError(f"the stream does not end with a blank line: {raw[-80:]!r}")
    blocks = raw[:-2].split("\n\n")
    for i, b in enumerate(blocks):
        if "\n" in b or not b.startswith("data: "): raise ValueError(f"event {i} is not one line 'data: ...': {b[:80]!r}")
    if blocks[-1] != "data: [DONE]": raise ValueError(f"the last event is {blocks[-1][:80]!r}, not data: [DONE]")
    if "data: [DONE]" in blocks[:-1]: raise ValueError("data: [DONE] before the end")
    return [json.loads(b[len("data: "):]) for b in blocks[:-1]]

class Answer:
    """An answer to POST /v1/completions: code (HTTP status), body (its JSON, or the list of events of a
    stream), texts, finish (by choice index), usage, error (OpenAI's error object, or a stream's error event)."""
    def __init__(self, dir, name):
        self.code = int(open(f"{dir}/{name}.code").read() or 0)
        raw = open(f"{dir}/{name}.out", "rb").read().decode("utf-8")
        self.stream = raw.startswith("data: ")
        self.texts, self.finish, self.usage, self.error, self.ids = {}, {}, None, None, set()
        if not self.stream:
            self.body = json.loads(raw) if raw else None
            if isinstance(self.body, dict) and "error" in self.body: self.error = self.body["error"]
            if isinstance(self.body, dict) and "choices" in self.body:
                for c in self.body["choices"]: self.texts[c["index"]], self.finish[c["index"]] = c["text"], c["finish_reason"]
                self.usage, self.ids = self.body["usage"], {self.body["id"]}
            return
        self.body = events(raw)
        for k, e in enumerate(self.body):
            if "error" in e:
                if k != len(self.body) - 1: raise ValueError("events after an error event")
                self.error = e["error"]; continue
            if e["object"] != "text_completion": raise ValueError(f"event {k}: object {e['object']!r}")
            self.ids.add(e["id"])
            if e.get("usage"):
                if e["choices"] or k != len(self.body) - 1: raise ValueError(f"event {k}: usage with choices, or not last")
                self.usage = e["usage"]
            for c in e["choices"]:
                i = c["index"]
                if i in self.finish: raise ValueError(f"event {k}: choice {i} goes on after its finish_reason")
                self.texts[i] = self.texts.get(i, "") + c["text"]
                if c["finish_reason"] is not None: self.finish[i] = c["finish_reason"]
        if len(self.ids) > 1: raise ValueError(f"events with different ids: {self.ids}")

    def choices(self):
        return [(self.texts[i], self.finish.get(i)) for i in sorted(self.texts)]

def is_error(a, status, param=None, code=None):
    """a is answered with HTTP status and OpenAI's error object, naming param and code when given."""
    e = a.error
    return (a.code == status and isinstance(e, dict) and isinstance(e.get("message"), str) and e["message"] != ""
            and isinstance(e.get("type"), str) and "param" in e and "code" in e
            and (param is None or e["param"] == param) and (code is None or e["code"] == code))
EOF
expect() {  # NAME CONDITION WHAT: CONDITION (Python, of the answer a of NAME: serve_answers.py) holds
  "$PY" - "$dir" "$@" <<'EOF' || status=1
import sys
sys.path.insert(0, sys.argv[1])
from serve_answers import *
dir, name, cond, what = sys.argv[1:5]
try:
    a = Answer(dir, name)
    good, why = eval(f"({cond})"), ""
except Exception as e:
    good, why = False, f" ({type(e).__name__}: {e})"
if good: print(f"ok    {what}")
else:
    print(f"FAIL: {what}{why}: HTTP {open(f'{dir}/{name}.code').read()} {open(f'{dir}/{name}.out', 'rb').read()[:400]!r}")
    sys.exit(1)
EOF
}
same_as_file() {  # WHAT FOUT NAME...: answer k of NAMEs (choice 0, streamed or not) = line k of ./infer -f's output FOUT
  "$PY" - "$dir" "$@" <<'EOF' || status=1
import json, sys
sys.path.insert(0, sys.argv[1])
from serve_answers import *
dir, what, fout, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
want = [json.loads(l) for l in open(fout)]
errs = []
for k, (name, w) in enumerate(zip(names, want)):
    try:
        a = Answer(dir, name)
        got = (a.code, a.texts.get(0), a.finish.get(0), a.usage and a.usage["completion_tokens"])
        if got != (200, w["text"], w["finish_reason"], a.usage and w["completion_tokens"]): errs.append(f"{name}: {got}, -f: {w}")
    except Exception as e:
        errs.append(f"{name}: {type(e).__name__}: {e}")
if len(names) != len(want) or errs:
    print(f"FAIL: {what}: {len(names)} answers, -f gave {len(want)}"); [print("  ", e) for e in errs[:3]]; sys.exit(1)
print(f"ok    {what}: {len(names)} answers = ./infer -f's, text, finish_reason and tokens")
EOF
}

# ---- 1. the endpoints
serve main "$dir/tiny.bin" -b 4
main_pid=$pid main_url=$url
get health /health
expect health 'a.code == 200 and a.body["status"] == "ok" and a.body["model"] == "tiny.bin" and a.body["slots"] == 4 and
  a.body["active"] == a.body["waiting"] == a.body["kv_pages_in_use"] == a.body["requests"] == 0 and a.body["kv_pages"] > 0' \
  "GET /health: status ok, model tiny.bin, 4 slots, nothing in use"
get models /v1/models
expect models 'a.code == 200 and a.body["object"] == "list" and [(m["id"], m["object"]) for m in a.body["data"]] == [("tiny.bin", "model")]' \
  "GET /v1/models lists tiny.bin"
get model /v1/models/tiny.bin
expect model 'a.code == 200 and a.body["id"] == "tiny.bin" and a.body["object"] == "model" and type(a.body["created"]) is int and "owned_by" in a.body' \
  "GET /v1/models/tiny.bin: the model object"

G='{"model": "tiny.bin", "prompt": "The history of the city", "max_tokens": 24, "temperature": 0}'
post greedy "$G"
post greedy_stream "$(plus "$G" '"stream": true, "stream_options": {"include_usage": true}')"
post greedy_stream_plain "$(plus "$G" '"stream": true')"
expect greedy 'a.code == 200 and a.body["id"].startswith("cmpl-") and a.body["object"] == "text_completion" and
  abs(a.body["created"] - time.time()) < 300 and a.body["model"] == "tiny.bin" and
  [sorted(c) for c in a.body["choices"]] == [["finish_reason", "index", "logprobs", "text"]] and
  a.body["choices"][0]["index"] == 0 and a.body["choices"][0]["logprobs"] is None and a.finish[0] == "length" and len(a.texts[0]) > 0 and
  a.usage == {"prompt_tokens": 5, "completion_tokens": 24, "total_tokens": 29}' \
  "a completion: id, object text_completion, created, model, choices [text, index, logprobs null, finish_reason], usage"
"$PY" - "$dir" <<'EOF' || status=1
import sys
sys.path.insert(0, sys.argv[1])
from serve_answers import *
dir = sys.argv[1]
whole, s, plain = Answer(dir, "greedy"), Answer(dir, "greedy_stream"), Answer(dir, "greedy_stream_plain")
errs = []
for a in (s, plain):
    if a.code != 200 or not a.stream: errs.append(f"HTTP {a.code}, streamed {a.stream}")
    if a.choices() != whole.choices(): errs.append(f"streamed {a.choices()}, at once {whole.choices()}")
    if len(a.body) < 10: errs.append(f"{len(a.body)} events for 24 tokens")
if s.usage != whole.usage: errs.append(f"include_usage: usage {s.usage}, at once {whole.usage}")
if any(e.get("usage", 0) is not None for e in s.body[:-1]): errs.append("include_usage: a chunk without \"usage\": null")
if plain.usage is not None or any("usage" in e for e in plain.body): errs.append("a usage without include_usage")
print("FAIL: stream: " + "; ".join(errs) if errs else f"ok    stream: {len(s.body) - 1} events 'data: {{json}}' and a blank line, "
      "'data: [DONE]' last; their text = the answer at once; include_usage: a last event with its usage")
# a stop string across two events' text, each piece plain ASCII: where the stream must hold text back
pieces = [e["choices"][0]["text"] for e in s.body[:-1]]
k = next(k for k in range(len(pieces) - 1) if all(len(p) >= 2 and p.isascii() for p in pieces[k:k + 2]))
stop = pieces[k][-2:] + pieces[k + 1][:2]
text = whole.texts[0]
open(f"{dir}/stop.json", "w").write(json.dumps(stop))
open(f"{dir}/stop_cut.json", "w").write(json.dumps(text[:text.index(stop)]))
sys.exit(1 if errs else 0)
EOF
STOP=$(cat "$dir/stop.json")
GS=$(plus "$G" "\"stop\": [\"@@never@@\", $STOP]")
post stop "$GS"
post stop_stream "$(plus "$GS" '"stream": true')"
post stop_one "$(plus "$G" "\"stop\": $STOP, \"stream\": true")"
cut=$(cat "$dir/stop_cut.json")
for name in stop stop_stream stop_one; do
  expect $name "a.code == 200 and a.choices() == [($cut, \"stop\")]" "$name: stop $STOP (across two events): the text cut before it, finish_reason stop"
done

A='{"prompt": ["The history of the city", "Once upon a time"], "n": 3, "max_tokens": 12, "temperature": 0.9, "seed": 7}'
post array "$A"
post array_stream "$(plus "$A" '"stream": true, "stream_options": {"include_usage": true}')"
"$PY" -c '
import json
for i in range(6):
    print(json.dumps({"prompt": ["The history of the city", "Once upon a time"][i // 3], "max_tokens": 12, "temperature": 0.9, "seed": 7 + i}))
' > "$dir/array.jsonl"
./infer -e "$dir/tiny.bin" -k "$TOK" -f "$dir/array.jsonl" -b 1 > "$dir/array_f.out" 2> /dev/null || bad "./infer -f array.jsonl"
"$PY" - "$dir" <<'EOF' || status=1
import json, sys
sys.path.insert(0, sys.argv[1])
from serve_answers import *
dir = sys.argv[1]
whole, s = Answer(dir, "array"), Answer(dir, "array_stream")
f = [json.loads(l) for l in open(f"{dir}/array_f.out")]
errs = []
if [c["index"] for c in whole.body["choices"]] != list(range(6)): errs.append("choices not indexed 0..5 in order")
if whole.choices() != [(x["text"], x["finish_reason"]) for x in f]: errs.append(f"choices {whole.choices()}, -f {f}")
if s.choices() != whole.choices(): errs.append("streamed choices differ from those at once")
if len(set(whole.texts.values())) < 5: errs.append("the sampled choices are alike")
want_usage = {"prompt_tokens": f[0]["prompt_tokens"] + f[3]["prompt_tokens"], "completion_tokens": sum(x["completion_tokens"] for x in f)}
want_usage["total_tokens"] = want_usage["prompt_tokens"] + want_usage["completion_tokens"]
if whole.usage != want_usage or s.usage != want_usage: errs.append(f"usage {whole.usage} and {s.usage}, want {want_usage}")
print("FAIL: prompt array with n 3: " + "; ".join(errs) if errs else "ok    2 prompts with n 3: 6 choices in order, choice i "
      "= ./infer -f with seed 7+i, streamed the same, usage summed")
sys.exit(1 if errs else 0)
EOF
# choices done at their first token, many at once (the engine finishes them as it admits them)
bg=()
for k in $(seq 16); do post "first$k" '{"prompt": "x", "max_tokens": 1, "n": 2}' & bg+=($!); done
wait "${bg[@]}"
"$PY" - "$dir" <<'EOF' || status=1
import sys
sys.path.insert(0, sys.argv[1])
from serve_answers import *
a = [Answer(sys.argv[1], f"first{k}") for k in range(1, 17)]
bad = [x.code for x in a if x.code != 200 or x.usage["completion_tokens"] != 2 or len(x.choices()) != 2]
print(f"FAIL: 16 requests of max_tokens 1 at once: {bad}" if bad else "ok    16 requests at once, each 2 choices of max_tokens 1: all answered")
sys.exit(1 if bad else 0)
EOF
post unseeded1 '{"prompt": "A", "max_tokens": 16}'
post unseeded2 '{"prompt": "A", "max_tokens": 16}'
expect unseeded2 "a.code == 200 and a.texts != Answer('$dir', 'unseeded1').texts" "two requests without a seed sample differently"

alive

# ---- 2. the server's answers = ./infer -f's
{
  echo '{"prompt": "The history of the city", "max_tokens": 24, "temperature": 0}'
  echo '{"prompt": "Once upon a time there was", "max_tokens": 30, "temperature": 0.9, "seed": 11}'
  echo '{"prompt": "In 1998, the", "max_tokens": 30, "temperature": 1.2, "top_k": 40, "seed": 12}'
  echo '{"prompt": "A", "max_tokens": 30, "top_p": 0.8, "seed": 13}'
  echo "{\"prompt\": \"The history of the city\", \"max_tokens\": 24, \"temperature\": 0, \"stop\": $STOP}"
  echo '{"prompt": "quick brown fox", "max_tokens": 30, "temperature": 1, "seed": 15, "stop": ["e", "zzz"]}'
  echo '{"prompt": "", "max_tokens": 10, "temperature": 0}'
  echo '{"prompt": "\u00dcn\u00efc\u00f6d\u00e9 \u2014 \u2713 \"quoted\"\n", "max_tokens": 25, "temperature": 0.8, "seed": 17}'
} > "$dir/requests.jsonl"
./infer -e "$dir/tiny.bin" -k "$TOK" -f "$dir/requests.jsonl" -b 1 > "$dir/tiny_f.out" 2> /dev/null || bad "./infer -f requests.jsonl"
names=()
k=0
while IFS= read -r line; do post "one$k" "$line"; names+=("one$k"); k=$((k + 1)); done < "$dir/requests.jsonl"
same_as_file "8 requests one at a time (greedy, sampled with seeds, top-k, top-p, stop strings, an empty prompt)" \
  "$dir/tiny_f.out" "${names[@]}"

alive

# 8 at once on 4 slots, the even ones streamed, on a model slow enough (d8) that they overlap
serve long d8 -b 4
./infer -e d8 -k "$TOK" -f "$dir/requests.jsonl" -b 1 > "$dir/d8_f.out" 2> /dev/null || bad "./infer -e d8 -f requests.jsonl"
names=(); bg=()
k=0
while IFS= read -r line; do
  [ $((k % 2)) -eq 0 ] && line=$(plus "$line" '"stream": true, "stream_options": {"include_usage": true}')
  post "many$k" "$line" & bg+=($!)
  names+=("many$k"); k=$((k + 1))
done < "$dir/requests.jsonl"
wait "${bg[@]}"
same_as_file "d8, 8 requests at once on 4 slots (the even ones streamed)" "$dir/d8_f.out" "${names[@]}"
get long_health /health
expect long_health 'a.body["kv_pages_peak"] > 3 and a.body["requests"] == 8 and a.body["failed"] == 0 and a.body["kv_pages_in_use"] == 0' \
  "/health after them: 8 requests, none failed, more pages at the peak than one request's (they ran together), none in use"

# ---- 3. clients that leave
: > "$dir/left.out"
curl -sSN --max-time 60 -d '{"prompt": "Once", "max_tokens": 1000, "temperature": 0, "stream": true}' \
  "$url/v1/completions" > "$dir/left.out" 2>/dev/null &
cpid=$!; pids+=("$cpid")
for _ in $(seq 200); do [ "$(grep -c '^data: ' "$dir/left.out")" -ge 3 ] && break; sleep 0.05; done
start=$(date +%s.%N)
kill "$cpid"
events=$(grep -c '^data: ' "$dir/left.out")
took=$(health_within 2 "$IDLE" "$start") && ok "a client killed after $events events of a stream of 1000 tokens: no sequence, no page in use $took later" ||
  bad "a client killed mid-stream: $took"
"$PY" - "$url" <<'EOF' && ok "a client that closes its socket while waiting for an answer at once: slot and pages freed" || status=1
import json, socket, sys, time, urllib.request
url = sys.argv[1]
host, port = url[len("http://"):].split(":")
health = lambda: json.load(urllib.request.urlopen(url + "/health", timeout=5))
body = b'{"prompt": "Once", "max_tokens": 1000, "temperature": 0}'
s = socket.create_connection((host, int(port)))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
start = time.time()
while health()["active"] == 0 and time.time() - start < 5: time.sleep(0.02)
h = health()
s.close()
if h["active"] != 1: print(f"FAIL: the request never ran: {h}"); sys.exit(1)
while time.time() - start < 3 and (h := health())["active"] + h["kv_pages_in_use"] > 0: time.sleep(0.02)
if h["active"] + h["kv_pages_in_use"] > 0: print(f"FAIL: a client gone, its sequence is still there: {h}"); sys.exit(1)
EOF
get long_after /health
expect long_after 'a.body["failed"] == 2 and a.body["requests"] == 10' "/health counts the 2 requests whose client left as failed"
post long_still '{"prompt": "The history of the city", "max_tokens": 24, "temperature": 0}'
same_as_file "the server answers after them" <(head -1 "$dir/d8_f.out") long_still
kill -TERM "$pid"

# ---- 4. abuse
url=$main_url
"$PY" - "$url" <<'EOF' || status=1
import socket, sys, time
host, port = sys.argv[1][len("http://"):].split(":")
def raw(data, wait=0.3):  # what the server sends back before it closes (or wait runs out)
    s = socket.create_connection((host, int(port)), timeout=wait)
    out = b""
    try:
        s.sendall(data)
        while (b := s.recv(65536)): out += b
    except OSError: pass
    s.close()
    return out
big = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n"
cases = [("a garbage request line", b"GARBAGE\r\n\r\n", b""),
         ("binary junk", bytes(range(256)) * 4, b""),
         ("a header of 200 kB", big, b"HTTP/1.1 431"),
         ("a negative Content-Length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", b"HTTP/1.1 400"),
         ("bad chunked encoding", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", b"HTTP/1.1 400"),
         ("a body shorter than its Content-Length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\": ", b""),
         ("a request line without its end", b"GET /health HTTP/1.1\r\nHost: x", b"")]
fails = [name for name, data, want in cases if not raw(data).startswith(want)]
# connections opened and dropped at once
for _ in range(20): socket.create_connection((host, int(port))).close()
print("FAIL: malformed HTTP: " + ", ".join(fails) if fails else "ok    malformed HTTP (garbage, junk, a 200 kB header: 431, a "
      "negative length, bad chunks, a short body, a cut request line, 20 connections dropped): answered or closed")
sys.exit(1 if fails else 0)
EOF
long=$(printf 'word %.0s' $(seq 80))
k=0
while IFS='|' read -r code param body; do
  post "bad$k" "$body"
  expect "bad$k" "is_error(a, $code, ${param:-None})" "${body:0:70}$([ ${#body} -gt 70 ] && echo ...) -> $code${param:+ param $param}"
  k=$((k + 1))
done <<EOF
400||{"prompt": "x"
400||
400||[1, 2]
400|"prompt"|{}
400|"prompt"|{"prompt": 42}
400|"prompt"|{"prompt": ["a", 5]}
400|"prompt"|{"prompt": []}
400|"prompt"|{"prompt": "$long"}
400|"max_tokens"|{"prompt": "$(printf 'word %.0s' $(seq 40))", "max_tokens": 40}
400|"max_tokens"|{"prompt": "x", "max_tokens": -1}
400|"max_tokens"|{"prompt": "x", "max_tokens": 1e30}
400|"max_tokens"|{"prompt": "x", "max_tokens": 2.5}
400|"temperature"|{"prompt": "x", "temperature": "hot"}
400|"temperature"|{"prompt": "x", "temperature": -1}
400|"top_p"|{"prompt": "x", "top_p": 2}
400|"top_k"|{"prompt": "x", "top_k": -3}
400|"seed"|{"prompt": "x", "seed": -1}
400|"n"|{"prompt": "x", "n": 0}
400|"n"|{"prompt": "x", "n": 1000}
400|"n"|{"prompt": ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q"], "n": 16}
400|"stream"|{"prompt": "x", "stream": "yes"}
400|"stop"|{"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}
400|"stop"|{"prompt": "x", "stop": 42}
400|"echo"|{"prompt": "x", "echo": true}
400|"logprobs"|{"prompt": "x", "logprobs": 5}
400|"best_of"|{"prompt": "x", "best_of": 3}
400|"prompt"|{"prompt": "x", "prompt": "y"}
404|"model"|{"model": "gpt-4", "prompt": "x"}
EOF
printf '{"prompt": "\xff\xfe"}' > "$dir/utf8.json"
post bad_utf8 "@$dir/utf8.json"
expect bad_utf8 'is_error(a, 400) and "UTF-8" in a.error["message"]' "a prompt of invalid UTF-8 -> 400"
post fine '{"prompt": "x", "max_tokens": 2, "echo": false, "logprobs": null, "best_of": 1, "frobnicate": {"a": [1, {}]}, "user": "me"}'
expect fine 'a.code == 200 and a.usage["completion_tokens"] == 2' "unknown fields are ignored, the unsupported ones at their neutral value accepted"
"$PY" -c 'import json; print(json.dumps({"prompt": "x" * (1 << 20)}))' > "$dir/big.json"
post big "@$dir/big.json"
expect big 'is_error(a, 413)' "a body over 1 MiB (with its Content-Length) -> 413"
curl -sS -o "$dir/big_chunked.out" -w '%{http_code}' -H 'Transfer-Encoding: chunked' --data-binary "@$dir/big.json" \
  "$url/v1/completions" > "$dir/big_chunked.code"
expect big_chunked 'is_error(a, 413)' "a body over 1 MiB in chunks -> 413"
for case in "404 /v1/chat/completions" "404 /" "404 /v1/models/gpt-4 model" "405 /v1/completions" "405 /health -X POST" \
            "405 /v1/models -X DELETE"; do
  read -r code path rest <<< "$case"
  param=None; [ "$rest" = model ] && { param='"model"'; rest=""; }
  # shellcheck disable=SC2086
  get "path$code" "$path" $rest
  expect "path$code" "is_error(a, $code, $param)" "${rest:-GET} $path -> $code"
done

alive

# a full queue: 1 slot and 1 choice waiting, 5 requests at once on d8
serve queue d8 -b 1 -q 1
bg=()
for k in 1 2 3 4 5; do post "queue$k" '{"prompt": "Once", "max_tokens": 150, "temperature": 0}' & bg+=($!); done
wait "${bg[@]}"
"$PY" - "$dir" <<'EOF' || status=1
import sys
sys.path.insert(0, sys.argv[1])
from serve_answers import *
a = [Answer(sys.argv[1], f"queue{k}") for k in range(1, 6)]
done = [x for x in a if x.code == 200]
full = [x for x in a if is_error(x, 429, None, "queue_full") and x.error["type"] == "rate_limit_error"]
texts = {x.choices()[0] for x in done}
if len(done) < 2 or not full or len(done) + len(full) != 5 or len(texts) != 1 or done[0].usage["completion_tokens"] != 150:
    print(f"FAIL: -b 1 -q 1, 5 requests at once: {[x.code for x in a]}, {len(texts)} texts"); sys.exit(1)
print(f"ok    -b 1 -q 1, 5 requests at once: {len(done)} answered whole, {len(full)} refused with 429 and a rate_limit_error")
EOF
post queue_n '{"prompt": "Once", "n": 3}'
expect queue_n 'is_error(a, 400, "n")' "-b 1 -q 1: n 3 can never be taken -> 400 param n"
# a client that leaves while waiting in the queue
curl -sS --max-time 60 -d '{"prompt": "Once", "max_tokens": 1000, "temperature": 0}' "$url/v1/completions" > /dev/null 2>&1 &
first=$!; pids+=("$first")
sleep 0.3
curl -sS --max-time 60 -d '{"prompt": "Twice", "max_tokens": 1000, "temperature": 0}' "$url/v1/completions" > /dev/null 2>&1 &
second=$!; pids+=("$second")
took=$(health_within 2 'h["active"] == 1 and h["waiting"] == 1') && ok "-b 1: a second request waits for the slot" ||
  bad "-b 1: the second request is not waiting: $took"
start=$(date +%s.%N)
kill "$second"
took=$(health_within 1 'h["active"] == 1 and h["waiting"] == 0' "$start") &&
  ok "its client gone, it leaves the queue ($took later)" || bad "a client gone, its request still waits: $took"
start=$(date +%s.%N)
kill "$first"
took=$(health_within 2 "$IDLE" "$start") && ok "the first one's client gone too: nothing in use $took later" || bad "-b 1 -q 1: $took"
kill -TERM "$pid"

# the time limit, and the bound on connections
serve slow d8 -t 0.5 -c 2
start=$(date +%s%N)
post timeout '{"prompt": "Once", "max_tokens": 1000, "temperature": 0}'
ms=$(( ($(date +%s%N) - start) / 1000000 ))
expect timeout "is_error(a, 503, None, 'timeout') and a.error['type'] == 'server_error' and $ms < 3000" \
  "-t 0.5: a request of 1000 tokens -> 503 code timeout, after $ms ms"
post timeout_stream '{"prompt": "Once", "max_tokens": 1000, "temperature": 0, "stream": true}'
expect timeout_stream 'a.code == 200 and a.stream and len(a.body) > 2 and a.error is not None and a.error["code"] == "timeout" and a.finish == {}' \
  "-t 0.5, streamed: the events so far, then an error event with code timeout and data: [DONE]"
post in_time '{"prompt": "Once", "max_tokens": 4, "temperature": 0}'
expect in_time 'a.code == 200 and a.usage["completion_tokens"] == 4' "-t 0.5: a short request is answered"
took=$(health_within 2 "$IDLE") && ok "-t 0.5: nothing in use after the requests cut short" || bad "-t 0.5: $took"
"$PY" - "$url" <<'EOF' || status=1
import json, socket, sys, time, urllib.request
url = sys.argv[1]
host, port = url[len("http://"):].split(":")
idle = [socket.create_connection((host, int(port))) for _ in range(2)]
try:
    urllib.request.urlopen(url + "/health", timeout=5)
    print("FAIL: -c 2: a third connection is served"); sys.exit(1)
except OSError:
    pass
for s in idle: s.close()
for _ in range(100):  # once the server has seen them close
    try:
        if json.load(urllib.request.urlopen(url + "/health", timeout=5))["status"] == "ok": break
    except OSError:
        time.sleep(0.02)
else:
    print("FAIL: -c 2: the server does not answer after the 2 connections closed"); sys.exit(1)
print("ok    -c 2: with 2 connections open a third is closed; once they close, the server answers again")
EOF
kill -TERM "$pid"

# the main server after all that
url=$main_url
post after "$G"
expect after "a.code == 200 and a.choices() == Answer('$dir', 'greedy').choices()" "after the abuse, the same request gets the same text"
get after_health /health
expect after_health 'a.body["kv_pages_in_use"] == 0 and a.body["active"] == 0 and a.body["waiting"] == 0' \
  "after the abuse, /health: no page in use, nothing active or waiting"

# ---- 5. OpenAI's client library
if [ -d test/node_modules/openai ] && command -v node > /dev/null; then
  node test/serve_client.js "$url/v1" tiny.bin "$dir/greedy.out" || status=1
else
  echo "skipped: OpenAI's client library (test/node_modules/openai missing: bash test/setup.sh installs it)"
fi

# ---- 6. stopping
# SIGTERM with two requests in flight (one streamed): both finish, then exit 0
serve drain d8 -b 2
post drain1 '{"prompt": "Once", "max_tokens": 150, "temperature": 0}' & bg=($!)
post drain2 '{"prompt": "Once", "max_tokens": 150, "temperature": 0, "stream": true}' & bg+=($!)
took=$(health_within 5 'h["active"] == 2') || bad "SIGTERM with 2 requests in flight: they never ran together: $took"
start=$(date +%s%N)
kill -TERM "$pid"
sleep 0.2
curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$url/health" > "$dir/drain_new.code" 2>/dev/null
exits_0_within "$pid" 8 "SIGTERM with 2 requests in flight"
wait "${bg[@]}"
expect drain1 'a.code == 200 and a.finish == {0: "length"} and a.usage["completion_tokens"] == 150' \
  "a request in flight at SIGTERM: answered whole (150 tokens)"
expect drain2 "a.code == 200 and a.choices() == Answer('$dir', 'drain1').choices()" \
  "a stream in flight at SIGTERM: streamed whole, to data: [DONE]"
grep -qv 200 "$dir/drain_new.code" && ok "a new request while stopping is not served (HTTP $(cat "$dir/drain_new.code"))" ||
  bad "a new request while stopping got $(cat "$dir/drain_new.code")"
grep -q "^server: stopped after 2 requests (0 failed); kv pages: peak [0-9]* of [0-9]*, 0 in use$" "$dir/drain.err" &&
  ok "its last line: stopped after 2 requests (0 failed), 0 pages in use" || { bad "drain's last line"; tail -2 "$dir/drain.err"; }

# SIGTERM twice cuts a long request short
serve twice d8
: > "$dir/twice.out"
curl -sSN --max-time 60 -d '{"prompt": "Once", "max_tokens": 1000, "temperature": 0, "stream": true}' \
  "$url/v1/completions" > "$dir/twice.out" 2>/dev/null &
cpid=$!; pids+=("$cpid")
for _ in $(seq 200); do [ "$(grep -c '^data: ' "$dir/twice.out")" -ge 2 ] && break; sleep 0.05; done
term_twice
exits_0_within "$pid" 3 "a second SIGTERM cuts a request of 1000 tokens short"
wait "$cpid"
echo 200 > "$dir/twice.code"  # (curl -N wrote the stream only)
expect twice 'a.error is not None and a.error["code"] == "shutting_down" and a.finish == {}' \
  "the stream cut short ends with an error event, code shutting_down, and data: [DONE]"
grep -q "^server: stopped after 1 requests (1 failed)" "$dir/twice.err" && ok "its last line counts the request as failed" ||
  { bad "twice's last line"; tail -2 "$dir/twice.err"; }

# a stream whose client reads nothing, the server's socket to it full: a second SIGTERM stops all the same
serve stalled d1 -b 16
: > "$dir/stalled.log"
"$PY" - "$url" > "$dir/stalled.log" 2>&1 <<'EOF' &
import json, socket, sys, time, urllib.request
url = sys.argv[1]
host, port = url[len("http://"):].split(":")
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)  # a small window, and nothing read from it
s.connect((host, int(port)))
body = b'{"prompt": "Once", "max_tokens": 1000, "n": 16, "temperature": 0, "stream": true}'
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
start = time.time()
while time.time() - start < 20:  # until all 16 choices are done: some MB of events
    h = json.load(urllib.request.urlopen(url + "/health", timeout=5))
    if h["kv_pages_peak"] > 0 and h["active"] == 0: break
    time.sleep(0.05)
time.sleep(0.1)
# "requests" 0: the stream is not all sent, the server waits for room in the socket
print("ready", json.load(urllib.request.urlopen(url + "/health", timeout=5))["requests"], flush=True)
time.sleep(60)
EOF
spid=$!; pids+=("$spid")
for _ in $(seq 400); do grep -q ready "$dir/stalled.log" && break; sleep 0.05; done
if grep -q "^ready 0" "$dir/stalled.log"; then
  term_twice
  exits_0_within "$pid" 4 "a stream whose client reads nothing: a second SIGTERM still stops the server"
else
  echo "note: a stream whose client reads nothing: not checked, the sockets held all of it ($(cat "$dir/stalled.log"))"
  kill -TERM "$pid"
fi
kill "$spid"

# SIGINT on the idle main server
kill -INT "$main_pid"
if stopped_within "$main_pid" 2; then
  [ $rc -eq 0 ] && ok "SIGINT on an idle server: exit 0 at once" || bad "SIGINT: exit status $rc"
else
  bad "SIGINT on an idle server: still running 2 s later"
fi
grep -q "^server: stopped after [0-9]* requests ([0-9]* failed); kv pages: peak [0-9]* of [0-9]*, 0 in use$" "$dir/main.err" &&
  ok "its last line: $(tail -1 "$dir/main.err")" || { bad "main's last line"; tail -2 "$dir/main.err"; }
exit $status
