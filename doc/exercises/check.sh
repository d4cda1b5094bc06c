#!/usr/bin/env bash
# The graded exercises (doc/exercises/README.md). Each exercise is a folder NN-name/ with
#   README.md      the statement: its first line is "# N. Title (level)"
#   check.sh       the automatic check, run from the root of the tree it checks: exit 0 when solved
#   solution.patch a reference solution, a patch against the tree (git apply -p1)
#
#   bash doc/exercises/check.sh --list         one line per exercise: number, title, level
#   bash doc/exercises/check.sh N              checks exercise N in this working tree
#   bash doc/exercises/check.sh --solutions [N...]
#        for each exercise (or those named): in a scratch copy of this tree, first the check must
#        fail on the tree as it is, then the solution is applied and the check must pass; this is
#        what keeps the exercises true to the code as it changes (make test runs it).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

exercise_dir() {  # the folder of exercise N, or nothing
    local n
    n=$(printf '%02d' "$((10#$1))" 2>/dev/null) || return 0
    compgen -G "$here/$n-*/" | head -n 1 | sed 's:/$::'
}

list() {
    for d in "$here"/[0-9][0-9]-*/; do
        local title
        title=$(head -n 1 "$d/README.md" | sed 's/^# *//')
        echo "$title"
    done
}

# A copy of the tree the exercises live in: its tracked files and new ones not ignored (as a user's
# working tree holds them), plus data/ (the token and tokenizer files the checks train on).
scratch_copy() {
    local dst=$1
    mkdir -p "$dst"
    (cd "$root" && git ls-files -z --cached --others --exclude-standard \
        | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
        | tar --null -T - -cf -) | (cd "$dst" && tar -xf -)
    [ -d "$root/data" ] && cp -a "$root/data" "$dst/"
    # the programs this tree has built, with their times (tar keeps the sources'), so that make
    # rebuilds only what a solution changes
    local f
    for f in tokenizer train_cpu infer build/flags; do
        [ -f "$root/$f" ] && mkdir -p "$dst/$(dirname "$f")" && cp -p "$root/$f" "$dst/$f"
    done
    [ -d "$root/test/node_modules" ] && ln -s "$root/test/node_modules" "$dst/test/node_modules"
    return 0
}

solutions() {
    local dirs=() fails=0 pass=0
    if [ $# -gt 0 ]; then
        for n in "$@"; do
            local d; d=$(exercise_dir "$n")
            [ -n "$d" ] || { echo "check.sh: no exercise $n (bash doc/exercises/check.sh --list)" >&2; return 2; }
            dirs+=("$d")
        done
    else
        dirs=("$here"/[0-9][0-9]-*)
    fi
    command -v git >/dev/null || { echo "check.sh: --solutions needs git (to copy the tree and apply the patches)" >&2; return 2; }
    local work; work=$(mktemp -d "${TMPDIR:-/tmp}/exercises.XXXXXX")
    trap "rm -rf '$work'" EXIT
    # the tree as it is, once for every check (what they build there is shared): the checks
    # without the solutions run there one after the other; each check with its solution runs in
    # its own copy, in the background beside them, as many at a time as there are cores. Each
    # exercise's verdict goes to $work/NAME.result, printed in order at the end.
    local cores; cores=$(nproc 2>/dev/null || echo 2)
    scratch_copy "$work/as-is"
    for d in "${dirs[@]}"; do
        local name; name=$(basename "$d")
        local copy="$work/$name" start=$SECONDS result="$work/$name.result"
        if (cd "$work/as-is" && bash "doc/exercises/$name/check.sh") >"$work/$name.before.log" 2>&1; then
            echo "FAIL  $name: its check passes on the tree without the solution (see $name/check.sh)" >"$result"
            continue
        fi
        scratch_copy "$copy"
        if ! (cd "$copy" && git apply -p1 "doc/exercises/$name/solution.patch") >"$work/$name.apply.log" 2>&1; then
            { echo "FAIL  $name: solution.patch no longer applies to the tree:"
              sed 's/^/      /' "$work/$name.apply.log"; } >"$result"
            continue
        fi
        while [ "$(jobs -rp | wc -l)" -ge "$cores" ]; do wait -n; done
        (
            if (cd "$copy" && bash "doc/exercises/$name/check.sh") >"$work/$name.after.log" 2>&1; then
                echo "PASS  $name ($((SECONDS - start))s): fails without the solution, passes with it"
            else
                echo "FAIL  $name: the check fails with the reference solution applied; its last lines:"
                tail -n 20 "$work/$name.after.log" | sed 's/^/      /'
            fi >"$result"
            rm -rf "$copy"
        ) &
    done
    wait
    for d in "${dirs[@]}"; do
        local result; result="$work/$(basename "$d").result"
        cat "$result"
        if head -n 1 "$result" | grep -q '^PASS'; then pass=$((pass + 1)); else fails=$((fails + 1)); fi
    done
    echo "solutions: $pass passed, $fails failed"
    [ $fails -eq 0 ]
}

case "${1:-}" in
    --list) list ;;
    --solutions) shift; solutions "$@" ;;
    ""|-h|--help)
        echo "usage: bash doc/exercises/check.sh --list | N | --solutions [N...]" >&2
        exit 2 ;;
    *)
        d=$(exercise_dir "$1")
        if [ -z "$d" ]; then
            echo "check.sh: no exercise '$1' (bash doc/exercises/check.sh --list)" >&2
            exit 2
        fi
        cd "$root" && bash "$d/check.sh" ;;
esac
