#!/bin/sh
# docs.sh — the man pages: mandoc -Tlint clean; every --help option appears
# in shardrun(1); every schema key appears in shardrun.yaml(5), whose KEYS
# list is exactly what `shardrun config keys --mdoc` prints.
# `docs.sh --update` rewrites that list from the schema instead (make update-man).
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
M1=$SR_SRCDIR/man/shardrun.1
M5=$SR_SRCDIR/man/shardrun.yaml.5
MC=$SR_SRCDIR/man/shardrun-checkpoint.5
MANDOC=${MANDOC:-$(command -v mandoc)}

# the part of shardrun.yaml.5 between the KEYS markers
keys_block() { sed -n '/^\.\\" BEGIN KEYS/,/^\.\\" END KEYS/p' "$1" | sed '1d;$d'; }

if [ "$1" = "--update" ]; then
    "$S" config keys --mdoc >"$T/keys" || exit 1
    awk -v keys="$T/keys" '
        /^\.\\" BEGIN KEYS/ { print; while ((getline l < keys) > 0) print l; skip = 1; next }
        /^\.\\" END KEYS/ { skip = 0 }
        !skip { print }' "$M5" >"$T/new5" && cp "$T/new5" "$M5"
    echo "updated $M5"
    exit 0
fi

"$S" config keys --mdoc >"$T/keys"
keys_block "$M5" >"$T/block"
check "shardrun.yaml(5) KEYS list matches the schema (run 'make update-man' after changing it)" cmp -s "$T/keys" "$T/block"

if [ -z "$MANDOC" ]; then
    skip "mandoc not installed (apt-get install mandoc): lint and rendering checks"
    skip "mandoc not installed: --help options in shardrun(1)"
    skip "mandoc not installed: schema keys in shardrun.yaml(5)"
else
    for m in "$M1" "$M5" "$MC"; do
        "$MANDOC" -Tlint -W warning "$m" >"$T/lint" 2>&1
        check "mandoc -Tlint is clean for $(basename "$m")" test ! -s "$T/lint"
        [ -s "$T/lint" ] && diag "$(cat "$T/lint")"
    done
    "$MANDOC" -Tascii "$M1" | sed "s/.\x08//g" >"$T/man1.txt"
    # an option rendered with three dashes (.Fl -a --b renders ---b)
    three=$(for m in "$M1" "$M5" "$MC"; do "$MANDOC" -Tascii "$m" | sed "s/.\x08//g" | grep -n -- '---[a-z]'; done)
    check "no option renders with three dashes in the man pages" test -z "$three" || diag "$three"
    "$MANDOC" -Tascii "$M5" | sed "s/.\x08//g" >"$T/man5.txt"
    "$S" --help | grep -o -- '--[a-z][a-z-]*' | sort -u >"$T/opts"
    missing=""
    while read -r o; do grep -q -- "$o" "$T/man1.txt" || missing="$missing $o"; done <"$T/opts"
    check "every --help option ($(wc -l <"$T/opts")) is in shardrun(1)${missing:+; missing:$missing}" test -z "$missing"
    for c in "train" "config check" "config show" "config keys" "data prepare" "ckpt list" "ckpt verify" \
        "ckpt inspect" "ckpt export"; do
        check "shardrun(1) documents '$c'" grep -q "shardrun $c" "$T/man1.txt"
    done
    for st in 0 1 64 65 66 69 70 73 74 75 78; do
        grep -Eq "^ +$st +" "$T/man1.txt" || missing_st="$missing_st $st"
    done
    check "shardrun(1) lists every exit status${missing_st:+; missing:$missing_st}" test -z "$missing_st"
    "$S" config keys | grep -o '^[a-z_.0-9]*' >"$T/keynames"
    missing=""
    while read -r k; do grep -q -- "$k" "$T/man5.txt" || missing="$missing $k"; done <"$T/keynames"
    check "every schema key ($(wc -l <"$T/keynames")) is in shardrun.yaml(5)${missing:+; missing:$missing}" test -z "$missing"
    "$MANDOC" -Tascii "$MC" | sed "s/.\x08//g" >"$T/manc.txt"
    missing=""
    for k in format version step tokens data.cursor rng.seed lr_schedule world.size world.mesh model config tensors \
        chunk_bytes files sha256 manifest_sha256 SRSHARD; do
        grep -q -- "$k" "$T/manc.txt" || missing="$missing $k"
    done
    check "shardrun-checkpoint(5) documents every manifest key and the shard header${missing:+; missing:$missing}" test -z "$missing"
    for sig in SIGUSR1 SIGTERM SIGCONT SIGXFSZ; do
        grep -q "$sig" "$T/man1.txt" || missing_sig="$missing_sig $sig"
    done
    check "shardrun(1) documents the signals${missing_sig:+; missing:$missing_sig}" test -z "$missing_sig"
    for k in "^SLURM" "srun --mpi=pmix" "RequeueExit=75" "scontrol requeue" "SLURM_RESTART_COUNT" "resume=" \
        "preempt_send_user_signal" "GraceTime" "srun --mpi=pmi2" "preemption.before_end" "max_stalled_restarts" \
        "comment_every_minutes" "bootstrap pmi2"; do
        grep -q -- "$k" "$T/man1.txt" || missing_sl="$missing_sl '$k'"
    done
    check "shardrun(1) has a SLURM section: launch, signals, requeue modes${missing_sl:+; missing:$missing_sl}" test -z "$missing_sl"
    for f in shardrun-gpu.sbatch shardrun-cpu.sbatch slurm.conf.shardrun; do
        check "slurm/$f exists" test -s "$SR_SRCDIR/slurm/$f"
    done
    check "the GPU template has the options the issue names" sh -c "for o in '--gpus-per-task=1' '--requeue' '--signal=USR1@' '--open-mode=append' 'srun --mpi=\"\${SHARDRUN_MPI:-pmix}\" shardrun train' 'SLURM_RESTART_COUNT'; do grep -q -- \"\$o\" '$SR_SRCDIR/slurm/shardrun-gpu.sbatch' || exit 1; done"
    check "slurm.conf.shardrun has the site lines" sh -c "grep -q '^RequeueExit=75' '$SR_SRCDIR/slurm/slurm.conf.shardrun' && grep -q '^PreemptMode=REQUEUE' '$SR_SRCDIR/slurm/slurm.conf.shardrun' && grep -q '^SlurmctldParameters=preempt_send_user_signal' '$SR_SRCDIR/slurm/slurm.conf.shardrun'"
fi
done_testing
