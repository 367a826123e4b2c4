/* test_base.c — the one owners of three facts (issue 60): the line
 * builder (line.h: pieces kept whole while they fit, a cut remembered and
 * never past the buffer, list items), the clock (clock.h: monotonic
 * order, the units agree, deadlines in the future by what was asked, ISO
 * stamps of known instants) and the family table (family.h: names, Hugging
 * Face types and presets round-trip; each preset's parameter count from
 * its family's traits, model_dims.c, equals its tensor table's, model.c,
 * two independent countings). */
#include "srconfig.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "family.h"
#include "line.h"
#include "model.h"
#include "tap.h"

static void test_line(void) {
    char b[8];
    sr_line l = SR_LINE(b);
    tap_ok(b[0] == 0 && l.len == 0 && !l.cut, "an empty line is an empty string");
    sr_line_add(&l, "%s", "abc");
    sr_line_add(&l, "%d", 12);
    tap_ok(strcmp(b, "abc12") == 0 && l.len == 5 && !l.cut, "pieces that fit are kept whole (%s)", b);
    sr_line_add(&l, "%s", "xyz");
    tap_ok(strcmp(b, "abc12xy") == 0 && l.len == 7 && l.cut, "a piece that does not fit is cut at the buffer (%s)", b);
    sr_line_add(&l, "%s", "more");
    tap_ok(strcmp(b, "abc12xy") == 0 && l.len == 7 && l.cut, "...and a later piece changes nothing past it");
    char one[1] = {'x'};
    sr_line l1 = SR_LINE(one);
    sr_line_add(&l1, "a");
    tap_ok(one[0] == 0 && l1.cut, "a line of one byte holds the terminator alone, cut");
    char list[32];
    sr_line li = SR_LINE(list);
    for (int i = 1; i <= 3; i++)
        sr_line_item(&li, ", ", "%d", i);
    tap_ok(strcmp(list, "1, 2, 3") == 0, "items are separated, the first without (%s)", list);
}

static void test_clock(void) {
    int64_t a = sr_clock_mono_ns();
    double s = sr_clock_mono_s();
    int64_t b = sr_clock_mono_ns();
    tap_ok(a <= b && s >= (double)a / 1e9 - 1e-6 && s <= (double)b / 1e9 + 1e-6,
           "monotonic nanoseconds and seconds are one clock, in order");
    double w = sr_clock_wall_s();
    struct timespec now = sr_clock_wall_ts(), dl = sr_clock_wall_after(0.25);
    double ahead = sr_clock_ts_s(dl) - sr_clock_ts_s(now);
    tap_ok(ahead >= 0.2499 && ahead < 1.0 && dl.tv_nsec >= 0 && dl.tv_nsec < 1000000000L,
           "a wall deadline 0.25 s ahead is 0.25 s ahead (%.4f), normalised", ahead);
    tap_ok(fabs(sr_clock_ts_s(now) - w) < 5 && fabs((double)sr_clock_wall_ns() / 1e9 - w) < 5,
           "wall seconds, nanoseconds and the timespec agree");
    struct timespec m0 = sr_clock_mono_after(0), m1 = sr_clock_mono_after(1.5);
    double d = sr_clock_ts_s(m1) - sr_clock_ts_s(m0);
    tap_ok(d >= 1.4999 && d < 2.0 && m1.tv_nsec < 1000000000L, "a monotonic deadline 1.5 s ahead (%.4f)", d);
    char iso[32];
    sr_clock_iso(0, iso, sizeof iso);
    tap_ok(strcmp(iso, "1970-01-01T00:00:00Z") == 0, "the epoch as ISO 8601 (%s)", iso);
    sr_clock_iso(1000000000.0, iso, sizeof iso);
    tap_ok(strcmp(iso, "2001-09-09T01:46:40Z") == 0, "10^9 s as ISO 8601 (%s)", iso);
    sr_clock_iso(-1, iso, sizeof iso);
    tap_ok(strlen(iso) == 20 && iso[4] == '-' && iso[10] == 'T' && iso[19] == 'Z', "now as ISO 8601 (%s)", iso);
}

static void test_family(void) {
    int n = 0;
    bool names = true, types = true;
    for (; sr_family_names[n]; n++) {
        const sr_family *f = sr_family_get(n);
        names = names && sr_family_find(f->name) == n && strcmp(f->name, sr_family_names[n]) == 0;
        types = types && sr_family_of_hf_type(f->hf_model_type) == n;
    }
    tap_ok(n >= 2 && names, "each family's name finds its row (%d families)", n);
    bool all_or_none = true;
    unsigned every = SR_FKEY_N_KV_HEAD | SR_FKEY_FFN_DIM | SR_FKEY_NORM_EPS | SR_FKEY_ROPE | SR_FKEY_TIE;
    for (int a = 0; a < n; a++)
        all_or_none = all_or_none && (sr_family_get(a)->keys == 0 || sr_family_get(a)->keys == every);
    tap_ok(all_or_none, "a family has all of the model keys of its own or none (a manifest records them as one set)");
    tap_ok(types, "...and its Hugging Face model_type too");
    tap_ok(sr_family_find("gpt3") < 0 && sr_family_of_hf_type("bert") < 0, "an unknown name or model_type finds none");
    tap_ok(sr_family_index(-1) == sr_family_index(n) && sr_family_index(n) == sr_family_find("gpt2"),
           "an index out of range reads as gpt2 (a manifest before version 3)");
    char all[64], rope[64];
    sr_family_list(0, all, sizeof all);
    sr_family_list(SR_FKEY_ROPE, rope, sizeof rope);
    tap_ok(strcmp(all, "gpt2, llama") == 0 && strcmp(rope, "llama") == 0, "the lists for messages (%s; %s)", all, rope);
    int p = 0;
    bool counts = true;
    char why[256] = "";
    for (; sr_family_preset_names[p]; p++) {
        const sr_family_preset *pr = &sr_family_presets[p];
        sr_model_dims d = {.L = (int)pr->n_layer,
                           .NH = (int)pr->n_head,
                           .C = (int)pr->n_embd,
                           .V = (int)pr->vocab_size,
                           .T = (int)pr->seq_len,
                           .arch = pr->arch,
                           .NKV = (int)pr->n_kv_head,
                           .F = (int)pr->ffn_dim,
                           .untied = !pr->tie,
                           .norm_eps = 1e-5,
                           .rope_theta = pr->rope_theta};
        sr_model m;
        if (strcmp(pr->name, sr_family_preset_names[p]) != 0 ||
            sr_model_init(&m, d, &sr_ops_cpu, NULL, 0, false) != SR_OK) {
            counts = false;
            snprintf(why, sizeof why, "%s: no model", pr->name);
            break;
        }
        if (m.n_params != sr_model_n_params(&d)) {
            counts = false;
            snprintf(why, sizeof why, "%s: tensor table %zu, traits %zu", pr->name, m.n_params, sr_model_n_params(&d));
        }
        sr_model_free(&m);
    }
    tap_ok(p >= 9 && counts,
           "every preset's parameter count from its family's traits is its tensor table's (%d presets)%s%s", p,
           why[0] ? ": " : "", why);
}

int main(void) {
    test_line();
    test_clock();
    test_family();
    return tap_done();
}
