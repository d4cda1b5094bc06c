#!/usr/bin/env python3
"""Draws the lessons' pictures into doc/lessons/fig/, one PNG each, with matplotlib.

  python3 doc/lessons/figures.py           every picture
  python3 doc/lessons/figures.py NAME...   those (NAME is the file's name without .png)
  python3 doc/lessons/figures.py --list    the names, one a line (needs no matplotlib)
  python3 doc/lessons/figures.py --check   exit 1 when a picture is missing or was drawn from other
                                           sizes than the code has now (needs no matplotlib)

Where a picture shows sizes that the code sets, it reads them from the code: the CPU GEMM's
blocking from gpt2/cpu_math.h (its AVX-512 build, the one its comment sizes), flash attention's
tiles from gpt2/gpu/flash_attention.cuh, and the mma fragment layout is checked against the comment
of mma_bf16_16816 in gpt2/gpu/matmul_bf16.cuh. A change there changes the picture when this script
runs again, or stops it with an error when the picture's assumptions no longer hold. Each PNG
records what it was drawn from, and --check (test/test_lessons.sh runs it) compares that with the
code as it is, so a picture left behind by a change of those sizes fails the test.

The files are the same bits on every run with the same matplotlib and fonts: a fixed size and
resolution, no timestamps or software name in the PNG, random numbers from a fixed seed.
Colours are Okabe and Ito's palette, which readers with colour-blindness can tell apart.
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, 'fig')
DPI = 100

# Okabe-Ito, and lighter tints of it for filled boxes with text on them
ORANGE, SKY, GREEN, YELLOW, BLUE, VERMILLION, PURPLE, BLACK = (
    '#E69F00', '#56B4E9', '#009E73', '#F0E442', '#0072B2', '#D55E00', '#CC79A7', '#000000')
GREY = '#BBBBBB'


def tint(colour, f=0.55):
    """colour mixed with white: f = 0 the colour, 1 white."""
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return '#%02x%02x%02x' % tuple(round(c + (255 - c) * f) for c in (r, g, b))


# ---------- what the code says ----------

def source(path):
    with open(os.path.join(ROOT, path), encoding='utf-8') as f:
        return f.read()


def defines(text):
    """{NAME: value text} of the #defines in text (the first definition of each name)."""
    out = {}
    for name, value in re.findall(r'^#define (\w+)[ \t]+(.*?)(?:\s*//.*)?$', text, re.M):
        out.setdefault(name, value.strip())
    return out


def c_int(expr, known):
    """The value of a C integer expression of numbers and known #defines."""
    for name in sorted(known, key=len, reverse=True):
        expr = re.sub(rf'\b{name}\b', str(known[name]), expr)
    if not re.fullmatch(r'[\d\s()+\-*/]+', expr):
        raise SystemExit(f'figures.py: cannot evaluate {expr!r}')
    return eval(expr.replace('/', '//'))


def gemm_sizes():
    """The CPU GEMM's blocking for AVX-512, from gpt2/cpu_math.h."""
    text = source('gpt2/cpu_math.h')
    avx512 = text[text.index('#if defined(__AVX512F__)'):text.index('#elif defined(__AVX__)')]
    d = defines(avx512)
    k = {'MM_VEC_BYTES': int(d['MM_VEC_BYTES']), 'MM_MR': int(d['MM_MR']), 'MM_NR_VECS': int(d['MM_NR_VECS'])}
    rest = defines(text)
    k['MM_LANES'] = c_int(rest['MM_LANES'], k)
    k['MM_NR'] = c_int(rest['MM_NR'], k)
    for name in ('MM_KC', 'MM_MC', 'MM_NC'):
        k[name] = c_int(rest[name], k)
    return k


def flash_sizes():
    d = defines(source('gpt2/gpu/flash_attention.cuh'))
    return {name: int(d[name]) for name in ('FLASH_ROWS', 'FLASH_TILE', 'FLASH_STEP', 'FLASH_FWD_W')}


def block_calls():
    """The calls of a block in gpt2_forward (train_cpu.c) that the picture draws, checked to be there."""
    code = source('train_cpu.c')
    calls = ('layernorm_forward(al.ln1, al.ln1_mean', 'run_matmul_forward(al.qkv, al.ln1, w.qkvw',
             'attention_forward(al.atty,', 'run_matmul_forward(al.attproj, al.atty, w.attprojw',
             'residual_forward(al.residual2, x, al.attproj', 'layernorm_forward(al.ln2, al.ln2_mean',
             'run_matmul_forward(al.fch, al.ln2, w.fcw', 'gelu_forward(al.fch_gelu, al.fch',
             'run_matmul_forward(al.fcproj, al.fch_gelu, w.fcprojw',
             'residual_forward(al.residual3, al.residual2, al.fcproj')
    for call in calls:
        if call not in code:
            raise SystemExit(f'figures.py: gpt2_forward in train_cpu.c no longer has {call!r}: redraw block')
    return {'gpt2_forward': 'ln1 qkv attention attproj residual2 ln2 fch fch_gelu fcproj residual3'}


def mma_layout():
    """The fragment layout that the comment of mma_bf16_16816 (gpt2/gpu/matmul_bf16.cuh) states,
    checked to be the one the picture draws."""
    text = source('gpt2/gpu/matmul_bf16.cuh')
    lines = ('g = lane / 4, q = lane % 4', 'a[0] = A[g][2q, 2q+1]', 'a[1] = A[g+8][2q, 2q+1]',
             'a[2] = A[g][2q+8, +9]', 'a[3] = A[g+8][2q+8, +9]', 'b[0] = B[2q, 2q+1][g]',
             'b[1] = B[2q+8, 2q+9][g]', 'd[0], d[1] = D[g][2q, 2q+1]', 'd[2], d[3] = D[g+8][2q, 2q+1]')
    for line in lines:
        if line not in text:
            raise SystemExit(f'figures.py: mma_bf16_16816\'s comment no longer says {line!r}: redraw mma_lanes')
    return {'mma_bf16_16816': 'PTX m16n8k16 bf16 fragments'}


# What each picture is drawn from in the code, written into its PNG (tEXt "Description") so that
# --check can tell a picture drawn from older code without drawing it again.
FROM_CODE = {'block': block_calls, 'gemm_loops': gemm_sizes, 'mma_lanes': mma_layout, 'flash_tiles': flash_sizes}


def from_code(name):
    values = FROM_CODE[name]() if name in FROM_CODE else {}
    return 'doc/lessons/figures.py ' + name + ''.join(f' {k}={v}' for k, v in sorted(values.items()))


def png_description(path):
    """The tEXt "Description" of a PNG file, or None."""
    import struct
    with open(path, 'rb') as f:
        data = f.read()
    at = 8
    while at + 8 <= len(data):
        size, kind = struct.unpack('>I4s', data[at:at + 8])
        if kind == b'tEXt':
            key, _, value = data[at + 8:at + 8 + size].partition(b'\0')
            if key == b'Description':
                return value.decode('latin-1')
        at += 12 + size
    return None


# ---------- drawing helpers ----------

def new_figure(w, h):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    plt.rcParams.update({'font.family': 'DejaVu Sans', 'font.size': 10,
                         'figure.facecolor': 'white', 'axes.facecolor': 'white'})
    return plt.figure(figsize=(w, h), dpi=DPI)


def bare_axes(fig, rect, xlim, ylim):
    ax = fig.add_axes(rect)
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect('equal')
    ax.axis('off')
    return ax


def box(ax, x, y, w, h, face, text='', edge=BLACK, lw=1.0, size=9, colour=BLACK, hatch=None, z=2, **kw):
    from matplotlib.patches import Rectangle
    ax.add_patch(Rectangle((x, y), w, h, facecolor=face, edgecolor=edge, linewidth=lw, hatch=hatch, zorder=z))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha='center', va='center', fontsize=size, color=colour,
                zorder=z + 1, **kw)


def arrow(ax, x0, y0, x1, y1, colour=BLACK, lw=1.3, style='-|>', z=1):
    from matplotlib.patches import FancyArrowPatch
    ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle=style, mutation_scale=11,
                                 color=colour, linewidth=lw, zorder=z, shrinkA=0, shrinkB=0))


def save(fig, name):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, name + '.png')
    fig.savefig(path, dpi=DPI, facecolor='white', metadata={'Software': None, 'Description': from_code(name)})
    import matplotlib.pyplot as plt
    plt.close(fig)
    print(f'wrote doc/lessons/fig/{name}.png ({os.path.getsize(path) // 1024} KB)')


# ---------- Lesson 2 ----------

def block():
    """One transformer block, as the loop of gpt2_forward in train_cpu.c runs it."""
    block_calls()
    fig = new_figure(10, 3.3)
    ax = bare_axes(fig, [0.005, 0.0, 0.99, 0.87], (-0.6, 18.4), (-1.75, 3.6))
    fig.suptitle('One transformer block (gpt2_forward in train_cpu.c): two halves, each x + f(layernorm(x))',
                 fontsize=11.5, y=0.96)
    # the residual stream
    y0 = 0.0
    ax.plot([-0.5, 18.0], [y0, y0], color=BLUE, linewidth=5, zorder=1, solid_capstyle='butt')
    arrow(ax, 17.6, y0, 18.3, y0, colour=BLUE, lw=5)
    ax.text(-0.5, y0 - 0.4, 'residual stream x (B, T, C), from the\nblock before (or the embeddings)',
            ha='left', va='top', fontsize=8.5, color=BLUE)
    ax.text(18.3, y0 - 0.4, 'residual3, to the\nnext block', ha='right', va='top', fontsize=8.5, color=BLUE)
    kinds = {'norm': tint(YELLOW, 0.35), 'mm': tint(SKY, 0.45), 'att': tint(VERMILLION, 0.4), 'gelu': tint(GREEN, 0.5)}
    yb, bh, bw, gap = 1.35, 1.1, 1.65, 0.38

    def half(x, steps, add_x, add_label):
        ax.plot([x - 0.4, x - 0.4], [y0, yb + bh / 2], color=BLACK, linewidth=1.3, zorder=1)
        arrow(ax, x - 0.4, yb + bh / 2, x, yb + bh / 2)
        for i, (kind, title, shape) in enumerate(steps):
            bx = x + i * (bw + gap)
            box(ax, bx, yb, bw, bh, kinds[kind], title, size=8)
            ax.text(bx + bw / 2, yb - 0.1, shape, ha='center', va='top', fontsize=7.5, color='#333333')
            if i + 1 < len(steps):
                arrow(ax, bx + bw, yb + bh / 2, bx + bw + gap, yb + bh / 2)
        end = x + len(steps) * (bw + gap) - gap
        ax.plot([end, add_x], [yb + bh / 2, yb + bh / 2], color=BLACK, linewidth=1.3, zorder=1)
        arrow(ax, add_x, yb + bh / 2, add_x, y0 + 0.3)
        from matplotlib.patches import Circle
        ax.add_patch(Circle((add_x, y0), 0.3, facecolor='white', edgecolor=BLACK, linewidth=1.3, zorder=3))
        ax.text(add_x, y0, '+', ha='center', va='center', fontsize=13, zorder=4)
        ax.text(add_x, y0 - 0.4, add_label, ha='center', va='top', fontsize=8.5)
        return (x + end) / 2

    mid1 = half(0.4, [('norm', 'layernorm\nln1w, ln1b', 'ln1 (B,T,C)'),
                      ('mm', 'matmul\nqkvw\nC -> 3C', 'qkv (B,T,3C)'),
                      ('att', 'attention\ncausal,\nNH heads', 'atty (B,T,C)'),
                      ('mm', 'matmul\nattprojw\nC -> C', 'attproj (B,T,C)')], 8.55, 'residual2')
    mid2 = half(9.35, [('norm', 'layernorm\nln2w, ln2b', 'ln2 (B,T,C)'),
                       ('mm', 'matmul\nfcw\nC -> 4C', 'fch (B,T,4C)'),
                       ('gelu', 'GELU', 'fch_gelu (B,T,4C)'),
                       ('mm', 'matmul\nfcprojw\n4C -> C', 'fcproj (B,T,C)')], 17.5, '')
    ax.text(mid1, yb + bh + 0.2, 'attention half', ha='center', va='bottom', fontsize=10, weight='bold')
    ax.text(mid2, yb + bh + 0.2, 'MLP half', ha='center', va='bottom', fontsize=10, weight='bold')
    ax.text(9.0, -1.7, 'Under each box: the activation it writes and its shape. Attention is the only step that '
            'mixes positions; the others work on each position alone.', ha='center', va='bottom', fontsize=8.3,
            style='italic')
    save(fig, 'block')


def causal_scores():
    """The T x T scores of one head, masked, and their softmax per row (attention_forward)."""
    import numpy as np
    T, hs = 8, 4
    rng = np.random.default_rng(2)
    q, k = rng.normal(size=(T, hs)), rng.normal(size=(T, hs))
    score = q @ k.T / np.sqrt(hs)
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    s = np.where(mask, -np.inf, score)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    from matplotlib.colors import LinearSegmentedColormap
    cmap = LinearSegmentedColormap.from_list('w2b', ['#FFFFFF', tint(BLUE, 0.0)])
    fig = new_figure(10, 5.3)
    fig.suptitle('Attention scores of one head at T = 8 (random q and k): the causal mask, then a softmax per row',
                 fontsize=11.5, y=0.975)
    panels = [(score, '1. score(t, t2) = q_t . k_t2 / sqrt(hs)', '{:+.1f}', None),
              (p, '2. att(t, .) = softmax of row t: each row sums to 1', '{:.2f}', 'sum')]
    for n, (m, title, fmt, extra) in enumerate(panels):
        ax = fig.add_axes([0.06 + n * 0.49, 0.08, 0.43, 0.74])
        ax.set_xlim(-0.5, T + 0.8)
        ax.set_ylim(T + 0.6, -0.5)
        ax.set_aspect('equal')
        for side in ax.spines.values():
            side.set_visible(False)
        ax.set_xticks(range(T))
        ax.set_yticks(range(T))
        ax.tick_params(length=0, labelsize=8.5)
        ax.xaxis.tick_top()
        ax.xaxis.set_label_position('top')
        ax.set_xlabel('key position t2', fontsize=9)
        ax.set_ylabel('query position t', fontsize=9)
        ax.set_title(title, fontsize=10, pad=8, loc='left')
        lo, hi = (np.min(score), np.max(score)) if extra is None else (0.0, 1.0)
        for t in range(T):
            for t2 in range(T):
                if mask[t, t2]:
                    box(ax, t2 - 0.5, t - 0.5, 1, 1, tint(GREY, 0.55), edge='white', lw=1, hatch='///')
                    if extra is None:
                        ax.text(t2, t, '-inf', ha='center', va='center', fontsize=7, color='#555555', zorder=5)
                    continue
                f = (m[t, t2] - lo) / (hi - lo)
                face = cmap(0.08 + 0.85 * f)
                box(ax, t2 - 0.5, t - 0.5, 1, 1, face, fmt.format(m[t, t2] + 0.0).replace('-0.0', '+0.0'), edge='white', lw=1, size=7.5,
                    colour='white' if f > 0.55 else BLACK)
            if extra:
                ax.text(T - 0.4, t, '= %.2f' % p[t].sum(), ha='left', va='center', fontsize=8)
        if extra is None:
            ax.text(-0.5, T - 0.3, 'grey: t2 > t, a later position: masked to -inf,\nso its weight after the softmax is 0',
                    ha='left', va='top', fontsize=8.5, color='#444444')
        else:
            ax.text(-0.5, T - 0.3, 'row t weights positions 0..t:\nout_t = sum over t2 of att(t, t2) v_t2',
                    ha='left', va='top', fontsize=8.5, color='#444444')
    save(fig, 'causal_scores')


# ---------- Lesson 6 ----------

def gemm_loops():
    """How gemm_block (gpt2/cpu_math.h) cuts C += A . B into blocks, micro-panels and register tiles."""
    g = gemm_sizes()
    MR, NR, KC, MC, NC = g['MM_MR'], g['MM_NR'], g['MM_KC'], g['MM_MC'], g['MM_NC']
    fig = new_figure(10, 5.6)
    fig.suptitle('The packed CPU GEMM, C (M x N) += A (M x K) . B (K x N): gemm_block in gpt2/cpu_math.h '
                 '(AVX-512 sizes)', fontsize=11, y=0.975)
    ax = bare_axes(fig, [0.0, 0.02, 0.6, 0.9], (-2.7, 12.9), (-5.9, 5.6))
    # the layout of C = A B: A left of C, B above C (not to scale)
    K, M, N = 4.2, 5.0, 6.6
    kc, mc, nc, mr, nr = 1.6, 2.2, 3.6, 0.55, 0.6
    ax0, cy = 0.0, 0.0          # A at x 0..K, C at x K+gap.., rows go down from y = cy
    cx = K + 0.5
    by = cy + 0.5               # B from by up to by + K
    box(ax, ax0, cy - M, K, M, '#F4F4F4', lw=1.2)
    box(ax, cx, cy - M, N, M, '#F4F4F4', lw=1.2)
    box(ax, cx, by, N, K, '#F4F4F4', lw=1.2)
    ax.text(ax0 + K / 2, cy - M - 0.25, 'A (M x K)', ha='center', va='top', fontsize=9)
    ax.text(cx + N / 2, cy - M - 0.25, 'C (M x N)', ha='center', va='top', fontsize=9)
    ax.text(cx + N + 0.15, by + K / 2, 'B\n(K x N)', ha='left', va='center', fontsize=9)
    jc, pc, ic = 0.0, 1.6, 0.0   # the blocks being worked on: the first jc, the second pc, the first ic
    # B block (KC x NC), packed into NR-wide micro-panels
    bx0, by0 = cx + jc, by + K - pc - kc
    box(ax, bx0, by0, nc, kc, tint(SKY, 0.5), lw=1.4)
    for j in range(1, int(nc / nr) + 1):
        ax.plot([bx0 + j * nr] * 2, [by0, by0 + kc], color=BLUE, linewidth=0.6, zorder=3)
    box(ax, bx0 + nr, by0, nr, kc, SKY, lw=1.6, z=4)
    # A block (MC x KC), packed into MR-high micro-panels
    ax1, ay1 = ax0 + pc, cy - ic - mc
    box(ax, ax1, ay1, kc, mc, tint(ORANGE, 0.5), lw=1.4)
    for i in range(1, int(mc / mr) + 1):
        ax.plot([ax1, ax1 + kc], [ay1 + mc - i * mr] * 2, color='#9A6A00', linewidth=0.6, zorder=3)
    box(ax, ax1, ay1 + mc - 3 * mr, kc, mr, ORANGE, lw=1.6, z=4)
    # C: the NC-wide column block, the MC x NC block, one MR x NR register tile
    box(ax, cx + jc, cy - M, nc, M, 'none', edge=BLUE, lw=1.2, z=3)
    box(ax, cx + jc, cy - ic - mc, nc, mc, tint(VERMILLION, 0.85), lw=1.2)
    box(ax, cx + jc + nr, cy - ic - 3 * mr, nr, mr, VERMILLION, lw=1.6, z=4)
    # labels
    ax.text(bx0 + 0.1, by0 - 0.1, f'B block KC x NC = {KC} x {NC},\npacked by mm_pack_b (L3)', fontsize=8,
            va='top', ha='left', color=BLUE)
    ax.text(bx0 + nr * 1.5, by + K + 0.15, f'micro-panel\nKC x NR = {KC} x {NR} (L1)', ha='center', va='bottom',
            fontsize=8)
    ax.plot([bx0 + nr * 1.5] * 2, [by0 + kc, by + K + 0.12], color=BLACK, linewidth=0.6)
    ax.text(ax0 - 0.1, ay1 + mc / 2, f'A block\nMC x KC\n= {MC} x {KC}\npacked by\nmm_pack_panel\n(L2)', ha='right', va='center',
            fontsize=8)
    ax.text(ax1 + kc / 2, ay1 - 0.15, f'micro-panels\nof MR = {MR} rows', ha='center', va='top', fontsize=8)
    ax.annotate(f'register tile\nMR x NR\n= {MR} x {NR}\n(mm_kernel)', (cx + jc + nr * 1.5, cy - ic - 2.5 * mr),
                (cx + nc + 0.25, cy - 1.3), fontsize=8, va='center', ha='left',
                arrowprops=dict(arrowstyle='-', color=VERMILLION, lw=0.9))
    ax.text(cx + jc + nc / 2, cy - M + 0.15, f'NC = {NC} columns', ha='center', va='bottom', fontsize=8,
            color=BLUE)
    ax.text(cx + N, -5.55 - 0.2, 'not to scale', ha='right', va='top', fontsize=7.5, color='#666666')
    # the loop nest, beside it
    tx = fig.add_axes([0.61, 0.02, 0.39, 0.9])
    tx.axis('off')
    lines = [
        (f'for jc in 0, NC, 2 NC, ... < N          NC = {NC}', BLACK),
        (f'  for pc in 0, KC, ... < K              KC = {KC}', BLACK),
        ('    pack B[pc.., jc..] (KC x NC)', BLUE),
        ('      into NR-wide micro-panels', BLUE),
        (f'    for ic in 0, MC, ... < M            MC = {MC}', BLACK),
        ('      pack A[ic.., pc..] (MC x KC)', '#9A6A00'),
        ('        into MR-high micro-panels', '#9A6A00'),
        (f'      for j in 0, NR, ... < NC          NR = {NR}', BLACK),
        (f'        for i in 0, MR, ... < MC        MR = {MR}', BLACK),
        ('          mm_kernel: the MR x NR tile', VERMILLION),
        ('          of C, in registers, over', VERMILLION),
        ('          p = 0 .. KC-1:', VERMILLION),
        ('            tile += A[i.., p] B[p, j..]', VERMILLION),
        ('          then tile added into C', VERMILLION),
    ]
    for n, (line, colour) in enumerate(lines):
        tx.text(0.0, 0.97 - n * 0.052, line, family='DejaVu Sans Mono', fontsize=7.8, color=colour, va='top')
    tx.text(0.0, 0.97 - len(lines) * 0.052 - 0.03,
            f'Each step of p: {NR // g["MM_LANES"]} vectors of B loaded, {MR} floats of A\n'
            f'broadcast, {MR * NR // g["MM_LANES"]} vector FMAs of {g["MM_LANES"]} floats. One B micro-panel\n'
            'stays in L1 while every A micro-panel of the\nblock passes it; a thread runs this on its own\n'
            'slice of C.', fontsize=8.5, va='top')
    save(fig, 'gemm_loops')


def mma_lanes():
    """mma.sync.m16n8k16's fragments: which lane holds which element (PTX ISA, as the comment of
    mma_bf16_16816 in gpt2/gpu/matmul_bf16.cuh states it)."""
    mma_layout()
    A, B, D = {}, {}, {}   # (row, col) -> (lane, register)
    for lane in range(32):
        g, q = lane // 4, lane % 4
        for h in range(2):
            A[g, 2 * q + h] = (lane, 0)
            A[g + 8, 2 * q + h] = (lane, 1)
            A[g, 2 * q + 8 + h] = (lane, 2)
            A[g + 8, 2 * q + 8 + h] = (lane, 3)
            B[2 * q + h, g] = (lane, 0)
            B[2 * q + 8 + h, g] = (lane, 1)
            D[g, 2 * q + h] = (lane, h)
            D[g + 8, 2 * q + h] = (lane, 2 + h)
    assert len(A) == 256 and len(B) == 128 and len(D) == 128
    fig = new_figure(10, 5.3)
    fig.suptitle('mma.sync.m16n8k16, D = C + A B on one warp: the lane that holds each element',
                 fontsize=11.5, y=0.975)
    ax = bare_axes(fig, [0.01, 0.1, 0.98, 0.8], (-1.0, 37.0), (-16.5, 2.6))
    colours = [tint(SKY, 0.35), tint(ORANGE, 0.35), tint(GREEN, 0.45), tint(PURPLE, 0.4)]
    show = 5                    # one lane's fragment, outlined
    for x0, m, rows, cols, title in ((0, A, 16, 16, 'A (16 x 16, bf16, row-major)\nregisters a[0..3]'),
                                     (17.8, B, 16, 8, 'B (16 x 8, bf16, column-major)\nregisters b[0], b[1]'),
                                     (28.6, D, 16, 8, 'C and D (16 x 8, float32)\nregisters d[0..3]')):
        ax.text(x0 + cols / 2, 0.6, title, ha='center', va='bottom', fontsize=9)
        for r in range(rows):
            for c in range(cols):
                lane, reg = m[r, c]
                box(ax, x0 + c, -r - 1, 1, 1, colours[reg], str(lane), edge='white', lw=0.8, size=6.8,
                    weight='bold' if lane == show else 'normal')
                if lane == show:
                    box(ax, x0 + c + 0.04, -r - 1 + 0.04, 0.92, 0.92, 'none', edge=BLACK, lw=1.5, z=5)
        for c in range(cols):
            ax.text(x0 + c + 0.5, 0.05, str(c), ha='center', va='bottom', fontsize=6, color='#555555')
        for r in range(rows):
            ax.text(x0 - 0.12, -r - 0.5, str(r), ha='right', va='center', fontsize=6, color='#555555')
    ax.text(16.9, -8.5, 'x', ha='center', va='center', fontsize=14)
    ax.text(27.2, -8.5, '->', ha='center', va='center', fontsize=12)
    from matplotlib.patches import Patch
    handles = [Patch(facecolor=colours[i], edgecolor='#888888', label=f'register {i} of the lane') for i in range(4)]
    handles.append(Patch(facecolor='white', edgecolor=BLACK, linewidth=1.5,
                         label=f'lane {show}\'s elements (g = {show // 4}, q = {show % 4})'))
    fig.legend(handles=handles, loc='lower center', ncol=5, fontsize=8.3, frameon=False, bbox_to_anchor=(0.5, 0.005))
    fig.text(0.5, 0.075, 'Numbers are lane ids, g = lane / 4 and q = lane % 4. An A or B register holds two '
             'bf16 side by side (a pair of k); a D register one float32.', ha='center', fontsize=8.5)
    save(fig, 'mma_lanes')


# ---------- Lesson 7 ----------

def float_bits():
    """float32, bf16 and float16: the widths of the fields, and what they give."""
    import struct
    import numpy as np
    formats = [('float32', 8, 23), ('bf16', 8, 7), ('float16', 5, 10)]

    def facts(e, m):
        bias = 2 ** (e - 1) - 1
        return (2 - 2.0 ** -m) * 2.0 ** bias, 2.0 ** (1 - bias), 2.0 ** -m
    for dtype, (name, e, m) in ((np.float32, formats[0]), (np.float16, formats[2])):
        fi = np.finfo(dtype)                     # the formulas agree with numpy's where it has the type
        assert facts(e, m) == (float(fi.max), float(fi.tiny), float(fi.eps)), name
    x = 3.14159265
    b32 = struct.unpack('<I', struct.pack('<f', x))[0]
    r = b32 + 0x7FFF + ((b32 >> 16) & 1)         # to bf16: nearest, ties to even, as bf16.py
    bits = {'float32': (b32, 32), 'bf16': (r >> 16, 16),
            'float16': (int(np.array([x], dtype=np.float16).view(np.uint16)[0]), 16)}
    value = {'float32': struct.unpack('<f', struct.pack('<I', b32))[0],
             'bf16': struct.unpack('<f', struct.pack('<I', (r >> 16) << 16))[0],
             'float16': float(np.float16(x))}
    fig = new_figure(10, 4.0)
    fig.suptitle('Three floating-point formats, with the bits of pi = 3.14159265 in each', fontsize=11.5, y=0.97)
    ax = bare_axes(fig, [0.005, 0.02, 0.99, 0.86], (-4.2, 41.0), (-12.6, 1.6))
    field_colour = {'sign': tint(VERMILLION, 0.35), 'exponent': tint(SKY, 0.3), 'mantissa': tint(YELLOW, 0.35)}
    for row, (name, e, m) in enumerate(formats):
        y = -row * 4.4
        word, n = bits[name]
        ax.text(-0.3, y - 0.5, name, ha='right', va='center', fontsize=10, weight='bold')
        for i in range(n):
            field = 'sign' if i == 0 else 'exponent' if i <= e else 'mantissa'
            box(ax, i, y - 1, 1, 1, field_colour[field], str((word >> (n - 1 - i)) & 1), edge='white', lw=1, size=8)
        for label, lo, hi in (('sign', 0, 1), (f'exponent: {e}', 1, 1 + e), (f'mantissa: {m}', 1 + e, n)):
            if label == 'sign':
                ax.text(0.5, y + 0.1, 's', ha='center', va='bottom', fontsize=8)
                continue
            ax.plot([lo + 0.05, hi - 0.05], [y + 0.2] * 2, color=BLACK, linewidth=0.8)
            ax.text((lo + hi) / 2, y + 0.3, label, ha='center', va='bottom', fontsize=8.5)
        big, tiny, eps = facts(e, m)
        ax.text(0, y - 1.4, f'{m + 1} significant bits;  largest {big:.6g}' + f';  smallest normal {tiny:.4g};  '
                f'spacing next to 1: 2^-{m} = {eps:.3g};  pi reads as {value[name]:.8g}',
                ha='left', va='top', fontsize=8.5)
    ax.text(16.4, -4.9, 'bf16: the top 16 bits of a float32\n(rounded to the nearest, ties to even)',
            ha='left', va='center', fontsize=8.5)
    ax.text(-0.3, -12.5, 'Sizes from IEEE 754 (float32, float16) and the bf16 definition; values computed in '
            'doc/lessons/figures.py (numpy agrees for float32 and float16).', ha='left', va='bottom',
            fontsize=7.5, color='#555555')
    save(fig, 'float_bits')


# ---------- Lesson 8 ----------

def flash_tiles():
    """Which (query rows, key tile) pairs flash_attention_forward_kernel computes, masks or skips."""
    f = flash_sizes()
    ROWS, TILE = f['FLASH_ROWS'], f['FLASH_TILE']
    HS = 64                                # GPT-2 124M's head size, 768 / 12
    W = min(HS, f['FLASH_FWD_W'])
    warp_rows = 32 // (HS // W)            # a thread per row, or HS / W threads sharing one
    T = 4 * ROWS
    if TILE != warp_rows or ROWS % warp_rows:   # each cell of the picture: one warp's rows by one key tile
        raise SystemExit('figures.py: flash_tiles draws a warp\'s rows by a key tile as a square: redraw it')
    fig = new_figure(10, 6.6)
    fig.suptitle(f'flash_attention_forward_kernel at T = {T}, head size {HS}: which key tiles each block '
                 'and warp computes', fontsize=11, y=0.975)
    ax = bare_axes(fig, [0.06, 0.04, 0.56, 0.86], (-4, T + 2), (T + 2, -18))
    colours = {'full': tint(BLUE, 0.25), 'diag': tint(ORANGE, 0.3), 'warp': tint(GREY, 0.5), 'none': 'white'}
    from matplotlib.patches import Polygon, Rectangle
    count = {kind: 0 for kind in colours}
    for w0 in range(0, T, warp_rows):
        row0 = w0 // ROWS * ROWS
        key_end = min(row0 + ROWS, T)
        warp_last = w0 + warp_rows - 1
        for k0 in range(0, T, TILE):
            if k0 >= key_end:
                kind = 'none'
            elif warp_last < k0:
                kind = 'warp'
            elif k0 + TILE - 1 <= w0:
                kind = 'full'
            else:
                kind = 'diag'
            count[kind] += 1
            box(ax, k0, w0, TILE, warp_rows, colours[kind] if kind != 'diag' else 'white', edge='#999999', lw=0.6,
                hatch='///' if kind == 'warp' else '..' if kind == 'diag' else None)
            if kind == 'diag':   # scores of keys <= the query count; above the diagonal, masked to -inf
                ax.add_patch(Polygon([(k0, w0), (k0, w0 + warp_rows), (k0 + TILE, w0 + warp_rows)], closed=True,
                                     facecolor=colours['diag'], edgecolor='none', zorder=3))
                ax.add_patch(Polygon([(k0, w0), (k0 + TILE, w0 + TILE)], closed=False, edgecolor=BLACK,
                                     linewidth=1.0, zorder=4, fill=False))
    for r in range(0, T + 1, ROWS):
        ax.plot([0, T], [r, r], color=BLACK, linewidth=1.8, zorder=5)
    ax.plot([0, 0], [0, T], color=BLACK, linewidth=1.8, zorder=5)
    ax.plot([T, T], [0, T], color=BLACK, linewidth=1.8, zorder=5)
    for k0 in range(0, T + 1, TILE):
        ax.text(k0, -2, str(k0), ha='center', va='bottom', fontsize=7.5)
    for r in range(0, T + 1, warp_rows):
        ax.text(-2, r, str(r), ha='right', va='center', fontsize=7.5, weight='bold' if r % ROWS == 0 else 'normal')
    ax.text(T / 2, -13, f'key position (tiles of FLASH_TILE = {TILE} keys through shared memory)', ha='center',
            va='bottom', fontsize=9)
    ax.text(-16, T / 2, f'query position (a block: FLASH_ROWS = {ROWS} rows; a warp: {warp_rows})',
            ha='center', va='center', rotation=90, fontsize=9)
    # the legend, in words
    tx = fig.add_axes([0.64, 0.04, 0.35, 0.86])
    tx.axis('off')
    items = [
        ('full', None, 'every key <= every query of the warp:\nall scores count, the mask changes nothing'),
        ('diag', '..', 'on the diagonal: all scores computed,\nthose of keys after the row (dotted,\n'
                       'above the diagonal) masked to -inf:\nexp2f gives 0'),
        ('warp', '///', 'the block loads this tile for its other\nwarp; this warp skips it '
                        '(warp_last < k0)'),
        ('none', None, 'past the block\'s last row (key_end):\nthe block never loads it'),
    ]
    y = 0.93
    for kind, hatch, words in items:
        tx.add_patch(Rectangle((0.0, y - 0.055), 0.11, 0.065, facecolor=colours[kind] if kind != 'diag' else 'white',
                               edgecolor='#777777', hatch=hatch, transform=tx.transAxes))
        if kind == 'diag':
            tx.add_patch(Polygon([(0.0, y + 0.01), (0.0, y - 0.055), (0.11, y - 0.055)], closed=True,
                                 facecolor=colours['diag'], edgecolor='none', transform=tx.transAxes))
        tx.text(0.15, y - 0.02, words, transform=tx.transAxes, fontsize=8.5, va='center')
        y -= 0.15
    tx.text(0.0, y - 0.02,
            f'A thread owns one query row and walks the\nkey tiles in order, {f["FLASH_STEP"]} keys per online-softmax\n'
            f'step (FLASH_STEP). Thick lines: the {ROWS}-row\nblocks. At head size {HS} a thread holds its\n'
            f'whole row (FLASH_FWD_W = {f["FLASH_FWD_W"]}), so a warp\nis {warp_rows} rows.\n\n'
            f'Of the {sum(count.values())} pairs of {warp_rows} rows and a key tile here,\n'
            f'{count["full"] + count["diag"]} are computed; no score is stored.',
            transform=tx.transAxes, fontsize=8.5, va='top')
    save(fig, 'flash_tiles')


# ---------- Lesson 9 ----------

def prefill_decode():
    """A prefill pass (the prompt at once) against a decode pass (one token), through infer.c's cache."""
    P, maxT = 6, 12
    new, kept, score = tint(VERMILLION, 0.45), tint(BLUE, 0.55), tint(GREEN, 0.45)
    fig = new_figure(10, 5.6)
    fig.suptitle('generator_forward (infer.c): the prefill pass, then a decode pass', fontsize=11.5, y=0.975)
    for n, (title, rows, pos) in enumerate(((f'Prefill: the prompt\'s {P} tokens in one pass (T = {P})', P, 0),
                                            (f'Decode: one new token per pass (T = 1), position {P}', 1, P))):
        ax = bare_axes(fig, [0.005 + n * 0.5, 0.08, 0.49, 0.84], (-0.7, 12.2), (-8.5, 2.5))
        ax.text(5.75, 2.4, title, ha='center', va='top', fontsize=10, weight='bold')
        # x (rows x C) times the weights (C x OC): every matmul of every block
        h = 0.4
        box(ax, 0.6, 1.2 - rows * h, 2.6, rows * h, new, lw=1.1)
        ax.text(1.9, 1.3, f'x: {rows} x C', ha='center', va='bottom', fontsize=8.5)
        for r in range(1, rows):
            ax.plot([0.6, 3.2], [1.2 - r * h] * 2, color='white', linewidth=1)
        ax.text(3.6, 1.2 - 1.2, '.', ha='center', va='center', fontsize=18)
        box(ax, 4.0, 1.2 - 2.4, 2.4, 2.4, tint(SKY, 0.4), 'weights\nC x OC', lw=1.1, size=8.5)
        ax.text(6.8, 1.2 - 1.2, '=', ha='center', va='center', fontsize=13)
        box(ax, 7.2, 1.2 - rows * h, 2.6, rows * h, new, lw=1.1)
        ax.text(8.5, 1.3, f'{rows} x OC', ha='center', va='bottom', fontsize=8.5)
        kind = (f'matrix-matrix: the weights are read once for {P} tokens' if rows > 1 else
                'matrix-vector: all the weights are read for one token')
        ax.text(5.75, -1.4, kind, ha='center', va='top', fontsize=8.5)
        # the cache of one layer and head: a key and a value per position
        cy, ch, cw = -2.75, 0.7, 0.9
        ax.text(-0.6, cy + 0.1, 'the KV cache (each layer and head), by position:', ha='left', va='bottom',
                fontsize=8.5)
        for t in range(maxT):
            face = new if pos <= t < pos + rows else kept if t < pos else 'white'
            for j in range(2):
                box(ax, 0.6 + t * cw, cy - (j + 1) * ch, cw, ch, face, edge='#777777', lw=0.8)
            ax.text(0.6 + (t + 0.5) * cw, cy - 2 * ch - 0.08, str(t), ha='center', va='top', fontsize=7.5)
        ax.text(0.45, cy - 0.5 * ch, 'K', ha='right', va='center', fontsize=9)
        ax.text(0.45, cy - 1.5 * ch, 'V', ha='right', va='center', fontsize=9)
        # attention: which cached positions each new query reads
        ay, ah = -5.3, 0.4
        ax.text(-0.6, ay + 0.1, 'attention: new queries (down) against cached keys (across)', ha='left',
                va='bottom', fontsize=8.5)
        for r in range(rows):
            t = pos + r
            ax.text(0.45, ay - (r + 0.5) * ah, f'q{t}', ha='right', va='center', fontsize=7.5)
            for t2 in range(maxT):
                box(ax, 0.6 + t2 * cw, ay - (r + 1) * ah, cw, ah, score if t2 <= t else 'white', edge='#AAAAAA', lw=0.6)
        foot = (f'{P} keys and values written; {P * (P + 1) // 2} scores (causal)' if rows > 1 else
                f'1 key and value written (position {pos});\nthe query reads all {pos + 1} cached positions')
        ax.text(-0.6, ay - rows * ah - 0.2, foot, ha='left', va='top', fontsize=8.5)
    from matplotlib.patches import Patch
    from matplotlib.lines import Line2D
    fig.legend(handles=[Patch(facecolor=new, edgecolor='#777777', label='new in this pass'),
                        Patch(facecolor=kept, edgecolor='#777777', label='kept from earlier passes'),
                        Patch(facecolor=score, edgecolor='#777777', label='a score computed'),
                        Patch(facecolor='white', edgecolor='#777777', label='not used yet')],
               loc='lower center', ncol=4, fontsize=8.5, frameon=False, bbox_to_anchor=(0.5, 0.0))
    fig.add_artist(Line2D([0.5, 0.5], [0.1, 0.9], color='#999999', linewidth=1))
    save(fig, 'prefill_decode')


# ---------- Lesson 10 ----------

def ring_allreduce():
    """The ring all-reduce of 4 ranks, simulated: a reduce-scatter, then an all-gather."""
    N = 4
    have = [[{r} for _ in range(N)] for r in range(N)]   # have[rank][chunk]: whose parts it sums
    states, notes = [[[set(c) for c in row] for row in have]], ['start: each rank\nholds its own']
    changed = [set()]
    for s in range(N - 1):       # reduce-scatter: rank r sends chunk (r - s) mod N to r + 1, which adds
        sent = [(r, (r - s) % N, set(have[r][(r - s) % N])) for r in range(N)]
        for r, c, part in sent:
            have[(r + 1) % N][c] |= part
        states.append([[set(c) for c in row] for row in have])
        changed.append({((r + 1) % N, c) for r, c, _ in sent})
        notes.append(f'reduce-scatter {s + 1}')
    for r in range(N):
        assert have[r][(r + 1) % N] == set(range(N))
    for s in range(N - 1):       # all-gather: rank r sends its finished chunk (r + 1 - s) mod N on, copied
        sent = [(r, (r + 1 - s) % N, set(have[r][(r + 1 - s) % N])) for r in range(N)]
        for r, c, part in sent:
            have[(r + 1) % N][c] = part
        states.append([[set(c) for c in row] for row in have])
        changed.append({((r + 1) % N, c) for r, c, _ in sent})
        notes.append(f'all-gather {s + 1}')
    assert all(c == set(range(N)) for row in have for c in row)
    fig = new_figure(10, 5.0)
    fig.suptitle(f'Ring all-reduce over {N} ranks: the gradient in {N} chunks; each rank sends to the next',
                 fontsize=11.5, y=0.975)
    ax = bare_axes(fig, [0.0, 0.02, 0.72, 0.87], (-3.3, N * (N + 0.6) - 0.5), (-len(states) * 1.12 - 0.1, 1.5))
    ax.set_aspect('auto')
    shades = [tint(BLUE, 0.85), tint(BLUE, 0.6), tint(BLUE, 0.3), BLUE]
    for r in range(N):
        ax.text(r * (N + 0.6) + N / 2, 0.9, f'rank {r}', ha='center', va='bottom', fontsize=10, weight='bold')
        for c in range(N):
            ax.text(r * (N + 0.6) + c + 0.5, 0.25, f'chunk {c}' if c == 0 else str(c), ha='center', va='bottom',
                    fontsize=7, color='#555555')
    for row, (state, note) in enumerate(zip(states, notes)):
        y = -row * 1.12
        if row == N:
            ax.plot([-3.3, N * (N + 0.6) - 0.6], [y + 0.11, y + 0.11], color='#999999', linewidth=0.8, linestyle='--')
        ax.text(-3.2, y - 0.45, note, ha='left', va='center', fontsize=8.5)
        for r in range(N):
            for c in range(N):
                parts = state[r][c]
                full = len(parts) == N
                label = 'sum' if full else '+'.join(str(p) for p in sorted(parts))
                box(ax, r * (N + 0.6) + c, y - 0.9, 1, 0.9, shades[len(parts) - 1], label,
                    edge=BLACK if (r, c) in changed[row] else 'white', lw=2.0 if (r, c) in changed[row] else 1,
                    size=6.8, colour='white' if len(parts) >= 3 else BLACK, z=3 if (r, c) in changed[row] else 2)
    # the ring itself
    import math
    ring = fig.add_axes([0.76, 0.62, 0.2, 0.26])
    ring.set_xlim(-1.5, 1.5)
    ring.set_ylim(-1.5, 1.5)
    ring.set_aspect('equal')
    ring.axis('off')
    pts = [(math.cos(math.pi / 2 - 2 * math.pi * r / N), math.sin(math.pi / 2 - 2 * math.pi * r / N)) for r in range(N)]
    for r, (x, y) in enumerate(pts):
        x1, y1 = pts[(r + 1) % N]
        arrow(ring, x + (x1 - x) * 0.3, y + (y1 - y) * 0.3, x + (x1 - x) * 0.7, y + (y1 - y) * 0.7)
        from matplotlib.patches import Circle
        ring.add_patch(Circle((x, y), 0.32, facecolor=tint(SKY, 0.5), edgecolor=BLACK, zorder=3))
        ring.text(x, y, str(r), ha='center', va='center', fontsize=10, zorder=4)
    tx = fig.add_axes([0.74, 0.02, 0.26, 0.58])
    tx.axis('off')
    tx.text(0.0, 1.0, 'Labels: whose parts a chunk sums so\nfar. Outlined: what a rank received.\n\n'
            'Reduce-scatter step s = 0, 1, 2: rank r\nsends chunk (r - s) mod 4 to rank r + 1,\n'
            'which adds it to its own. After step 2\nrank r holds the whole sum of chunk\n(r + 1) mod 4. '
            'All-gather step s: rank r\nsends chunk (r + 1 - s) mod 4 on, which\nthe next rank copies.\n\n'
            f'Every step each rank sends 1/{N} of the\narray: 2 ({N} - 1) / {N} = {2 * (N - 1) / N:g} times '
            'the array\nin all, and under 2 for any number\nof ranks.'.replace('mod 4', f'mod {N}'),
            fontsize=8.3, va='top')
    save(fig, 'ring_allreduce')


FIGURES = {
    'block': block,                    # Lesson 2
    'causal_scores': causal_scores,    # Lesson 2
    'gemm_loops': gemm_loops,          # Lesson 6
    'mma_lanes': mma_lanes,            # Lesson 6
    'float_bits': float_bits,          # Lesson 7
    'flash_tiles': flash_tiles,        # Lesson 8
    'prefill_decode': prefill_decode,  # Lesson 9
    'ring_allreduce': ring_allreduce,  # Lesson 10
}


def main(args):
    if args == ['--list']:
        print('\n'.join(FIGURES))
        return 0
    if args == ['--check']:
        bad = 0
        for name in FIGURES:
            path = os.path.join(OUT, name + '.png')
            want = from_code(name)
            have = png_description(path) if os.path.exists(path) else 'no file'
            if have != want:
                print(f'figures.py: doc/lessons/fig/{name}.png was drawn from {have!r}, the code now gives '
                      f'{want!r}: run python3 doc/lessons/figures.py {name}')
                bad += 1
        return 1 if bad else 0
    if any(a.startswith('-') for a in args):
        print(__doc__.split('\n\n')[1], file=sys.stderr)
        return 2
    unknown = [a for a in args if a not in FIGURES]
    if unknown:
        print(f'figures.py: no picture named {", ".join(unknown)} (--list gives the names)', file=sys.stderr)
        return 2
    for name in args or FIGURES:
        FIGURES[name]()
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
