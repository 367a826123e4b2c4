/* smem.cc — the emulated block's shared memory: static arrays (SR_SHARED,
 * up to 48 KiB), the launch's dynamic bytes (SR_SHARED_DYN, up to
 * sm_90's 227 KiB with the static ones), the race detector every access
 * passes, and cp.async (PTX ISA 9.7.9.25: cp.async.{ca,cg}.shared.global,
 * commit_group, wait_group, wait_all).
 *
 * A block's shared memory is one buffer: the static arrays from offset 0
 * in the order the kernel declares them, the dynamic bytes from 48 KiB;
 * both start as 0xff bytes (NaN for floats).  The race detector keeps a
 * shadow per byte: two threads touching a byte between barriers, one of
 * them writing, is reported naming both.
 *
 * cp.async is a copy deferred to the wait that covers it: at issue its
 * destination bytes are poisoned (0xff) and marked in flight; commit
 * closes the thread's group; wait_group N lands every committed group but
 * the newest N (the source read then, the destination written as the
 * waiting thread's own write), wait_all commits and lands them all.  A
 * read or write of a byte in flight is reported (a missing wait is
 * caught, never papered over), so is a thread that ends with a copy not
 * waited for.  What is not modelled: timing, bank conflicts (a swizzled
 * layout is tested by its results), the async proxy's fences beyond
 * cp.async's own waits.
 *
 * The mutation suite's skip_wait (cudaemu.h) makes every wait_group and
 * wait_all land nothing: the kernel's next read of the destination must
 * be reported. */
#include "grid_impl.h"

#include <cstring>

using namespace cudaemu_grid;

namespace {

/* The shared buffer and its shadows, allocated once per runner. */
void ensure(runner *r) {
    if (r->shared.size() < STATIC_SHARED + OPTIN_SHARED) {
        r->shared.resize(STATIC_SHARED + OPTIN_SHARED);
        r->sh.assign(STATIC_SHARED + OPTIN_SHARED, shadow{0, 0, -1, -1, false, -1});
    }
}

/* A copy lands: source to destination, the bytes no longer in flight,
 * written by the running thread. */
void land(runner *r, const copy &c) {
    memcpy(c.dst, c.src, (size_t)c.bytes);
    size_t off = (size_t)(c.dst - r->shared.data());
    for (size_t b = off; b < off + (size_t)c.bytes; b++)
        r->sh[b].pending = -1;
    cudaemu_shared_access(c.dst, (size_t)c.bytes, 1, "a cp.async destination");
}

} // namespace

bool cudaemu_grid::smem_holds(const runner *r, const void *p, size_t bytes) {
    const char *c = static_cast<const char *>(p), *base = r->shared.data();
    if (!base || c < base)
        return false;
    size_t off = (size_t)(c - base);
    if (off + bytes <= r->shared_used)
        return true; /* a static array */
    return off >= STATIC_SHARED && off + bytes <= STATIC_SHARED + r->l->shmem;
}

void cudaemu_grid::smem_block_start(runner *r) {
    r->shared_keys.clear();
    r->shared_used = 0;
    r->epoch++;
    for (int i = 0; i < r->n; i++) {
        r->cp[i].cur.clear();
        r->cp[i].groups.clear();
    }
    if (r->l->shmem) {
        ensure(r);
        memset(r->shared.data() + STATIC_SHARED, 0xff, r->l->shmem);
        for (size_t b = STATIC_SHARED; b < STATIC_SHARED + r->l->shmem; b++)
            r->sh[b].pending = -1;
    }
}

void cudaemu_grid::smem_thread_end(runner *r) {
    copies &c = r->cp[r->cur];
    size_t n = c.cur.size();
    for (auto &g : c.groups)
        n += g.size();
    if (n)
        fault("the thread ends with %zu cp.async cop%s never waited for (%zu committed group%s, %zu uncommitted "
              "cop%s): every cp.async needs a cp.async.wait_group or wait_all before the kernel ends",
              n, n == 1 ? "y" : "ies", c.groups.size(), c.groups.size() == 1 ? "" : "s", c.cur.size(),
              c.cur.size() == 1 ? "y" : "ies");
}

extern "C" void *cudaemu_shared(const void *key, size_t bytes) {
    runner *r = me;
    size_t off = 0;
    for (auto &k : r->shared_keys) {
        if (k.first == key)
            return r->shared.data() + off;
        off += (k.second + 15) / 16 * 16;
    }
    size_t need = r->shared_used + (bytes + 15) / 16 * 16;
    if (need > STATIC_SHARED)
        fault("more than 48 KiB of static shared memory");
    if (need + r->l->shmem > OPTIN_SHARED)
        fault("%zu bytes of static shared memory and the launch's %zu of dynamic: more than the 227 KiB a block may "
              "have (sharedMemPerBlockOptin)",
              need, r->l->shmem);
    ensure(r);
    char *p = r->shared.data() + r->shared_used;
    memset(p, 0xff, bytes);
    r->shared_keys.push_back({key, bytes});
    r->shared_used = need;
    return p;
}

extern "C" void *cudaemu_dynamic_shared(size_t *bytes) {
    runner *r = me;
    ensure(r);
    *bytes = r->l->shmem;
    return r->shared.data() + STATIC_SHARED;
}

extern "C" void cudaemu_shared_access(const void *p, size_t bytes, int write, const char *name) {
    runner *r = me;
    int t = r->cur;
    unsigned e = r->epoch;
    size_t off = (size_t)(static_cast<const char *>(p) - r->shared.data());
    for (size_t b = off; b < off + bytes; b++) {
        shadow &s = r->sh[b];
        if (s.pending >= 0)
            fault("%s %s (byte %zu of the block's shared memory) while thread %s's cp.async to it is in flight: no "
                  "cp.async.wait_group (or wait_all) covers that copy yet",
                  write ? "writes" : "reads", name, b, tname(r, s.pending).s);
        int other = -1;
        const char *how = nullptr;
        if (s.w_epoch == e && s.writer != t) {
            other = s.writer;
            how = "wrote";
        } else if (write && s.r_epoch == e && (s.reader != t || s.readers)) {
            other = s.reader != t ? s.reader : -1;
            how = "read";
        }
        if (how) {
            char who[64];
            if (other >= 0)
                snprintf(who, sizeof who, "thread %s", tname(r, other).s);
            else
                snprintf(who, sizeof who, "another thread");
            fault("shared-memory race on %s (byte %zu of the block's shared memory): this thread %s it after %s %s it, "
                  "with no __syncthreads between",
                  name, b, write ? "writes" : "reads", who, how);
        }
        if (write) {
            s.w_epoch = e;
            s.writer = (int16_t)t;
        } else if (s.r_epoch != e) {
            s.r_epoch = e;
            s.reader = (int16_t)t;
            s.readers = false;
        } else if (s.reader != t)
            s.readers = true;
    }
}

extern "C" void cudaemu_shared_oob(const char *name, long long i, size_t n) {
    fault("shared array %s[%zu] indexed at %lld, out of bounds", name, n, i);
}

extern "C" void *cudaemu_shared_ptr(const void *base, long long i, size_t n, size_t elem, const char *name) {
    if (i < 0 || (unsigned long long)i > n)
        fault("a pointer to %s[%lld] (an array of %zu), out of bounds", name, i, n);
    return (char *)base + (size_t)i * elem;
}

extern "C" void cudaemu_cp_async(void *dst, const void *src, int bytes, int cg) {
    runner *r = me;
    const char *kind = cg ? "cp.async.cg.shared.global" : "cp.async.ca.shared.global";
    if (cg ? bytes != 16 : bytes != 4 && bytes != 8 && bytes != 16)
        fault("%s of %d bytes: it copies %s", kind, bytes, cg ? "16" : "4, 8 or 16");
    if ((uintptr_t)dst % (uintptr_t)bytes || (uintptr_t)src % (uintptr_t)bytes)
        fault("%s of %d bytes from %p to %p: both addresses must be aligned to %d bytes", kind, bytes, src, dst, bytes);
    if (!smem_holds(r, dst, (size_t)bytes))
        fault("%s to %p: the destination is not in the block's shared memory", kind, dst);
    /* the bytes are poisoned and in flight until a wait lands them; a
     * second copy to a byte in flight is a race with the first */
    char *d = static_cast<char *>(dst);
    size_t off = (size_t)(d - r->shared.data());
    for (size_t b = off; b < off + (size_t)bytes; b++) {
        if (r->sh[b].pending >= 0)
            fault("%s to byte %zu of the block's shared memory while thread %s's cp.async to it is in flight", kind, b,
                  tname(r, r->sh[b].pending).s);
        r->sh[b].pending = (int16_t)r->cur;
    }
    memset(d, 0xff, (size_t)bytes);
    r->cp[r->cur].cur.push_back(copy{d, static_cast<const char *>(src), bytes});
}

extern "C" void cudaemu_cp_async_commit(void) {
    copies &c = me->cp[me->cur];
    c.groups.push_back(std::move(c.cur));
    c.cur.clear();
}

extern "C" void cudaemu_cp_async_wait(int n) {
    runner *r = me;
    copies &c = r->cp[r->cur];
    if (n < 0) { /* wait_all: commit, then wait_group 0 */
        cudaemu_cp_async_commit();
        n = 0;
    }
    if (r->l->skip_wait)
        return; /* CUDAEMU_MUTATE skip_wait: this wait removed */
    while (c.groups.size() > (size_t)n) {
        for (const copy &k : c.groups.front())
            land(r, k);
        c.groups.erase(c.groups.begin());
    }
}
