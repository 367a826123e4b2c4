/* test_slurm.c — what shardrun reads from Slurm, parsed.  Slurm's time
 * left (sr_slurmjob_parse_left, slurmjob.h) in every form squeue %L prints
 * and the forms a limit is written in, and PMI2's placement (sr_pmi2_parse_mapping, pmi2.h): the
 * process mappings Slurm's pmi2 plugin writes for block, cyclic and uneven
 * distributions give every rank its node, its local rank and local size
 * as an independent placement (each rank assigned in turn) does, and a
 * malformed mapping is refused, never half-read. */
#include "srconfig.h"

#include <stdio.h>
#include <string.h>

#include "pmi2.h"
#include "slurmjob.h"
#include "tap.h"

/* The reference: ranks dealt out from a list of (node, count) runs, as
 * srun's distributions lay them out. */
typedef struct {
    int node, count;
} run;

static bool same_as(const char *mapping, const run *runs, int nruns, int size, int nodes) {
    int node_of[64], n = 0;
    for (int i = 0; i < nruns; i++)
        for (int k = 0; k < runs[i].count; k++)
            node_of[n++] = runs[i].node;
    if (n != size)
        return false;
    for (int r = 0; r < size; r++) {
        int node, lr, ls, nn;
        if (!sr_pmi2_parse_mapping(mapping, r, size, &node, &lr, &ls, &nn))
            return false;
        int want_lr = 0, want_ls = 0;
        for (int q = 0; q < size; q++)
            if (node_of[q] == node_of[r]) {
                want_ls++;
                want_lr += q < r;
            }
        if (node != node_of[r] || lr != want_lr || ls != want_ls || nn != nodes) {
            tap_diag("%s rank %d: node %d local %d/%d nodes %d", mapping, r, node, lr, ls, nn);
            return false;
        }
    }
    return true;
}

int main(void) {
    const run block[] = {{0, 2}, {1, 2}};
    tap_ok(same_as("(vector,(0,2,2))", block, 2, 4, 2), "block: 2 nodes x 2 tasks");
    const run cyclic[] = {{0, 1}, {1, 1}, {0, 1}, {1, 1}};
    tap_ok(same_as("(vector,(0,2,1))", cyclic, 4, 4, 2),
           "cyclic: the one-task block repeats until every rank is placed");
    const run uneven[] = {{0, 3}, {1, 2}};
    tap_ok(same_as("(vector,(0,1,3),(1,1,2))", uneven, 2, 5, 2), "uneven: 3 tasks on node 0, 2 on node 1");
    const run one[] = {{0, 4}};
    tap_ok(same_as(" (vector, (0,1,4))", one, 1, 4, 1), "one node, spaces allowed");
    int a, b, c, d;
    const char *bad[] = {"",
                         "(vector)",
                         "(vector,(0,2))",
                         "(vector,(0,2,2)",
                         "(grid,(0,2,2))",
                         "(vector,(0,-1,2))",
                         "(vector,(0,0,0))",
                         "(vector,(0,2,2),x)"};
    bool refused = true;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (sr_pmi2_parse_mapping(bad[i], 0, 4, &a, &b, &c, &d)) {
            tap_diag("accepted '%s'", bad[i]);
            refused = false;
        }
    tap_ok(refused, "malformed mappings are refused");
    tap_ok(!sr_pmi2_parse_mapping("(vector,(0,2,2))", 4, 4, &a, &b, &c, &d), "a rank outside the job is refused");
    /* time left: the seconds each form names, computed independently */
    const struct {
        const char *s;
        double want;
    } left[] = {{"0:59", 59},
                {"12:05", 12 * 60 + 5},
                {"3:02:01", 3 * 3600 + 2 * 60 + 1},
                {"1-00:00:00", 86400},
                {"2-03:04:05\n", 2 * 86400 + 3 * 3600 + 4 * 60 + 5},
                {"45", 45 * 60},
                {"1-02", 86400 + 2 * 3600},
                {"1-02:03", 86400 + 2 * 3600 + 3 * 60}};
    bool all = true;
    for (size_t i = 0; i < sizeof left / sizeof left[0]; i++) {
        double got = sr_slurmjob_parse_left(left[i].s);
        if (got != left[i].want) {
            tap_diag("'%s': %g, expected %g", left[i].s, got, left[i].want);
            all = false;
        }
    }
    tap_ok(all, "squeue %%L time left: M:SS, H:MM:SS, D-HH:MM:SS and the short forms");
    const char *notime[] = {"UNLIMITED", "NOT_SET", "INVALID", "", "1:xx", "-5:00", "1::2", "1:2:3:4"};
    all = true;
    for (size_t i = 0; i < sizeof notime / sizeof notime[0]; i++)
        if (sr_slurmjob_parse_left(notime[i]) >= 0) {
            tap_diag("'%s' parsed", notime[i]);
            all = false;
        }
    tap_ok(all, "no limit, unset, and malformed times give -1");
    /* another program's answer is bounded before it is used: no overflow,
     * no sign, days <= 365, hours < 24 after a day, minutes and seconds
     * < 60, at most 366 days in all (the probe: "99999999-00:00:00", a long
     * digit string once printed "ends at -219246529--1101694904-00") */
    const char *hostile[] = {"99999999-00:00:00",
                             "123456789012345678901234:00",
                             "9999999999",
                             "366-00:00:00",
                             "1-24:00:00",
                             "0:60",
                             "60:00",
                             "1:60:00",
                             "-1-00:00:00",
                             "1--2",
                             "+5:00",
                             "1-2-3"};
    all = true;
    for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++)
        if (sr_slurmjob_parse_left(hostile[i]) >= 0) {
            tap_diag("'%s' parsed as %g", hostile[i], sr_slurmjob_parse_left(hostile[i]));
            all = false;
        }
    tap_ok(all, "out-of-bounds times give -1 (%zu hostile answers)", sizeof hostile / sizeof hostile[0]);
    tap_ok(sr_slurmjob_parse_left("365-23:59:59") == 365 * 86400.0 + 86399 && sr_slurmjob_parse_left("0:00") == 0,
           "the bounds themselves parse: 365-23:59:59, and 0:00 (the end is now)");
    return tap_done();
}
