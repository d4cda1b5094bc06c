// gpt2/parallel.h: the processes of a parallel run (doc/parallel.md): data parallel, and the grid
// of tensor, pipeline and data parallelism below (Split).
//
// Under `mpirun -np N` (built with MPI: USE_MPI) a program is rank 0..N-1 of N; rank 0 prints,
// logs and writes checkpoints. Without mpirun it is rank 0 of 1 and MPI is never started; built
// without MPI yet started as one of several copies, it stops (each would train alone).

#ifndef GPT2_PARALLEL_H
#define GPT2_PARALLEL_H

#include <limits.h>
#include "io.h"

#ifdef USE_MPI
#define OMPI_SKIP_MPICXX 1   // the C interface only (nvcc compiles train_gpu.cu as C++)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

typedef struct {
    int rank;        // this process, 0 .. size-1
    int size;        // the processes of the run
    int local_rank;  // this process among those on its machine: picks its GPU
    int mpi;         // 1 when started by mpirun (even as one process): gradients go through MPI
} Processes;

static Processes procs = {0, 1, 0, 0};

// ---------- the split of a run: data, tensor and pipeline parallel (doc/parallel.md) ----------
// The ranks form a grid of tp x pp x dp, numbered tp fastest (a tensor-parallel group, which
// exchanges the most, are neighbours), then pp, then dp.

enum { GROUP_TP, GROUP_PP, GROUP_DP, GROUP_EMBED, GROUP_MODEL, GROUP_WORLD, NUM_GROUPS };

typedef struct {
    int tp, pp, dp;                 // the grid: tp x pp x dp = the processes of the run
    int tp_rank, pp_rank, dp_rank;  // this process's place in it
    int zero;                       // 1: ZeRO stage 1, AdamW's moments split over the dp ranks
    int gpipe;                      // 1: the pipeline runs all forwards, then all backwards
    // bytes sent and seconds spent this step, per group (parallel_account)
    double sent[NUM_GROUPS];
    double comm_seconds;
} Split;

static Split split = {1, 1, 1, 0, 0, 0, 0, 0, {0}, 0.0};

static inline int split_is_model_parallel(void) { return split.tp > 1 || split.pp > 1; }

// This process's group of kind g as a color (and its key in it) for MPI_Comm_split and
// ncclCommSplit; -1: in none (GROUP_EMBED holds only the first and last stages).
static inline int split_group_color(int g, int* key) {
    int t = split.tp_rank, p = split.pp_rank, d = split.dp_rank, tp = split.tp, pp = split.pp;
    int is_end = p == 0 || p == pp - 1;
    switch (g) {
        case GROUP_TP: *key = t; return p + pp * d;
        case GROUP_PP: *key = p; return t + tp * d;
        case GROUP_DP: *key = d; return t + tp * p;
        case GROUP_EMBED: *key = p; return is_end ? t + tp * d : -1;
        case GROUP_MODEL: *key = t + tp * p; return d;
        default: *key = procs.rank; return 0;  // GROUP_WORLD
    }
}

// Bytes one process sends in a ring collective over n: all-reduce 2 (n-1)/n, the others (n-1)/n.
static inline void parallel_account(int group, double bytes, double seconds) {
    split.sent[group] += bytes;
    split.comm_seconds += seconds;
}
static inline void parallel_step_begin(void) {
    memset(split.sent, 0, sizeof(split.sent));
    split.comm_seconds = 0.0;
}

// The number of processes mpirun (Open MPI, MPICH, Slurm's PMI) says it started, read from the
// environment it gives them; 0 when the program was not started by a launcher.
static inline int launched_size(const char** rank) {
    const char* size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    const char* rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
    for (int i = 0; i < 3; i++) {
        const char* s = getenv(size_vars[i]);
        if (s != NULL) {
            *rank = getenv(rank_vars[i]);
            return atoi(s);
        }
    }
    return 0;
}

#ifdef USE_MPI

static void parallel_abort(void) { MPI_Abort(MPI_COMM_WORLD, 1); }

static MPI_Comm parallel_local_comm;  // the ranks that share this machine's memory (parallel_init)

static inline void parallel_init(int* argc, char*** argv) {
    const char* rank = NULL;
    if (launched_size(&rank) == 0) return;
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &procs.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &procs.size);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, procs.rank, MPI_INFO_NULL, &parallel_local_comm);
    MPI_Comm_rank(parallel_local_comm, &procs.local_rank);
    procs.mpi = 1;
    if (procs.size > 1) snprintf(fail_who, sizeof(fail_who), "rank %d of %d: ", procs.rank, procs.size);
    fail_stop = parallel_abort;  // MPI_Abort: mpirun stops every rank
}

static inline void parallel_finalize(void) {
    if (!procs.mpi) return;
    MPI_Comm_free(&parallel_local_comm);
    MPI_Finalize();
}

static inline void parallel_barrier(void) {
    if (procs.mpi) MPI_Barrier(MPI_COMM_WORLD);
}

static inline double parallel_sum(double x) {
    if (procs.mpi) MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return x;
}

// The lowest rank for which `yes` holds, or -1; every rank must call it (that rank then reports
// the error once, the others wait for it to stop the run).
static inline int parallel_first_rank(int yes) {
    int first = yes ? procs.rank : procs.size;
    if (procs.mpi) MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return first == procs.size ? -1 : first;
}

// Waits while another rank reports an error: its fail() ends every rank (MPI_Abort).
static inline void parallel_await_stop(void) {
    MPI_Barrier(MPI_COMM_WORLD);  // never completes: the reporting rank is not coming
    exit(1);
}

// Every rank must have been given the same `key` (its options, as text): one line from rank 0
// when they differ, naming the first rank that differs.
static inline void parallel_check_same(const char* what, const char* key) {
    if (!procs.mpi) return;
    char first[1024];
    snprintf(first, sizeof(first), "%s", key);
    MPI_Bcast(first, sizeof(first), MPI_CHAR, 0, MPI_COMM_WORLD);
    int differs = parallel_first_rank(strncmp(first, key, sizeof(first) - 1) != 0);
    if (differs < 0) return;
    if (procs.rank == 0) fail("rank %d was started with other %s than rank 0: give every rank the same", differs, what);
    parallel_await_stop();
}

// The lowest other rank on this machine that passed the same `text` (127 characters), or -1:
// two processes given one GPU find each other. Every rank must call it.
static inline int parallel_local_same(const char* text) {
    if (!procs.mpi) return -1;
    enum { LEN = 128 };
    int n = 0;
    MPI_Comm_size(parallel_local_comm, &n);
    char mine[LEN];
    snprintf(mine, sizeof(mine), "%s", text);
    char* texts = (char*)malloc_check((size_t)n * LEN);
    int* ranks = (int*)malloc_check((size_t)n * sizeof(int));
    MPI_Allgather(mine, LEN, MPI_CHAR, texts, LEN, MPI_CHAR, parallel_local_comm);
    MPI_Allgather(&procs.rank, 1, MPI_INT, ranks, 1, MPI_INT, parallel_local_comm);
    int same = -1;  // the texts come in rank order (the split's key), so the first match is the lowest
    for (int i = 0; i < n && same < 0; i++) {
        if (ranks[i] != procs.rank && strcmp(texts + (size_t)i * LEN, mine) == 0) same = ranks[i];
    }
    free(texts);
    free(ranks);
    return same;
}

// ---------- the grid's groups, and collectives over them on host memory ----------
// MPI moves train_cpu's host tensors, NCCL train_gpu's (gpt2/gpu/multi_gpu.cuh), over the same
// groups; scalars go through MPI in both.

static MPI_Comm split_comms[NUM_GROUPS];  // MPI_COMM_NULL where this rank is in no such group

static inline MPI_Comm split_comm(int group) { return split_comms[group]; }

static inline int split_group_size(int group) {
    int n = 1;
    if (procs.mpi && split_comms[group] != MPI_COMM_NULL) MPI_Comm_size(split_comms[group], &n);
    return n;
}

// Makes the grid of a run of tp x pp x dp processes (dp = the processes / (tp x pp)) and its
// groups; one clear error when the processes do not fill it.
static inline void parallel_split_init(int tp, int pp) {
    if (procs.size % (tp * pp) != 0) {
        if (procs.rank != 0) parallel_await_stop();  // rank 0 says why, once
        fail("-tp %d -pp %d need a multiple of tp x pp = %d processes, and this run has %d", tp, pp, tp * pp,
             procs.size);
    }
    split.tp = tp;
    split.pp = pp;
    split.dp = procs.size / (tp * pp);
    split.tp_rank = procs.rank % tp;
    split.pp_rank = procs.rank / tp % pp;
    split.dp_rank = procs.rank / (tp * pp);
    for (int g = 0; g < NUM_GROUPS; g++) split_comms[g] = MPI_COMM_NULL;
    if (!procs.mpi) return;
    for (int g = 0; g < NUM_GROUPS; g++) {
        int key, color = split_group_color(g, &key);
        if (g == GROUP_WORLD) MPI_Comm_dup(MPI_COMM_WORLD, &split_comms[g]);
        else MPI_Comm_split(MPI_COMM_WORLD, color >= 0 ? color : MPI_UNDEFINED, key, &split_comms[g]);
    }
}

static inline void parallel_split_free(void) {
    if (!procs.mpi) return;
    for (int g = 0; g < NUM_GROUPS; g++) {
        if (split_comms[g] != MPI_COMM_NULL) MPI_Comm_free(&split_comms[g]);
    }
}

static inline void check_int_count(size_t n) {
    if (n > (size_t)INT_MAX) fail("a transfer of %zu values is too large for one MPI call", n);
}

// x[0..n) = the sum over the group of every member's x, on every member.
static inline void parallel_group_sum_floats(int group, float* x, size_t n) {
    int k = split_group_size(group);
    if (k == 1) return;
    double t0 = now_seconds();
    const size_t chunk = (size_t)1 << 30;  // MPI counts are int
    for (size_t i = 0; i < n; i += chunk) {
        int count = (int)(n - i < chunk ? n - i : chunk);
        MPI_Allreduce(MPI_IN_PLACE, x + i, count, MPI_FLOAT, MPI_SUM, split_comm(group));
    }
    parallel_account(group, 2.0 * (k - 1) / k * n * sizeof(float), now_seconds() - t0);
}

static inline double parallel_group_sum(int group, double x) {
    if (split_group_size(group) > 1) MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, split_comm(group));
    return x;
}

// x holds k parts over a group of k; part r of member r becomes the group's sum of part r, the
// rest is left as it was (ZeRO's reduce-scatter).
static inline void parallel_reduce_scatter_floats(int group, float* x, size_t n) {
    int k = split_group_size(group), r = 0;
    if (k == 1) return;
    double t0 = now_seconds();
    size_t part = n / k;
    check_int_count(part);
    MPI_Comm_rank(split_comm(group), &r);
    float* sum = (float*)malloc_check(part * sizeof(float));
    MPI_Reduce_scatter_block(x, sum, (int)part, MPI_FLOAT, MPI_SUM, split_comm(group));
    memcpy(x + (size_t)r * part, sum, part * sizeof(float));
    free(sum);
    parallel_account(group, (double)(k - 1) / k * n * sizeof(float), now_seconds() - t0);
}

// x holds n = k x part floats over a group of k; member r's part r goes to every member.
static inline void parallel_all_gather_floats(int group, float* x, size_t n) {
    int k = split_group_size(group);
    if (k == 1) return;
    double t0 = now_seconds();
    check_int_count(n / k);
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, (int)(n / k), MPI_FLOAT, split_comm(group));
    parallel_account(group, (double)(k - 1) / k * n * sizeof(float), now_seconds() - t0);
}

// One exchange with pipeline stage `peer`: `send` to it, `recv` from it (either NULL). Sends are
// synchronous (MPI_Issend) as NCCL's are, so a schedule that would deadlock on GPUs deadlocks
// here too; the two are posted together, as NCCL groups them.
static inline void parallel_exchange(const void* send, void* recv, size_t bytes, int peer) {
    double t0 = now_seconds();
    check_int_count(bytes);
    MPI_Request req[2];
    int n = 0;
    if (recv != NULL) MPI_Irecv(recv, (int)bytes, MPI_BYTE, peer, 0, split_comm(GROUP_PP), &req[n++]);
    if (send != NULL) MPI_Issend(send, (int)bytes, MPI_BYTE, peer, 0, split_comm(GROUP_PP), &req[n++]);
    MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
    parallel_account(GROUP_PP, send != NULL ? (double)bytes : 0.0, now_seconds() - t0);
}

// The root's int to every member of the group.
static inline int parallel_group_bcast_int(int group, int x, int root) {
    if (split_group_size(group) > 1) MPI_Bcast(&x, 1, MPI_INT, root, split_comm(group));
    return x;
}

// Point to point between world ranks, for gathering checkpoints on rank 0.
static inline void parallel_send_floats(const float* x, size_t n, int to) {
    check_int_count(n);
    MPI_Send(x, (int)n, MPI_FLOAT, to, 1, MPI_COMM_WORLD);
}
static inline void parallel_recv_floats(float* x, size_t n, int from) {
    check_int_count(n);
    MPI_Recv(x, (int)n, MPI_FLOAT, from, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

// x holds n = k x part floats over a group of k; part r of member r goes to the member of rank 0
// in the group, whose x is then whole (ZeRO's moments, gathered for a checkpoint).
static inline void parallel_gather_floats(int group, float* x, size_t n) {
    int k = split_group_size(group), r = 0;
    if (k == 1) return;
    check_int_count(n / k);
    MPI_Comm_rank(split_comm(group), &r);
    if (r == 0) MPI_Gather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, (int)(n / k), MPI_FLOAT, 0, split_comm(group));
    else MPI_Gather(x + (size_t)r * (n / k), (int)(n / k), MPI_FLOAT, NULL, 0, MPI_FLOAT, 0, split_comm(group));
}

// Every process's line of text (up to 255 characters), printed by rank 0 in rank order.
static inline void parallel_print_lines(const char* line) {
    enum { LEN = 256 };
    char mine[LEN];
    snprintf(mine, sizeof(mine), "%s", line);
    char* all = procs.rank == 0 ? (char*)malloc_check((size_t)procs.size * LEN) : NULL;
    MPI_Gather(mine, LEN, MPI_CHAR, all, LEN, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (procs.rank != 0) return;
    for (int r = 0; r < procs.size; r++) printf("%s\n", all + (size_t)r * LEN);
    free(all);
}

#else  // built without MPI: always the only process

static inline void parallel_init(int* argc, char*** argv) {
    const char* rank = NULL;
    int n = launched_size(&rank);
    if (n <= 1) return;
    if (rank != NULL && atoi(rank) != 0) exit(1);  // rank 0 says why
    fail("this program was built without MPI, but mpirun started %d copies, which would each train "
         "alone: install Open MPI (mpicc) and rebuild, or run one process", n);
}
static inline void parallel_finalize(void) {}
static inline void parallel_barrier(void) {}
static inline double parallel_sum(double x) { return x; }
static inline int parallel_first_rank(int yes) { return yes ? 0 : -1; }
static inline void parallel_await_stop(void) { exit(1); }
static inline void parallel_check_same(const char* what, const char* key) {}
static inline int parallel_local_same(const char* text) { return -1; }
static inline int split_group_size(int group) { return 1; }
static inline void parallel_split_init(int tp, int pp) {
    if (tp * pp > 1) fail("-tp %d -pp %d need %d processes under mpirun, and this program was built without MPI", tp, pp, tp * pp);
}
static inline void parallel_split_free(void) {}
static inline void parallel_group_sum_floats(int group, float* x, size_t n) {}
static inline double parallel_group_sum(int group, double x) { return x; }
static inline void parallel_reduce_scatter_floats(int group, float* x, size_t n) {}
static inline void parallel_all_gather_floats(int group, float* x, size_t n) {}
static inline void parallel_exchange(const void* send, void* recv, size_t bytes, int peer) {}
static inline int parallel_group_bcast_int(int group, int x, int root) { return x; }
static inline void parallel_send_floats(const float* x, size_t n, int to) {}
static inline void parallel_recv_floats(float* x, size_t n, int from) {}
static inline void parallel_gather_floats(int group, float* x, size_t n) {}
static inline void parallel_print_lines(const char* line) { printf("%s\n", line); }

#endif

// Between rank0_first_begin() and rank0_first_end() rank 0 goes first, the others after it: a bad
// input that every rank would find is reported once.
static inline void rank0_first_begin(void) {
    if (procs.rank != 0) parallel_barrier();
}
static inline void rank0_first_end(void) {
    if (procs.rank == 0) parallel_barrier();
}

#endif // GPT2_PARALLEL_H
