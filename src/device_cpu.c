/* device_cpu.c — the cpu and fake device tables (device.h).
 *
 * Both run every primitive on the host with the loops of vec.c, in program
 * order: a stream is the order of calls, an event is a counter, and only a
 * transport event makes a wait block (on its transport request).  The
 * fake table differs in what it claims, never in arithmetic: its device
 * memory is accounted in SR_SPACE_DEVICE and the engine treats it as
 * unreachable except by copies, exactly as it will treat a GPU's.
 *
 * With the happens-before checker on (d->hb), every call also tells it
 * what it does: the operation on its stream, and the memory it reads and
 * writes (hbcheck.h). */
#include "srconfig.h"

#include "device.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "testhook.h"

/* The start of one call on stream s: the delay of SHARDRUN_TEST_COMM_DELAY_US
 * when it names this stream; the call then tells the checker what it does
 * (sr_dev_hb_*, no-ops without it). */
static void delay(sr_dev *d, sr_stream s) {
    if (d->delay_us[s] > 0)
        usleep((useconds_t)d->delay_us[s]);
}

static void *cpu_alloc(sr_dev *d, sr_mem_space space, sr_mem_cat cat, size_t bytes) {
    /* the cpu table has host memory only; the fake table keeps the space */
    if (!d->separate_memory)
        space = SR_SPACE_HOST;
    void *p = sr_mem_alloc_in(space, cat, bytes, false);
    if (p && d->poison)
        memset(p, 0xff, bytes); /* all ones: a NaN in f32, bf16 and f64 */
    if (p && sr_dev_hb_alloc(d, p, bytes) != SR_OK) {
        sr_mem_free(p);
        return NULL;
    }
    return p;
}

static void cpu_free(sr_dev *d, void *p) {
    if (p)
        sr_dev_hb_free(d, p, sr_mem_block_bytes(p));
    sr_mem_free(p);
}

static void cpu_memset(sr_dev *d, sr_stream s, void *dst, int byte, size_t bytes) {
    delay(d, s);
    sr_dev_hb_memset(d, s, dst, bytes);
    if (bytes)
        memset(dst, byte, bytes);
}

static void cpu_copy(sr_dev *d, sr_stream s, void *dst, const void *src, size_t bytes) {
    delay(d, s);
    sr_dev_hb_copy(d, s, dst, src, bytes);
    if (bytes && dst != src)
        memcpy(dst, src, bytes);
}

static void cpu_record(sr_dev *d, sr_event *ev, sr_stream s) {
    *ev = (sr_event){.tick = ++d->ticks[s], .stream = (int)s};
    sr_dev_hb_record(d, s, ev);
}

static sr_status cpu_wait(sr_dev *d, sr_stream s, sr_event *ev) {
    sr_dev_hb_wait(d, s, ev);
    return sr_dev_transport_wait(d, ev);
}

static sr_status cpu_host_wait(sr_dev *d, sr_event *ev) {
    sr_dev_hb_host_wait(d, ev);
    return sr_dev_transport_wait(d, ev);
}

static sr_status cpu_sync(sr_dev *d, sr_stream s) {
    sr_dev_hb_sync(d, s);
    return SR_OK;
}

static void cpu_cast_f32_bf16(sr_dev *d, sr_stream s, void *dst, const float *src, size_t n) {
    delay(d, s);
    sr_dev_hb_cast(d, s, dst, src, n);
    sr_vec_f32_to_bf16_par(dst, src, n);
}

static void cpu_fold_bf16(sr_dev *d, sr_stream s, float *acc, const void *src, size_t n, bool add) {
    delay(d, s);
    sr_dev_hb_fold(d, s, acc, src, n, add);
    if (add)
        sr_vec_add_bf16_to_f32(acc, src, n);
    else
        sr_vec_bf16_to_f32_par(acc, src, n);
}

static void cpu_add_f32(sr_dev *d, sr_stream s, float *acc, const float *src, size_t n) {
    delay(d, s);
    sr_dev_hb_add(d, s, acc, src, n);
    sr_vec_add_f32(acc, src, n);
}

static void cpu_sum_squares(sr_dev *d, sr_stream s, double *out, const float *x, size_t n) {
    delay(d, s);
    sr_dev_hb_sum_squares(d, s, out, x, n);
    *out = sr_vec_sum_squares(x, n);
}

static void cpu_loss_sum(sr_dev *d, sr_stream s, double *acc, const float *losses, size_t n, bool add) {
    delay(d, s);
    sr_dev_hb_loss_sum(d, s, acc, losses, n, add);
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += losses[i];
    *acc = add ? *acc + sum : sum;
}

/* AdamW over a launch's segments at memory speed: one OpenMP region for
 * the whole shard, each thread one contiguous range of the segments laid
 * end to end (64-element blocks, sr_vec_split), walked segment by segment
 * for each one's decay rule.  A region per segment (the earlier loop)
 * woke the team ~12 times per block and left threads idle on the small
 * bias and LayerNorm segments; memory traffic is the same 28 bytes per
 * parameter either way.  Elements are independent, so the bits equal any
 * other split. */
static void adamw_segments(const sr_adamw_launch *l) {
    size_t total = 0;
    for (int i = 0; i < l->nsegs; i++)
        total += l->segs[i].n;
#pragma omp parallel if (total > 65536)
    {
        size_t lo, hi;
#ifdef _OPENMP
        sr_vec_split(total, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
#else
        sr_vec_split(total, 0, 1, &lo, &hi);
#endif
        sr_adamw_args a = l->a;
        if (l->sumsq) /* the clipping scale from the device's sum of squares (device.h) */
            a.grad_scale = sr_vec_clip_scale(sqrt(*l->sumsq), l->clip);
        size_t base = 0; /* elements of the segments before segment i */
        for (int i = 0; i < l->nsegs && base < hi; base += l->segs[i].n, i++) {
            const sr_adamw_segment *g = &l->segs[i];
            size_t from = lo > base ? lo - base : 0, to = hi - base < g->n ? hi - base : g->n;
            if (from >= to)
                continue;
            a.decay = g->decay ? l->weight_decay : 0.0f;
            size_t o = g->off + from;
            sr_vec_adamw(l->params + o, l->grads + o, l->m + o, l->v + o, to - from, &a);
            for (size_t i = o; l->params16 && i < o + (to - from); i++) /* the bf16 copy, from the updated range */
                ((uint16_t *)l->params16)[i] = sr_f32_to_bf16(l->params[i]);
        }
    }
}

static void cpu_adamw(sr_dev *d, sr_stream s, const sr_adamw_launch *l) {
    delay(d, s);
    sr_dev_hb_adamw(d, s, l);
    adamw_segments(l);
}

static sr_dev *open_table(const char *name, sr_dev_kind kind, bool separate) {
    sr_dev *d = sr_calloc(1, sizeof *d);
    if (!d)
        return NULL;
    const sr_testhooks *h = sr_testhook();
    sr_dev proto = {.name = name,
                    .kind = kind,
                    .separate_memory = separate,
                    .alloc = cpu_alloc,
                    .free = cpu_free,
                    .memset = cpu_memset,
                    .copy = cpu_copy,
                    .record = cpu_record,
                    .wait = cpu_wait,
                    .host_wait = cpu_host_wait,
                    .sync = cpu_sync,
                    .cast_f32_bf16 = cpu_cast_f32_bf16,
                    .fold_bf16 = cpu_fold_bf16,
                    .add_f32 = cpu_add_f32,
                    .sum_squares = cpu_sum_squares,
                    .loss_sum = cpu_loss_sum,
                    .adamw = cpu_adamw,
                    .state_space = separate ? SR_SPACE_DEVICE : SR_SPACE_HOST,
                    .poison = h->poison,
                    .device_free_bytes = separate && h->device_free_mb >= 0 ? h->device_free_mb << 20 : -1};
    *d = proto;
    if (h->comm_delay_us > 0)
        d->delay_us[h->comm_delay_stream == 1 ? SR_STREAM_COMPUTE : SR_STREAM_COMM] = h->comm_delay_us;
    if (h->hb && !(d->hb = sr_hb_open(true))) {
        free(d);
        return NULL;
    }
    return d;
}

sr_dev *sr_dev_cpu_open(void) { return open_table("cpu", SR_DEV_CPU, false); }
sr_dev *sr_dev_fake_open(void) { return open_table("fake", SR_DEV_FAKE, true); }
