#!/bin/sh
# layers.sh — the shape of src/: every module sits in a layer of
# doc/ARCHITECTURE.md's table (parsed from between its LAYERS markers) and
# includes only modules of its own or lower layers; the #include graph of
# src/ has no cycle; every "ARCHITECTURE.md §N" a comment cites exists and
# nothing cites the old "DESIGN §N".
. "${SR_SRCDIR:-.}/tests/tap.sh"
SRC=$SR_SRCDIR/src
DOC=$SR_SRCDIR/doc/ARCHITECTURE.md

# module -> layer, from the table rows "| N | name | a, b, c | ... |"
sed -n '/BEGIN LAYERS/,/END LAYERS/p' "$DOC" |
    awk -F'|' '$2 ~ /^ *[0-9]+ *$/ { n = split($4, m, ","); for (i = 1; i <= n; i++) { gsub(/ /, "", m[i]); print m[i], $2 + 0 } }' >"$T/layers"
check "the layer table of ARCHITECTURE.md parses ($(wc -l <"$T/layers") modules)" test "$(wc -l <"$T/layers")" -ge 20

# every file's includes: "file module target"
for f in "$SRC"/*.c "$SRC"/*.h; do
    b=$(basename "$f")
    sed -n 's/^#include "\([a-z_0-9]*\)\.h".*/\1/p' "$f" | grep -v '^srconfig$' | sed "s|^|$b |"
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

# the file-level include graph is acyclic: drop every file that includes
# nothing left or that nothing left includes, until none drops; what
# remains lies on a cycle
awk '{ print $1, $2 ".h" }' "$T/includes" | sort -u >"$T/edges"
cycle=$(awk '{ from[NR] = $1; to[NR] = $2; files[$1]; files[$2] }
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
    }' "$T/edges")
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
done_testing
