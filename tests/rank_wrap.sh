#!/bin/sh
# rank_wrap.sh — runs one rank under mpirun ("mpirun ... sh tests/rank_wrap.sh
# CMD ARGS..."), recording its pid and its own exit status in $WRAPDIR
# (pid.R, status.R, err.R for world rank R), so a test can signal one rank
# and read what each rank returned.  With LIMIT_RANK=R, that rank runs under
# ulimit -f LIMIT_BLOCKS (a file-size limit: writes fail with EFBIG) and/or
# ulimit -n LIMIT_NOFILE (an open-file limit), whichever is set.  With
# RANK_ENV_RANK=R and RANK_ENV="VAR=VALUE ...", that rank alone runs with
# those variables set (a test hook on one rank: a delay, a mismatch).
r=${OMPI_COMM_WORLD_RANK:-0}
if [ "${RANK_ENV_RANK:--1}" = "$r" ] && [ -n "${RANK_ENV:-}" ]; then
    # shellcheck disable=SC2086 # RANK_ENV is a list of assignments
    export $RANK_ENV
fi
if [ "${LIMIT_RANK:--1}" = "$r" ]; then
    [ -n "${LIMIT_BLOCKS:-}" ] && ulimit -f "$LIMIT_BLOCKS"
    [ -n "${LIMIT_NOFILE:-}" ] && ulimit -n "$LIMIT_NOFILE"
fi
"$@" 2>"$WRAPDIR/err.$r" &
echo $! >"$WRAPDIR/pid.$r"
wait $!
echo $? >"$WRAPDIR/status.$r"
