#!/usr/bin/env python3
"""dev/emu/cuda_emu.py: turns a .cu file into C++ that runs its kernels on the CPU (dev/emu/cuda_emu.h).

    python3 dev/emu/cuda_emu.py dev/gpu/gpu_check.cu build/emu/gpu_check.cpp
    g++ -O1 -g -fopenmp -include dev/emu/cuda_emu.h -I. build/emu/gpu_check.cpp -o build/emu/gpu_check

Seven rewrites, each keeping line numbers (so errors and __LINE__ point into the original file):
  kernel<<<grid, block>>>(args);   ->  emu_launch("kernel", grid, block, [=] { kernel(args); });
  kernel<<<grid, block, bytes[, stream]>>>(args);
                                   ->  emu_launch("kernel", grid, block, bytes, [=] { ... });
                                       (the stream is dropped: launches run one after another)
  __shared__ T a[N], b[M];         ->  a reference to each array in the running worker's copy of the
                                       emulator's shared-memory arena, at an offset given out once
                                       (emu_shared_alloc): where the race detector can watch it and
                                       each array has a guard gap after it
  #include "other.cu" or ".cuh"    ->  that file, rewritten the same way, inlined behind #line (a
                                       header once: the GPU headers of gpt2/gpu/ have include guards)
  #include "other.h"               ->  the same file by its path from the repository root (the
                                       output lives elsewhere; compile with -I. from the root)
  extern __shared__ T a[];         ->  a pointer to the launch's dynamic shared memory (emu_dynamic_shared)
  #include <cuda_runtime.h>, <cuda_bf16.h>, <cuda.h>, <cudaTypedefs.h>, <nccl.h>
                                   ->  nothing (the emulator header is force-included instead)
  #pragma unroll [N]               ->  EMU_UNROLL(8) (or N, if less), before a loop that only
                                       computes (rewrite_unroll); elsewhere it stays, and GCC
                                       ignores it

and one check: every launch must be followed by launch_check(kernel), with the kernel's name,
before the next launch_check (gpt2/gpu/cuda_utils.cuh: it reports a failed launch, and with
GPU_DEBUG=1 names the kernel that faulted). A launch without it stops the build.
"""
import os
import re
import sys


def match(s, i, open_c, close_c, step):
    """s[i] is open_c (step 1, searching forward) or close_c (step -1, backward): returns the
    index of the bracket that balances it."""
    depth = 0
    while 0 <= i < len(s):
        if s[i] == open_c:
            depth += step
        elif s[i] == close_c:
            depth -= step
        if depth == 0:
            return i
        i += step
    raise SystemExit("cuda_emu.py: unbalanced %s%s" % (open_c, close_c))


def source_position(s, i):
    """file:line of offset i in the rewritten text, from the last #line directive before it."""
    directives = list(re.finditer(r'^#line (\d+) "([^"]+)"$', s[:i], re.M))
    if not directives:
        return "line %d" % (s.count("\n", 0, i) + 1)
    d = directives[-1]
    return "%s:%d" % (d.group(2), int(d.group(1)) + s.count("\n", d.end() + 1, i))


def rewrite_launches(s):
    out = []
    pos = 0
    while True:
        i = s.find("<<<", pos)
        if i < 0:
            out.append(s[pos:])
            return "".join(out)
        line_start = s.rfind("\n", 0, i) + 1
        if "//" in s[line_start:i]:  # a launch written in a comment stays as it is
            out.append(s[pos:i + 3])
            pos = i + 3
            continue
        # the callee: an identifier, maybe qualified, maybe with template arguments
        j = i - 1
        while s[j].isspace():
            j -= 1
        if s[j] == ">":
            j = match(s, j, "<", ">", -1) - 1
        while j >= 0 and (s[j].isalnum() or s[j] in "_:"):
            j -= 1
        start = j + 1
        callee = s[start:i].strip()
        k = s.find(">>>", i)
        config = s[i + 3:k]
        p = k + 3
        while s[p].isspace():
            p += 1
        if s[p] != "(":
            raise SystemExit("cuda_emu.py: expected ( after >>> near: " + s[start:p + 20])
        q = match(s, p, "(", ")", 1)
        args = s[p + 1:q]
        name = re.sub(r"<.*", "", callee).split("::")[-1]
        check = re.search(r"\blaunch_check\((\w+)\)", s[q:])
        if check is None or check.group(1) != name:
            raise SystemExit("cuda_emu.py: %s: the launch of %s is not followed by launch_check(%s)"
                             % (source_position(s, i), name, name))
        parts = split_top(config, ",")
        if len(parts) not in (2, 3, 4):
            raise SystemExit("cuda_emu.py: %s: a launch of %s with %d parameters in <<<...>>>"
                             % (source_position(s, i), name, len(parts)))
        config = ", ".join(p.strip() for p in parts[:2])
        if len(parts) > 2:
            config += ", (size_t)(%s)" % parts[2].strip()
        out.append(s[pos:start])
        out.append('emu_launch("%s", %s, [=] { %s(%s); })' % (name, config, callee, args))
        pos = q + 1


def split_top(s, sep):
    """s split at the occurrences of sep outside brackets."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(s):
        depth += c in "([{<"
        depth -= c in ")]}>"
        if c == sep and depth == 0:
            parts.append(s[start:i])
            start = i + 1
    parts.append(s[start:])
    return parts


def rewrite_dynamic_shared(line, where):
    """`extern __shared__ [__align__(n)] T a[];` inside a kernel -> a pointer to the launch's
    dynamic piece of the arena (1024-byte aligned, which covers any __align__)."""
    m = re.match(r"(\s*)extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?(.*?)\b(\w+)\s*\[\s*\]\s*;\s*(//.*)?$", line)
    if m is None or not m.group(1) or not m.group(2).strip():
        raise SystemExit("cuda_emu.py: %s: an extern __shared__ declaration it cannot read (write it as "
                         "`extern __shared__ [__align__(N)] TYPE name[];` inside the kernel): %s" % (where, line.strip()))
    return "%s%s* const %s = (%s*)emu_dynamic_shared();" % (m.group(1), m.group(2).strip(), m.group(3), m.group(2).strip())


def rewrite_shared(line, where):
    """`__shared__ [__align__(n)] T a[dims], b[dims];` on one line -> for each array, a typedef
    of its type, its static offset in the emulator's arena and a reference to it in the running
    worker's copy (the arena aligns every array to 128 bytes, which covers any __align__)."""
    m = re.match(r"(\s*)__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([^;]*);\s*(//.*)?$", line)
    if m is None:
        raise SystemExit("cuda_emu.py: %s: a __shared__ declaration it cannot read (write it as "
                         "`__shared__ [__align__(N)] TYPE name[dims], ...;` on one line): %s" % (where, line.strip()))
    indent, decl = m.group(1), m.group(2)
    first = re.match(r"(.*?)\b(\w+)\s*((?:\[[^\]]*\]\s*)*)$", split_top(decl, ",")[0].strip())
    if first is None or not first.group(1).strip():
        raise SystemExit("cuda_emu.py: %s: cannot find the type of: %s" % (where, line.strip()))
    base = first.group(1).strip()
    declarators = [(first.group(2), first.group(3))]
    for part in split_top(decl, ",")[1:]:
        d = re.match(r"\s*(\w+)\s*((?:\[[^\]]*\]\s*)*)$", part)
        if d is None:
            raise SystemExit("cuda_emu.py: %s: cannot read the declarator %r in: %s" % (where, part, line.strip()))
        declarators.append((d.group(1), d.group(2)))
    out = []
    for name, dims in declarators:
        t = "emu_shared_%s_t" % name
        at = "emu_shared_%s_at" % name
        out.append('typedef %s %s%s; static const size_t %s = emu_shared_alloc(sizeof(%s), "%s"); '
                   '%s& %s = *(%s*)emu_shared(%s);' % (base, t, dims.strip(), at, t, name, t, name, t, at))
    return indent + " ".join(out)


# What a loop may call and still be unrolled for the CPU (rewrite_unroll): arithmetic, conversions,
# casts and the words of C++ that take parentheses.
PURE_CALLS = set("""
    for if while switch return sizeof float int unsigned double bool size_t
    reinterpret_cast static_cast const_cast
    fmaf fmaxf fminf fabsf expf __expf exp2f logf __logf sqrtf rsqrtf tanhf max min
    make_float2 make_float4 __int_as_float __float_as_int __uint_as_float __float_as_uint
    __float2bfloat16 __bfloat162float __floats2bfloat162_rn __float22bfloat162_rn __bfloat1622float2
    __low2float __high2float""".split())


def blank_comments(s):
    """s with its comments turned to spaces (newlines kept), so that offsets stay the same."""
    return re.sub(r"//[^\n]*|/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), s, flags=re.S)


def statement_end(s, i):
    """The offset just past the statement that starts at s[i] or after it (s without comments),
    pragmas before it included."""
    while True:
        while s[i].isspace():
            i += 1
        if s[i] != "#":
            break
        i = s.index("\n", i)
    m = re.match(r"(for|while|if|switch)\s*\(", s[i:i + 64])
    if m:
        end = statement_end(s, match(s, i + m.end() - 1, "(", ")", 1) + 1)
        e = re.match(r"\s*else\b", s[end:end + 64]) if m.group(1) == "if" else None
        return statement_end(s, end + e.end()) if e else end
    if s[i] == "{":
        return match(s, i, "{", "}", 1) + 1
    depth = 0
    while s[i] != ";" or depth > 0:
        depth += s[i] in "([{"
        depth -= s[i] in ")]}"
        i += 1
    return i + 1


def rewrite_unroll(s):
    """`#pragma unroll [N]` before a loop that only computes (it calls nothing but PURE_CALLS) ->
    EMU_UNROLL(8) (N where N < 8): GCC's unroll pragma in the builds that ask for it (cuda_emu.h).
    A loop of up to 8 trips is unrolled whole, so that the small arrays of a thread that such loops
    index (a GEMM's register tile, acc[8][8]) become registers, and AddressSanitizer has no loads and
    stores of them to check: gpu_check and train_gpu's float32 steps run in a third less time (and
    build in 20-25 s more). A longer loop is unrolled by 8. A loop that calls anything else (a
    barrier, a shuffle, an mma, a device function) stays as nvcc's pragma, which GCC ignores:
    those calls cost more than the loop, and unrolled they only build slower."""
    code = blank_comments(s)
    out, pos = [], 0
    for m in re.finditer(r"^[ \t]*#[ \t]*pragma[ \t]+unroll(?:[ \t]+(\d+))?[ \t]*$", code, re.M):
        body = code[m.end():statement_end(code, m.end())]
        if not re.match(r"\s*for\b", body):
            continue
        calls = re.findall(r"\b([A-Za-z_]\w*)\s*(?:<[^;{}()]*>)?\s*\(", body)
        if any(c not in PURE_CALLS for c in calls):
            continue
        out.append(s[pos:m.start()])
        out.append("EMU_UNROLL(%d)" % min(int(m.group(1) or 8), 8))
        pos = m.end()
    out.append(s[pos:])
    return "".join(out)


def transform(path, inlined=None):
    inlined = set() if inlined is None else inlined
    text = open(path).read()
    lines = text.split("\n")
    result = ['#line 1 "%s"' % path]
    for n, line in enumerate(lines, 1):
        m = re.match(r'\s*#\s*include\s+"([^"]+\.cuh?)"', line)
        if m:
            inc = os.path.normpath(os.path.join(os.path.dirname(path), m.group(1)))
            if not (inc.endswith(".cuh") and inc in inlined):
                inlined.add(inc)
                result.append(transform(inc, inlined))
            result.append('#line %d "%s"' % (n + 1, path))
            continue
        if re.match(r"\s*#\s*include\s+<(cuda_runtime|cuda_bf16|cublas_v2|nccl|cuda|cudaTypedefs)\.h>", line):
            result.append("")
            continue
        code = line.split("//")[0]
        if re.search(r"\bextern\s+__shared__\b", code):
            line = rewrite_dynamic_shared(line, "%s:%d" % (path, n))
        elif re.search(r"\b__shared__\b", code):
            line = rewrite_shared(line, "%s:%d" % (path, n))
        m = re.match(r'(\s*#\s*include\s+)"([^"]+)"(.*)', line)
        if m:
            inc = os.path.normpath(os.path.join(os.path.dirname(path), m.group(2)))
            line = '%s"%s"%s' % (m.group(1), inc, m.group(3))
        result.append(line)
    return rewrite_launches("\n".join(result))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: cuda_emu.py INPUT.cu OUTPUT.cpp")
    src = rewrite_unroll(transform(sys.argv[1]))
    os.makedirs(os.path.dirname(os.path.abspath(sys.argv[2])), exist_ok=True)
    open(sys.argv[2], "w").write(src)
