// gpt2/gpu/cuda_utils.cuh: what every GPU kernel and launcher needs: checked CUDA calls and
// launches, warp and block reductions, scratch memory for two-stage sums, the element types, and
// the device: which GPU a process takes, its peak throughput (MFU's reference), free memory.

#ifndef GPT2_GPU_CUDA_UTILS_CUH
#define GPT2_GPU_CUDA_UTILS_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "../io.h"
#include "../parallel.h"  // procs.local_rank: which GPU a process takes

// ---------- checked calls and launches ----------

// Kernels run asynchronously: a fault is reported by whichever later call waits for the GPU.
// launch_check(kernel) after each launch reports a refused launch at once and, with GPU_DEBUG=1,
// waits for the kernel, so that a fault names it (slow: for finding a fault, not for training).
static int cuda_debug = 0;  // GPU_DEBUG=1 in the environment, read by cuda_device_init

// The errors a kernel's fault leaves behind (the context is lost: every later call fails).
static int is_kernel_fault(cudaError_t err) {
    return err == cudaErrorIllegalAddress || err == cudaErrorLaunchFailure;
}

static void cuda_check_(cudaError_t err, const char* call, const char* file, int line) {
    if (err == cudaSuccess) return;
    fail("CUDA call %s failed: %s (%s:%d)%s", call, cudaGetErrorString(err), file, line,
         is_kernel_fault(err) && !cuda_debug ? "; an earlier kernel faulted: run with GPU_DEBUG=1 to name it" : "");
}
#define cuda_check(call) cuda_check_((call), #call, __FILE__, __LINE__)

static void launch_check_(const char* kernel, const char* file, int line) {
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess && cuda_debug) err = cudaDeviceSynchronize();
    if (err != cudaSuccess) fail("kernel %s (%s:%d) failed: %s", kernel, file, line, cudaGetErrorString(err));
}
#define launch_check(kernel) launch_check_(#kernel, __FILE__, __LINE__)

static int ceil_div(size_t n, int d) { return (int)((n + d - 1) / d); }

static int aligned16(const void* p) { return ((uintptr_t)p % 16) == 0; }

// The shared-memory address of p, as the PTX instructions on shared memory take it.
__device__ __forceinline__ uint32_t smem_address(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// ---------- reductions ----------

// Sums over the 32 lanes of a warp; every lane gets the result (butterfly, fixed order).
template <typename F>
__device__ __forceinline__ F warp_sum(F v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// The two warp reductions, as types, so that block_reduce can take either.
struct WarpSum {
    template <typename F>
    __device__ F operator()(F v) const { return warp_sum(v); }
};
struct WarpMax {
    __device__ float operator()(float v) const { return warp_max(v); }
};

// Reduces v over the block (blockDim.x a multiple of 32); every thread gets the result. The
// first __syncthreads keeps a second call from overwriting `partial` while a warp still reads it.
template <typename F, typename WarpOp>
__device__ F block_reduce(F v, F identity) {
    __shared__ F partial[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = WarpOp()(v);
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    return WarpOp()(lane < nwarps ? partial[lane] : identity);
}
template <typename F>
__device__ F block_sum(F v) { return block_reduce<F, WarpSum>(v, (F)0); }
__device__ float block_max(float v) { return block_reduce<float, WarpMax>(v, -INFINITY); }

// ---------- deterministic sums in two stages ----------

// Scratch for two-stage reductions, grown on demand; one stream runs in order, so one buffer serves.
static float* scratch_memory = NULL;
static size_t scratch_capacity = 0;  // floats
static float* scratch_floats(size_t n) {
    if (n > scratch_capacity) {
        if (scratch_memory != NULL) cuda_check(cudaFree(scratch_memory));  // synchronises: no kernel still uses it
        cuda_check(cudaMalloc((void**)&scratch_memory, n * sizeof(float)));
        scratch_capacity = n;
    }
    return scratch_memory;
}

// Stage 2 of the deterministic column sums: out[i] += sum over chunks c (in order) of
// partial[c * stride + i], for i < n.
__global__ void sum_partials_kernel(float* out, const float* partial, int chunks, int stride, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float sum = 0.0f;
    for (int c = 0; c < chunks; c++) sum += partial[(size_t)c * stride + i];
    out[i] += sum;
}

// Column sums: chunks of rows (a block per 32 columns and chunk), whose partials stage 2 adds in
// order: enough blocks to fill the GPU, and the same bits every run (atomicAdd would vary).
#define COLSUM_ROWS_PER_CHUNK 128

// ---------- element types ----------

// bf16: float32's 8 exponent bits, 8 significant bits (doc/gpu.md "Mixed precision").
typedef __nv_bfloat16 bf16;

// Kernels of both paths take floatX activations (float or bf16) and compute in float32.
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
template <typename floatX> __device__ __forceinline__ floatX from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_float<bf16>(float x) { return __float2bfloat16(x); }

// 16 bytes of T, one load or store instruction: 4 floats or 8 bf16.
template <typename T>
struct alignas(16) Pack16 {
    static constexpr int N = 16 / sizeof(T);
    T v[N];
};
// x[0 .. N) = p[0 .. N) as float32, and back; p 16-byte aligned.
template <typename T>
__device__ __forceinline__ void load16(float* x, const T* p) {
    Pack16<T> pk = *reinterpret_cast<const Pack16<T>*>(p);
    for (int e = 0; e < Pack16<T>::N; e++) x[e] = to_float(pk.v[e]);
}
template <typename T>
__device__ __forceinline__ void store16(T* p, const float* x) {
    Pack16<T> pk;
    for (int e = 0; e < Pack16<T>::N; e++) pk.v[e] = from_float<T>(x[e]);
    *reinterpret_cast<Pack16<T>*>(p) = pk;
}
// W consecutive values as float32, and back: in 16-byte accesses (p aligned, W a multiple of
// Pack16<T>::N), or, for W = 1, one value (a kernel's fallback for any size and alignment).
template <int W, typename T>
__device__ __forceinline__ void load_values(float* x, const T* p) {
    if constexpr (W == 1) x[0] = to_float(*p);
    else for (int h = 0; h < W; h += Pack16<T>::N) load16(x + h, p + h);
}
template <int W, typename T>
__device__ __forceinline__ void store_values(T* p, const float* x) {
    if constexpr (W == 1) *p = from_float<T>(x[0]);
    else for (int h = 0; h < W; h += Pack16<T>::N) store16(p + h, x + h);
}

// ---------- the device ----------

// Peak float32 without tensor cores: SMs x clock x FP32 lanes per SM (64 on 7.x and 8.0, 128 on
// 8.6+ and 9.0) x 2 (an FMA is two flops).
typedef struct {
    int index;              // this process's GPU among those it sees (cudaSetDevice's number)
    cudaDeviceProp prop;
    double clock_ghz;
    int lanes_per_sm;
    double peak_flops;      // float32 FLOP/s
    double peak_bandwidth;  // bytes/s: 2 transfers per memory clock (DDR) x bus width
} CudaDevice;

static CudaDevice cuda_device;
static int cuda_num_sms = 132;  // the device's, set by cuda_device_init; picks the matmul tile sizes

#ifndef CUDA_ARCHS
#define CUDA_ARCHS "unknown"  // the compute capabilities built for: the Makefile says (GPU_ARCH)
#endif

// The make target that builds this program, named by errors that say to rebuild it.
static const char* cuda_make_target = "train_gpu";
// What "no CUDA device found" suggests instead.
static const char* cuda_cpu_instead = "./train_cpu";

static const char* cuda_program_name(void) {
    const char* slash = strrchr(cuda_make_target, '/');
    return slash != NULL ? slash + 1 : cuda_make_target;
}

// Picks this process's GPU and reads what it can do. "No CUDA device" only when there is none (no
// driver, or none visible); a GPU there but unusable gets its reason named (a driver older than
// the runtime built with, or whatever CUDA reports).
static void cuda_device_init(void) {
    const char* debug = getenv("GPU_DEBUG");
    cuda_debug = debug != NULL && strcmp(debug, "") != 0 && strcmp(debug, "0") != 0;
    int driver = 0, runtime = 0, count = 0;
    cuda_check(cudaDriverGetVersion(&driver));
    cuda_check(cudaRuntimeGetVersion(&runtime));
    if (driver == 0) fail("no CUDA device found (no NVIDIA driver is installed); use %s instead", cuda_cpu_instead);
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaErrorNoDevice || (err == cudaSuccess && count == 0)) {
        const char* visible = getenv("CUDA_VISIBLE_DEVICES");  // it can hide every GPU
        if (visible != NULL) {
            fail("no CUDA device found (the NVIDIA driver sees no GPU, or none that CUDA_VISIBLE_DEVICES=\"%s\" "
                 "names); use %s instead", visible, cuda_cpu_instead);
        }
        fail("no CUDA device found (the NVIDIA driver sees no GPU); use %s instead", cuda_cpu_instead);
    }
    if (err == cudaErrorInsufficientDriver && driver < runtime) {
        int has_major = driver / 1000, has_minor = driver % 1000 / 10;
        int built_major = runtime / 1000, built_minor = runtime % 1000 / 10;
        // the oldest driver series of that CUDA release (NVIDIA's compatibility table)
        int series = built_major == 11 ? 450 : built_major == 12 ? 525 : built_major == 13 ? 580 : 0;
        char needs[64] = "";
        if (series > 0) snprintf(needs, sizeof(needs), " (CUDA %d needs the %d series or newer)", built_major, series);
        fail("the NVIDIA driver supports CUDA up to %d.%d, but %s was built with CUDA %d.%d: update the driver%s, "
             "or rebuild with a CUDA toolkit no newer than %d.%d: NVCC=/path/to/nvcc make %s (e.g. "
             "NVCC=/usr/local/cuda-%d.%d/bin/nvcc)", has_major, has_minor, cuda_program_name(), built_major,
             built_minor, needs, has_major, has_minor, cuda_make_target, has_major, has_minor);
    }
    if (err != cudaSuccess) {
        fail("CUDA cannot use the GPU: %s (%s)", cudaGetErrorString(err), cudaGetErrorName(err));
    }
    // One GPU per process: the one it sees (a scheduler's CUDA_VISIBLE_DEVICES), else the one its
    // rank on the machine numbers; two on one GPU are found later (cuda_device_check_own).
    int device = count == 1 ? 0 : procs.local_rank;
    if (device >= count) {
        fail("this process is number %d of those started on this machine, and sees %d GPUs: start at most one "
             "process per GPU", device + 1, count);
    }
    cuda_check(cudaSetDevice(device));
    cuda_device.index = device;
    cuda_check(cudaGetDeviceProperties(&cuda_device.prop, device));
    // A GPU older than every architecture built for (Makefile: GPU_ARCH) finds nothing to run.
    cudaFuncAttributes attr;
    err = cudaFuncGetAttributes(&attr, sum_partials_kernel);
    if (err == cudaErrorNoKernelImageForDevice) {
        fail("%s was built for compute capability %s, which this GPU (%s, %d.%d) cannot run: "
             "rebuild with make clean && make %s, which targets this machine's GPU", cuda_program_name(), CUDA_ARCHS,
             cuda_device.prop.name, cuda_device.prop.major, cuda_device.prop.minor, cuda_make_target);
    }
    cuda_check(err);
    int clock_khz = 0;
    cuda_check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device));
    cuda_device.clock_ghz = clock_khz / 1e6;
    int major = cuda_device.prop.major, minor = cuda_device.prop.minor;
    cuda_device.lanes_per_sm = (major == 7 || (major == 8 && minor == 0)) ? 64 : 128;
    cuda_device.peak_flops =
        cuda_device.prop.multiProcessorCount * cuda_device.clock_ghz * 1e9 * cuda_device.lanes_per_sm * 2.0;
    int mem_clock_khz = 0, bus_bits = 0;
    cuda_check(cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, device));
    cuda_check(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
    cuda_device.peak_bandwidth = 2.0 * mem_clock_khz * 1e3 * bus_bits / 8.0;
    cuda_num_sms = cuda_device.prop.multiProcessorCount;
}

// Two ranks on one GPU stop the run in one line (NCCL refuses it with an error that does not say
// so). GPUs are compared by PCI bus id, the same in every process. Every rank calls it.
static void cuda_device_check_own(void) {
    if (procs.size == 1) return;
    char bus_id[64];
    cuda_check(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), cuda_device.index));
    int other = parallel_local_same(bus_id);  // the first other rank on this GPU, or -1
    int reporter = parallel_first_rank(other >= 0 && other < procs.rank);
    if (reporter < 0) return;
    if (reporter == procs.rank) {
        fail("ranks %d and %d both use the GPU at PCI bus id %s of their machine: give each process its own GPU "
             "(start at most one process per GPU; where CUDA_VISIBLE_DEVICES is set, give each rank a different one)",
             other, procs.rank, bus_id);
    }
    parallel_await_stop();
}

// Peak bf16 tensor-core throughput, dense, float32 accumulation: SMs x clock x flops per SM per
// clock: 2048 on 8.0, 1024 on 8.6/8.9 data-centre parts, 4096 on 9.0 (for wgmma; mma.sync
// reaches only part of it).
static double peak_flops_bf16(void) {
    int major = cuda_device.prop.major, minor = cuda_device.prop.minor;
    double per_clock = major >= 9 ? 4096 : (major == 8 && minor == 0) ? 2048 : 1024;
    return cuda_device.prop.multiProcessorCount * cuda_device.clock_ghz * 1e9 * per_clock;
}

static void cuda_device_print(int bf16) {
    printf("device: %s, compute capability %d.%d, %d SMs at %.2f GHz, %.1f GiB\n", cuda_device.prop.name,
           cuda_device.prop.major, cuda_device.prop.minor, cuda_device.prop.multiProcessorCount, cuda_device.clock_ghz,
           cuda_device.prop.totalGlobalMem / 1073741824.0);
    if (bf16) {
        printf("precision bf16 (float32 master weights): tensor-core matmuls, flash attention; peak bf16 %.1f "
               "TFLOP/s, the MFU reference\n", peak_flops_bf16() / 1e12);
        return;
    }
    printf("precision fp32: peak float32 (no tensor cores) %.1f TFLOP/s = %d SMs x %.2f GHz x %d lanes x 2, "
           "the MFU reference%s\n",
           cuda_device.peak_flops / 1e12, cuda_device.prop.multiProcessorCount, cuda_device.clock_ghz,
           cuda_device.lanes_per_sm,
#ifdef USE_CUBLAS
           " (USE_CUBLAS build: matmuls by cuBLAS)"
#else
           ""
#endif
    );
}


// Stops with one line when `need` bytes of GPU memory (for batches of B x T) are not free.
static void require_free_memory(size_t need, int B, int T) {
    size_t free_bytes, total_bytes;
    cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (need > free_bytes) {
        fail("the model needs %.1f GiB of GPU memory (parameters, gradients, AdamW moments, activations "
             "for B=%d T=%d) but %.1f GiB are free: use a smaller -b or -t", need / 1073741824.0, B, T,
             free_bytes / 1073741824.0);
    }
}

static double peak_flops_gpu(void) { return cuda_device.peak_flops; }
static void synchronize_gpu(void) { cuda_check(cudaDeviceSynchronize()); }

#endif // GPT2_GPU_CUDA_UTILS_CUH
