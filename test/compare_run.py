"""compare_run.py: a real ./train_cpu run against the PyTorch reference of the same run.

    compare_run.py REF.npz STDOUT_FILE CHECKPOINT [--mixed-clipping]

REF.npz is written by `dev/reference/gpt2_ref.py train` with the same options as the run; STDOUT_FILE is
what train_cpu printed; CHECKPOINT is the model_STEP.bin it wrote after its last step. The gate
is PyTorch float32; each line also shows PyTorch float32's own error against float64, the size of
float32 rounding in that quantity. Checks, one line each:

    step lines    exactly one line "step S/STEPS | loss ... | norm ... | lr ..." for S = 1..STEPS
    val lines     exactly one line "step S: val loss ..." for each step the reference validated at
    loss          each step's loss, relative 1e-5 (it prints 6 decimals: 1e-7 relative here)
    norm          each step's gradient norm before clipping: the print's rounding (4 decimals,
                  5e-5) plus 1e-5 relative
    lr            each step's learning rate: the print's rounding (3 significant digits) plus 1e-6
                  relative, for a value that float32 and float64 round to either side of a digit
    val loss      each validation loss, relative 1e-5
    final TENSOR  the parameters after the last step, with test/ref_check.c's error measures:
                  elementwise |x - r| <= 1e-3 (|r| + max|r|) and ||x - r|| / ||r|| <= 1e-4, the
                  key bias (the middle third of each layer's qkvb) left out (check_params)
    clipping      with --mixed-clipping: the reference's pre-clip norms are above 1.0 at some
                  steps and below at others, so both sides of the clipping condition ran

NaN never passes. Exit status 0 when every check passes, 1 otherwise. Needs NumPy only.
"""

import argparse
import math
import re
import sys

import numpy as np

CHECKPOINT_MAGIC, CHECKPOINT_VERSION_F32 = 20240326, 3
HEADER_INTS = 256
MAX_NORM = 1.0            # train_cpu clips the gradient norm to 1

TOL_LOSS = 1e-5           # relative: step losses and validation losses
TOL_NORM = 1e-5           # relative, on top of the print's rounding
NORM_PRINT_HALF_ULP = 0.5e-4
TOL_LR = 1e-6             # relative, on top of the print's rounding
TOL_PARAMS_ELEM = 1e-3    # parameters after AdamW steps (doc/correctness.md says why)
TOL_PARAMS = 1e-4

# printf("step %4d/%d | loss %.6f | norm %.4f | lr %.2e | ...") and ("step %d: val loss %.6f")
STEP_LINE = re.compile(r"^step +(\d+)/(\d+) \| loss (\S+) \| norm (\S+) \| lr (\S+) \|")
VAL_LINE = re.compile(r"^step (\d+): val loss (\S+)$")

failures = 0


def report(ok, text):
    global failures
    if not ok:
        failures += 1
    print(f"{'ok  ' if ok else 'FAIL'} {text}")


def finish():
    """The verdict of every report so far: exit 1 when any check failed."""
    if failures:
        print(f"FAIL: {failures} checks failed")
        sys.exit(1)
    print("all checks passed")


def within(err, tol):
    return err <= tol      # False for NaN


def parse_stdout(path):
    """The step lines as {step: (loss, norm, lr)} and the validation lines as {step: loss}, with
    every step number in the order printed (to catch repeats and gaps)."""
    steps, vals, step_order, val_order, totals = {}, {}, [], [], set()
    with open(path) as f:
        for line in f:
            m = STEP_LINE.match(line)
            if m:
                s = int(m[1])
                totals.add(int(m[2]))
                steps[s] = tuple(float(x) for x in m.group(3, 4, 5))   # "-nan" parses to nan
                step_order.append(s)
                continue
            m = VAL_LINE.match(line)
            if m:
                vals[int(m[1])] = float(m[2])
                val_order.append(int(m[1]))
    return steps, vals, step_order, val_order, totals


def read_checkpoint(path, config, num_params):
    """The float32 parameters of an llm.c checkpoint, or None (with a FAIL line) when the file
    is missing or is not the reference's model."""
    try:
        with open(path, "rb") as f:
            header = np.frombuffer(f.read(4 * HEADER_INTS), dtype="<i4")
            params = np.frombuffer(f.read(), dtype="<f4")
    except OSError as e:
        report(False, f"checkpoint: cannot read {path}: {e.strerror}")
        return None
    if (len(header) != HEADER_INTS or header[0] != CHECKPOINT_MAGIC
            or header[1] != CHECKPOINT_VERSION_F32 or list(header[2:8]) != list(config)
            or len(params) != num_params):
        report(False, f"checkpoint: {path} is not a float32 checkpoint of the reference's model "
                      f"(maxT V L NH C Vp = {list(config)}, {num_params} parameters)")
        return None
    return params.astype(np.float64)


def rel(x, r):
    return abs(x - r) / abs(r) if r != 0 else (0.0 if x == r else math.inf)


def lr_print_rounding(x, r):
    # %.2e keeps 3 significant digits: half a unit of the third, at the larger of the two
    top = max(abs(x), abs(r))
    return 0.5 * 10.0 ** (math.floor(math.log10(top)) - 2) if top > 0 else 0.0


def tensor_errors(x, r):
    """(elem, norm): max |x - r| / (|r| + max|r|) and ||x - r|| / ||r||, as test/ref_check.c."""
    d = np.abs(x - r)
    if not np.all(np.isfinite(d)):
        return math.inf, math.inf
    denom = np.abs(r) + np.abs(r).max()
    with np.errstate(divide="ignore", invalid="ignore"):
        elem = np.where(denom > 0, d / denom, np.where(d > 0, math.inf, 0.0)).max()
    ref_norm, diff_norm = np.linalg.norm(r), np.linalg.norm(d)
    norm = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else math.inf)
    return float(elem), float(norm)


def check_steps(ref, got, steps):
    """Each printed step's loss, gradient norm and learning rate against the reference's."""
    for i, s in enumerate(range(1, steps + 1)):
        if s not in got:
            continue     # counted by the step-lines check
        loss, norm, lr = got[s]
        r32, r64 = ref["loss_f32"][i], ref["loss_f64"][i]
        err = rel(loss, r32)
        report(within(err, TOL_LOSS), f"step {s:2d} loss {loss:.6f} vs torch32 {r32:.8f}: rel "
               f"{err:.1e} (torch32 vs float64: {rel(r32, r64):.1e})  tol {TOL_LOSS:.0e}")
        r32, r64 = ref["norm_f32"][i], ref["norm_f64"][i]
        tol = NORM_PRINT_HALF_ULP + TOL_NORM * abs(r32)
        report(within(abs(norm - r32), tol),
               f"step {s:2d} norm {norm:.4f} vs torch32 {r32:.8f}: abs {abs(norm - r32):.1e} "
               f"(torch32 vs float64: {abs(r32 - r64):.1e})  tol {tol:.1e}"
               f"{'  clipped' if r64 > MAX_NORM else ''}")
        r = ref["lr_step"][i]
        tol = lr_print_rounding(lr, r) + TOL_LR * abs(r)
        report(within(abs(lr - r), tol),
               f"step {s:2d} lr {lr:.2e} vs {r:.6e}: abs {abs(lr - r):.1e}  tol {tol:.1e}")


def check_vals(ref, got_val, val_steps):
    """Each printed validation loss against the reference's."""
    for i, s in enumerate(val_steps):
        if s not in got_val:
            continue     # counted by the val-lines check
        r32, r64 = ref["val_loss_f32"][i], ref["val_loss_f64"][i]
        err = rel(got_val[s], r32)
        report(within(err, TOL_LOSS), f"step {s:2d} val loss {got_val[s]:.6f} vs torch32 "
               f"{r32:.8f}: rel {err:.1e} (torch32 vs float64: {rel(r32, r64):.1e})  "
               f"tol {TOL_LOSS:.0e}")


def check_params(ref, checkpoint):
    """The checkpoint's parameters, tensor by tensor, against the reference's after the run."""
    names, sizes = [str(n) for n in ref["names"]], [int(n) for n in ref["sizes"]]
    x = read_checkpoint(checkpoint, ref["config"], sum(sizes))
    if x is None:
        return
    C = int(ref["config"][4])
    p32, p64 = ref["params_f32"], ref["params_f64"]
    off = 0
    for name, n in zip(names, sizes):
        part = slice(off, off + n)
        keep = np.ones(n, dtype=bool)
        if name == "qkvb":
            # The key bias adds the same q.bk to every score of a softmax row, which the softmax
            # ignores: its true gradient is exactly 0, every implementation computes rounding
            # noise there, and AdamW turns that noise into steps of about lr in arbitrary
            # directions (PyTorch float32 and float64 disagree as much). Left out;
            # doc/correctness.md has the story.
            keep = (np.arange(n) % (3 * C)) // C != 1
            name = "qkvb q,v"
        e_elem, e_norm = tensor_errors(x[part][keep], p32[part][keep])
        t_elem, t_norm = tensor_errors(p32[part][keep], p64[part][keep])
        report(within(e_elem, TOL_PARAMS_ELEM) and within(e_norm, TOL_PARAMS),
               f"final {name:9s} vs torch32: elem {e_elem:.1e} norm {e_norm:.1e} "
               f"(torch32 vs float64: elem {t_elem:.1e} norm {t_norm:.1e})  "
               f"tol {TOL_PARAMS_ELEM:.0e}/{TOL_PARAMS:.0e}")
        off += n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ref", help="REF.npz from dev/reference/gpt2_ref.py train")
    ap.add_argument("stdout", help="what train_cpu printed")
    ap.add_argument("checkpoint", help="the model_STEP.bin train_cpu wrote after its last step")
    ap.add_argument("--mixed-clipping", action="store_true",
                    help="fail unless the reference clipped at some steps and not at others")
    args = ap.parse_args()
    ref = np.load(args.ref)
    steps = int(ref["steps"])
    print(f"reference: B={int(ref['B'])} T={int(ref['T'])}, {steps} steps, lr {float(ref['lr']):g} "
          f"(warmup {int(ref['warmup'])}, final fraction {float(ref['final_frac']):g}), weight "
          f"decay {float(ref['weight_decay']):g}, validation every {int(ref['val_every'])} steps "
          f"({int(ref['val_batches'])} batches at most)")

    got, got_val, step_order, val_order, totals = parse_stdout(args.stdout)
    printed = f"steps {step_order[0]}..{step_order[-1]}" if step_order else "none"
    report(step_order == list(range(1, steps + 1)) and totals == {steps},
           f"step lines: {len(step_order)} ({printed}, of {sorted(totals)}), expected steps "
           f"1..{steps} of [{steps}]")
    val_steps = [int(s) for s in ref["val_step"]]
    report(val_order == val_steps, f"val lines: at steps {val_order}, expected {val_steps}")
    check_steps(ref, got, steps)
    check_vals(ref, got_val, val_steps)
    check_params(ref, args.checkpoint)

    clipped = [s for s, n in enumerate(ref["norm_f64"], start=1) if n > MAX_NORM]
    unclipped = [s for s in range(1, steps + 1) if s not in clipped]
    text = f"clipping: at steps {clipped}, not at {unclipped}"
    if args.mixed_clipping:
        report(bool(clipped) and bool(unclipped), text + " (both must occur)")
    else:
        print(f"     {text}")

    finish()


if __name__ == "__main__":
    main()
