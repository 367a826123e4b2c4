#!/bin/sh
# fuzz.sh — every libFuzzer harness (tests/fuzz/fuzz_*.c) builds in its own
# clang tree and runs for SHARDRUN_FUZZ_SECONDS (default 10; CI 60) with no
# crash, leak or timeout.  Needs clang with libFuzzer (apt-get install
# clang libclang-rt-14-dev); without it the test skips unless
# SHARDRUN_TEST_REQUIRE lists fuzz.
. "${SR_SRCDIR:-.}/tests/tap.sh"
B=$(cd "${SR_BUILDDIR:-.}" && pwd)
if ! command -v clang >/dev/null 2>&1 ||
    ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' |
    clang -x c -fsanitize=fuzzer - -o "$T/probe" >/dev/null 2>&1; then
    require_or_skip fuzz "clang with libFuzzer not installed (apt-get install clang libclang-rt-14-dev)"
fi
cd "$B" || exit 99
FUZZ_SECONDS=${SHARDRUN_FUZZ_SECONDS:-10} sh "$SR_SRCDIR/tests/fuzz/run.sh" >"$T/fuzz.out" 2>&1
rc=$?
for h in fuzz_config fuzz_manifest fuzz_shardfile fuzz_token_shard fuzz_transport fuzz_env fuzz_safetensors; do
    line=$(grep "^$h:" "$T/fuzz.out")
    check "$h: ${line#*: }" sh -c "echo '$line' | grep -q 'DONE.*(status 0[;)]'"
done
check "the fuzz run ends cleanly (status $rc)" test "$rc" -eq 0
[ "$rc" -ne 0 ] && diag "$(tail -30 "$T/fuzz.out")"
done_testing
