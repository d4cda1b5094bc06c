// gpt2/checkpoint.h: a GPT-2 in and out of files (doc/formats.md): llm.c checkpoints, Hugging Face
// model.safetensors (read and written), fresh models (-e dN), and the training state. Every reader
// checks a file's size against its header before trusting it.

#ifndef GPT2_CHECKPOINT_H
#define GPT2_CHECKPOINT_H

#include <ctype.h>
#include "arithmetic.h"  // LAYERNORM_EPS, for config.json
#include "io.h"
#include "model.h"
#include "safetensors.h"

// ---------- llm.c checkpoints ----------

// The rest of an llm.c checkpoint whose magic was read from f: the header, then the 16 tensors
// as float32 (version 3) or bfloat16 (version 5).
static void gpt2_read_llmc(GPT2* model, FILE* f, const char* path, long long size) {
    int32_t header[HEADER_INTS];
    if (size < (long long)sizeof(header)) {
        fail("%s is truncated: %lld bytes, shorter than the 1024-byte header", path, size);
    }
    header[0] = CHECKPOINT_MAGIC;
    fread_check(header + 1, sizeof(int32_t), HEADER_INTS - 1, f, path);
    int version = header[1];
    if (version != CHECKPOINT_VERSION_F32 && version != CHECKPOINT_VERSION_BF16) {
        fail("%s: unsupported checkpoint version %d (this program reads version 3, float32, and "
             "version 5, bfloat16)", path, version);
    }
    GPT2Config config = gpt2_config(header[2], header[3], header[4], header[5], header[6], header[7]);
    gpt2_check_config(config, path);
    // the size the header implies, checked before anything is allocated for it
    size_t sizes[NUM_PARAMETER_TENSORS], layer[NUM_PARAMETER_TENSORS];
    parameter_sizes(sizes, layer, config);
    size_t elem = version == CHECKPOINT_VERSION_F32 ? 4 : 2;
    long long expected = (long long)sizeof(header) + (long long)(sum_sizes(sizes, NUM_PARAMETER_TENSORS) * elem);
    if (size != expected) {
        fail("%s is %s: %lld bytes, expected %lld for this model shape", path,
             size < expected ? "truncated" : "longer than its header says", size, expected);
    }
    gpt2_allocate_params(model, config);
    if (version == CHECKPOINT_VERSION_F32) {
        fread_check(model->params_memory, sizeof(float), model->num_parameters, f, path);
        return;
    }
    const size_t chunk = 1 << 20;
    uint16_t* buf = (uint16_t*)malloc_check(chunk * sizeof(uint16_t));
    for (size_t done = 0; done < model->num_parameters; done += chunk) {
        size_t n = model->num_parameters - done < chunk ? model->num_parameters - done : chunk;
        fread_check(buf, sizeof(uint16_t), n, f, path);
        for (size_t i = 0; i < n; i++) model->params_memory[done + i] = bf16_to_float(buf[i]);
    }
    free(buf);
}

// Writes an llm.c checkpoint, version 3 (float32), atomically. params holds the 16 tensors in
// file order, in host memory (train_gpu.cu passes a copy).
static inline void write_checkpoint(const char* path, GPT2Config config, const float* params,
                                    size_t num_parameters) {
    int32_t header[HEADER_INTS];
    header_init(header, CHECKPOINT_MAGIC, CHECKPOINT_VERSION_F32);
    int32_t shape[6] = {config.max_seq_len, config.vocab_size, config.num_layers, config.num_heads,
                        config.channels, config.padded_vocab_size};
    memcpy(&header[2], shape, sizeof(shape));  // [2..7], as gpt2_read_llmc reads them
    AtomicFile a = atomic_open_check(path);
    fwrite_check(header, sizeof(int32_t), HEADER_INTS, a.f, path);
    fwrite_check(params, sizeof(float), num_parameters, a.f, path);
    atomic_close_check(&a);
}

// ---------- GPT-2 from Hugging Face safetensors ----------
// transformers' names (maybe behind "transformer.") and where they go (doc/formats.md, 6):
//   wte.weight (V, C)             -> wte (Vp, C), the rows V..Vp-1 zero
//   wpe.weight (maxT, C)          -> wpe
//   h.N.ln_1, h.N.ln_2, ln_f      -> ln1w/ln1b, ln2w/ln2b, lnfw/lnfb (.weight/.bias, (C))
//   h.N.attn.c_attn, ..., below   -> the per-layer tensors of HF_LAYER_TENSORS
// The matrices are Conv1D's (in, out), transposed to our (out, in). The shape comes from the
// tensors, the heads from config.json (else C / 64). Also accepted: the mask buffers attn.bias and
// attn.masked_bias (skipped) and lm_head.weight equal to wte; anything else is an error.

#define GPT2_HEAD_SIZE 64

// One per-layer tensor: its name after "h.N.", the tensor it fills, our (out, in) in multiples of
// C (in 0: a vector).
typedef struct {
    const char* name;
    int tensor;
    int out, in;
} HFLayerTensor;

static const HFLayerTensor HF_LAYER_TENSORS[] = {
    {"ln_1.weight", LN1W, 1, 0},        {"ln_1.bias", LN1B, 1, 0},
    {"attn.c_attn.weight", QKVW, 3, 1}, {"attn.c_attn.bias", QKVB, 3, 0},
    {"attn.c_proj.weight", ATTPROJW, 1, 1}, {"attn.c_proj.bias", ATTPROJB, 1, 0},
    {"ln_2.weight", LN2W, 1, 0},        {"ln_2.bias", LN2B, 1, 0},
    {"mlp.c_fc.weight", FCW, 4, 1},     {"mlp.c_fc.bias", FCB, 4, 0},
    {"mlp.c_proj.weight", FCPROJW, 1, 4}, {"mlp.c_proj.bias", FCPROJB, 1, 0},
};
#define NUM_HF_LAYER_TENSORS ((int)(sizeof(HF_LAYER_TENSORS) / sizeof(HF_LAYER_TENSORS[0])))

// Reads tensor `name` of shape (rows) (cols 0) or (rows, cols) into dest, transposed if asked;
// dest NULL only checks it.
static void hf_load(Safetensors* st, const char* name, float* dest, long long rows, long long cols,
                    int transpose) {
    SafetensorsEntry* e = safetensors_find(st, name);
    if (e == NULL) fail("%s: tensor %s is missing", st->path, name);
    int ndim = cols == 0 ? 1 : 2;
    if (e->ndim != ndim || e->shape[0] != rows || (ndim == 2 && e->shape[1] != cols)) {
        char got[128] = "", want[64];
        for (int i = 0; i < e->ndim; i++) {
            size_t len = strlen(got);
            snprintf(got + len, sizeof(got) - len, "%s%lld", i ? ", " : "", e->shape[i]);
        }
        if (ndim == 1) snprintf(want, sizeof(want), "%lld", rows);
        else snprintf(want, sizeof(want), "%lld, %lld", rows, cols);
        fail("%s: tensor %s has shape (%s), expected (%s) for this model", st->path, name, got, want);
    }
    if (dest == NULL) return;
    size_t n = (size_t)rows * (size_t)(cols == 0 ? 1 : cols);
    float* buf = transpose ? (float*)malloc_check(n * sizeof(float)) : dest;
    safetensors_read(st, e, buf, n);
    if (transpose) {
        #pragma omp parallel for
        for (long long c = 0; c < cols; c++) {
            for (long long r = 0; r < rows; r++) dest[c * rows + r] = buf[r * cols + c];
        }
        free(buf);
    }
}

// Is name (prefix removed) h.N.REST? Then returns N and points *rest at REST; else -1.
static int hf_layer_of(const char* name, const char** rest) {
    if (strncmp(name, "h.", 2) != 0 || name[2] < '0' || name[2] > '9') return -1;
    char* end;
    long layer = strtol(name + 2, &end, 10);
    if (*end != '.' || layer > 100000) return -1;
    *rest = end + 1;
    return (int)layer;
}

// The path of config.json beside st_path, into *path; returns whether it exists.
static int hf_config_json_path(const char* st_path, char* path, size_t cap) {
    const char* slash = strrchr(st_path, '/');
    int dir_len = slash != NULL ? (int)(slash - st_path) + 1 : 0;
    if (snprintf(path, cap, "%.*sconfig.json", dir_len, st_path) >= (int)cap) return 0;
    return file_exists(path);
}

// The number of heads from config.json, whose sizes (n_embd, n_layer, n_positions, vocab_size)
// must be the tensors' (c).
static int hf_config_json_heads(const char* path, GPT2Config c) {
    FILE* f = fopen_check(path, "rb");
    long long size = file_size_check(f, path);
    if (size > (1 << 20)) fail("%s: %lld bytes, too large for a model's config.json", path, size);
    char* text = (char*)malloc_check((size_t)size);
    fread_check(text, 1, (size_t)size, f, path);
    fclose(f);
    JsonReader r = json_reader(text, (size_t)size, path, NULL);
    const char* keys[5] = {"n_head", "n_embd", "n_layer", "n_positions", "vocab_size"};
    long long want[5] = {0, c.channels, c.num_layers, c.max_seq_len, c.vocab_size};
    long long got[5] = {-1, -1, -1, -1, -1};  // -1: not given
    json_expect(&r, '{');
    for (size_t i = 0; json_next(&r, '}', i); i++) {
        char key[64];
        st_json_name(&r, key, sizeof(key));
        json_expect(&r, ':');
        int k = 0;
        while (k < 5 && strcmp(key, keys[k]) != 0) k++;
        if (k == 5) json_skip_value(&r);
        else got[k] = json_int(&r, INT32_MAX, keys[k]);
    }
    json_end(&r);
    free(text);
    for (int k = 1; k < 5; k++) {
        if (got[k] != -1 && got[k] != want[k]) {
            fail("%s: %s is %lld, the tensors beside it say %lld", path, keys[k], got[k], want[k]);
        }
    }
    if (got[0] == -1) fail("%s: no n_head, the number of attention heads", path);
    if (got[0] == 0 || c.channels % got[0] != 0) fail("%s: n_head %lld does not divide n_embd %d", path, got[0], c.channels);
    return (int)got[0];
}

// The model's shape, from wte (V, C), wpe (maxT, C), the highest h.N and config.json's n_head
// (else heads of 64 channels).
static GPT2Config hf_config(const Safetensors* st, const char* prefix) {
    char name[SAFETENSORS_MAX_NAME];
    snprintf(name, sizeof(name), "%swte.weight", prefix);
    const SafetensorsEntry* wte = safetensors_find(st, name);
    snprintf(name, sizeof(name), "%swpe.weight", prefix);
    const SafetensorsEntry* wpe = safetensors_find(st, name);
    if (wte == NULL || wpe == NULL || wte->ndim != 2 || wpe->ndim != 2 || wpe->shape[1] != wte->shape[1]) {
        fail("%s: not a GPT-2 safetensors file: needs wte.weight (V, C) and wpe.weight (maxT, C)", st->path);
    }
    size_t prefix_len = strlen(prefix);
    int L = 0;
    for (int i = 0; i < st->num_entries; i++) {
        const char* rest;
        const char* n = st->entries[i].name;
        if (strncmp(n, prefix, prefix_len) != 0) continue;
        int layer = hf_layer_of(n + prefix_len, &rest);
        if (layer + 1 > L) L = layer + 1;
    }
    int V = (int)(wte->shape[0] < INT32_MAX ? wte->shape[0] : -1);
    int C = (int)(wte->shape[1] < INT32_MAX ? wte->shape[1] : -1);
    int maxT = (int)(wpe->shape[0] < INT32_MAX ? wpe->shape[0] : -1);
    GPT2Config c = gpt2_config(maxT, V, L, 1, C, (V + 127) / 128 * 128);
    gpt2_check_config(c, st->path);
    char json[4096];
    if (hf_config_json_path(st->path, json, sizeof(json))) {
        c.num_heads = hf_config_json_heads(json, c);
    } else if (C % GPT2_HEAD_SIZE != 0) {
        fail("%s: channels C=%d are not a multiple of GPT-2's head size %d, and no config.json beside it "
             "gives n_head, so the number of heads is unknown", st->path, C, GPT2_HEAD_SIZE);
    } else {
        c.num_heads = C / GPT2_HEAD_SIZE;
    }
    gpt2_check_config(c, st->path);
    return c;
}

// What is left after the model's tensors must be the mask buffers or a tied lm_head.weight.
static void hf_check_rest(Safetensors* st, const char* prefix, const GPT2* model) {
    size_t prefix_len = strlen(prefix);
    long long V = model->config.vocab_size, C = model->config.channels;
    for (int i = 0; i < st->num_entries; i++) {
        SafetensorsEntry* e = &st->entries[i];
        if (e->used) continue;
        const char* rest = NULL;
        int layer = strncmp(e->name, prefix, prefix_len) == 0 ? hf_layer_of(e->name + prefix_len, &rest) : -1;
        if (layer >= 0 && (strcmp(rest, "attn.bias") == 0 || strcmp(rest, "attn.masked_bias") == 0)) continue;
        if (strcmp(e->name, "lm_head.weight") != 0) {
            fail("%s: unexpected tensor %s: not part of GPT-2", st->path, e->name);
        }
        float* head = (float*)malloc_check((size_t)(V * C) * sizeof(float));
        hf_load(st, "lm_head.weight", head, V, C, 0);
        if (memcmp(head, model->params.wte, (size_t)(V * C) * sizeof(float)) != 0) {
            fail("%s: lm_head.weight differs from wte.weight: GPT-2 ties its output layer to the "
                 "embedding, and so does this program", st->path);
        }
        free(head);
    }
}

// Every tensor of GPT-2 with config c, from the file into the model's parameters p; with p NULL,
// only checks that each is in the file with its shape.
static void hf_tensors(Safetensors* st, const char* prefix, GPT2Config c, const ParameterTensors* p) {
    long long V = c.vocab_size, C = c.channels;
    char name[SAFETENSORS_MAX_NAME];
    snprintf(name, sizeof(name), "%swte.weight", prefix);
    hf_load(st, name, p ? p->wte : NULL, V, C, 0);
    if (p) memset(p->wte + V * C, 0, (size_t)(c.padded_vocab_size - V) * C * sizeof(float));
    snprintf(name, sizeof(name), "%swpe.weight", prefix);
    hf_load(st, name, p ? p->wpe : NULL, c.max_seq_len, C, 0);
    for (int l = 0; l < c.num_layers; l++) {
        for (int k = 0; k < NUM_HF_LAYER_TENSORS; k++) {
            const HFLayerTensor* t = &HF_LAYER_TENSORS[k];
            long long out = t->out * C, in = t->in * C;  // our (out, in); the file's is (in, out)
            snprintf(name, sizeof(name), "%sh.%d.%s", prefix, l, t->name);
            float* dest = p ? ((float* const*)p)[t->tensor] + (size_t)l * (size_t)(out * (in ? in : 1)) : NULL;
            if (in == 0) hf_load(st, name, dest, out, 0, 0);
            else hf_load(st, name, dest, in, out, 1);
        }
    }
    snprintf(name, sizeof(name), "%sln_f.weight", prefix);
    hf_load(st, name, p ? p->lnfw : NULL, C, 0, 0);
    snprintf(name, sizeof(name), "%sln_f.bias", prefix);
    hf_load(st, name, p ? p->lnfb : NULL, C, 0, 0);
}

// GPT-2 from an opened safetensors file. Every tensor is checked before the model is allocated:
// the layer count comes from the names, and a file must not get memory for layers it lacks.
static void gpt2_read_safetensors(GPT2* model, Safetensors* st) {
    const char* prefix = safetensors_find(st, "transformer.wte.weight") != NULL ? "transformer." : "";
    GPT2Config c = hf_config(st, prefix);
    hf_tensors(st, prefix, c, NULL);
    gpt2_allocate_params(model, c);
    hf_tensors(st, prefix, c, &model->params);
    hf_check_rest(st, prefix, model);
}

// ---------- GPT-2 to Hugging Face: model.safetensors and config.json ----------
// What GPT2LMHeadModel.save_pretrained writes: the names behind "transformer.", Conv1D matrices
// (in, out), wte's V rows, no tied lm_head.weight; float32, so a read back is bit for bit.

#define HF_WEIGHTS_FILE "model.safetensors"
#define HF_CONFIG_FILE "config.json"

// Refuses, before any work, a dir that is not a directory or holds either file (nothing is
// overwritten). Returns whether dir must be made (after loading: a bad model leaves nothing).
static inline int hf_export_check(const char* dir) {
    struct stat st;
    if (stat(dir, &st) != 0) return 1;
    if (!S_ISDIR(st.st_mode)) fail("--export %s: exists and is not a directory", dir);
    const char* files[2] = {HF_WEIGHTS_FILE, HF_CONFIG_FILE};
    for (int i = 0; i < 2; i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        if (stat(path, &st) == 0) {
            fail("--export %s: %s exists; not overwriting it (remove it or choose another directory)", dir, path);
        }
    }
    return 0;
}

static inline void hf_export_make_dir(const char* dir) {
    if (mkdir(dir, 0755) != 0) fail("--export %s: cannot create the directory: %s", dir, strerror(errno));
}

// transformers' GPT2Config: dropout 0 (trained without); bos, eos only for GPT-2's vocabulary.
static void hf_write_config(const char* path, GPT2Config c) {
    AtomicFile a = atomic_open_check(path);
    char eot[16] = "null";
    if (c.vocab_size == GPT2_VOCAB) snprintf(eot, sizeof(eot), "%d", GPT2_EOT);
    fprintf(a.f,
            "{\n"
            "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
            "  \"model_type\": \"gpt2\",\n"
            "  \"vocab_size\": %d,\n"
            "  \"n_positions\": %d,\n"
            "  \"n_ctx\": %d,\n"
            "  \"n_embd\": %d,\n"
            "  \"n_layer\": %d,\n"
            "  \"n_head\": %d,\n"
            "  \"n_inner\": null,\n"
            "  \"activation_function\": \"gelu_new\",\n"
            "  \"layer_norm_epsilon\": %g,\n"
            "  \"resid_pdrop\": 0.0,\n"
            "  \"embd_pdrop\": 0.0,\n"
            "  \"attn_pdrop\": 0.0,\n"
            "  \"initializer_range\": 0.02,\n"
            "  \"scale_attn_weights\": true,\n"
            "  \"scale_attn_by_inverse_layer_idx\": false,\n"
            "  \"reorder_and_upcast_attn\": false,\n"
            "  \"tie_word_embeddings\": true,\n"
            "  \"use_cache\": true,\n"
            "  \"bos_token_id\": %s,\n"
            "  \"eos_token_id\": %s,\n"
            "  \"torch_dtype\": \"float32\"\n"
            "}\n",
            c.vocab_size, c.max_seq_len, c.max_seq_len, c.channels, c.num_layers, c.num_heads,
            (double)LAYERNORM_EPS, eot, eot);
    atomic_close_check(&a);
}

// The tensors of the export: wte, wpe, the layers' and ln_f's.
static inline int hf_num_tensors(GPT2Config c) {
    return 4 + NUM_HF_LAYER_TENSORS * c.num_layers;
}

// One tensor of the export, (rows) or (rows, cols); transposed: ours is (cols, rows).
static SafetensorsTensor hf_tensor(const char* name, const float* data, long long rows, long long cols,
                                   int transposed) {
    SafetensorsTensor t;
    memset(&t, 0, sizeof(t));
    snprintf(t.name, sizeof(t.name), "transformer.%s", name);
    t.dtype = "F32";
    t.ndim = cols == 0 ? 1 : 2;
    t.shape[0] = rows;
    t.shape[1] = cols;
    t.data = data;
    t.transposed = transposed;
    return t;
}

// Writes dir/model.safetensors and dir/config.json (hf_export_check has checked dir); returns
// the size of model.safetensors in bytes.
static inline long long gpt2_write_hf(const GPT2* model, const char* dir) {
    GPT2Config c = model->config;
    const ParameterTensors* p = &model->params;
    long long V = c.vocab_size, Vp = c.padded_vocab_size, C = c.channels;
    // wte's padding rows (zero, no token's) are left out
    for (size_t i = (size_t)(V * C); i < (size_t)(Vp * C); i++) {
        if (p->wte[i] != 0.0f) {
            fprintf(stderr, "note: wte's padding rows %lld..%lld are not zero; no token has them, and the export "
                    "leaves them out as always\n", V, Vp - 1);
            break;
        }
    }
    SafetensorsTensor* t = (SafetensorsTensor*)malloc_check((size_t)hf_num_tensors(c) * sizeof(SafetensorsTensor));
    int n = 0;
    t[n++] = hf_tensor("wte.weight", p->wte, V, C, 0);
    t[n++] = hf_tensor("wpe.weight", p->wpe, c.max_seq_len, C, 0);
    for (int l = 0; l < c.num_layers; l++) {
        for (int k = 0; k < NUM_HF_LAYER_TENSORS; k++) {
            const HFLayerTensor* h = &HF_LAYER_TENSORS[k];
            long long out = h->out * C, in = h->in * C;  // ours (out, in); the file's (in, out)
            const float* src = ((float* const*)p)[h->tensor] + (size_t)l * (size_t)(out * (in ? in : 1));
            char name[64];  // h.N.mlp.c_proj.weight
            snprintf(name, sizeof(name), "h.%d.%s", l, h->name);
            t[n++] = in == 0 ? hf_tensor(name, src, out, 0, 0) : hf_tensor(name, src, in, out, 1);
        }
    }
    t[n++] = hf_tensor("ln_f.weight", p->lnfw, C, 0, 0);
    t[n++] = hf_tensor("ln_f.bias", p->lnfb, C, 0, 0);
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, HF_WEIGHTS_FILE);
    long long bytes = safetensors_write(path, t, n);
    free(t);
    snprintf(path, sizeof(path), "%s/%s", dir, HF_CONFIG_FILE);
    hf_write_config(path, c);
    return bytes;
}

// ---------- building a model ----------

// From an llm.c checkpoint (version 3 or 5) or a Hugging Face model.safetensors, told apart by
// their first bytes.
static inline void gpt2_build_from_file(GPT2* model, const char* path) {
    FILE* f = fopen_check(path, "rb");
    long long size = file_size_check(f, path);
    int32_t magic = 0;
    if (size >= 4) fread_check(&magic, sizeof(magic), 1, f, path);
    if (size >= 4 && magic == CHECKPOINT_MAGIC) {
        gpt2_read_llmc(model, f, path, size);
        fclose(f);
        return;
    }
    fclose(f);
    Safetensors st;
    char why[200];
    if (!safetensors_open(&st, path, why, sizeof(why))) {
        fail("%s: neither an llm.c checkpoint (magic %d) nor a safetensors file (%s)", path,
             CHECKPOINT_MAGIC, why);
    }
    gpt2_read_safetensors(model, &st);
    safetensors_close(&st);
}

// Is s of the form dN (a depth for a fresh model) rather than a file name? Returns N, or -1.
static int parse_depth(const char* s) {
    if (s[0] != 'd' || s[1] == '\0' || strlen(s) > 6) return -1;
    for (const char* p = s + 1; *p; p++) {
        if (!isdigit((unsigned char)*p)) return -1;
    }
    return atoi(s + 1);
}

// The model that -e names: a fresh one of N layers for dN (unless a file of that name exists),
// else the file.
static inline void gpt2_build(GPT2* model, const char* init, uint64_t seed) {
    int depth = parse_depth(init);
    if (depth < 0 || file_exists(init)) {
        gpt2_build_from_file(model, init);
        return;
    }
    if (depth < 1 || depth > 128) fail("-e %s: a fresh model has 1 to 128 layers", init);
    gpt2_build_fresh(model, gpt2_config_for_depth(depth), seed);
}

// ---------- the training state (resume) ----------
// state_STEP.bin beside model_STEP.bin: the step, AdamW's m and v, the loader's position and the
// random state, so a resumed run continues bit for bit.

typedef struct {
    int step;              // steps completed
    int global_batch;      // rows of T per optimizer step, over all processes and micro-steps
    int T;                 // (a resume must keep global_batch x T, the tokens per step)
    uint64_t epoch;        // data loader: passes completed
    uint64_t shard_pos;    // data loader: the shard being read, its place in this pass's order
    uint64_t batch_index;  // data loader: next batch of that shard
    uint64_t rng;          // sampling random state
    int num_shards;        // the training data the position is in: its shards, and its whole
    uint64_t num_batches;  // batches per pass (0 in files written before they were recorded)
} TrainState;

static inline void write_state(const char* path, TrainState s, const float* m, const float* v, size_t n) {
    int32_t header[HEADER_INTS];
    header_init(header, STATE_MAGIC, STATE_VERSION);
    header[2] = s.step;
    header[3] = s.global_batch;
    header[4] = s.T;
    memcpy(&header[8], &s.epoch, 8);
    memcpy(&header[10], &s.batch_index, 8);
    memcpy(&header[12], &s.rng, 8);
    uint64_t n64 = n;
    memcpy(&header[14], &n64, 8);
    memcpy(&header[16], &s.shard_pos, 8);
    header[18] = s.num_shards;
    memcpy(&header[20], &s.num_batches, 8);
    AtomicFile a = atomic_open_check(path);
    fwrite_check(header, sizeof(int32_t), HEADER_INTS, a.f, path);
    fwrite_check(m, sizeof(float), n, a.f, path);
    fwrite_check(v, sizeof(float), n, a.f, path);
    atomic_close_check(&a);
}

// Reads a state file into s, m and v (n floats each, allocated by the caller).
static inline void read_state(const char* path, TrainState* s, float* m, float* v, size_t n) {
    FILE* f = fopen_check(path, "rb");
    int32_t header[HEADER_INTS];
    long long size = read_header_check(f, path, header);
    if (header[0] != STATE_MAGIC || header[1] != STATE_VERSION) {
        fail("%s is not a training state file (magic %d version %d)", path, header[0], header[1]);
    }
    uint64_t n64;
    memcpy(&n64, &header[14], 8);
    if (n64 != n || size != (long long)sizeof(header) + 8LL * (long long)n) {
        fail("%s does not match the model (%llu moments for %zu parameters, %lld bytes)", path,
             (unsigned long long)n64, n, size);
    }
    s->step = header[2];
    s->global_batch = header[3];
    s->T = header[4];
    memcpy(&s->epoch, &header[8], 8);
    memcpy(&s->batch_index, &header[10], 8);
    memcpy(&s->rng, &header[12], 8);
    memcpy(&s->shard_pos, &header[16], 8);
    s->num_shards = header[18];
    memcpy(&s->num_batches, &header[20], 8);
    // step >= 0, a batch of at least one token, a random state never 0 (xorshift's fixed point)
    if (s->step < 0 || s->global_batch < 1 || s->T < 1 || s->rng == 0 || s->num_shards < 0) {
        fail("%s is corrupt: step %d, batch %d x %d, sampling state %llu", path, s->step, s->global_batch, s->T,
             (unsigned long long)s->rng);
    }
    fread_check(m, sizeof(float), n, f, path);
    fread_check(v, sizeof(float), n, f, path);
    fclose(f);
}

#endif // GPT2_CHECKPOINT_H
