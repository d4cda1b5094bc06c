#!/usr/bin/env bash
# The lessons (doc/lessons/) quote the code as it is: every code quote equals the current source
# of the function or lines it names, and every command's output block was captured from that
# command (doc/lessons/render.py --check). `make lessons` regenerates them. The pictures they show
# are the ones doc/lessons/figures.py draws, all of them and no others, drawn from the code as it is.
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
# the pictures (doc/lessons/figures.py draws them into doc/lessons/fig/): every one it lists is there,
# drawn from the sizes the code has now (--check), and shown by a lesson; every fig/*.png a lesson
# shows is one it draws, and fig/ holds no others
"$PY" doc/lessons/figures.py --check || status=1
if ! names=$("$PY" doc/lessons/figures.py --list); then
  echo "FAIL: doc/lessons/figures.py --list"
  exit 1
fi
NAMES="$names" "$PY" - <<'PY' || status=1
import glob, os, re, sys
names = os.environ['NAMES'].split()
shown = {}
for md in sorted(glob.glob('doc/lessons/*.md')):
    text = open(md, encoding='utf-8').read()
    for name in re.findall(r'(?:\]\(|src=["\'])(?:\./)?fig/([^)"\'\s/]+)\.png', text):
        shown.setdefault(name, []).append(md)
files = {os.path.basename(f)[:-4] for f in glob.glob('doc/lessons/fig/*.png')}
bad = [f'doc/lessons/fig/{n}.png is missing: run python3 doc/lessons/figures.py {n}' for n in names if n not in files]
bad += [f'fig/{n}.png is shown by no lesson' for n in names if n not in shown]
bad += [f'{", ".join(shown[n])}: fig/{n}.png is not one figures.py draws' for n in sorted(shown) if n not in names]
bad += [f'doc/lessons/fig/{n}.png is not one figures.py draws' for n in sorted(files - set(names))]
for line in bad:
    print('FAIL:', line)
if not names:
    print('FAIL: figures.py lists no pictures')
sys.exit(1 if bad or not names else 0)
PY
exit $status
