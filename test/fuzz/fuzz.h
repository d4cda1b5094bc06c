// test/fuzz/fuzz.h: what every fuzz target shares (doc/correctness.md, "Fuzzing").
//
// A target is a libFuzzer program (clang -fsanitize=fuzzer,address,undefined) that hands each
// input to one of the project's readers, the same function the programs call, and then checks
// what came back. Three things make the programs' readers usable in a loop of millions of inputs
// without changing them:
//
//   - Errors become returns. A reader that meets bad input calls fail() (gpt2/io.h), which
//     prints its one line and exits. fail() first calls the hook fail_stop; here that hook
//     jumps back into the harness (longjmp), so the input counts as "refused" and the next one
//     runs. Run under `-close_fd_mask=2` the line goes nowhere; replaying one file shows it.
//   - Whatever the reader held when it failed is released. Every malloc, calloc, realloc, free,
//     fopen and fclose in the code below this header goes through a wrapper that records what is
//     live while an input runs; a refused input's leftovers are freed and closed by the harness.
//     An input that is accepted must leave nothing behind once the harness has freed what the
//     reader returned: anything still live then is left for LeakSanitizer to report.
//   - Files are the input. fuzz_file() names a byte buffer; fopen() of that name opens the buffer
//     (fmemopen), so the readers open, measure, seek and read the input as they would a file.
//
// On top of the sanitizers, every allocation made for an input is held against the input's size:
// a reader that allocates more than FUZZ_ALLOC_PER_BYTE bytes per input byte (plus a fixed
// FUZZ_ALLOC_BASE) believed a header it had not checked against the file, and the target stops.

#ifndef FUZZ_H
#define FUZZ_H

#include <errno.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_ALLOC_PER_BYTE 64
#define FUZZ_ALLOC_BASE (4u << 20)

// Where FUZZ_CHECK reports: standard error as it was when the program started, kept before
// libFuzzer's -close_fd_mask=2 closes it (its own and the sanitizers' reports survive the same way).
static FILE* fuzz_report;
__attribute__((constructor)) static void fuzz_keep_stderr(void) {
    int fd = dup(2);
    fuzz_report = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (fuzz_report == NULL) fuzz_report = stderr;
}

// Reports a broken promise of the code under test and stops (libFuzzer saves the input).
#define FUZZ_CHECK(cond, ...)                                                        \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(fuzz_report, "fuzz check failed (%s:%d): ", __FILE__, __LINE__); \
            fprintf(fuzz_report, __VA_ARGS__);                                       \
            fprintf(fuzz_report, "\n");                                              \
            fflush(fuzz_report);                                                     \
            abort();                                                                 \
        }                                                                            \
    } while (0)

// ---------- named inputs ----------

#define FUZZ_MAX_FILES 4
static struct {
    const char* name;
    const uint8_t* data;
    size_t size;
} fuzz_files[FUZZ_MAX_FILES];
static int fuzz_num_files;
static size_t fuzz_input_bytes;  // of the current input, for the allocation bound

// fopen(name) opens these bytes until the input ends.
static void fuzz_file(const char* name, const uint8_t* data, size_t size) {
    static const uint8_t empty[1] = {0};
    FUZZ_CHECK(fuzz_num_files < FUZZ_MAX_FILES, "too many named inputs");
    fuzz_files[fuzz_num_files].name = name;
    fuzz_files[fuzz_num_files].data = size ? data : empty;
    fuzz_files[fuzz_num_files].size = size;
    fuzz_num_files++;
}

// ---------- what an input holds ----------

typedef struct {
    void* p;
    int is_file;
} FuzzLive;
static FuzzLive* fuzz_live;
static size_t fuzz_live_n, fuzz_live_cap;
static int fuzz_running;  // between fuzz_begin and fuzz_end

static void fuzz_track(void* p, int is_file) {
    if (fuzz_live_n == fuzz_live_cap) {
        fuzz_live_cap = fuzz_live_cap ? 2 * fuzz_live_cap : 256;
        fuzz_live = (FuzzLive*)(realloc)(fuzz_live, fuzz_live_cap * sizeof(FuzzLive));
        if (fuzz_live == NULL) abort();
    }
    fuzz_live[fuzz_live_n].p = p;
    fuzz_live[fuzz_live_n].is_file = is_file;
    fuzz_live_n++;
}

// Forgets p; returns whether it was tracked.
static int fuzz_untrack(void* p) {
    for (size_t i = fuzz_live_n; i-- > 0;) {
        if (fuzz_live[i].p == p) {
            fuzz_live[i] = fuzz_live[--fuzz_live_n];
            return 1;
        }
    }
    return 0;
}

static void fuzz_check_size(size_t n) {
    if (!fuzz_running) return;
    size_t limit = FUZZ_ALLOC_BASE + FUZZ_ALLOC_PER_BYTE * fuzz_input_bytes;
    FUZZ_CHECK(n <= limit, "allocation of %zu bytes for an input of %zu bytes: the reader trusted a "
               "size the file cannot hold", n, fuzz_input_bytes);
}

static void* fuzz_malloc(size_t n) {
    fuzz_check_size(n);
    void* p = (malloc)(n);
    if (p != NULL && fuzz_running) fuzz_track(p, 0);
    return p;
}

static void* fuzz_calloc(size_t n, size_t size) {
    if (size != 0 && n > SIZE_MAX / size) return NULL;
    fuzz_check_size(n * size);
    void* p = (calloc)(n, size);
    if (p != NULL && fuzz_running) fuzz_track(p, 0);
    return p;
}

static void* fuzz_realloc(void* old, size_t n) {
    fuzz_check_size(n);
    void* p = (realloc)(old, n);
    if (p == NULL) return NULL;
    int was = old != NULL && fuzz_untrack(old);
    if (was || fuzz_running) fuzz_track(p, 0);
    return p;
}

static void fuzz_free(void* p) {
    if (p != NULL) fuzz_untrack(p);
    (free)(p);
}

static FILE* fuzz_fopen(const char* path, const char* mode) {
    FILE* f = NULL;
    for (int i = 0; i < fuzz_num_files; i++) {
        if (strcmp(path, fuzz_files[i].name) == 0) {
            if (mode[0] != 'r') {
                errno = EACCES;  // the input is read-only
                return NULL;
            }
            f = fmemopen((void*)fuzz_files[i].data, fuzz_files[i].size, "rb");
            break;
        }
    }
    if (f == NULL) f = (fopen)(path, mode);
    if (f != NULL && fuzz_running) fuzz_track(f, 1);
    return f;
}

static int fuzz_fclose(FILE* f) {
    fuzz_untrack(f);
    return (fclose)(f);
}

#define malloc(n) fuzz_malloc(n)
#define calloc(n, size) fuzz_calloc(n, size)
#define realloc(p, n) fuzz_realloc(p, n)
#define free(p) fuzz_free(p)
#define fopen(path, mode) fuzz_fopen(path, mode)
#define fclose(f) fuzz_fclose(f)

#include "../../gpt2/io.h"

// ---------- one input ----------

static jmp_buf fuzz_jump;
static int fuzz_refused;  // the reader called fail() for this input

static void fuzz_fail_hook(void) {
    fuzz_refused = 1;
    longjmp(fuzz_jump, 1);
}

// Starts an input of `bytes` bytes in all.
static void fuzz_begin(size_t bytes) {
    fuzz_num_files = 0;
    fuzz_live_n = 0;
    fuzz_input_bytes = bytes;
    fuzz_refused = 0;
    fuzz_running = 1;
    fail_stop = fuzz_fail_hook;
}

// Ends the input: a refused input's leftovers are released; an accepted one's are leaks, left
// allocated for LeakSanitizer to find.
static void fuzz_end(void) {
    if (fuzz_refused) {
        for (size_t i = 0; i < fuzz_live_n; i++) {
            if (fuzz_live[i].is_file) (fclose)((FILE*)fuzz_live[i].p);
            else (free)(fuzz_live[i].p);
        }
    }
    fuzz_live_n = 0;
    fuzz_running = 0;
    fuzz_num_files = 0;
    fail_stop = NULL;
}

// The usual shape of a target:
//   fuzz_begin(size); fuzz_file(FUZZ_INPUT, data, size);
//   if (setjmp(fuzz_jump) == 0) { ...read, check, free... }
//   fuzz_end();
#define FUZZ_INPUT "fuzz-input"

#endif // FUZZ_H
