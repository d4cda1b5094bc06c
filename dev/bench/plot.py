#!/usr/bin/env python3
"""Pictures of training runs and benchmarks, drawn with matplotlib (Debian's python3-matplotlib).

  plot.py loss OUT.png LOG [LOG...]     training and validation loss against the step, one colour
                                        per main.log (make plot LOG="a/main.log b/main.log" OUT=x.png)
  plot.py bench-cpu OUT.png TEXT        make bench-cpu's summary (its "NAME PRECISION: X ms/step ..."
                                        lines) as bars per model: train_cpu in fp32 and in bf16
                                        against PyTorch, and each against the peak of its precision
  plot.py bench-gpu OUT.png TABLE.md    make bench-gpu's table (doc/results/gpu_speedup.md) as bars:
                                        ms per step of the CPU, the GPU in fp32 and in bf16, per model
  plot.py bench-infer OUT.png TEXT      make bench-infer's tables: decode tokens/s against the batch
                                        size in float32 and in bf16, with each one's memory-bandwidth
                                        and peak limits beside it, and bf16's speed-up over float32
  plot.py bench-serve OUT.png TEXT      make bench-serve's table: tokens/s of the server and of the
                                        offline engine against the clients, and the server's latency
  plot.py bench-parallel OUT.png TEXT   make bench-parallel's table: memory per process and the step
                                        time split into compute and communication, per way of splitting
  plot.py bench-gpu-peers OUT.png TABLE.md
                                        make bench-gpu-peers's table (peers.md): tokens/s and peak GPU
                                        memory of train_gpu, llm.c and PyTorch, per batch size

Each prints one line per series it drew (what it read, so that a reader or a test can check it),
writes OUT through a temporary file (an existing OUT is replaced only by a finished picture), and
on bad input prints one line "plot: ..." and exits 1.
"""
import os
import re
import sys
import tempfile


def fail(msg):
    print(f'plot: {msg}', file=sys.stderr)
    sys.exit(1)


def read_text(path):
    try:
        with open(path, encoding='utf-8', errors='replace') as f:
            return f.read()
    except OSError as e:
        fail(f'cannot read {path}: {e.strerror}')


def pyplot():
    try:
        import matplotlib
    except ImportError:
        fail('matplotlib is missing: apt-get install python3-matplotlib (bash dev/bench/setup_plot.sh does it)')
    matplotlib.use('Agg')  # files only, no display
    import matplotlib.pyplot as plt
    return plt


def save(fig, out):
    """Writes the figure to a temporary file beside OUT, then renames it over OUT."""
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        fail(f'cannot write {out}: no folder {folder}')
    if not out.lower().endswith('.png'):
        fail(f'{out}: the picture is a PNG, name it NAME.png')
    fd, tmp = tempfile.mkstemp(suffix='.png', dir=folder)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110, bbox_inches='tight')
        os.replace(tmp, out)
    except Exception as e:
        os.unlink(tmp)
        fail(f'cannot write {out}: {e}')
    print(f'wrote {out}')


# ---------- loss curves from main.log ----------

def read_log(path):
    """(train, val): lists of (step, loss) from main.log's "s:STEP trl:LOSS" and "s:STEP tel:LOSS"
    lines. A resumed run appends to the same log: a step seen again replaces the earlier value."""
    train, val = {}, {}
    for n, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        m = re.match(r'^s:(\d+) (trl|tel):(\S+)$', line.strip())
        if not m:
            fail(f'{path}:{n}: not a main.log line (expected "s:STEP trl:LOSS" or "s:STEP tel:LOSS"): {line[:60]!r}')
        try:
            value = float(m.group(3))
        except ValueError:
            fail(f'{path}:{n}: {m.group(3)!r} is not a number')
        (train if m.group(2) == 'trl' else val)[int(m.group(1))] = value
    if not train and not val:
        fail(f'{path} has no loss lines: is it the main.log that train_cpu -o DIR writes?')
    return sorted(train.items()), sorted(val.items())


def label_of(path):
    """A log's name on the plot: its folder for DIR/main.log, else the file's name."""
    base = os.path.basename(path)
    if base == 'main.log':
        return os.path.basename(os.path.dirname(os.path.abspath(path))) or base
    return base


def plot_loss(out, logs):
    if not logs:
        fail('no log given: make plot LOG=DIR/main.log OUT=FILE.png (several logs: LOG="a/main.log b/main.log")')
    runs = [(label_of(p), *read_log(p)) for p in logs]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, (label, train, val) in enumerate(runs):
        colour = f'C{i % 10}'
        if train:
            xs, ys = zip(*train)
            ax.plot(xs, ys, color=colour, alpha=0.35, linewidth=0.8, label=f'{label} train')
        if val:
            xs, ys = zip(*val)
            ax.plot(xs, ys, color=colour, marker='o', markersize=3.5, linewidth=1.6, label=f'{label} val')
        print(f'{label}: {len(train)} training losses, {len(val)} validation losses' +
              (f', last val loss {val[-1][1]:.4f} at step {val[-1][0]}' if val else ''))
    ax.set_xlabel('step')
    ax.set_ylabel('loss (cross-entropy, nats per token)')
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, out)


# ---------- benchmark bars ----------

def read_bench_cpu(path):
    """The peaks and rows of bench_cpu.sh's summary: ({precision: peak GFLOP/s}, [(model, precision,
    ms/step, GFLOP/s, % of peak, PyTorch ms/step or None)], the text). A summary written before
    bench_cpu.sh ran bf16 ("== summary: FMA peak X", rows "NAME: ...") reads as fp32 only, with
    the precision None."""
    text = read_text(path)
    summary = re.search(r'^== summary: (.*)$', text, re.M)
    peaks = {}
    if summary:
        old = re.match(r'FMA peak ([0-9.]+) GFLOP/s', summary.group(1))
        if old:
            peaks['fp32'] = float(old.group(1))
        for prec, value in re.findall(r'\b(fp32|bf16) ([0-9.]+) GFLOP/s', summary.group(1)):
            peaks[prec] = float(value)
    rows = []
    for m in re.finditer(r'^(\S+)(?: (fp32|bf16))?: ([0-9.]+) ms/step \(median.*?, ([0-9.]+) GFLOP/s = ([0-9.]+)% of (?:FMA|fp32|bf16) peak'
                         r'(?:.*?; PyTorch ([0-9.]+) ms/step)?', text, re.M):
        name, prec, ms, gflops, pct, torch = m.groups()
        rows.append((name, prec, float(ms), float(gflops), float(pct), float(torch) if torch else None))
    if not peaks or not rows:
        fail(f'{path} has no bench-cpu summary (the "== summary" line and "NAME PRECISION: X ms/step ..." lines of make bench-cpu)')
    for r in rows:
        if (r[1] or 'fp32') not in peaks:
            fail(f'{path}: the summary line gives no {r[1]} peak for the row {r[0]} {r[1]}')
    return peaks, rows, text


def plot_bench_cpu(out, path):
    """Bars from bench_cpu.sh's summary, per model: left, ms per step of train_cpu in fp32 and in
    bf16 and of PyTorch (fp32), each labelled with its ratio to train_cpu's fp32; right, the
    GFLOP/s train_cpu reached in each precision under that precision's peak, measured in the same
    run."""
    peaks, rows, text = read_bench_cpu(path)
    machine = re.search(r'^machine: (.*)$', text, re.M)
    names = list(dict.fromkeys(r[0] for r in rows))     # the models, in the order of the summary
    precs = [p for p in ('fp32', 'bf16') if any((r[1] or 'fp32') == p for r in rows)]
    row = {(r[0], r[1] or 'fp32'): r for r in rows}
    colour = {'fp32': 'C0', 'bf16': 'C2'}
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    xs = range(len(names))
    series = [(f'train_cpu {p}', colour[p], [row[(n, p)][2] if (n, p) in row else 0.0 for n in names]) for p in precs]
    torch = [row[(n, 'fp32')][5] if (n, 'fp32') in row and row[(n, 'fp32')][5] else 0.0 for n in names]
    if any(torch):
        series.append(('PyTorch fp32 (same step)', 'C1', torch))
    w = 0.8 / len(series)
    for k, (label, c, ys) in enumerate(series):
        at = [x + (k - (len(series) - 1) / 2) * w for x in xs]
        left.bar([a for a, y in zip(at, ys) if y], [y for y in ys if y], w, label=label, color=c)
        for a, n, y in zip(at, names, ys):
            base = row[(n, 'fp32')][2] if (n, 'fp32') in row else None
            if y:
                note = f'\n({base / y:.2f}x)' if k > 0 and base and label.startswith('train_cpu') else \
                       f'\n({y / base:.1f}x)' if k > 0 and base else ''
                left.annotate(f'{y:.0f}{note}', (a, y), ha='center', va='bottom', fontsize=7)
    if any(torch):
        left.set_yscale('log')
    left.set_xticks(list(xs), names)
    left.set_ylabel('ms per training step (lower is better)')
    left.set_title("labels: ms; (bf16's speed-up over train_cpu fp32, PyTorch's time over it)", fontsize=7)
    top = max(max(ys) for _, _, ys in series)
    left.set_ylim(top=top * (8 if any(torch) else 1.35))   # room for the labels and the legend
    left.legend(fontsize=8, loc='upper right')
    w = 0.8 / len(precs)
    for k, p in enumerate(precs):
        at = [x + (k - (len(precs) - 1) / 2) * w for x in xs]
        ys = [row[(n, p)][3] if (n, p) in row else 0.0 for n in names]
        right.bar(at, ys, w, color=colour[p], label=f'train_cpu {p}')
        right.axhline(peaks[p], color=colour[p], linestyle='--', linewidth=1,
                      label=f'{p} peak {peaks[p]:.0f} GFLOP/s (measured in the run)')
        for a, n, y in zip(at, names, ys):
            if (n, p) in row:
                right.annotate(f'{y:.0f}\n({row[(n, p)][4]:.1f}%)', (a, y), ha='center', va='bottom', fontsize=7)
    right.set_xticks(list(xs), names)
    right.set_ylabel('train_cpu GFLOP/s (model FLOPs: 6PBT per step)')
    right.set_title('labels: GFLOP/s (% of the peak of its precision)', fontsize=7)
    right.set_ylim(0, max(peaks[p] for p in precs) * 1.35)
    right.legend(fontsize=7, loc='upper left')
    if machine:
        fig.suptitle(f'make bench-cpu on {machine.group(1)}', fontsize=9)
    for r in rows:
        label = f'{r[0]} {r[1]}' if r[1] else r[0]
        line = f'{label}: train_cpu {r[2]} ms/step, {r[3]} GFLOP/s ({r[4]}% of peak {peaks[r[1] or "fp32"]})'
        if r[5]:
            line += f', PyTorch {r[5]} ms/step'
        if r[1] == 'bf16' and (r[0], 'fp32') in row:
            line += f', {row[(r[0], "fp32")][2] / r[2]:.2f}x the speed of fp32'
        print(line)
    save(fig, out)


def plot_bench_gpu(out, path):
    """Bars from gpu_speedup.sh's table: per model, ms per step on the CPU, the GPU in fp32 and in
    bf16 (log scale), each GPU bar labelled with its speedup over the CPU."""
    text = read_text(path)
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if len(cells) >= 12 and re.match(r'^d\d+$', cells[0]):
            try:
                rows.append((cells[0], float(cells[2]), float(cells[4]), float(cells[7])))
            except ValueError:
                fail(f'{path}: a row of the table has a cell that is not a number: {line.strip()[:80]}')
    if not rows:
        fail(f'{path} has no bench-gpu table (rows "| dN | ... |" as make bench-gpu writes them)')
    gpu = re.search(r'^- GPU: (.*)$', text, re.M)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    w = 0.27
    xs = range(len(rows))
    for k, (name, colour) in enumerate([('CPU (train_cpu)', 'C0'), ('GPU fp32', 'C2'), ('GPU bf16', 'C3')]):
        ys = [r[1 + k] for r in rows]
        ax.bar([x + (k - 1) * w for x in xs], ys, w, label=name, color=colour)
        if k > 0:
            for x, r in zip(xs, rows):
                ax.annotate(f'{r[1] / r[1 + k]:.0f}x', (x + (k - 1) * w, r[1 + k]), ha='center', va='bottom', fontsize=7)
    ax.set_yscale('log')
    ax.set_xticks(list(xs), [r[0] for r in rows])
    ax.set_xlabel('model depth (dN: N layers, C = 64N; d12 = GPT-2 124M)')
    ax.set_ylabel('ms per training step (log scale)')
    ax.legend(fontsize=8)
    if gpu:
        ax.set_title(f'make bench-gpu: {gpu.group(1)}', fontsize=9)
    for r in rows:
        print(f'{r[0]}: CPU {r[1]} ms/step, GPU fp32 {r[2]} ms ({r[1] / r[2]:.0f}x), bf16 {r[3]} ms ({r[1] / r[3]:.0f}x)')
    save(fig, out)


def read_bench_infer(path):
    """[(name, title, rows)] from bench_infer.sh's output: each "== NAME: TITLE" line (NAME: infer,
    infer -w bf16, infer_gpu) and the table under it, rows (batch, tok/s, bandwidth limit, compute
    limit), a limit None where unmeasured."""
    sweeps = []
    for line in read_text(path).splitlines():
        head = re.match(r'^== (\S+(?: -w \S+)?): (.*)$', line)
        if head:
            sweeps.append((head.group(1), head.group(2), []))
            continue
        row = re.match(r'^\s*(\d+)\s+([0-9.]+)\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+\d+%\s+\S+\s+(\S+)\s+(\S+)\s', line)
        if row and sweeps:
            limit = [None if v == 'unmeasured' else float(v) for v in row.group(3, 4)]
            sweeps[-1][2].append((int(row.group(1)), float(row.group(2)), *limit))
    sweeps = [s for s in sweeps if s[2]]
    if not sweeps:
        fail(f'{path} has no bench-infer table (a "== infer: ..." line and rows "BATCH TOK/S ..." as make bench-infer prints them)')
    return sweeps


def plot_bench_infer(out, path):
    """Left: decode tokens/s against the batch size (both axes log), one line per program and
    precision, and for a sweep whose limits were measured, its bandwidth limit (B x bandwidth /
    bytes per step, binding at small batches) and compute limit (its precision's peak / FLOPs per
    token, at large ones). Right, where the text has both infer (float32) and infer -w bf16: bf16's
    tokens/s over float32's at each batch size."""
    sweeps = read_bench_infer(path)
    text = read_text(path)
    machine = re.search(r'^machine: ([^;]*)', text, re.M)
    by_name = {name: rows for name, _, rows in sweeps}
    both = 'infer' in by_name and 'infer -w bf16' in by_name
    plt = pyplot()
    if both:
        fig, (ax, right) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={'width_ratios': [3, 2]})
    else:
        fig, ax = plt.subplots(figsize=(8, 5))
    for i, (name, title, rows) in enumerate(sweeps):
        batches = [r[0] for r in rows]
        tps = [r[1] for r in rows]
        colour = f'C{2 * i}'
        label = f'{name} (float32)' if both and name == 'infer' else name
        ax.plot(batches, tps, marker='o', color=colour, linewidth=1.8, label=f'{label}: decode tok/s (measured)')
        for b, t in zip(batches, tps):
            ax.annotate(f'{t:.0f}', (b, t), textcoords='offset points', xytext=(0, -12), ha='center', fontsize=7)
        line = f'{name}: {len(rows)} batch sizes, batch {batches[0]} at {tps[0]} tok/s to batch {batches[-1]} at {tps[-1]} tok/s ({tps[-1] / tps[0]:.1f}x)'
        if all(r[2] is not None and r[3] is not None for r in rows):
            ax.plot(batches, [r[2] for r in rows], linestyle='--', color=colour, alpha=0.6,
                    label=f'{label}: memory-bandwidth limit (B x GB/s / bytes per step)')
            ax.plot(batches, [r[3] for r in rows], linestyle=':', color=colour, alpha=0.9,
                    label=f'{label}: compute limit (peak / FLOPs per token)')
            line += f'; bandwidth limit {rows[0][2]} to {rows[-1][2]} tok/s, compute limit {rows[-1][3]} tok/s'
        else:
            line += '; limits unmeasured'
        print(line)
    ax.set_xscale('log', base=2)
    ax.set_yscale('log')
    all_batches = sorted({r[0] for s in sweeps for r in s[2]})
    ax.set_xticks(all_batches, [str(b) for b in all_batches])
    ax.set_xlabel('batch size (sequences decoded together)')
    ax.set_ylabel('decode tokens/s, all sequences together (log scale)')
    ax.grid(True, which='both', alpha=0.3)
    bottom, top = ax.get_ylim()
    ax.set_ylim(bottom, top * 3)  # room for the legend above the curves
    ax.legend(fontsize=7, loc='upper left')
    if both:
        fp32 = {r[0]: r[1] for r in by_name['infer']}
        bf16 = {r[0]: r[1] for r in by_name['infer -w bf16']}
        batches = [b for b in all_batches if b in fp32 and b in bf16]
        ratios = [bf16[b] / fp32[b] for b in batches]
        xs = range(len(batches))
        right.bar(xs, ratios, 0.6, color='C2')
        right.axhline(1.0, color='k', linewidth=0.8)
        for x, r in zip(xs, ratios):
            right.annotate(f'{r:.2f}x', (x, r), ha='center', va='bottom', fontsize=8)
        right.set_xticks(list(xs), [str(b) for b in batches])
        right.set_xlabel('batch size')
        right.set_ylabel('bf16 tok/s / float32 tok/s (same run)')
        right.set_ylim(0, max(ratios + [2.0]) * 1.2)
        right.set_title('bf16 weights against float32, batch by batch', fontsize=9)
        print('bf16 over fp32: ' + ', '.join(f'batch {b} {r:.2f}x' for b, r in zip(batches, ratios)))
    model = re.search(r'model: (L=\S+ NH=\S+ C=\S+)', sweeps[0][1])
    heading = 'make bench-infer' + (f': {model.group(1)}' if model else '') + (f', {machine.group(1)}' if machine else '')
    if both:
        fig.suptitle(heading, fontsize=9)
    else:
        ax.set_title(heading, fontsize=9)
    save(fig, out)


def read_bench_serve(path):
    """The rows of bench_serve.sh's table (under its "== server:" line): (clients, tok/s, offline
    tok/s, TTFT p50, TTFT p99, ms/token p50, ms/token p99), and the text."""
    text = read_text(path)
    rows, inside = [], False
    number = r'\s+([0-9.]+)'
    for line in text.splitlines():
        if line.startswith('== server:'):
            inside = True
            continue
        row = re.match(r'^\s*(\d+)' + number * 2 + r'\s+[0-9.]+%' + number * 4 + r'\s', line)
        if inside and row:
            rows.append((int(row.group(1)), *(float(v) for v in row.groups()[1:])))
    if not rows:
        fail(f'{path} has no bench-serve table (a "== server: ..." line and rows "CLIENTS TOK/S OFFLINE ..." as make bench-serve prints them)')
    return rows, text


def plot_bench_serve(out, path):
    """Left: tokens/s against the number of clients, of the server (its clients' count) and of the
    offline engine at the same batch, each server point labelled with its % of the offline one.
    Right: the server's latency from the clients' side, time to first token and ms per token after
    it, p50 (solid) and p99 (dashed), both axes log."""
    rows, text = read_bench_serve(path)
    machine = re.search(r'^machine: ([^;]*)', text, re.M)
    model = re.search(r'model: (L=\S+ NH=\S+ C=\S+)', text)
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    clients = [r[0] for r in rows]
    served, offline = [r[1] for r in rows], [r[2] for r in rows]
    left.plot(clients, offline, marker='s', color='C1', linewidth=1.8, label='./infer -f, same requests, -b clients (offline)')
    left.plot(clients, served, marker='o', color='C0', linewidth=1.8, label='./infer --serve -b clients, streamed to the clients')
    for c, s, o in zip(clients, served, offline):
        left.annotate(f'{s:.0f} ({100 * s / o:.0f}%)', (c, s), textcoords='offset points', xytext=(0, -13), ha='center', fontsize=7)
    print(f'tokens/s: server {served[0]} to {served[-1]}, offline {offline[0]} to {offline[-1]}, '
          f'the server at {100 * served[0] / offline[0]:.1f}% to {100 * served[-1] / offline[-1]:.1f}% of the offline engine')
    left.set_ylabel('tokens/s, all requests together')
    left.set_ylim(0, max(served + offline) * 1.25)
    left.legend(fontsize=7, loc='upper left')
    for k, (name, colour) in enumerate([('time to first token', 'C3'), ('ms per token after it', 'C2')]):
        p50, p99 = [r[3 + 2 * k] for r in rows], [r[4 + 2 * k] for r in rows]
        right.plot(clients, p50, marker='o', color=colour, linewidth=1.8, label=f'{name}, p50')
        right.plot(clients, p99, marker='o', color=colour, linewidth=1.2, linestyle='--', label=f'{name}, p99')
        print(f'{name}: p50 {p50[0]} to {p50[-1]} ms, p99 {p99[0]} to {p99[-1]} ms')
    right.set_yscale('log')
    right.set_ylabel('ms, per request (log scale)')
    right.legend(fontsize=7, loc='upper left')
    bottom, top = right.get_ylim()
    right.set_ylim(bottom, top * 4)  # room for the legend above the curves
    for ax in (left, right):
        ax.set_xscale('log', base=2)
        ax.set_xticks(clients, [str(c) for c in clients])
        ax.set_xlabel('clients, one request at a time each (= the batch, -b)')
        ax.grid(True, which='both', alpha=0.3)
    fig.suptitle('make bench-serve' + (f': {model.group(1)}' if model else '') +
                 (f', {machine.group(1)}' if machine else ''), fontsize=9)
    save(fig, out)


def read_bench_parallel(path):
    """The rows of bench_parallel.sh's table: (label, processes, ms/step, speedup, state MB,
    activations MB, comm ms or None), and the text."""
    text = read_text(path)
    rows = []
    row = re.compile(r'^(\S.*?)\s{2,}(\d+)\s+([0-9.]+)\s+\d+\s+([0-9.]+)x\s+[0-9.]+ \(([0-9.]+) \+ ([0-9.]+)\)'
                     r'\s+(?:-|([0-9.]+) \(\s*\d+%\)\*?)\s')
    for line in text.splitlines():
        m = row.match(line)
        if m:
            rows.append((m.group(1), int(m.group(2)), *(float(v) for v in m.group(3, 4, 5, 6)),
                         float(m.group(7)) if m.group(7) else None))
    if not rows:
        fail(f'{path} has no bench-parallel table (rows "LABEL  PROCS MS TOK/S SPEEDUPx MB (STATE + ACT) ..." as make bench-parallel writes them)')
    return rows, text


def plot_bench_parallel(out, path):
    """Left: the memory of the process that holds the most, parameters + gradients + AdamW moments
    under its activations (and their gradients). Right: ms per step, rank 0's communication
    (waiting for the other rank included) on top of the rest, each bar labelled with its speedup
    over the first row."""
    rows, text = read_bench_parallel(path)
    machine = re.search(r'^machine: ([^;]*)', text, re.M)
    batch = re.search(r'^batch: (\d+ x \d+ = \d+ tokens per step)', text, re.M)
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    xs = range(len(rows))
    names = [r[0].replace(' + ', '\n').replace(' x ', ',\n') for r in rows]
    state, act = [r[4] for r in rows], [r[5] for r in rows]
    left.bar(xs, state, 0.6, color='C0', label='parameters + gradients + AdamW m, v')
    left.bar(xs, act, 0.6, bottom=state, color='C1', label='activations + their gradients')
    for x, s, a in zip(xs, state, act):
        left.annotate(f'{s + a:.0f}', (x, s + a), ha='center', va='bottom', fontsize=8)
    left.set_ylabel('MB per process (the one that holds the most)')
    left.set_ylim(0, max(s + a for s, a in zip(state, act)) * 1.3)
    left.legend(fontsize=8, loc='upper right')
    comm = [r[6] or 0.0 for r in rows]
    compute = [r[2] - c for r, c in zip(rows, comm)]
    right.bar(xs, compute, 0.6, color='C2', label="the rest of rank 0's step: compute")
    right.bar(xs, comm, 0.6, bottom=compute, color='C3', label="rank 0's communication, waiting included")
    right.axhline(rows[0][2], color='k', linestyle='--', linewidth=1, label=f'{rows[0][0]}: {rows[0][2]:.0f} ms')
    for x, r in zip(xs, rows):
        right.annotate(f'{r[2]:.0f} ms\n{r[3]:.2f}x', (x, r[2]), ha='center', va='bottom', fontsize=8)
    right.set_ylabel('ms per training step (median)')
    right.set_ylim(0, max(r[2] for r in rows) * 1.5)  # room for the legend above the bars
    right.legend(fontsize=8, loc='upper left')
    for ax in (left, right):
        ax.set_xticks(list(xs), names, fontsize=8)
    fig.suptitle('make bench-parallel: d4' + (f', {batch.group(1)}' if batch else '') + ', one thread per process' +
                 (f'; {machine.group(1)}' if machine else ''), fontsize=9)
    for r, c in zip(rows, comm):
        print(f'{r[0]}: {r[1]} process{"es" if r[1] > 1 else ""}, {r[2]} ms/step ({r[3]:.2f}x), compute {r[2] - c:.1f} + '
              f'communication {c:.1f} ms, {r[4] + r[5]:.1f} MB per process')
    save(fig, out)


def read_bench_gpu_peers(path):
    """The rows of bench_gpu_peers.sh's table: (trainer, B, tokens/s, memory GiB), the last two
    None where the run gave none (it failed, or did not run), and the text."""
    text = read_text(path)
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if len(cells) != 7 or not cells[1].isdigit():
            continue
        tps = cells[2].replace(',', '')
        mem = re.match(r'^([0-9.]+) GiB$', cells[5])
        rows.append((cells[0], int(cells[1]), float(tps) if re.match(r'^[0-9.]+$', tps) else None,
                     float(mem.group(1)) if mem else None))
    if not rows:
        fail(f'{path} has no bench-gpu-peers table (rows "| TRAINER | B | TOKENS/S | ..." as make bench-gpu-peers writes them)')
    return rows, text


def plot_bench_gpu_peers(out, path):
    """Left: tokens/s per batch size, a bar per trainer, labelled with its ratio to train_gpu's.
    Right: the peak GPU memory of the same runs. A run without figures gets no bar, its name says why."""
    rows, text = read_bench_gpu_peers(path)
    gpu = re.search(r'^- GPU: ([^,]*)', text, re.M)
    trainers = list(dict.fromkeys(r[0] for r in rows))
    batches = sorted({r[1] for r in rows})
    by = {(r[0], r[1]): r for r in rows}
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
    w = 0.8 / len(trainers)
    for k, name in enumerate(trainers):
        xs = [i + (k - (len(trainers) - 1) / 2) * w for i in range(len(batches))]
        for ax, col in ((left, 2), (right, 3)):
            ys = [by[(name, b)][col] if (name, b) in by and by[(name, b)][col] is not None else 0 for b in batches]
            ax.bar(xs, ys, w, label=name, color=f'C{k}')
        for x, b in zip(xs, batches):
            r = by.get((name, b))
            ours = next((by[(t, b)][2] for t in trainers if t.startswith('train_gpu') and (t, b) in by), None)
            if r and r[2] is not None:
                left.annotate(f'{r[2] / ours:.2f}x' if ours else '', (x, r[2]), ha='center', va='bottom', fontsize=7)
            elif r:
                left.annotate('no run', (x, 0), ha='center', va='bottom', fontsize=7, rotation=90)
    for ax, what in ((left, 'tokens/s (median step)'), (right, 'peak GPU memory, GiB (nvidia-smi)')):
        ax.set_xticks(range(len(batches)), [f'B={b}' for b in batches])
        ax.set_ylabel(what)
    fig.legend(*left.get_legend_handles_labels(), fontsize=8, loc='lower center', ncol=len(trainers),
               bbox_to_anchor=(0.5, -0.06))
    fig.suptitle('make bench-gpu-peers: GPT-2 124M, T=1024' + (f'; {gpu.group(1)}' if gpu else ''), fontsize=9)
    for r in rows:
        print(f'{r[0]}, B={r[1]}: ' + (f'{r[2]:.0f} tokens/s' if r[2] is not None else 'no figures') +
              (f', {r[3]} GiB' if r[3] is not None else ''))
    save(fig, out)


def main(argv):
    if len(argv) < 2 or argv[0] not in ('loss', 'bench-cpu', 'bench-gpu', 'bench-infer', 'bench-serve', 'bench-parallel',
                                        'bench-gpu-peers'):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    kind, out, inputs = argv[0], argv[1], argv[2:]
    if kind == 'loss':
        plot_loss(out, inputs)
    elif len(inputs) != 1:
        fail(f'{kind} takes one input file, got {len(inputs)}')
    elif kind == 'bench-cpu':
        plot_bench_cpu(out, inputs[0])
    elif kind == 'bench-infer':
        plot_bench_infer(out, inputs[0])
    elif kind == 'bench-serve':
        plot_bench_serve(out, inputs[0])
    elif kind == 'bench-parallel':
        plot_bench_parallel(out, inputs[0])
    elif kind == 'bench-gpu-peers':
        plot_bench_gpu_peers(out, inputs[0])
    else:
        plot_bench_gpu(out, inputs[0])
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
