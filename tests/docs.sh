#!/bin/sh
# docs.sh — the man pages and the README (doc/ARCHITECTURE.md is
# tests/layers.sh's): mandoc -Tlint clean; every --help option appears in
# shardrun(1); every schema key appears in shardrun.yaml(5), whose KEYS
# list is exactly what `shardrun config keys --mdoc` prints; the rendered
# pages have no word eaten by .Fl, no nested quote, no empty parenthesis;
# no retired claim is made anywhere.
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
    # mdoc slips that render wrong: words eaten by .Fl (".Pq Fl -threads ;
    # every core" renders "-every -core"), quotes opened inside quotes, a
    # parenthesis or mark left empty ("(, Open trace file", "(default ~.)")
    for m in "$M1" "$M5" "$MC"; do "$MANDOC" -Tutf8 "$m" | sed "s/.\x08//g" >"$T/$(basename "$m").utf8"; done
    eaten=$(grep -nE '(^|[ (\[])-[a-zA-Z][a-zA-Z]+' "$T"/*.utf8 | sed "s|$T/||")
    check "no word is eaten by .Fl in the rendered pages (a single-dash word is one)" test -z "$eaten" || diag "$eaten"
    nested=$(grep -n '“[^”]*“' "$T"/*.utf8 | sed "s|$T/||")
    check "no quote opens inside another in the rendered pages" test -z "$nested" || diag "$nested"
    empty=$(grep -nE '\( *,|(^|[^A-Za-z0-9_])\( *\)|~\.' "$T"/*.utf8 | sed "s|$T/||")
    check "no empty parenthesis or stray mark in the rendered pages" test -z "$empty" || diag "$empty"
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
        "comment_every_minutes" "bootstrap pmi2" "RESILIENCE" "SHARDRUN_SPARE_NODES" "MAX_STEP_RESTARTS" "no-kill"; do
        grep -q -- "$k" "$T/man1.txt" || missing_sl="$missing_sl '$k'"
    done
    check "shardrun(1) has a SLURM section: launch, signals, requeue modes${missing_sl:+; missing:$missing_sl}" test -z "$missing_sl"
    for f in shardrun-gpu.sbatch shardrun-cpu.sbatch slurm.conf.shardrun; do
        check "slurm/$f exists" test -s "$SR_SRCDIR/slurm/$f"
    done
    check "the GPU template has the options the issue names" sh -c "for o in '--gpus-per-task=1' '--requeue' '--no-kill' '--signal=USR1@' '--open-mode=append' 'srun --mpi=\"\${SHARDRUN_MPI:-pmix}\"' 'shardrun train' 'SLURM_RESTART_COUNT' 'SHARDRUN_SPARE_NODES' 'MAX_STEP_RESTARTS'; do grep -q -- \"\$o\" '$SR_SRCDIR/slurm/shardrun-gpu.sbatch' || exit 1; done"
    # the restart loop has one text, kept the same in both templates
    blk='/^# ---- restarts inside the allocation/,/^# ---- end of the block/p'
    sed -n "$blk" "$SR_SRCDIR/slurm/shardrun-cpu.sbatch" >"$T/loop.cpu"
    sed -n "$blk" "$SR_SRCDIR/slurm/shardrun-gpu.sbatch" >"$T/loop.gpu"
    check "both templates carry the same restart loop (--no-kill, spares, MAX_STEP_RESTARTS): $(wc -l <"$T/loop.cpu") lines" \
        sh -c "[ \$(wc -l <'$T/loop.cpu') -gt 50 ] && cmp -s '$T/loop.cpu' '$T/loop.gpu' && grep -q '^#SBATCH --no-kill' '$SR_SRCDIR/slurm/shardrun-cpu.sbatch'" ||
        diag "$(diff "$T/loop.cpu" "$T/loop.gpu" | head -10)"
    for t in cpu gpu; do
        check "slurm/shardrun-$t.sbatch parses (bash -n)" bash -n "$SR_SRCDIR/slurm/shardrun-$t.sbatch"
    done
    check "slurm.conf.shardrun has the site lines" sh -c "grep -q '^RequeueExit=75' '$SR_SRCDIR/slurm/slurm.conf.shardrun' && grep -q '^PreemptMode=REQUEUE' '$SR_SRCDIR/slurm/slurm.conf.shardrun' && grep -q '^SlurmctldParameters=preempt_send_user_signal' '$SR_SRCDIR/slurm/slurm.conf.shardrun'"
fi
# claims that were true once and are not any more: each a phrase no page,
# README nor --help may say again
retired="data prepare\` writes byte-level shards, which only
makes byte-level shards (vocabulary 256) from any text
one rank in this release
Train a GPT-2 style transformer
byte-level vocabulary only
under their own names, so that
its files are copied beside the model
Pq Va s No + 1 x Cm batch_size"
"$S" --help >"$T/help" 2>&1
"$S" sample --help >>"$T/help" 2>&1
for f in "$SR_SRCDIR/README.md" "$M1" "$M5" "$MC" "$T/help"; do
    printf '%s\n' "$retired" | while read -r phrase; do
        tr '\n' ' ' <"$f" | sed 's/  */ /g' | grep -qF -- "$phrase" && echo "$(basename "$f"): $phrase"
    done
done >"$T/retired"
check "no retired claim is made ($(printf '%s\n' "$retired" | wc -l) phrases in the README, the man pages and --help)" \
    test ! -s "$T/retired" || diag "$(cat "$T/retired")"
done_testing
