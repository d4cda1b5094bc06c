// gpt2/io.h: errors, checked I/O and allocation, and the file formats (doc/formats.md).
//
// Every program stops on bad input or a failed call the same way: one line "error: ..." on stderr,
// exit status 1 (fail). The checked wrappers call it, so their callers never see a failure. Files
// are written to PATH.tmp and renamed when complete (AtomicFile): a cut write destroys nothing.
// C99 that also compiles as C++ (nvcc): malloc results cast, no designated initialisers.

#ifndef GPT2_IO_H
#define GPT2_IO_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>

// ---------- file formats (doc/formats.md) ----------

#define HEADER_INTS 256              // every file of ours starts with 256 int32 (1,024 bytes)
#define CHECKPOINT_MAGIC 20240326    // model weights, llm.c's format
#define CHECKPOINT_VERSION_F32 3
#define CHECKPOINT_VERSION_BF16 5
#define TOKENS_MAGIC 20240520        // token ids, uint16
#define TOKENS_VERSION 1
#define TOKENS_MAGIC_LLAMA3 20240801 // llm.c's token files of llama-3 ids (version 7, uint32), not read
#define TOKENIZER_MAGIC 20240328     // the tokenizer's vocabulary
#define TOKENIZER_VERSION 2
#define STATE_MAGIC 20240527         // training state beside a checkpoint (AdamW moments, position)
#define STATE_VERSION 1
#define GPT2_EOT 50256               // <|endoftext|>
#define GPT2_VOCAB 50257

// ---------- errors ----------

#if defined(__GNUC__)
#define GPT2_NORETURN __attribute__((noreturn))
#define GPT2_PRINTF_NORETURN __attribute__((format(printf, 1, 2), noreturn))
#else
#define GPT2_NORETURN
#define GPT2_PRINTF_NORETURN
#endif

// Set by a run of several processes (gpt2/parallel.h): fail_who names the process ("rank 1 of
// 2: "), fail_stop ends the others, so none waits forever for a partner that has gone.
static char fail_who[64] = "";
static void (*fail_stop)(void) = NULL;

// Prints "error: MESSAGE" on stderr and exits with status 1; one write, so that under mpirun no
// other output falls inside the line.
static void fail(const char* fmt, ...) GPT2_PRINTF_NORETURN;
static void fail(const char* fmt, ...) {
    char line[8192];
    int n = snprintf(line, sizeof(line), "error: %s", fail_who);
    va_list args;
    va_start(args, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, args);  // leaves room for the newline
    va_end(args);
    size_t len = strlen(line);
    line[len] = '\n';
    fflush(stdout);
    fwrite(line, 1, len + 1, stderr);
    fflush(stderr);
    if (fail_stop != NULL) fail_stop();
    exit(1);
}

// Line number (from 1) of byte pos of s, for error messages about text files.
static inline int line_of(const unsigned char* s, size_t pos) {
    int line = 1;
    for (size_t i = 0; i < pos; i++) line += s[i] == '\n';
    return line;
}

// ---------- checked I/O and allocation ----------
// On failure these name the call's place in the source (file:line of the caller) after the
// message, so that a report points at the code that failed.

static inline FILE* fopen_check_(const char* path, const char* mode, const char* file, int line) {
    FILE* f = fopen(path, mode);
    if (f == NULL) {
        fail("cannot open %s for %s: %s (%s:%d)", path, mode[0] == 'r' ? "reading" : "writing",
             strerror(errno), file, line);
    }
    return f;
}
#define fopen_check(path, mode) fopen_check_(path, mode, __FILE__, __LINE__)

// Reads exactly n items, or stops with an error that says the file is short (truncated).
static inline void fread_check_(void* ptr, size_t size, size_t n, FILE* f, const char* what,
                                const char* file, int line) {
    size_t got = fread(ptr, size, n, f);
    if (got != n) {
        if (ferror(f)) fail("read error in %s: %s (%s:%d)", what, strerror(errno), file, line);
        fail("%s is truncated: expected %zu items of %zu bytes, got %zu (%s:%d)", what, n, size, got,
             file, line);
    }
}
#define fread_check(ptr, size, n, f, what) fread_check_(ptr, size, n, f, what, __FILE__, __LINE__)

static inline void fwrite_check_(const void* ptr, size_t size, size_t n, FILE* f, const char* what,
                                 const char* file, int line) {
    if (fwrite(ptr, size, n, f) != n) fail("write error on %s: %s (%s:%d)", what, strerror(errno), file, line);
}
#define fwrite_check(ptr, size, n, f, what) fwrite_check_(ptr, size, n, f, what, __FILE__, __LINE__)

static inline void fclose_check_(FILE* f, const char* what, const char* file, int line) {
    if (fclose(f) != 0) fail("cannot close %s: %s (%s:%d)", what, strerror(errno), file, line);
}
#define fclose_check(f, what) fclose_check_(f, what, __FILE__, __LINE__)

static inline void* malloc_check_(size_t size, const char* file, int line) {
    void* p = malloc(size == 0 ? 1 : size);
    if (p == NULL) fail("out of memory allocating %zu bytes (%s:%d)", size, file, line);
    return p;
}
#define malloc_check(size) malloc_check_(size, __FILE__, __LINE__)

static inline void* calloc_check_(size_t n, size_t size, const char* file, int line) {
    void* p = calloc(n == 0 ? 1 : n, size == 0 ? 1 : size);
    if (p == NULL) fail("out of memory allocating %zu x %zu bytes (%s:%d)", n, size, file, line);
    return p;
}
#define calloc_check(n, size) calloc_check_(n, size, __FILE__, __LINE__)

static inline void* realloc_check_(void* old, size_t size, const char* file, int line) {
    void* p = realloc(old, size == 0 ? 1 : size);
    if (p == NULL) fail("out of memory reallocating %zu bytes (%s:%d)", size, file, line);
    return p;
}
#define realloc_check(old, size) realloc_check_(old, size, __FILE__, __LINE__)

// size bytes at an address that is a multiple of alignment (a power of two): what vector loads of
// packed weights need (gpt2/cpu_math.h). Freed with free.
static inline void* aligned_alloc_check_(size_t alignment, size_t size, const char* file, int line) {
    size_t whole = (size + alignment - 1) / alignment * alignment;   // aligned_alloc's rule
    void* p = aligned_alloc(alignment, whole == 0 ? alignment : whole);
    if (p == NULL) fail("out of memory allocating %zu bytes (%s:%d)", size, file, line);
    return p;
}
#define aligned_alloc_check(alignment, size) aligned_alloc_check_(alignment, size, __FILE__, __LINE__)

// Asks Linux for transparent huge pages over the whole 2 MB pages in [p, p + bytes) (many systems
// give them only when asked: "madvise"): training streams its buffers every step, and in 4 KB
// pages a TLB miss comes every 1024 floats (doc/cpu_speed.md). Call it before the memory is first
// touched, when its pages get their size. Only a hint.
static inline void hint_huge_pages(void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t lo = ((uintptr_t)p + huge - 1) & ~(huge - 1), hi = ((uintptr_t)p + bytes) & ~(huge - 1);
    if (hi > lo) madvise((void*)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)p, (void)bytes;
#endif
}

// calloc_check for a large buffer streamed every step, hinted as above.
static inline void* calloc_huge_pages_(size_t n, size_t size, const char* file, int line) {
    void* p = calloc_check_(n, size, file, line);
    hint_huge_pages(p, n * size);
    return p;
}
#define calloc_huge_pages(n, size) calloc_huge_pages_(n, size, __FILE__, __LINE__)

// Size of an open file in bytes (the file position is kept).
static inline long long file_size_check_(FILE* f, const char* what, const char* file, int line) {
    long pos = ftell(f);
    if (pos < 0 || fseek(f, 0, SEEK_END) != 0) fail("cannot seek in %s (%s:%d)", what, file, line);
    long long size = ftell(f);
    if (size < 0 || fseek(f, pos, SEEK_SET) != 0) fail("cannot seek in %s (%s:%d)", what, file, line);
    return size;
}
#define file_size_check(f, what) file_size_check_(f, what, __FILE__, __LINE__)

// Reads the 1,024-byte header that every file of ours starts with (an error if the file is
// shorter) and returns the file's size in bytes, which the callers check against the header.
static inline long long read_header_check(FILE* f, const char* path, int32_t header[HEADER_INTS]) {
    long long size = file_size_check(f, path);
    if (size < (long long)(HEADER_INTS * sizeof(int32_t))) {
        fail("%s is truncated: %lld bytes, shorter than the 1,024-byte header", path, size);
    }
    fread_check(header, sizeof(int32_t), HEADER_INTS, f, path);
    return size;
}

// A header to write: magic and version, every other entry 0.
static inline void header_init(int32_t header[HEADER_INTS], int32_t magic, int32_t version) {
    memset(header, 0, HEADER_INTS * sizeof(int32_t));
    header[0] = magic;
    header[1] = version;
}

static inline int file_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

// A file being written: the bytes go to tmp_path, renamed to path by atomic_close_check.
typedef struct {
    FILE* f;
    char* path;
    char* tmp_path;
} AtomicFile;

static inline AtomicFile atomic_open_check_(const char* path, const char* file, int line) {
    AtomicFile a;
    size_t n = strlen(path);
    a.path = (char*)malloc_check_(n + 1, file, line);
    memcpy(a.path, path, n + 1);
    a.tmp_path = (char*)malloc_check_(n + 5, file, line);
    memcpy(a.tmp_path, path, n);
    memcpy(a.tmp_path + n, ".tmp", 5);
    a.f = fopen_check_(a.tmp_path, "wb", file, line);
    return a;
}
#define atomic_open_check(path) atomic_open_check_(path, __FILE__, __LINE__)

static inline void atomic_close_check_(AtomicFile* a, const char* file, int line) {
    if (fflush(a->f) != 0 || ferror(a->f)) {
        int err = errno;
        fclose(a->f);
        remove(a->tmp_path);
        fail("write error on %s: %s (%s:%d)", a->tmp_path, strerror(err), file, line);
    }
    if (fclose(a->f) != 0) {
        int err = errno;
        remove(a->tmp_path);
        fail("cannot close %s: %s (%s:%d)", a->tmp_path, strerror(err), file, line);
    }
    if (rename(a->tmp_path, a->path) != 0) {
        int err = errno;
        remove(a->tmp_path);
        fail("cannot rename %s to %s: %s (%s:%d)", a->tmp_path, a->path, strerror(err), file, line);
    }
    free(a->path);
    free(a->tmp_path);
}
#define atomic_close_check(a) atomic_close_check_(a, __FILE__, __LINE__)

// ---------- number formats in files ----------

// bfloat16 is the top half of a float32: the same sign and exponent, 7 of the 23 mantissa bits.
static inline float bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

// IEEE half precision: 5 exponent bits (bias 15) and 10 mantissa bits.
static inline float f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
        float f = (float)mantissa / 16777216.0f;
        return sign ? -f : f;
    }
    // float32's exponent bias is 127: add 112; 31 (inf, NaN) becomes 255
    uint32_t bits = sign | (exponent == 31 ? 0xffu << 23 : (exponent + 112) << 23) | mantissa << 13;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

// ---------- the clock ----------

static inline double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// A duration for a person: "42s", "3m05s", "2h07m" (progress lines and their ETA).
static inline const char* format_duration(char* buf, size_t n, double seconds) {
    long s = seconds > 0 ? (long)(seconds + 0.5) : 0;
    if (s < 60) snprintf(buf, n, "%lds", s);
    else if (s < 3600) snprintf(buf, n, "%ldm%02lds", s / 60, s % 60);
    else snprintf(buf, n, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
    return buf;
}

#endif // GPT2_IO_H
