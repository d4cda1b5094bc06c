#!/usr/bin/env bash
# The graded exercises (doc/exercises/) stay true to the code: for every exercise, in a scratch
# copy of this tree, its check fails on the tree as it is and passes once its reference solution
# (solution.patch) is applied (check.sh --solutions). Also: --list names each exercise folder
# once, in order, and an unknown exercise number is one error line and a non-zero exit.
set -u
. "$(dirname "$0")/lib.sh"
need_python numpy torch
status=0
bad() { echo "FAIL: $*"; status=1; }

dirs=$(ls -d doc/exercises/[0-9][0-9]-*/ | wc -l)
bash doc/exercises/check.sh --list > build/exercises_list.txt || bad "check.sh --list exited non-zero"
cat build/exercises_list.txt
[ "$dirs" -ge 8 ] || bad "only $dirs exercises"
want=$(ls -d doc/exercises/[0-9][0-9]-*/ | sed -E 's:.*/([0-9]+)-.*:\1:' | sed 's/^0//' | tr '\n' ' ')
got=$(sed -E 's/^([0-9]+)\..*/\1/' build/exercises_list.txt | tr '\n' ' ')
[ "$want" = "$got" ] || bad "--list gives the numbers '$got', the folders are '$want'"
if bash doc/exercises/check.sh 99 > build/exercises_bad.txt 2>&1; then bad "check.sh 99 succeeded"; fi
[ "$(wc -l < build/exercises_bad.txt)" = 1 ] || { bad "check.sh 99: not one line:"; cat build/exercises_bad.txt; }

bash doc/exercises/check.sh --solutions || bad "check.sh --solutions"
exit $status
