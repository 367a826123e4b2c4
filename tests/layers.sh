#!/bin/sh
# layers.sh — the shape of src/: every module sits in a layer of
# doc/ARCHITECTURE.md's table (parsed from between its LAYERS markers) and
# includes only modules of its own or lower layers; the #include graph of
# src/ has no cycle; every "ARCHITECTURE.md §N" a comment cites exists and
# nothing cites the old "DESIGN §N"; and at the call level, what each
# object file of src/ calls (nm -u) is defined in its own layer or a lower
# one, and the object-level call graph has no cycle.
. "${SR_SRCDIR:-.}/tests/tap.sh"
SRC=$SR_SRCDIR/src
DOC=$SR_SRCDIR/doc/ARCHITECTURE.md

# module -> layer, from the table rows "| N | name | a, b, c | ... |"
sed -n '/BEGIN LAYERS/,/END LAYERS/p' "$DOC" |
    awk -F'|' '$2 ~ /^ *[0-9]+ *$/ { n = split($4, m, ","); for (i = 1; i <= n; i++) { gsub(/ /, "", m[i]); print m[i], $2 + 0 } }' >"$T/layers"
check "the layer table of ARCHITECTURE.md parses ($(wc -l <"$T/layers") modules)" test "$(wc -l <"$T/layers")" -ge 20

# every file's includes: "file module target" (but the generated headers:
# srconfig.h of configure, sr_abi.h of make)
for f in "$SRC"/*.c "$SRC"/*.h; do
    b=$(basename "$f")
    sed -n 's/^#include "\([a-z_0-9]*\)\.h".*/\1/p' "$f" | grep -Ev '^(srconfig|sr_abi)$' | sed "s|^|$b |"
done >"$T/includes"

# every module is in the table, every table module exists
missing=""
for f in "$SRC"/*.c "$SRC"/*.h; do
    m=$(basename "$f" | sed 's/\.[ch]$//')
    grep -q "^$m " "$T/layers" || missing="$missing $m"
done
check "every source file's module is in the layer table${missing:+; missing:$missing}" test -z "$missing"
ghosts=""
while read -r m l; do
    [ -e "$SRC/$m.h" ] || [ -e "$SRC/$m.c" ] || ghosts="$ghosts $m"
done <"$T/layers"
check "every module of the table exists${ghosts:+; not found:$ghosts}" test -z "$ghosts"

# includes go to the same or a lower layer
bad=$(awk 'NR == FNR { layer[$1] = $2; next }
    { m = $1; sub(/\.[ch]$/, "", m); t = $2
      if (!(t in layer)) { print $1 " includes unknown " t ".h"; next }
      if (layer[t] > layer[m]) print $1 " (layer " layer[m] ") includes " t ".h (layer " layer[t] ")" }' \
    "$T/layers" "$T/includes")
check "no module includes a module of a higher layer" test -z "$bad"
[ -n "$bad" ] && diag "$bad"

# on_cycle EDGES: the nodes of a "from to" edge list that lie on a cycle
# (drop every node with no edge out or no edge in, until none drops; what
# remains lies on a cycle)
on_cycle() {
    awk '{ from[NR] = $1; to[NR] = $2; files[$1]; files[$2] }
        END {
            do {
                removed = 0
                for (f in files) {
                    out = 0; inc = 0
                    for (i in from) {
                        if (from[i] == f && (to[i] in files)) out = 1
                        if (to[i] == f && (from[i] in files)) inc = 1
                    }
                    if (!out || !inc) { delete files[f]; removed = 1 }
                }
            } while (removed)
            for (f in files) printf "%s ", f
        }' "$1"
}

# the file-level include graph is acyclic
awk '{ print $1, $2 ".h" }' "$T/includes" | sort -u >"$T/edges"
cycle=$(on_cycle "$T/edges")
check "the #include graph of src/ has no cycle${cycle:+; on a cycle: $cycle}" test -z "$cycle"

# section references
grep -rhoE 'ARCHITECTURE\.md §[0-9]+' "$SRC" "$SR_SRCDIR/tests" "$SR_SRCDIR/bench" 2>/dev/null | sed 's/.*§//' | sort -u >"$T/refs"
dangling=""
while read -r n; do grep -q "^## §$n " "$DOC" || dangling="$dangling §$n"; done <"$T/refs"
check "every ARCHITECTURE.md §N cited in the code exists ($(wc -l <"$T/refs") sections cited)${dangling:+; missing:$dangling}" \
    sh -c "[ -z '$dangling' ] && [ $(wc -l <"$T/refs") -ge 3 ]"
check "no comment cites DESIGN §N (a document outside the repository)" sh -c "! grep -rn 'DESIGN §' '$SRC' '$SR_SRCDIR/tests' '$SR_SRCDIR/bench' --include='*.[ch]' --include='*.sh' --exclude=layers.sh"
# outside_refs FILE...: lines citing a document outside the repository (the
# design notes GPU.md and DESIGN.md, the shared/ folder beside a checkout)
outside_refs() {
    grep -nE 'GPU\.md|DESIGN\.md|\.\./shared/|shared/reference' "$@" /dev/null 2>/dev/null
}
found=$(find "$SRC" "$SR_SRCDIR/tests" "$SR_SRCDIR/bench" "$SR_SRCDIR/kernels" "$SR_SRCDIR/doc" "$SR_SRCDIR/man" \
    -maxdepth 2 -type f \( -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' -o -name '*.sh' -o -name '*.py' -o -name '*.md' \
    -o -name '*.in' -o -name '*.[15]' \) ! -name layers.sh ! -path '*/hf/hub/*' -print 2>/dev/null |
    while read -r f; do outside_refs "$f"; done)
found="$found$(outside_refs "$SR_SRCDIR/README.md" "$SR_SRCDIR/configure.ac" "$SR_SRCDIR/Makefile.am")"
check "no file cites a document outside the repository (GPU.md, DESIGN.md, ../shared)" test -z "$found" || diag "$found"
printf '/* see GPU.md §8 for the tolerances */\n' >"$T/planted.c"
check "a citation of a document outside the repository is reported (planted)" test -n "$(outside_refs "$T/planted.c")"
# ---- calls.  An include check cannot see a call that goes through a
# declaration in a lower header (device.c once chose the table and served
# every table: a cycle with device_cpu.c, device_cuda.c and ops_cuda.c).
# Per object file: the sr_* symbols it leaves undefined (nm -u), mapped to
# the object that defines them.  A lower layer calling a higher one through
# a function pointer the higher one hands it (the model's sr_param_source,
# the table's primitives) is no symbol reference; a named call up on
# purpose would be listed in INVERSIONS ("caller callee", with the reason).
INVERSIONS=""
B=${SR_BUILDDIR:-.}
if ! command -v nm >/dev/null 2>&1; then
    skip "nm is not installed (binutils): the call-level check"
elif [ "$(ls "$B"/src/*.o 2>/dev/null | wc -l)" -lt 20 ]; then
    # make check builds them first: missing objects are a broken tree, not a reason to skip
    not_ok "the objects of src/ are there for the call-level check (found $(ls "$B"/src/*.o 2>/dev/null | wc -l) in $B/src)"
else
    for o in "$B"/src/*.o; do
        m=$(basename "$o" .o)
        m=${m#libshardrun_cuda_a-} # the CUDA module's objects (Makefile.am: position-independent)
        nm "$o" | awk -v m="$m" '$1 == "U" && $2 ~ /^sr_/ { print "use", m, $2 } $2 ~ /^[TDBRC]$/ && $3 ~ /^sr_/ { print "def", m, $3 }'
    done >"$T/syms"
    # "caller callee" per call between two object files of a module of the table
    awk 'NR == FNR { layer[$1] = $2; next }
        $1 == "def" { home[$3] = $2; next }
        $1 == "use" { use[++n] = $2 " " $3 }
        END { for (i = 1; i <= n; i++) { split(use[i], u, " "); h = home[u[2]]
                if (h != "" && h != u[1] && (u[1] in layer) && (h in layer)) print u[1], h } }' \
        "$T/layers" "$T/syms" | sort -u >"$T/calls"
    # called_up FILE: the calls of FILE that go to a higher layer and are not listed
    called_up() {
        awk -v inv="$INVERSIONS" 'NR == FNR { layer[$1] = $2; next }
            { if (index(" " inv " ", " " $1 " " $2 " ")) next
              if (layer[$2] > layer[$1]) print $1 " (layer " layer[$1] ") calls " $2 " (layer " layer[$2] ")" }' \
            "$T/layers" "$1"
    }
    check "the call graph of src/'s objects was read ($(wc -l <"$T/calls") calls between files)" \
        test "$(wc -l <"$T/calls")" -ge 100
    up=$(called_up "$T/calls")
    check "no object file calls a module of a higher layer (nm -u)${up:+; $up}" test -z "$up"
    # the object-level call graph is acyclic
    ccycle=$(on_cycle "$T/calls")
    check "the call graph between src/'s object files has no cycle${ccycle:+; on a cycle: $ccycle}" test -z "$ccycle"
    printf 'device device_cpu\ndevice_cpu device\ndevice_cpu vec\n' >"$T/planted_cycle"
    check "a call cycle is reported (planted: device <-> device_cpu)" test -n "$(on_cycle "$T/planted_cycle")"
    printf 'mem train\n' >"$T/planted_calls"
    check "a call from a lower layer to a higher one is reported (planted: mem calls train)" \
        test -n "$(called_up "$T/planted_calls")"
fi
# ---- every fact has one owner: the run only sequences the modules, the
# planner only adds up what they report, and storage reaches the engine's
# state only through the engine
lines() { wc -l <"$SRC/$1"; }
check "train.c sequences owners: at most 600 lines ($(lines train.c))" test "$(lines train.c)" -le 600
check "fsdp.c is under 800 lines ($(lines fsdp.c))" test "$(lines fsdp.c)" -lt 800
found=$(grep -nE 'separate_memory|sr_hb_|shard_state_view' "$SRC/ckpt.c" "$SRC/train.c")
check "checkpoints and the run reach the shards only through the engine (no separate_memory, sr_hb_, state view)" \
    test -z "$found" || diag "$found"
found=$(grep -nE '#include "comm_nccl\.h"|SR_DEV_|->kind\b|\bstr(n)?cmp\(|\b(open|read)dir\(' "$SRC/train.c")
check "train.c opens no NCCL, branches on no device kind, compares no config string, scans no directory" \
    test -z "$found" || diag "$found"
# bytes_literals FILE...: numeric byte constants (shifts, counts times a
# size, powers of 1024) and comments naming another file's allocation
bytes_literals() {
    grep -nE '<< *[0-9]|[0-9] *\* *sizeof|sizeof *\([^)]*\) *\* *[0-9]|\b1024\b|[a-z_]+\.c[ ,:)]' "$@" /dev/null |
        grep -vE ':1:/\* [a-z_]+\.c — ' # (a file's first line names itself)
}
found=$(bytes_literals "$SRC/plan.c" "$SRC/memplan.c")
check "plan.c and memplan.c hold no byte constants and name no other file's allocation" test -z "$found" || diag "$found"
printf 'size_t x = (size_t)32 << 20; /* fsdp.c alloc_pools */\n' >"$T/planted_plan.c"
check "a byte constant in the planner is reported (planted)" test -n "$(bytes_literals "$T/planted_plan.c")"
done_testing
