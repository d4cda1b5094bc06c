// gpt2/parallel.h: the processes of a data-parallel run (doc/parallel.md).
//
// Started by `mpirun -np N`, a training program built with MPI (the Makefile builds with it where
// it finds mpicc, and defines USE_MPI) is one of N processes, its ranks 0..N-1. Each rank trains
// the same model on its own part of every batch; before the update, the ranks add up their
// gradients (an all-reduce: every rank receives the sum), so that all of them apply the same
// update to the same parameters and stay identical without ever sending a parameter. Rank 0
// speaks for the run: it prints, logs, samples and writes checkpoints.
//
// Started without mpirun, a program is rank 0 of 1 and MPI is never initialised, even when built
// with it. A program built without MPI that finds itself started by mpirun as one of several
// copies stops: each copy would train alone, a silently wrong run.

#ifndef GPT2_PARALLEL_H
#define GPT2_PARALLEL_H

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

// x[0..n) = the sum over the ranks of every rank's x, on every rank.
static inline void parallel_sum_floats(float* x, size_t n) {
    if (!procs.mpi) return;
    const size_t chunk = (size_t)1 << 30;  // MPI counts are int
    for (size_t i = 0; i < n; i += chunk) {
        int count = (int)(n - i < chunk ? n - i : chunk);
        MPI_Allreduce(MPI_IN_PLACE, x + i, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
}

static inline double parallel_sum(double x) {
    if (procs.mpi) MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return x;
}

// The lowest rank for which `yes` holds, or -1 when it holds on none; every rank must call it.
// A check that every rank makes finds its error on one rank, or on several: the first of them
// then reports it, once, and the others wait in parallel_await_stop for it to stop the run.
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

// The lowest rank, other than this one, that runs on this machine and passed the same `text`
// (its first 127 characters); -1 when none did. Every rank must call it: the processes of each
// machine (parallel_local_comm) compare their texts, so that two processes given one thing that
// only one should have (a GPU) can find each other.
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
static inline void parallel_sum_floats(float* x, size_t n) {}
static inline double parallel_sum(double x) { return x; }
static inline int parallel_first_rank(int yes) { return yes ? 0 : -1; }
static inline void parallel_await_stop(void) { exit(1); }
static inline void parallel_check_same(const char* what, const char* key) {}
static inline int parallel_local_same(const char* text) { return -1; }

#endif

// Between rank0_first_begin() and rank0_first_end(), rank 0 goes first and the other ranks
// follow once it is through: a bad option or input file, which every rank would find, is then
// reported once, by rank 0, which stops the run before the others start.
static inline void rank0_first_begin(void) {
    if (procs.rank != 0) parallel_barrier();
}
static inline void rank0_first_end(void) {
    if (procs.rank == 0) parallel_barrier();
}

#endif // GPT2_PARALLEL_H
