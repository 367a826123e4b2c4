#!/bin/sh
# timing.sh TIER BUDGET OTHER LOG... — the end of a tier's run (make check,
# make check-long): its ten slowest tests with their seconds, its wall time
# (first test's start to last test's end, from the .time files
# tests/driver.sh wrote beside the logs) against BUDGET seconds, and the
# command that runs the other tier (OTHER).
tier=$1 budget=$2 other=$3
shift 3
for log in "$@"; do
    t=${log%.log}.time
    [ -r "$t" ] && echo "${log%.log} $(cat "$t")"
done | awk -v tier="$tier" -v budget="$budget" -v other="$other" '
    { name[NR] = $1; s[NR] = $2; e[NR] = $3; secs[NR] = $3 - $2
      if (NR == 1 || $2 < first) first = $2
      if (NR == 1 || $3 > last) last = $3
      sum += $3 - $2 }
    END {
      if (NR == 0) exit
      printf "%s tier: the ten slowest tests\n", tier
      for (k = 1; k <= 10 && k <= NR; k++) {
          best = 0
          for (i = 1; i <= NR; i++) if (!(i in shown) && (best == 0 || secs[i] > secs[best])) best = i
          shown[best] = 1
          printf "  %7.1f s  %s\n", secs[best], name[best]
      }
      wall = last - first
      over = (wall > budget) ? " -- OVER BUDGET" : ""
      printf "%s tier: %d tests, %.0f s wall (%.0f s of test time), budget %d s%s\n", tier, NR, wall, sum, budget, over
      printf "the other tier: %s\n", other
    }'
