#!/usr/bin/env python3
"""Comment words per line of code, and comment blocks longer than a limit, in C, C++ and CUDA files.

  python3 dev/comment_density.py [FILE_OR_DIR ...]     (default: the stage files and gpt2/)

A line of code is a line with anything but a comment and white space on it. A comment word is a
run of non-space characters inside a // or /* */ comment. A block is a run of lines that hold a
comment and nothing else. Prints a row per file (code lines, comment words, words per code line,
the longest block), then the totals; exits 1 when a block is longer than --max-block (12) lines.
"""
import os
import sys

STAGES = ['train_cpu.c', 'train_gpu.cu', 'infer.c', 'infer_gpu.cu', 'tokenizer.c']
EXTS = ('.c', '.h', '.cu', '.cuh', '.cpp')


def scan(text):
    """(code lines, comment words, [lengths of comment-only blocks])"""
    code_lines = words = 0
    blocks, run = [], 0
    in_block = False
    for line in text.split('\n'):
        code, comment, i = [], [], 0
        in_string = None
        while i < len(line):
            c = line[i]
            if in_block:
                end = line.find('*/', i)
                if end < 0:
                    comment.append(line[i:])
                    i = len(line)
                else:
                    comment.append(line[i:end])
                    i = end + 2
                    in_block = False
            elif in_string:
                code.append(c)
                if c == '\\':
                    code.append(line[i + 1:i + 2])
                    i += 1
                elif c == in_string:
                    in_string = None
                i += 1
            elif line.startswith('//', i):
                comment.append(line[i + 2:])
                i = len(line)
            elif line.startswith('/*', i):
                in_block = True
                i += 2
            else:
                if c in '"\'':
                    in_string = c
                code.append(c)
                i += 1
        has_code = ''.join(code).strip() != ''
        text_comment = ' '.join(comment)
        words += len(text_comment.split())
        if has_code:
            code_lines += 1
        if not has_code and comment:
            run += 1
        else:
            if run:
                blocks.append(run)
            run = 0
    if run:
        blocks.append(run)
    return code_lines, words, blocks


def files_of(paths):
    for p in paths:
        if os.path.isdir(p):
            for root, _, names in sorted(os.walk(p)):
                for n in sorted(names):
                    if n.endswith(EXTS):
                        yield os.path.join(root, n)
        else:
            yield p


def main():
    args = sys.argv[1:]
    max_block = 12
    if '--max-block' in args:
        k = args.index('--max-block')
        max_block = int(args[k + 1])
        del args[k:k + 2]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not args:
        if not os.path.isdir('gpt2'):
            os.chdir(root)
        args = [s for s in STAGES if os.path.exists(s)] + ['gpt2']
    total_code = total_words = 0
    long_blocks = 0
    print(f'{"file":40s} {"code":>6s} {"words":>7s} {"w/line":>7s} {"block":>6s}')
    for path in files_of(args):
        with open(path, encoding='utf-8', errors='replace') as f:
            code, words, blocks = scan(f.read())
        total_code += code
        total_words += words
        longest = max(blocks) if blocks else 0
        long_blocks += sum(1 for b in blocks if b > max_block)
        ratio = words / code if code else 0.0
        print(f'{path:40s} {code:6d} {words:7d} {ratio:7.2f} {longest:6d}')
    ratio = total_words / total_code if total_code else 0.0
    print(f'{"total":40s} {total_code:6d} {total_words:7d} {ratio:7.2f}')
    print(f'comment blocks over {max_block} lines: {long_blocks}')
    return 1 if long_blocks else 0


if __name__ == '__main__':
    sys.exit(main())
