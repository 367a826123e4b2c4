#!/bin/sh
# layers.sh — the shape of src/: doc/ARCHITECTURE.md's module index
# (between its MODULES markers: every file of src/ and kernels/ in one row,
# every entry point it names defined); every module sits in a layer of its
# table (between the LAYERS markers) and includes only modules of its own
# or lower layers; the #include graph of
# src/ has no cycle; every "ARCHITECTURE.md §N" a comment cites exists and
# nothing cites the old "DESIGN §N"; and at the call level, what each
# object file of src/ calls (nm -u) is defined in its own layer or a lower
# one, and the object-level call graph has no cycle.  Then the size
# budgets (§6: files, functions, measured by tests/funcsize.py) and the
# numbers ARCHITECTURE.md states that the code owns (the manifest version,
# the model families, the exit sites, the launcher count, the internal
# headers' includers), and one owner each for the model family, the clock
# and the string builder; the index, the budgets and the owners are proven
# by planted violations.
. "${SR_SRCDIR:-.}/tests/tap.sh"
SRC=$SR_SRCDIR/src
DOC=$SR_SRCDIR/doc/ARCHITECTURE.md

# the module index: "layer module files entries" per row of the MODULES
# table (files and entry points comma lists, kernels/ files with their folder)
sed -n '/BEGIN MODULES/,/END MODULES/p' "$DOC" |
    awk -F'|' '$2 ~ /^ *[0-9]+ *$/ { gsub(/ /, "", $3); gsub(/ /, "", $4); gsub(/ /, "", $6); print $2 + 0, $3, $4, $6 }' >"$T/modules"
# file -> layer and module: "file module layer"
awk '{ n = split($3, f, ","); for (i = 1; i <= n; i++) print f[i], $2, $1 }' "$T/modules" >"$T/files"
# the include check's table: "module layer" for the file's name without its extension
awk '{ f = $1; sub(/^kernels\//, "", f); sub(/\.(c|h|cu|cuh)$/, "", f); print f, $3 }' "$T/files" | sort -u >"$T/layers"
check "the module index of ARCHITECTURE.md parses ($(wc -l <"$T/modules") modules, $(wc -l <"$T/files") files)" \
    test "$(wc -l <"$T/modules")" -ge 80
sed -n '/BEGIN LAYERS/,/END LAYERS/p' "$DOC" | awk -F'|' '$2 ~ /^ *[0-9]+ *$/ { print $2 + 0 }' >"$T/layer_names"
bad=$(awk 'NR == FNR { ok[$1] = 1; next } !($1 in ok) { print $2 " (layer " $1 ")" }' "$T/layer_names" "$T/modules")
check "every module's layer is a row of the layer table${bad:+; not: $bad}" test -z "$bad"

# every file of src/ and kernels/ is in exactly one row; every file named exists
# membership FILES PATH...: "none NAME" or "several NAME" for each path in
# no row or in several rows of FILES (the "file module layer" list)
membership() {
    list=$1
    shift
    for f in "$@"; do
        [ -e "$f" ] || continue
        case $f in */kernels/*) n=kernels/$(basename "$f") ;; *) n=$(basename "$f") ;; esac
        c=$(awk -v n="$n" '$1 == n' "$list" | wc -l)
        [ "$c" -eq 0 ] && echo "none $n"
        [ "$c" -gt 1 ] && echo "several $n"
    done
}
bad=$(membership "$T/files" "$SRC"/*.c "$SRC"/*.h "$SR_SRCDIR"/kernels/*.cu "$SR_SRCDIR"/kernels/*.cuh \
    "$SR_SRCDIR"/kernels/*.h | tr '\n' ' ')
check "every file of src/ and kernels/ belongs to one row of the module index${bad:+; $bad}" test -z "$bad"
grep -v '^ckpt_async\.c ' "$T/files" >"$T/planted_files"
check "a file in no row is reported (planted: ckpt_async.c's row removed)" \
    test "$(membership "$T/planted_files" "$SRC/ckpt_async.c")" = "none ckpt_async.c"
ghosts=""
while read -r f m l; do
    case $f in kernels/*) p=$SR_SRCDIR/$f ;; *) p=$SRC/$f ;; esac
    [ -e "$p" ] || ghosts="$ghosts $f"
done <"$T/files"
check "every file the module index names exists${ghosts:+; not found:$ghosts}" test -z "$ghosts"

# every entry point exists: defined in an object of the build (nm), or,
# for a row whose code is not built here (no object) or lives in headers,
# defined in one of its files
B=${SR_BUILDDIR:-.}
for o in "$B"/src/*.o "$B"/kernels/*.o; do
    [ -e "$o" ] && nm "$o" 2>/dev/null | awk '$2 ~ /^[TDRBC]$/ { print $3 }'
done | sort -u >"$T/defined"
# entry_missing MODULES: "module entry" for each entry point found nowhere
entry_missing() {
    while read -r l m f e; do
        for x in $(echo "$e" | tr ',' ' '); do
            grep -qx "$x" "$T/defined" && continue
            found=0
            for file in $(echo "$f" | tr ',' ' '); do
                case $file in kernels/*) p=$SR_SRCDIR/$file ;; *) p=$SRC/$file ;; esac
                grep -Eq "^[A-Za-z_].*[^a-zA-Z0-9_]$x(\(|\[| =)|^#define $x\b|^$x\(" "$p" 2>/dev/null && found=1 && break
            done
            [ $found = 1 ] || echo "$m $x"
        done
    done <"$1"
}
bad=$(entry_missing "$T/modules" | tr '\n' ';')
check "every entry point the module index names exists (nm on the objects, or its definition)${bad:+; missing: $bad}" \
    test -z "$bad"
echo "2 mem mem.c,mem.h sr_mem_no_such_function" >"$T/planted_modules"
check "an entry point that does not exist is reported (planted)" test -n "$(entry_missing "$T/planted_modules")"

# every file's includes: "file module target" (but the generated headers:
# srconfig.h of configure, sr_abi.h of make)
for f in "$SRC"/*.c "$SRC"/*.h; do
    b=$(basename "$f")
    sed -n 's/^#include "\([a-z_0-9]*\)\.h".*/\1/p' "$f" | grep -Ev '^(srconfig|sr_abi)$' | sed "s|^|$b |"
done >"$T/includes"

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
# ---- size budgets (ARCHITECTURE.md §6): no .c of src/ over 1,000 lines
# (manifest.c, one format in both directions, at most 1,100), no function
# of src/ or kernels/ over 120 lines, at most 10 over 80.  A function over
# a budget on purpose is listed in FUNC_EXCEPTIONS ("name:frozen lines"
# and the reason beside it) and may not grow past its frozen count.
FUNC_EXCEPTIONS=""
FILE_LIMIT=1000
FILE_LIMITS="manifest.c:1100"
# oversize_files FILE...: "file lines limit" for each .c over its limit
oversize_files() {
    for f in "$@"; do
        b=$(basename "$f")
        lim=$FILE_LIMIT
        for e in $FILE_LIMITS; do [ "${e%%:*}" = "$b" ] && lim=${e#*:}; done
        n=$(wc -l <"$f")
        [ "$n" -gt "$lim" ] && echo "$b $n (limit $lim)"
    done
}
# function_budget FILE...: what breaks the function budgets
function_budget() {
    python3 "$SR_SRCDIR/tests/funcsize.py" "$@" | awk -v exc="$FUNC_EXCEPTIONS" '
        BEGIN { n = split(exc, e, " "); for (i = 1; i <= n; i++) { split(e[i], p, ":"); frozen[p[1]] = p[2] } }
        { len = $1; name = $3
          if (name in frozen) { if (len > frozen[name]) print name " grew past its frozen " frozen[name] " lines (" len ")"; next }
          if (len > 120) print name " (" $2 ") is " len " lines, over 120"
          if (len > 80) { over++; list = list " " name "(" len ")" } }
        END { if (over > 10) print over " functions over 80 lines, at most 10:" list }'
}
big=$(oversize_files "$SRC"/*.c | tr '\n' ';')
check "no .c of src/ is over $FILE_LIMIT lines (manifest.c 1,100)${big:+; $big}" test -z "$big"
awk 'BEGIN { for (i = 0; i < 1001; i++) print "int x" i ";" }' >"$T/planted_big.c"
check "a file over the limit is reported (planted: 1,001 lines)" test -n "$(oversize_files "$T/planted_big.c")"
if command -v python3 >/dev/null 2>&1; then
    python3 "$SR_SRCDIR/tests/funcsize.py" "$SRC"/*.c "$SR_SRCDIR"/kernels/*.cu >"$T/funcs"
    over80=$(awk '$1 > 80' "$T/funcs" | wc -l)
    longest=$(sort -rn "$T/funcs" | head -1 | awk '{ print $3 " " $1 }')
    check "the function extents were measured ($(wc -l <"$T/funcs") functions; $over80 over 80 lines; the longest $longest)" \
        test "$(wc -l <"$T/funcs")" -ge 1000
    bad=$(function_budget "$SRC"/*.c "$SR_SRCDIR"/kernels/*.cu | tr '\n' ';')
    check "no function is over 120 lines, at most 10 over 80 (exceptions: ${FUNC_EXCEPTIONS:-none})${bad:+; $bad}" \
        test -z "$bad"
    # planted: one function of 121 lines and eleven of 81
    {
        printf 'static int long_one(void) {\n'
        awk 'BEGIN { for (i = 0; i < 119; i++) print "    x();" }'
        printf '}\n'
        for k in 1 2 3 4 5 6 7 8 9 10 11; do
            printf 'static int f%d(void) {\n' "$k"
            awk 'BEGIN { for (i = 0; i < 79; i++) print "    x();" }'
            printf '}\n'
        done
    } >"$T/planted_funcs.c"
    out=$(function_budget "$T/planted_funcs.c")
    check "a function over 120 lines and an eleventh over 80 are reported (planted)" \
        sh -c "echo '$out' | grep -q 'long_one (.*) is 121 lines' && echo '$out' | grep -q '12 functions over 80'"
else
    skip "python3 is not installed: the function budgets (tests/funcsize.py)"
fi

# ---- the numbers ARCHITECTURE.md states that the code owns
v_doc=$(sed -n 's/^Manifest version \([0-9][0-9]*\) .*/\1/p' "$DOC")
v_code=$(sed -n 's/^#define SR_MANIFEST_VERSION \([0-9][0-9]*\).*/\1/p' "$SRC/manifest.h")
check "§5's manifest version is the code's (ARCHITECTURE.md $v_doc, manifest.h $v_code)" \
    sh -c "[ -n '$v_doc' ] && [ '$v_doc' = '$v_code' ]"
fam_doc=$(sed -n '/^## §1 /,/^## §2 /p' "$DOC" | tr '\n' ' ' | sed -n 's/.*model families \(`[a-z0-9_]*`\( and\|,\) *\)*`\([a-z0-9_]*\)`.*/&/p' |
    grep -o 'model families [^(]*' | grep -o '`[a-z0-9_]*`' | tr -d '`' | tr '\n' ' ')
if [ -x "$B/shardrun" ]; then
    fam_code=$("$B/shardrun" config keys 2>/dev/null | awk '$1 == "model.arch" { for (i = 2; i <= NF && $i != "default"; i++) if ($i != "|") printf "%s ", $i }')
    check "§1 names the model families the job file takes (ARCHITECTURE.md: $fam_doc; model.arch: $fam_code)" \
        sh -c "[ -n '$fam_code' ] && [ '$fam_doc' = '$fam_code' ]"
else
    not_ok "the program is built for the family check ($B/shardrun)"
fi
# exit_sites DIR: "file call count" of every exit, _exit and abort call in DIR's .c files
exit_sites() {
    for f in "$1"/*.c; do
        sed -e 's|/\*.*\*/||g' -e 's|//.*||' "$f" | grep -v '^ *\*' |
            grep -oE '(^|[^A-Za-z0-9_])(_exit|exit|abort)\(' | sed -E 's/^[^_a-z]*//; s/\($//' |
            sort | uniq -c | awk -v f="$(basename "$f")" '{ print f, "`" $2 "`", $1 }'
    done | sort
}
exit_sites "$SRC" >"$T/exit_code"
sed -n '/BEGIN EXIT SITES/,/END EXIT SITES/p' "$DOC" |
    awk -F'|' '$4 ~ /^ *[0-9]+ *$/ { gsub(/ /, "", $2); gsub(/ /, "", $3); print $2, $3, $4 + 0 }' | sort >"$T/exit_doc"
diff=$(diff "$T/exit_doc" "$T/exit_code" | grep '^[<>]' | tr '\n' ';')
check "only the sites §6 lists exit or abort ($(wc -l <"$T/exit_doc") rows)${diff:+; differs (< doc, > code): $diff}" \
    sh -c "[ -z '$diff' ] && [ $(wc -l <"$T/exit_doc") -ge 5 ]"
mkdir -p "$T/planted_exit" && printf 'void f(void) { if (bad) _exit(70); }\n' >"$T/planted_exit/x.c"
check "an _exit outside the list is reported (planted)" test "$(exit_sites "$T/planted_exit")" = 'x.c `_exit` 1'
n_doc=$(tr '\n' ' ' <"$DOC" | sed -n 's/.*kernels\/ has \([0-9][0-9]*\) launchers.*/\1/p')
n_decl=$(grep -cE '^[a-z].*[ *]sr_k_[a-z0-9_]*\(' "$SR_SRCDIR/kernels/sr_cuda.h")
n_enter=$(cat "$SR_SRCDIR"/kernels/*.cu | grep -oE 'SR_ENTER\([a-z0-9_]+' | sort -u | wc -l)
check "§3c's launcher count is kernels/' (ARCHITECTURE.md $n_doc, sr_cuda.h $n_decl, SR_ENTER $n_enter)" \
    sh -c "[ -n '$n_doc' ] && [ '$n_doc' = '$n_decl' ] && [ '$n_doc' = '$n_enter' ]"
# internal headers: included only by the files §2's paragraph names for them
# (and the .c of the header's own name)
tr '\n' ' ' <"$DOC" | sed -n 's/.*Internal headers are included only by the files of their module\(.*\)Tests and benchmarks may include.*/\1/p' |
    tr ';' '\n' | sed '$a\\' | while read -r seg; do
        hs=$(echo "$seg" | grep -oE '`[a-z_]+\.h`' | tr -d '`')
        cs=$(echo "$seg" | sed 's/`[^`]*`//g' | grep -oE '[a-z_]+\.[ch]' | tr '\n' ' ')
        for h in $hs; do echo "$h $cs"; done
    done >"$T/internal"
bad=$(while read -r h cs; do
    for f in $(grep -l "#include \"$h\"" "$SRC"/*.c "$SRC"/*.h); do
        b=$(basename "$f")
        case " $cs ${h%.h}.c " in *" $b "*) ;; *) printf '%s includes %s; ' "$b" "$h" ;; esac
    done
done <"$T/internal")
check "internal headers are included only by their module's files ($(wc -l <"$T/internal") headers)${bad:+; $bad}" \
    sh -c "[ -z '$bad' ] && [ $(wc -l <"$T/internal") -ge 9 ]"
# ---- one owner for each fact: the model family (family.h: only the family
# table, model.c's blocks and hfnames.c's Hugging Face forms name a
# family's identity; every other file reads its traits), the clock (clock.c
# alone reads POSIX's clocks) and the string builder (line.c: no
# `used += snprintf` appender, no ADD macro elsewhere)
# family_branches DIR: the .c files of DIR that name a family (SR_ARCH_GPT2, ...)
family_branches() { grep -l 'SR_ARCH_[A-Z]\|SR_CFG_ARCH_[A-Z]' "$1"/*.c 2>/dev/null | sed 's|.*/||' | sort | tr '\n' ' '; }
# clock_readers DIR...: the source files that call clock_gettime, but clock.c
clock_readers() {
    grep -l 'clock_gettime' "$@" 2>/dev/null | grep -v '/clock\.c$' | sed 's|.*/||' | tr '\n' ' '
}
# appenders DIR: "file:line" of each hand-made appender in DIR's .c and .h (but line.c and line.h)
appenders() {
    grep -nE '\+= *v?snprintf\(|define +ADD\(|snprintf\([a-z_]+ \+ strlen\(' "$1"/*.c "$1"/*.h 2>/dev/null |
        grep -vE '/line\.[ch]:' | sed 's|.*/||; s|^\([^:]*:[0-9]*\):.*|\1|' | tr '\n' ' '
}
fam=$(family_branches "$SRC")
check "at most 3 files of src/ name a model family, the family table among them ($fam)" \
    sh -c "[ $(echo "$fam" | wc -w) -le 3 ] && [ $(echo "$fam" | wc -w) -ge 1 ] && echo ' $fam' | grep -q ' family\.c '"
mkdir -p "$T/planted_fam" && cp "$SRC/family.c" "$SRC/model.c" "$SRC/hfnames.c" "$T/planted_fam/" &&
    printf 'int g(const sr_model_dims *d) { return d->arch == SR_ARCH_LLAMA; }\n' >"$T/planted_fam/sample.c"
check "a fourth file branching on a family is reported (planted: sample.c)" \
    test "$(family_branches "$T/planted_fam" | wc -w)" -eq 4
found=$(clock_readers "$SRC"/*.c "$SRC"/*.h "$SR_SRCDIR"/kernels/*.cu "$SR_SRCDIR"/kernels/*.cuh "$SR_SRCDIR"/kernels/*.h)
check "only clock.c reads POSIX's clocks (clock_gettime)${found:+; also: $found}" \
    sh -c "[ -z '$found' ] && grep -q clock_gettime '$SRC/clock.c'"
printf 'static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec; }\n' >"$T/planted_clock.c"
check "a private clock helper is reported (planted)" test "$(clock_readers "$T/planted_clock.c")" = "planted_clock.c "
found=$(appenders "$SRC")
check "no hand-made appender (used += snprintf, an ADD macro) outside line.c${found:+; at: $found}" test -z "$found"
mkdir -p "$T/planted_line" && printf 'void f(char *b, size_t n) { size_t used = 0;\n    used += snprintf(b + used, n - used, "x");\n}\n' >"$T/planted_line/x.c"
check "a used += snprintf appender is reported (planted)" test "$(appenders "$T/planted_line")" = "x.c:2 "
# ---- the CI budget: .ci/run's check-long phase runs the tests with long
# checks alone (Makefile.am LONG_PARTS); a test that gains a long check
# joins the list, or its long checks would never run in CI
if [ -f "$B/Makefile" ]; then
    make -s -C "$B" print-long-parts 2>/dev/null | tr ' ' '\n' | sed -n 's|^tests/||p' | sort >"$T/long_listed"
    grep -lE 'group --long|long_tier' "$SR_SRCDIR"/tests/*.sh | sed 's|.*/||' | grep -Ev '^(tap|layers)\.sh$' >"$T/long_have"
    sed -n 's/^SH_LONG = //p' "$SR_SRCDIR/Makefile.am" | tr ' ' '\n' | sed -n 's|^tests/||p' >>"$T/long_have"
    sort -u "$T/long_have" -o "$T/long_have"
    diff=$(diff "$T/long_listed" "$T/long_have" | grep '^[<>]' | tr '\n' ' ')
    check "LONG_PARTS lists every test with long checks ($(wc -l <"$T/long_have"))${diff:+; differs (< listed, > has long checks): $diff}" \
        sh -c "[ -z '$diff' ] && [ $(wc -l <"$T/long_have") -ge 10 ]"
else
    skip "no Makefile in $B: the long tier's list"
fi
done_testing
