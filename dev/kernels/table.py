#!/usr/bin/env python3
"""dev/kernels/table.py TSV DEVICE TABLE.md CHART.png: the kernel ladder's results on a GPU
(the rows its steps append to LADDER_TSV: number, family, what changed, PASS/FAIL, ms, rate, unit,
% of the limit, the limit) as a markdown table, printed and written to TABLE.md, and as a bar chart
of each step's % of its limit, written to CHART.png where matplotlib is installed."""
import sys

FIELDS = ["number", "family", "what", "verdict", "ms", "rate", "unit", "pct", "limit"]


def read_rows(path):
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != len(FIELDS):
                sys.exit(f"table.py: {path}: a row with {len(parts)} fields, expected {len(FIELDS)}: {line!r}")
            row = dict(zip(FIELDS, parts))
            for key in ("ms", "rate", "pct"):
                row[key] = float(row[key])
            rows.append(row)
    return sorted(rows, key=lambda r: r["number"])


def markdown(rows, device):
    out = [f"Kernel ladder on {device or 'this GPU'} (make kernels; dev/kernels/)", "",
           "| step | family | what changed | check | ms | rate | % of limit | limit |",
           "| ---: | --- | --- | --- | ---: | ---: | ---: | --- |"]
    for r in rows:
        timed = r["ms"] >= 0
        out.append(f"| {r['number']} | {r['family']} | {r['what']} | {r['verdict']} | "
                   f"{r['ms']:.3f} | {r['rate']:.2f} {r['unit']} | {r['pct']:.1f}% | {r['limit']} |"
                   if timed else
                   f"| {r['number']} | {r['family']} | {r['what']} | {r['verdict']} | - | - | - | {r['limit']} |")
    return "\n".join(out) + "\n"


def chart(rows, device, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"table.py: no matplotlib here, so no chart ({path}); the table has the same numbers")
        return
    rows = [r for r in rows if r["ms"] >= 0]
    colors = {"matmul": "tab:blue", "attention": "tab:orange", "layernorm": "tab:green"}
    fig, ax = plt.subplots(figsize=(9, 0.4 * len(rows) + 1.5))
    labels = [f"{r['number']} {r['what']}" for r in rows]
    ax.barh(labels, [r["pct"] for r in rows], color=[colors.get(r["family"], "tab:gray") for r in rows])
    for i, r in enumerate(rows):
        ax.text(r["pct"], i, f" {r['rate']:.1f} {r['unit']}", va="center", fontsize=8)
    ax.set_xlim(0, max(100.0, max((r["pct"] for r in rows), default=0.0)) * 1.15)  # room for the labels
    ax.invert_yaxis()
    ax.set_xlabel("% of the step's limit (float32 peak, bf16 tensor peak or memory bandwidth)")
    ax.set_title(f"Kernel ladder, {device or 'GPU'}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"table.py: chart written to {path}")


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    tsv, device, table_path, chart_path = sys.argv[1:]
    rows = read_rows(tsv)
    text = markdown(rows, device)
    with open(table_path, "w") as f:
        f.write(text)
    print(text)
    chart(rows, device, chart_path)


if __name__ == "__main__":
    main()
