/* rlimits.h — the process limits a run checks at start, before step 1:
 * open file descriptors.
 *
 * rlimits owns the descriptor budget of one rank: a socket per transport
 * peer, the listening socket (when there are peers), and a fixed reserve for everything else a
 * rank holds open at once (stdio, PMIx's connection and its event loop,
 * the metrics file, the checkpoint directory and its lock, the temporary
 * step directory and the one shard file being written or read).  Token
 * shards are mapped and closed at once, so they need none.  A soft limit
 * below the budget is raised up to the hard limit (any process may); a hard
 * limit below it is refused at once (78), not met an hour later as EMFILE
 * in the middle of a save.  The memory plan is memplan's. */
#ifndef SR_RLIMITS_H
#define SR_RLIMITS_H

#include "status.h"

/* Descriptors a rank holds besides its transport sockets: about four
 * times what was measured (a rank of a 4-rank run saving every 2 steps
 * peaked at 14 descriptors, sockets included). */
#define SR_RLIMITS_FD_RESERVE 64

/* The descriptors a rank with `peers` transport peers needs. */
int sr_rlimits_fds_needed(int peers);

/* Checks RLIMIT_NOFILE against sr_rlimits_fds_needed(peers): SR_OK when
 * it fits, also after raising the soft limit (then *raised_from and
 * *raised_to are set, else both 0); SR_ERR_CONFIG naming the limit, the
 * budget and its parts when the hard limit is below it. */
sr_status sr_rlimits_check_fds(int peers, long long *raised_from, long long *raised_to);

#endif
