"""compare_gpu_run.py: a train_gpu run (on a GPU, or the emulator's build/emu/train_gpu) against
the train_cpu run with the same flags.

    compare_gpu_run.py --precision fp32|bf16 CPU_DIR CPU_STDOUT GPU_DIR GPU_STDOUT STEP

CPU_DIR and GPU_DIR are the runs' -o folders, holding model_STEP.bin and state_STEP.bin written
after the last step, STEP. With -p fp32 both programs add the same float32 numbers in different
orders (the GPU in tiles and warp trees), so they agree to float32 rounding, not bit for bit.
Checks, with fp32's tolerances (bf16's are below):

    lines         the same step, validation and sample lines at the same steps
    loss          each step's loss and each validation loss, relative 1e-5, as train_cpu against
                  PyTorch float32 (test/compare_run.py)
    norm          each step's gradient norm before clipping: the print's rounding plus 1e-5 relative
    lr            each step's learning rate: the same printed text
    checkpoint    the same header; each parameter tensor elementwise |g - c| <= 1e-3 (|c| + max|c|)
                  and ||g - c|| / ||c|| <= 1e-4 (test/compare_run.py's measures and tolerances), the
                  key bias left out (its gradient is rounding noise: doc/correctness.md)
    state         the same header (step, B, T, the loader's position, the random state); AdamW's
                  m and v per tensor as the parameters
    main.log      the same lines, values within the tolerances above

With -p bf16 the GPU computes with 8 significant bits where train_cpu has 24, and the two runs
drift apart step by step; what must hold is that the bf16 run trains the same model the same way,
within what bf16's rounding explains (doc/correctness.md derives these):

    loss          each step's loss and validation loss within 5e-3 relative
    norm          each step's gradient norm within 2e-2 relative
    checkpoint    each parameter tensor ||g - c|| / ||c|| <= 3e-2 (no elementwise bound: AdamW
                  moves every weight by about the learning rate whatever the size of its
                  gradient, so weights whose gradients are rounding noise move differently)
    state         AdamW's m and v per tensor: ||g - c|| / ||c|| <= 0.1 (m follows the
                  gradients, v their squares, averaged over few steps: the small bias tensors'
                  gradients carry the largest relative rounding)
    main.log      the same lines, values within the loss tolerance

NaN never passes. Exit status 0 when every check passes, 1 otherwise. Needs NumPy only.
"""

import os
import re
import sys

import numpy as np

import compare_run
from compare_run import (HEADER_INTS, NORM_PRINT_HALF_ULP, STEP_LINE, TOL_LOSS, TOL_NORM, VAL_LINE,
                         report, rel, tensor_errors, within)

# per precision: step and validation losses (relative), gradient norms (relative), parameters
# elementwise and per tensor, AdamW moments per tensor; fp32's are train_cpu's against PyTorch
# float32 (test/compare_run.py)
TOLERANCES = {
    "fp32": dict(loss=TOL_LOSS, norm=TOL_NORM, elem=compare_run.TOL_PARAMS_ELEM,
                 tensor=compare_run.TOL_PARAMS, moments=compare_run.TOL_PARAMS),
    "bf16": dict(loss=5e-3, norm=2e-2, elem=None, tensor=3e-2, moments=0.1),
}
TOL = TOLERANCES["fp32"]
SAMPLE_LINE = re.compile(r"^--- sample at step (\d+) ---$")


def parse(path):
    """{step: (loss, norm, lr text)}, {step: val loss}, [sample steps]."""
    steps, vals, samples = {}, {}, []
    with open(path) as f:
        for line in f:
            m = STEP_LINE.match(line)
            if m:
                lr = line.split("| lr ")[1].split(" |")[0]
                steps[int(m[1])] = (float(m[3]), float(m[4]), lr)
            m = VAL_LINE.match(line)
            if m:
                vals[int(m[1])] = float(m[2])
            m = SAMPLE_LINE.match(line.rstrip("\n"))
            if m:
                samples.append(int(m[1]))
    return steps, vals, samples


def tensor_slices(header):
    """(name, slice) of each parameter tensor of an llm.c checkpoint header, in file order."""
    maxT, V, L, NH, C, Vp = (int(x) for x in header[2:8])
    sizes = [("wte", Vp * C), ("wpe", maxT * C), ("ln1w", L * C), ("ln1b", L * C),
             ("qkvw", L * 3 * C * C), ("qkvb", L * 3 * C), ("attprojw", L * C * C),
             ("attprojb", L * C), ("ln2w", L * C), ("ln2b", L * C), ("fcw", L * 4 * C * C),
             ("fcb", L * 4 * C), ("fcprojw", L * C * 4 * C), ("fcprojb", L * C), ("lnfw", C),
             ("lnfb", C)]
    out, off = [], 0
    for name, n in sizes:
        out.append((name, slice(off, off + n)))
        off += n
    return out, C


def read(path):
    """(header ints, float32 data as float64) of a checkpoint or state file, or None."""
    try:
        with open(path, "rb") as f:
            header = np.frombuffer(f.read(4 * HEADER_INTS), dtype="<i4")
            data = np.frombuffer(f.read(), dtype="<f4").astype(np.float64)
    except OSError as e:
        report(False, f"cannot read {path}: {e.strerror}")
        return None
    return header, data


def compare_tensors(what, header, g, c, tol_tensor):
    slices, C = tensor_slices(header)
    if len(g) != len(c) or len(c) != slices[-1][1].stop:
        report(False, f"{what}: {len(g)} and {len(c)} values, expected {slices[-1][1].stop}")
        return
    for name, part in slices:
        x, r = g[part], c[part]
        if name == "qkvb":
            keep = (np.arange(len(r)) % (3 * C)) // C != 1
            x, r, name = x[keep], r[keep], "qkvb q,v"
        e_elem, e_norm = tensor_errors(x, r)
        tol_elem = TOL["elem"]
        if tol_elem is None:
            report(within(e_norm, tol_tensor), f"{what} {name:9s}: norm {e_norm:.1e}  tol {tol_tensor:.0e}")
        else:
            report(within(e_elem, tol_elem) and within(e_norm, tol_tensor),
                   f"{what} {name:9s}: elem {e_elem:.1e} norm {e_norm:.1e}  tol {tol_elem:.0e}/{tol_tensor:.0e}")


def compare_logs(cpu_log, gpu_log):
    def entries(path):
        out = []
        with open(path) as f:
            for line in f:
                step, key, value = re.match(r"s:(\d+) (\w+):(\S+)$", line.strip()).groups()
                out.append((int(step), key, float(value)))
        return out
    c, g = entries(cpu_log), entries(gpu_log)
    same = [(s, k) for s, k, _ in c] == [(s, k) for s, k, _ in g]
    worst = max((rel(gv, cv) for (_, _, cv), (_, _, gv) in zip(c, g)), default=0.0)
    report(same and within(worst, TOL["loss"]),
           f"main.log: {len(g)} lines, the same entries: {same}, largest relative difference {worst:.1e}")


def main():
    global TOL
    if len(sys.argv) != 8 or sys.argv[1] != "--precision" or sys.argv[2] not in TOLERANCES:
        sys.exit(__doc__.split("\n\n")[1])
    TOL = TOLERANCES[sys.argv[2]]
    cpu_dir, cpu_out, gpu_dir, gpu_out, step = sys.argv[3:7] + [int(sys.argv[7])]
    c_steps, c_vals, c_samples = parse(cpu_out)
    g_steps, g_vals, g_samples = parse(gpu_out)
    report(sorted(c_steps) == sorted(g_steps) == list(range(1, step + 1)),
           f"step lines: steps {sorted(g_steps)}, train_cpu {sorted(c_steps)}")
    report(sorted(c_vals) == sorted(g_vals) and len(c_vals) > 0,
           f"val lines: at steps {sorted(g_vals)}, train_cpu {sorted(c_vals)}")
    report(c_samples == g_samples, f"samples: at steps {g_samples}, train_cpu {c_samples}")
    for s in sorted(set(c_steps) & set(g_steps)):
        (cl, cn, clr), (gl, gn, glr) = c_steps[s], g_steps[s]
        tol = NORM_PRINT_HALF_ULP + TOL["norm"] * abs(cn)
        report(within(rel(gl, cl), TOL["loss"]) and within(abs(gn - cn), tol) and glr == clr,
               f"step {s:2d}: loss {gl:.6f} vs {cl:.6f} (rel {rel(gl, cl):.1e}, tol {TOL['loss']:.0e}), "
               f"norm {gn:.4f} vs {cn:.4f} (tol {tol:.1e}), lr {glr} vs {clr}")
    for s in sorted(set(c_vals) & set(g_vals)):
        report(within(rel(g_vals[s], c_vals[s]), TOL["loss"]),
               f"step {s:2d}: val loss {g_vals[s]:.6f} vs {c_vals[s]:.6f} (rel {rel(g_vals[s], c_vals[s]):.1e})")

    name = f"model_{step:08d}.bin"
    c, g = read(os.path.join(cpu_dir, name)), read(os.path.join(gpu_dir, name))
    if c is not None and g is not None:
        report(np.array_equal(c[0], g[0]), f"{name}: the same header")
        compare_tensors("param", c[0], g[1], c[1], TOL["tensor"])
        model_header = c[0]
        name = f"state_{step:08d}.bin"
        cs, gs = read(os.path.join(cpu_dir, name)), read(os.path.join(gpu_dir, name))
        if cs is not None and gs is not None:
            report(np.array_equal(cs[0], gs[0]), f"{name}: the same header (step, B, T, loader, random state)")
            n = len(cs[1]) // 2
            compare_tensors("m    ", model_header, gs[1][:n], cs[1][:n], TOL["moments"])
            compare_tensors("v    ", model_header, gs[1][n:], cs[1][n:], TOL["moments"])
    compare_logs(os.path.join(cpu_dir, "main.log"), os.path.join(gpu_dir, "main.log"))
    compare_run.finish()


if __name__ == "__main__":
    main()
