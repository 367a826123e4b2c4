#!/bin/sh
# driver.sh — the test driver make check uses: automake's tap-driver.sh
# (the first argument), timed.  Exports SR_TEST_NAME (the test's name, so a
# failing check can print the tests/run command that reruns it) and writes
# "START END" (seconds since the epoch) to the log's .time file, which
# tests/timing.sh turns into the tier's ten slowest tests and its total.
tap=$1
shift
log=""
prev=""
for a in "$@"; do
    case $prev in
    --log-file) log=$a ;;
    --test-name) SR_TEST_NAME=$a && export SR_TEST_NAME ;;
    esac
    prev=$a
done
start=$(date +%s.%N)
"$SHELL" "$tap" "$@"
rc=$?
[ -n "$log" ] && echo "$start $(date +%s.%N)" >"${log%.log}.time"
exit $rc
