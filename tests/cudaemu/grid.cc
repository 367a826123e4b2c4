/* grid.cc — the emulated kernel grid: runs a launch (kernel.h's
 * cudaemu_launch_raw) on its stream's worker, every block on a host thread
 * (OpenMP over the blocks: CUDAEMU_THREADS, else OpenMP's default), every
 * thread of a block a fiber.
 *
 * Why fibers, and why our own switch: __syncthreads must stop a thread
 * mid-function until the block arrives, so each CUDA thread needs its own
 * stack; swapcontext() makes a system call per switch (the signal mask),
 * far too slow for a reduction that switches at every shuffle, so the
 * switch is six registers of x86-64 code (the only host the emulator
 * builds on).  A thread starts as a call on its own stack and gives the
 * stack back when it ends, so a thread that never waits (every thread of
 * an element-wise kernel) costs a function call.
 *
 * The block scheduler runs in passes: each runnable fiber runs until it
 * waits (a shuffle, a barrier) or exits, then hands over to the pass's
 * next fiber directly (or to the scheduler, which starts new ones).  A
 * shuffle posts the lane's value and waits one pass, so every lane of the
 * warp has posted before any reads (lockstep); the slots alternate by
 * shuffle count, so a lane that runs ahead to its next shuffle never
 * overwrites a value a slower lane still reads.  A barrier releases when
 * no fiber of the block is runnable and at least one waits at it.
 *
 * Misuse is reported, naming the kernel, block and thread, and the
 * process aborts (on a GPU each is undefined behaviour): a barrier that
 * not every thread reaches (one exited before it, or threads wait at
 * different __syncthreads).  The warp-level operations (shuffles, votes,
 * mma, ldmatrix: warp.cc) and shared memory (its race detector, dynamic
 * shared memory, cp.async: smem.cc) report theirs.  The scheduler runs
 * the threads of a barrier interval one after another, so a race is found
 * in any order, not only an unlucky one.  Kernel arguments are checked at
 * the launch (kernel.h, runtime.c), and dynamic shared memory above 48
 * KiB needs the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize.
 * CUDAEMU_MUTATE's kernel mutations (cudaemu.h) are applied here, in
 * warp.cc, smem.cc and kernel.h.
 *
 * AddressSanitizer is told of every switch (start/finish_switch_fiber). */
#include "grid_impl.h"

#include <omp.h>
#include <sys/mman.h>
#include <time.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <vector>

#ifdef CUDAEMU_ASAN
#include <sanitizer/asan_interface.h>
#endif

#if !defined(__x86_64__)
#error "the CUDA emulator's fibers switch with x86-64 code (configure refuses --with-cuda=emulator elsewhere)"
#endif

using namespace cudaemu_grid;

__thread cudaemu_regs cudaemu_r;

namespace {

#ifdef CUDAEMU_ASAN
const size_t STACK_BYTES = 256 * 1024; /* a kernel thread's stack, sanitizer frames included */
#else
const size_t STACK_BYTES = 64 * 1024;
#endif
const int MAX_THREADS = 1024;

/* A context waiting to resume is its stack pointer; on its stack lie the
 * address to resume at and rbp.  switch_to(&save, target) saves the
 * caller there and jumps into `target`; every other register is declared
 * clobbered, so the compiler keeps only what is live, and the jump (not a
 * return) of each site has one or two targets the CPU predicts: no
 * mispredicted returns per switch.  cudaemu_run_on(&sched_sp, top, fn, arg)
 * saves the scheduler the same way (callee-saved registers first: it is
 * called from C++), then calls fn(arg) on the stack that ends at `top`;
 * when fn returns (the thread ended) it resumes whatever sched_sp holds
 * then: its own caller when the thread never waited, else the scheduler's
 * switch_to that last resumed it.  So a thread that never waits costs a
 * call on another stack.  Floating-point control words are not switched:
 * kernels never change them.  grid.cc is built with -mno-red-zone: the
 * switch pushes below the stack pointer. */
extern "C" void cudaemu_run_on(void **sched_sp, void *top, void (*fn)(void *), void *arg);
asm(".text\n"
    ".globl cudaemu_run_on\n"
    ".type cudaemu_run_on,@function\n"
    "cudaemu_run_on:\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  leaq 1f(%rip), %rax\n"
    "  pushq %rbp\n"
    "  pushq %rax\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rdi, %r12\n"
    "  movq %rsi, %rsp\n"
    "  movq %rcx, %rdi\n"
    "  call *%rdx\n"
    "  movq (%r12), %rsp\n"
    "  popq %rax\n"
    "  popq %rbp\n"
    "  jmp *%rax\n"
    "1:\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  ret\n"
    ".size cudaemu_run_on, .-cudaemu_run_on\n"
    ".section .note.GNU-stack,\"\",@progbits\n"
    ".text\n");

inline void switch_to(void **save, void *target) {
    asm volatile("leaq 1f(%%rip), %%rax\n\t"
                 "pushq %%rbp\n\t"
                 "pushq %%rax\n\t"
                 "movq %%rsp, (%%rdi)\n\t"
                 "movq %%rsi, %%rsp\n\t"
                 "popq %%rax\n\t"
                 "popq %%rbp\n\t"
                 "jmp *%%rax\n"
                 "1:"
                 : "+D"(save), "+S"(target)
                 :
                 : "rax", "rbx", "rcx", "rdx", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "memory", "cc",
                   "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",
                   "xmm12", "xmm13", "xmm14", "xmm15", "st", "st(1)", "st(2)", "st(3)", "st(4)", "st(5)", "st(6)",
                   "st(7)");
}

} // namespace

__thread runner *cudaemu_grid::me;

[[noreturn]] __attribute__((format(printf, 1, 2))) void cudaemu_grid::fault(const char *fmt, ...) {
    launch *l = me->l;
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    fprintf(stderr,
            "cudaemu: error: kernel %s, block (%u,%u,%u), thread (%u,%u,%u): %s (the emulator stops here; on a GPU "
            "this is undefined behaviour)\n",
            l->name, cudaemu_r.bid.x, cudaemu_r.bid.y, cudaemu_r.bid.z, cudaemu_r.tid.x, cudaemu_r.tid.y,
            cudaemu_r.tid.z, what);
    abort();
}

namespace {

/* Frees a host thread's runner and stacks when the thread ends (an OpenMP
 * team of a stream's worker ends with the stream). */
struct runner_owner {
    runner *r = nullptr;
    ~runner_owner();
};
thread_local runner_owner owner;

char *new_stack(runner *r) {
    if (!r->free_stacks.empty()) {
        char *s = r->free_stacks.back();
        r->free_stacks.pop_back();
        return s;
    }
    void *p = mmap(nullptr, STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "cudaemu: cannot map a %zu-byte fiber stack\n", STACK_BYTES);
        abort();
    }
    return static_cast<char *>(p);
}

runner_owner::~runner_owner() {
    if (!r)
        return;
    for (char *s : r->free_stacks)
        munmap(s, STACK_BYTES);
    delete r;
    me = nullptr;
}

/* The thread that just stopped (r->cur, its state set) leaves the pass:
 * into the next pass's queue (at a shuffle), the barrier's (waiting), or
 * done, its stack free again (it is still on it, but only the scheduler
 * starts threads, after this one has left it). */
void settle(runner *r) {
    int i = r->cur;
    fiber &f = r->f[i];
    if (f.st == RUN)
        r->next.push_back(i);
    else if (f.st == BARRIER)
        r->barrier.push_back(i);
    else {
        r->free_stacks.push_back(f.stack);
        f.stack = nullptr;
    }
    r->pos++;
}

/* A thread, on its own stack: the kernel, then back to the scheduler by
 * returning (cudaemu_run_on). */
void thread_main(void *arg) {
    runner *r = static_cast<runner *>(arg);
#ifdef CUDAEMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &r->sched_bottom, &r->sched_size);
#endif
    r->l->fn(r->l->ctx);
    smem_thread_end(r); /* (its cp.async copies never waited for are reported) */
    r->f[r->cur].st = DONE;
    settle(r);
#ifdef CUDAEMU_ASAN
    __sanitizer_start_switch_fiber(nullptr, r->sched_bottom, r->sched_size); /* this fiber's frames end */
#endif
}

/* Scheduler -> fiber i (its first run, or where it waits); returns when a
 * thread hands control back to the scheduler. */
void enter(runner *r, int i) {
    fiber &f = r->f[i];
    r->cur = i;
    cudaemu_r.tid = f.tid;
    if (!f.stack) {
        f.stack = new_stack(r);
#ifdef CUDAEMU_ASAN
        __sanitizer_start_switch_fiber(&r->fake, f.stack, STACK_BYTES);
#endif
        cudaemu_run_on(&r->sched_sp, f.stack + STACK_BYTES, thread_main, r);
    } else {
#ifdef CUDAEMU_ASAN
        __sanitizer_start_switch_fiber(&r->fake, f.stack, STACK_BYTES);
#endif
        switch_to(&r->sched_sp, f.sp);
    }
#ifdef CUDAEMU_ASAN
    __sanitizer_finish_switch_fiber(r->fake, nullptr, nullptr);
#endif
}

} // namespace

/* A thread stops here (its state set): it leaves the pass and hands over
 * to the pass's next thread directly when that one waits somewhere (a
 * switch instead of two through the scheduler), else to the scheduler
 * (which starts new threads and ends passes).  Returns when resumed. */
void cudaemu_grid::wait(runner *r) {
    fiber &f = r->f[r->cur];
    settle(r);
#ifdef CUDAEMU_ASAN
    void *fake = nullptr;
#endif
    if (r->pos < r->runq.size()) {
        int j = r->runq[r->pos];
        fiber &g = r->f[j];
        if (g.stack) {
            r->cur = j;
            cudaemu_r.tid = g.tid;
#ifdef CUDAEMU_ASAN
            __sanitizer_start_switch_fiber(&fake, g.stack, STACK_BYTES);
#endif
            switch_to(&f.sp, g.sp);
#ifdef CUDAEMU_ASAN
            __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
            return;
        }
    }
#ifdef CUDAEMU_ASAN
    __sanitizer_start_switch_fiber(&fake, r->sched_bottom, r->sched_size);
#endif
    switch_to(&f.sp, r->sched_sp);
#ifdef CUDAEMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

namespace {

/* At a barrier's release: every waiting thread is at the same
 * __syncthreads, and every thread of the block waits (one that exited
 * never arrives: on a GPU the block hangs or runs on undefined). */
void check_barrier(runner *r) {
    const fiber &w = r->f[r->barrier[0]];
    for (int i : r->barrier) {
        const fiber &f = r->f[i];
        if (f.line != w.line || strcmp(f.file, w.file) != 0) {
            cudaemu_r.tid = f.tid;
            fault("divergent __syncthreads: this thread waits at %s:%d, thread %s at %s:%d", f.file, f.line,
                  tname(r, r->barrier[0]).s, w.file, w.line);
        }
    }
    if ((int)r->barrier.size() == r->n)
        return;
    for (int i = 0; i < r->n; i++)
        if (r->f[i].st == DONE) {
            cudaemu_r.tid = w.tid;
            fault("__syncthreads at %s:%d not reached by every thread of the block: %zu of %d wait there, thread %s "
                  "exited without reaching it",
                  w.file, w.line, r->barrier.size(), r->n, tname(r, i).s);
        }
}

void run_block(runner *r, unsigned long long b) {
    launch *l = r->l;
    cudaemu_r.bid.x = (unsigned)(b % l->grid.x);
    cudaemu_r.bid.y = (unsigned)((b / l->grid.x) % l->grid.y);
    cudaemu_r.bid.z = (unsigned)(b / ((unsigned long long)l->grid.x * l->grid.y));
    int n = r->n;
    unsigned bx = l->block.x, by = l->block.y;
    r->runq.clear();
    r->barrier.clear();
    for (int i = 0; i < n; i++) {
        uint3 tid = {(unsigned)i % bx, ((unsigned)i / bx) % by, (unsigned)i / (bx * by)};
        r->f[i] = fiber{nullptr, nullptr, tid, RUN, 0, 0, nullptr, 0};
        r->slots[0][i].gen = r->slots[1][i].gen = ~0u;
        r->runq.push_back(i);
    }
    for (warp_done &w : r->wd)
        w.gen = ~0u;
    smem_block_start(r);
    for (;;) {
        r->next.clear();
        r->pos = 0;
        while (r->pos < r->runq.size())
            enter(r, r->runq[r->pos]);
        if (!r->next.empty()) {
            r->runq.swap(r->next);
            continue;
        }
        if (r->barrier.empty())
            break;
        /* every thread still running waits at a barrier: the same one, and
         * no thread of the block exited before it (else a report) */
        check_barrier(r);
        r->epoch++;
        r->runq.swap(r->barrier);
        r->barrier.clear();
        for (int i : r->runq)
            r->f[i].st = RUN;
    }
}

int threads(void) {
    static const int n = [] { /* once, whichever stream's worker asks first */
                              const char *v = getenv("CUDAEMU_THREADS");
                              int t = v && *v ? atoi(v) : 0;
                              return t > 0 ? t : omp_get_max_threads();
    }();
    return n;
}

void run_grid(void *arg) {
    launch *l = static_cast<launch *>(arg);
    unsigned long long blocks = (unsigned long long)l->grid.x * l->grid.y * l->grid.z;
    int n = (int)(l->block.x * l->block.y * l->block.z);
    int nt = blocks < (unsigned long long)threads() ? (int)blocks : threads();
#pragma omp parallel num_threads(nt)
    {
        if (!me)
            me = owner.r = new runner; /* kept for the host thread's life: its stacks are reused */
        runner *r = me;
        r->l = l;
        r->n = n;
        if ((int)r->f.size() < n) {
            r->f.resize(n);
            r->cp.resize(n);
            for (int p = 0; p < 2; p++)
                r->slots[p].resize(n);
            r->wd.resize(((size_t)n + 31) / 32);
        }
        cudaemu_r.bdim = {l->block.x, l->block.y, l->block.z};
        cudaemu_r.gdim = {l->grid.x, l->grid.y, l->grid.z};
#pragma omp for schedule(dynamic, 1)
        for (unsigned long long b = 0; b < blocks; b++)
            run_block(r, b);
    }
}

void drop_launch(void *arg) {
    launch *l = static_cast<launch *>(arg);
    char what[160];
    snprintf(what, sizeof what, "kernel %s", l->name);
    cudaemu_check_guards(what, l->guards, l->nguards); /* after the grid ran */
    l->free_ctx(l->ctx);
    delete l;
}

} // namespace

extern "C" void cudaemu_syncthreads(const char *file, int line) {
    runner *r = me;
    fiber &f = r->f[r->cur];
    if (++f.barriers == r->l->drop_bar)
        return; /* CUDAEMU_MUTATE drop_sync: this __syncthreads removed */
    f.st = BARRIER;
    f.file = file;
    f.line = line;
    wait(r);
}

extern "C" void cudaemu_launch_raw(const char *name, const void *func, dim3 grid, dim3 block, size_t shmem,
                                   cudaStream_t stream, void (*fn)(void *), void *ctx, void (*free_ctx)(void *)) {
    unsigned long long nt = (unsigned long long)block.x * block.y * block.z;
    bool ok = grid.x >= 1 && grid.y >= 1 && grid.z >= 1 && grid.x <= 2147483647u && grid.y <= 65535u &&
              grid.z <= 65535u && block.x >= 1 && block.y >= 1 && block.z >= 1 && block.x <= 1024u &&
              block.y <= 1024u && block.z <= 64u && nt <= (unsigned long long)MAX_THREADS;
    /* dynamic shared memory above 48 KiB needs the kernel's
     * cudaFuncAttributeMaxDynamicSharedMemorySize (as on hardware, where
     * the launch fails otherwise), and at most the opt-in limit */
    size_t allowed = cudaemu_func_max_dynamic_shared(func);
    bool shared_ok = shmem <= OPTIN_SHARED && (shmem <= STATIC_SHARED || shmem <= allowed);
    if (!ok || !shared_ok) {
        cudaemu_guard none[16];
        (void)cudaemu_take_guards(none, 16);
        free_ctx(ctx);
        cudaemu_fail(ok ? cudaErrorInvalidValue : cudaErrorInvalidConfiguration);
        return;
    }
    cudaemu_count(CUDAEMU_OP_KERNEL);
    cudaemu_lazy_load(name); /* CUDAEMU_LAZY_LOADING: the first launch may wait for the device */
    int arg = 0;
    const char *m = cudaemu_mutation(name, &arg);
    if (strcmp(m, "grid_minus_one") == 0 && grid.x > 1)
        grid.x -= 1; /* the mutation suite: a grid one block too small */
    bool drop = strcmp(m, "drop_sync") == 0;
    launch *l = new launch{name,
                           grid,
                           block,
                           shmem,
                           fn,
                           ctx,
                           free_ctx,
                           {},
                           0,
                           strcmp(m, "narrow_mask") == 0,
                           drop ? (unsigned)(arg > 0 ? arg : 1) : 0u,
                           strcmp(m, "frag_off_by_one") == 0,
                           strcmp(m, "drop_trans") == 0,
                           strcmp(m, "skip_wait") == 0};
    l->nguards = cudaemu_take_guards(l->guards, 16);
    if (cudaemu_enqueue(stream, run_grid, l, drop_launch) != cudaSuccess)
        drop_launch(l);
}

extern "C" unsigned long long cudaemu_globaltimer(void) {
    struct timespec ts = {0, 50000}; /* 50 us */
    nanosleep(&ts, nullptr);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}
