#!/bin/sh
# symbols.sh — every public sr_* symbol of the program has a caller outside
# the file that defines it (the program, the tests, or the benchmarks);
# anything else must be static or go.  Reads the objects the build made
# with nm; for what a configuration does not build (benchmarks, fuzz
# harnesses, the NCCL plane and its test without NCCL), their sources.
. "${SR_SRCDIR:-.}/tests/tap.sh"
B=${SR_BUILDDIR:-.}
command -v nm >/dev/null 2>&1 || { echo "1..0 # SKIP nm not installed (binutils)"; exit 0; }
objs=$(ls "$B"/src/*.o "$B"/tests/*.o "$B"/kernels/*.o 2>/dev/null)
check "the objects of the build are there ($(echo "$objs" | wc -w))" test "$(echo "$objs" | wc -w)" -ge 30
# "object symbol" for definitions and for references (w: a weak one,
# cudamod.c's to the CUDA table a test program links in)
for o in $objs; do
    # (the CUDA module's objects carry their archive's prefix: Makefile.am)
    nm "$o" | awk -v o="$(basename "$o" | sed 's/^libshardrun_cuda_a-//')" '$2 ~ /^[TDBR]$/ && $3 ~ /^sr_/ { print "def", o, $3 } ($1 == "U" || $1 == "w") && $2 ~ /^sr_/ { print "use", o, $2 }'
done >"$T/syms"
unused=""
for s in $(awk '$1 == "def" { print $3 }' "$T/syms" | sort -u); do
    home=$(awk -v s="$s" '$1 == "def" && $3 == s { print $2; exit }' "$T/syms")
    awk -v s="$s" -v h="$home" '$1 == "use" && $3 == s && $2 != h { found = 1 } END { exit !found }' "$T/syms" && continue
    # benchmarks and fuzz harnesses are built on demand only, and some
    # sources are built only in some configurations (the NCCL plane's calls,
    # its test, the CUDA back end of a --with-cuda=no tree): their text,
    # but the symbol's own file
    used=0
    for f in "$SR_SRCDIR"/bench/*.c "$SR_SRCDIR"/tests/fuzz/*.c "$SR_SRCDIR"/tests/test_nccl_boot.c \
        "$SR_SRCDIR"/src/comm_nccl.c "$SR_SRCDIR"/src/*_cuda.c "$SR_SRCDIR"/src/cuda_module.c \
        "$SR_SRCDIR"/kernels/*.cu "$SR_SRCDIR"/kernels/*.cuh; do
        [ "$(basename "$f" .c).o" = "$home" ] && continue
        grep -qw "$s" "$f" 2>/dev/null && used=1 && break
    done
    [ $used = 1 ] && continue
    unused="$unused $s($home)"
done
check "every public sr_* symbol is used outside its file${unused:+; unused:$unused}" test -z "$unused"
done_testing
