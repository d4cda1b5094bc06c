# GPT-2 from scratch: CPU reference (C + OpenMP), GPU version (CUDA), tokenizer, inference.
#
#   make                 build what this machine can build (GPU targets only where nvcc exists)
#   make data            tokenizer file + Tiny Shakespeare token files in data/
#                        (downloads, or copies from DATA_DIR=/path/to/local/folder when offline)
#   make test            install test dependencies, build, run every test under test/
#   make bench           all benchmarks (bench-tokenizer, bench-cpu, bench-infer)
#
# Knobs: CC, OMP=1 (0 turns OpenMP off), NATIVE=1 (-march=native after a test compile),
#        MATMUL=fast (naive: every matrix product of train_cpu and infer on the plain loops that
#        define it, gpt2/cpu_layers.h), NVCC, GPU_ARCH=90, USE_CUBLAS=0, DATA_DIR (local folder
#        holding the source files).

CC       ?= gcc
OMP      ?= 1
NATIVE   ?= 1
NVCC     ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
GPU_ARCH ?= 90
USE_CUBLAS ?= 0
DATA_DIR ?=
PYTHON   ?= /usr/bin/python3
MATMUL   ?= fast

CFLAGS   ?= -O3 -fno-math-errno -Wall -Wextra -Wno-unused-parameter
LDLIBS   := -lm
SHELL    := /bin/bash

# Flags are added only after a test compile shows the compiler takes them (and only once: the
# sub-make of `make test` inherits the exported CFLAGS).
try_cc = $(shell echo 'int main(void){return 0;}' | $(CC) $(1) -x c - -o /dev/null >/dev/null 2>&1 && echo yes)

ifeq ($(NATIVE),1)
  ifeq ($(findstring -march=native,$(CFLAGS))$(call try_cc,-march=native),yes)
    CFLAGS += -march=native
  endif
endif

ifeq ($(OMP),1)
  ifeq ($(call try_cc,-fopenmp),yes)
    ifeq ($(findstring -fopenmp,$(CFLAGS)),)
      CFLAGS += -fopenmp
    endif
    OMP_STATUS := OpenMP on
  else
    OMP_STATUS := OpenMP off (the compiler does not take -fopenmp)
  endif
else
  OMP_STATUS := OpenMP off (OMP=0)
endif

ifeq ($(MATMUL),naive)
  MATMUL_FLAGS := -DMATMUL_NAIVE
else ifneq ($(MATMUL),fast)
  $(error MATMUL=$(MATMUL): use MATMUL=fast (the default) or MATMUL=naive)
endif

export CC CFLAGS LDLIBS PYTHON DATA_DIR

# The shared headers (gpt2/): every program is rebuilt when one changes.
HEADERS := $(wildcard gpt2/*.h)

# train_cpu and infer are rebuilt when the compiler or its flags change (MATMUL=naive, another
# CC), not only when a source does: build/flags holds the last ones, rewritten when they differ.
BUILD_FLAGS := $(CC) $(CFLAGS) $(MATMUL_FLAGS)
$(shell mkdir -p build && echo '$(BUILD_FLAGS)' | cmp -s - build/flags || echo '$(BUILD_FLAGS)' > build/flags)

CPU_PROGRAMS := tokenizer train_cpu infer
GPU_PROGRAMS := train_gpu

ifneq ($(NVCC),)
  NVCC_FLAGS := -O3 -arch=sm_$(GPU_ARCH) -Xcompiler -fopenmp -Wno-deprecated-gpu-targets
  ifeq ($(USE_CUBLAS),1)
    NVCC_FLAGS += -DUSE_CUBLAS
    NVCC_LIBS := -lcublas
  endif
  ALL_TARGETS := $(CPU_PROGRAMS) $(GPU_PROGRAMS)
else
  ALL_TARGETS := $(CPU_PROGRAMS)
endif

.PHONY: all data test bench bench-tokenizer bench-cpu bench-infer clean gpu-status gpu-checks gpu-emu bench-gpu

all: $(ALL_TARGETS) gpu-status
	@echo "built: $(ALL_TARGETS) ($(OMP_STATUS))"

gpu-status:
ifeq ($(NVCC),)
	@echo "skipped: $(GPU_PROGRAMS) (nvcc not found; install the CUDA toolkit or set NVCC=)"
endif

# ---------- programs ----------

tokenizer: tokenizer.c $(HEADERS)
	$(CC) $(CFLAGS) -o $@ tokenizer.c $(LDLIBS)

# The training programs depend on the data, so `make train_cpu && ./train_cpu` works on a fresh machine.
train_cpu: train_cpu.c $(HEADERS) build/flags | data
	$(CC) $(CFLAGS) $(MATMUL_FLAGS) -o $@ train_cpu.c $(LDLIBS)

infer: infer.c $(HEADERS) build/flags | data
	$(CC) $(CFLAGS) $(MATMUL_FLAGS) -o $@ infer.c $(LDLIBS)

train_gpu: train_gpu.cu $(HEADERS) | data
ifeq ($(NVCC),)
	@echo "skipped: train_gpu (nvcc not found)"; exit 1
else
	$(NVCC) $(NVCC_FLAGS) -o $@ train_gpu.cu $(NVCC_LIBS)
endif

# GPU checks (dev/gpu_check.cu): every kernel and the whole model against the CPU, then timings.
gpu-checks: build/gpu_check

build/gpu_check: dev/gpu_check.cu train_gpu.cu train_cpu.c $(HEADERS)
ifeq ($(NVCC),)
	@echo "skipped: build/gpu_check (nvcc not found)"; exit 1
else
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) -o $@ dev/gpu_check.cu $(NVCC_LIBS)
endif

# The same checks with every kernel run on the CPU by dev/cuda_emu.h (no GPU or nvcc needed),
# under AddressSanitizer and UBSan: indexing, bounds, barriers and float4 alignment, not speed.
gpu-emu: build/emu/gpu_check

build/emu/gpu_check: dev/gpu_check.cu train_gpu.cu train_cpu.c $(HEADERS) dev/cuda_emu.h dev/cuda_emu.py
	@mkdir -p build/emu
	$(PYTHON) dev/cuda_emu.py dev/gpu_check.cu build/emu/gpu_check.cpp
	$(CXX) -std=c++17 -O1 -g $(filter -fopenmp,$(CFLAGS)) -fsanitize=address,undefined -fno-sanitize-recover=undefined \
	  -include dev/cuda_emu.h -I. build/emu/gpu_check.cpp -o $@

# ---------- data ----------

DATA_FILES := data/gpt2_tokenizer.bin data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin
RAW := data/raw/tinyshakespeare.txt data/raw/encoder.json data/raw/vocab.bpe

data: $(DATA_FILES)

$(RAW): dev/fetch_data.sh
	bash dev/fetch_data.sh data/raw $(DATA_DIR)

data/gpt2_tokenizer.bin: tokenizer $(RAW)
	./tokenizer vocab data/raw/encoder.json data/raw/vocab.bpe $@

data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin &: tokenizer data/gpt2_tokenizer.bin data/raw/tinyshakespeare.txt
	./tokenizer -k data/gpt2_tokenizer.bin prepare data/raw/tinyshakespeare.txt data/tinyshakespeare

# ---------- tests and benchmarks ----------

test:
	bash test/setup.sh
	$(MAKE) all data
	bash test/run.sh

bench: bench-tokenizer bench-cpu bench-infer

bench-tokenizer: tokenizer data
	bash dev/bench_tokenizer.sh

bench-cpu: train_cpu
	bash dev/bench_cpu.sh

bench-infer: infer
	bash dev/bench_infer.sh

bench-gpu: train_cpu train_gpu
	bash dev/gpu_speedup.sh

clean:
	rm -rf $(CPU_PROGRAMS) $(GPU_PROGRAMS) train_cpu_asan build
