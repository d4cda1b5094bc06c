// tokenizer.c: GPT-2 byte-level BPE, encode and decode, identical to tiktoken's GPT-2 encoding.
//
// The first stage of the project, and the one every other stage includes: its top section holds
// the small utilities that all stages share (checked I/O and allocation, the file-format
// constants), so that train_cpu.c, infer.c and train_gpu.cu include this file instead of pasting
// them. Define TOKENIZER_NO_MAIN before including it to leave out its main().
//
// The code is C99 that also compiles as C++ (nvcc includes it through train_cpu.c), so every
// malloc result is cast and no C-only syntax is used.

#ifndef TOKENIZER_C
#define TOKENIZER_C

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

// ---------- file formats (../shared/FORMATS.md) ----------

#define HEADER_INTS 256              // every file starts with 256 int32 (1,024 bytes)
#define CHECKPOINT_MAGIC 20240326
#define CHECKPOINT_VERSION_F32 3
#define CHECKPOINT_VERSION_BF16 5
#define TOKENS_MAGIC 20240520
#define TOKENS_VERSION 1
#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_VERSION 2
#define GPT2_EOT 50256               // <|endoftext|>
#define GPT2_VOCAB 50257

// ---------- checked I/O and allocation ----------
// Every call that can fail goes through one of these: on failure they print one line naming what
// failed and where (file:line of the caller), then exit(1). Callers never see a failed result.

#define fail_at(file, line, ...)                                              \
    do {                                                                      \
        fprintf(stderr, "error: ");                                           \
        fprintf(stderr, __VA_ARGS__);                                         \
        fprintf(stderr, " (%s:%d)\n", file, line);                            \
        exit(1);                                                              \
    } while (0)

static FILE* fopen_check_(const char* path, const char* mode, const char* file, int line) {
    FILE* f = fopen(path, mode);
    if (f == NULL) {
        fail_at(file, line, "cannot open %s for %s: %s", path,
                mode[0] == 'r' ? "reading" : "writing", strerror(errno));
    }
    return f;
}
#define fopen_check(path, mode) fopen_check_(path, mode, __FILE__, __LINE__)

// Reads exactly n items or stops with an error that says the file is short (truncated).
static void fread_check_(void* ptr, size_t size, size_t n, FILE* f, const char* what,
                         const char* file, int line) {
    size_t got = fread(ptr, size, n, f);
    if (got != n) {
        if (ferror(f)) fail_at(file, line, "read error in %s: %s", what, strerror(errno));
        fail_at(file, line, "%s is truncated: expected %zu items of %zu bytes, got %zu",
                what, n, size, got);
    }
}
#define fread_check(ptr, size, n, f, what) fread_check_(ptr, size, n, f, what, __FILE__, __LINE__)

static inline void fwrite_check_(const void* ptr, size_t size, size_t n, FILE* f, const char* what,
                          const char* file, int line) {
    if (fwrite(ptr, size, n, f) != n) {
        fail_at(file, line, "write error on %s: %s", what, strerror(errno));
    }
}
#define fwrite_check(ptr, size, n, f, what) fwrite_check_(ptr, size, n, f, what, __FILE__, __LINE__)

static inline void fclose_check_(FILE* f, const char* what, const char* file, int line) {
    if (fclose(f) != 0) fail_at(file, line, "cannot close %s: %s", what, strerror(errno));
}
#define fclose_check(f, what) fclose_check_(f, what, __FILE__, __LINE__)

static void* malloc_check_(size_t size, const char* file, int line) {
    void* p = malloc(size == 0 ? 1 : size);
    if (p == NULL) fail_at(file, line, "out of memory allocating %zu bytes", size);
    return p;
}
#define malloc_check(size) malloc_check_(size, __FILE__, __LINE__)

static inline void* calloc_check_(size_t n, size_t size, const char* file, int line) {
    void* p = calloc(n == 0 ? 1 : n, size == 0 ? 1 : size);
    if (p == NULL) fail_at(file, line, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}
#define calloc_check(n, size) calloc_check_(n, size, __FILE__, __LINE__)

static inline void* realloc_check_(void* old, size_t size, const char* file, int line) {
    void* p = realloc(old, size == 0 ? 1 : size);
    if (p == NULL) fail_at(file, line, "out of memory reallocating %zu bytes", size);
    return p;
}
#define realloc_check(old, size) realloc_check_(old, size, __FILE__, __LINE__)

// Size of an open file in bytes (the file position is restored).
static inline long long file_size_check_(FILE* f, const char* what, const char* file, int line) {
    long pos = ftell(f);
    if (pos < 0 || fseek(f, 0, SEEK_END) != 0) fail_at(file, line, "cannot seek in %s", what);
    long long size = ftell(f);
    if (size < 0 || fseek(f, pos, SEEK_SET) != 0) fail_at(file, line, "cannot seek in %s", what);
    return size;
}
#define file_size_check(f, what) file_size_check_(f, what, __FILE__, __LINE__)

// Writes go to PATH.tmp and are renamed over PATH only once complete, so an interrupted write
// never leaves a half-written file where a good one was.
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
        fclose(a->f);
        remove(a->tmp_path);
        fail_at(file, line, "write error on %s: %s", a->tmp_path, strerror(errno));
    }
    if (fclose(a->f) != 0) {
        remove(a->tmp_path);
        fail_at(file, line, "cannot close %s: %s", a->tmp_path, strerror(errno));
    }
    if (rename(a->tmp_path, a->path) != 0) {
        remove(a->tmp_path);
        fail_at(file, line, "cannot rename %s to %s: %s", a->tmp_path, a->path, strerror(errno));
    }
    free(a->path);
    free(a->tmp_path);
}
#define atomic_close_check(a) atomic_close_check_(a, __FILE__, __LINE__)

// ---------- tokenizer ----------

#endif // TOKENIZER_C
