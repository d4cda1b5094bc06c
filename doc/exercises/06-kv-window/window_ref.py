#!/usr/bin/env python3
"""Exercise 6's reference: greedy generation with a sliding window, by full forward passes of
dev/reference/gpt2_ref.py's PyTorch model in float64 (no cache at all).

  window_ref.py MODEL.bin WINDOW N PROMPT_ID...   prints the N generated ids, one line

The context starts as the prompt. Each new token is the argmax of the last position's logits of
a full forward pass over the context; it is appended, and when the context would then be longer
than the model's maxT, it becomes its last WINDOW tokens. It also prints, on stderr, the smallest
gap between the best and the second-best logit along the way: the check needs it well above
float32's rounding, so that infer's float32 argmax cannot differ for rounding alone."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "dev", "reference"))
import gpt2_ref  # noqa: E402

gpt2_ref.need_torch("window_ref.py")
torch = gpt2_ref.torch

model, window, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
context = [int(x) for x in sys.argv[4:]]
config, params = gpt2_ref.read_checkpoint(model)
maxT, V = config[0], config[1]
p = {k: torch.tensor(v, dtype=torch.float64) for k, v in params.items()}
out, gap = [], float("inf")
with torch.no_grad():
    for _ in range(n):
        inputs = torch.tensor([context])
        logits, _ = gpt2_ref.forward(p, config, inputs, torch.zeros_like(inputs))
        last = logits[0, -1, :V]
        top = torch.topk(last, 2).values
        gap = min(gap, float(top[0] - top[1]))
        nxt = int(torch.argmax(last))
        out.append(nxt)
        context.append(nxt)
        if len(context) > maxT:
            context = context[-window:]
print(" ".join(str(t) for t in out))
print(f"smallest gap between the two best logits: {gap:.3g}", file=sys.stderr)
