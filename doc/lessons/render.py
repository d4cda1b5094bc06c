#!/usr/bin/env python3
"""Fills the code quotes and command outputs of the lessons (doc/lessons/*.md) from the tree.

A lesson marks what it quotes with an HTML comment, followed by a fenced block that this script
rewrites (whatever the block held before is replaced):

  <!-- code: FILE NAME -->                  the definition of NAME in FILE (a function, kernel,
                                            struct or #define) with the comment lines above it
  <!-- code: FILE "FIRST" .. "LAST" -->     the lines of FILE from the first one containing FIRST
                                            to the next one containing LAST
  <!-- run: COMMAND -->                     "$ COMMAND" and what it prints (stdout and stderr),
                                            run with bash from the repository's root; it must
                                            exit 0 (`run-fails:` for a command that must not)

  python3 doc/lessons/render.py [LESSON.md...]   rewrite the quotes and run the commands (a lesson
                                                 by its path or its file name: 03-backward.md)
  python3 doc/lessons/render.py --code [...]     rewrite the code quotes only (quick)
  python3 doc/lessons/render.py --check          exit 1 when a quote differs from the code, a
                                                 name is not found, or a command's block was not
                                                 captured from that command (make test runs this)
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MARKER = re.compile(r'^<!-- (code|run|run-fails): (.*) -->\s*$')
LANG = {'.c': 'c', '.h': 'c', '.cu': 'cuda', '.py': 'python', '.sh': 'bash', '': 'text'}


class LessonError(Exception):
    pass


def read_source(path):
    full = os.path.join(ROOT, path)
    if not os.path.isfile(full):
        raise LessonError(f'no file {path}')
    with open(full, encoding='utf-8') as f:
        return f.read().split('\n')


def with_comment_above(lines, start):
    """Moves start up over the comment lines (// or #) directly above a definition."""
    while start > 0 and re.match(r'^\s*(//|# )', lines[start - 1]) and not lines[start - 1].startswith('// ----------'):
        start -= 1
    return start


def definition(path, name):
    """The lines of NAME's definition in path: a function or kernel (its signature at the start of
    a line, its body up to the closing brace at column 0), a struct ending in `} NAME;`, or a
    #define, each with the comment above it."""
    lines = read_source(path)
    word = re.escape(name)
    for i, line in enumerate(lines):
        if re.match(rf'^#define {word}\b', line):
            end = i
            while lines[end].endswith('\\'):
                end += 1
            return lines[with_comment_above(lines, i):end + 1]
        if re.match(rf'^}} ?{word};', line):  # typedef struct { ... } NAME;
            start = i
            while start > 0 and not re.match(r'^(typedef )?struct\b', lines[start]):
                start -= 1
            return lines[with_comment_above(lines, start):i + 1]
        if re.match(rf'^[A-Za-z_].*\b{word}\s*\(', line) and not line.rstrip().endswith(';'):
            # a definition, not a prototype: a '{' ends the signature before any ';'
            j = i
            while '{' not in lines[j] and not lines[j].rstrip().endswith(';') and j + 1 < len(lines):
                j += 1
            if '{' not in lines[j]:
                continue
            end = j
            if not lines[j].rstrip().endswith('}'):  # a one-line body ends on its own line
                while end + 1 < len(lines) and not lines[end].startswith('}'):
                    end += 1
            return lines[with_comment_above(lines, i):end + 1]
    raise LessonError(f'no definition of {name} in {path}')


def line_range(path, first, last):
    lines = read_source(path)
    for i, line in enumerate(lines):
        if first in line:
            for j in range(i, len(lines)):
                if last in lines[j]:
                    return lines[i:j + 1]
            raise LessonError(f'{path}: no line containing "{last}" after "{first}"')
    raise LessonError(f'{path}: no line containing "{first}"')


def dedent(lines):
    indents = [len(l) - len(l.lstrip()) for l in lines if l.strip()]
    cut = min(indents) if indents else 0
    return [l[cut:] for l in lines]


def quote(spec):
    """The fenced block's language and lines for a code marker."""
    m = re.match(r'^(\S+)\s+"(.*)"\s*\.\.\s*"(.*)"$', spec)
    if m:
        path, lines = m.group(1), line_range(m.group(1), m.group(2), m.group(3))
    else:
        parts = spec.split()
        if len(parts) != 2:
            raise LessonError(f'code marker "{spec}": expected FILE NAME or FILE "FIRST" .. "LAST"')
        path, lines = parts[0], definition(parts[0], parts[1])
    return LANG.get(os.path.splitext(path)[1], 'text'), dedent(lines)


def run(command, must_fail):
    print(f'  $ {command}', file=sys.stderr, flush=True)
    env = dict(os.environ, LC_ALL='C')
    p = subprocess.run(['bash', '-c', command], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=1800)
    out = p.stdout.decode('utf-8', errors='replace').rstrip('\n').split('\n')
    if (p.returncode != 0) != must_fail:
        tail = '\n'.join(out[-15:])
        raise LessonError(f'"{command}" exited {p.returncode}' + (' (expected to fail)' if must_fail else '') + f':\n{tail}')
    return 'text', ['$ ' + command] + [l.rstrip() for l in out]


def process(path, mode):
    """Rewrites (or with mode 'check', checks) one lesson; returns the list of problems."""
    with open(path, encoding='utf-8') as f:
        lines = f.read().split('\n')
    out, problems, i = [], [], 0
    name = os.path.relpath(path, ROOT)
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        m = MARKER.match(line)
        if not m:
            continue
        kind, spec = m.group(1), m.group(2).strip()
        # the block that belongs to the marker: the fence on the next line, up to its closing fence
        if i >= len(lines) or not lines[i].startswith('```'):
            problems.append(f'{name}:{i}: no ``` block right after the marker')
            continue
        end = i + 1
        while end < len(lines) and lines[end] != '```':
            end += 1
        old = lines[i + 1:end]
        try:
            if kind == 'code':
                lang, new = quote(spec)
            elif mode == 'all':
                lang, new = run(spec, kind == 'run-fails')
            else:
                lang, new = 'text', old
                if not old or old[0] != '$ ' + spec:
                    problems.append(f'{name}:{i}: the output of "{spec}" was not captured (run render.py)')
        except LessonError as e:
            problems.append(f'{name}:{i}: {e}')
            lang, new = lines[i][3:], old
        if mode == 'check' and kind == 'code' and new != old:
            problems.append(f'{name}:{i}: the quote of "{spec}" differs from the code (python3 doc/lessons/render.py --code)')
        out.append('```' + lang)
        out.extend(new)
        out.append('```')
        i = end + 1
    if mode != 'check':
        with open(path, 'w', encoding='utf-8') as f:
            f.write('\n'.join(out))
    return problems


def main(argv):
    mode = 'all'
    if argv and argv[0] in ('--code', '--check'):
        mode = argv.pop(0)[2:]
    files = argv or sorted(os.path.join(HERE, f) for f in os.listdir(HERE) if re.match(r'^\d\d-.*\.md$', f))
    # a lesson may be named by its file name alone (03-backward.md)
    files = [f if os.path.exists(f) or not os.path.exists(os.path.join(HERE, f)) else os.path.join(HERE, f) for f in files]
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        print(f'render: no lesson {missing[0]}', file=sys.stderr)
        return 2
    problems = []
    for path in files:
        print(f'{os.path.relpath(path, ROOT)}', file=sys.stderr, flush=True)
        problems += process(path, mode)
    for p in problems:
        print(p, file=sys.stderr)
    if mode == 'check':
        print(f'lessons: {len(files)} checked, {len(problems)} problem(s)', file=sys.stderr)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
