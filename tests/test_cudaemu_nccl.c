/* test_cudaemu_nccl.c — the emulated NCCL (tests/cudaemu/nccl.c) against
 * NCCL's documented behaviour, three ranks as three threads of this process
 * (each on its own emulated GPU and stream; the ranks still meet at the
 * hub over TCP, as processes do): the version and the error strings, a
 * config not made with NCCL_CONFIG_INITIALIZER refused, nonblocking init
 * answering ncclInProgress then ncclSuccess, all-gather, reduce-scatter
 * and all-reduce (in place at NCCL's offsets and out of place) in f32,
 * bf16 and f64 against the sum, reduced in rank order (values chosen so
 * that any other order gives another answer), collectives in stream order,
 * nonblocking ncclCommSplit by color and key with NCCL_SPLIT_NOCOLOR, a
 * collective one rank never enters left waiting until ncclCommAbort from
 * another thread releases the stream, the others then seeing an
 * asynchronous ncclRemoteError naming the lost rank, and finalize and
 * destroy. */
#include "srconfig.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <nccl.h>

#include "cudaemu.h"
#include "tap.h"

#define R 3

static ncclUniqueId uid;
static ncclComm_t world[R];

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Polls a nonblocking communicator until its operation resolves (5 s). */
static ncclResult_t settle(ncclComm_t c, ncclResult_t r) {
    double end = now_s() + 5;
    while (r == ncclInProgress && now_s() < end) {
        if (ncclCommGetAsyncError(c, &r) != ncclSuccess)
            return ncclInternalError;
        if (r == ncclInProgress)
            usleep(1000);
    }
    return r;
}

typedef struct {
    int rank;
    ncclResult_t first, done; /* init's answer, and after polling */
    int ok_gather, ok_gather_inplace, ok_rs, ok_rs_inplace, ok_f32_order, ok_bf16_order, ok_f64, ok_stream_order;
    int ok_split_gather, nocolor_null;
} rank_result;
static rank_result res[R];

static void *rank_main(void *arg) {
    rank_result *me = arg;
    int r = me->rank;
    cudaSetDevice(r);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    me->first = ncclCommInitRankConfig(&world[r], R, uid, r, &config);
    me->done = settle(world[r], me->first);
    if (me->done != ncclSuccess)
        return NULL;
    ncclComm_t comm = world[r];
    cudaStream_t s;
    cudaStreamCreate(&s);
    enum { N = 4 };
    float host[R * N], back[R * N];
    float *recv, *send;
    cudaMalloc((void **)&recv, sizeof host);
    cudaMalloc((void **)&send, sizeof host);

    /* all-gather, out of place: rank q's N values are q*10 + i */
    for (int i = 0; i < N; i++)
        host[i] = (float)(r * 10 + i);
    cudaMemcpy(send, host, N * sizeof(float), cudaMemcpyHostToDevice);
    ncclResult_t a = ncclAllGather(send, recv, N, ncclFloat32, comm, s);
    cudaStreamSynchronize(s);
    cudaMemcpy(back, recv, sizeof back, cudaMemcpyDeviceToHost);
    int ok = a == ncclSuccess;
    for (int q = 0; q < R; q++)
        for (int i = 0; i < N; i++)
            ok &= back[q * N + i] == (float)(q * 10 + i);
    me->ok_gather = ok;

    /* all-gather in place: sendbuff == recvbuff + rank * sendcount */
    cudaMemset(recv, 0, sizeof host);
    for (int i = 0; i < N; i++)
        host[i] = (float)(100 + r * 10 + i);
    cudaMemcpy(recv + r * N, host, N * sizeof(float), cudaMemcpyHostToDevice);
    a = ncclAllGather(recv + r * N, recv, N, ncclFloat32, comm, s);
    cudaStreamSynchronize(s);
    cudaMemcpy(back, recv, sizeof back, cudaMemcpyDeviceToHost);
    ok = a == ncclSuccess;
    for (int q = 0; q < R; q++)
        for (int i = 0; i < N; i++)
            ok &= back[q * N + i] == (float)(100 + q * 10 + i);
    me->ok_gather_inplace = ok;

    /* reduce-scatter, out of place: element j of rank q's input is q + j;
     * rank r receives the sums of block r */
    for (int j = 0; j < R * N; j++)
        host[j] = (float)(r + j);
    cudaMemcpy(send, host, sizeof host, cudaMemcpyHostToDevice);
    a = ncclReduceScatter(send, recv, N, ncclFloat32, ncclSum, comm, s);
    cudaStreamSynchronize(s);
    cudaMemcpy(back, recv, N * sizeof(float), cudaMemcpyDeviceToHost);
    ok = a == ncclSuccess;
    for (int i = 0; i < N; i++)
        ok &= back[i] == (float)(0 + 1 + 2 + R * (r * N + i));
    me->ok_rs = ok;

    /* reduce-scatter in place: recvbuff == sendbuff + rank * recvcount */
    cudaMemcpy(send, host, sizeof host, cudaMemcpyHostToDevice);
    a = ncclReduceScatter(send, send + r * N, N, ncclFloat32, ncclSum, comm, s);
    cudaStreamSynchronize(s);
    cudaMemcpy(back, send + r * N, N * sizeof(float), cudaMemcpyDeviceToHost);
    ok = a == ncclSuccess;
    for (int i = 0; i < N; i++)
        ok &= back[i] == (float)(0 + 1 + 2 + R * (r * N + i));
    me->ok_rs_inplace = ok;

    /* f32 all-reduce in rank order: 1 + 2^-24 + 2^-24 is 1 from the left
     * (each addition rounds to even), 1 + 2^-23 from the right */
    float v = r == 0 ? 1.0f : 0x1p-24f, got = 0;
    cudaMemcpy(send, &v, sizeof v, cudaMemcpyHostToDevice);
    a = ncclAllReduce(send, send, 1, ncclFloat32, ncclSum, comm, s);
    cudaStreamSynchronize(s);
    cudaMemcpy(&got, send, sizeof got, cudaMemcpyDeviceToHost);
    me->ok_f32_order = a == ncclSuccess && got == 1.0f;

    /* bf16 all-reduce, rounded after each addition in rank order: 1 + 2^-8
     * + 2^-8 is 1 (each a tie, to even), 1 + 2^-7 from the right */
    uint16_t h = cudaemu_f32_to_bf16(r == 0 ? 1.0f : 0x1p-8f), hb = 0;
    uint16_t *dh;
    cudaMalloc((void **)&dh, sizeof h);
    cudaMemcpy(dh, &h, sizeof h, cudaMemcpyHostToDevice);
    a = ncclAllReduce(dh, dh, 1, ncclBfloat16, ncclSum, comm, s);
    cudaStreamSynchronize(s);
    cudaMemcpy(&hb, dh, sizeof hb, cudaMemcpyDeviceToHost);
    me->ok_bf16_order = a == ncclSuccess && cudaemu_bf16_to_f32(hb) == 1.0f;

    /* f64 all-reduce, out of place */
    double d = 0.5 + r, dsum = 0;
    double *dd;
    cudaMalloc((void **)&dd, 2 * sizeof d);
    cudaMemcpy(dd, &d, sizeof d, cudaMemcpyHostToDevice);
    a = ncclAllReduce(dd, dd + 1, 1, ncclFloat64, ncclSum, comm, s);
    cudaStreamSynchronize(s);
    cudaMemcpy(&dsum, dd + 1, sizeof dsum, cudaMemcpyDeviceToHost);
    me->ok_f64 = a == ncclSuccess && dsum == 0.5 + 1.5 + 2.5;

    /* stream order: a copy enqueued after the collective sees its result */
    v = 1.0f + (float)r;
    cudaMemcpy(send, &v, sizeof v, cudaMemcpyHostToDevice);
    ncclAllReduce(send, send, 1, ncclFloat32, ncclSum, comm, s);
    cudaMemcpyAsync(send + 1, send, sizeof(float), cudaMemcpyDeviceToDevice, s);
    cudaStreamSynchronize(s);
    cudaMemcpy(&got, send + 1, sizeof got, cudaMemcpyDeviceToHost);
    me->ok_stream_order = got == 6.0f;

    /* split: ranks 0 and 2 (color 7), keys -rank, so rank 2 is the child's
     * rank 0; rank 1 passes NCCL_SPLIT_NOCOLOR */
    ncclComm_t child = NULL;
    ncclConfig_t cc = NCCL_CONFIG_INITIALIZER;
    cc.blocking = 0;
    ncclResult_t sr = ncclCommSplit(comm, r == 1 ? NCCL_SPLIT_NOCOLOR : 7, -r, &child, &cc);
    if (r == 1) {
        me->nocolor_null = sr == ncclSuccess && child == NULL;
    } else if (settle(child, sr) == ncclSuccess) {
        float mine = (float)r, both[2] = {-1, -1};
        cudaMemcpy(send, &mine, sizeof mine, cudaMemcpyHostToDevice);
        ncclAllGather(send, recv, 1, ncclFloat32, child, s);
        cudaStreamSynchronize(s);
        cudaMemcpy(both, recv, sizeof both, cudaMemcpyDeviceToHost);
        me->ok_split_gather = both[0] == 2.0f && both[1] == 0.0f;
        ncclResult_t f = ncclCommFinalize(child);
        settle(child, f);
        ncclCommDestroy(child);
    }
    cudaFree(dd);
    cudaFree(dh);
    cudaFree(send);
    cudaFree(recv);
    cudaStreamDestroy(s);
    return NULL;
}

/* ---- a collective one rank never enters --------------------------------- */

static ncclComm_t stall[2];
static cudaStream_t stall_stream;
static float *stall_buf;

static void *stall_init(void *arg) {
    int r = (int)(intptr_t)arg;
    cudaSetDevice(r);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    settle(stall[r], ncclCommInitRankConfig(&stall[r], 2, uid, r, &config));
    return NULL;
}

static void *abort_rank0(void *arg) {
    (void)arg;
    ncclCommAbort(stall[0]);
    return NULL;
}

int main(void) {
    setenv("CUDAEMU_DEVICES", "3", 1);
    setenv("CUDAEMU_MEM_MB", "64", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    setenv("NCCL_SOCKET_IFNAME", "lo", 1); /* the hub on loopback */

    int version = 0;
    ncclResult_t vr = ncclGetVersion(&version);
    tap_ok(vr == ncclSuccess && version == NCCL_VERSION_CODE, "ncclGetVersion: the headers' NCCL_VERSION_CODE (%d)",
           version);
    tap_ok(strcmp(ncclGetErrorString(ncclRemoteError), "remote process exited or there was a network error") == 0 &&
               strcmp(ncclGetErrorString(ncclInProgress), "NCCL operation in progress") == 0 &&
               strcmp(ncclGetErrorString(ncclSuccess), "no error") == 0,
           "ncclGetErrorString: NCCL's own strings");
    tap_ok(ncclGetUniqueId(&uid) == ncclSuccess, "ncclGetUniqueId opens the hub");

    ncclConfig_t bad;
    memset(&bad, 0, sizeof bad);
    ncclComm_t none = NULL;
    tap_ok(ncclCommInitRankConfig(&none, R, uid, 0, &bad) == ncclInvalidArgument && none == NULL &&
               strstr(ncclGetLastError(NULL), "NCCL_CONFIG_INITIALIZER") != NULL,
           "a config not made with NCCL_CONFIG_INITIALIZER: ncclInvalidArgument, ncclGetLastError says why");

    pthread_t th[R];
    for (int r = 0; r < R; r++) {
        res[r].rank = r;
        pthread_create(&th[r], NULL, rank_main, &res[r]);
    }
    for (int r = 0; r < R; r++)
        pthread_join(th[r], NULL);
    int all = 1;
#define ALL(field)                                                                                                     \
    do {                                                                                                               \
        all = 1;                                                                                                       \
        for (int r_ = 0; r_ < R; r_++)                                                                                 \
            all &= res[r_].field;                                                                                      \
    } while (0)
    tap_ok(res[0].first == ncclInProgress && res[1].first == ncclInProgress && res[2].first == ncclInProgress &&
               res[0].done == ncclSuccess && res[1].done == ncclSuccess && res[2].done == ncclSuccess,
           "nonblocking ncclCommInitRankConfig: ncclInProgress, then ncclSuccess by ncclCommGetAsyncError");
    ALL(ok_gather);
    tap_ok(all, "ncclAllGather out of place: every rank's part in rank order");
    ALL(ok_gather_inplace);
    tap_ok(all, "ncclAllGather in place (sendbuff == recvbuff + rank * sendcount)");
    ALL(ok_rs);
    tap_ok(all, "ncclReduceScatter out of place: rank r receives the sums of block r");
    ALL(ok_rs_inplace);
    tap_ok(all, "ncclReduceScatter in place (recvbuff == sendbuff + rank * recvcount)");
    ALL(ok_f32_order);
    tap_ok(all, "f32 ncclAllReduce sums in rank order (1 + 2^-24 + 2^-24 = 1, not 1 + 2^-23)");
    ALL(ok_bf16_order);
    tap_ok(all, "bf16 ncclAllReduce rounds after each addition in rank order (1 + 2^-8 + 2^-8 = 1)");
    ALL(ok_f64);
    tap_ok(all, "f64 ncclAllReduce out of place");
    ALL(ok_stream_order);
    tap_ok(all, "a copy enqueued after a collective on its stream sees the result");
    tap_ok(res[0].ok_split_gather && res[2].ok_split_gather,
           "nonblocking ncclCommSplit: ranks 0 and 2 by key -rank: the child's rank 0 is world rank 2");
    tap_ok(res[1].nocolor_null, "NCCL_SPLIT_NOCOLOR: ncclSuccess and no communicator");
    int clean = 1;
    for (int r = 0; r < R; r++) {
        ncclResult_t f = ncclCommFinalize(world[r]);
        clean &= settle(world[r], f) == ncclSuccess;
        clean &= ncclCommDestroy(world[r]) == ncclSuccess;
    }
    tap_ok(clean, "ncclCommFinalize and ncclCommDestroy on every rank");

    /* a collective rank 1 never enters: rank 0's stream waits until rank 0
     * aborts (from another thread); rank 1 then hears that rank 0 is gone */
    tap_ok(ncclGetUniqueId(&uid) == ncclSuccess, "a second unique id, a second hub");
    pthread_t t0, t1;
    pthread_create(&t0, NULL, stall_init, (void *)(intptr_t)0);
    pthread_create(&t1, NULL, stall_init, (void *)(intptr_t)1);
    pthread_join(t0, NULL);
    pthread_join(t1, NULL);
    cudaSetDevice(0);
    cudaStreamCreate(&stall_stream);
    cudaMalloc((void **)&stall_buf, 16);
    cudaEvent_t ev;
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    ncclResult_t a = ncclAllReduce(stall_buf, stall_buf, 4, ncclFloat32, ncclSum, stall[0], stall_stream);
    cudaEventRecord(ev, stall_stream);
    usleep(200000);
    cudaemu_set_notready_error(0);
    tap_ok(a == ncclSuccess && cudaEventQuery(ev) == cudaErrorNotReady,
           "a collective rank 1 never enters: enqueued, and 200 ms later still not complete");
    pthread_t ab;
    pthread_create(&ab, NULL, abort_rank0, NULL);
    pthread_join(ab, NULL);
    tap_ok(cudaEventSynchronize(ev) == cudaSuccess, "ncclCommAbort from another thread releases the stream");
    ncclResult_t async = ncclInProgress;
    double end = now_s() + 5;
    while ((async == ncclSuccess || async == ncclInProgress) && now_s() < end) {
        ncclCommGetAsyncError(stall[1], &async);
        usleep(1000);
    }
    tap_ok(async == ncclRemoteError && strstr(ncclGetLastError(stall[1]), "rank 0 (world rank 0") != NULL,
           "  ...and rank 1 sees an asynchronous ncclRemoteError naming rank 0: %s", ncclGetLastError(stall[1]));
    tap_ok(ncclAllReduce(stall_buf, stall_buf, 4, ncclFloat32, ncclSum, stall[1], stall_stream) == ncclRemoteError,
           "  ...and its next collective returns that error");
    ncclCommAbort(stall[1]);
    cudaEventDestroy(ev);
    cudaFree(stall_buf);
    cudaStreamDestroy(stall_stream);
    return tap_done();
}
