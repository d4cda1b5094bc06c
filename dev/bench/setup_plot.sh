#!/usr/bin/env bash
# The plotting tool of make plot, make bench-cpu and make bench-gpu: matplotlib from Debian
# (python3-matplotlib), for the Python the Makefile uses (PYTHON, default /usr/bin/python3).
# Installs it with apt-get when it is missing; TEST_OFFLINE=1 installs nothing. Exits 0 when
# matplotlib can be imported, 1 with one line saying why not.
set -uo pipefail
PY=${PYTHON:-/usr/bin/python3}
"$PY" -c 'import matplotlib' 2>/dev/null && exit 0
if [ "${TEST_OFFLINE:-0}" = 1 ]; then
  echo "setup_plot: matplotlib is missing and TEST_OFFLINE=1: not installing python3-matplotlib" >&2
  exit 1
fi
SUDO=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO="sudo"
echo "setup_plot: apt-get install python3-matplotlib" >&2
if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-matplotlib; } >/dev/null 2>&1; then
  echo "setup_plot: could not install python3-matplotlib with apt-get (no network or no root?)" >&2
  exit 1
fi
"$PY" -c 'import matplotlib' 2>/dev/null || { echo "setup_plot: python3-matplotlib is installed but $PY cannot import matplotlib" >&2; exit 1; }
