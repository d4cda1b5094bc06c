#!/usr/bin/env bash
# The lessons (doc/lessons/) quote the code as it is: every code quote equals the current source
# of the function or lines it names, and every command's output block was captured from that
# command (doc/lessons/render.py --check). `make lessons` regenerates them.
set -u
. "$(dirname "$0")/lib.sh"
n=$(ls doc/lessons/[0-9][0-9]-*.md 2>/dev/null | wc -l)
[ "$n" -ge 9 ] || { echo "FAIL: only $n lessons in doc/lessons/"; exit 1; }
"$PY" doc/lessons/render.py --check
status=$?
# every relative link of the lessons and exercises points at a file of the tree
"$PY" - <<'PY' || status=1
import glob, os, re, sys
bad = 0
for md in sorted(glob.glob('doc/lessons/*.md') + glob.glob('doc/exercises/**/*.md', recursive=True)):
    for target in re.findall(r'\]\(([^)#\s]+)[^)]*\)', open(md, encoding='utf-8').read()):
        if re.match(r'^[a-z]+:', target):
            continue
        if not os.path.exists(os.path.join(os.path.dirname(md), target)):
            print(f'{md}: link to {target}, which does not exist')
            bad += 1
sys.exit(1 if bad else 0)
PY
exit $status
