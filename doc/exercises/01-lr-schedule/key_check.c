// Part of exercise 1's check (check.sh compiles it): the options of train_cpu that every process
// of a data-parallel run must share are compared as the text of train_config_key (gpt2/run.h), so
// two runs that differ only in -w must have different keys, and so must -w 0 and no -w.
#include "gpt2/run.h"

static void key_of(int argc, char** argv, char* key, size_t n) {
    TrainConfig c = train_config_parse(argc, argv, train_config_defaults(0));
    train_config_key(&c, key, n);
}

int main(void) {
    char* none[] = {"train_cpu", "-x", "10"};
    char* zero[] = {"train_cpu", "-x", "10", "-w", "0"};
    char* two[] = {"train_cpu", "-x", "10", "-w", "2"};
    char* three[] = {"train_cpu", "-x", "10", "-w", "3"};
    char k[4][1024];
    key_of(3, none, k[0], sizeof(k[0]));
    key_of(5, zero, k[1], sizeof(k[1]));
    key_of(5, two, k[2], sizeof(k[2]));
    key_of(5, three, k[3], sizeof(k[3]));
    const char* what[4] = {"no -w", "-w 0", "-w 2", "-w 3"};
    for (int i = 0; i < 4; i++) {
        for (int j = i + 1; j < 4; j++) {
            if (strcmp(k[i], k[j]) == 0) {
                printf("train_config_key (gpt2/run.h) gives the same key for %s and %s: add -w to it, so that "
                       "the processes of a data-parallel run must agree on it\n", what[i], what[j]);
                return 1;
            }
        }
    }
    return 0;
}
