#!/usr/bin/env bash
# make bench-serve: ./infer --serve (gpt2/server.h) under load from real HTTP clients over
# loopback, against the offline engine (./infer -f) doing the same work at the same batch.
#
# For each number of clients C in CLIENTS:
#   offline  ./infer -e MODEL -f REQUESTS -b C -E 0 answers C * ROUNDS requests (the same short
#            prompt, TOKENS new tokens each, temperature 1, seeds 1 .. C * ROUNDS); its tok/s is
#            its report's: tokens generated / seconds from the engine's start to the last answer,
#            prefills included; its ms/token is from its answers' ttft_ms and total_ms, as below
#   server   ./infer -e MODEL --serve 127.0.0.1:0 -b C -E 0, and dev/bench/serve_load.js: C
#            clients (Node's fetch, one connection each), each sending ROUNDS streamed completions
#            back to back, the same C * ROUNDS requests; tok/s = tokens received / the wall time
#            from the first request sent to the last answer's end
# The server has C slots, one per client: a client has one request at a time, so none ever waits
# for a slot, and the server and the offline engine decode at most C sequences together, the
# same batch. -E 0 on both: end-of-text does not end a completion, so every request generates
# TOKENS tokens and the work is fixed (serve_load.js fails a request with fewer). The server's
# answers must equal the offline engine's, text for text (a request's tokens do not depend on
# what else runs: gpt2/engine.h), which checks that the work was the same and that the server
# streamed every byte.
#
# The table: tok/s of each, the server's as a % of the offline engine's (what the server costs:
# HTTP, a thread per connection, events, and the clients' own round trips between requests),
# and per request, from the client's side, the time to the first token and the time per token
# after it ((last event - first) / (tokens - 1)), p50 and p99 over the C * ROUNDS requests
# (nearest rank: below 100 requests, p99 is the largest). "offline ms/token p50" is the same
# figure for the offline engine's answers: both count the decode steps a sequence waits for and
# the prefills of the requests admitted meanwhile (a step admits waiting requests, prefilling
# each, before it decodes).
# The clients run on the same cores as the server: "client" is the share of all cores' time they
# used while they sent requests (Node's own count), and "others" the share that processes other
# than the server and the clients used during the server's run (the machine may be shared; a few
# % is noise: it counts what this script itself runs between the runs).
#
#   bash dev/bench/bench_serve.sh                 random GPT-2 124M weights (-e d12)
#   MODEL=data/gpt2_124M.safetensors bash dev/bench/bench_serve.sh    any model infer reads
#   knobs: TOKENS=64 (new tokens per request), CLIENTS="1 8 32 64", ROUNDS=4 (requests per
#          client), REPEATS=3 (sweeps; the table shows each C's median run of each, by tok/s),
#          TIMEOUT=300 (seconds each run may take, the server's start included), NODE=node
#          (Node.js 18 or newer)
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-d12}
TOKENS=${TOKENS:-64}
CLIENTS=${CLIENTS:-1 8 32 64}
ROUNDS=${ROUNDS:-4}
REPEATS=${REPEATS:-3}
TIMEOUT=${TIMEOUT:-300}
NODE=${NODE:-node}
PROMPT="The history of the city begins with a small settlement on the river, where"
die() { echo "bench_serve: $*" >&2; exit 1; }
[ -x ./infer ] || die "./infer not built (make infer)"
./infer -h 2>&1 | grep -q -- '--serve' || die "./infer has no --serve (an older build? make infer)"
node_major=$("$NODE" -p 'process.versions.node.split(".")[0]' 2>/dev/null) || die "no Node.js ($NODE): install Node 18 or newer, or give NODE=/path/to/node"
[ "$node_major" -ge 18 ] || die "Node $("$NODE" --version) has no built-in fetch: install Node 18 or newer"
for v in ROUNDS REPEATS TOKENS TIMEOUT; do
  [ "${!v}" -ge 1 ] 2>/dev/null || die "$v=${!v}: give a whole number, 1 or more"
done
[ "$TOKENS" -ge 2 ] || die "TOKENS=$TOKENS: give 2 or more (the time per token is measured between the first token and the last)"
for C in $CLIENTS; do [ "$C" -ge 1 ] 2>/dev/null || die "CLIENTS=\"$CLIENTS\": give whole numbers, 1 or more"; done
dir=build/bench/serve
mkdir -p "$dir"

# The server and its clients share the cores: as bench_infer.sh explains, OpenMP threads that
# spin while they wait would take them from the HTTP threads and the clients
[ -z "${OMP_WAIT_POLICY:-}" ] && export GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-3000}
cores=$(getconf _NPROCESSORS_ONLN)
hz=$(getconf CLK_TCK)
load() { cut -d' ' -f1 /proc/loadavg; }
load_before=$(load)
# cpu time, in clock ticks: all cores' busy time; this shell's reaped children's; one process's
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
child_ticks() { awk '{ print $16 + $17 }' /proc/$$/stat; }
proc_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
share() { awk -v t="$1" -v s="$2" -v hz="$hz" -v cores="$cores" 'BEGIN { o = 100 * t / hz / (s * cores); printf "%.0f%%", o < 0 ? 0 : o }'; }

server_pid=
stop_server() {
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
  fi
}
trap stop_server EXIT
trap 'exit 130' INT TERM

# ./infer --serve with C slots in the background; waits for its "serving ... on URL" line and sets
# $url (the server's base), or fails
start_server() {  # C ERR
  : > "$2"  # emptied here, not by the background job's redirection, which may come after the first look
  ./infer -e "$MODEL" --serve 127.0.0.1:0 -b "$1" -E 0 -t "$TIMEOUT" -c $(($1 + 64)) 2> "$2" &
  server_pid=$!
  local deadline=$((SECONDS + TIMEOUT))
  url=
  while [ -z "$url" ]; do
    url=$(sed -n 's/^serving .* on \(http:[^ ]*\) .*/\1/p' "$2")
    [ -n "$url" ] && break
    kill -0 "$server_pid" 2>/dev/null || { wait "$server_pid" || true; server_pid=; cat "$2" >&2; die "the server did not start"; }
    [ "$SECONDS" -lt "$deadline" ] || { cat "$2" >&2; die "the server did not say where it listens within $TIMEOUT s"; }
    sleep 0.2
  done
}

# a figure of serve_load.js's line, $line: get NAME
get() { echo "$line" | tr ' ' '\n' | sed -n "s/^$1=//p"; }

cpuinfo() { grep -m1 "^$1" /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'; }
echo "machine: $(cpuinfo 'model name') (family $(cpuinfo 'cpu family'), model $(cpuinfo 'model')), $cores cores; Node $("$NODE" --version); load average $load_before before the run"
echo "command: MODEL=$MODEL TOKENS=$TOKENS CLIENTS=\"$CLIENTS\" ROUNDS=$ROUNDS REPEATS=$REPEATS bash dev/bench/bench_serve.sh (what make bench-serve runs)"
echo "runs: for C in $CLIENTS: ./infer -e $MODEL -f REQUESTS -b C -E 0 with C x $ROUNDS requests" \
     "(\"$PROMPT\", $TOKENS new tokens, temperature 1, seeds 1..C*$ROUNDS), then ./infer -e $MODEL --serve 127.0.0.1:0" \
     "-b C -E 0 with C clients (dev/bench/serve_load.js) sending the same requests, $ROUNDS each, streamed;" \
     "$REPEATS sweep(s)"

# REPEATS sweeps over CLIENTS, each running the offline engine and then the server for every C;
# a C's row takes the median run of each by tok/s (its latencies from the same run). The sweeps
# alternate (1 8 32 64, 1 8 32 64, ...) so that a burst of other work disturbs one run of a C,
# not all of them: on a virtual machine even the memory bandwidth varies with the neighbours.
for C in $CLIENTS; do
  n=$((C * ROUNDS))
  for ((i = 1; i <= n; i++)); do
    printf '{"prompt": "%s", "max_tokens": %d, "temperature": 1, "seed": %d}\n' "$PROMPT" "$TOKENS" "$i"
  done > "$dir/requests_$C.jsonl"
done
declare -A off_runs=() srv_runs=()  # per C, a line per run: tok/s and the rest of its row
all_others=()  # "others" of every run, offline and server
for ((r = 1; r <= REPEATS; r++)); do
  sweep=""
  [ "$REPEATS" -gt 1 ] && sweep=" (sweep $r of $REPEATS)"
  for C in $CLIENTS; do
    n=$((C * ROUNDS))
    # offline, the same requests at the same batch
    l=$(load)
    t0=$EPOCHREALTIME; all0=$(busy_ticks); own0=$(child_ticks)
    timeout "$TIMEOUT" ./infer -e "$MODEL" -f "$dir/requests_$C.jsonl" -b "$C" -E 0 > "$dir/offline_$C.jsonl" 2> "$dir/offline_$C.err" ||
      { cat "$dir/offline_$C.err" >&2; die "./infer -e $MODEL -f $dir/requests_$C.jsonl -b $C -E 0 failed (or took over $TIMEOUT s)"; }
    secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')
    off_others=$(share $(( $(busy_ticks) - all0 - ($(child_ticks) - own0) )) "$secs")
    read -r req failed gen off_tps steps dsec < <(awk '
      /^requests:/ { req = $2; failed = substr($3, 2); gen = $8; tps = $(NF-1) }
      /^batch:/ { for (i = 1; i <= NF; i++) if ($i == "decode") { steps = $(i-1); dsec = $(i+3) } }
      END { print req, failed, gen, tps, steps, dsec }' "$dir/offline_$C.err")
    [ "$req" = "$n" ] && [ "$failed" = 0 ] && [ "$gen" = $((n * TOKENS)) ] ||
      die "offline -b $C answered $req requests ($failed failed) with $gen tokens, expected $n with $((n * TOKENS))"
    # its ms/token as the clients measure the server's: (last token - first) / (tokens - 1), p50
    off_ms=$(sed -n 's/.*"ttft_ms": \([0-9.]*\), "total_ms": \([0-9.]*\).*/\1 \2/p' "$dir/offline_$C.jsonl" |
               awk -v n="$TOKENS" '{ print ($2 - $1) / (n - 1) }' | sort -g | awk '{ v[NR] = $1 } END { printf "%.2f", v[int((NR + 1) / 2)] }')
    echo "  offline -b $C$sweep: $n requests, $gen tokens, $off_tps tok/s, ms/token p50 $off_ms;" \
         "decode steps $(awk -v s="$dsec" -v n="$steps" 'BEGIN { printf "%.2f", 1000 * s / n }') ms (load $l, others $off_others)"
    off_runs[$C]+="$off_tps $off_ms"$'\n'

    # the server, and C clients
    start_server "$C" "$dir/server_$C.err"
    l=$(load)
    t0=$EPOCHREALTIME; all0=$(busy_ticks); own0=$(child_ticks); srv0=$(proc_ticks "$server_pid")
    if ! timeout "$TIMEOUT" "$NODE" dev/bench/serve_load.js "$url" -c "$C" -r "$ROUNDS" -n "$TOKENS" -p "$PROMPT" -t "$TIMEOUT" \
           -o "$dir/server_$C.jsonl" -x "$dir/offline_$C.jsonl" > "$dir/load_$C.out" 2> "$dir/load_$C.err"; then
      cat "$dir/load_$C.out" "$dir/load_$C.err" >&2
      die "the clients failed against ./infer --serve -b $C (or took over $TIMEOUT s; the server's log: $dir/server_$C.err)"
    fi
    secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')
    srv=$(( $(proc_ticks "$server_pid") - srv0 )); client=$(( $(child_ticks) - own0 ))
    others=$(share $(( $(busy_ticks) - all0 - srv - client )) "$secs")
    stop_server
    grep -q "^server: stopped after $n requests (0 failed)" "$dir/server_$C.err" ||
      { cat "$dir/server_$C.err" >&2; die "the server -b $C did not stop cleanly after $n requests"; }
    line=$(cat "$dir/load_$C.out")
    client=$(awk -v c="$(get cpu_seconds)" -v s="$(get seconds)" -v cores="$cores" 'BEGIN { printf "%.0f%%", 100 * c / (s * cores) }')
    echo "  server -b $C$sweep: $n requests from $C client(s), $(get tokens) tokens in $(get events) events, $(get tok_s) tok/s," \
         "TTFT p50 $(get ttft_p50) p99 $(get ttft_p99) ms, per token p50 $(get per_token_p50) p99 $(get per_token_p99) ms," \
         "gaps between events p50 $(get gap_p50) p99 $(get gap_p99) max $(get gap_max) ms (load $l, others $others, client $client," \
         "server $(share "$srv" "$secs"))"
    all_others+=("$off_others" "$others")
    srv_runs[$C]+="$(get tok_s) $(get ttft_p50) $(get ttft_p99) $(get per_token_p50) $(get per_token_p99) $l $others $client"$'\n'
  done
done

median() { printf '%s' "$1" | sort -g -k1 | awk -v n="$REPEATS" 'NR == int((n + 1) / 2)'; }
rows=()  # per C: "C tok/s offline_tok/s ttft_p50 ttft_p99 per_token_p50 per_token_p99 offline_ms_token load others client"
for C in $CLIENTS; do
  read -r off_tps off_ms < <(median "${off_runs[$C]}")
  read -r tps rest < <(median "${srv_runs[$C]}")
  read -r t50 t99 p50 p99 l others client <<< "$rest"
  rows+=("$C $tps $off_tps $t50 $t99 $p50 $p99 $off_ms $l $others $client")
done

model_line=$(grep -m1 '^model:' "$dir/offline_$C.err")
echo
echo "== server: ./infer --serve against ./infer -f at the same batch ($model_line)$([ "$REPEATS" -gt 1 ] && echo "; each the median of $REPEATS runs")"
printf '%s\n' "${rows[@]}" | awk '
  BEGIN { printf "%7s %8s %13s %12s %8s %8s %13s %13s %20s %5s %6s %6s\n", "clients", "tok/s", "offline tok/s", "% of offline",
                 "TTFT p50", "TTFT p99", "ms/token p50", "ms/token p99", "offline ms/token p50", "load", "others", "client" }
  { printf "%7d %8.1f %13.1f %11.1f%% %8.1f %8.1f %13.2f %13.2f %20.2f %5.2f %6s %6s\n", $1, $2, $3, 100 * $2 / $3, $4, $5, $6, $7, $8,
           $9, $10, $11 }'
echo "(TTFT: ms from sending a request to its first token; ms/token: (last token - first) / (tokens - 1) per request; p50 and p99 over the requests)"
load_after=$(load)
echo "load average $load_before before, $load_after after, on $cores cores (includes this benchmark); OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-} GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-}"
busy=$(printf '%s\n' "${all_others[@]}" | awk '$1 + 0 > 10' | wc -l)
if [ "$busy" -gt 0 ]; then
  echo "warning: in $busy of ${#all_others[@]} runs other processes used over 10% of the cores (\"others\"; the offline" \
       "runs' are above): their figures are disturbed; rerun when the machine is idle"
fi
if awk -v l="$load_before" -v c="$cores" 'BEGIN {exit !(l > 0.5 * c)}'; then
  echo "warning: the machine was busy before the run (load $load_before on $cores cores): other jobs share the cores; rerun when it is idle"
fi
