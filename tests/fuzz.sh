#!/bin/sh
# fuzz.sh — every parser of outside bytes against its fuzz harness
# (tests/fuzz/fuzz_*.c).  Fast tier: each harness's committed corpus
# (tests/fuzz/corpus/NAME) replayed through the normal build
# (tests/fuzz/replay_*, a replay main(); under the sanitizer tree with
# AddressSanitizer): no crash, no sanitizer report.  Long tier: the
# harnesses build in their own clang tree and libFuzzer runs each for
# SHARDRUN_FUZZ_SECONDS (default 10; CI 30) with no crash, leak or timeout;
# needs clang with libFuzzer (apt-get install clang libclang-rt-14-dev),
# without it those checks skip unless SHARDRUN_TEST_REQUIRE lists fuzz.
. "${SR_SRCDIR:-.}/tests/tap.sh"
B=$(cd "${SR_BUILDDIR:-.}" && pwd)
HARNESSES="fuzz_config fuzz_manifest fuzz_shardfile fuzz_token_shard fuzz_transport fuzz_env fuzz_safetensors fuzz_tokenizer fuzz_task"

if group "corpus replay"; then
    for h in $HARNESSES; do
        r=replay_${h#fuzz_}
        n=$(ls "$SR_SRCDIR/tests/fuzz/corpus/$h" | wc -l)
        "$B/tests/fuzz/$r" "$SR_SRCDIR/tests/fuzz/corpus/$h" >"$T/$r.tap" 2>"$T/$r.err"
        rc=$?
        got=$(grep -c '^ok' "$T/$r.tap")
        check "$h: the $n committed inputs replay through the normal build (status $rc, $got replayed)" \
            sh -c "[ $rc -eq 0 ] && [ $got -eq $n ] && [ $n -gt 0 ]" || diag "$(tail -20 "$T/$r.err")"
    done
fi

if group --long "libFuzzer"; then
    if ! command -v clang >/dev/null 2>&1 ||
        ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' |
        clang -x c -fsanitize=fuzzer - -o "$T/probe" >/dev/null 2>&1; then
        why="clang with libFuzzer not installed (apt-get install clang libclang-rt-14-dev)"
        skip_or_fail fuzz "libFuzzer: $why"
    else
        cd "$B" || exit 99
        FUZZ_SECONDS=${SHARDRUN_FUZZ_SECONDS:-10} sh "$SR_SRCDIR/tests/fuzz/run.sh" >"$T/fuzz.out" 2>&1
        rc=$?
        for h in $HARNESSES; do
            line=$(grep "^$h:" "$T/fuzz.out")
            check "$h: ${line#*: }" sh -c "echo '$line' | grep -q 'DONE.*(status 0[;)]'"
        done
        check "the fuzz run ends cleanly (status $rc)" test "$rc" -eq 0
        [ "$rc" -ne 0 ] && diag "$(tail -30 "$T/fuzz.out")"
    fi
fi
done_testing
