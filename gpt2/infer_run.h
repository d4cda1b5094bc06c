// gpt2/infer_run.h: the command line of generation, the same for infer.c (CPU) and infer_gpu.cu
// (GPU): the flags, the two ways of running (one prompt printed as it is generated; a file of
// requests answered as JSON lines), and the report; and --export, which writes the model in
// Hugging Face's layout instead, on the host, before any device is started. Each program brings
// its device (EngineDevice: the forward pass over its paged cache) and runs one of the modes below.

#ifndef GPT2_INFER_RUN_H
#define GPT2_INFER_RUN_H

#include "cli.h"
#include "checkpoint.h"
#include "engine.h"
#ifdef GPT2_SERVE
#include "server.h"
#endif

typedef struct {
    const char* model;       // -e
    const char* tokenizer;   // -k
    const char* prompt;      // -p; NULL: read stdin (unless -f)
    const char* requests;    // -f: a file of JSON lines ("-": stdin); NULL: one prompt
    int slots;               // -b: sequences decoded together
    int pages;               // -m: pages in the key-value pool; 0: the default
    const char* precision;   // -w: fp32 or bf16; NULL: the device's default
    GenParams gen;           // -n -T -K -P -S: each request's defaults
    int max_new_given;       // -n was given
    int stop_at_eot;         // -E
    const char* serve;       // --serve HOST:PORT: answer OpenAI's completions API over HTTP
    int queue;               // -q: with --serve, choices waiting for a slot at most
    double time_limit;       // -t: with --serve, seconds a request may take
    int connections;         // -c: with --serve, open connections at most
    const char* export_dir;  // --export DIR: write DIR/model.safetensors and DIR/config.json, then exit
#ifdef GPT2_SERVE
    struct sockaddr_storage serve_addr;  // --serve's address, resolved before the model is read
#endif
} InferConfig;

static void infer_usage(const char* prog) {
    fprintf(stderr,
            "usage: %s -e MODEL [options]\n"
            "  -e MODEL  llm.c checkpoint (.bin, float32 or bfloat16), Hugging Face GPT-2\n"
            "            model.safetensors (dev/data/download_gpt2.sh), or dN: a fresh random model of N layers\n"
            "  -p TEXT   the prompt (default: read standard input)\n"
            "  -f FILE   answer the requests of FILE instead, one JSON object per line ('-': standard input),\n"
            "            {\"prompt\": ..., \"max_tokens\", \"temperature\", \"top_k\", \"top_p\", \"seed\", \"stop\"}:\n"
            "            one JSON line each on standard output, in input order (doc/infer.md)\n"
            "  --serve HOST:PORT  serve OpenAI's completions API over HTTP instead (doc/serve.md): POST\n"
            "            /v1/completions, GET /v1/models, GET /health; HOST defaults to 127.0.0.1, PORT 0 takes\n"
            "            any free port; SIGINT or SIGTERM stops it\n"
            "  -q N      with --serve: choices waiting for a slot, at most; more get HTTP 429 (default 256)\n"
            "  -t SECS   with --serve: seconds a request may take, waiting included (default 600)\n"
            "  -c N      with --serve: open connections, at most (default 256)\n"
            "  --export DIR  write the model in Hugging Face's GPT-2 layout instead, DIR/model.safetensors\n"
            "            (float32) and DIR/config.json, for transformers' GPT2LMHeadModel.from_pretrained(DIR),\n"
            "            then exit (doc/infer.md); makes DIR, never overwrites a file in it\n"
            "  -b N      with -f or --serve: sequences generated together, at most (default 8)\n"
            "  -m PAGES  pages of %d positions in the key-value cache's pool (default: every sequence a\n"
            "            whole context, within 2 GiB, and never less than one whole context)\n"
            "  -w PREC   precision of the weights: fp32 or bf16. infer: bf16 rounds the weight matrices and runs\n"
            "            the products in bf16, the rest and the cache stay float32; default bf16 for a model whose\n"
            "            weights are all bf16 values (a bf16 checkpoint), else fp32. infer_gpu: bf16 weights and\n"
            "            cache; default bf16 where the GPU has bf16 tensor cores, else fp32\n"
            "  -k FILE   tokenizer file (default data/gpt2_tokenizer.bin)\n"
            "  -n N      new tokens at most (default: until end-of-text or the context is full; with --serve,\n"
            "            a request's max_tokens default, else 16 as OpenAI's)\n"
            "  -T TEMP   temperature; 0 = greedy (default 1)\n"
            "  -K K      top-k: sample among the K most likely tokens; 0 = off (default 0)\n"
            "  -P P      top-p: among the most likely tokens that together reach P; 1 = off (default 1)\n"
            "  -S SEED   random seed for sampling (and for a dN model's weights) (default 1337; with --serve,\n"
            "            a request without \"seed\" samples with a fresh one)\n"
            "  -E 0      do not stop at end-of-text (default 1: stop)\n"
            "  -h        this help\n"
            "With -p (or the prompt on standard input) the continuation goes to standard output as it is\n"
            "generated; the prompt length and the prefill and generation speeds go to standard error.\n"
            "With -f a summary goes to standard error, and the exit status is 1 if any request failed.\n",
            prog, KV_PAGE);
}

static InferConfig infer_parse_args(int argc, char** argv) {
    InferConfig c;
    memset(&c, 0, sizeof(c));
    c.tokenizer = "data/gpt2_tokenizer.bin";
    c.slots = 8;
    c.precision = NULL;  // the device's default
    c.gen.max_tokens = -1;
    c.gen.temperature = 1.0f;
    c.gen.top_k = 0;
    c.gen.top_p = 1.0f;
    c.gen.seed = 1337;
    c.stop_at_eot = 1;
    c.queue = -1;  // -q -t -c: the defaults below, with --serve
    c.time_limit = -1;
    c.connections = -1;
    for (int i = 1; i < argc; i += 2) {
        const char* flag = argv[i];
        const char* val = flag_value(argc, argv, i);
        if (val == NULL) {
            infer_usage(argv[0]);
            exit(0);
        }
        if (strcmp(flag, "--serve") == 0) {
            c.serve = val;
            continue;
        }
        if (strcmp(flag, "--export") == 0) {
            c.export_dir = val;
            continue;
        }
        switch (flag[0] == '-' && flag[1] != '-' ? flag[1] : 0) {
            case 'e': c.model = val; break;
            case 'k': c.tokenizer = val; break;
            case 'p': c.prompt = val; break;
            case 'f': c.requests = val; break;
            case 'b': c.slots = parse_int_arg(flag, val, 1); break;
            case 'm': c.pages = parse_int_arg(flag, val, 1); break;
            case 'w': c.precision = val; break;
            case 'n': c.gen.max_tokens = parse_int_arg(flag, val, 1); c.max_new_given = 1; break;
            case 'T': c.gen.temperature = parse_float_arg(flag, val, 0.0f); break;
            case 'K': c.gen.top_k = parse_int_arg(flag, val, 0); break;
            case 'P': c.gen.top_p = parse_float_arg(flag, val, 0.0f); break;
            case 'S': c.gen.seed = (uint64_t)parse_int_arg(flag, val, 0); break;
            case 'E': c.stop_at_eot = parse_int_arg(flag, val, 0); break;
            case 'q': c.queue = parse_int_arg(flag, val, 0); break;
            case 't': c.time_limit = parse_float_arg(flag, val, 0.001f); break;
            case 'c': c.connections = parse_int_arg(flag, val, 1); break;
            default: fail("unknown option %s (see -h)", flag);
        }
    }
    if (c.model == NULL) fail("no model: give -e MODEL (see -h)");
    if (c.gen.top_p > 1.0f || c.gen.top_p == 0.0f) fail("-P expects a probability in (0, 1], got %g", c.gen.top_p);
    if (c.gen.temperature > 100.0f) fail("-T expects a temperature from 0 to 100, got %g", c.gen.temperature);
    if (c.slots > 4096) fail("-b expects at most 4096 sequences, got %d", c.slots);
    if (c.precision != NULL && strcmp(c.precision, "fp32") != 0 && strcmp(c.precision, "bf16") != 0) {
        fail("-w expects fp32 or bf16, got '%s'", c.precision);
    }
    if (c.requests != NULL && c.prompt != NULL) fail("-p and -f: give one prompt or a file of requests, not both");
    if (c.serve != NULL && (c.requests != NULL || c.prompt != NULL)) {
        fail("--serve answers requests over HTTP: give no -p or -f with it");
    }
    if (c.export_dir != NULL && (c.serve != NULL || c.requests != NULL || c.prompt != NULL)) {
        fail("--export writes the model and exits: give no -p, -f or --serve with it");
    }
    if (c.serve == NULL && (c.queue >= 0 || c.time_limit >= 0 || c.connections >= 0)) {
        fail("-q, -t and -c bound a server: they go with --serve HOST:PORT");
    }
    if (c.queue < 0) c.queue = 256;
    if (c.time_limit < 0) c.time_limit = 600;
    if (c.connections < 0) c.connections = 256;
    if (c.connections > 65536) fail("-c expects at most 65536 connections, got %d", c.connections);
    if (c.queue > 1000000) fail("-q expects at most 1000000 choices, got %d", c.queue);
    return c;
}

// The pool's size: -m, or the default for this many slots; -m must hold one whole context.
static int infer_pool_pages(const InferConfig* cfg, GPT2Config c, int slots, size_t value_bytes) {
    int context = kv_pages_for(c.max_seq_len);
    if (cfg->pages == 0) return engine_default_pages(c, slots, value_bytes);
    if (cfg->pages < context) {
        fail("-m %d: the pool must hold at least one whole context, %d pages of %d positions", cfg->pages, context,
             KV_PAGE);
    }
    return cfg->pages;
}

static void infer_report_model(const GPT2* model, const char* device) {
    GPT2Config mc = model->config;
    fprintf(stderr, "model: L=%d NH=%d C=%d V=%d maxT=%d, %zu parameters, %s\n", mc.num_layers, mc.num_heads,
            mc.channels, mc.vocab_size, mc.max_seq_len, model->num_parameters, device);
}

// ---------- one prompt, printed as it is generated ----------

// All of standard input, as a NUL-terminated string; its length in *n.
static char* read_stdin(size_t* n_out) {
    size_t n = 0, cap = 4096;
    char* buf = (char*)malloc_check(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, stdin)) > 0) {
        n += got;
        if (cap - n - 1 == 0) {
            cap *= 2;
            buf = (char*)realloc_check(buf, cap);
        }
    }
    if (ferror(stdin)) fail("cannot read the prompt from standard input: %s", strerror(errno));
    buf[n] = '\0';
    *n_out = n;
    return buf;
}

typedef struct {
    Request req;
    int given;
    const Tokenizer* tok;
    EngineResult result;  // the answer, without its text (printed already)
    char error[sizeof(((Request*)0)->error)];
} OnePrompt;

static int one_prompt_source(void* src, Request* req) {
    OnePrompt* one = (OnePrompt*)src;
    if (one->given) return 0;
    one->given = 1;
    *req = one->req;
    return 1;
}

static void one_prompt_token(void* user, const Request* req, int token) {
    (void)req;
    print_token(((OnePrompt*)user)->tok, token);
    fflush(stdout);
}

static void one_prompt_result(void* user, const EngineResult* r) {
    OnePrompt* one = (OnePrompt*)user;
    one->result = *r;
    one->result.text = NULL;
    memcpy(one->error, r->req.error, sizeof(one->error));
}

static int infer_one_prompt(const InferConfig* cfg, const GPT2* model, const Tokenizer* tok, EngineDevice device,
                            int num_pages, const char* device_name) {
    OnePrompt one;
    memset(&one, 0, sizeof(one));
    if (cfg->prompt != NULL) {
        one.req.prompt_len = strlen(cfg->prompt);
        one.req.prompt = (char*)malloc_check(one.req.prompt_len + 1);
        memcpy(one.req.prompt, cfg->prompt, one.req.prompt_len + 1);
    } else {
        one.req.prompt = read_stdin(&one.req.prompt_len);
    }
    one.req.line = 1;
    one.req.params = cfg->gen;
    one.tok = tok;
    Engine e;
    engine_build(&e, &model->config, tok, device, 1, num_pages, cfg->stop_at_eot);
    e.on_token = one_prompt_token;
    e.on_result = one_prompt_result;
    e.user = &one;
    engine_run(&e, one_prompt_source, &one);
    EngineResult* r = &one.result;
    if (r->failed) fail("%s", one.error);
    printf("\n");
    fflush(stdout);
    infer_report_model(model, device_name);
    const char* stop = strcmp(r->finish_reason, "stop") == 0 ? "end-of-text"
                       : cfg->max_new_given && r->completion_tokens == cfg->gen.max_tokens ? "-n limit"
                       : "context full";
    fprintf(stderr, "prompt: %d tokens, prefill %.3f s, %.1f tok/s\n", r->prompt_tokens, e.prefill_seconds,
            r->prompt_tokens / e.prefill_seconds);
    fprintf(stderr, "generation: %d tokens (stop: %s), %d decode steps in %.3f s, %.2f tok/s\n", r->completion_tokens,
            stop, e.decode_steps, e.decode_seconds, e.decode_steps > 0 ? e.decode_steps / e.decode_seconds : 0.0);
    engine_free(&e);
    return 0;
}

// ---------- a file of requests, answered as JSON lines ----------

typedef struct {
    RequestReader* reader;
    const GenParams* defaults;
} RequestFile;

static int request_file_source(void* src, Request* req) {
    RequestFile* f = (RequestFile*)src;
    return request_read(f->reader, req, f->defaults);
}

static void write_result(void* user, const EngineResult* r) {
    (void)user;
    if (r->failed) {
        request_write_error(stdout, &r->req);
    } else {
        request_write_result(stdout, r->req.id, r->text, r->text_len, r->prompt_tokens, r->completion_tokens,
                             r->finish_reason, r->ttft_ms, r->total_ms);
    }
    fflush(stdout);
}

static int infer_requests(const InferConfig* cfg, const GPT2* model, const Tokenizer* tok, EngineDevice device,
                          int num_pages, size_t value_bytes, const char* device_name) {
    RequestReader reader = request_reader_open(cfg->requests);
    RequestFile file;
    file.reader = &reader;
    file.defaults = &cfg->gen;
    Engine e;
    engine_build(&e, &model->config, tok, device, cfg->slots, num_pages, cfg->stop_at_eot);
    e.on_result = write_result;
    engine_run(&e, request_file_source, &file);
    double seconds = now_seconds() - e.start;
    infer_report_model(model, device_name);
    fprintf(stderr, "requests: %d (%d failed), %d prompt tokens, %d generated in %.3f s: %.1f tok/s\n", e.requests,
            e.failed, e.prompt_tokens, e.completion_tokens, seconds, e.completion_tokens / seconds);
    fprintf(stderr, "batch: up to %d sequences (-b %d), %d decode steps in %.3f s, %d prefills in %.3f s\n",
            e.peak_batch, cfg->slots, e.decode_steps, e.decode_seconds, e.prefills, e.prefill_seconds);
    fprintf(stderr, "kv pages: peak %d of %d in use (%d positions each, %.2f MB each)\n", e.pool.peak,
            e.pool.num_pages, KV_PAGE, engine_page_bytes(model->config, value_bytes) / 1e6);
    int failed = e.failed;
    engine_free(&e);
    request_reader_close(&reader);
    return failed > 0 ? 1 : 0;
}

// ---------- a server of OpenAI's completions API ----------

#ifdef GPT2_SERVE
// The model's name, as the server gives it: its file's name, without the directories.
static const char* infer_model_name(const char* path) {
    const char* slash = strrchr(path, '/');
    return slash != NULL && slash[1] != '\0' ? slash + 1 : path;
}
#endif

static int infer_serve(const InferConfig* cfg, const GPT2* model, const Tokenizer* tok, EngineDevice device,
                       int num_pages, const char* device_name) {
#ifdef GPT2_SERVE
    Engine e;
    engine_build(&e, &model->config, tok, device, cfg->slots, num_pages, cfg->stop_at_eot);
    infer_report_model(model, device_name);
    ServerOptions opt;
    opt.address = cfg->serve;
    opt.addr = cfg->serve_addr;
    opt.model = infer_model_name(cfg->model);
    opt.defaults = cfg->gen;
    if (!cfg->max_new_given) opt.defaults.max_tokens = 16;  // OpenAI's default
    opt.queue = cfg->queue;
    opt.time_limit = cfg->time_limit;
    opt.connections = cfg->connections;
    Server server;
    server_start(&server, &e, &opt);  // the HTTP threads, and one for the signals
    server_engine_loop(&server);      // the engine in this thread, until SIGINT or SIGTERM
    int status = server_stop(&server);
    engine_free(&e);
    return status;
#else
    (void)model, (void)tok, (void)device, (void)num_pages, (void)device_name;
    fail("--serve %s: this build has no HTTP server; install libmicrohttpd (apt-get install libmicrohttpd-dev) "
         "and build again (make clean && make)", cfg->serve);
#endif
}

// Whether every parameter of the model is a bf16 value (its low 16 bits zero), as those of a bf16
// checkpoint are: rounding them to bf16 changes nothing. Stops at the first that is not.
static inline int weights_are_bf16(const GPT2* model) {
    for (size_t i = 0; i < model->num_parameters; i++) {
        uint32_t bits;
        memcpy(&bits, &model->params_memory[i], sizeof(bits));
        if ((bits & 0xffffu) != 0) return 0;
    }
    return 1;
}

// --export: the model (any -e) in Hugging Face's layout, on the host; no tokenizer, no device.
static int infer_export(const InferConfig* cfg) {
    int make_dir = hf_export_check(cfg->export_dir);
    GPT2 model;
    gpt2_build(&model, cfg->model, cfg->gen.seed);
    if (make_dir) hf_export_make_dir(cfg->export_dir);
    long long bytes = gpt2_write_hf(&model, cfg->export_dir);
    GPT2Config c = model.config;
    printf("wrote %s/%s: %d tensors, float32, %lld bytes\n", cfg->export_dir, HF_WEIGHTS_FILE,
           hf_num_tensors(c), bytes);
    printf("wrote %s/%s: GPT2LMHeadModel, n_layer %d, n_head %d, n_embd %d, vocab_size %d, n_positions %d\n",
           cfg->export_dir, HF_CONFIG_FILE, c.num_layers, c.num_heads, c.channels, c.vocab_size, c.max_seq_len);
    gpt2_free(&model);
    return 0;
}

// --serve: the address checked before the model is read, and the signals blocked before any
// thread starts (OpenMP's, CUDA's).
static void infer_prepare(InferConfig* cfg) {
#ifdef GPT2_SERVE
    if (cfg->serve != NULL) {
        server_address(cfg->serve, &cfg->serve_addr);
        server_block_signals();
    }
#else
    (void)cfg;
#endif
}

// What a program reads before it builds its device: the model (-e) and the tokenizer (-k).
static void infer_load(const InferConfig* cfg, GPT2* model, Tokenizer* tok) {
    gpt2_build(model, cfg->model, cfg->gen.seed);
    tokenizer_init(tok, cfg->tokenizer);
    if (tok->vocab_size > model->config.vocab_size) {
        fail("the tokenizer %s has %d tokens, more than the model's vocabulary (V=%d)", cfg->tokenizer, tok->vocab_size,
             model->config.vocab_size);
    }
}

// The sequences generated at once: -b for a file of requests or a server, one for a prompt.
static int infer_slots(const InferConfig* cfg) {
    return cfg->requests != NULL || cfg->serve != NULL ? cfg->slots : 1;
}

#endif // GPT2_INFER_RUN_H
