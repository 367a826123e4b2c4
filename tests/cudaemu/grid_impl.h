/* grid_impl.h — what the emulated grid's three files share: the block
 * runner and its fibers (grid.cc: the scheduler, barriers, launches), the
 * warp-level operations (warp.cc: shuffles, votes, mma, ldmatrix) and
 * shared memory (smem.cc: static and dynamic arrays, the race detector,
 * cp.async).  Internal to the emulator. */
#ifndef CUDAEMU_GRID_IMPL_H
#define CUDAEMU_GRID_IMPL_H

#include "kernel.h"

#include <cstdint>
#include <cstdio>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define CUDAEMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUDAEMU_ASAN 1
#endif
#endif

namespace cudaemu_grid {

/* Shared memory per block: static arrays (SR_SHARED) up to 48 KiB, and
 * static and dynamic together up to sm_90's 227 KiB
 * (sharedMemPerBlockOptin); the launch's dynamic bytes live after the
 * static region. */
const size_t STATIC_SHARED = 48 * 1024;
const size_t OPTIN_SHARED = 227 * 1024;

enum state { RUN, BARRIER, DONE };

struct fiber {
    char *stack; /* while it waits somewhere (a stack is taken back when a thread ends) */
    void *sp;    /* where it waits */
    uint3 tid;
    state st;
    unsigned shfl;     /* warp-level operations done (shuffles, votes, mma, ldmatrix) */
    unsigned barriers; /* __syncthreads reached */
    const char *file;  /* the __syncthreads it waits at */
    int line;
};

struct launch {
    const char *name;
    dim3 grid, block;
    size_t shmem; /* dynamic shared memory, bytes */
    void (*fn)(void *);
    void *ctx;
    void (*free_ctx)(void *);
    cudaemu_guard guards[16]; /* its device arguments' allocations */
    int nguards;
    bool narrow;       /* CUDAEMU_MUTATE narrow_mask names this kernel */
    unsigned drop_bar; /* drop_sync: the barrier (1-based, per thread) to skip; 0: none */
    /* the warp-level mutations (cudaemu.h): frag_off_by_one, drop_trans, skip_wait */
    bool frag_off, drop_trans, skip_wait;
};

/* The race detector's shadow of one byte of shared memory: the thread that
 * last wrote it and the first that read it in the current barrier
 * interval (epoch), whether more than one thread read it, and the thread
 * whose cp.async to it has not landed (-1: none). */
struct shadow {
    unsigned w_epoch, r_epoch;
    int16_t writer, reader;
    bool readers;
    int16_t pending;
};

/* One thread's post to a warp-level operation, in the slot of its
 * operation count's parity: the operation (an OP_* tag), its count and
 * its operands. */
struct slot {
    unsigned gen;
    int op;
    uint64_t val;
    uint32_t pay[12];
};

/* One cp.async in flight. */
struct copy {
    char *dst;
    const char *src;
    int bytes;
};
/* A thread's cp.async state: the copies since its last commit, and its
 * committed groups, oldest first. */
struct copies {
    std::vector<copy> cur;
    std::vector<std::vector<copy>> groups;
};

/* One host thread's block runner: its fibers and stacks, reused. */
/* What the first lane of a warp past a warp-level operation found for
 * the whole warp (warp.cc): that every lane is at it, and an mma's
 * outputs, so the other 31 lanes neither check nor compute again. */
struct warp_done {
    unsigned gen = ~0u; /* the operation count it holds (~0: none this block) */
    int op = 0;
    float d[32][4];
};

struct runner {
    launch *l = nullptr;
    int n = 0, cur = 0;
    size_t pos = 0; /* the running thread's place in runq */
    std::vector<fiber> f;
    std::vector<int> runq, next, barrier; /* this pass, the next, waiting at __syncthreads */
    std::vector<char *> free_stacks;
    void *sched_sp = nullptr;
    std::vector<slot> slots[2]; /* warp-level posts, by parity of the operation count */
    std::vector<warp_done> wd;  /* per warp of the block */
    std::vector<copies> cp;     /* per thread */
    /* shared memory: declaration keys and their arrays */
    std::vector<std::pair<const void *, size_t>> shared_keys;
    std::vector<char> shared; /* STATIC_SHARED + OPTIN_SHARED bytes: static, then dynamic */
    size_t shared_used = 0;   /* static bytes */
    std::vector<shadow> sh;   /* one per byte of `shared` */
    unsigned epoch = 0;       /* barrier intervals so far (every block starts a new one) */
#ifdef CUDAEMU_ASAN
    void *fake = nullptr;
    const void *sched_bottom = nullptr;
    size_t sched_size = 0;
#endif
};

extern __thread runner *me;

/* A misuse: "cudaemu: error: kernel K, block (..), thread (..): what", then
 * the process aborts. */
[[noreturn]] __attribute__((format(printf, 1, 2))) void fault(const char *fmt, ...);

/* "(x,y,z)" of thread i of the running block. */
struct tname {
    char s[40];
    tname(const runner *r, int i) {
        const uint3 &t = r->f[i].tid;
        snprintf(s, sizeof s, "(%u,%u,%u)", t.x, t.y, t.z);
    }
};

/* The running thread stops here (its state set) until the scheduler
 * resumes it: a warp-level operation waits one pass (grid.cc). */
void wait(runner *r);

/* smem.cc: a block's shared memory made fresh (its static arrays forgotten,
 * its dynamic bytes 0xff, no cp.async in flight); at a thread's end, its
 * cp.async copies never waited for are reported. */
void smem_block_start(runner *r);
void smem_thread_end(runner *r);
/* Whether [p, p + bytes) lies in the block's shared memory (static or
 * dynamic). */
bool smem_holds(const runner *r, const void *p, size_t bytes);

} // namespace cudaemu_grid

#endif
