// test/request_check.c: the reader of requests and the writers of answers (gpt2/requests.h),
// case by case: every field, the defaults, null, unknown fields, each complaint word for word and
// the field it names (error_field; none for text that is not JSON), a \u0000 in the prompt; stop
// strings (a string, an array, none, at the limits of their count and length, of the wrong kind,
// twice); the body of a request to the server (gpt2/completions.h): prompt arrays, n, stream and
// stream_options, model, the fields the server cannot honour at their neutral values and not,
// seeds, which complaint wins; files of requests with blank lines, a last line without '\n', a
// line too long followed by a good one, standard input, a file that cannot be read; and
// json_write_string on control characters and invalid UTF-8, its output read back by
// gpt2/json.h. test_requests.sh builds it as C and as C++ (infer_gpu.cu includes the header).
//
//   request_check DIR    (DIR: where to write the files of requests)
//
// Prints one line per check and then "N passed, N failed"; exits 1 if any failed.

#include <math.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../gpt2/completions.h"

static int passed = 0, failed = 0;

static void check(int ok, const char* what, const char* detail) {
    if (ok) passed++;
    else failed++;
    int shown = !ok && detail != NULL;
    printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what, shown ? ": " : "", shown ? detail : "");
}

static const GenParams defaults = {-1, 1.0f, 0, 1.0f, 1337};

static int same_params(const GenParams* a, const GenParams* b) {
    return a->max_tokens == b->max_tokens && a->temperature == b->temperature &&
           a->top_k == b->top_k && a->top_p == b->top_p && a->seed == b->seed;
}

// ---------- one request ----------

// s for a check's line: control characters and bytes past ASCII as C escapes.
static const char* printable(const char* s, char* out, size_t cap) {
    size_t n = 0;
    for (; *s != '\0' && n + 5 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\n') n += (size_t)snprintf(out + n, cap - n, "\\n");
        else if (c < 0x20 || c >= 0x7f) n += (size_t)snprintf(out + n, cap - n, "\\x%02x", c);
        else out[n++] = (char)c;
    }
    out[n] = '\0';
    return out;
}

// The request in json is valid, and its prompt is the first n bytes of prompt.
static Request parses(const char* json, const char* prompt, size_t n) {
    Request q;
    int ok = request_parse(&q, json, strlen(json), &defaults);
    int right = ok && q.error[0] == '\0' && q.prompt != NULL && q.prompt_len == n &&
                memcmp(q.prompt, prompt, n) == 0 && q.prompt[n] == '\0';
    char what[512];
    check(right, printable(json, what, sizeof(what)), q.error[0] ? q.error : "another prompt");
    return q;
}

static int same_name(const char* a, const char* b) {
    return a == NULL || b == NULL ? a == b : strcmp(a, b) == 0;
}

// The check that json was refused with exactly the complaint want, about the field `field` (NULL:
// none, as for text that is not JSON), from what the reader returned (ok), said (error) and named
// (error_field); rest: whatever else must hold.
static void refusal(const char* json, const char* field, const char* want, int ok, const char* error,
                    const char* error_field, int rest) {
    char what[1024], shown[512], detail[512];
    snprintf(what, sizeof(what), "%s -> %s (%s)", printable(json, shown, sizeof(shown)), want,
             field ? field : "no field");
    snprintf(detail, sizeof(detail), "got \"%s\" (%s)", ok ? "(valid)" : error,
             error_field ? error_field : "no field");
    check(!ok && strcmp(error, want) == 0 && same_name(error_field, field) && rest, what, detail);
}

// The request in json is refused with exactly the complaint want, about the field `field` (NULL:
// none, as for text that is not JSON), and holds nothing: no prompt, no stop strings, the defaults.
static void refused(const char* json, const char* field, const char* want) {
    Request q;
    int ok = request_parse(&q, json, strlen(json), &defaults);
    refusal(json, field, want, ok, q.error, q.error_field,
            q.prompt == NULL && q.num_stop == 0 && same_params(&q.params, &defaults));
    request_free(&q);
}

// {"prompt": "a", "FIELD": VALUE} refused by `refuse` with the complaint "\"FIELD\" RULE, got GOT"
// about FIELD, for each pair VALUE, GOT of cases (up to a NULL).
static void refused_values(void (*refuse)(const char*, const char*, const char*), const char* field,
                           const char* rule, const char* const* cases) {
    for (; cases[0] != NULL; cases += 2) {
        char json[256], want[256];
        snprintf(json, sizeof(json), "{\"prompt\": \"a\", \"%s\": %s}", field, cases[0]);
        snprintf(want, sizeof(want), "\"%s\" %s, got %s", field, rule, cases[1]);
        refuse(json, field, want);
    }
}

static void check_fields(void) {
    printf("--- fields\n");
    Request q = parses("{\"prompt\": \"Once upon a time\", \"max_tokens\": 64, \"temperature\": 0.8, "
                       "\"top_k\": 40, \"top_p\": 0.95, \"seed\": 7}", "Once upon a time", 16);
    GenParams want = {64, 0.8f, 40, 0.95f, 7};
    check(same_params(&q.params, &want), "every field read", NULL);
    request_free(&q);
    q = parses("{\"prompt\": \"hi\"}", "hi", 2);
    check(same_params(&q.params, &defaults), "fields left out take the defaults", NULL);
    request_free(&q);
    q = parses("{\"max_tokens\": null, \"temperature\": null, \"top_k\": null, \"top_p\": null, "
               "\"seed\": null, \"prompt\": \"\"}", "", 0);
    check(same_params(&q.params, &defaults), "null takes the default; an empty prompt is a prompt", NULL);
    request_free(&q);
    q = parses("{\"prompt\": \"a\", \"stop\": [\"\\n\"], \"echo\": false, \"n\": {\"x\": [1, {}]}, "
               "\"model\": \"gpt2\", \"top_k\": 3}", "a", 1);
    check(q.params.top_k == 3, "unknown fields are ignored", NULL);
    request_free(&q);
    q = parses("{\"temperature\": 0, \"top_p\": 1, \"top_k\": 0, \"max_tokens\": 1048576, "
               "\"seed\": 9007199254740991, \"prompt\": \"edges\"}", "edges", 5);
    check(q.params.temperature == 0.0f && q.params.top_p == 1.0f && q.params.max_tokens == 1048576 &&
          q.params.seed == 9007199254740991ULL, "the edges of every range", NULL);
    request_free(&q);
    q = parses("{\"temperature\": 100, \"top_p\": 1e-30, \"max_tokens\": 1, \"prompt\": \"x\"}", "x", 1);
    check(q.params.temperature == 100.0f && q.params.top_p > 0.0f && q.params.max_tokens == 1,
          "the other edges", NULL);
    request_free(&q);
    q = parses("{\"\\u0074op_k\": 5, \"top_k\\u0000\": -1, \"prompt\": \"x\"}", "x", 1);
    check(q.params.top_k == 5, "keys compared as decoded (\\u0074op_k is top_k, top_k\\u0000 is not)", NULL);
    request_free(&q);
    q = parses(" \t{\"prompt\":\n\"x\"}\r\n ", "x", 1);
    request_free(&q);
    q = parses("{\"prompt\": \"a\\u0000b\"}", "a\0b", 3);
    check(q.prompt_len == 3 && strlen(q.prompt) == 1, "\\u0000 in the prompt is a 0 byte, counted", NULL);
    request_free(&q);
    q = parses("{\"prompt\": \"caf\xc3\xa9 \\ud83d\\ude00\\n\\\"\"}", "caf\xc3\xa9 \xf0\x9f\x98\x80\n\"", 12);
    request_free(&q);
}

static void check_complaints(void) {
    printf("--- complaints\n");
    static const char* const max_tokens[] = {
        "\"64\"", "a string", "-3", "-3", "0", "0", "-0", "-0", "1048577", "1048577", "64.0", "64.0",
        "6.4e1", "6.4e1", "123456789012345678901234567890123456789", "1234567890123456789012345678...",
        "[64]", "an array", NULL};
    refused_values(refused, "max_tokens", "must be an integer from 1 to 1048576", max_tokens);
    static const char* const temperature[] = {
        "true", "true", "-0.5", "-0.5", "100.5", "100.5", "\"hot\"", "a string", NULL};
    refused_values(refused, "temperature", "must be a number from 0 to 100", temperature);
    static const char* const top_k[] = {"-1", "-1", "2.5", "2.5", "1e6", "1e6", "{}", "an object", NULL};
    refused_values(refused, "top_k", "must be an integer from 0 to 1048576", top_k);
    static const char* const top_p[] = {
        "0", "0", "1.01", "1.01", "-0.5", "-0.5", "1e-50", "1e-50", "false", "false", NULL};
    refused_values(refused, "top_p", "must be a number in (0, 1]", top_p);
    static const char* const seed[] = {
        "-1", "-1", "9007199254740992", "9007199254740992", "7.5", "7.5", "\"7\"", "a string", NULL};
    refused_values(refused, "seed", "must be a non-negative integer below 2^53", seed);
    refused("{}", "prompt", "\"prompt\" is missing");
    refused("{\"max_tokens\": 5, \"Prompt\": \"a\"}", "prompt", "\"prompt\" is missing");
    refused("{\"prompt\": 42}", "prompt", "\"prompt\" must be a string, got a number");
    refused("{\"prompt\": null}", "prompt", "\"prompt\" must be a string, got null");
    refused("{\"prompt\": [\"a\", \"b\"]}", "prompt", "\"prompt\" must be a string, got an array");
    refused("{\"prompt\": \"a\", \"top_k\": 1, \"top_k\": 2}", "top_k", "\"top_k\" is given twice");
    refused("{\"prompt\": \"a\", \"prompt\": \"b\"}", "prompt", "\"prompt\" is given twice");
    refused("[{\"prompt\": \"a\"}]", NULL, "a request must be a JSON object, got an array");
    refused("\"a\"", NULL, "a request must be a JSON object, got a string");
    refused("42", NULL, "a request must be a JSON object, got a number");
    refused("null", NULL, "a request must be a JSON object, got null");
    // the first complaint in the text is the one given, "missing" last
    refused("{\"max_tokens\": 0, \"top_k\": -1}", "max_tokens",
            "\"max_tokens\" must be an integer from 1 to 1048576, got 0");
    // text that is not JSON: that first, whatever came before
    static const char* const not_json[] = {  // pairs: the text, the complaint after "not valid JSON: "
        "{\"prompt\": \"a\", \"seed\": 1e999}", "number out of range (beyond 1.8e308) at byte 24",
        "{\"prompt\": \"a\"} x", "unexpected text after the JSON value at byte 16",
        "{\"prompt\": \"a\"}{}", "unexpected text after the JSON value at byte 15",
        "{\"max_tokens\": 0, \"prompt\": \"a\"", "expected ',' or '}' at byte 31",
        "{\"prompt\": \"a\xff\"}", "invalid UTF-8 in string at byte 13",
        "{\"prompt\": \"a\xed\xa0\x80\"}", "invalid UTF-8 in string at byte 13",
        "{\"prompt\": \"a\tb\"}", "control character in string at byte 13",
        "{\"prompt\": \"\\ud800\"}", "lone surrogate in \\u escape at byte 18",
        "{\"prompt\": \"abc", "unterminated string at byte 15",
        "{\"prompt\": NaN}", "expected a value at byte 11",
        "{\"prompt\": \"a\", \"top_p\": .5}", "expected a value at byte 25",
        "{'prompt': 'a'}", "expected a string at byte 1",
        "hello", "expected a value at byte 0",
        "", "expected a value at byte 0",
        "{\"prompt\": \"a\", \"x\": [[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]}",
        "nested too deeply (more than 16 levels) at byte 37",
        NULL};
    for (const char* const* t = not_json; *t != NULL; t += 2) {
        char want[128];
        snprintf(want, sizeof(want), "not valid JSON: %s", t[1]);
        refused(t[0], NULL, want);
    }
}

// ---------- stop strings ----------

// The request in json (prompt "a") is valid, with the num stop strings want (of want_len bytes).
static void stops(const char* json, int num, const char* const* want, const size_t* want_len, const char* what) {
    Request q = parses(json, "a", 1);
    int right = q.num_stop == num;
    for (int k = 0; right && k < num; k++) {
        right = q.stop_len[k] == want_len[k] && memcmp(q.stop[k], want[k], want_len[k]) == 0 &&
                q.stop[k][want_len[k]] == '\0';
    }
    char detail[64];
    snprintf(detail, sizeof(detail), "%d stop strings, or others", q.num_stop);
    check(right, what, detail);
    request_free(&q);
}

// {"prompt": "a", "stop": ["..."]} with a stop string of n copies of the UTF-8 character ch.
static const char* long_stop(char* json, size_t cap, const char* ch, int n) {
    size_t len = (size_t)snprintf(json, cap, "{\"prompt\": \"a\", \"stop\": [\"");
    for (int i = 0; i < n; i++) len += (size_t)snprintf(json + len, cap - len, "%s", ch);
    snprintf(json + len, cap - len, "\"]}");
    return json;
}

static void check_stop(void) {
    printf("--- stop strings\n");
    static const char* const one[] = {"\n\n"};
    static const size_t one_len[] = {2};
    stops("{\"prompt\": \"a\", \"stop\": \"\\n\\n\"}", 1, one, one_len, "a string is one stop string");
    static const char* const four[] = {"a", "THE END", "\0", "caf\xc3\xa9"};
    static const size_t four_len[] = {1, 7, 1, 5};
    stops("{\"prompt\": \"a\", \"stop\": [\"a\", \"THE END\", \"\\u0000\", \"caf\\u00e9\"]}", 4, four, four_len,
          "an array of 4, the most (\\u0000 is a byte, \\u00e9 two)");
    stops("{\"prompt\": \"a\", \"stop\": null}", 0, NULL, NULL, "null: none");
    stops("{\"prompt\": \"a\", \"stop\": []}", 0, NULL, NULL, "an empty array: none");
    char json[2048], x256[257], e256[257];
    memset(x256, 'x', 256);
    for (int i = 0; i < 128; i++) memcpy(e256 + 2 * i, "\xc3\xa9", 2);
    const char* const longest[] = {x256};
    const char* const longest_e[] = {e256};
    static const size_t len256[] = {256};
    stops(long_stop(json, sizeof(json), "x", 256), 1, longest, len256, "256 bytes: the longest");
    stops(long_stop(json, sizeof(json), "\\u00e9", 128), 1, longest_e, len256, "128 characters of 2 bytes: 256 bytes");
    refused(long_stop(json, sizeof(json), "x", 257), "stop", "a stop string must have 1 to 256 bytes, got 257");
    refused(long_stop(json, sizeof(json), "\xc3\xa9", 129), "stop", "a stop string must have 1 to 256 bytes, got 258");
    refused("{\"prompt\": \"a\", \"stop\": \"\"}", "stop", "a stop string must have 1 to 256 bytes, got 0");
    refused("{\"prompt\": \"a\", \"stop\": [\"b\", \"\"]}", "stop", "a stop string must have 1 to 256 bytes, got 0");
    refused("{\"prompt\": \"a\", \"stop\": [\"1\", \"2\", \"3\", \"4\", \"5\"]}", "stop",
            "\"stop\" holds at most 4 strings");
    refused("{\"prompt\": \"a\", \"stop\": 5}", "stop",
            "\"stop\" must be a string or an array of at most 4 strings, got a number");
    refused("{\"prompt\": \"a\", \"stop\": true}", "stop",
            "\"stop\" must be a string or an array of at most 4 strings, got true");
    refused("{\"prompt\": \"a\", \"stop\": {\"a\": \"b\"}}", "stop",
            "\"stop\" must be a string or an array of at most 4 strings, got an object");
    refused("{\"prompt\": \"a\", \"stop\": [\"b\", 1]}", "stop",
            "\"stop\" must be a string or an array of at most 4 strings, got a number");
    refused("{\"prompt\": \"a\", \"stop\": [[\"b\"]]}", "stop",
            "\"stop\" must be a string or an array of at most 4 strings, got an array");
    refused("{\"prompt\": \"a\", \"stop\": [null]}", "stop",
            "\"stop\" must be a string or an array of at most 4 strings, got null");
    refused("{\"prompt\": \"a\", \"stop\": \"b\", \"stop\": [\"c\"]}", "stop", "\"stop\" is given twice");
    refused("{\"stop\": \"\", \"top_k\": -1, \"prompt\": \"a\"}", "stop",
            "a stop string must have 1 to 256 bytes, got 0");
    refused("{\"prompt\": \"a\", \"stop\": [\"b\", \"c", NULL, "not valid JSON: unterminated string at byte 32");
}

// ---------- bodies of the server's completions API (gpt2/completions.h) ----------

static const GenParams server_defaults = {16, 1.0f, 0, 1.0f, 1337};  // the server's max_tokens, 16

// The body in json is valid; c is the caller's to look at and to free (completion_free).
static Completion body(const char* json) {
    Completion c;
    int ok = completion_parse(&c, json, strlen(json), &server_defaults);
    char what[512];
    check(ok && c.req.error[0] == '\0' && c.req.error_field == NULL, printable(json, what, sizeof(what)),
          c.req.error);
    return c;
}

// The body in json is refused with exactly the complaint want, about the field `field` (NULL: none).
static void body_refused(const char* json, const char* field, const char* want) {
    Completion c;
    int ok = completion_parse(&c, json, strlen(json), &server_defaults);
    refusal(json, field, want, ok, c.req.error, c.req.error_field, 1);
    completion_free(&c);
}

// A valid body and the n, stream and include_usage it must give; what: the check's line.
typedef struct {
    const char* json;
    int n, stream, include_usage;
    const char* what;
} Gives;

static void bodies_give(const Gives* cases, int count) {
    for (int i = 0; i < count; i++) {
        Completion c = body(cases[i].json);
        check(c.n == cases[i].n && c.stream == cases[i].stream && c.include_usage == cases[i].include_usage,
              cases[i].what, NULL);
        completion_free(&c);
    }
}

static void check_completions(void) {
    printf("--- bodies of the completions API\n");
    Completion c = body("{\"prompt\": \"Once\"}");
    check(c.num_prompts == 1 && c.prompt_lens[0] == 4 && strcmp(c.prompts[0], "Once") == 0 && c.n == 1 &&
          !c.stream && !c.include_usage && !c.seed_given && c.model == NULL && c.req.num_stop == 0 &&
          same_params(&c.req.params, &server_defaults), "a prompt alone: one choice, the defaults (max_tokens 16)",
          NULL);
    completion_free(&c);
    c = body("{\"model\": \"gpt2\", \"prompt\": \"Once\", \"max_tokens\": 32, \"temperature\": 0.8, \"top_k\": 40, "
             "\"top_p\": 0.95, \"seed\": 7, \"stop\": [\"\\n\\n\", \"END\"], \"n\": 2, \"stream\": true, "
             "\"stream_options\": {\"include_usage\": true}}");
    GenParams every = {32, 0.8f, 40, 0.95f, 7};
    check(c.model != NULL && strcmp(c.model, "gpt2") == 0 && same_params(&c.req.params, &every) &&
          c.seed_given && c.n == 2 && c.stream && c.include_usage && c.req.num_stop == 2 &&
          strcmp(c.req.stop[1], "END") == 0, "every field read", NULL);
    completion_free(&c);

    // prompt
    c = body("{\"prompt\": [\"a\", \"bc\", \"\"]}");
    check(c.num_prompts == 3 && strcmp(c.prompts[0], "a") == 0 && c.prompt_lens[1] == 2 &&
          strcmp(c.prompts[1], "bc") == 0 && c.prompt_lens[2] == 0, "an array: a prompt each, \"\" one too", NULL);
    completion_free(&c);
    char json[1024];
    size_t len = (size_t)snprintf(json, sizeof(json), "{\"prompt\": [\"0\"");
    for (int i = 1; i < COMPLETION_MAX_PROMPTS; i++) {
        len += (size_t)snprintf(json + len, sizeof(json) - len, ", \"%d\"", i);
    }
    snprintf(json + len, sizeof(json) - len, "]}");
    c = body(json);
    check(c.num_prompts == 64 && strcmp(c.prompts[63], "63") == 0, "64 prompts: the most", NULL);
    completion_free(&c);
    snprintf(json + len, sizeof(json) - len, ", \"64\"]}");
    body_refused(json, "prompt", "\"prompt\" holds at most 64 strings");
    body_refused("{\"prompt\": []}", "prompt", "\"prompt\" is an empty array");
    body_refused("{\"prompt\": [\"a\", 1]}", "prompt",
                 "\"prompt\" must be a string or an array of strings, got a number in the array");
    body_refused("{\"prompt\": 42}", "prompt", "\"prompt\" must be a string or an array of strings, got a number");
    body_refused("{\"prompt\": null}", "prompt", "\"prompt\" must be a string or an array of strings, got null");
    body_refused("{\"n\": 2}", "prompt", "\"prompt\" is missing");
    body_refused("{\"prompt\": \"a\", \"prompt\": [\"b\"]}", "prompt", "\"prompt\" is given twice");

    // n
    static const Gives n_ok[] = {{"{\"prompt\": \"a\", \"n\": 1}", 1, 0, 0, "n 1, and null: 1"},
                                 {"{\"prompt\": \"a\", \"n\": 16}", 16, 0, 0, "n 16: the most"},
                                 {"{\"prompt\": \"a\", \"n\": null}", 1, 0, 0, "n 1, and null: 1"}};
    bodies_give(n_ok, 3);
    static const char* const bad_n[] = {"0", "0", "17", "17", "1.5", "1.5", "\"2\"", "a string", NULL};
    refused_values(body_refused, "n", "must be an integer from 1 to 16", bad_n);
    body_refused("{\"prompt\": \"a\", \"n\": 1, \"n\": 2}", "n", "\"n\" is given twice");

    // stream and stream_options
    static const Gives streams[] = {
        {"{\"prompt\": \"a\", \"stream\": true}", 1, 1, 0, "stream true"},
        {"{\"prompt\": \"a\", \"stream\": false}", 1, 0, 0, "stream false, and null: not streamed"},
        {"{\"prompt\": \"a\", \"stream\": null}", 1, 0, 0, "stream false, and null: not streamed"}};
    bodies_give(streams, 3);
    body_refused("{\"prompt\": \"a\", \"stream\": \"yes\"}", "stream",
                 "\"stream\" must be true or false, got a string");
    body_refused("{\"prompt\": \"a\", \"stream\": 1}", "stream", "\"stream\" must be true or false, got a number");
    static const Gives options[] = {
        {"{\"prompt\": \"a\", \"stream\": true, \"stream_options\": {\"include_usage\": true}}", 1, 1, 1,
         "include_usage true"},
        {"{\"prompt\": \"a\", \"stream\": true, \"stream_options\": {}}", 1, 1, 0, "{}, null, false: no usage"},
        {"{\"prompt\": \"a\", \"stream_options\": null}", 1, 0, 0, "{}, null, false: no usage"},
        {"{\"prompt\": \"a\", \"stream_options\": {\"other\": [1], \"include_usage\": false}}", 1, 0, 0,
         "{}, null, false: no usage"}};
    bodies_give(options, 4);
    body_refused("{\"prompt\": \"a\", \"stream_options\": []}", "stream_options",
                 "\"stream_options\" must be an object, got an array");
    body_refused("{\"prompt\": \"a\", \"stream_options\": {\"include_usage\": \"x\"}}", "stream_options",
                 "\"stream_options.include_usage\" must be true or false, got a string");

    // model
    c = body("{\"prompt\": \"a\", \"model\": null}");
    check(c.model == NULL, "model null: none given", NULL);
    completion_free(&c);
    len = (size_t)snprintf(json, sizeof(json), "{\"prompt\": \"a\", \"model\": \"");
    memset(json + len, 'm', 255);
    snprintf(json + len + 255, sizeof(json) - len - 255, "\\u00e9tc\"}");  // e-acute across byte 256
    c = body(json);
    check(c.model != NULL && strlen(c.model) == 255 && c.model[254] == 'm',
          "a model name of 259 bytes is kept to the 255 before the character across byte 256", NULL);
    completion_free(&c);
    body_refused("{\"prompt\": \"a\", \"model\": 5}", "model", "\"model\" must be a string, got a number");

    // the fields the server cannot honour: their neutral values, and others
    const char* neutral = "{\"prompt\": \"a\", \"echo\": false, \"logprobs\": null, \"suffix\": null, \"best_of\": 1, "
                          "\"presence_penalty\": 0, \"frequency_penalty\": 0.0, \"logit_bias\": {}}";
    c = body(neutral);
    completion_free(&c);
    body_refused("{\"prompt\": \"a\", \"echo\": true}", "echo",
                 "\"echo\" is not supported by this server (GPT-2 from gpt2/server.h); leave it out");
    body_refused("{\"prompt\": \"a\", \"logprobs\": 1}", "logprobs",
                 "\"logprobs\" is not supported by this server; leave it out");
    body_refused("{\"prompt\": \"a\", \"suffix\": \"x\"}", "suffix",
                 "\"suffix\" is not supported by this server (GPT-2 only continues text); leave it out");
    body_refused("{\"prompt\": \"a\", \"best_of\": 2}", "best_of",
                 "\"best_of\" is not supported by this server (GPT-2 from gpt2/server.h); leave it out");
    body_refused("{\"prompt\": \"a\", \"presence_penalty\": 0.5}", "presence_penalty",
                 "\"presence_penalty\" is not supported by this server (GPT-2 from gpt2/server.h); leave it out");
    body_refused("{\"prompt\": \"a\", \"frequency_penalty\": -1}", "frequency_penalty",
                 "\"frequency_penalty\" is not supported by this server (GPT-2 from gpt2/server.h); leave it out");
    body_refused("{\"prompt\": \"a\", \"logit_bias\": {\"1\": 2}}", "logit_bias",
                 "\"logit_bias\" is not supported by this server (GPT-2 from gpt2/server.h); leave it out");
    // the neutral value of the field's own kind only: 0 is no echo's false, true no best_of's 1
    body_refused("{\"prompt\": \"a\", \"echo\": 0}", "echo",
                 "\"echo\" is not supported by this server (GPT-2 from gpt2/server.h); leave it out");
    body_refused("{\"prompt\": \"a\", \"best_of\": true}", "best_of",
                 "\"best_of\" is not supported by this server (GPT-2 from gpt2/server.h); leave it out");
    body_refused("{\"prompt\": \"a\", \"logit_bias\": false}", "logit_bias",
                 "\"logit_bias\" is not supported by this server (GPT-2 from gpt2/server.h); leave it out");
    body_refused("{\"prompt\": \"a\", \"presence_penalty\": []}", "presence_penalty",
                 "\"presence_penalty\" is not supported by this server (GPT-2 from gpt2/server.h); leave it out");

    // unknown fields, seeds, requests.h's fields in a body
    c = body("{\"prompt\": \"a\", \"user\": \"u\", \"metadata\": {\"k\": [1, {\"x\": []}], \"v\": null}, "
             "\"tools\": [[], {}], \"max_tokens\": 3}");
    check(c.req.params.max_tokens == 3 && c.n == 1, "unknown fields are ignored, nested objects and arrays too", NULL);
    completion_free(&c);
    c = body("{\"prompt\": \"a\", \"seed\": 0}");
    check(c.seed_given && c.req.params.seed == 0, "seed 0: given", NULL);
    completion_free(&c);
    c = body("{\"prompt\": \"a\", \"seed\": null}");
    check(!c.seed_given && c.req.params.seed == server_defaults.seed, "seed null: not given, the default", NULL);
    completion_free(&c);
    body_refused("{\"prompt\": \"a\", \"max_tokens\": 0}", "max_tokens",
                 "\"max_tokens\" must be an integer from 1 to 1048576, got 0");
    body_refused("{\"prompt\": \"a\", \"stop\": [\"1\", \"2\", \"3\", \"4\", \"5\"]}", "stop",
                 "\"stop\" holds at most 4 strings");
    body_refused("[{\"prompt\": \"a\"}]", NULL, "the body must be a JSON object, got an array");

    // the first complaint in the text is the one given, "missing" last; a JSON error before all
    body_refused("{\"n\": 0, \"echo\": true, \"prompt\": \"a\"}", "n", "\"n\" must be an integer from 1 to 16, got 0");
    body_refused("{\"echo\": true, \"n\": 0, \"prompt\": \"a\"}", "echo",
                 "\"echo\" is not supported by this server (GPT-2 from gpt2/server.h); leave it out");
    body_refused("{\"n\": 0}", "n", "\"n\" must be an integer from 1 to 16, got 0");
    body_refused("{\"n\": 0, \"prompt\": \"a\"} x", NULL,
                 "not valid JSON: unexpected text after the JSON value at byte 24");
    body_refused("{\"echo\": true, \"prompt\": [\"a\", \"b", NULL, "not valid JSON: unterminated string at byte 33");
    body_refused("", NULL, "not valid JSON: expected a value at byte 0");
}

// ---------- files of requests ----------

static const char* dir;

static const char* write_file(const char* name, const char* text, size_t n) {
    static char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE* f = fopen_check(path, "wb");
    fwrite_check(text, 1, n, f, path);
    fclose_check(f, path);
    return path;
}

// Reads every request of the reader and prints each as "id:line:prompt" or "id:line:error"
// into got, separated by " | "; then "(and more)" if a read after the end does not say end.
static void read_all(RequestReader* rr, char* got, size_t cap) {
    Request q;
    size_t len = 0;
    got[0] = '\0';
    while (request_read(rr, &q, &defaults)) {
        snprintf(got + len, cap - len, "%s%d:%d:%s", len ? " | " : "", q.id, q.line,
                 q.error[0] ? q.error : q.prompt);
        len = strlen(got);  // the text cut to fit: no more than cap - 1
        request_free(&q);
    }
    if (request_read(rr, &q, &defaults)) snprintf(got + len, cap - len, " (and more)");
}

static void reads(const char* name, const char* text, const char* want) {
    RequestReader rr = request_reader_open(write_file(name, text, strlen(text)));
    char got[4096], what[256];
    read_all(&rr, got, sizeof(got));
    request_reader_close(&rr);
    snprintf(what, sizeof(what), "file %s: %s", name, want);
    check(strcmp(got, want) == 0, what, got);
}

// Runs open_and_read(path) in a child process: it must exit 1 with one line "error: ...want...".
static void unreadable(const char* path, const char* want) {
    char err_path[4096], line[1024] = "", what[512];
    snprintf(err_path, sizeof(err_path), "%s/stderr", dir);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (freopen(err_path, "w", stderr) == NULL) _exit(2);
        RequestReader rr = request_reader_open(path);
        Request q;
        while (request_read(&rr, &q, &defaults)) request_free(&q);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    FILE* f = fopen_check(err_path, "rb");
    size_t n = fread(line, 1, sizeof(line) - 1, f);
    fclose_check(f, err_path);
    line[n] = '\0';
    int one_line = n > 0 && strchr(line, '\n') == line + n - 1;
    snprintf(what, sizeof(what), "%s: exit 1, one line with '%s'", path, want);
    check(WIFEXITED(status) && WEXITSTATUS(status) == 1 && one_line && strncmp(line, "error: ", 7) == 0 &&
          strstr(line, want) != NULL, what, line);
}

static void check_files(void) {
    printf("--- files of requests\n");
    reads("good", "{\"prompt\": \"a\"}\n{\"prompt\": \"b\"}\n", "0:1:a | 1:2:b");
    reads("blank_lines", "\n{\"prompt\": \"a\"}\n\n  \t\r\n{\"prompt\": \"b\"}\r\n\n",
          "0:2:a | 1:5:b");
    reads("no_final_newline", "{\"prompt\": \"a\"}\n{\"prompt\": \"b\"}", "0:1:a | 1:2:b");
    reads("final_blank_without_newline", "{\"prompt\": \"a\"}\n   ", "0:1:a");
    reads("bad_lines_answered", "{\"prompt\": \"a\"}\nnot json\n{\"max_tokens\": 3}\n{\"prompt\": \"d\"}\n",
          "0:1:a | 1:2:not valid JSON: expected a value at byte 0 | 2:3:\"prompt\" is missing | 3:4:d");
    reads("empty", "", "");
    reads("only_blank", "\n\n \n", "");
    reads("one_request_over_two_lines", "{\"prompt\":\n\"a\"}\n",
          "0:1:not valid JSON: expected a value at byte 10 | "
          "1:2:not valid JSON: unexpected text after the JSON value at byte 3");

    // the limit of 4 MiB: a longer line is an error record, and the next line is read as usual
    size_t big = REQUEST_MAX_LINE + 100;
    char* text = (char*)malloc_check(big + 64);
    size_t n = 0;
    n += (size_t)sprintf(text, "{\"prompt\": \"");
    memset(text + n, 'x', big - n - 2);
    n = big - 2;
    n += (size_t)sprintf(text + n, "\"}\n{\"prompt\": \"after\"}\n");
    RequestReader rr = request_reader_open(write_file("long_line", text, n));
    char got[4096];
    read_all(&rr, got, sizeof(got));
    request_reader_close(&rr);
    check(strcmp(got, "0:1:the line is longer than 4194304 bytes | 1:2:after") == 0,
          "a line of 4 MiB + 100 bytes is an error, the next one a request", got);
    // a line of exactly the limit is read; one byte more is not; a long blank line is no request
    const char* lines = "{\"prompt\":\"1234\"}\n{\"prompt\":\"12345\"}\n                         \n{\"prompt\":\"x\"}";
    rr = request_reader_open(write_file("limit", lines, strlen(lines)));
    rr.max_line = 17;
    read_all(&rr, got, sizeof(got));
    request_reader_close(&rr);
    check(strcmp(got, "0:1:1234 | 1:2:the line is longer than 17 bytes | 2:4:x") == 0,
          "a limit of 17 bytes: a line of 17 is read, of 18 refused, a blank of 25 skipped", got);
    free(text);

    // standard input
    const char* path = write_file("stdin", "{\"prompt\": \"in\"}\n", 17);
    if (freopen(path, "rb", stdin) == NULL) fail("cannot reopen standard input from %s", path);
    rr = request_reader_open("-");
    read_all(&rr, got, sizeof(got));
    request_reader_close(&rr);
    check(strcmp(got, "0:1:in") == 0, "\"-\" reads standard input", got);

    char missing[4096];
    snprintf(missing, sizeof(missing), "%s/no_such_file", dir);
    unreadable(missing, "cannot open");
    unreadable(dir, "read error");  // a directory opens, but cannot be read
}

// ---------- answers ----------

// Reads the JSON string in text back with gpt2/json.h (errors caught): its bytes into out, their
// number into *n; returns 0 with the reader's complaint in out if it is not one JSON string.
static int string_of(const char* text, char* out, size_t cap, size_t* n) {
    JsonReader r = json_reader(text, strlen(text), "string", NULL);
    jmp_buf on_error;
    json_catch(&r, &on_error, out, cap);
    if (setjmp(on_error) != 0) return 0;
    *n = json_string(&r, out, cap);
    json_end(&r);
    return 1;
}

// json_write_string of the n bytes of s writes want (its quotes included), and reads back as
// back_n bytes of back.
static void writes(const char* what, const char* s, size_t n, const char* want, const char* back,
                   size_t back_n) {
    char* buf = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&buf, &len);
    if (f == NULL) fail("open_memstream: %s", strerror(errno));
    json_write_string(f, (const unsigned char*)s, n);
    fclose_check(f, "memory stream");  // buf now holds what was written
    char got[1024], detail[2200];
    size_t got_n = 0;
    int parsed = string_of(buf, got, sizeof(got), &got_n);
    snprintf(detail, sizeof(detail), "wrote %s%s%s", buf, parsed ? "" : ", which reads back as ",
             parsed ? "" : got);
    check(strcmp(buf, want) == 0 && parsed && got_n == back_n && memcmp(got, back, back_n) == 0,
          what, detail);
    free(buf);
}

static void check_answers(void) {
    printf("--- answers\n");
    writes("escapes", "a\"b\\c\nd\te\r\b\f\x01\x1f\x7f/", 16,
           "\"a\\\"b\\\\c\\nd\\te\\r\\b\\f\\u0001\\u001f\x7f/\"", "a\"b\\c\nd\te\r\b\f\x01\x1f\x7f/", 16);
    writes("a 0 byte", "a\0b", 3, "\"a\\u0000b\"", "a\0b", 3);
    writes("valid UTF-8 as it is", "caf\xc3\xa9 \xf0\x9f\x98\x80", 10, "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"",
           "caf\xc3\xa9 \xf0\x9f\x98\x80", 10);
    // U+FFFD is EF BF BD
    writes("a character cut short at the end is one U+FFFD", "ab\xf0\x9f\x98", 5, "\"ab\xef\xbf\xbd\"",
           "ab\xef\xbf\xbd", 5);
    writes("a character cut short before another", "\xe2\x82" "a", 3, "\"\xef\xbf\xbd" "a\"", "\xef\xbf\xbd" "a", 4);
    writes("stray continuation bytes: one U+FFFD each", "\x80\x80", 2, "\"\xef\xbf\xbd\xef\xbf\xbd\"",
           "\xef\xbf\xbd\xef\xbf\xbd", 6);
    writes("an overlong form, a surrogate, past U+10FFFF, 0xFF: one U+FFFD per byte",
           "\xc0\x80\xed\xa0\x80\xf4\x90\xff", 8,
           "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"",
           "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 24);
    writes("E0 A0 and F4 8F begin characters: one U+FFFD each", "\xe0\xa0" "x" "\xf4\x8f\xbf", 6,
           "\"\xef\xbf\xbdx\xef\xbf\xbd\"", "\xef\xbf\xbdx\xef\xbf\xbd", 7);

    char* buf = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&buf, &len);
    Request q;
    request_parse(&q, "{\"max_tokens\": 3}", 17, &defaults);
    q.id = 3;
    q.line = 4;
    request_write_error(f, &q);
    fclose_check(f, "memory stream");  // buf now holds what was written
    check(strcmp(buf, "{\"id\": 3, \"line\": 4, \"error\": \"\\\"prompt\\\" is missing\"}\n") == 0,
          "request_write_error", buf);
    free(buf);

    f = open_memstream(&buf, &len);
    request_write_result(f, 7, (const unsigned char*)"x\n\xe2\x82", 4, 5, 2, "length", 12.25, NAN);
    fclose_check(f, "memory stream");  // buf now holds what was written
    check(strcmp(buf, "{\"id\": 7, \"text\": \"x\\n\xef\xbf\xbd\", \"prompt_tokens\": 5, \"completion_tokens\": 2, "
                      "\"finish_reason\": \"length\", \"ttft_ms\": 12.250, \"total_ms\": null}\n") == 0,
          "request_write_result (a time that is NAN is null)", buf);
    free(buf);
}

int main(int argc, char** argv) {
    if (argc != 2) fail("usage: request_check DIR");
    dir = argv[1];
    check_fields();
    check_complaints();
    check_stop();
    check_completions();
    check_files();
    check_answers();
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
