// Exercise 8: softmax_forward_gpu (gpt2/gpu/classifier.cuh) against the CPU's softmax_forward
// (gpt2/cpu_layers.h), on the CPU emulator of CUDA (dev/emu/cuda_emu.h), as dev/gpu/gpu_check.cu checks
// every kernel: random logits from a fixed seed, the output on the GPU first poisoned with NaN,
// every element compared with |gpu - cpu| <= atol + rtol * |cpu| (NaN never passes). Shapes with
// one row, rows that are no multiple of a block, V of 1, of a few, of one block and one more, and
// GPT-2's 50,257 of 50,304; logits near 0 and logits in the hundreds (where exp without the
// row's maximum subtracted overflows). Exit status 0 when everything agrees.
//
// On the emulator "device" memory is host memory, so a launcher could compute the softmax on the
// CPU and pass. The check makes that fail as it would on a GPU:
//   - logits and probs live in pages of their own that the host cannot touch while
//     softmax_forward_gpu runs (mprotect PROT_NONE); only a kernel launched from it may read
//     logits and write probs. Any other access stops the run with a message (the SIGSEGV handler).
//   - every launch in classifier.cuh goes through check_launch (cuda_emu.py turns `<<<...>>>` into
//     emu_launch, which a macro renames here): it counts the launches, requires blocks of
//     blockDim.x a multiple of 32 (a whole number of warps, as block_reduce needs), and notes
//     whether any thread passed a __syncthreads or a warp instruction (a shuffle): a kernel with one
//     thread per row and no reduction among threads never does.
//   - cudaMemcpy and cudaMemcpyAsync in classifier.cuh go through check_memcpy, which rejects a
//     copy made inside softmax_forward_gpu; cudaMemset and cudaMemsetAsync (a device operation on
//     a GPU) may write probs.
#include <signal.h>
#include <stddef.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define CHECK_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define CHECK_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#include <sanitizer/common_interface_defs.h>  // __sanitizer_symbolize_pc
#else
#define CHECK_POISON(p, n) ((void)0)
#define CHECK_UNPOISON(p, n) ((void)0)
#endif
#include "../../../gpt2/random.h"              // random_f32
#include "../../../gpt2/cpu_layers.h"          // softmax_forward

// ---------- device buffers the host cannot touch while the launcher runs ----------
// The floats end flush against a guard page (never accessible), so a read or write past the end
// faults; a guard page before them catches an access far before the start, and the bytes between
// that page and the first float are poisoned for AddressSanitizer.
struct CheckBuffer {
    const char* name;
    char* map;           // the mapping: guard page, data pages, guard page
    size_t page, pages;  // page size, data pages
    float* data;
    size_t bytes;
};
static CheckBuffer check_logits = {"logits"}, check_probs = {"probs"};

static void check_buffer_alloc(CheckBuffer* b, size_t n) {
    b->page = (size_t)sysconf(_SC_PAGESIZE);
    b->bytes = n * sizeof(float);
    b->pages = (b->bytes + b->page - 1) / b->page;
    void* m = mmap(NULL, (b->pages + 2) * b->page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) { perror("mmap"); exit(1); }
    b->map = (char*)m;
    char* end = b->map + (b->pages + 1) * b->page;
    b->data = (float*)(end - b->bytes);  // bytes is a multiple of 16 in every shape: float4-aligned
    if (mprotect(b->map + b->page, b->pages * b->page, PROT_READ | PROT_WRITE) != 0) { perror("mprotect"); exit(1); }
    CHECK_POISON(b->map + b->page, (char*)b->data - (b->map + b->page));
}
static void check_buffer_free(CheckBuffer* b) {
    CHECK_UNPOISON(b->map + b->page, (char*)b->data - (b->map + b->page));  // the next mapping may land here
    munmap(b->map, (b->pages + 2) * b->page);
    b->map = NULL;
    b->data = NULL;
}
static void check_buffer_protect(CheckBuffer* b, int prot) {
    if (mprotect(b->map + b->page, b->pages * b->page, prot) != 0) { perror("mprotect"); exit(1); }
}

// Where the run is: the check itself (the buffers are the host's), inside softmax_forward_gpu
// (no access), inside a kernel it launched (logits read-only, probs writable).
enum { CHECK_HOST, CHECK_LAUNCHER, CHECK_KERNEL };
static int check_phase = CHECK_HOST;
static int check_launches, check_synced;

// Stops the run after a message on stdout (_exit: no leak report for the shape left unfinished).
static void check_stop(void) {
    fflush(stdout);
    _exit(1);
}

static void check_enter(int phase) {
    check_phase = phase;
    check_buffer_protect(&check_logits, phase == CHECK_HOST ? PROT_READ | PROT_WRITE : phase == CHECK_KERNEL ? PROT_READ : PROT_NONE);
    check_buffer_protect(&check_probs, phase == CHECK_LAUNCHER ? PROT_NONE : PROT_READ | PROT_WRITE);
}

// A fault on one of the buffers' mappings is the check's doing: say which rule was broken. Any
// other fault goes on to the handler that was there before (AddressSanitizer's, or the default).
static struct sigaction check_previous_segv;
static void check_segv(int sig, siginfo_t* info, void* context) {
    const char* a = (const char*)info->si_addr;
    CheckBuffer* buffers[2] = {&check_logits, &check_probs};
    for (int i = 0; i < 2; i++) {
        CheckBuffer* b = buffers[i];
        if (b->map == NULL || a < b->map || a >= b->map + (b->pages + 2) * b->page) continue;
        const char* d = (const char*)b->data;
        ptrdiff_t index = (a - d) / (ptrdiff_t)sizeof(float);
        if (a < d || a >= d + b->bytes)
            printf("an access %s %s (float index %td)", a < d ? "before the start of" : "past the end of", b->name, index);
        else if (check_phase == CHECK_LAUNCHER)
            printf("softmax_forward_gpu touched %s[%td] from the host, outside any kernel: on a GPU that is device\n"
                   "  memory the host cannot read or write; the softmax must be computed by a kernel", b->name, index);
        else
            printf("a write into logits[%td], the kernel's input (const float*)", index);
        if (check_phase == CHECK_KERNEL)
            printf(", in kernel %s, block %u thread %u", emu->kernel, emu->block_idx.x, emu->cur->tid.x);
#if defined(__SANITIZE_ADDRESS__) && defined(__x86_64__)
        char line[256];  // the faulting instruction's source line
        __sanitizer_symbolize_pc((void*)((ucontext_t*)context)->uc_mcontext.gregs[REG_RIP], "%s:%l", line, sizeof(line));
        printf("\n  at %s", line);
#endif
        printf("\n");
        check_stop();
    }
    sigaction(SIGSEGV, &check_previous_segv, NULL);  // the fault happens again, for that handler
}
static void check_install_segv(void) {
    static char altstack[64 * 1024];  // a fault inside a kernel happens on a fiber's small stack
    stack_t ss = {};
    ss.ss_sp = altstack;
    ss.ss_size = sizeof(altstack);
    sigaltstack(&ss, NULL);
    struct sigaction sa = {};
    sa.sa_sigaction = check_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &check_previous_segv);
}

// ---------- the launches and copies of classifier.cuh, watched ----------
static void check_launch(const char* name, dim3 grid, dim3 block, size_t smem, std::function<void()> body) {
    if (check_phase != CHECK_LAUNCHER) { emu_launch(name, grid, block, smem, body); return; }
    check_launches++;
    if (block.x < 32 || block.x % 32 != 0) {
        printf("kernel %s launched with blockDim.x = %u: make it a multiple of 32, so that each row is\n"
               "  reduced by whole warps (block_reduce, block_max and block_sum need that)\n", name, block.x);
        check_stop();
    }
    // after each thread's body: did its block pass a __syncthreads, or its warp a warp instruction?
    std::function<void()> watched = [&body] {
        body();
        if (emu->block_gen > 0 || emu->warp_gen[emu->cur->linear / 32] > 0) check_synced = 1;
    };
    check_enter(CHECK_KERNEL);
    emu_launch(name, grid, block, smem, watched);
    check_enter(CHECK_LAUNCHER);
}
static void check_launch(const char* name, dim3 grid, dim3 block, std::function<void()> body) {
    check_launch(name, grid, block, 0, body);
}
static cudaError_t check_memcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s = 0) {
    if (check_phase == CHECK_LAUNCHER) {
        printf("softmax_forward_gpu calls cudaMemcpy: the launcher only launches; the logits stay on the\n"
               "  device, and a kernel writes the probabilities there\n");
        check_stop();
    }
    return cudaMemcpy(dst, src, n, kind);
}
static cudaError_t check_memset(void* dst, int v, size_t n, cudaStream_t s = 0) {
    if (check_phase != CHECK_LAUNCHER) return cudaMemset(dst, v, n);
    check_enter(CHECK_KERNEL);  // a device operation: it may write probs
    cudaError_t e = cudaMemset(dst, v, n);
    check_enter(CHECK_LAUNCHER);
    return e;
}
#define emu_launch check_launch
#define cudaMemcpy check_memcpy
#define cudaMemcpyAsync check_memcpy
#define cudaMemset check_memset
#define cudaMemsetAsync check_memset
#include "../../../gpt2/gpu/classifier.cuh"    // softmax_forward_gpu; cuda_check, malloc_check
#undef emu_launch
#undef cudaMemcpy
#undef cudaMemcpyAsync
#undef cudaMemset
#undef cudaMemsetAsync

// ---------- the check ----------
static uint64_t check_rng = 42;

static int check_shape(int B, int T, int V, int Vp, float lo, float hi) {
    size_t n = (size_t)B * T * Vp;
    check_buffer_alloc(&check_logits, n);
    check_buffer_alloc(&check_probs, n);
    float* logits = check_logits.data;
    for (size_t i = 0; i < n; i++) logits[i] = lo + (hi - lo) * random_f32(&check_rng);
    float* expected = (float*)malloc_check(n * sizeof(float));
    softmax_forward(expected, logits, B, T, V, Vp);
    float* got = check_probs.data;
    for (size_t i = 0; i < n; i++) got[i] = NAN;

    check_launches = check_synced = 0;
    check_enter(CHECK_LAUNCHER);
    softmax_forward_gpu(got, logits, B, T, V, Vp);
    cuda_check(cudaDeviceSynchronize());
    check_enter(CHECK_HOST);
    if (check_launches == 0) {
        printf("softmax_forward_gpu launched no kernel: the softmax must be computed by a kernel\n");
        check_stop();
    }
    if (!check_synced) {
        printf("softmax_forward_gpu's kernels never passed a __syncthreads or a warp shuffle: each row must be\n"
               "  reduced by the threads of a block (block_max, block_sum) or a warp, not by one thread alone\n");
        check_stop();
    }

    int bad = 0;
    for (size_t i = 0; i < n && bad < 3; i++) {
        float tol = 1e-7f + 1e-4f * fabsf(expected[i]);
        if (!(fabsf(got[i] - expected[i]) <= tol)) {
            size_t row = i / Vp, col = i % Vp;
            printf("B=%d T=%d V=%d Vp=%d, logits in [%g, %g): row %zu column %zu%s: gpu %g, cpu %g\n", B, T,
                   V, Vp, lo, hi, row, col, col >= (size_t)V ? " (padding: must be 0)" : "", got[i], expected[i]);
            bad++;
        }
    }
    if (bad == 0) printf("ok   B=%d T=%d V=%d Vp=%d, logits in [%g, %g)\n", B, T, V, Vp, lo, hi);
    check_buffer_free(&check_logits);
    check_buffer_free(&check_probs);
    free(expected);
    return bad > 0;
}

int main(void) {
    check_install_segv();
    int fails = 0;
    fails += check_shape(1, 1, 1, 128, -1.0f, 1.0f);
    fails += check_shape(2, 3, 37, 128, -5.0f, 5.0f);
    fails += check_shape(1, 5, 1025, 1152, -3.0f, 3.0f);
    fails += check_shape(3, 1, 300, 300, 100.0f, 400.0f);
    fails += check_shape(1, 3, 50257, 50304, -10.0f, 10.0f);
    if (fails) printf("%d shape(s) failed\n", fails);
    return fails ? 1 : 0;
}
