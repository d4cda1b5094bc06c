// gpt2/run.h: a training run, shared by train_cpu.c and train_gpu.cu: the command line, opening
// a run (the model fresh, from a file or from the last checkpoint of a run being resumed; the
// data; the tokenizer; -o DIR and its log), the learning rate, what the loop prints, and
// checkpoints. The loop itself is each program's main. A step's batch is -d tokens, split over
// the data-parallel processes and, within each, over micro-steps of B x T (doc/parallel.md).

#ifndef GPT2_RUN_H
#define GPT2_RUN_H

#include "io.h"
#include "cli.h"
#include "random.h"
#include "model.h"
#include "checkpoint.h"
#include "dataloader.h"
#include "tokenizer.h"
#include "parallel.h"
#include "cpu_layers.h"  // softmax_forward for the samples, num_threads; gpt2/arithmetic.h

// ---------- the command line ----------

typedef struct {
    const char* train_file;       // -i
    const char* val_file;         // -j
    const char* init;             // -e: checkpoint file, or dN for a fresh model of depth N
    const char* output_dir;       // -o
    const char* tokenizer_file;   // -k
    int micro_batch;              // -b: rows of one forward pass, per process (B of the layers)
    int T;                        // -t
    int total_batch;              // -d: tokens per optimizer step, all processes and micro-steps;
                                  //     0: B x T x processes (no accumulation), or a resumed run's
    int max_steps;                // -x
    float learning_rate;          // -l
    int warmup_steps;             // -u
    float final_lr_frac;          // -q
    float weight_decay;           // -c
    int val_every;                // -v
    int val_batches;              // -m
    int sample_every;             // -s
    int gen_tokens;               // -g
    int checkpoint_every;         // -n
    int resume;                   // -y
    uint64_t seed;                // -S
    int shuffle;                  // -R
    const char* precision;        // -p: the arithmetic, fp32 or bf16; NULL: the program's default
    int tp;                       // -tp: tensor-parallel processes, sharing every block
    int pp;                       // -pp: pipeline stages, each with consecutive layers
    int zero;                     // -z: 1 splits AdamW's moments over the data-parallel processes (ZeRO-1)
    int gpipe;                    // -ps: 1 for GPipe's schedule (all forwards, then all backwards), 0 for 1F1B
} TrainConfig;

// The default runs, both on Tiny Shakespeare. train_cpu: a 4-layer GPT-2 (C=256, 4 heads, 16M
// parameters, most of them in the 50,257-token embedding), sized to show falling validation loss
// and play-like samples within minutes on a 2-core machine. train_gpu: GPT-2 124M (d12) at
// T=1024 with B=8 (33 GiB of GPU memory in all, 31 of them activations and their gradients) and
// llm.c's learning rate for it.
static inline TrainConfig train_config_defaults(int on_gpu) {
    TrainConfig c;
    c.train_file = "data/tinyshakespeare_train.bin";
    c.val_file = "data/tinyshakespeare_val.bin";
    c.init = on_gpu ? "d12" : "d4";
    c.output_dir = NULL;
    c.tokenizer_file = "data/gpt2_tokenizer.bin";
    c.micro_batch = 8;
    c.T = on_gpu ? 1024 : 64;
    c.total_batch = 0;
    c.max_steps = on_gpu ? 100 : 500;
    c.learning_rate = on_gpu ? 3e-4f : 1e-3f;
    c.warmup_steps = 0;
    c.final_lr_frac = 1.0f;
    c.weight_decay = 0.0f;
    c.val_every = on_gpu ? 20 : 50;
    c.val_batches = 10;
    c.sample_every = on_gpu ? 50 : 100;
    c.gen_tokens = 64;
    c.checkpoint_every = 0;
    c.resume = 0;
    c.seed = 1337;
    c.shuffle = 0;
    c.precision = NULL;
    c.tp = 1;
    c.pp = 1;
    c.zero = 0;
    c.gpipe = 0;
    return c;
}

static inline void print_usage(const char* prog, TrainConfig d) {
    fprintf(stderr,
            "usage: %s [options]\n"
            "  -i FILES  training tokens: a token file, a glob of shards (quoted: \"data/fineweb_train_*.bin\")\n"
            "            or a comma-separated list of either; one shard in memory at a time (default %s)\n"
            "  -j FILES  validation tokens, the same way (default %s)\n"
            "  -e INIT   checkpoint (llm.c .bin or model.safetensors) or dN for a fresh model of N layers (default %s)\n"
            "  -o DIR    output directory for main.log, checkpoints and state (default none)\n"
            "  -k FILE   tokenizer file for printing samples (default %s)\n"
            "  -b N      batch size B: rows of one forward pass, per process (default %d)\n"
            "  -t N      sequence length T (default %d)\n"
            "  -d N      total batch in tokens per optimizer step, over all processes: B x T x processes x\n"
            "            micro-steps, the gradients of the micro-steps added up (default B x T x processes)\n"
            "  -x N      training steps (default %d)\n"
            "  -l LR     learning rate (default %g)\n"
            "  -u N      linear warmup steps (default %d)\n"
            "  -q F      final learning rate as a fraction of -l, reached by cosine decay; 1 = constant (default %g)\n"
            "  -c WD     weight decay on the matrices (default %g)\n"
            "  -v N      validation loss every N steps, 0 = never (default %d)\n"
            "  -m N      validation batches (default %d)\n"
            "  -s N      sample text every N steps, 0 = never (default %d)\n"
            "  -g N      tokens per sample (default %d)\n"
            "  -n N      checkpoint every N steps and at the end, with -o; 0 = at the end only (default %d)\n"
            "  -y 1      resume from the latest checkpoint and state in -o (default %d)\n"
            "  -S SEED   random seed for initialisation, shuffling and sampling (default %llu)\n"
            "  -R 1      shuffle the order of batches, from the seed (default %d)\n"
            "  -p P      arithmetic: fp32, or bf16: mixed precision, the matrix products on bf16 weights and\n"
            "            activations, float32 master weights and sums (default: train_cpu fp32; train_gpu bf16 on\n"
            "            GPUs of compute capability 8.0 and newer, on its tensor cores)\n"
            "  -tp N     tensor parallel: every block split over N processes by heads and MLP width (default 1)\n"
            "  -pp N     pipeline parallel: the layers split into N stages of consecutive layers (default 1)\n"
            "  -ps S     pipeline schedule of the micro-steps: 1f1b or gpipe (default 1f1b)\n"
            "  -z 1      ZeRO-1: AdamW's moments and update split over the data-parallel processes (default 0)\n"
            "            (under mpirun -np P: data parallel over P / (tp x pp) replicas; doc/parallel.md)\n"
            "  -h        this help\n",
            prog, d.train_file, d.val_file, d.init, d.tokenizer_file, d.micro_batch, d.T, d.max_steps,
            d.learning_rate, d.warmup_steps, d.final_lr_frac, d.weight_decay, d.val_every,
            d.val_batches, d.sample_every, d.gen_tokens, d.checkpoint_every, d.resume,
            (unsigned long long)d.seed, d.shuffle);
}

// The options of argv over the program's defaults (printed by -h).
static inline TrainConfig train_config_parse(int argc, char** argv, TrainConfig defaults) {
    TrainConfig c = defaults;
    for (int i = 1; i < argc; i += 2) {
        const char* flag = argv[i];
        if (strcmp(flag, "-tp") == 0 || strcmp(flag, "-pp") == 0 || strcmp(flag, "-ps") == 0) {
            if (i + 1 >= argc) fail("%s needs a value (see -h)", flag);
            const char* v = argv[i + 1];
            if (flag[1] == 't') c.tp = parse_int_arg(flag, v, 1);
            else if (flag[2] == 'p') c.pp = parse_int_arg(flag, v, 1);
            else if (strcmp(v, "1f1b") == 0 || strcmp(v, "gpipe") == 0) c.gpipe = v[0] == 'g';
            else fail("-ps expects 1f1b or gpipe, got '%s'", v);
            continue;
        }
        const char* val = flag_value(argc, argv, i);
        if (val == NULL) {
            print_usage(argv[0], defaults);
            exit(0);
        }
        switch (flag[1]) {
            case 'i': c.train_file = val; break;
            case 'j': c.val_file = val; break;
            case 'e': c.init = val; break;
            case 'o': c.output_dir = val; break;
            case 'k': c.tokenizer_file = val; break;
            case 'b': c.micro_batch = parse_int_arg(flag, val, 1); break;
            case 't': c.T = parse_int_arg(flag, val, 1); break;
            case 'd': c.total_batch = parse_int_arg(flag, val, 1); break;
            case 'x': c.max_steps = parse_int_arg(flag, val, 0); break;
            case 'l': c.learning_rate = parse_float_arg(flag, val, 0.0f); break;
            case 'u': c.warmup_steps = parse_int_arg(flag, val, 0); break;
            case 'q': c.final_lr_frac = parse_float_arg(flag, val, 0.0f); break;
            case 'c': c.weight_decay = parse_float_arg(flag, val, 0.0f); break;
            case 'v': c.val_every = parse_int_arg(flag, val, 0); break;
            case 'm': c.val_batches = parse_int_arg(flag, val, 1); break;
            case 's': c.sample_every = parse_int_arg(flag, val, 0); break;
            case 'g': c.gen_tokens = parse_int_arg(flag, val, 1); break;
            case 'n': c.checkpoint_every = parse_int_arg(flag, val, 0); break;
            case 'y': c.resume = parse_int_arg(flag, val, 0); break;
            case 'S': c.seed = (uint64_t)parse_int_arg(flag, val, 0); break;
            case 'R': c.shuffle = parse_int_arg(flag, val, 0); break;
            case 'p': c.precision = val; break;
            case 'z':
                c.zero = parse_int_arg(flag, val, 0);
                if (c.zero > 1) fail("-z expects 0 or 1 (ZeRO stage 1), got %d", c.zero);
                break;
            default: fail("unknown option %s (see -h)", flag);
        }
    }
    if (c.final_lr_frac > 1.0f) fail("-q expects a fraction between 0 and 1, got %g", c.final_lr_frac);
    if (c.resume && c.output_dir == NULL) fail("-y 1 resumes from the checkpoints in -o DIR: give -o");
    return c;
}

// The options every process of a run must share, as text, for parallel_check_same. File names
// are left out: on several machines, each may keep its copy of the data at another path.
static inline void train_config_key(const TrainConfig* c, char* key, size_t n) {
    snprintf(key, n, "-e %s -b %d -t %d -d %d -x %d -l %g -u %d -q %g -c %g -v %d -m %d -s %d -g %d -n %d -y %d -S %llu -R %d -p %s -tp %d -pp %d -z %d -ps %d",
             c->init, c->micro_batch, c->T, c->total_batch, c->max_steps, c->learning_rate, c->warmup_steps,
             c->final_lr_frac, c->weight_decay, c->val_every, c->val_batches, c->sample_every, c->gen_tokens,
             c->checkpoint_every, c->resume, (unsigned long long)c->seed, c->shuffle,
             c->precision != NULL ? c->precision : "default", c->tp, c->pp, c->zero, c->gpipe);
}

// ---------- the schedule and the divergence stop ----------

// Learning rate at step (from 1): linear warmup over warmup_steps, then cosine decay from the
// full rate to final_lr_frac of it at max_steps (constant when final_lr_frac is 1).
static inline float learning_rate_at(const TrainConfig* c, int step) {
    float lr = c->learning_rate;
    if (step <= c->warmup_steps) return lr * (float)step / (float)c->warmup_steps;
    if (c->final_lr_frac >= 1.0f || c->max_steps <= c->warmup_steps) return lr;
    float progress = (float)(step - c->warmup_steps) / (float)(c->max_steps - c->warmup_steps);
    float coeff = 0.5f * (1.0f + cosf(3.14159265f * progress));
    float min_lr = lr * c->final_lr_frac;
    return min_lr + coeff * (lr - min_lr);
}

// Stops the run when training has diverged: a loss or gradient norm that is not finite would
// turn every parameter into NaN at the next update. Checked before that update is applied.
static inline void check_step_finite(int step, float loss, float norm) {
    if (isfinite(loss) && isfinite(norm)) return;
    fail("training diverged at step %d (loss %f, gradient norm %f); stopped before its update "
         "(learning rate too high?)", step, loss, norm);
}

// ---------- the output directory ----------

// Makes DIR if needed and proves it writable by creating and removing a file in it, so a run
// fails at the start rather than at its first checkpoint.
static inline void ensure_output_dir(const char* dir) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (mkdir(dir, 0755) != 0) fail("cannot create output directory %s: %s", dir, strerror(errno));
    } else if (!S_ISDIR(st.st_mode)) {
        fail("output path %s exists and is not a directory", dir);
    }
    char probe[4096];
    snprintf(probe, sizeof(probe), "%s/.write_test", dir);
    FILE* f = fopen(probe, "wb");
    if (f == NULL) fail("output directory %s is not writable: %s", dir, strerror(errno));
    fclose(f);
    remove(probe);
}

// The latest step in DIR with both model_STEP.bin and state_STEP.bin, or -1.
static inline int find_latest_checkpoint(const char* dir, int max_step) {
    char model_path[4096], state_path[4096];
    for (int step = max_step; step >= 0; step--) {
        snprintf(model_path, sizeof(model_path), "%s/model_%08d.bin", dir, step);
        snprintf(state_path, sizeof(state_path), "%s/state_%08d.bin", dir, step);
        if (file_exists(model_path) && file_exists(state_path)) return step;
    }
    return -1;
}

// ---------- a run ----------

typedef struct {
    TrainConfig cfg;
    GPT2 model;            // the model in host memory: trained there by train_cpu, copied to and
                           // from the GPU by train_gpu; on resume it holds the AdamW moments too.
                           // Split by -tp, -pp or -z, only rank 0 keeps it, to gather checkpoints in
    GPT2 part;             // this process's part of it then (run_part), in host memory
    DataLoader train, val;
    Tokenizer tokenizer;
    Tokenizer* tok;        // NULL: samples print as token ids
    int start_step;        // steps done before this run: the resumed checkpoint's, or 0
    long long step_tokens; // tokens per optimizer step, over all processes (-d)
    int micro_steps;       // forward and backward passes of B x T per step, on each process
    float loss;            // the last step's loss: the mean over its micro-steps and processes
    double reduce_time;    // seconds of the last step spent summing gradients over the processes
    int split;             // 1: the model or its optimizer is split over the processes (run_part)
    uint64_t sample_rng;
    FILE* log;             // DIR/main.log, or NULL without -o
    char path[4096];
    double total_time;     // of the timed steps (all but a run's first)
    int timed_steps;
    double eta_start;      // the clock of the ETA: when this run's first step began, then ended
    int eta_steps;         // steps since eta_start
} Run;

// With -y 1: the model and the AdamW moments of the latest checkpoint in -o, and the state that
// goes with them (the data position, the sampling random state).
static TrainState run_resume(Run* run) {
    const TrainConfig* c = &run->cfg;
    int step = find_latest_checkpoint(c->output_dir, c->max_steps);
    if (step < 0) {
        fail("-y 1: no model_STEP.bin with state_STEP.bin (STEP <= %d) in %s", c->max_steps, c->output_dir);
    }
    snprintf(run->path, sizeof(run->path), "%s/model_%08d.bin", c->output_dir, step);
    gpt2_build_from_file(&run->model, run->path);
    GPT2* m = &run->model;
    m->m_memory = (float*)calloc_check(m->num_parameters, sizeof(float));
    m->v_memory = (float*)calloc_check(m->num_parameters, sizeof(float));
    TrainState state;
    snprintf(run->path, sizeof(run->path), "%s/state_%08d.bin", c->output_dir, step);
    read_state(run->path, &state, m->m_memory, m->v_memory, m->num_parameters);
    // the batch per step (state.global_batch rows of T, over all processes and micro-steps) must be
    // the same; how it is split (-b, processes, micro-steps) may change
    long long tokens = (long long)state.global_batch * state.T;
    if (state.T != c->T || state.step != step || (c->total_batch > 0 && c->total_batch != tokens)) {
        fail("%s was written by a run with batches of %d x T=%d tokens (-d %lld) at step %d; resume with the "
             "same -t and -d", run->path, state.global_batch, state.T, tokens, state.step);
    }
    run->start_step = step;
    run->sample_rng = state.rng;
    return state;
}

// The tokens of each step (-d, or a resumed run's, or B x T x processes) and the micro-steps it
// takes, one clear error when -d is not a whole number of passes of B x T on every process.
static inline void run_split_batch(Run* run, long long resumed_tokens) {
    const TrainConfig* c = &run->cfg;
    long long pass = (long long)c->micro_batch * c->T * split.dp;  // tokens of one pass of every replica
    long long total = c->total_batch > 0 ? c->total_batch : resumed_tokens > 0 ? resumed_tokens : pass;
    if (total % pass != 0) {
        char what[64];
        if (c->total_batch > 0) snprintf(what, sizeof(what), "-d %lld", total);
        else snprintf(what, sizeof(what), "the resumed run's batch of %lld tokens (-d)", total);
        fail("%s is not a multiple of B x T x %s = %d x %d x %d = %lld tokens: each step is a whole number of "
             "micro-steps of B x T on every process", what, split_is_model_parallel() ? "data-parallel replicas" : "processes",
             c->micro_batch, c->T, split.dp, pass);
    }
    run->step_tokens = total;
    run->micro_steps = (int)(total / pass);
}

// A resumed run continues where the state says the training data was read to, in the same data:
// the same shards (their number and their batches per pass, where the state records them).
static inline void run_seek_data(Run* run, TrainState state) {
    DataLoader* dl = &run->train;
    if (state.num_shards > 0 && (state.num_shards != dl->num_shards || state.num_batches != dl->num_batches)) {
        fail("-i %s: %d token file%s of %zu batches per pass, but the run being resumed read %d of %llu: resume "
             "with the same training data (or start a new run from its checkpoint with -e)", run->cfg.train_file,
             dl->num_shards, dl->num_shards == 1 ? "" : "s", dl->num_batches, state.num_shards,
             (unsigned long long)state.num_batches);
    }
    dataloader_seek(dl, state.epoch, (size_t)state.shard_pos, (size_t)state.batch_index);
}

// Every input of a run, checked: -d, the model, -t against its context, the token files, a
// resumed state, and whatever check_model, if not NULL, asks of the model's shape.
static inline void run_open_inputs(Run* run, TrainConfig cfg, void (*check_model)(GPT2Config)) {
    memset(run, 0, sizeof(*run));
    run->cfg = cfg;
    run->sample_rng = seed_mix(cfg.seed, 0x5a3b1e, 0);
    if (cfg.total_batch > 0) run_split_batch(run, 0);  // a bad -d stops the run before anything is read
    TrainState state;
    memset(&state, 0, sizeof(state));
    if (cfg.resume) state = run_resume(run);
    else gpt2_build(&run->model, cfg.init, cfg.seed);
    run_split_batch(run, cfg.resume ? (long long)state.global_batch * state.T : 0);
    GPT2Config mc = run->model.config;
    if (cfg.T > mc.max_seq_len) fail("-t %d is longer than the model's context maxT=%d", cfg.T, mc.max_seq_len);
    if (mc.num_heads % cfg.tp != 0) {
        fail("-tp %d must divide the model's %d heads: tensor parallelism gives each process whole heads", cfg.tp,
             mc.num_heads);
    }
    if (cfg.pp > mc.num_layers) {
        fail("-pp %d: the model has %d layers, and every pipeline stage needs at least one", cfg.pp, mc.num_layers);
    }
    if (check_model != NULL) check_model(mc);
    // the data is split over the data-parallel replicas: the processes of one replica (its tensor-
    // parallel parts and pipeline stages) read the same batches
    dataloader_init(&run->train, cfg.train_file, cfg.micro_batch, cfg.T, split.dp_rank, split.dp, run->micro_steps,
                    mc.vocab_size, cfg.shuffle, cfg.seed);
    if (cfg.resume) run_seek_data(run, state);
    if (cfg.val_every > 0) {
        dataloader_init(&run->val, cfg.val_file, cfg.micro_batch, cfg.T, split.dp_rank, split.dp, run->micro_steps,
                        mc.vocab_size, 0, 0);
    }
    // the tokenizer only prints samples: without one, samples print as token ids
    if (cfg.sample_every > 0 && procs.rank == 0) {
        if (file_exists(cfg.tokenizer_file)) {
            tokenizer_init(&run->tokenizer, cfg.tokenizer_file);
            if (run->tokenizer.vocab_size >= mc.vocab_size) run->tok = &run->tokenizer;
            else tokenizer_free(&run->tokenizer);
        }
        if (run->tok == NULL) {
            fprintf(stderr, "note: no tokenizer for this vocabulary at %s: samples print as token ids\n",
                    cfg.tokenizer_file);
        }
    }
}

// Opens a run. Every process opens its inputs, rank 0 first: a bad one, which every process
// would find, is then reported once. Only when all of them have is -o DIR made and its main.log
// opened (by rank 0), so that a run that cannot start leaves nothing behind.
static inline void run_open(Run* run, TrainConfig cfg, void (*check_model)(GPT2Config)) {
    parallel_split_init(cfg.tp, cfg.pp);  // the grid of processes, and its groups
    split.zero = cfg.zero;
    split.gpipe = cfg.gpipe;
    rank0_first_begin();
    run_open_inputs(run, cfg, check_model);
    rank0_first_end();
    parallel_barrier();  // every process has its inputs
    if (cfg.output_dir != NULL && procs.rank == 0) {
        ensure_output_dir(cfg.output_dir);
        snprintf(run->path, sizeof(run->path), "%s/main.log", cfg.output_dir);
        if (!cfg.resume && file_exists(run->path)) {
            fail("%s already exists: resume that run with -y 1, or choose another -o", run->path);
        }
        run->log = fopen_check(run->path, cfg.resume ? "a" : "w");
    }
}

static inline void run_close(Run* run) {
    gpt2_free(&run->part);
    if (run->log) fclose_check(run->log, "main.log");
    if (run->tok) tokenizer_free(run->tok);
    dataloader_free(&run->train);
    if (run->cfg.val_every > 0) dataloader_free(&run->val);
    gpt2_free(&run->model);
}

// ---------- what a step costs ----------

// Training FLOPs per token, as PaLM (appendix B) and llm.c count them: 6 per parameter (forward
// 2, backward 4) plus the attention scores and weighted sums, 12 * L * C * T.
static inline double flops_per_token(const GPT2* model, int T) {
    GPT2Config c = model->config;
    return 6.0 * (double)model->num_parameters + 12.0 * c.num_layers * c.channels * (double)T;
}

// Model FLOPs utilisation in percent of a step of `seconds`: each process's tokens against its
// device's peak FLOP/s.
static inline double run_mfu(const Run* run, const GPT2* model, double seconds, double peak) {
    double tokens = (double)run->step_tokens / procs.size;
    return 100.0 * flops_per_token(model, run->cfg.T) * tokens / seconds / peak;
}

// main.log (rank 0 only: the other processes have none).
static inline void run_log(Run* run, int step, const char* what, float value) {
    if (run->log == NULL) return;
    fprintf(run->log, "s:%d %s:%f\n", step, what, value);
    fflush(run->log);
}

// ---------- what the loop prints ----------

static inline void run_print_summary(const Run* run, const GPT2* model) {
    const TrainConfig* c = &run->cfg;
    GPT2Config mc = model->config;
    if (procs.rank != 0) return;
    size_t whole = run->split ? 0 : model->num_parameters;
    if (run->split) {  // the parameters of the whole model
        size_t sizes[NUM_PARAMETER_TENSORS], layer[NUM_PARAMETER_TENSORS];
        parameter_sizes(sizes, layer, mc);
        whole = sum_sizes(sizes, NUM_PARAMETER_TENSORS);
    }
    printf("model: L=%d NH=%d C=%d V=%d (padded %d) maxT=%d, %zu parameters (%.1f MB)\n", mc.num_layers,
           mc.num_heads, mc.channels, mc.vocab_size, mc.padded_vocab_size, mc.max_seq_len, whole, whole * 4.0 / 1e6);
    if (run->split) {
        printf("split: %d processes = tp %d x pp %d x dp %d%s; memory, per process, below after step 1\n",
               procs.size, split.tp, split.pp, split.dp, c->zero ? ", ZeRO-1 over dp" : "");
    } else if (model->device_bytes > 0) {
        printf("GPU memory: %.2f GiB for parameters, gradients, AdamW m, v, activations and their gradients (B=%d, T=%d)\n",
               model->device_bytes / 1073741824.0, c->micro_batch, c->T);
    } else {
        printf("memory: parameters + gradients + AdamW m, v %.1f MB, activations + their gradients %.1f MB (B=%d, T=%d)\n",
               model->num_parameters * 16.0 / 1e6, model->activation_bytes / 1e6, c->micro_batch, c->T);
    }
    printf("batch: %lld tokens per step = B=%d x T=%d x %d micro-step%s x %d %s%s\n", run->step_tokens,
           c->micro_batch, c->T, run->micro_steps, run->micro_steps > 1 ? "s" : "", split.dp,
           split_is_model_parallel() ? "data-parallel replica" : "process", split.dp == 1 ? "" : split_is_model_parallel() ? "s" : "es");
    if (split.pp > 1) {
        printf("pipeline: %d stages, %s schedule, %d micro-steps per step: bubble (P-1)/(M+P-1) = %.1f%%\n", split.pp,
               c->gpipe ? "GPipe" : "1F1B", run->micro_steps,
               100.0 * (split.pp - 1) / (run->micro_steps + split.pp - 1));
    }
    char shards[32] = "";
    if (run->train.num_shards > 1) snprintf(shards, sizeof(shards), "%d shards, ", run->train.num_shards);
    printf("train: %s (%s%zu tokens, %zu batches)%s, val: %s\n", c->train_file, shards, run->train.num_tokens,
           run->train.num_batches, c->shuffle ? " shuffled" : "", c->val_every > 0 ? c->val_file : "off");
    printf("steps %d, lr %g (warmup %d, final fraction %g), weight decay %g, seed %llu, threads %d\n",
           c->max_steps, c->learning_rate, c->warmup_steps, c->final_lr_frac, c->weight_decay,
           (unsigned long long)c->seed, num_threads());
    if (c->resume) {
        printf("resumed from %s/model_%08d.bin at step %d\n", c->output_dir, run->start_step, run->start_step);
    }
}

// The progress line of one step. The first step (fresh memory) is left out of the average,
// unless it is the only one; tok/s counts every process's tokens; the ETA is the time per step
// so far times the steps left. peak: the FLOP/s MFU counts against, 0 for none.
static inline void run_print_step(Run* run, const GPT2* model, int step, float norm, float lr, double dt,
                                  double peak) {
    const TrainConfig* c = &run->cfg;
    if (step > run->start_step + 1 || c->max_steps - run->start_step == 1) {
        run->total_time += dt;
        run->timed_steps++;
    }
    run_log(run, step, "trl", run->loss);
    if (procs.rank != 0) return;
    printf("step %4d/%d | loss %.6f | norm %.4f | lr %.2e | %.1f ms | %.0f tok/s", step, c->max_steps,
           run->loss, norm, lr, dt * 1e3, run->step_tokens / dt);
    if (peak > 0) printf(" | MFU %.1f%%", run_mfu(run, model, dt, peak));
    char eta[32];
    double now = now_seconds(), per_step = (now - run->eta_start) / ++run->eta_steps;
    if (step == run->start_step + 1) {
        run->eta_start = now;
        run->eta_steps = 0;
    }
    printf(" | ETA %s", format_duration(eta, sizeof(eta), per_step * (c->max_steps - step)));
    printf(" | %lld tok/step, %d micro-step%s", run->step_tokens, run->micro_steps, run->micro_steps > 1 ? "s" : "");
    if (procs.mpi) {
        printf(" x %d process%s, all-reduce %.1f ms", procs.size, procs.size > 1 ? "es" : "", run->reduce_time * 1e3);
        if (procs.size > 1) printf(", comm %.1f ms", split.comm_seconds * 1e3);
    }
    printf("\n");
    fflush(stdout);
}

static inline void run_print_average(const Run* run, const GPT2* model, double peak) {
    if (run->timed_steps == 0 || procs.rank != 0) return;
    double step_time = run->total_time / run->timed_steps;
    printf("average %.1f ms per step, %.0f tok/s", step_time * 1e3, run->step_tokens / step_time);
    if (peak > 0) printf(", MFU %.1f%%", run_mfu(run, model, step_time, peak));
    printf("\n");
}

// What happens after step `step`: validation, a sample, a checkpoint (RUN_...), or none.
enum { RUN_VALIDATE = 1, RUN_SAMPLE = 2, RUN_SAVE = 4 };
static inline int run_due(const Run* run, int step) {
    const TrainConfig* c = &run->cfg;
    int last = step == c->max_steps, due = 0;
    if (c->val_every > 0 && (step % c->val_every == 0 || last)) due |= RUN_VALIDATE;
    if (c->sample_every > 0 && (step % c->sample_every == 0 || last) && (procs.rank == 0 || split_is_model_parallel())) {
        due |= RUN_SAMPLE;
    }
    if (c->output_dir != NULL && ((c->checkpoint_every > 0 && step % c->checkpoint_every == 0) || last) &&
        (procs.rank == 0 || run->split)) {
        due |= RUN_SAVE;
    }
    return due;
}

// ---------- validation and samples ----------

// Validation starts: the validation file rewound, up to -m batches of it, each as big as a
// training step's and split the same way; returns the forward passes each process runs.
static inline int run_val_begin(Run* run) {
    dataloader_reset(&run->val);
    int n = run->cfg.val_batches < (int)run->val.num_batches ? run->cfg.val_batches : (int)run->val.num_batches;
    return n * run->micro_steps;
}

// The mean of every process's losses over the passes, printed and logged.
static inline void run_val_report(Run* run, int step, double loss_sum, int passes) {
    float loss = (float)(parallel_group_sum(GROUP_WORLD, loss_sum) / ((double)passes * split.dp));
    if (procs.rank != 0) return;
    printf("step %d: val loss %.6f\n", step, loss);
    run_log(run, step, "tel", loss);
}

// A sample is -g tokens (at most T-1) that the model writes after an end-of-text token.
static inline int run_sample_length(const Run* run) {
    return run->cfg.gen_tokens < run->cfg.T - 1 ? run->cfg.gen_tokens : run->cfg.T - 1;
}

// The first token (end-of-text) and the header line; returns the tokens to write.
static inline int run_sample_begin(const Run* run, int* first, int step) {
    int V = run->model.config.vocab_size;
    int eot = run->tok != NULL ? run->tok->eot_token : GPT2_EOT;
    *first = eot < V ? eot : V - 1;
    if (procs.rank == 0) printf("--- sample at step %d ---\n", step);
    return run_sample_length(run);
}

// The next token of a sample, drawn from the softmax of the last position's logits (Vp floats,
// on the process of the last stage: NULL elsewhere) with `coin`, which every process draws so
// that their random states stay alike; the token reaches every process and rank 0 prints it.
static inline int run_sample_next(const Run* run, const float* logits, float coin) {
    int V = run->model.config.vocab_size, Vp = run->model.config.padded_vocab_size, token = 0;
    if (logits != NULL) {
        float* probs = (float*)malloc_check((size_t)Vp * sizeof(float));
        softmax_forward(probs, logits, 1, 1, V, Vp);
        token = sample_mult(probs, V, coin);
        free(probs);
    }
    // from the first process of the last stage's group, in the group of the whole model
    token = parallel_group_bcast_int(GROUP_MODEL, token, (split.pp - 1) * split.tp);
    if (procs.rank == 0) {
        print_token(run->tok, token);
        fflush(stdout);
    }
    return token;
}

static inline void run_sample_end(void) {
    if (procs.rank == 0) printf("\n---\n");
}

// ---------- checkpoints ----------

// Writes DIR/model_STEP.bin and DIR/state_STEP.bin from rank 0's whole host model, run->model,
// which the program has brought up to date (from its device, or gathered from the processes'
// parts): everything resuming at STEP needs.
static inline void run_save(Run* run, int step) {
    GPT2* host = &run->model;
    if (procs.rank != 0) return;
    snprintf(run->path, sizeof(run->path), "%s/model_%08d.bin", run->cfg.output_dir, step);
    write_checkpoint(run->path, host->config, host->params_memory, host->num_parameters);
    if (step == 0 && run->cfg.max_steps == 0) {  // -x 0: the initial model only
        printf("wrote %s\n", run->path);
        return;
    }
    TrainState state;
    state.step = step;
    state.global_batch = (int)(run->step_tokens / run->cfg.T);
    state.T = run->cfg.T;
    state.epoch = run->train.epoch;
    state.shard_pos = run->train.shard_pos;
    state.batch_index = run->train.batch_index;
    state.num_shards = run->train.num_shards;
    state.num_batches = run->train.num_batches;
    state.rng = run->sample_rng;
    snprintf(run->path, sizeof(run->path), "%s/state_%08d.bin", run->cfg.output_dir, step);
    write_state(run->path, state, host->m_memory, host->v_memory, host->num_parameters);
    printf("wrote %s/model_%08d.bin and state_%08d.bin\n", run->cfg.output_dir, step, step);
}

#endif // GPT2_RUN_H
