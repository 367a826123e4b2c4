/* test_hb.c — the happens-before checker (hbcheck.h) on its own, and
 * through the cpu device table: correct orderings pass, and every planted
 * missing wait is reported with both sites. */
#include "srconfig.h"

#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "hbcheck.h"
#include "tap.h"

enum { C = 0, M = 1, H2D = 2, D2H = 3, T = SR_HB_TRANSPORT, HOST = SR_HB_HOST };

/* One access on `agent` as its own operation. */
static sr_status op(sr_hb *s, int agent, const void *p, size_t n, bool write, const char *site) {
    if (agent != HOST)
        sr_hb_issue(s, agent, -1);
    return sr_hb_access(s, agent, p, n, write, site);
}

int main(void) {
    static char buf[4096], other[64];
    sr_hb *s = sr_hb_open(false);
    tap_ok(s != NULL, "a checker opens");
    sr_hb_track(s, buf, sizeof buf);

    /* producer -> event -> consumer: ordered */
    sr_hb_clock ev;
    op(s, C, buf, 1024, true, "compute writes");
    sr_hb_stamp(s, C, &ev);
    sr_hb_issue(s, M, -1);
    sr_hb_merge(s, M, &ev);
    tap_ok(op(s, M, buf, 1024, false, "comm reads") == SR_OK && sr_hb_violations(s) == 0,
           "a read after a wait on the writer's event passes");

    /* the same without the wait: reported, naming both sites */
    op(s, C, buf + 2048, 512, true, "compute writes B");
    tap_ok(op(s, M, buf + 2048, 512, false, "comm reads B") == SR_ERR_INTERNAL && sr_hb_violations(s) == 1,
           "a read with no wait on the writer is reported");
    const char *msg = sr_hb_last(s);
    tap_ok(strstr(msg, "comm reads 512 bytes") && strstr(msg, "comm reads B") && strstr(msg, "write by compute") &&
               strstr(msg, "compute writes B"),
           "the report names both sides: %s", msg);

    /* write after read: the writer must know the reader */
    sr_hb_close(s);
    s = sr_hb_open(false);
    sr_hb_track(s, buf, sizeof buf);
    op(s, C, buf, 256, true, "init");
    sr_hb_stamp(s, C, &ev);
    sr_hb_issue(s, T, M);
    sr_hb_merge(s, T, &ev);
    op(s, T, buf, 256, false, "all-gather reads the shard");
    op(s, C, buf, 256, true, "adamw writes the shard");
    tap_ok(sr_hb_violations(s) == 1 && strstr(sr_hb_last(s), "after the read by transport"),
           "a write before an earlier read finished is reported (write after read): %s", sr_hb_last(s));

    /* host waits count and order: download, then the host reads */
    sr_hb_close(s);
    s = sr_hb_open(false);
    sr_hb_track(s, buf, sizeof buf);
    sr_hb_track(s, other, sizeof other);
    op(s, D2H, other, 8, true, "d2h copy");
    sr_hb_clock d2h;
    sr_hb_stamp(s, D2H, &d2h);
    sr_hb_host_wait(s, &d2h, "step_scalars");
    tap_ok(op(s, HOST, other, 8, false, "host reads") == SR_OK && sr_hb_host_waits(s) == 1,
           "a host wait orders the host's read and is counted");

    /* byte ranges: a slice's history does not alias its neighbour's */
    op(s, C, buf, 100, true, "compute writes [0,100)");
    op(s, M, buf + 100, 100, true, "comm writes [100,200)");
    tap_ok(sr_hb_violations(s) == 0, "disjoint slices on two streams need no ordering");
    tap_ok(op(s, M, buf + 50, 100, false, "comm reads [50,150)") == SR_ERR_INTERNAL,
           "a read overlapping another stream's slice is reported");

    /* a collective is ordered after the stream it is issued on */
    sr_hb_close(s);
    s = sr_hb_open(false);
    sr_hb_track(s, buf, sizeof buf);
    op(s, M, buf, 64, true, "cast into the send buffer");
    sr_hb_issue(s, T, M);
    tap_ok(sr_hb_access(s, T, buf, 64, false, "all-gather") == SR_OK,
           "a collective reads what its stream wrote before it");
    sr_hb_issue(s, T, -1);
    op(s, C, buf, 64, true, "compute overwrites");
    tap_ok(sr_hb_violations(s) == 1, "...but compute must wait for the collective before overwriting its input");

    /* untracked and forgotten memory is not checked */
    static char loose[64];
    op(s, C, loose, 64, true, "w");
    tap_ok(op(s, M, loose, 64, false, "r") == SR_OK, "untracked memory is not checked");
    sr_hb_forget(s, buf, sizeof buf);
    tap_ok(op(s, M, buf, 64, false, "r") == SR_OK, "forgotten memory has no history");
    sr_hb_close(s);

    /* through the cpu table: a planted missing wait between comm and compute */
    setenv("SHARDRUN_TEST_HB", "0", 1);
    sr_dev *d = sr_dev_cpu_open();
    d->hb = sr_hb_open(false);
    float *x = d->alloc(d, SR_SPACE_HOST, SR_MEM_OTHER, 256 * sizeof(float));
    float *y = d->alloc(d, SR_SPACE_HOST, SR_MEM_OTHER, 256 * sizeof(float));
    d->memset(d, SR_STREAM_COMPUTE, x, 0, 256 * sizeof(float));
    sr_event e = {0};
    d->record(d, &e, SR_STREAM_COMPUTE);
    sr_dev_wait(d, SR_STREAM_COMM, &e, "grads_ready");
    d->cast_f32_bf16(d, SR_STREAM_COMM, y, x, 256);
    tap_ok(sr_hb_violations(d->hb) == 0, "table: comm casts what compute wrote, after waiting for it");
    d->add_f32(d, SR_STREAM_COMPUTE, x, x, 256);
    tap_ok(sr_hb_violations(d->hb) == 1 && strstr(sr_hb_last(d->hb), "add_f32"),
           "table: compute overwriting what comm still reads is reported: %s", sr_hb_last(d->hb));
    double out = 0, *z = d->alloc(d, SR_SPACE_HOST, SR_MEM_OTHER, sizeof(double));
    d->sum_squares(d, SR_STREAM_COMPUTE, z, x, 4);
    sr_event zdone = {0};
    d->record(d, &zdone, SR_STREAM_COMPUTE);
    sr_dev_wait(d, SR_STREAM_D2H, &zdone, "scalars_ready");
    long long before = sr_hb_violations(d->hb);
    tap_ok(sr_dev_download(d, &out, z, sizeof out, "download") == SR_OK && sr_dev_host_waits(d) == 1 &&
               sr_hb_violations(d->hb) == before,
           "table: a download after its wait is one host wait, and ordered");
    d->free(d, z);
    d->free(d, x);
    d->free(d, y);
    sr_device_close(d);
    return tap_done();
}
