// test/fuzz/fuzz_completion.c: the body of a request to the server's completions API
// (completion_parse, gpt2/completions.h). The input is one body. Then:
//   - the parser never stops the program (fail), and once completion_free has run nothing it
//     allocated is left, whether the body was valid, refused, or not JSON (a JSON error jumps out
//     of the parser from the middle of a string);
//   - a valid body has 1 to COMPLETION_MAX_PROMPTS prompts, each valid UTF-8 of the length given
//     and 0-terminated, no longer than the body; n from 1 to COMPLETION_MAX_N; the flags 0 or 1;
//     the parameters in their documented ranges, and the seed the default unless "seed" was given;
//     at most REQUEST_MAX_STOP stop strings of 1 to REQUEST_MAX_STOP_BYTES bytes of valid UTF-8; a
//     model name of valid UTF-8 of at most COMPLETION_MAX_MODEL bytes; no error and no field;
//   - a refused one has a message in printable ASCII, and the field it names, if any, is one of
//     the body's fields (OpenAI's "param"); a body that is not JSON names none;
//   - the same body read twice gives the same result; so does the body with whitespace around it,
//     as JSON says whitespace around a value is nothing (and a body that is not JSON stays so);
//   - a body that holds only gpt2/requests.h's fields, with a prompt that is not an array, reads as
//     request_parse reads it: both accept or both refuse; the same parameters, stop strings and
//     prompt; the same complaint about the same field, in the same words but where a body and a
//     prompt that may be an array are named.

#include "fuzz.h"
#include "../../gpt2/completions.h"

static const GenParams defaults = {-1, 1.0f, 0, 1.0f, 1337};

// The fields of a body that a complaint may name: doc/formats.md's and OpenAI's completions API's.
static const char* const body_fields[] = {
    "prompt", "max_tokens", "temperature", "top_k", "top_p", "seed", "stop", "model", "n", "stream",
    "stream_options", "echo", "logprobs", "suffix", "best_of", "presence_penalty", "frequency_penalty",
    "logit_bias"};

static int body_field(const char* name) {
    for (size_t i = 0; i < sizeof(body_fields) / sizeof(body_fields[0]); i++) {
        if (strcmp(name, body_fields[i]) == 0) return 1;
    }
    return 0;
}

static int valid_utf8(const char* s, size_t n) {
    uint32_t cp;
    for (size_t i = 0; i < n;) {
        int len = utf8_decode((const unsigned char*)s + i, n - i, &cp);
        if (len == 0) return 0;
        i += (size_t)len;
    }
    return 1;
}

static int same_params(const GenParams* a, const GenParams* b) {
    return a->max_tokens == b->max_tokens && a->temperature == b->temperature &&
           a->top_k == b->top_k && a->top_p == b->top_p && a->seed == b->seed;
}

static int same_stops(const Request* a, const Request* b) {
    if (a->num_stop != b->num_stop) return 0;
    for (int k = 0; k < a->num_stop; k++) {
        if (a->stop_len[k] != b->stop_len[k] || memcmp(a->stop[k], b->stop[k], a->stop_len[k]) != 0) return 0;
    }
    return 1;
}

static int same_name(const char* a, const char* b) {
    return a == NULL || b == NULL ? a == b : strcmp(a, b) == 0;
}

static int is_json_error(const Completion* c) {
    return strncmp(c->req.error, "not valid JSON: ", 16) == 0;
}

// ---------- one body ----------

// What every body of `size` bytes must read as.
static void check_completion(const Completion* c, int ok, size_t size) {
    const Request* q = &c->req;
    FUZZ_CHECK(ok == (q->error[0] == '\0'), "completion_parse returned %d with the error \"%s\"", ok, q->error);
    if (!ok) {
        for (const char* ch = q->error; *ch != '\0'; ch++) {
            FUZZ_CHECK(*ch >= 0x20 && *ch < 0x7f, "the message has byte 0x%02x: %s", (unsigned char)*ch, q->error);
        }
        FUZZ_CHECK(q->error_field == NULL || body_field(q->error_field), "the error names the field \"%s\", "
                   "which is none of a body's: %s", q->error_field, q->error);
        FUZZ_CHECK(!is_json_error(c) || q->error_field == NULL, "a JSON error names the field \"%s\"",
                   q->error_field);
        return;
    }
    FUZZ_CHECK(q->error_field == NULL, "a valid body names the field \"%s\"", q->error_field);
    FUZZ_CHECK(q->prompt == NULL, "a valid body has a prompt in its Request, which is unused");
    FUZZ_CHECK(c->num_prompts >= 1 && c->num_prompts <= COMPLETION_MAX_PROMPTS, "%d prompts", c->num_prompts);
    for (int i = 0; i < c->num_prompts; i++) {
        size_t n = c->prompt_lens[i];
        FUZZ_CHECK(c->prompts[i] != NULL && n <= size && c->prompts[i][n] == '\0',
                   "prompt %d is missing, longer than the body or not 0-terminated", i);
        FUZZ_CHECK(valid_utf8(c->prompts[i], n), "prompt %d is not UTF-8", i);
    }
    FUZZ_CHECK(c->n >= 1 && c->n <= COMPLETION_MAX_N, "n %d", c->n);
    FUZZ_CHECK((c->stream == 0 || c->stream == 1) && (c->include_usage == 0 || c->include_usage == 1) &&
               (c->seed_given == 0 || c->seed_given == 1),
               "stream %d, include_usage %d, seed_given %d", c->stream, c->include_usage, c->seed_given);
    const GenParams* p = &q->params;
    FUZZ_CHECK(p->max_tokens == defaults.max_tokens || (p->max_tokens >= 1 && p->max_tokens <= REQUEST_MAX_TOKENS),
               "max_tokens %d", p->max_tokens);
    FUZZ_CHECK(p->temperature >= 0.0f && p->temperature <= REQUEST_MAX_TEMPERATURE, "temperature %g", p->temperature);
    FUZZ_CHECK(p->top_k >= 0 && p->top_k <= REQUEST_MAX_TOP_K, "top_k %d", p->top_k);
    FUZZ_CHECK(p->top_p > 0.0f && p->top_p <= 1.0f, "top_p %g", p->top_p);
    FUZZ_CHECK((double)p->seed < REQUEST_SEED_LIMIT, "seed %llu", (unsigned long long)p->seed);
    FUZZ_CHECK(c->seed_given || p->seed == defaults.seed, "seed %llu without seed_given",
               (unsigned long long)p->seed);
    FUZZ_CHECK(q->num_stop >= 0 && q->num_stop <= REQUEST_MAX_STOP, "%d stop strings", q->num_stop);
    for (int k = 0; k < q->num_stop; k++) {
        size_t n = q->stop_len[k];
        FUZZ_CHECK(q->stop[k] != NULL && n >= 1 && n <= REQUEST_MAX_STOP_BYTES && q->stop[k][n] == '\0',
                   "stop string %d is missing, of %zu bytes or not 0-terminated", k, n);
        FUZZ_CHECK(valid_utf8(q->stop[k], n), "stop string %d is not UTF-8", k);
    }
    if (c->model != NULL) {
        size_t n = strlen(c->model);
        FUZZ_CHECK(n <= COMPLETION_MAX_MODEL, "a model name of %zu bytes", n);
        FUZZ_CHECK(valid_utf8(c->model, n), "the model name is not UTF-8");
    }
}

// Whether a and b read alike: the same error and field; for valid bodies, everything. (What a
// refused body leaves in c is not promised: a JSON error can stop a string half-read.)
static int same_completion(const Completion* a, const Completion* b) {
    if (strcmp(a->req.error, b->req.error) != 0 || !same_name(a->req.error_field, b->req.error_field)) return 0;
    if (a->req.error[0] != '\0') return 1;
    if (a->num_prompts != b->num_prompts || a->n != b->n || a->stream != b->stream ||
        a->include_usage != b->include_usage || a->seed_given != b->seed_given) return 0;
    for (int i = 0; i < a->num_prompts; i++) {
        if (a->prompt_lens[i] != b->prompt_lens[i] || memcmp(a->prompts[i], b->prompts[i], a->prompt_lens[i]) != 0) {
            return 0;
        }
    }
    if (!same_params(&a->req.params, &b->req.params) || !same_stops(&a->req, &b->req)) return 0;
    return a->model == NULL || b->model == NULL ? a->model == b->model : strcmp(a->model, b->model) == 0;
}

// ---------- against request_parse ----------

// Whether the body reads here as request_parse reads it: its members, as far as the JSON goes,
// are none of completions.h's own fields and have no prompt that is an array. (Such fields, and
// the values skipped inside them, are read here and skipped there; a text that is not a JSON
// object at all is refused by both.)
static int request_like(const uint8_t* data, size_t size) {
    char message[128];
    JsonReader r = json_reader(data, size, "body", NULL);
    jmp_buf on_error;
    json_catch(&r, &on_error, message, sizeof(message));
    if (setjmp(on_error) != 0) return 1;  // the JSON ended before any such member
    if (json_peek(&r) != '{') return 1;
    r.pos++;
    for (size_t i = 0; json_next(&r, '}', i); i++) {
        char key[32];
        request_key(&r, key, sizeof(key));
        json_expect(&r, ':');
        if (request_lookup(key, completion_field_names, COMPLETION_NUM_FIELDS) >= 0) return 0;
        if (strcmp(key, "prompt") == 0 && json_peek(&r) == '[') return 0;
        json_skip_value(&r);
    }
    return 1;
}

// What completion_parse says where request_parse says msg: the same words, but for the two
// complaints that name a request (here a body) and a prompt that must be a string (here it may
// be an array).
static void in_completion_words(const char* msg, char* out, size_t cap) {
    static const char* const words[][2] = {
        {"a request must be a JSON object, got ", "the body must be a JSON object, got "},
        {"\"prompt\" must be a string, got ", "\"prompt\" must be a string or an array of strings, got "}};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        size_t n = strlen(words[i][0]);
        if (strncmp(msg, words[i][0], n) == 0) {
            snprintf(out, cap, "%s%s", words[i][1], msg + n);
            return;
        }
    }
    snprintf(out, cap, "%s", msg);
}

static void check_as_request(const Completion* c, int ok, const uint8_t* data, size_t size) {
    Request q;
    int q_ok = request_parse(&q, (const char*)data, size, &defaults);
    FUZZ_CHECK(ok == q_ok, "completion_parse %s the body, request_parse %s it (%s)", ok ? "accepts" : "refuses",
               q_ok ? "accepts" : "refuses", ok ? q.error : c->req.error);
    if (ok) {
        FUZZ_CHECK(c->num_prompts == 1 && c->prompt_lens[0] == q.prompt_len &&
                   memcmp(c->prompts[0], q.prompt, q.prompt_len) == 0, "the prompt reads otherwise");
        FUZZ_CHECK(same_params(&c->req.params, &q.params), "the parameters read otherwise");
        FUZZ_CHECK(same_stops(&c->req, &q), "the stop strings read otherwise");
        FUZZ_CHECK(c->n == 1 && !c->stream && !c->include_usage && c->model == NULL,
                   "a body without their fields has n %d, stream %d, include_usage %d, a model", c->n, c->stream,
                   c->include_usage);
    } else {
        char want[sizeof(q.error)];
        in_completion_words(q.error, want, sizeof(want));
        FUZZ_CHECK(strcmp(c->req.error, want) == 0, "completion_parse says \"%s\", request_parse \"%s\"",
                   c->req.error, q.error);
        FUZZ_CHECK(same_name(c->req.error_field, q.error_field), "completion_parse names the field %s, "
                   "request_parse %s", c->req.error_field ? c->req.error_field : "(none)",
                   q.error_field ? q.error_field : "(none)");
    }
    request_free(&q);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_begin(size);
    if (setjmp(fuzz_jump) == 0) {
        Completion c, again;
        int ok = completion_parse(&c, (const char*)data, size, &defaults);
        check_completion(&c, ok, size);

        int ok_again = completion_parse(&again, (const char*)data, size, &defaults);
        FUZZ_CHECK(ok_again == ok && same_completion(&c, &again), "the same body read twice reads otherwise: "
                   "\"%s\", then \"%s\"", c.req.error, again.req.error);
        completion_free(&again);

        // whitespace around: the same, unless the body is not JSON, where it moves the error's byte
        static const char before[] = " \t\n\r", after[] = "\r\n\t ";
        size_t pad = sizeof(before) - 1, padded_n = size + 2 * pad;
        char* padded = (char*)malloc(padded_n);
        memcpy(padded, before, pad);
        if (size > 0) memcpy(padded + pad, data, size);
        memcpy(padded + pad + size, after, pad);
        Completion spaced;
        int ok_spaced = completion_parse(&spaced, padded, padded_n, &defaults);
        check_completion(&spaced, ok_spaced, padded_n);
        if (is_json_error(&c)) {
            FUZZ_CHECK(is_json_error(&spaced), "the body with whitespace around is JSON: \"%s\"", spaced.req.error);
        } else {
            FUZZ_CHECK(ok_spaced == ok && same_completion(&c, &spaced), "the body with whitespace around reads "
                       "otherwise: \"%s\", then \"%s\"", c.req.error, spaced.req.error);
        }
        completion_free(&spaced);
        free(padded);

        if (request_like(data, size)) check_as_request(&c, ok, data, size);
        completion_free(&c);
        FUZZ_CHECK(fuzz_live_n == 0, "%zu allocations are left after completion_free", fuzz_live_n);
    }
    FUZZ_CHECK(!fuzz_refused, "the parser stopped the program (fail) on this body");
    fuzz_end();
    return 0;
}
