#!/usr/bin/env bash
# The roofline tables of doc/gpu.md ("The roofline: what an H100 allows, per kernel") are what
# the code computes: build/roofline prints the rows of dev/gpu/roofline.h for GPT-2 124M at B=8,
# T=1024, and the doc's copy between its roofline markers must be exactly that output (make
# roofline-doc rewrites it after a change). build/roofline itself exits 1 when the rows fail their
# check: the products' FLOPs must add up to 6 x the model's matrix weights x tokens.
set -u
. "$(dirname "$0")/lib.sh"
make -s build/roofline || { echo "FAIL: build/roofline does not build"; exit 1; }
build/roofline >build/roofline.md || { echo "FAIL: build/roofline failed: its rows fail their own check"; exit 1; }
begins=$(grep -c '^<!-- roofline begin' doc/gpu.md)
ends=$(grep -c '^<!-- roofline end' doc/gpu.md)
if [ "$begins" != 1 ] || [ "$ends" != 1 ]; then
  echo "FAIL: doc/gpu.md should hold one '<!-- roofline begin' and one '<!-- roofline end' line ($begins, $ends)"
  exit 1
fi
awk '/^<!-- roofline end/ {on = 0} on {print} /^<!-- roofline begin/ {on = 1}' doc/gpu.md >build/roofline_doc.md
if ! diff -u build/roofline_doc.md build/roofline.md; then
  echo "FAIL: doc/gpu.md's roofline tables (-) differ from what build/roofline computes (+): make roofline-doc"
  exit 1
fi
grep -q '^COMPUTED, not measured' build/roofline.md || { echo "FAIL: the tables are not labelled as computed"; exit 1; }
echo "ok: doc/gpu.md's roofline tables are build/roofline's ($(grep -c '^| [0-9]' build/roofline.md) rows, both precisions)"
