// dev/emu/nccl_check.cu: the emulator's NCCL (dev/emu/cuda_emu.h, done with MPI) against the results
// NCCL defines, for the calls model parallelism needs: all-reduce (float, double, bf16), reduce-
// scatter, all-gather and broadcast (out of place and in place), send and receive (in a group: a
// ring, a pair with a neighbour, nested groups, a send to the rank itself; outside one: a blocking
// pair), communicators split by color (and NCCL_SPLIT_NOCOLOR), and the calls it must refuse. Every value
// is a small integer, or a bf16 sum of exactly representable ones, so every result is checked
// exactly. Under the emulator the collectives and sends run again with each MPI call limited to 5
// elements, to check how a large operation is cut into pieces.
//
//   make build/emu/nccl_check
//   mpirun -np 4 --oversubscribe env CUDA_EMU_DEVICES=4 build/emu/nccl_check
//   ... build/emu/nccl_check mismatch   a receive of more elements than its send: must stop with a message
//
// Each rank takes its own GPU (its rank on its machine), as NCCL requires. Rank 0 prints one
// "ok ..." line per check, a rank with a wrong result a "FAIL ..." line; exit 1 if any check failed,
// 77 when built without MPI. It compiles with nvcc against NCCL too (the emulator's own checks left
// out), where it needs one GPU per rank.

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#ifndef USE_MPI
int main(void) {
    printf("skipped: nccl_check was built without MPI (no mpicc found)\n");
    return 77;
}
#else
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <nccl.h>

static int R, P;  // this rank and the run's size (the world communicator's)
static ncclComm_t world;
static int failed = 0;

static void die(const char* what) {
    fprintf(stderr, "rank %d: %s\n", R, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}
// An NCCL call that must succeed.
static void must_(ncclResult_t r, const char* call) {
    if (r != ncclSuccess) {
        fprintf(stderr, "rank %d: %s: %s\n", R, call, ncclGetErrorString(r));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}
#define must(call) must_((call), #call)

// Device copies of host vectors and back.
template <typename T> static T* to_device(const std::vector<T>& h) {
    T* d = NULL;
    if (cudaMalloc(&d, h.size() * sizeof(T) + 1) != cudaSuccess) die("cudaMalloc failed");
    cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
    return d;
}
template <typename T> static std::vector<T> to_host(const T* d, size_t n) {
    std::vector<T> h(n);
    cudaDeviceSynchronize();
    cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
}
static double value(float x) { return x; }
static double value(double x) { return x; }
static double value(int x) { return x; }
static double value(signed char x) { return x; }
static double value(__nv_bfloat16 x) { return __bfloat162float(x); }

// Every rank's result: got[i] == want[i]; the first difference reported by the rank that has it.
static int ok_ = 1;
template <typename T> static void expect(const char* name, const std::vector<T>& got, const std::vector<double>& want) {
    for (size_t i = 0; i < want.size(); i++)
        if (value(got[i]) != want[i]) {
            fprintf(stderr, "FAIL rank %d: %s: element %zu is %g, expected %g\n", R, name, i, value(got[i]), want[i]);
            ok_ = 0;
            return;
        }
}
static void expect_result(const char* name, ncclResult_t got, ncclResult_t want) {
    if (got == want) return;
    fprintf(stderr, "FAIL rank %d: %s returned %d (%s), expected %d (%s)\n", R, name, (int)got, ncclGetErrorString(got),
            (int)want, ncclGetErrorString(want));
    ok_ = 0;
}
// Ends a check: ok on every rank, or FAIL.
static void report(const char* name) {
    int all = 0;
    MPI_Allreduce(&ok_, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (R == 0) printf("%s %s (%d ranks)\n", all ? "ok  " : "FAIL", name, P);
    if (!all) failed = 1;
    ok_ = 1;
}

static double tri(int n) { return n * (n - 1) / 2.0; }  // 0 + 1 + ... + n-1

static void check_all_reduce(const char* how) {
    char name[128];
    const size_t n = 37;
    std::vector<float> f(n);
    std::vector<double> d(n), want(n), want_d(n);
    for (size_t i = 0; i < n; i++) {
        f[i] = R * 100.0f + i, d[i] = R + 0.5 * i;
        want[i] = 100 * tri(P) + P * (double)i, want_d[i] = tri(P) + 0.5 * P * i;
    }
    float *fs = to_device(f), *fr = to_device(f);
    must(ncclAllReduce(fs, fr, n, ncclFloat, ncclSum, world, 0));
    expect("float, out of place", to_host(fr, n), want);
    expect("float, sendbuff unchanged", to_host(fs, n), std::vector<double>(f.begin(), f.end()));
    must(ncclAllReduce(fs, fs, n, ncclFloat, ncclSum, world, 0));
    expect("float, in place", to_host(fs, n), want);
    double* ds = to_device(d);
    must(ncclAllReduce(ds, ds, n, ncclDouble, ncclSum, world, 0));
    expect("double, in place", to_host(ds, n), want_d);
    snprintf(name, sizeof(name), "ncclAllReduce float and double, out of place and in place, %zu elements%s", n, how);
    report(name);
    cudaFree(fs), cudaFree(fr), cudaFree(ds);

    // bf16: small integers, and two sums that round (256 + 1 and 258 + 1 are halfway between two
    // bf16 numbers: to the even one, 256 and 260); the other ranks add zeros, exact in any order
    std::vector<__nv_bfloat16> b(n + 2);
    std::vector<double> want_b(n + 2);
    for (size_t i = 0; i < n; i++) b[i] = __float2bfloat16((R + 1) * (float)(i % 8)), want_b[i] = (i % 8) * tri(P + 1);
    b[n] = __float2bfloat16(R == 0 ? 256.0f : R == 1 ? 1.0f : 0.0f), want_b[n] = 256;
    b[n + 1] = __float2bfloat16(R == 0 ? 258.0f : R == 1 ? 1.0f : 0.0f), want_b[n + 1] = 260;
    __nv_bfloat16 *bs = to_device(b), *br = to_device(b);
    must(ncclAllReduce(bs, br, n + 2, ncclBfloat16, ncclSum, world, 0));
    expect("bf16, out of place", to_host(br, n + 2), want_b);
    must(ncclAllReduce(bs, bs, n + 2, ncclBfloat16, ncclSum, world, 0));
    expect("bf16, in place", to_host(bs, n + 2), want_b);
    snprintf(name, sizeof(name), "ncclAllReduce bf16: exact sums, 256+1 -> 256 and 258+1 -> 260 (ties to even)%s", how);
    report(name);
    cudaFree(bs), cudaFree(br);
}

static void check_reduce_scatter(const char* how) {
    char name[128];
    const size_t rc = 5, n = rc * P;
    std::vector<float> f(n);
    std::vector<__nv_bfloat16> b(n);
    std::vector<double> want(rc), want_b(rc), rest(n);
    for (size_t j = 0; j < n; j++) f[j] = R * 1000.0f + j, b[j] = __float2bfloat16((R + 1) * (float)(j % 16));
    for (size_t i = 0; i < rc; i++) want[i] = 1000 * tri(P) + P * (double)(R * rc + i), want_b[i] = ((R * rc + i) % 16) * tri(P + 1);
    float *fs = to_device(f), *fr = to_device(std::vector<float>(rc));
    must(ncclReduceScatter(fs, fr, rc, ncclFloat, ncclSum, world, 0));
    expect("float, out of place", to_host(fr, rc), want);
    must(ncclReduceScatter(fs, fs + R * rc, rc, ncclFloat, ncclSum, world, 0));  // in place: recvbuff is block R of sendbuff
    expect("float, in place", to_host(fs + R * rc, rc), want);
    __nv_bfloat16 *bs = to_device(b), *br = to_device(std::vector<__nv_bfloat16>(rc));
    must(ncclReduceScatter(bs, br, rc, ncclBfloat16, ncclSum, world, 0));
    expect("bf16, out of place", to_host(br, rc), want_b);
    must(ncclReduceScatter(bs, bs + R * rc, rc, ncclBfloat16, ncclSum, world, 0));
    expect("bf16, in place", to_host(bs + R * rc, rc), want_b);
    snprintf(name, sizeof(name), "ncclReduceScatter float and bf16, %zu elements a rank, out of place and in place%s", rc, how);
    report(name);
    cudaFree(fs), cudaFree(fr), cudaFree(bs), cudaFree(br);
}

static void check_all_gather(const char* how) {
    char name[128];
    const size_t sc = 4, n = sc * P;
    std::vector<int> mine(sc), in_place(n, -1);
    std::vector<signed char> mine8(sc + 1);
    std::vector<double> want(n), want8((sc + 1) * P);
    for (size_t i = 0; i < sc; i++) mine[i] = in_place[R * sc + i] = R * 100 + (int)i;
    for (size_t i = 0; i <= sc; i++) mine8[i] = (signed char)(R * 10 - (int)i);
    for (int r = 0; r < P; r++) {
        for (size_t i = 0; i < sc; i++) want[r * sc + i] = r * 100 + (double)i;
        for (size_t i = 0; i <= sc; i++) want8[r * (sc + 1) + i] = r * 10 - (double)i;
    }
    int *s = to_device(mine), *r = to_device(std::vector<int>(n, -1)), *ip = to_device(in_place);
    must(ncclAllGather(s, r, sc, ncclInt32, world, 0));
    expect("int32, out of place", to_host(r, n), want);
    must(ncclAllGather(ip + R * sc, ip, sc, ncclInt32, world, 0));  // in place: sendbuff is block R of recvbuff
    expect("int32, in place", to_host(ip, n), want);
    signed char *s8 = to_device(mine8), *r8 = to_device(std::vector<signed char>(want8.size()));
    must(ncclAllGather(s8, r8, sc + 1, ncclInt8, world, 0));
    expect("int8, out of place", to_host(r8, want8.size()), want8);
    snprintf(name, sizeof(name), "ncclAllGather int32 and int8, out of place and in place%s", how);
    report(name);
    cudaFree(s), cudaFree(r), cudaFree(ip), cudaFree(s8), cudaFree(r8);
}

// From the last rank (a root other than 0), float in place on every rank, and int32 out of place.
static void check_broadcast(const char* how) {
    char name[128];
    const size_t n = 7;
    int root = P - 1;
    std::vector<float> mine(n);
    std::vector<int> mine32(n);
    std::vector<double> want(n);
    for (size_t i = 0; i < n; i++) {
        mine[i] = R * 10.0f + i, mine32[i] = R * 100 - (int)i;
        want[i] = root * 10.0 + i;
    }
    float* x = to_device(mine);
    must(ncclBroadcast(x, x, n, ncclFloat, root, world, 0));
    expect("float, in place", to_host(x, n), want);
    int *s = to_device(mine32), *r = to_device(std::vector<int>(n, -1));
    must(ncclBroadcast(s, r, n, ncclInt32, root, world, 0));
    for (size_t i = 0; i < n; i++) want[i] = root * 100.0 - (double)i;
    expect("int32, out of place", to_host(r, n), want);
    snprintf(name, sizeof(name), "ncclBroadcast from rank %d, float in place and int32 out of place%s", root, how);
    report(name);
    cudaFree(x), cudaFree(s), cudaFree(r);
}

static void check_send_recv(const char* how) {
    char name[128];
    const size_t n = 6;
    int next = (R + 1) % P, prev = (R + P - 1) % P, partner = R ^ 1;
    std::vector<float> mine(n);
    std::vector<double> from_prev(n), from_partner(n), from_self(n);
    for (size_t i = 0; i < n; i++) {
        mine[i] = R * 10.0f + i;
        from_prev[i] = prev * 10.0 + i, from_partner[i] = partner * 10.0 + i, from_self[i] = R * 10.0 + i;
    }
    float *s = to_device(mine), *r = to_device(std::vector<float>(n));

    // a ring: every rank sends first; in a group that cannot deadlock
    must(ncclGroupStart());
    must(ncclSend(s, n, ncclFloat, next, world, 0));
    must(ncclRecv(r, n, ncclFloat, prev, world, 0));
    must(ncclGroupEnd());
    expect("ring", to_host(r, n), from_prev);
    snprintf(name, sizeof(name), "ncclSend/ncclRecv in a group: a ring, each rank sending first%s", how);
    report(name);

    // a pair with a neighbour (0-1, 2-3), the receive called first; then nested groups, where
    // only the outer ncclGroupEnd posts (an inner one that did would wait for the receive, which
    // every rank of the ring has, before its send)
    if (partner < P) {
        must(ncclGroupStart());
        must(ncclRecv(r, n, ncclFloat, partner, world, 0));
        must(ncclSend(s, n, ncclFloat, partner, world, 0));
        must(ncclGroupEnd());
        expect("neighbour", to_host(r, n), from_partner);
    }
    cudaMemset(r, 0, n * sizeof(float));
    must(ncclGroupStart());
    must(ncclGroupStart());
    must(ncclRecv(r, n, ncclFloat, prev, world, 0));
    must(ncclGroupEnd());
    must(ncclSend(s, n, ncclFloat, next, world, 0));
    must(ncclGroupEnd());
    expect("nested", to_host(r, n), from_prev);
    snprintf(name, sizeof(name), "ncclSend/ncclRecv in a group: with a neighbour (rank ^ 1), and in nested groups%s", how);
    report(name);

    // the rank itself, and 0 elements to the next: in a group
    cudaMemset(r, 0, n * sizeof(float));
    must(ncclGroupStart());
    must(ncclSend(s, n, ncclFloat, R, world, 0));
    must(ncclRecv(r, n, ncclFloat, R, world, 0));
    must(ncclSend(s, 0, ncclFloat, next, world, 0));
    must(ncclRecv(r, 0, ncclFloat, prev, world, 0));
    must(ncclGroupEnd());
    expect("self", to_host(r, n), from_self);
    snprintf(name, sizeof(name), "ncclSend/ncclRecv in a group: to the rank itself, and of 0 elements%s", how);
    report(name);

    // outside a group, a blocking pair: rank 0 sends to rank 1, which sends it back plus one
    std::vector<int> v(n);
    for (size_t i = 0; i < n; i++) v[i] = (int)i * 7;
    int* iv = to_device(v);
    std::vector<double> back(n);
    for (size_t i = 0; i < n; i++) back[i] = i * 7 + 1;
    if (R == 0) {
        must(ncclSend(iv, n, ncclInt32, 1, world, 0));
        must(ncclRecv(iv, n, ncclInt32, 1, world, 0));
        expect("returned", to_host(iv, n), back);
    } else if (R == 1) {
        cudaMemset(iv, 0, n * sizeof(int));
        must(ncclRecv(iv, n, ncclInt32, 0, world, 0));
        std::vector<int> got = to_host(iv, n);
        for (size_t i = 0; i < n; i++) got[i]++;
        cudaMemcpy(iv, got.data(), n * sizeof(int), cudaMemcpyHostToDevice);
        must(ncclSend(iv, n, ncclInt32, 0, world, 0));
    }
    snprintf(name, sizeof(name), "ncclSend/ncclRecv outside a group: rank 0 to rank 1 and back%s", how);
    report(name);
    cudaFree(s), cudaFree(r), cudaFree(iv);
}

static void check_split(void) {
    char name[128];
    // by parity, ranked in reverse (key -rank): each half all-reduces its world ranks
    ncclComm_t half = NULL;
    must(ncclCommSplit(world, R % 2, -R, &half, NULL));
    int count = -1, rank = -1, members = (P - R % 2 + 1) / 2;
    double sum = 0;
    for (int r = R % 2; r < P; r += 2) sum += r;
    if (half == NULL) die("ncclCommSplit by parity gave no communicator");
    must(ncclCommCount(half, &count));
    must(ncclCommUserRank(half, &rank));
    if (count != members || rank != (P - 1 - R) / 2) {
        fprintf(stderr, "FAIL rank %d: split: rank %d of %d, expected %d of %d\n", R, rank, count, (P - 1 - R) / 2, members);
        ok_ = 0;
    }
    std::vector<float> x(3, (float)R);
    float* d = to_device(x);
    must(ncclAllReduce(d, d, 3, ncclFloat, ncclSum, half, 0));
    expect("split all-reduce", to_host(d, 3), std::vector<double>(3, sum));
    must(ncclCommDestroy(half));
    snprintf(name, sizeof(name), "ncclCommSplit by parity (key -rank: ranks reversed), count, rank, all-reduce in each");
    report(name);

    // the last rank takes no part: NULL for it, the others keep their ranks
    ncclComm_t rest = NULL;
    must(ncclCommSplit(world, R == P - 1 ? NCCL_SPLIT_NOCOLOR : 0, R, &rest, NULL));
    if (R == P - 1) {
        if (rest != NULL) fprintf(stderr, "FAIL rank %d: NCCL_SPLIT_NOCOLOR gave a communicator\n", R), ok_ = 0;
    } else {
        must(ncclCommCount(rest, &count));
        must(ncclCommUserRank(rest, &rank));
        if (count != P - 1 || rank != R) fprintf(stderr, "FAIL rank %d: rank %d of %d\n", R, rank, count), ok_ = 0;
        x.assign(3, (float)R);
        cudaMemcpy(d, x.data(), 3 * sizeof(float), cudaMemcpyHostToDevice);
        must(ncclAllReduce(d, d, 3, ncclFloat, ncclSum, rest, 0));
        expect("nocolor all-reduce", to_host(d, 3), std::vector<double>(3, tri(P - 1)));
    }
    expect_result("ncclCommDestroy(NULL)", ncclCommDestroy(rest), ncclSuccess);
    snprintf(name, sizeof(name), "ncclCommSplit with NCCL_SPLIT_NOCOLOR on rank %d: NULL there, all-reduce in the rest", P - 1);
    report(name);
    cudaFree(d);
}

static void check_refusals(void) {
    float* d = to_device(std::vector<float>(4 * P));
    int c = 0;
    expect_result("ncclAllReduce on a NULL comm", ncclAllReduce(d, d, 4, ncclFloat, ncclSum, NULL, 0), ncclInvalidArgument);
    expect_result("ncclSend to rank P", ncclSend(d, 4, ncclFloat, P, world, 0), ncclInvalidArgument);
    expect_result("ncclRecv from rank -1", ncclRecv(d, 4, ncclFloat, -1, world, 0), ncclInvalidArgument);
    expect_result("ncclCommCount on a NULL comm", ncclCommCount(NULL, &c), ncclInvalidArgument);
    expect_result("ncclGroupEnd outside a group", ncclGroupEnd(), ncclInvalidUsage);
    // a bad call in a group fails the group: nothing of it is posted
    must(ncclGroupStart());
    expect_result("ncclSend to rank P in a group", ncclSend(d, 4, ncclFloat, P, world, 0), ncclInvalidArgument);
    must(ncclSend(d, 4, ncclFloat, (R + 1) % P, world, 0));
    expect_result("ncclGroupEnd after it", ncclGroupEnd(), ncclInvalidArgument);
#ifdef CUDA_EMU  // the emulator's own: NCCL does these, or hangs
    expect_result("ncclAllReduce with ncclMax", ncclAllReduce(d, d, 4, ncclFloat, ncclMax, world, 0), ncclInvalidArgument);
    expect_result("ncclAllReduce of int32", ncclAllReduce(d, d, 4, ncclInt32, ncclSum, world, 0), ncclInvalidArgument);
    expect_result("ncclReduceScatter with ncclAvg", ncclReduceScatter(d, d, 4, ncclFloat, ncclAvg, world, 0),
                  ncclInvalidArgument);
    expect_result("ncclAllGather of type 3 (ncclUint32)", ncclAllGather(d, d, 4, (ncclDataType_t)3, world, 0),
                  ncclInvalidArgument);
    expect_result("ncclSend to itself outside a group", ncclSend(d, 4, ncclFloat, R, world, 0), ncclInvalidUsage);
    expect_result("ncclBroadcast from rank P", ncclBroadcast(d, d, 4, ncclFloat, P, world, 0), ncclInvalidArgument);
    ncclComm_t none = NULL;
    expect_result("ncclCommSplit with color -2", ncclCommSplit(world, -2, 0, &none, NULL), ncclInvalidArgument);
#endif
    report("refused: NULL comm, peer out of range, ncclGroupEnd without a start, a group with a bad call"
#ifdef CUDA_EMU
           "; other ops than sum, integer sums, unknown types, a send to itself outside a group, color -2, a broadcast "
           "from a rank out of range"
#endif
    );
    cudaFree(d);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm local;
    int local_rank = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, R, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &local_rank);
    MPI_Comm_free(&local);
    if (cudaSetDevice(local_rank) != cudaSuccess) die("no GPU of its own for this rank (the emulator: CUDA_EMU_DEVICES=N, N >= ranks)");
    if (P < 2) die("run it under mpirun with 2 ranks or more");
    ncclUniqueId id;
    if (R == 0) must(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    must(ncclCommInitRank(&world, P, id, R));

    if (argc > 1 && strcmp(argv[1], "mismatch") == 0) {  // rank 1 expects 4 floats, rank 0 sends 3
        float* d = to_device(std::vector<float>(4));
        if (R == 0) must(ncclSend(d, 3, ncclFloat, 1, world, 0));
        if (R == 1) must(ncclRecv(d, 4, ncclFloat, 0, world, 0));
        MPI_Finalize();
        return 0;
    }
    check_all_reduce("");
    check_reduce_scatter("");
    check_all_gather("");
    check_broadcast("");
    check_send_recv("");
#ifdef CUDA_EMU
    emu_nccl_chunk = 5;  // every MPI call at most 5 elements: the operations above in pieces
    check_all_reduce(", in pieces of 5");
    check_reduce_scatter(", in pieces of 5");
    check_all_gather(", in pieces of 5");
    check_broadcast(", in pieces of 5");
    check_send_recv(", in pieces of 5");
    emu_nccl_chunk = (size_t)1 << 30;
#endif
    check_split();
    check_refusals();
    must(ncclCommDestroy(world));
    MPI_Finalize();
    return failed;
}
#endif
