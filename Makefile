# GPT-2 from scratch: CPU reference (C + OpenMP), GPU version (CUDA), tokenizer, inference.
#
#   make                 build what this machine can build (GPU targets only where nvcc exists)
#   make data            tokenizer file + Tiny Shakespeare token files in data/
#                        (downloads, or copies from DATA_DIR=/path/to/local/folder when offline)
#   make test            install test dependencies, build, run every test under test/
#   make bench           all benchmarks (bench-tokenizer, bench-cpu, bench-infer)
#   make bench-serve     infer --serve under load: CLIENTS clients streaming ROUNDS completions of
#                        TOKENS tokens each over HTTP (Node's fetch), against infer -f at the same
#                        batch, REPEATS sweeps (MODEL=d12 TOKENS=64 CLIENTS="1 8 32 64" ROUNDS=4
#                        REPEATS=3; needs Node 18+)
#   make bench-dp        data-parallel training on this machine: 1 and 2 processes under mpirun
#   make bench-data      peak memory of training on 3.2 GB of token shards vs Tiny Shakespeare
#   make bench-parallel  every split of training over 2 processes (dp, tp, pp, ZeRO-1) against 1:
#                        ms/step, memory per process, communication (STEPS=30 B=8 T=64)
#   make plot LOG=DIR/main.log OUT=FILE.png
#                        training and validation loss against the step (several logs: LOG="a b")
#   make lessons         run the commands of doc/lessons/ and paste their output and code quotes
#   make figures         draw the lessons' pictures (doc/lessons/fig/) from the sizes in the code
#   make fuzz            every file reader and the tokenizer under libFuzzer, FUZZ_SECONDS each
#                        (make fuzz-coverage: the lines of each reader that its corpus reaches)
#
# Knobs: CC, OMP=1 (0 turns OpenMP off), NATIVE=1 (-march=native -mprefer-vector-width=512 after
#        a test compile), MPI=1 (0 turns off data parallelism: train_cpu and train_gpu under
#        mpirun need Open MPI's mpicc, and train_gpu NCCL from the CUDA toolkit, found when present),
#        LAYERS=fast (naive: every layer of train_cpu and infer on the plain loops that define
#        it, gpt2/cpu_layers.h), NVCC (CUDA 12.0 or newer; 12.8 for compute capability 10.0
#        and 12.0: doc/gpu.md), GPU_ARCH (compute capabilities to build for, e.g.
#        GPU_ARCH=90 or GPU_ARCH="80 90"; default: this machine's GPU, or without one 80 86 89 90),
#        USE_CUBLAS=0, DATA_DIR (local folder holding the source files).
#
#   make train_gpu_emu   the whole train_gpu on the CPU emulator of CUDA: build/emu/train_gpu
#   make infer_gpu_emu   the whole infer_gpu on the emulator: build/emu/infer_gpu
#   make race-emu        the kernel checks under the emulator's shared-memory race detector
#   make kernels-emu     the kernel ladder (dev/kernels/): every step checked on the emulator
#   make bench-emu       the emulator's speed on the programs the tests run (EMU_BASELINE=DIR:
#                        an older checkout timed beside this one, for the ratio)
#   make kernels         the kernel ladder on a GPU: every step checked and timed, a table and a chart
#   make bench-gpu-peers train_gpu beside llm.c's train_gpt2cu (LLMC_DIR=/path/to/llm.c, or LLMC_BIN) and
#                        PyTorch, eager and compiled: GPT-2 124M, T=1024, B=8 and 64, a table and a chart
#                        in BENCH_OUT (default build/bench_gpu_peers; dev/bench/bench_gpu_peers.sh)

CC       ?= gcc
OMP      ?= 1
NATIVE   ?= 1
NVCC     ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
USE_CUBLAS ?= 0
DATA_DIR ?=
PYTHON   ?= /usr/bin/python3
LAYERS   ?= fast

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
  # GCC tunes several AVX-512 cores to vectorise loops 256 bits wide; the elementwise layers
  # (GELU above all) run faster 512 bits wide, with the same bits (doc/cpu_speed.md, "What is left")
  ifeq ($(findstring -mprefer-vector-width,$(CFLAGS))$(call try_cc,-march=native -mprefer-vector-width=512),yes)
    CFLAGS += -mprefer-vector-width=512
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

# Data parallel training under mpirun (doc/parallel.md): built with MPI where Open MPI's mpicc
# is found, by its compile and link flags with $(CC) (so the compiler stays CC); without it the
# programs build and run as one process.
MPI ?= 1
ifeq ($(MPI),1)
  MPI_LIBS := $(shell mpicc --showme:link 2>/dev/null)
  ifneq ($(strip $(MPI_LIBS)),)
    MPI_FLAGS := -DUSE_MPI $(shell mpicc --showme:compile 2>/dev/null)
    MPI_STATUS := MPI on
  else
    MPI_STATUS := MPI off (no Open MPI mpicc found: apt-get install openmpi-bin libopenmpi-dev)
  endif
else
  MPI_STATUS := MPI off (MPI=0)
endif

# The HTTP server of infer and infer_gpu (--serve, doc/serve.md) is built where libmicrohttpd is
# found (apt-get install libmicrohttpd-dev); without it they build and say so when asked to serve.
SERVE_LIBS := $(shell pkg-config --libs libmicrohttpd 2>/dev/null)
ifneq ($(strip $(SERVE_LIBS)),)
  SERVE_FLAGS := -DGPT2_SERVE $(shell pkg-config --cflags libmicrohttpd 2>/dev/null)
  SERVE_LIBS += -lpthread
  SERVE_STATUS := server on
else
  SERVE_STATUS := server off (no libmicrohttpd found: apt-get install libmicrohttpd-dev)
endif

ifneq ($(MATMUL),)
  $(error MATMUL=$(MATMUL): the knob is LAYERS (LAYERS=naive runs every layer on its plain loops))
endif
ifeq ($(LAYERS),naive)
  LAYERS_FLAGS := -DLAYERS_NAIVE
else ifneq ($(LAYERS),fast)
  $(error LAYERS=$(LAYERS): use LAYERS=fast (the default) or LAYERS=naive)
endif

export CC CFLAGS LDLIBS PYTHON DATA_DIR

# The shared headers (gpt2/, and the GPU's in gpt2/gpu/): every program is rebuilt when one changes.
HEADERS := $(wildcard gpt2/*.h)
GPU_HEADERS := $(HEADERS) $(wildcard gpt2/gpu/*.cuh)

# train_cpu and infer are rebuilt when the compiler or its flags change (LAYERS=naive, another
# CC), not only when a source does: build/flags holds the last ones, rewritten when they differ.
BUILD_FLAGS := $(CC) $(CFLAGS) $(LAYERS_FLAGS) $(MPI_FLAGS) $(SERVE_FLAGS)
$(shell mkdir -p build && echo '$(BUILD_FLAGS)' | cmp -s - build/flags || echo '$(BUILD_FLAGS)' > build/flags)

CPU_PROGRAMS := tokenizer train_cpu infer
GPU_PROGRAMS := train_gpu infer_gpu

# GPU code is built for the GPUs this machine has (nvidia-smi says which), or, without one, as a
# fat binary: machine code for A100 (8.0), RTX 30xx/A10 (8.6), RTX 40xx/L4 (8.9) and H100/H200
# (9.0), plus PTX of the newest, which the driver of a later GPU compiles when the program
# starts. -lineinfo maps machine code to source lines for compute-sanitizer and the profilers.
# The machine code of one major version (8.0, 8.6, 8.9) is assembled from one PTX, that of its
# lowest: the code asks nothing of 8.6 or 8.9 that 8.0 lacks, and nvcc's front end (cicc), the
# larger part of a build, then runs once for them, not three times.
ifeq ($(strip $(GPU_ARCH)),)
  GPU_ARCH := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | grep -E '^[0-9]+\.[0-9]+$$' | tr -d . | sort -un)
  GPU_ARCH_WHY := the GPU of this machine
  ifeq ($(strip $(GPU_ARCH)),)
    GPU_ARCH := 80 86 89 90
    GPU_ARCH_WHY := no GPU found here: a fat binary
  endif
else
  GPU_ARCH_WHY := GPU_ARCH
endif
GPU_ARCH_PTX := $(shell echo $(GPU_ARCH) | tr ' ' '\n' | sort -n | tail -n 1)
# gpu_ptx_of A: the lowest architecture in GPU_ARCH of A's major version (A less its last digit)
gpu_ptx_of = $(shell a=$(1); for b in $(GPU_ARCH); do [ "$${b%?}" = "$${a%?}" ] && echo $$b; done | sort -n | head -n 1)
# 9.0 as sm_90a, the code that has wgmma and setmaxnreg (matmul_wgmma.cuh); the PTX stays compute_XX,
# which a later GPU compiles, and where the Hopper kernels trap but are never chosen.
comma := ,
gencode_of = $(if $(filter 90,$(1)),-gencode arch=compute_90a$(comma)code=sm_90a,-gencode arch=compute_$(call gpu_ptx_of,$(1))$(comma)code=sm_$(1))
GENCODE := $(foreach a,$(GPU_ARCH),$(call gencode_of,$(a))) \
           -gencode arch=compute_$(GPU_ARCH_PTX),code=compute_$(GPU_ARCH_PTX)

# The oldest CUDA toolkit that builds the GPU code for GPU_ARCH (doc/gpu.md). The code needs 12.0:
# Hopper's tensor maps (CUtensorMap, cuTensorMapEncodeTiled) and the sm_90a target of wgmma, which
# every GPU program includes (the Ampere path needs 11.0: bf16, mma.sync, cp.async). A compute
# capability needs the toolkit that first knew it: 8.6 came with 11.1, 8.9 and 9.0 with 11.8, 10.0
# and 12.0 with 12.8. An older nvcc (its release read from `nvcc --version`: "release 11.4,")
# stops each GPU target in one line; `make` alone skips them, saying why.
CUDA_FIRST_86 := 11.1
CUDA_FIRST_89 := 11.8
CUDA_FIRST_90 := 12.0
CUDA_FIRST_100 := 12.8
CUDA_FIRST_120 := 12.8

ifneq ($(NVCC),)
  NVCC_FLOOR := $(lastword $(shell printf '%s\n' 12.0 $(foreach a,$(GPU_ARCH),$(CUDA_FIRST_$(a))) | sort -V))
  NVCC_RELEASE := $(shell $(NVCC) --version 2>/dev/null | sed -n 's/.*release \([0-9]*\.[0-9]*\),.*/\1/p')
  # the release when it comes before the floor in version order; empty when new enough (or unread)
  NVCC_TOO_OLD := $(if $(NVCC_RELEASE),$(filter-out $(NVCC_FLOOR),$(firstword $(shell printf '%s\n' $(NVCC_RELEASE) $(NVCC_FLOOR) | sort -V))))
  NVCC_TOO_OLD_WHY := $(NVCC) is CUDA $(NVCC_RELEASE), older than the $(NVCC_FLOOR) that the GPU code needs for compute \
    capability $(GPU_ARCH) (doc/gpu.md): give a newer toolkit's nvcc as NVCC=/path/to/nvcc$(if \
    $(filter-out 12.0,$(NVCC_FLOOR)),$(comma) or build for fewer GPUs (GPU_ARCH=90 needs 12.0))
  # nvcc compiles for one architecture after the other; from CUDA 11.2 on, --threads 0 compiles
  # for all of them at once, as many at a time as there are cores (the default fat binary: 6 jobs)
  NVCC_THREADS := $(if $(filter 11.2,$(firstword $(shell printf '%s\n' $(or $(NVCC_RELEASE),0) 11.2 | sort -V))),--threads 0)
  NVCC_FLAGS := -O3 -lineinfo $(GENCODE) -DCUDA_ARCHS='"$(GPU_ARCH)"' -Xcompiler -fopenmp -Wno-deprecated-gpu-targets \
                $(NVCC_THREADS)
  ifeq ($(USE_CUBLAS),1)
    NVCC_FLAGS += -DUSE_CUBLAS
    NVCC_LIBS := -lcublas
  endif
  # train_gpu under mpirun: NCCL, which the CUDA toolkit ships (or Debian's libnccl-dev), and MPI
  NCCL_LIB := $(firstword $(wildcard $(dir $(NVCC))../lib64/libnccl.so $(dir $(NVCC))../targets/*/lib/libnccl.so \
                                     /usr/lib/x86_64-linux-gnu/libnccl.so /usr/lib/aarch64-linux-gnu/libnccl.so))
  ifneq ($(and $(MPI_FLAGS),$(NCCL_LIB)),)
    GPU_MPI_FLAGS := $(MPI_FLAGS)
    GPU_MPI_LIBS := $(MPI_LIBS) -L$(dir $(NCCL_LIB)) -lnccl
    GPU_MPI_STATUS := MPI and NCCL on
  else
    GPU_MPI_STATUS := one GPU only ($(if $(MPI_FLAGS),NCCL not found,$(MPI_STATUS)))
  endif
  ALL_TARGETS := $(CPU_PROGRAMS) $(if $(NVCC_TOO_OLD),,$(GPU_PROGRAMS))
  # the GPU programs are rebuilt when nvcc or its flags change (GPU_ARCH), as build/flags does
  NVCC_STAMP := build/nvcc_flags
  $(shell echo '$(NVCC) $(NVCC_FLAGS) $(GPU_MPI_FLAGS)' | cmp -s - $(NVCC_STAMP) || echo '$(NVCC) $(NVCC_FLAGS) $(GPU_MPI_FLAGS)' > $(NVCC_STAMP))
else
  ALL_TARGETS := $(CPU_PROGRAMS)
endif

.PHONY: all data test plot lessons roofline-doc fuzz fuzz-targets fuzz-coverage bench bench-tokenizer bench-cpu bench-infer bench-serve bench-dp bench-data bench-parallel bench-gpu-peers clean gpu-status gpu-checks gpu-emu race-emu bench-gpu bench-emu train_gpu_emu infer_gpu_emu kernels kernels-emu figures

all: $(ALL_TARGETS) gpu-status
	@echo "built: $(ALL_TARGETS) ($(OMP_STATUS), $(MPI_STATUS), $(SERVE_STATUS))"

gpu-status:
ifeq ($(NVCC),)
	@echo "skipped: $(GPU_PROGRAMS) (nvcc not found; install the CUDA toolkit or set NVCC=)"
else ifneq ($(NVCC_TOO_OLD),)
	@echo "skipped: $(GPU_PROGRAMS) ($(NVCC_TOO_OLD_WHY))"
endif

# The first line of each GPU target's recipe: stops make there, in one line, when nvcc is too old.
nvcc_new_enough = $(if $(NVCC_TOO_OLD),$(error $(NVCC_TOO_OLD_WHY)))
# nvcc_build FLAGS,LIBS[,NOTE]: a GPU program's recipe, nvcc from its first prerequisite (the .cu
# file) into $@, after NOTE when given; without nvcc it says "skipped" and fails. Compiled, then
# linked in a second call without --threads: with it, nvcc runs the device link of each
# architecture at once, and those all write one temporary file (nvlink then fails, now and then,
# "Could not read file ..._dlink.reg.c").
ifeq ($(NVCC),)
nvcc_build = @echo "skipped: $@ (nvcc not found)"; exit 1
else
define nvcc_build
$(nvcc_new_enough)
$(if $(3),@echo "$@: $(3)")
$(NVCC) $(1) -c -o $@.o $<
$(NVCC) $(filter-out --threads 0,$(1)) -o $@ $@.o $(2)
@rm -f $@.o
endef
endif
GPU_ARCH_NOTE = compute capability $(GPU_ARCH) ($(GPU_ARCH_WHY)) + PTX $(GPU_ARCH_PTX)

# ---------- programs ----------

tokenizer: tokenizer.c $(HEADERS)
	$(CC) $(CFLAGS) -o $@ tokenizer.c $(LDLIBS)

# The training programs depend on the data, so `make train_cpu && ./train_cpu` works on a fresh machine.
train_cpu: train_cpu.c $(HEADERS) build/flags | data
	$(CC) $(CFLAGS) $(LAYERS_FLAGS) $(MPI_FLAGS) -o $@ train_cpu.c $(LDLIBS) $(MPI_LIBS)

infer: infer.c $(HEADERS) build/flags | data
	$(CC) $(CFLAGS) $(LAYERS_FLAGS) $(SERVE_FLAGS) -o $@ infer.c $(LDLIBS) $(SERVE_LIBS)

train_gpu: train_gpu.cu $(GPU_HEADERS) $(NVCC_STAMP) | data
	$(call nvcc_build,$(NVCC_FLAGS) $(GPU_MPI_FLAGS),$(NVCC_LIBS) $(GPU_MPI_LIBS),$(GPU_ARCH_NOTE); $(GPU_MPI_STATUS))

infer_gpu: infer_gpu.cu $(GPU_HEADERS) $(NVCC_STAMP) | data
	$(call nvcc_build,$(NVCC_FLAGS) $(SERVE_FLAGS),$(NVCC_LIBS) $(SERVE_LIBS),$(GPU_ARCH_NOTE))

# GPU checks (dev/gpu/gpu_check.cu): every kernel and the whole model against the CPU, then timings;
# build/gpu_check_cublas times cuBLAS on the same matrix products, for comparison.
# build/instruction_check (dev/gpu/instruction_check.cu): the tensor-core instructions the bf16
# kernels use against their definitions; on a GPU it checks our reading of the PTX ISA, on the
# emulator (build/emu/instruction_check) the emulator's. wgmma exists only in an sm_90a build,
# which GENCODE gives 9.0.
gpu-checks: build/gpu_check build/instruction_check

build/instruction_check: dev/gpu/instruction_check.cu $(GPU_HEADERS) $(NVCC_STAMP)
	$(call nvcc_build,$(NVCC_FLAGS))

build/gpu_check: dev/gpu/gpu_check.cu dev/gpu/check.cuh dev/gpu/roofline.h train_gpu.cu train_cpu.c $(GPU_HEADERS) $(NVCC_STAMP)
	$(call nvcc_build,$(NVCC_FLAGS),$(NVCC_LIBS))

build/gpu_check_cublas: dev/gpu/gpu_check.cu dev/gpu/check.cuh dev/gpu/roofline.h train_gpu.cu train_cpu.c $(GPU_HEADERS) $(NVCC_STAMP)
	$(call nvcc_build,$(filter-out -DUSE_CUBLAS,$(NVCC_FLAGS)) -DUSE_CUBLAS,-lcublas)

# The roofline of a training step (dev/gpu/roofline.h): every kernel's FLOPs, bytes and floor on
# an H100, computed from its spec sheet, in plain C (no GPU or nvcc needed). build/roofline prints
# the tables of doc/gpu.md; `make roofline-doc` pastes them there, between the roofline markers
# (test/test_roofline.sh fails when the two differ). build/gpu_check roofline measures them on a GPU.
build/roofline: dev/gpu/roofline.c dev/gpu/roofline.h $(HEADERS)
	$(CC) $(CFLAGS) -o $@ dev/gpu/roofline.c $(LDLIBS)

roofline-doc: build/roofline
	build/roofline >build/roofline.md
	awk '/^<!-- roofline end/ {skip = 0} !skip {print} /^<!-- roofline begin/ {while ((getline l < "build/roofline.md") > 0) print l; skip = 1}' \
	  doc/gpu.md >build/gpu.md && mv build/gpu.md doc/gpu.md

# The CUDA emulator (dev/emu/cuda_emu.h, no GPU or nvcc needed): the kernels run on the CPU, each
# block's threads as fibers, under AddressSanitizer and UBSan, which check indexing, bounds,
# barriers and float4 alignment, not speed. build/emu/gpu_check runs the kernel checks that way,
# build/emu/train_gpu the whole training program, with train_gpu's command line. dev/emu/cuda_emu.py
# first turns each .cu file into C++ for it (build/emu/NAME.cpp).
# Each emulated program is one translation unit, compiled as the whole program (-fwhole-program:
# what it does not call, such as most of the CPU layers a check includes, is dropped before code
# generation), with line tables and inlining for the reports (-g1; EMU_BUILD="-g" for a debugger).
# UBSan's vptr check is left out: it checks the dynamic types of polymorphic C++ objects, which the
# project has none of, and it cost a tenth of the build.
EMU_BUILD ?= -g1 -fwhole-program
EMU_CXXFLAGS := -std=c++17 $(EMU_BUILD) $(filter -fopenmp,$(CFLAGS)) -fsanitize=address,undefined -fno-sanitize=vptr \
                -fno-sanitize-recover=undefined -include dev/emu/cuda_emu.h -I.
# The race detector's builds (build/emu/*_race, build/emu/race_check): GCC's ThreadSanitizer
# instrumentation puts a call before every load and store, and the emulator (-DCUDA_EMU_RACE)
# answers them: compiled with -fsanitize=thread, linked without it, so that no ThreadSanitizer
# runtime is involved. AddressSanitizer cannot be combined with it: the detector checks the
# bounds of shared memory itself. -DMM_UNROLL=: the CPU's GEMM (gpt2/cpu_math.h), which the
# checks' references use, not unrolled: at -O1 its unrolled copies were 60% of a ladder step's build.
EMU_RACE_CXXFLAGS := -std=c++17 $(EMU_BUILD) $(filter -fopenmp,$(CFLAGS)) -DCUDA_EMU_RACE -fsanitize=thread \
                     --param=tsan-instrument-func-entry-exit=0 -DMM_UNROLL= -include dev/emu/cuda_emu.h -I.
emu_race_build = $(CXX) -O1 $(EMU_RACE_CXXFLAGS) $(1) -c $< -o $@.o && $(CXX) $(filter -fopenmp,$(CFLAGS)) $@.o -o $@ $(2) && rm $@.o
gpu-emu: build/emu/gpu_check build/emu/instruction_check build/emu/emu_check
race-emu: build/emu/gpu_check_race build/emu/race_check build/emu/race_check_asan
train_gpu_emu: build/emu/train_gpu
infer_gpu_emu: build/emu/infer_gpu

build/emu/gpu_check.cpp: dev/gpu/gpu_check.cu dev/gpu/check.cuh dev/gpu/roofline.h train_gpu.cu train_cpu.c $(GPU_HEADERS) dev/emu/cuda_emu.py
	@mkdir -p build/emu
	$(PYTHON) dev/emu/cuda_emu.py $< $@
build/emu/instruction_check.cpp: dev/gpu/instruction_check.cu $(GPU_HEADERS) dev/emu/cuda_emu.py
	@mkdir -p build/emu
	$(PYTHON) dev/emu/cuda_emu.py $< $@
build/emu/race_check.cpp: dev/emu/race_check.cu $(GPU_HEADERS) dev/emu/cuda_emu.py
	@mkdir -p build/emu
	$(PYTHON) dev/emu/cuda_emu.py $< $@
build/emu/emu_check.cpp: dev/emu/emu_check.cu $(GPU_HEADERS) dev/emu/cuda_emu.py
	@mkdir -p build/emu
	$(PYTHON) dev/emu/cuda_emu.py $< $@
build/emu/train_gpu.cpp: train_gpu.cu $(GPU_HEADERS) dev/emu/cuda_emu.py
	@mkdir -p build/emu
	$(PYTHON) dev/emu/cuda_emu.py $< $@
build/emu/infer_gpu.cpp: infer_gpu.cu $(GPU_HEADERS) dev/emu/cuda_emu.py
	@mkdir -p build/emu
	$(PYTHON) dev/emu/cuda_emu.py $< $@
build/emu/nccl_check.cpp: dev/emu/nccl_check.cu dev/emu/cuda_emu.py
	@mkdir -p build/emu
	$(PYTHON) dev/emu/cuda_emu.py $< $@

# train_gpu at -O2: it runs for minutes in the tests, most of them in the kernels' arithmetic;
# the checks at -O1, which builds in half the time. -DEMU_UNROLL_LOOPS: its loops that only
# compute unrolled as nvcc unrolls them (EMU_UNROLL in dev/emu/cuda_emu.h), the float32 GEMMs'
# register tiles in registers: 6 float32 steps run in a third less time, and it builds in 20-25 s
# more, which its runs in the tests pay back (the three train_gpu tests: 35 CPU-s less).
# gpu_check --quick takes about 10 s at -O1 where -O2 with the unrolling took 7, and builds in
# 38 s where that took 71: the tests run it five times.
build/emu/gpu_check: build/emu/gpu_check.cpp dev/emu/cuda_emu.h
	$(CXX) -O1 $(EMU_CXXFLAGS) -Wno-psabi $< -o $@
build/emu/instruction_check: build/emu/instruction_check.cpp dev/emu/cuda_emu.h
	$(CXX) -O1 $(EMU_CXXFLAGS) -Wno-psabi $< -o $@
build/emu/race_check_asan: build/emu/race_check.cpp dev/emu/cuda_emu.h
	$(CXX) -O1 $(EMU_CXXFLAGS) $< -o $@
build/emu/emu_check: build/emu/emu_check.cpp dev/emu/cuda_emu.h
	$(CXX) -O1 $(EMU_CXXFLAGS) $< -o $@
build/emu/train_gpu: build/emu/train_gpu.cpp dev/emu/cuda_emu.h build/flags | data
	$(CXX) -O2 -DEMU_UNROLL_LOOPS $(EMU_CXXFLAGS) $(MPI_FLAGS) $< -o $@ $(MPI_LIBS)
# the emulator's NCCL (done with MPI) against NCCL's results: with MPI as train_gpu's build has it
build/emu/nccl_check: build/emu/nccl_check.cpp dev/emu/cuda_emu.h build/flags
	$(CXX) -O1 $(EMU_CXXFLAGS) $(MPI_FLAGS) $< -o $@ $(MPI_LIBS)
build/emu/infer_gpu: build/emu/infer_gpu.cpp dev/emu/cuda_emu.h build/flags | data
	$(CXX) -O1 $(EMU_CXXFLAGS) $(SERVE_FLAGS) $< -o $@ $(SERVE_LIBS)
build/emu/infer_gpu_race: build/emu/infer_gpu.cpp dev/emu/cuda_emu.h build/flags | data
	$(call emu_race_build,$(SERVE_FLAGS),$(SERVE_LIBS))
build/emu/gpu_check_race: build/emu/gpu_check.cpp dev/emu/cuda_emu.h
	$(call emu_race_build)
build/emu/race_check: build/emu/race_check.cpp dev/emu/cuda_emu.h
	$(call emu_race_build)
build/emu/train_gpu_race: build/emu/train_gpu.cpp dev/emu/cuda_emu.h build/flags | data
	$(call emu_race_build,$(MPI_FLAGS),$(MPI_LIBS))

# ---------- the kernel ladder (dev/kernels/) ----------
# One program per step, numbered from the naive kernel to the project's own: built with nvcc for a
# GPU (build/kernels/NN_name), and for the emulator twice, under AddressSanitizer and UBSan
# (build/emu/kernels/NN_name) and under the race detector (..._race). dev/kernels/run.sh runs them
# all: one line per step, PASS or FAIL; on a GPU also the table and chart of their speeds.
KERNEL_STEPS := $(basename $(notdir $(sort $(wildcard dev/kernels/[0-9][0-9]_*.cu))))
KERNEL_DEPS := $(wildcard dev/kernels/*.cuh) dev/gpu/check.cuh $(GPU_HEADERS)
KERNEL_GPU := $(addprefix build/kernels/,$(KERNEL_STEPS))
KERNEL_EMU := $(addprefix build/emu/kernels/,$(KERNEL_STEPS))

kernels-emu: $(KERNEL_EMU) $(addsuffix _race,$(KERNEL_EMU))
	bash dev/kernels/run.sh emu $(KERNEL_STEPS)
kernels:
	@nvidia-smi -L 2>/dev/null | grep -q '^GPU [0-9]' || { echo "make kernels: no NVIDIA GPU here (nvidia-smi lists none); make kernels-emu checks the ladder on the CPU emulator"; exit 1; }
	@$(MAKE) --no-print-directory $(KERNEL_GPU)
	bash dev/kernels/run.sh gpu $(KERNEL_STEPS)

$(KERNEL_GPU): build/kernels/%: dev/kernels/%.cu $(KERNEL_DEPS) $(NVCC_STAMP)
ifeq ($(NVCC),)
	@echo "skipped: $@ (nvcc not found; make kernels-emu runs the ladder on the emulator)"; exit 1
else
	@mkdir -p build/kernels
	$(call nvcc_build,$(NVCC_FLAGS))
endif
# emu_programs PROGRAMS,FOLDER,SOURCES,DEPS,OPT: the rules of the emulated PROGRAMS (build/emu/FOLDER/NAME
# from SOURCES/NAME.cu and DEPS): NAME.cpp (cuda_emu.py), NAME (under AddressSanitizer and UBSan, at
# OPT) and NAME_race (the race detector's build)
define emu_programs
$$($(1):%=%.cpp): build/emu/$(2)/%.cpp: $(3)/%.cu $(4) dev/emu/cuda_emu.py
	@mkdir -p build/emu/$(2)
	$$(PYTHON) dev/emu/cuda_emu.py $$< $$@
$$($(1)): build/emu/$(2)/%: build/emu/$(2)/%.cpp dev/emu/cuda_emu.h
	$$(CXX) $(5) $$(EMU_CXXFLAGS) $$< -o $$@
$$($(1):%=%_race): build/emu/$(2)/%_race: build/emu/$(2)/%.cpp dev/emu/cuda_emu.h
	$$(call emu_race_build)
endef
# The steps run for a fraction of a second: -Og builds in 40% less time than -O1, and its runs
# took about 0.2 s more for the 16 steps before Hopper's (10 to 12). (The race detector's builds
# stay at -O1: at -Og, some shared-memory stores escape its instrumentation, and gpu_check_race
# reports a read of memory that the block did write.)
$(eval $(call emu_programs,KERNEL_EMU,kernels,dev/kernels,$(KERNEL_DEPS),-Og))
# The lessons' demonstration kernels (doc/lessons/*.cu), built the same two ways; doc/lessons/emu.sh
# builds one through these rules and runs it.
LESSON_EMU := $(patsubst doc/lessons/%.cu,build/emu/lessons/%,$(wildcard doc/lessons/*.cu))
$(eval $(call emu_programs,LESSON_EMU,lessons,doc/lessons,$(GPU_HEADERS),-O1))

# ---------- data ----------

DATA_FILES := data/gpt2_tokenizer.bin data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin
RAW := data/raw/tinyshakespeare.txt data/raw/encoder.json data/raw/vocab.bpe

data: $(DATA_FILES)

$(RAW) &: dev/data/fetch_data.sh
	bash dev/data/fetch_data.sh data/raw $(DATA_DIR)

data/gpt2_tokenizer.bin: tokenizer $(RAW)
	./tokenizer vocab data/raw/encoder.json data/raw/vocab.bpe $@

data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin &: tokenizer data/gpt2_tokenizer.bin data/raw/tinyshakespeare.txt
	./tokenizer -k data/gpt2_tokenizer.bin prepare data/raw/tinyshakespeare.txt data/tinyshakespeare

# ---------- tests and benchmarks ----------

test:
	bash test/setup.sh
	$(MAKE) -j"$$(nproc 2>/dev/null || echo 2)" all data
	bash test/run.sh

# ---------- fuzzing: every file reader and the tokenizer under libFuzzer (test/fuzz/) ----------
# make fuzz runs each target for FUZZ_SECONDS (its corpus grows in build/fuzz/corpus, so runs add
# up); make test runs each for 10 s. Needs clang with libFuzzer (test/setup.sh installs it).
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 180
FUZZ_TARGETS := encode decode tokenizer_file vocab checkpoint safetensors tokens shards state json request completion
FUZZ_FLAGS   := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
                -Wall -Wextra -Wno-unused-parameter -Wno-unused-function -Wno-unknown-pragmas

build/fuzz/fuzz_%: test/fuzz/fuzz_%.c $(wildcard test/fuzz/*.h) $(HEADERS) tokenizer.c
	@mkdir -p build/fuzz
	$(FUZZ_CC) $(FUZZ_FLAGS) $< -o $@ -lm

fuzz-targets: $(addprefix build/fuzz/fuzz_,$(FUZZ_TARGETS))

fuzz: fuzz-targets data
	bash test/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# the lines and branches of each reader that the corpora reach (llvm-cov)
fuzz-coverage: data
	bash test/fuzz/coverage.sh $(FUZZ_TARGETS)

bench: bench-tokenizer bench-cpu bench-infer

bench-tokenizer: tokenizer data
	bash dev/bench/bench_tokenizer.sh

# bench-cpu, bench-infer, bench-serve, bench-parallel and bench-gpu draw their tables as charts beside the text (dev/bench/plot.py); where
# matplotlib cannot be had (offline), they say so and keep the text.
PLOT_SETUP := bash dev/bench/setup_plot.sh
# The recipe of bench-cpu, bench-infer and bench-serve: dev/bench/bench_NAME.sh's table, printed and
# kept in build/bench/bench_NAME.txt, and its chart beside it, bench_NAME.png (bench-NAME: the target)
define bench_table_and_chart
	@mkdir -p build/bench
	set -o pipefail; bash dev/bench/$(subst -,_,$@).sh | tee build/bench/$(subst -,_,$@).txt
	$(PLOT_SETUP) && $(PYTHON) dev/bench/plot.py $@ build/bench/$(subst -,_,$@).png build/bench/$(subst -,_,$@).txt \
	  || echo "$@: no chart (the table is in build/bench/$(subst -,_,$@).txt)"
endef

# train_cpu's step in float32 and in -p bf16 beside each precision's peak, measured in the same run
# (dev/bench/fma_peak.c), and PyTorch's float32 step: d12 and the default model (dev/bench/bench_cpu.sh)
bench-cpu: train_cpu
	$(bench_table_and_chart)

# infer's decode tokens/s by batch size with float32 and with bf16 weights (-w), each beside its
# memory-bandwidth and peak limits, and bf16's speed-up (dev/bench/bench_infer.sh)
bench-infer: infer
	$(bench_table_and_chart)

# infer's server under load from HTTP clients, against infer -f at the same batch (knobs: MODEL,
# TOKENS, CLIENTS, ROUNDS, REPEATS; dev/bench/bench_serve.sh)
bench-serve: infer
	$(bench_table_and_chart)

# data parallel on this machine's CPU: 1 and 2 processes, and the all-reduce's cost (doc/parallel.md)
bench-dp: train_cpu
	bash dev/bench/bench_dp.sh

# the peak memory of a run on 3.2 GB of token shards against one on Tiny Shakespeare (dev/bench/bench_data.sh)
bench-data: train_cpu data
	@mkdir -p build/bench
	set -o pipefail; bash dev/bench/bench_data.sh | tee build/bench/bench_data.txt

# tensor, pipeline and data parallel and ZeRO-1 on this machine's CPU, 2 processes each, against 1:
# the table and the runs' output in doc/results/bench_parallel.txt, the chart beside it
bench-parallel: train_cpu
	bash dev/bench/bench_parallel.sh
	$(PLOT_SETUP) && $(PYTHON) dev/bench/plot.py bench-parallel doc/results/bench_parallel.png doc/results/bench_parallel.txt \
	  || echo "bench-parallel: no chart (the table is in doc/results/bench_parallel.txt)"

# the emulated programs and kernel checks, timed here and, with EMU_BASELINE=DIR, in an older
# checkout side by side (dev/bench/bench_emu.sh)
bench-emu: data
	bash dev/bench/bench_emu.sh $(EMU_BASELINE) .

bench-gpu: train_cpu train_gpu
	bash dev/bench/gpu_speedup.sh
	$(PLOT_SETUP) && $(PYTHON) dev/bench/plot.py bench-gpu doc/results/gpu_speedup.png doc/results/gpu_speedup.md \
	  || echo "bench-gpu: no chart (the table is in doc/results/gpu_speedup.md)"

# train_gpu, llm.c's train_gpt2cu and PyTorch (dev/bench/train_torch.py) side by side on this GPU: the
# script checks for a GPU before it builds anything, then builds train_gpu and llm.c (doc/gpu.md)
bench-gpu-peers:
	@bash dev/bench/bench_gpu_peers.sh

# Loss curves of one or more runs: make plot LOG="runA/main.log runB/main.log" OUT=loss.png
plot:
	@[ -n "$(LOG)" ] || { echo "make plot: give LOG=DIR/main.log (several: LOG=\"a/main.log b/main.log\") and OUT=FILE.png" >&2; exit 1; }
	@[ -n "$(OUT)" ] || { echo "make plot: give OUT=FILE.png, the picture to write" >&2; exit 1; }
	@$(PLOT_SETUP)
	$(PYTHON) dev/bench/plot.py loss $(OUT) $(LOG)

# The lessons' code quotes and command outputs, from the tree as it is (doc/lessons/render.py)
lessons: all
	$(PYTHON) doc/lessons/render.py
figures: ; @$(PLOT_SETUP) && $(PYTHON) doc/lessons/figures.py

clean:
	rm -rf $(CPU_PROGRAMS) $(GPU_PROGRAMS) train_cpu_asan build
