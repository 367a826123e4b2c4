# tap.sh — TAP helpers for the shell tests (sourced).  Provides a private
# temporary directory $T removed at exit, and:
#   check DESC CMD...   ok when CMD succeeds
#   expect_status N DESC CMD...   ok when CMD exits with status N
#   skip DESC           a skipped test (with the reason in DESC)
#   done_testing        prints the plan (failures are reported by TAP alone)
SHARDRUN=${SHARDRUN:-$(pwd)/shardrun}
SR_SRCDIR=${SR_SRCDIR:-$(pwd)}
tap_n=0
tap_failed=0
T=$(mktemp -d "${TMPDIR:-/tmp}/shardrun-test.XXXXXX") || exit 99
trap 'rm -rf "$T"' EXIT

ok() { tap_n=$((tap_n + 1)); echo "ok $tap_n - $*"; }
not_ok() { tap_n=$((tap_n + 1)); tap_failed=$((tap_failed + 1)); echo "not ok $tap_n - $*"; }
skip() { tap_n=$((tap_n + 1)); echo "ok $tap_n # SKIP $*"; }
diag() { printf '%s\n' "$@" | sed 's/^/# /'; }
# check DESC CMD...: ok when CMD succeeds; returns 1 when it fails, so
# `check ... || diag ...` can add what went wrong
check() {
    desc=$1; shift
    if "$@"; then ok "$desc"; else not_ok "$desc"; return 1; fi
}
# expect_status N DESC CMD... : runs CMD with stdout in $T/out, stderr in $T/err
expect_status() {
    want=$1; desc=$2; shift 2
    "$@" >"$T/out" 2>"$T/err"
    got=$?
    if [ "$got" -eq "$want" ]; then
        ok "$desc (status $got)"
    else
        not_ok "$desc (status $got, expected $want)"
        diag "stderr:" "$(head -c 2000 "$T/err")"
    fi
}
done_testing() {
    echo "1..$tap_n"
}

# newest DIR: the step of the newest step_* directory in a checkpoint
# directory (what checkpoint.resume: auto tries first; `latest` may lag it
# when a run died between the rename and the link)
newest() { ls -d "$1"/step_* 2>/dev/null | sed 's/.*step_0*//' | sort -n | tail -1; }

# require_or_skip KIND REASON: the whole script skips with REASON, unless KIND
# is listed in SHARDRUN_TEST_REQUIRE (a comma list: mpirun, slurm, fuzz,
# mount), where a missing prerequisite is a failure instead.
require_or_skip() {
    case ",${SHARDRUN_TEST_REQUIRE:-}," in
    *",$1,"*)
        echo "1..1"
        echo "not ok 1 - $2 (and SHARDRUN_TEST_REQUIRE requires $1)"
        exit 0
        ;;
    esac
    echo "1..0 # SKIP $2"
    exit 0
}
