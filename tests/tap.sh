# tap.sh — what every shell test shares (sourced): TAP output, the tier and
# the selection of checks, the launcher line and the tiny job file.  Owns
# the private temporary directory $T (removed at exit).
#   check DESC CMD...            ok when CMD succeeds
#   expect_status N DESC CMD...  ok when CMD exits with status N
#   skip DESC                    a skipped check (the reason in DESC)
#   group [--long] LABEL         starts a group of checks; false when this
#                                run leaves the group out (its set-up too):
#                                `if group "HSDP 2x2"; then ...; fi`
#   long_tier                    true under make check-long
#   need_mpirun [-x VAR...]      $MPI, or the whole script skips
#   have_mpirun [-x VAR...]      $MPI and true, or false (the script goes on)
#   skip_mpirun WHAT             a skipped check for WHAT without mpirun (a
#                                failure when SHARDRUN_TEST_REQUIRE lists it)
#   skip_or_fail KIND REASON     the same for any prerequisite KIND
#   emulator_tree / need_cudaemu a CUDA emulator tree: true or false / or
#                                the whole script skips
#   tiny_job FILE [KEY=VALUE...] the small model every multi-rank test trains
#   field FILE KEY / last ...    a metrics file's values of KEY / the last
#   is_close A B RTOL            |A - B| <= RTOL x |B|
#   done_testing                 prints the plan
#
# Tiers: SHARDRUN_TEST_TIER is fast (make check, the default) or long (make
# check-long, every check).  A check that belongs to the long tier alone
# sits in a `group --long` block, which the fast tier leaves out.
#
# Selection (tests/run NAME PATTERN): SHARDRUN_TEST_PATTERN is an extended
# regular expression; only checks whose descriptions match it are reported.
# Every check's command still runs inside a group that runs (a check may be
# the set-up of the next); a group runs, and reports all its checks, when
# the pattern matches its label; it runs and reports the matching checks
# when the pattern's text begins with its label, when SHARDRUN_TEST_GROUPS
# (a newline list tests/run made from the last full run's log) names it, or
# when SHARDRUN_TEST_ALL_GROUPS is set.  A
# failing check prints the tests/run command that reruns just it.
SHARDRUN=${SHARDRUN:-$(pwd)/shardrun}
SR_SRCDIR=${SR_SRCDIR:-$(pwd)}
tap_n=0
tap_failed=0
tap_pattern=${SHARDRUN_TEST_PATTERN:-}
tap_name=${SR_TEST_NAME:-$0}
tap_name=${tap_name##*/}
tap_group_all=false
T=$(mktemp -d "${TMPDIR:-/tmp}/shardrun-test.XXXXXX") || exit 99
trap 'rm -rf "$T"' EXIT

long_tier() { [ "${SHARDRUN_TEST_TIER:-fast}" = long ]; }
# matches TEXT: whether TEXT matches the selection pattern
matches() { printf '%s\n' "$1" | grep -Eq -- "$tap_pattern"; }

# selected DESC: whether this run reports the check DESC.  A continuation
# ("  ...and the parameters") is reported with the check before it, or
# when it matches itself.
tap_parent="" tap_parent_sel=1
selected() {
    case $1 in
    "  ..."*) tap_cont=1 ;;
    *) tap_cont=0 tap_parent=$1 ;;
    esac
    [ -z "$tap_pattern" ] && return 0
    $tap_group_all && return 0
    if [ $tap_cont = 1 ]; then
        [ $tap_parent_sel = 0 ] && return 0
        matches "$1"
        return
    fi
    matches "$1"
    tap_parent_sel=$?
    return $tap_parent_sel
}
# rerun_hint DESC: the command that reruns the check DESC alone (the
# description up to a parenthesis or dash that carries this run's numbers;
# a continuation's is the check's before it)
rerun_hint() {
    d=$1
    case $d in "  ..."*) [ -n "$tap_parent" ] && d=$tap_parent ;; esac
    stem=$(printf '%s\n' "$d" | sed 's/ (.*//; s/ — .*//; s/[][\.*^$+?(){}|]/\\&/g' | sed "s/'/'\\\\''/g")
    echo "# rerun: tests/run ${SHARDRUN_TEST_TIER_FLAG:-}$tap_name '^$stem'"
}

ok() {
    selected "$*" || return 0
    tap_n=$((tap_n + 1))
    echo "ok $tap_n - $*"
}
not_ok() {
    selected "$*" || return 0
    tap_n=$((tap_n + 1))
    tap_failed=$((tap_failed + 1))
    echo "not ok $tap_n - $*"
    rerun_hint "$*"
}
skip() {
    selected "$*" || return 0
    tap_n=$((tap_n + 1))
    echo "ok $tap_n # SKIP $*"
}
diag() { printf '%s\n' "$@" | sed 's/^/# /'; }
# check DESC CMD...: ok when CMD succeeds; returns 1 when it fails, so
# `check ... || diag ...` can add what went wrong
check() {
    desc=$1
    shift
    if "$@"; then ok "$desc"; else not_ok "$desc"; return 1; fi
}
# expect_status N DESC CMD... : runs CMD with stdout in $T/out, stderr in $T/err
expect_status() {
    want=$1 desc=$2
    shift 2
    "$@" >"$T/out" 2>"$T/err"
    got=$?
    if [ "$got" -eq "$want" ]; then
        selected "$desc" && ok "$desc (status $got)"
    elif selected "$desc"; then
        tap_n=$((tap_n + 1))
        tap_failed=$((tap_failed + 1))
        echo "not ok $tap_n - $desc (status $got, expected $want)"
        rerun_hint "$desc"
        diag "stderr:" "$(head -c 2000 "$T/err")"
    fi
    return 0
}
done_testing() {
    echo "1..$tap_n"
}

# group [--long] LABEL: see the header.  Prints "# group: LABEL" (tests/run
# reads it back from the log to find a check's group).
group() {
    glong=false
    [ "$1" = --long ] && glong=true && shift
    if $glong && ! long_tier; then
        echo "# group: $1 (long tier: make check-long, tests/run --long)"
        return 1
    fi
    tap_group_all=false
    if [ -n "$tap_pattern" ]; then
        if matches "$1"; then
            tap_group_all=true # the label matches: every check of the group
        elif [ -z "${SHARDRUN_TEST_ALL_GROUPS:-}" ]; then
            # a group the last log names, or whose label begins the
            # pattern's text (a check described "LABEL ...")
            plain=$(printf '%s\n' "$tap_pattern" | sed 's/^\^//; s/\\//g')
            case $plain in "$1"*) ;; *)
                printf '%s\n' "${SHARDRUN_TEST_GROUPS:-}" | grep -Fqx -- "$1" || return 1 ;;
            esac
        fi
    fi
    echo "# group: $1"
    return 0
}

# newest DIR: the step of the newest step_* directory in a checkpoint
# directory (what checkpoint.resume: auto tries first; `latest` may lag it
# when a run died between the rename and the link)
newest() { ls -d "$1"/step_* 2>/dev/null | sed 's/.*step_0*//' | sort -n | tail -1; }

# require_or_skip KIND REASON: the whole script skips with REASON, unless KIND
# is listed in SHARDRUN_TEST_REQUIRE (a comma list: mpirun, slurm, fuzz,
# mount), where a missing prerequisite is a failure instead.
required() { case ",${SHARDRUN_TEST_REQUIRE:-}," in *",$1,"*) return 0 ;; esac; return 1; }
# skip_or_fail KIND REASON: one skipped check with REASON, or a failing one
# when SHARDRUN_TEST_REQUIRE names KIND (the rest of the script goes on)
skip_or_fail() {
    if required "$1"; then not_ok "$2 (SHARDRUN_TEST_REQUIRE requires $1)"; else skip "$2"; fi
}
require_or_skip() {
    if required "$1"; then
        echo "1..1"
        echo "not ok 1 - $2 (and SHARDRUN_TEST_REQUIRE requires $1)"
        exit 0
    fi
    echo "1..0 # SKIP $2"
    exit 0
}

# have_libpmi2: Slurm's PMI2 library is installed (the PMI2 cases of the
# Slurm tests; shardrun loads it at run time)
have_libpmi2() { ldconfig -p | grep -q 'libpmi2\.so\.0 '; }

# emulator_tree: true in a CUDA emulator tree (configure --with-cuda=emulator);
# need_cudaemu: else the whole script skips (a failure when
# SHARDRUN_TEST_REQUIRE has cudaemu)
emulator_tree() { grep -q '^#define SR_CUDA_EMULATED 1' "${SR_BUILDDIR:-.}/srconfig.h" 2>/dev/null; }
need_cudaemu() {
    emulator_tree || require_or_skip cudaemu "not a CUDA emulator tree (configure --with-cuda=emulator)"
}

# The launcher: one mpirun command line for every test ($MPI).  The ranks
# run on this host and inherit the environment; -x names the variables a
# test sets per launch (mpirun forwards them to every rank).
MPI_WHY="mpirun not installed (apt-get install openmpi-bin)"
have_mpirun() {
    command -v mpirun >/dev/null 2>&1 || return 1
    MPI="mpirun --allow-run-as-root --oversubscribe -x OMP_WAIT_POLICY $*"
    return 0
}
need_mpirun() { have_mpirun "$@" || require_or_skip mpirun "$MPI_WHY"; }
skip_mpirun() { skip_or_fail mpirun "$1: $MPI_WHY"; }

# tiny_job FILE [KEY=VALUE...]: a job file for the small model the
# multi-rank tests train (tiny with 2 blocks of width 64, 4 heads, 64
# positions; logs every step, one thread), KEY a dotted path
# (train.steps=12, sharding.reshard_after_forward.blocks=2) that adds or
# replaces a value; VALUE is written as given (YAML flow syntax).
tiny_job() {
    out=$1
    shift
    printf '%s\n' model.preset=tiny model.n_layer=2 model.n_embd=64 model.n_head=4 model.seq_len=64 \
        log.every=1 threads=1 "$@" | awk -F= '
        { k = $1; v = substr($0, length(k) + 2)
          if (!(k in val)) order[n++] = k
          val[k] = v }
        END { emit("", 1) }
        # emit PREFIX DEPTH: the keys under PREFIX in order of first appearance
        function emit(prefix, depth,    i, k, m, p, rest, child, ind, s, seen) {
          for (i = 0; i < n; i++) {
              k = order[i]
              if (substr(k, 1, length(prefix)) != prefix) continue
              rest = substr(k, length(prefix) + 1)
              ind = ""; for (s = 1; s < depth; s++) ind = ind "  "
              if (index(rest, ".") == 0) { print ind rest ": " val[k]; continue }
              child = substr(rest, 1, index(rest, ".") - 1)
              if ((prefix child) in seen) continue
              seen[prefix child] = 1
              print ind child ":"
              emit(prefix child ".", depth + 1)
          }
        }' >"$out"
}

# field FILE KEY: the numeric or quoted value of KEY on each line of a
# metrics file (one per line); last FILE KEY: the last of them
field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" "$1"; }
last() { field "$1" "$2" | tail -1; }

# is_close A B RTOL: |A - B| <= RTOL x |B| (numbers as awk reads them)
is_close() {
    awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(d <= r * m) }'
}
