// gpt2/gpu/multi_gpu.cuh: data-parallel training on several GPUs (doc/parallel.md): the
// gradients summed over the GPUs of the run by NCCL.

#ifndef GPT2_GPU_MULTI_GPU_CUH
#define GPT2_GPU_MULTI_GPU_CUH

#include "../model.h"     // GPT2: its gradients
#include "../parallel.h"  // procs, and MPI, which starts the processes
#include "cuda_utils.cuh"
#ifdef USE_MPI
#include <nccl.h>
#endif

// Under mpirun, each process trains on its own GPU, and the float32 parameter gradients (both
// precisions keep them in float32) are summed over the GPUs by NCCL's all-reduce, which moves
// them GPU to GPU (NVLink, PCIe or the network) without a copy to the host. MPI only starts the
// processes and hands NCCL's id for the run from rank 0 to the others (gpt2/parallel.h).
#ifdef USE_MPI
static ncclComm_t nccl_comm;

static void nccl_check_(ncclResult_t r, const char* call, const char* file, int line) {
    if (r != ncclSuccess) fail("NCCL call %s failed: %s (%s:%d)", call, ncclGetErrorString(r), file, line);
}
#define nccl_check(call) nccl_check_((call), #call, __FILE__, __LINE__)

static void nccl_init(void) {
    ncclUniqueId id;
    if (procs.rank == 0) nccl_check(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    nccl_check(ncclCommInitRank(&nccl_comm, procs.size, id, procs.rank));
}

static void nccl_free(void) { nccl_check(ncclCommDestroy(nccl_comm)); }

static void all_reduce_gradients_gpu(GPT2* model) {
    nccl_check(ncclAllReduce(model->grads_memory, model->grads_memory, model->num_parameters, ncclFloat, ncclSum,
                             nccl_comm, 0));
}
#else  // built without MPI: always one process, whose gradients are already the sum
static void nccl_init(void) {}
static void nccl_free(void) {}
static void all_reduce_gradients_gpu(GPT2* model) {}
#endif

#endif // GPT2_GPU_MULTI_GPU_CUH
