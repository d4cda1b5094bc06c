// gpt2/completions.h: the body of a request to OpenAI's completions API (POST /v1/completions)
// for the server (gpt2/server.h); doc/serve.md lists the fields:
//   {"model": "gpt2", "prompt": "Once upon a time", "max_tokens": 32, "temperature": 0.8,
//    "top_p": 0.95, "seed": 7, "stop": ["\n\n"], "n": 2, "stream": true,
//    "stream_options": {"include_usage": true}}
// "prompt" may be an array (a choice each, n each). Generation's fields as gpt2/requests.h reads
// them; unknown fields ignored; fields it cannot honour (echo, logprobs, best_of, ...) only at
// their neutral values: ignoring "echo": true would answer something other than was asked.

#ifndef GPT2_COMPLETIONS_H
#define GPT2_COMPLETIONS_H

#include "requests.h"

#define COMPLETION_MAX_PROMPTS 64   // strings in one request's "prompt"
#define COMPLETION_MAX_N 16         // choices per prompt ("n")
#define COMPLETION_MAX_MODEL 256    // bytes of a "model" name kept (a longer one names no model)

typedef struct {
    Request req;          // params, stop strings, and error, error_field; its prompt unused
    char** prompts;       // (num_prompts) each malloc'd, UTF-8, 0-terminated; may hold 0 bytes
    size_t* prompt_lens;
    int num_prompts;
    int n;                // choices per prompt
    int stream;           // answer as server-sent events, a token at a time
    int include_usage;    // stream_options.include_usage: a last event with the usage
    int seed_given;       // "seed" was given, not null: the choices are reproducible
    char* model;          // "model", malloc'd; NULL when not given
} Completion;

// The fields read here; the others a request may set are gpt2/requests.h's.
enum {
    COMPLETION_FIELD_MODEL, COMPLETION_FIELD_N, COMPLETION_FIELD_STREAM, COMPLETION_FIELD_STREAM_OPTIONS,
    COMPLETION_FIELD_ECHO, COMPLETION_FIELD_LOGPROBS, COMPLETION_FIELD_SUFFIX, COMPLETION_FIELD_BEST_OF,
    COMPLETION_FIELD_PRESENCE_PENALTY, COMPLETION_FIELD_FREQUENCY_PENALTY, COMPLETION_FIELD_LOGIT_BIAS,
    COMPLETION_NUM_FIELDS
};
static const char* const completion_field_names[COMPLETION_NUM_FIELDS] = {
    "model", "n", "stream", "stream_options", "echo", "logprobs", "suffix", "best_of", "presence_penalty",
    "frequency_penalty", "logit_bias"};

static inline void completion_free(Completion* c) {
    for (int i = 0; i < c->num_prompts; i++) free(c->prompts[i]);
    free(c->prompts);
    free(c->prompt_lens);
    free(c->model);
    request_free(&c->req);
    c->prompts = NULL;
    c->prompt_lens = NULL;
    c->num_prompts = 0;
    c->model = NULL;
}

// One string of "prompt" (r at it; in an array or not) joins the prompts, or a complaint.
static inline void completion_prompt_string(JsonReader* r, Completion* c, int in_array) {
    if (json_peek(r) != '"') {
        request_complain_about(&c->req, "prompt", "\"prompt\" must be a string or an array of strings, got %s%s",
                               json_kind_name(json_peek(r)), in_array ? " in the array" : "");
        json_skip_value(r);
        return;
    }
    if (c->num_prompts == COMPLETION_MAX_PROMPTS) {
        request_complain_about(&c->req, "prompt", "\"prompt\" holds at most %d strings", COMPLETION_MAX_PROMPTS);
        json_skip_value(r);
        return;
    }
    if (c->prompts == NULL) {
        c->prompts = (char**)malloc_check(COMPLETION_MAX_PROMPTS * sizeof(char*));
        c->prompt_lens = (size_t*)malloc_check(COMPLETION_MAX_PROMPTS * sizeof(size_t));
    }
    size_t cap = r->n - r->pos;  // room for any string the text holds
    char* s = (char*)malloc_check(cap);
    c->prompts[c->num_prompts] = s;  // owned by c from here, should the string turn out bad JSON
    c->prompt_lens[c->num_prompts++] = 0;
    size_t len = json_string(r, s, cap);
    c->prompts[c->num_prompts - 1] = (char*)realloc_check(s, len + 1);
    c->prompt_lens[c->num_prompts - 1] = len;
}

static inline void completion_prompt(JsonReader* r, Completion* c) {
    int kind = json_peek(r);
    if (kind != '[') {
        completion_prompt_string(r, c, 0);
        return;
    }
    r->pos++;
    for (size_t i = 0; json_next(r, ']', i); i++) completion_prompt_string(r, c, 1);
    if (c->num_prompts == 0) request_complain_about(&c->req, "prompt", "\"prompt\" is an empty array");
}

// A field that must be null or neutral: false (kind 'b'), the number `neutral` ('n') or {} ('o').
static inline void completion_neutral(JsonReader* r, Completion* c, const char* name, char want, double neutral) {
    if (json_accept_null(r)) return;
    int kind = json_peek(r), ok = 0;
    if (want == 'b' && (kind == 't' || kind == 'f')) {
        ok = json_bool(r) == 0;
    } else if (want == 'n' && (kind == '-' || (kind >= '0' && kind <= '9'))) {
        ok = json_number(r) == neutral;
    } else if (want == 'o' && kind == '{') {
        size_t start = r->pos;
        r->pos++;
        ok = !json_next(r, '}', 0);  // {} only
        if (!ok) {
            r->pos = start;
            json_skip_value(r);
        }
    } else {
        json_skip_value(r);
    }
    if (!ok) request_complain_about(&c->req, name, "\"%s\" is not supported by this server (GPT-2 from gpt2/server.h); "
                                    "leave it out", name);
}

// true or false (null: false); a complaint about the body's field `field` names the value `name`.
static inline int completion_bool(JsonReader* r, Completion* c, const char* field, const char* name) {
    if (json_accept_null(r)) return 0;
    int kind = json_peek(r);
    if (kind == 't' || kind == 'f') return json_bool(r);
    json_skip_value(r);
    request_complain_about(&c->req, field, "\"%s\" must be true or false, got %s", name, json_kind_name(kind));
    return 0;
}

static inline void completion_field_value(JsonReader* r, Completion* c, int field) {
    const char* name = completion_field_names[field];
    int kind = json_peek(r);
    switch (field) {
        case COMPLETION_FIELD_MODEL:
            if (json_accept_null(r)) return;
            if (kind != '"') {
                json_skip_value(r);
                request_complain_about(&c->req, name, "\"model\" must be a string, got %s", json_kind_name(kind));
                return;
            }
            {
                uint32_t cp;
                size_t len = 0;
                int cut = 0;  // a character did not fit: the name is kept up to the one before
                c->model = (char*)malloc_check(COMPLETION_MAX_MODEL + 1);
                c->model[0] = '\0';
                json_string_begin(r);
                while (json_string_char(r, &cp)) {  // the name's first characters, enough to compare
                    unsigned char bytes[4];
                    int nb = utf8_encode(cp, bytes);
                    cut = cut || len + (size_t)nb > COMPLETION_MAX_MODEL;
                    if (!cut) {
                        memcpy(c->model + len, bytes, (size_t)nb);
                        len += (size_t)nb;
                        c->model[len] = '\0';
                    }
                }
            }
            return;
        case COMPLETION_FIELD_N: {
            if (json_accept_null(r)) return;
            char got[32];
            int is_number, is_integer;
            double v = request_scalar(r, got, sizeof(got), &is_number, &is_integer);
            if (is_integer && v >= 1 && v <= COMPLETION_MAX_N) c->n = (int)v;
            else request_complain_about(&c->req, name, "\"n\" must be an integer from 1 to %d, got %s", COMPLETION_MAX_N,
                                        got);
            return;
        }
        case COMPLETION_FIELD_STREAM:
            c->stream = completion_bool(r, c, name, name);
            return;
        case COMPLETION_FIELD_STREAM_OPTIONS:
            if (json_accept_null(r)) return;
            if (kind != '{') {
                json_skip_value(r);
                request_complain_about(&c->req, name, "\"stream_options\" must be an object, got %s",
                                       json_kind_name(kind));
                return;
            }
            r->pos++;
            for (size_t i = 0; json_next(r, '}', i); i++) {
                char key[16];
                request_key(r, key, sizeof(key));
                json_expect(r, ':');
                if (strcmp(key, "include_usage") == 0) {  // a complaint names the body's field
                    c->include_usage = completion_bool(r, c, name, "stream_options.include_usage");
                } else {
                    json_skip_value(r);
                }
            }
            return;
        case COMPLETION_FIELD_ECHO: completion_neutral(r, c, name, 'b', 0); return;
        case COMPLETION_FIELD_LOGPROBS:
            if (!json_accept_null(r)) {
                json_skip_value(r);
                request_complain_about(&c->req, name, "\"logprobs\" is not supported by this server; leave it out");
            }
            return;
        case COMPLETION_FIELD_SUFFIX:
            if (!json_accept_null(r)) {
                json_skip_value(r);
                request_complain_about(&c->req, name, "\"suffix\" is not supported by this server (GPT-2 only "
                                       "continues text); leave it out");
            }
            return;
        case COMPLETION_FIELD_BEST_OF: completion_neutral(r, c, name, 'n', 1); return;
        case COMPLETION_FIELD_PRESENCE_PENALTY: completion_neutral(r, c, name, 'n', 0); return;
        case COMPLETION_FIELD_FREQUENCY_PENALTY: completion_neutral(r, c, name, 'n', 0); return;
        case COMPLETION_FIELD_LOGIT_BIAS: completion_neutral(r, c, name, 'o', 0); return;
    }
}

static inline void completion_object(JsonReader* r, Completion* c) {
    int kind = json_peek(r);
    if (kind != '{') {
        json_skip_value(r);
        json_end(r);
        request_complain(&c->req, "the body must be a JSON object, got %s", json_kind_name(kind));
        return;
    }
    r->pos++;
    unsigned seen = 0, seen_ours = 0;  // a bit per field, of requests.h's and of ours
    for (size_t i = 0; json_next(r, '}', i); i++) {
        char key[32];  // longer than any field's name
        request_key(r, key, sizeof(key));
        json_expect(r, ':');
        int field = request_lookup(key, request_field_names, REQUEST_NUM_FIELDS);
        int ours = request_lookup(key, completion_field_names, COMPLETION_NUM_FIELDS);
        const char* name = field >= 0 ? request_field_names[field] : ours >= 0 ? completion_field_names[ours] : NULL;
        if ((field >= 0 && (seen & (1u << field))) || (ours >= 0 && (seen_ours & (1u << ours)))) {
            json_skip_value(r);
            request_complain_about(&c->req, name, "\"%s\" is given twice", name);
        } else if (field == REQUEST_FIELD_PROMPT) {
            seen |= 1u << field;
            completion_prompt(r, c);
        } else if (field >= 0) {
            seen |= 1u << field;
            // "seed": null leaves the seeds to the server, as when it is left out
            if (field == REQUEST_FIELD_SEED) c->seed_given = json_peek(r) != 'n';
            request_field_value(r, &c->req, field);
        } else if (ours >= 0) {
            seen_ours |= 1u << ours;
            completion_field_value(r, c, ours);
        } else {
            json_skip_value(r);
        }
    }
    json_end(r);
    if (!(seen & (1u << REQUEST_FIELD_PROMPT))) request_complain_about(&c->req, "prompt", "\"prompt\" is missing");
}

// Reads the body into c: 1 when valid; else 0 with c->req.error and error_field. Either way
// completion_free(c) frees c.
static inline int completion_parse(Completion* c, const char* body, size_t n, const GenParams* defaults) {
    memset(c, 0, sizeof(*c));
    c->req.params = *defaults;
    c->n = 1;
    static const char bad_json[] = "not valid JSON: ";
    const size_t prefix = sizeof(bad_json) - 1;
    JsonReader r = json_reader(body, n, "request", NULL);
    jmp_buf on_error;
    json_catch(&r, &on_error, c->req.error + prefix, sizeof(c->req.error) - prefix);
    if (setjmp(on_error) == 0) {
        completion_object(&r, c);
    } else {
        memcpy(c->req.error, bad_json, prefix);
        c->req.error_field = NULL;
    }
    return c->req.error[0] == '\0';
}

#endif // GPT2_COMPLETIONS_H
