// gpt2/safetensors.h: a reader for Hugging Face's safetensors files (doc/formats.md): a u64
// header length N, N bytes of JSON, then the raw little-endian tensors. The JSON (about 15 KB for
// GPT-2, read with gpt2/json.h) is one flat object: "__metadata__" (skipped) and, per tensor,
// "name": {"dtype": "F32", "shape": [768, 2304], "data_offsets": [begin, end]}, the offsets
// counted from the end of the header. Every tensor's byte range is checked against its dtype, its
// shape and the file's size before anything is read. The writer (at the end) lays out the same
// format, tensor by tensor. What the tensors mean is the caller's business (gpt2/checkpoint.h
// maps GPT-2's names onto the model and back).

#ifndef GPT2_SAFETENSORS_H
#define GPT2_SAFETENSORS_H

#include "io.h"
#include "json.h"

#define SAFETENSORS_MAX_HEADER (100 << 20)  // the format's own limit on the JSON header
#define SAFETENSORS_MAX_DIMS 8
#define SAFETENSORS_MAX_NAME 256

typedef struct {
    char name[SAFETENSORS_MAX_NAME];
    char dtype[8];
    int ndim;
    long long shape[SAFETENSORS_MAX_DIMS];
    long long begin, end;  // byte range within the data section
    int used;              // loaded into the model (or a buffer we skip)
} SafetensorsEntry;

// The safetensors header's integers (shapes, byte offsets) are below 2^50, a petabyte: a
// bound far above any file, which keeps their products and sums far from overflow.
#define SAFETENSORS_MAX_INT (1LL << 50)

// A tensor's name, a dtype or a key into out (cap bytes with the NUL). The format's names are
// ASCII; a NUL (\u0000) would end the C string early.
static void st_json_name(JsonReader* r, char* out, size_t cap) {
    json_skip_space(r);
    size_t start = r->pos, len = json_string(r, out, cap);
    for (size_t i = 0; i < len; i++) {
        if (out[i] == '\0' || (unsigned char)out[i] >= 0x80) {
            r->pos = start;
            json_fail(r, "a name with a NUL or non-ASCII character");
        }
    }
}

// [int, int, ...] into out (at most max of them); returns how many. what names them in errors.
static int st_json_int_array(JsonReader* r, long long* out, int max, const char* what) {
    json_expect(r, '[');
    int n = 0;
    while (json_next(r, ']', (size_t)n)) {
        if (n == max) json_fail(r, "array too long");
        out[n++] = json_int(r, SAFETENSORS_MAX_INT, what);
    }
    return n;
}

// One tensor's {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}.
static void st_json_tensor(JsonReader* r, SafetensorsEntry* e) {
    int have_dtype = 0, have_shape = 0, have_offsets = 0;
    char key[32];
    json_expect(r, '{');
    for (size_t i = 0; json_next(r, '}', i); i++) {
        st_json_name(r, key, sizeof(key));
        json_expect(r, ':');
        if (strcmp(key, "dtype") == 0) {
            st_json_name(r, e->dtype, sizeof(e->dtype));
            have_dtype = 1;
        } else if (strcmp(key, "shape") == 0) {
            e->ndim = st_json_int_array(r, e->shape, SAFETENSORS_MAX_DIMS, "dimension");
            have_shape = 1;
        } else if (strcmp(key, "data_offsets") == 0) {
            long long off[2];
            if (st_json_int_array(r, off, 2, "offset") != 2) json_fail(r, "data_offsets needs 2 integers");
            e->begin = off[0];
            e->end = off[1];
            have_offsets = 1;
        } else {
            json_skip_value(r);
        }
    }
    if (!have_dtype || !have_shape || !have_offsets) {
        fail("%s: tensor %s lacks dtype, shape or data_offsets", r->path, e->name);
    }
}

static size_t st_dtype_size(const char* dtype) {
    if (strcmp(dtype, "F64") == 0 || strcmp(dtype, "I64") == 0 || strcmp(dtype, "U64") == 0) return 8;
    if (strcmp(dtype, "F32") == 0 || strcmp(dtype, "I32") == 0 || strcmp(dtype, "U32") == 0) return 4;
    if (strcmp(dtype, "F16") == 0 || strcmp(dtype, "BF16") == 0 || strcmp(dtype, "I16") == 0 ||
        strcmp(dtype, "U16") == 0) return 2;
    if (strcmp(dtype, "I8") == 0 || strcmp(dtype, "U8") == 0 || strcmp(dtype, "BOOL") == 0) return 1;
    return 0;
}

// An open safetensors file: its tensors, and where their data starts.
typedef struct {
    const char* path;
    FILE* f;
    long long data_start;  // 8 + header length
    SafetensorsEntry* entries;
    int num_entries;
} Safetensors;

static inline SafetensorsEntry* safetensors_find(const Safetensors* st, const char* name) {
    for (int i = 0; i < st->num_entries; i++) {
        if (strcmp(st->entries[i].name, name) == 0) return &st->entries[i];
    }
    return NULL;
}

// The JSON header's tensors into st->entries.
static void safetensors_parse_header(Safetensors* st, JsonReader* r) {
    json_expect(r, '{');
    int cap = 0;
    for (size_t i = 0; json_next(r, '}', i); i++) {
        char name[SAFETENSORS_MAX_NAME];
        st_json_name(r, name, sizeof(name));
        json_expect(r, ':');
        if (strcmp(name, "__metadata__") == 0) {
            json_skip_value(r);
            continue;
        }
        if (safetensors_find(st, name) != NULL) fail("%s: tensor %s appears twice", st->path, name);
        if (st->num_entries == cap) {
            cap = cap ? 2 * cap : 256;
            st->entries = (SafetensorsEntry*)realloc_check(st->entries, (size_t)cap * sizeof(SafetensorsEntry));
        }
        SafetensorsEntry* e = &st->entries[st->num_entries++];
        memset(e, 0, sizeof(*e));
        memcpy(e->name, name, sizeof(name));
        st_json_tensor(r, e);
    }
    json_end(r);
}

static int st_compare_ranges(const void* a, const void* b) {  // (begin, end, index) by begin
    const long long* x = (const long long*)a;
    const long long* y = (const long long*)b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

// Every tensor's bytes lie inside the data section and match its dtype and shape, and no two
// tensors share bytes (the format lays them end to end). So what the tensors claim, and what a
// reader allocates for them, is bounded by the size of the file.
static void safetensors_check_entries(const Safetensors* st, long long data_size) {
    for (int i = 0; i < st->num_entries; i++) {
        const SafetensorsEntry* e = &st->entries[i];
        size_t elem = st_dtype_size(e->dtype);
        if (elem == 0) fail("%s: tensor %s has unknown dtype %s", st->path, e->name, e->dtype);
        long long numel = 1;
        for (int d = 0; d < e->ndim; d++) {
            if (e->shape[d] > (1LL << 40) / (numel > 0 ? numel : 1)) {
                fail("%s: tensor %s has an impossible shape", st->path, e->name);
            }
            numel *= e->shape[d];
        }
        if (e->begin > e->end || e->end > data_size) {
            fail("%s: tensor %s has data_offsets [%lld, %lld] outside the %lld bytes of data (truncated "
                 "file?)", st->path, e->name, e->begin, e->end, data_size);
        }
        if (e->end - e->begin != numel * (long long)elem) {
            fail("%s: tensor %s: data_offsets span %lld bytes, its shape and dtype need %lld", st->path,
                 e->name, e->end - e->begin, numel * (long long)elem);
        }
    }
    long long* ranges = (long long*)malloc_check((size_t)st->num_entries * 3 * sizeof(long long));
    int n = 0;
    for (int i = 0; i < st->num_entries; i++) {
        if (st->entries[i].begin == st->entries[i].end) continue;  // no bytes: nothing to share
        ranges[3 * n] = st->entries[i].begin;
        ranges[3 * n + 1] = st->entries[i].end;
        ranges[3 * n + 2] = i;
        n++;
    }
    qsort(ranges, (size_t)n, 3 * sizeof(long long), st_compare_ranges);
    for (int k = 1; k < n; k++) {
        if (ranges[3 * k] < ranges[3 * (k - 1) + 1]) {
            fail("%s: tensors %s and %s overlap in the file (data_offsets [%lld, %lld] and [%lld, %lld])",
                 st->path, st->entries[ranges[3 * (k - 1) + 2]].name, st->entries[ranges[3 * k + 2]].name,
                 ranges[3 * (k - 1)], ranges[3 * (k - 1) + 1], ranges[3 * k], ranges[3 * k + 1]);
        }
    }
    free(ranges);
}

// Opens path and reads and checks its header. Returns 0, with the reason in why, when the file
// does not begin as a safetensors file (shorter than 8 bytes, a header length that cannot be
// right, no JSON object after it), so that the caller can say what else it expected; a file that
// begins as one but is malformed is an error.
static inline int safetensors_open(Safetensors* st, const char* path, char* why, size_t why_len) {
    memset(st, 0, sizeof(*st));
    st->path = path;
    st->f = fopen_check(path, "rb");
    long long size = file_size_check(st->f, path);
    uint64_t header_len = 0;
    if (size >= 8) fread_check(&header_len, sizeof(header_len), 1, st->f, path);
    if (size < 8 || header_len < 2 || header_len > SAFETENSORS_MAX_HEADER || (long long)header_len > size - 8) {
        if (size < 8) snprintf(why, why_len, "only %lld bytes", size);
        else snprintf(why, why_len, "a safetensors file starts with the length of its JSON header; this "
                      "one's first 8 bytes say %llu, the file has %lld", (unsigned long long)header_len, size);
        fclose(st->f);
        return 0;
    }
    char* json = (char*)malloc_check((size_t)header_len);
    fread_check(json, 1, (size_t)header_len, st->f, path);
    st->data_start = 8 + (long long)header_len;
    JsonReader r = json_reader(json, (size_t)header_len, path, "safetensors header");
    if (json_peek(&r) != '{') {
        snprintf(why, why_len, "no JSON header after the first 8 bytes");
        free(json);
        fclose(st->f);
        return 0;
    }
    safetensors_parse_header(st, &r);
    free(json);
    safetensors_check_entries(st, size - st->data_start);
    return 1;
}

// Reads tensor e (n elements: the caller has checked its shape) as float32 into dest; F32, F16
// and BF16 are read, other dtypes are an error.
static inline void safetensors_read(Safetensors* st, SafetensorsEntry* e, float* dest, size_t n) {
    if (fseek(st->f, (long)(st->data_start + e->begin), SEEK_SET) != 0) {
        fail("%s: cannot seek to tensor %s", st->path, e->name);
    }
    if (strcmp(e->dtype, "F32") == 0) {
        fread_check(dest, sizeof(float), n, st->f, st->path);
    } else {
        int bf16 = strcmp(e->dtype, "BF16") == 0;
        if (!bf16 && strcmp(e->dtype, "F16") != 0) {
            fail("%s: tensor %s has dtype %s; this program reads F32, F16 and BF16", st->path, e->name, e->dtype);
        }
        const size_t chunk = 1 << 16;
        uint16_t* raw = (uint16_t*)malloc_check(chunk * sizeof(uint16_t));
        for (size_t done = 0; done < n; done += chunk) {
            size_t m = n - done < chunk ? n - done : chunk;
            fread_check(raw, sizeof(uint16_t), m, st->f, st->path);
            for (size_t i = 0; i < m; i++) dest[done + i] = bf16 ? bf16_to_float(raw[i]) : f16_to_float(raw[i]);
        }
        free(raw);
    }
    e->used = 1;
}

static inline void safetensors_close(Safetensors* st) {
    free(st->entries);
    fclose(st->f);
    memset(st, 0, sizeof(*st));
}

// ---------- writing ----------
// A file as Hugging Face's safetensors library writes one: the header {"__metadata__": {"format":
// "pt"}, "name": {"dtype", "shape", "data_offsets"}, ...}, padded with spaces so that the data
// starts at a multiple of 8 bytes, then the tensors end to end in the order given. transformers
// refuses a file whose metadata lacks "format" (it names the framework the tensors came from).

typedef struct {
    char name[SAFETENSORS_MAX_NAME];  // printable ASCII without '"' or '\\': written as it is
    const char* dtype;                // "F32", "BF16", ... (st_dtype_size knows its size)
    int ndim;
    long long shape[SAFETENSORS_MAX_DIMS];
    const void* data;  // the elements, row-major; with transposed, a 2-D tensor's transpose:
    int transposed;    // data is (shape[1], shape[0]), written out as (shape[0], shape[1])
} SafetensorsTensor;

static size_t st_tensor_bytes(const SafetensorsTensor* t) {
    size_t n = st_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

// Appends printf-style text to the growing string *buf (length *len, capacity *cap).
static void st_append(char** buf, size_t* len, size_t* cap, const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(NULL, 0, fmt, args);
    va_end(args);
    if (*len + (size_t)n + 1 > *cap) {
        *cap = 2 * (*len + (size_t)n + 1);
        *buf = (char*)realloc_check(*buf, *cap);
    }
    va_start(args, fmt);
    vsnprintf(*buf + *len, *cap - *len, fmt, args);
    va_end(args);
    *len += (size_t)n;
}

// Writes the n tensors to path (atomically: gpt2/io.h's AtomicFile), one at a time: nothing is
// copied but the one transposed tensor being written. Returns the file's size in bytes.
static inline long long safetensors_write(const char* path, const SafetensorsTensor* tensors, int n) {
    size_t len = 0, cap = 4096;
    char* json = (char*)malloc_check(cap);
    st_append(&json, &len, &cap, "{\"__metadata__\":{\"format\":\"pt\"}");
    long long offset = 0;
    for (int i = 0; i < n; i++) {
        const SafetensorsTensor* t = &tensors[i];
        for (const char* c = t->name; *c; c++) {
            if (*c < 0x20 || *c > 0x7e || *c == '"' || *c == '\\') fail("%s: cannot write tensor name %s", path, t->name);
        }
        if (st_dtype_size(t->dtype) == 0 || t->ndim > SAFETENSORS_MAX_DIMS || (t->transposed && t->ndim != 2)) {
            fail("%s: tensor %s: dtype %s with %d dimensions%s cannot be written", path, t->name, t->dtype, t->ndim,
                 t->transposed ? " (transposed)" : "");
        }
        st_append(&json, &len, &cap, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t->name, t->dtype);
        for (int d = 0; d < t->ndim; d++) st_append(&json, &len, &cap, "%s%lld", d ? "," : "", t->shape[d]);
        long long bytes = (long long)st_tensor_bytes(t);
        st_append(&json, &len, &cap, "],\"data_offsets\":[%lld,%lld]}", offset, offset + bytes);
        offset += bytes;
    }
    st_append(&json, &len, &cap, "}");
    while (len % 8 != 0) st_append(&json, &len, &cap, " ");  // 8 + len: the data 8-byte aligned
    uint64_t header_len = len;
    AtomicFile a = atomic_open_check(path);
    fwrite_check(&header_len, sizeof(header_len), 1, a.f, path);
    fwrite_check(json, 1, len, a.f, path);
    free(json);
    for (int i = 0; i < n; i++) {
        const SafetensorsTensor* t = &tensors[i];
        size_t bytes = st_tensor_bytes(t);
        if (!t->transposed) {
            fwrite_check(t->data, 1, bytes, a.f, path);
            continue;
        }
        size_t elem = st_dtype_size(t->dtype), rows = (size_t)t->shape[0], cols = (size_t)t->shape[1];
        const char* src = (const char*)t->data;  // (cols, rows)
        char* out = (char*)malloc_check(bytes);  // (rows, cols)
        #pragma omp parallel for
        for (long long r = 0; r < (long long)rows; r++) {
            for (size_t c = 0; c < cols; c++) memcpy(out + ((size_t)r * cols + c) * elem, src + (c * rows + (size_t)r) * elem, elem);
        }
        fwrite_check(out, 1, bytes, a.f, path);
        free(out);
    }
    atomic_close_check(&a);
    return 8 + (long long)len + offset;
}

#endif // GPT2_SAFETENSORS_H
