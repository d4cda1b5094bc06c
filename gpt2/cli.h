// gpt2/cli.h: the command line of train_cpu, train_gpu and infer: "-x VALUE" pairs, each value
// checked where it is read, so that a bad one stops the program before anything runs.

#ifndef GPT2_CLI_H
#define GPT2_CLI_H

#include <math.h>
#include "io.h"

// The value of the flag argv[i], or NULL for -h and --help (the caller prints its usage). A word
// that is not a flag (-x, or --word), or a flag without a value, is an error.
static inline const char* flag_value(int argc, char** argv, int i) {
    const char* flag = argv[i];
    if (strcmp(flag, "-h") == 0 || strcmp(flag, "--help") == 0) return NULL;
    int is_flag = flag[0] == '-' && (strlen(flag) == 2 || (flag[1] == '-' && flag[2] != '\0'));
    if (!is_flag) fail("unexpected argument '%s' (see -h)", flag);
    if (i + 1 >= argc) fail("%s needs a value (see -h)", flag);
    return argv[i + 1];
}

static inline int parse_int_arg(const char* flag, const char* s, int min) {
    char* end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || end == s || v < min || v > 1000000000L) {
        fail("%s expects an integer >= %d, got '%s'", flag, min, s);
    }
    return (int)v;
}

static inline float parse_float_arg(const char* flag, const char* s, float min) {
    char* end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno != 0 || *end != '\0' || end == s || !(v >= min) || isinf(v)) {
        fail("%s expects a number >= %g, got '%s'", flag, min, s);
    }
    return v;
}

#endif // GPT2_CLI_H
