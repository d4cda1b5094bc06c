// test/json_check.c: reads standard input with one function of gpt2/json.h, as test_json.sh
// names it, and prints what it read; bad input stops it with the reader's one error line.
//
//   json_check value | number | int MAX | string [CAP] | bool | null
//
// value skips one value and prints the byte it ends at; number prints the double (%.17g);
// string prints the bytes in hex (CAP: json_string's room, the NUL included; default all the
// input); int, bool and null print what they read. Then only whitespace may follow.

#include "../gpt2/json.h"

int main(int argc, char** argv) {
    if (argc < 2) fail("usage: json_check value | number | int MAX | string [CAP] | bool | null");
    size_t cap = 1 << 16;
    unsigned char* text = (unsigned char*)malloc_check(cap);
    size_t n = fread(text, 1, cap, stdin);
    if (n == cap) fail("json_check reads at most %zu bytes", cap - 1);
    JsonReader r = json_reader(text, n, "input", NULL);
    const char* kind = argv[1];
    if (strcmp(kind, "value") == 0) {
        json_skip_value(&r);
        printf("ends at byte %zu\n", r.pos);
    } else if (strcmp(kind, "number") == 0) {
        printf("%.17g\n", json_number(&r));
    } else if (strcmp(kind, "int") == 0 && argc == 3) {
        printf("%lld\n", json_int(&r, atoll(argv[2]), "value"));
    } else if (strcmp(kind, "string") == 0) {
        size_t room = argc == 3 ? (size_t)atoll(argv[2]) : n + 1;
        char* s = (char*)malloc_check(room);
        size_t len = json_string(&r, s, room);
        for (size_t i = 0; i < len; i++) printf("%02x", (unsigned char)s[i]);
        printf("\n");
        free(s);
    } else if (strcmp(kind, "bool") == 0) {
        printf("%s\n", json_bool(&r) ? "true" : "false");
    } else if (strcmp(kind, "null") == 0) {
        printf("%s\n", json_accept_null(&r) ? "null" : "not null");
    } else {
        fail("json_check: unknown kind %s", kind);
    }
    json_end(&r);
    free(text);
    return 0;
}
