/* startup.c — the start-up phase clock; see startup.h. */
#include "srconfig.h"

#include "startup.h"

#include <stdio.h>

#include "clock.h"
#include "line.h"

static const char *const phase_names[SR_PHASE_COUNT] = {"bootstrap", "device", "model", "checkpoint", "other"};

static double process_start; /* sr_clock_mono_s() at the mark; 0 = unmarked */
static double phase_s[SR_PHASE_COUNT];

void sr_startup_mark(void) { process_start = sr_clock_mono_s(); }

void sr_startup_add(sr_phase p, double t0) {
    double d = sr_clock_mono_s() - t0;
    if (p >= 0 && p < SR_PHASE_OTHER && d > 0)
        phase_s[p] += d;
}

sr_startup sr_startup_read(void) {
    sr_startup s = {{0}, 0};
    double known = 0;
    for (int p = 0; p < SR_PHASE_OTHER; p++) {
        s.s[p] = phase_s[p];
        known += phase_s[p];
    }
    s.total = process_start > 0 ? sr_clock_mono_s() - process_start : known;
    if (s.total < known)
        s.total = known;
    s.s[SR_PHASE_OTHER] = s.total - known;
    return s;
}

void sr_startup_format(const sr_startup *s, char *out, size_t n) {
    sr_line l = sr_line_on(out, n);
    sr_line_add(&l, "%.2f s to the first step:", s->total);
    for (int p = 0; p < SR_PHASE_COUNT; p++)
        sr_line_add(&l, "%s %s %.2f s", p ? "," : "", phase_names[p], s->s[p]);
}

json_t *sr_startup_json(const sr_startup *s) {
    json_t *o = json_object();
    json_object_set_new(o, "total", json_real(s->total));
    for (int p = 0; p < SR_PHASE_COUNT; p++)
        json_object_set_new(o, phase_names[p], json_real(s->s[p]));
    return o;
}

int sr_startup_from_json(const json_t *o, sr_startup *s) {
    *s = (sr_startup){{0}, 0};
    if (!json_is_object(o))
        return 0;
    s->total = json_number_value(json_object_get(o, "total"));
    for (int p = 0; p < SR_PHASE_COUNT; p++)
        s->s[p] = json_number_value(json_object_get(o, phase_names[p]));
    return 1;
}
