#!/usr/bin/env bash
# Exercise 1 (README.md beside this file): the warmup-stable-decay schedule, -w N. Runs a tiny
# ./train_cpu with several schedules and compares the lr of every progress line with the formula
# of the README, computed here; without -w the cosine schedule must be as it was. Then
# key_check.c: -w must be part of train_config_key. Run from the root of the tree.
set -uo pipefail
here=doc/exercises/01-lr-schedule
out=build/exercises/01
mkdir -p "$out"
py=${PYTHON:-python3}

make -s train_cpu >"$out/make.log" 2>&1 || {
    echo "make train_cpu failed (the compiler's messages: $out/make.log):"; tail -n 5 "$out/make.log"; exit 1; }

# run NAME ARGS...: a tiny model for a few steps, no validation or samples; its output in $out/NAME.txt
run() {
    local name=$1; shift
    OMP_NUM_THREADS=1 ./train_cpu -e d1 -b 1 -t 8 -v 0 -s 0 "$@" >"$out/$name.txt" 2>&1 || {
        echo "./train_cpu $*: $(grep -m 1 error "$out/$name.txt" || tail -n 1 "$out/$name.txt")"
        echo "(the options -e d1 -b 1 -t 8 -v 0 -s 0 came first; see $here/README.md)"
        exit 1; }
}

# NAME: the options (also what the formula below reads; -w absent = cosine)
cases=(
    "wsd       -x 12 -u 3 -w 4 -q 0.1 -l 0.004"
    "nodecay   -x 6 -u 0 -w 0 -q 0.1 -l 0.003"
    "alldecay  -x 8 -u 0 -w 8 -q 0 -l 0.002"
    "halfway   -x 10 -u 2 -w 5 -q 0.5 -l 0.002"
    "cosine    -x 10 -u 3 -q 0.1 -l 0.004"
    "constant  -x 5"
)
for c in "${cases[@]}"; do
    # shellcheck disable=SC2086  # the options split into words on purpose
    run $c
done

"$py" - "$out" "${cases[@]}" <<'EOF' || exit 1
import math, re, sys

out = sys.argv[1]
for case in sys.argv[2:]:
    name, *args = case.split()
    opt = dict(zip(args[::2], args[1::2]))
    X, U = int(opt["-x"]), int(opt.get("-u", 0))
    lr, q = float(opt.get("-l", 1e-3)), float(opt.get("-q", 1))
    D = int(opt["-w"]) if "-w" in opt else None

    def expected(s):
        if s <= U:
            return lr * s / U
        if D is not None:  # warmup-stable-decay
            if s <= X - D:
                return lr
            return lr + (s - (X - D)) / D * (q * lr - lr)
        if q >= 1 or X <= U:  # cosine, as gpt2/run.h had it
            return lr
        return q * lr + 0.5 * (1 + math.cos(math.pi * (s - U) / (X - U))) * (lr - q * lr)

    got = {}
    for line in open(f"{out}/{name}.txt"):
        m = re.match(r"step\s+(\d+)/\d+ \|.*\| lr (\S+) \|", line)
        if m:
            got[int(m.group(1))] = float(m.group(2))
    cmd = "./train_cpu -e d1 -b 1 -t 8 -v 0 -s 0 " + " ".join(args)
    if sorted(got) != list(range(1, X + 1)):
        print(f"{cmd}: expected progress lines for steps 1..{X}, found {sorted(got)} (see {out}/{name}.txt)")
        sys.exit(1)
    want = {s: expected(s) for s in got}
    # the progress line prints lr with 3 digits (%.2e): 0.5% of rounding
    bad = [s for s in got if abs(got[s] - want[s]) > 6e-3 * abs(want[s]) + 1e-12]
    if bad:
        s = bad[0]
        what = "cosine schedule (no -w) has changed" if D is None else "schedule differs from the README's formula"
        print(f"{cmd}: the {what}: at step {s} the lr is {got[s]:.2e}, expected {want[s]:.2e}")
        print("  printed:  " + " ".join(f"{got[s]:.2e}" for s in sorted(got)))
        print("  expected: " + " ".join(f"{want[s]:.2e}" for s in sorted(got)))
        sys.exit(1)
EOF

cc=${CC:-gcc}
"$cc" -O0 -fopenmp -I. "$here/key_check.c" -o "$out/key_check" -lm >"$out/key_check.log" 2>&1 || {
    echo "$here/key_check.c does not compile against gpt2/run.h ($out/key_check.log):"; head -n 3 "$out/key_check.log"; exit 1; }
"$out/key_check" || exit 1
echo "exercise 1: solved (the lr of every step follows the schedules, -w is in train_config_key)"
