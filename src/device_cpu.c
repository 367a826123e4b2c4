/* device_cpu.c — the cpu and fake device tables (device.h).
 *
 * Both run every primitive on the host with the loops of vec.c, in program
 * order: a stream is the order of calls, an event is a counter, and only a
 * transport event makes a wait block (on its transport request).  The
 * fake table differs in what it claims, never in arithmetic: its device
 * memory is accounted in SR_SPACE_DEVICE and the engine treats it as
 * unreachable except by copies, exactly as it will treat a GPU's. */
#include "srconfig.h"

#include "device.h"

#include <stdlib.h>
#include <string.h>

#include "testhook.h"

static void *cpu_alloc(sr_dev *d, sr_mem_space space, sr_mem_cat cat, size_t bytes) {
    /* the cpu table has host memory only; the fake table keeps the space */
    if (!d->separate_memory)
        space = SR_SPACE_HOST;
    void *p = sr_mem_alloc_in(space, cat, bytes, false);
    if (p && d->poison)
        memset(p, 0xff, bytes); /* all ones: a NaN in f32, bf16 and f64 */
    return p;
}

static void cpu_free(sr_dev *d, void *p) {
    (void)d;
    sr_mem_free(p);
}

static void cpu_memset(sr_dev *d, sr_stream s, void *dst, int byte, size_t bytes) {
    (void)d, (void)s;
    if (bytes)
        memset(dst, byte, bytes);
}

static void cpu_copy(sr_dev *d, sr_stream s, void *dst, const void *src, size_t bytes) {
    (void)d, (void)s;
    if (bytes && dst != src)
        memcpy(dst, src, bytes);
}

static void cpu_record(sr_dev *d, sr_event *ev, sr_stream s) {
    *ev = (sr_event){.tick = ++d->ticks[s], .stream = (int)s};
}

static sr_status wait_transport(sr_event *ev) {
    if (!ev->req)
        return SR_OK;
    sr_status st = ev->req_wait(ev->req);
    ev->req = NULL;
    return st;
}

static sr_status cpu_wait(sr_dev *d, sr_stream s, sr_event *ev) {
    (void)d, (void)s;
    return wait_transport(ev);
}

static sr_status cpu_host_wait(sr_dev *d, sr_event *ev) {
    (void)d;
    return wait_transport(ev);
}

static sr_status cpu_sync(sr_dev *d, sr_stream s) {
    (void)d, (void)s;
    return SR_OK;
}

static void cpu_cast_f32_bf16(sr_dev *d, sr_stream s, void *dst, const float *src, size_t n) {
    (void)d, (void)s;
    sr_vec_f32_to_bf16_par(dst, src, n);
}

static void cpu_fold_bf16(sr_dev *d, sr_stream s, float *acc, const void *src, size_t n, bool add) {
    (void)d, (void)s;
    if (add)
        sr_vec_add_bf16_to_f32(acc, src, n);
    else
        sr_vec_bf16_to_f32_par(acc, src, n);
}

static void cpu_add_f32(sr_dev *d, sr_stream s, float *acc, const float *src, size_t n) {
    (void)d, (void)s;
    sr_vec_add_f32(acc, src, n);
}

static void cpu_sum_squares(sr_dev *d, sr_stream s, double *out, const float *x, size_t n) {
    (void)d, (void)s;
    *out = sr_vec_sum_squares(x, n);
}

static void cpu_loss_sum(sr_dev *d, sr_stream s, double *acc, const float *losses, size_t n) {
    (void)d, (void)s;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += losses[i];
    *acc += sum;
}

static void cpu_adamw(sr_dev *d, sr_stream s, const sr_adamw_launch *l) {
    (void)d, (void)s;
    sr_adamw_args a = l->a;
    for (int i = 0; i < l->nsegs; i++) {
        const sr_adamw_segment *g = &l->segs[i];
        a.decay = g->decay ? l->weight_decay : 0.0f;
        sr_vec_adamw_par(l->params + g->off, l->grads + g->off, l->m + g->off, l->v + g->off, g->n, &a);
    }
}

static sr_dev *open_table(const char *name, sr_dev_kind kind, bool separate) {
    sr_dev *d = sr_calloc(1, sizeof *d);
    if (!d)
        return NULL;
    const sr_testhooks *h = sr_testhook();
    *d = (sr_dev){.name = name,
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
    return d;
}

sr_dev *sr_dev_cpu_open(void) { return open_table("cpu", SR_DEV_CPU, false); }
sr_dev *sr_dev_fake_open(void) { return open_table("fake", SR_DEV_FAKE, true); }
