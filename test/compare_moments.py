"""compare_moments.py: AdamW's moments after a run's first step against PyTorch's gradient of it.

    compare_moments.py [--precision fp32|bf16] DUMP RUN_DIR

DUMP is written by `dev/reference/gpt2_ref.py reference` (with --B and --T giving the run's whole
batch per step) on the token file that the run's first step read from its start (-R 0);
RUN_DIR is the run's -o folder, holding model_00000001.bin and state_00000001.bin (-n 1).
AdamW's moments start at zero, so after the first step m = (1 - beta1) g and v = (1 - beta2) g^2,
g being the gradient the step applied: the gradient of the step's mean loss when its norm is below
the clip of 1 (checked: above it, g would be that gradient scaled to norm 1, whatever the run had
summed and divided). So m and v show the scale of the gradient, which the printed norm shows too
but which the losses and weights do not (AdamW's update m / sqrt(v) is the same for g and k g).
Checks, per parameter tensor of the model (the key bias left out, as in test/compare_run.py):

    m / (1 - beta1) and v / (1 - beta2) against PyTorch float32's g and g^2: elementwise
    |x - r| <= 1e-5 (|r| + max|r|) and ||x - r|| / ||r|| <= 1e-5 (test/ref_check.c's gradient
    tolerance, which a gradient 1.001 times too large fails)

With --precision bf16 the run is train_cpu -p bf16 and the DUMP gpt2_ref.py reference
--precision bf16's, whose products too round their operands to bf16. Both sides round nearly the
same float32 numbers, but where PyTorch's and train_cpu's differ in their last bits and straddle
the midpoint between two bf16 values, they round apart: one operand moves by 2^-8 of itself, a
few rows of a product with it, and through them, a little, every gradient upstream (a test model
has a handful of such values among its ~50,000 rounded ones, on some seeds none). No elementwise
bound holds then; what does:

    the weight matrices (wte, qkvw, attprojw, fcw, fcprojw): the median elementwise error
        |x - r| / (|r| + max|r|) <= 1e-6. Seen: below 1e-7 with or without such values; a
        product that skips or adds a rounding moves every element of its weight's gradient,
        and the median goes to 2e-5 - 4e-4
    every tensor: ||x - r|| / ||r|| <= 2e-3 (seen: up to 3e-4; a wrong gradient is off by O(1))

NaN never passes. Exit status 0 when every check passes, 1 otherwise. Needs NumPy only.
"""

import os
import sys

import numpy as np

import compare_run
from compare_run import HEADER_INTS, MAX_NORM, report, tensor_errors, within
from compare_gpu_run import read, tensor_slices

DUMP_MAGIC, DUMP_VERSION = 20240901, 1   # dev/reference/gpt2_ref.py's dump
BETA1, BETA2 = np.float32(0.9), np.float32(0.95)
TOL_GRADS = 1e-5
MATRICES = ("wte", "qkvw", "attprojw", "fcw", "fcprojw")
TOL_BF16_MEDIAN, TOL_BF16_NORM = 1e-6, 2e-3   # --precision bf16 (above)


def read_dump(path):
    """(grad norm, gradients as float64) of the float32 run of a gpt2_ref.py reference dump."""
    with open(path, "rb") as f:
        h = np.frombuffer(f.read(4 * HEADER_INTS), dtype="<i4")
        if h[0] != DUMP_MAGIC or h[1] != DUMP_VERSION:
            sys.exit(f"{path} is not a gpt2_ref.py reference dump")
        B, T, V, P, steps = int(h[2]), int(h[3]), int(h[4]), int(h[6]), int(h[7])
        data = np.frombuffer(f.read(), dtype="<f8")
    run32 = data[6 + B * T:]   # after the 6 hyperparameters and the inputs and targets (int32)
    n_logits = B * T * V
    return run32[n_logits + 1], run32[n_logits + 2:n_logits + 2 + P]


def check(what, name, x, ref, bf16):
    e_elem, e_norm = tensor_errors(x, ref)
    label = f"{what} {name:9s} vs torch32 g{'^2' if what[0] == 'v' else '  '}:"
    if not bf16:
        report(within(e_elem, TOL_GRADS) and within(e_norm, TOL_GRADS),
               f"{label} elem {e_elem:.1e} norm {e_norm:.1e}  tol {TOL_GRADS:.0e}/{TOL_GRADS:.0e}")
        return
    if name in MATRICES:
        denom = np.abs(ref) + np.abs(ref).max()
        median = float(np.median(np.abs(x - ref) / denom)) if denom.max() > 0 else 0.0
        report(within(median, TOL_BF16_MEDIAN) and within(e_norm, TOL_BF16_NORM),
               f"{label} median elem {median:.1e} norm {e_norm:.1e}  tol {TOL_BF16_MEDIAN:.0e}/{TOL_BF16_NORM:.0e}")
    else:
        report(within(e_norm, TOL_BF16_NORM), f"{label} norm {e_norm:.1e}  tol {TOL_BF16_NORM:.0e}")


def main():
    args = sys.argv[1:]
    bf16 = False
    if len(args) == 4 and args[0] == "--precision" and args[1] in ("fp32", "bf16"):
        bf16, args = args[1] == "bf16", args[2:]
    if len(args) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    dump, run_dir = args
    ref_norm, g = read_dump(dump)
    report(within(ref_norm, MAX_NORM - 1e-3),
           f"PyTorch's gradient norm of the first step {ref_norm:.6f}: below the clip of {MAX_NORM:g}")
    model = read(os.path.join(run_dir, "model_00000001.bin"))
    state = read(os.path.join(run_dir, "state_00000001.bin"))
    if model is not None and state is not None:
        header, n = model[0], len(model[1])
        report(len(state[1]) == 2 * n == 2 * len(g),
               f"state: {len(state[1])} moments, for {n} parameters (PyTorch: {len(g)} gradients)")
        if len(state[1]) == 2 * n == 2 * len(g):
            m = state[1][:n] / np.float64(np.float32(1) - BETA1)
            v = state[1][n:] / np.float64(np.float32(1) - BETA2)
            slices, C = tensor_slices(header)
            for name, part in slices:
                x_m, x_v, r = m[part], v[part], g[part]
                if name == "qkvb":   # the key bias: its true gradient is 0, any value is noise
                    keep = (np.arange(len(r)) % (3 * C)) // C != 1
                    x_m, x_v, r, name = x_m[keep], x_v[keep], r[keep], "qkvb q,v"
                for what, x, ref in (("m / (1-b1)", x_m, r), ("v / (1-b2)", x_v, r * r)):
                    check(what, name, x, ref, bf16)
    compare_run.finish()


if __name__ == "__main__":
    main()
