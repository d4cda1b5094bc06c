#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine: PyTorch and NumPy for the reference model
# (Debian's python3-torch, used through /usr/bin/python3), the npm packages tiktoken for the
# tokenizer's exactness tests and openai (OpenAI's client library) for the server's test, Open MPI
# (openmpi-bin, libopenmpi-dev) for data-parallel training, clang with libFuzzer (clang,
# libclang-rt-dev) for the fuzz targets, matplotlib (python3-matplotlib) for make plot and the
# benchmark charts, and libmicrohttpd (libmicrohttpd-dev) for infer's HTTP server (--serve; make
# builds it in where it finds the library, so build again after installing it).
# Nothing else reaches the network. Safe to run again.
# TEST_OFFLINE=1 (a machine without a network, such as a lent GPU machine): installs nothing and
# says what is missing; the tests that need it then skip, each saying why. PYTHON (the Makefile
# passes it) is the Python that must import torch and numpy.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO="sudo"
PY=${PYTHON:-/usr/bin/python3}
need_apt=()
"$PY" -c 'import torch, numpy' 2>/dev/null || need_apt+=(python3-torch python3-numpy)
"$PY" -c 'import matplotlib' 2>/dev/null || need_apt+=(python3-matplotlib)
command -v node >/dev/null || need_apt+=(nodejs npm)
# PyTorch calls the system's libblas.so.3; the netlib reference BLAS that python3-torch pulls in is
# ~35x slower than OpenBLAS, which makes the PyTorch reference and benchmark needlessly slow.
dpkg -s libopenblas0-pthread >/dev/null 2>&1 || need_apt+=(libopenblas0-pthread)
# Open MPI: train_cpu and train_gpu are built with it (Makefile: MPI) and the data-parallel tests
# start them with mpirun
command -v mpicc >/dev/null && command -v mpirun >/dev/null || need_apt+=(openmpi-bin libopenmpi-dev)
# clang with libFuzzer and the sanitizers' runtime: the fuzz targets (test/fuzz/, make fuzz)
echo 'int LLVMFuzzerTestOneInput(const char* d, long n) { return 0; }' \
  | clang -fsanitize=fuzzer,address,undefined -x c - -o /dev/null >/dev/null 2>&1 || need_apt+=(clang libclang-rt-dev)
# libmicrohttpd: infer and infer_gpu serve OpenAI's completions API with it (--serve, test_serve)
pkg-config --exists libmicrohttpd 2>/dev/null || need_apt+=(libmicrohttpd-dev pkg-config)
need_npm=()
[ -d test/node_modules/tiktoken ] || need_npm+=(tiktoken)
[ -d test/node_modules/openai ] || need_npm+=(openai)
if [ "${TEST_OFFLINE:-0}" = 1 ]; then
  [ ${#need_apt[@]} -gt 0 ] && echo "setup: offline (TEST_OFFLINE=1), not installing: ${need_apt[*]}"
  [ ${#need_npm[@]} -gt 0 ] && echo "setup: offline (TEST_OFFLINE=1), not installing the npm packages: ${need_npm[*]}"
  exit 0
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: apt-get install ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if [ ${#need_npm[@]} -gt 0 ]; then
  echo "setup: npm install ${need_npm[*]}"
  (cd test && npm install --no-audit --no-fund --loglevel=error >/dev/null)
fi
