// gpt2/gpu/multi_gpu.cuh: training on several GPUs (doc/parallel.md): NCCL's collectives over the
// groups of the run's grid (gpt2/parallel.h), on device memory: the sums of the gradients and of
// the tensor-parallel blocks, ZeRO-1's gathers, the pipeline's exchanges.

#ifndef GPT2_GPU_MULTI_GPU_CUH
#define GPT2_GPU_MULTI_GPU_CUH

#include "../model.h"     // GPT2
#include "../parallel.h"  // procs, split and its groups, parallel_account; MPI, which starts the processes
#include "cuda_utils.cuh"
#ifdef USE_MPI
#include <nccl.h>
#endif

// Each process trains on its own GPU; NCCL moves device memory between them without a copy to
// the host, MPI starts the processes and sums the scalars (gpt2/parallel.h). A collective's time
// is measured by two events on its stream, read when the host waits for the GPU anyway
// (synchronize_comm_gpu): waiting around every collective would stall the queue of kernels.
#ifdef USE_MPI
static ncclComm_t nccl_comm;                  // the world's
static ncclComm_t nccl_comms[NUM_GROUPS];     // split from it as gpt2/parallel.h splits MPI's; NULL: no such group
static int nccl_sizes[NUM_GROUPS], nccl_ranks[NUM_GROUPS];

static void nccl_check_(ncclResult_t r, const char* call, const char* file, int line) {
    if (r != ncclSuccess) fail("NCCL call %s failed: %s (%s:%d)", call, ncclGetErrorString(r), file, line);
}
#define nccl_check(call) nccl_check_((call), #call, __FILE__, __LINE__)

// The world's communicator, then one per group of the grid, with exactly the colors and keys of
// MPI's (split_group_color); every process takes part in every split, NCCL_SPLIT_NOCOLOR where
// it is in no such group. Called after run_open (which makes the grid).
static void nccl_init(void) {
    ncclUniqueId id;
    if (procs.rank == 0) nccl_check(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    nccl_check(ncclCommInitRank(&nccl_comm, procs.size, id, procs.rank));
    for (int g = 0; g < NUM_GROUPS; g++) {
        nccl_comms[g] = NULL;
        nccl_sizes[g] = 1;
        nccl_ranks[g] = 0;
        if (g == GROUP_WORLD) {
            nccl_comms[g] = nccl_comm;
        } else {
            int key, color = split_group_color(g, &key);
            nccl_check(ncclCommSplit(nccl_comm, color >= 0 ? color : NCCL_SPLIT_NOCOLOR, key, &nccl_comms[g], NULL));
        }
        if (nccl_comms[g] != NULL) {
            nccl_check(ncclCommCount(nccl_comms[g], &nccl_sizes[g]));
            nccl_check(ncclCommUserRank(nccl_comms[g], &nccl_ranks[g]));
        }
    }
}

static void nccl_free(void) {
    for (int g = 0; g < NUM_GROUPS; g++) {
        if (g != GROUP_WORLD && nccl_comms[g] != NULL) nccl_check(ncclCommDestroy(nccl_comms[g]));
        nccl_comms[g] = NULL;
    }
    nccl_check(ncclCommDestroy(nccl_comm));
}

// ---------- the time of the collectives, measured on the GPU ----------

static cudaEvent_t* comm_events = NULL;  // pairs: before and after each collective since the last read
static int comm_capacity = 0, comm_pending = 0;

// Adds the time of the pending collectives to split.comm_seconds; the GPU has finished them.
static void comm_time_read(void) {
    for (int i = 0; i < comm_pending; i++) {
        float ms = 0.0f;
        cuda_check(cudaEventElapsedTime(&ms, comm_events[2 * i], comm_events[2 * i + 1]));
        split.comm_seconds += ms * 1e-3;
    }
    comm_pending = 0;
}

// The event before a collective (comm_end records the one after).
static void comm_begin(void) {
    if (comm_pending == comm_capacity) {
        if (comm_capacity >= 4096) {  // read what is pending rather than grow without end
            cuda_check(cudaDeviceSynchronize());
            comm_time_read();
        } else {
            int n = comm_capacity == 0 ? 64 : 2 * comm_capacity;
            comm_events = (cudaEvent_t*)realloc(comm_events, 2 * (size_t)n * sizeof(cudaEvent_t));
            if (comm_events == NULL) fail("out of memory for %d CUDA events", 2 * n);
            for (int i = 2 * comm_capacity; i < 2 * n; i++) cuda_check(cudaEventCreate(&comm_events[i]));
            comm_capacity = n;
        }
    }
    cuda_check(cudaEventRecord(comm_events[2 * comm_pending], 0));
}
static void comm_end(int group, double bytes) {
    cuda_check(cudaEventRecord(comm_events[2 * comm_pending + 1], 0));
    comm_pending++;
    parallel_account(group, bytes, 0.0);  // the seconds come with comm_time_read
}

// The step's collectives so far are not its own (validation, samples before it): forgotten.
static void comm_time_discard(void) { comm_pending = 0; }

// Waits for the GPU, then reads the time of its collectives.
static void synchronize_comm_gpu(void) {
    cuda_check(cudaDeviceSynchronize());
    comm_time_read();
}

// ---------- the collectives ----------

// x[0..n) = the sum over the group of every member's x, on every member (all-reduce).
static void nccl_sum_of(int group, void* x, size_t n, ncclDataType_t type, size_t size) {
    int k = nccl_sizes[group];
    if (k <= 1 || n == 0) return;
    comm_begin();
    nccl_check(ncclAllReduce(x, x, n, type, ncclSum, nccl_comms[group], 0));
    comm_end(group, 2.0 * (k - 1) / k * n * size);
}
static void nccl_sum(int group, float* x, size_t n) { nccl_sum_of(group, x, n, ncclFloat, sizeof(float)); }
static void nccl_sum_bf16(int group, bf16* x, size_t n) { nccl_sum_of(group, x, n, ncclBfloat16, sizeof(bf16)); }

// x holds n = k x part floats over a group of k: part r (r: this member's rank in the group)
// becomes the sum of every member's part r, in place; the other parts are left as they were.
static void nccl_reduce_scatter(int group, float* x, size_t n) {
    int k = nccl_sizes[group];
    if (k <= 1) return;
    size_t part = n / k;
    comm_begin();
    nccl_check(ncclReduceScatter(x, x + (size_t)nccl_ranks[group] * part, part, ncclFloat, ncclSum, nccl_comms[group], 0));
    comm_end(group, (double)(k - 1) / k * n * sizeof(float));
}

// x holds n = k x part elements of `size` bytes (NCCL's `type`) over a group of k: member r's
// part r to every member, in place.
static void nccl_all_gather_of(int group, void* x, size_t n, ncclDataType_t type, size_t size) {
    int k = nccl_sizes[group];
    if (k <= 1) return;
    size_t part = n / k;
    comm_begin();
    nccl_check(ncclAllGather((char*)x + nccl_ranks[group] * part * size, x, part, type, nccl_comms[group], 0));
    comm_end(group, (double)(k - 1) / k * n * size);
}
static void nccl_all_gather(int group, float* x, size_t n) { nccl_all_gather_of(group, x, n, ncclFloat, sizeof(float)); }
// ZeRO-1's gathering of the bf16 copy of the parameters
static void nccl_all_gather_bf16(int group, bf16* x, size_t n) {
    nccl_all_gather_of(group, x, n, ncclBfloat16, sizeof(bf16));
}

// x[0..n) of member `root` to every member of the group, in place. Counted as the all-gather
// counts its parts: (k-1)/k of it sent per member (the root sends it, and each passes it on).
static void nccl_broadcast(int group, float* x, size_t n, int root) {
    int k = nccl_sizes[group];
    if (k <= 1 || n == 0) return;
    comm_begin();
    nccl_check(ncclBroadcast(x, x, n, ncclFloat, root, nccl_comms[group], 0));
    comm_end(group, (double)(k - 1) / k * n * sizeof(float));
}

// One exchange with the neighbouring pipeline stage `peer`: `send` (or NULL) to it and `recv` (or
// NULL) from it, `bytes` each, posted together (NCCL's group): neither waits for the other.
static void nccl_exchange(const void* send, void* recv, size_t bytes, int peer) {
    if (send == NULL && recv == NULL) return;
    comm_begin();
    nccl_check(ncclGroupStart());
    if (recv != NULL) nccl_check(ncclRecv(recv, bytes, ncclUint8, peer, nccl_comms[GROUP_PP], 0));
    if (send != NULL) nccl_check(ncclSend(send, bytes, ncclUint8, peer, nccl_comms[GROUP_PP], 0));
    nccl_check(ncclGroupEnd());
    comm_end(GROUP_PP, send != NULL ? (double)bytes : 0.0);
}
#else  // built without MPI: always one process, in every group alone
static void nccl_init(void) {}
static void nccl_free(void) {}
static void comm_time_discard(void) {}
static void synchronize_comm_gpu(void) { cuda_check(cudaDeviceSynchronize()); }
static void nccl_sum(int group, float* x, size_t n) {}
static void nccl_sum_bf16(int group, bf16* x, size_t n) {}
static void nccl_reduce_scatter(int group, float* x, size_t n) {}
static void nccl_all_gather(int group, float* x, size_t n) {}
static void nccl_all_gather_bf16(int group, bf16* x, size_t n) {}
static void nccl_broadcast(int group, float* x, size_t n, int root) {}
static void nccl_exchange(const void* send, void* recv, size_t bytes, int peer) {}
#endif

// ---------- the sums of a step ----------

// -tp: a tensor summed over the tensor-parallel group, in place (the partial products of a
// process's heads or part of the MLP); nothing without -tp.
static void tp_sum_gpu(float* x, size_t n) {
    if (split.tp > 1) nccl_sum(GROUP_TP, x, n);
}
static void tp_sum_gpu(bf16* x, size_t n) {
    if (split.tp > 1) nccl_sum_bf16(GROUP_TP, x, n);
}

// The gradients summed where they belong, as train_parallel.h's parallel_sum_gradients.
static void nccl_sum_gradients(GPT2* model) {
    if (split.pp > 1 && (model->shard.embed || model->shard.head)) {
        nccl_sum(GROUP_EMBED, model->grads.wte, model->param_sizes[WTE]);
    }
    if (split.dp == 1) return;
    if (split.zero) nccl_reduce_scatter(GROUP_DP, model->grads_memory, model->num_padded);
    else nccl_sum(GROUP_DP, model->grads_memory, model->num_parameters);
}

#endif // GPT2_GPU_MULTI_GPU_CUH
