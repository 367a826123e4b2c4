/* rlimits.c — the descriptor budget against RLIMIT_NOFILE; see rlimits.h. */
#include "srconfig.h"

#include "rlimits.h"

#include <errno.h>
#include <string.h>
#include <sys/resource.h>

/* a listening socket only when there are peers (one rank opens none) */
int sr_rlimits_fds_needed(int peers) { return peers + (peers > 0) + SR_RLIMITS_FD_RESERVE; }

sr_status sr_rlimits_check_fds(int peers, long long *raised_from, long long *raised_to) {
    *raised_from = *raised_to = 0;
    int need = sr_rlimits_fds_needed(peers);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return SR_OK; /* nothing to compare with */
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (rlim_t)need)
        return SR_OK;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < (rlim_t)need)
        return sr_error(SR_ERR_CONFIG,
                        "the open-file limit (RLIMIT_NOFILE) is %llu, below the %d descriptors this rank needs: %d "
                        "socket%s to peers%s and %d for PMIx, checkpoint files and the process "
                        "(hint: ulimit -n %d or more where the job starts; under Slurm the limit of the shell that "
                        "ran sbatch is passed on unless PropagateResourceLimits says otherwise)",
                        (unsigned long long)rl.rlim_max, need, peers, peers == 1 ? "" : "s",
                        peers ? ", 1 listening socket" : "", SR_RLIMITS_FD_RESERVE, need);
    struct rlimit raised = {(rlim_t)need, rl.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &raised) != 0)
        return sr_error(SR_ERR_CONFIG,
                        "the open-file limit (RLIMIT_NOFILE) is %llu, below the %d descriptors this rank needs, and "
                        "raising it failed: %s (hint: ulimit -n %d where the job starts)",
                        (unsigned long long)rl.rlim_cur, need, strerror(errno), need);
    *raised_from = (long long)rl.rlim_cur;
    *raised_to = need;
    return SR_OK;
}
