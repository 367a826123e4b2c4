/* test_mixture.c — data.mixture's schedule (mixture.h) against its
 * contract: over 10,000 sequences each source's share is its weight's
 * within 0.5 % (and within two sequences of it at every point, for uneven
 * weight sets too); the same
 * sequences whatever slices the ranks draw; a state restored from a
 * checkpoint's record continues exactly; new weights continue every source
 * from its cursor; an added source starts at 0; mixture_end: stop finds
 * the exhausted source, wrap counts epochs. */
#include "srconfig.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "line.h"
#include "mixture.h"
#include "tap.h"

#define T 8
static char dir[] = "/tmp/sr-test-mixture-XXXXXX";

/* A uint16 shard of `windows` windows of T + 1 tokens, token i = (i * mul
 * + add) % 256. */
static void write_shard(const char *path, int windows, unsigned mul, unsigned add) {
    FILE *f = fopen(path, "wb");
    int n = windows * T + 1;
    int32_t h[256] = {20240520, 1, n};
    fwrite(h, sizeof h, 1, f);
    for (int i = 0; i < n; i++) {
        uint16_t v = (uint16_t)((unsigned)i * mul + add) % 256u;
        fwrite(&v, 2, 1, f);
    }
    fclose(f);
}

/* A mixture config: `mix` the YAML flow list, batch size B. */
static sr_mix *open_mix(sr_config *cfg, const char *mix, int batch, const char *end) {
    char text[2048];
    snprintf(text, sizeof text,
             "model: {seq_len: %d, vocab_size: 256}\ntrain: {batch_size: %d}\ndata: {mixture: %s, mixture_end: %s}\n",
             T, batch, mix, end);
    if (sr_config_init(cfg) != SR_OK || sr_config_load_text(cfg, text, strlen(text), "test.yaml") != SR_OK)
        return NULL;
    sr_mix *m = NULL;
    return sr_mix_open(&m, cfg, T) == SR_OK ? m : NULL;
}

/* Draws `steps` batches of B from m starting at cursor *c, as `ranks`
 * ranks each drawing its slice in micro-batches of mb; the inputs of every
 * sequence into out[(*c + i) * T ..]. */
static void draw(sr_mix *m, uint64_t *c, int steps, int B, int ranks, int mb, int *out) {
    int tg[64 * T];
    for (int s = 0; s < steps; s++) {
        int per = B / ranks;
        for (int r = 0; r < ranks; r++)
            for (int off = r * per; off < (r + 1) * per; off += mb)
                sr_mix_batch(m, *c, (uint64_t)B, (uint64_t)off, mb, 7, out + (*c + (uint64_t)off) * T, tg);
        sr_mix_advance(m, *c, (uint64_t)B);
        *c += (uint64_t)B;
    }
}

int main(void) {
    if (!mkdtemp(dir)) {
        tap_ok(0, "mkdtemp");
        return tap_done();
    }
    char a[256], b[256], c3[256], mix[1024];
    snprintf(a, sizeof a, "%s/a.bin", dir);
    snprintf(b, sizeof b, "%s/b.bin", dir);
    snprintf(c3, sizeof c3, "%s/c.bin", dir);
    write_shard(a, 500, 3, 0);
    write_shard(b, 300, 5, 1);
    write_shard(c3, 200, 7, 2);

    /* 1. proportions over 10,000 sequences */
    snprintf(mix, sizeof mix,
             "[{name: web, train: %s, weight: 5}, {name: code, train: %s, weight: 3}, {name: math, "
             "train: %s, weight: 2}]",
             a, b, c3);
    sr_config cfg;
    sr_mix *m = open_mix(&cfg, mix, 16, "wrap");
    tap_ok(m != NULL && sr_mix_is_mixture(m) && sr_mix_count(m) == 3, "a mixture of 3 sources opens");
    if (!m)
        return tap_done();
    int *seq = calloc((size_t)20000 * T, sizeof *seq);
    uint64_t cur = 0;
    draw(m, &cur, 625, 16, 1, 16, seq); /* 10,000 sequences */
    sr_mix_state st;
    sr_mix_state_get(m, &st);
    double want[3] = {0.5, 0.3, 0.2};
    int worst = 0;
    for (int k = 0; k < 3; k++) {
        double got = (double)st.src[k].cursor / 10000.0;
        worst = worst || fabs(got - want[k]) > 0.005;
        printf("# %s: %llu of 10000 sequences (%.4f, weight share %.2f), epoch %llu\n", st.src[k].name,
               (unsigned long long)st.src[k].cursor, got, want[k], (unsigned long long)st.src[k].epoch);
    }
    tap_ok(!worst && st.src[0].cursor + st.src[1].cursor + st.src[2].cursor == 10000,
           "over 10,000 sequences every source's share is its weight's within 0.5%%");
    tap_ok(st.src[0].epoch == 5000 / 500 && st.src[2].epoch == 2000 / 200,
           "wrap: each source's epoch is its cursor over its windows (web 10, math 10)");
    sr_mix_close(m);
    sr_config_free(&cfg);
    /* at every point of the run, for uneven weight sets too: within two
     * sequences of each source's share */
    const char *sets[] = {"5 3 2", "1 1 1 5 5 5", "0.1 10 1 0.1 0.5 1 5 3", "1 100"};
    for (int w = 0; w < 4; w++) {
        char list[1024], ws[64];
        double share[8], sum = 0;
        int n = 0;
        sr_fmt(ws, sizeof ws, "%s", sets[w]);
        sr_line ml = SR_LINE(list);
        sr_line_add(&ml, "[");
        for (char *save = NULL, *t = strtok_r(ws, " ", &save); t; t = strtok_r(NULL, " ", &save), n++) {
            share[n] = atof(t);
            sum += share[n];
            sr_line_add(&ml, "%s{name: s%d, train: %s, weight: %s}", n ? ", " : "", n, a, t);
        }
        sr_line_add(&ml, "]");
        m = open_mix(&cfg, list, 16, "wrap");
        cur = 0;
        double worst_dev = 0;
        for (int i = 1; i <= 2000 && m; i++) {
            sr_mix_state s0;
            draw(m, &cur, 1, 1, 1, 1, seq);
            sr_mix_state_get(m, &s0);
            for (int k = 0; k < n; k++)
                worst_dev = fmax(worst_dev, fabs((double)s0.src[k].cursor - i * share[k] / sum));
        }
        tap_ok(m && worst_dev < 2.0,
               "weights %s: at every one of the first 2000 sequences each source's count is within two of n x its "
               "share (worst %.2f)",
               sets[w], worst_dev);
        sr_mix_close(m);
        sr_config_free(&cfg);
    }

    /* 2. the same sequences however the ranks and micro-batches slice a step */
    int *one = calloc((size_t)20000 * T, sizeof *one), *three = calloc((size_t)20000 * T, sizeof *three);
    sr_config c1, c2;
    sr_mix *m1 = open_mix(&c1, mix, 24, "wrap"), *m2 = open_mix(&c2, mix, 24, "wrap");
    uint64_t k1 = 0, k2 = 0;
    draw(m1, &k1, 20, 24, 1, 24, one);
    draw(m2, &k2, 20, 24, 3, 4, three); /* 3 ranks, micro-batches of 4 */
    tap_ok(memcmp(one, three, (size_t)480 * T * sizeof *one) == 0,
           "1 rank x 24 and 3 ranks x 2 micro-batches x 4 draw the same 480 sequences");

    /* 3. a state restored from the record continues exactly */
    sr_mix_state rec;
    sr_mix_state_get(m2, &rec);
    sr_config c3c;
    sr_mix *m3 = open_mix(&c3c, mix, 24, "wrap");
    sr_mix_resume(m3, 20, k2, &rec);
    uint64_t k3 = k2;
    draw(m1, &k1, 10, 24, 1, 24, one);
    draw(m3, &k3, 10, 24, 2, 6, three);
    tap_ok(memcmp(one + (size_t)480 * T, three + (size_t)480 * T, (size_t)240 * T * sizeof *one) == 0,
           "a mixture resumed from its record at step 20 (on 2 ranks) draws what the uninterrupted one does");
    sr_mix_close(m3);
    sr_config_free(&c3c);

    /* 4. new weights on resume: every source continues from its cursor */
    char mix2[1024];
    snprintf(mix2, sizeof mix2,
             "[{name: web, train: %s, weight: 1}, {name: code, train: %s, weight: 1}, {name: math, "
             "train: %s, weight: 2}]",
             a, b, c3);
    sr_mix *m4 = open_mix(&c3c, mix2, 24, "wrap");
    sr_mix_resume(m4, 20, k2, &rec);
    uint64_t k4 = k2;
    draw(m4, &k4, 25, 24, 1, 24, three);
    sr_mix_state s4;
    sr_mix_state_get(m4, &s4);
    int cont = 1;
    for (int k = 0; k < 3; k++) {
        double got = (double)(s4.src[k].cursor - rec.src[k].cursor) / 600.0;
        cont = cont && fabs(got - (k == 2 ? 0.5 : 0.25)) < 0.005 && s4.src[k].base == rec.src[k].cursor;
    }
    tap_ok(cont && s4.origin == k2 && s4.nhistory == 2 && s4.history[1].step == 20 &&
               strcmp(s4.history[1].weights, "web=1 code=1 math=2") == 0,
           "new weights: each source continues from its cursor, the next 600 sequences in the new proportions, the "
           "history records them");
    sr_mix_close(m4);
    sr_config_free(&c3c);

    /* 5. a source added starts at 0; the others keep their cursors */
    snprintf(mix2, sizeof mix2, "[{name: web, train: %s, weight: 5}, {name: new, train: %s, weight: 1}]", a, c3);
    sr_mix *m5 = open_mix(&c3c, mix2, 24, "wrap");
    sr_mix_resume(m5, 20, k2, &rec);
    sr_mix_state s5;
    sr_mix_state_get(m5, &s5);
    tap_ok(s5.n == 2 && s5.src[0].cursor == rec.src[0].cursor && s5.src[1].cursor == 0 && s5.origin == k2,
           "a source added on resume starts at 0, the one kept keeps its cursor, the schedule starts anew");
    sr_mix_close(m5);
    sr_config_free(&c3c);

    /* 6. stop: the batch that needs a sequence a source lacks */
    snprintf(mix2, sizeof mix2, "[{name: web, train: %s, weight: 1}, {name: small, train: %s, weight: 1}]", a, c3);
    sr_mix *m6 = open_mix(&c3c, mix2, 20, "stop");
    uint64_t k6 = 0;
    const char *name = NULL;
    int steps = 0;
    while (m6 && !sr_mix_exhausted(m6, k6, 20, &name) && steps < 1000) {
        draw(m6, &k6, 1, 20, 1, 20, three);
        steps++;
    }
    /* math has 200 windows and feeds 10 of every 20: 20 steps, then out */
    tap_ok(steps == 20 && name && strcmp(name, "small") == 0,
           "stop: source small (200 sequences, half of each batch "
           "of 20) is exhausted at step 21 (%d steps fed)",
           steps);
    sr_mix_close(m6);
    sr_config_free(&c3c);

    /* 7. data.train: one source, exactly sr_data_batch's order */
    char text[512];
    snprintf(text, sizeof text, "model: {seq_len: %d, vocab_size: 256}\ntrain: {batch_size: 8}\ndata: {train: %s}\n", T,
             a);
    sr_config c7;
    sr_mix *m7 = NULL;
    int ok7 = sr_config_init(&c7) == SR_OK && sr_config_load_text(&c7, text, strlen(text), "t.yaml") == SR_OK &&
              sr_mix_open(&m7, &c7, T) == SR_OK;
    sr_data *d = NULL;
    char *items[] = {a};
    sr_strlist l = {items, 1};
    ok7 = ok7 && sr_data_open(&d, &l, T, 256) == SR_OK;
    int x[8 * T], y[8 * T], x2[8 * T], y2[8 * T];
    if (ok7) {
        sr_mix_batch(m7, 40, 8, 3, 5, 7, x, y);
        sr_data_batch(d, 43, 5, true, 7, x2, y2);
    }
    tap_ok(ok7 && !sr_mix_is_mixture(m7) && memcmp(x, x2, 5 * T * sizeof *x) == 0 &&
               memcmp(y, y2, 5 * T * sizeof *y) == 0,
           "data.train is one source drawn exactly as before mixtures (sr_data_batch of the global index)");
    sr_data_close(d);
    sr_mix_close(m7);
    sr_config_free(&c7);

    sr_mix_close(m1);
    sr_mix_close(m2);
    sr_config_free(&c1);
    sr_config_free(&c2);
    free(seq);
    free(one);
    free(three);
    unlink(a);
    unlink(b);
    unlink(c3);
    rmdir(dir);
    return tap_done();
}
