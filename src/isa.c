/* isa.c — CPU level detection and the level in effect; see isa.h. */
#include "srconfig.h"

#include "isa.h"

#include <string.h>

#include "testhook.h"

static int level = -1;

static const char *const names[SR_ISA_COUNT] = {"x86-64-v2", "x86-64-v3", "x86-64-v4"};

/* Parses a name as printed by sr_isa_name (also "v2", "v3", "v4"). */
static bool parse_level(const char *name, sr_isa *out) {
    for (int i = 0; i < SR_ISA_COUNT; i++)
        if (strcmp(name, names[i]) == 0 || strcmp(name, names[i] + 7) == 0) {
            *out = (sr_isa)i;
            return true;
        }
    if (strcmp(name, "generic") == 0) {
        *out = SR_ISA_V2;
        return true;
    }
    return false;
}

sr_isa sr_isa_detect(void) {
    sr_isa got = SR_ISA_V2;
#if defined(__x86_64__) && !defined(SR_ISA_NATIVE)
    __builtin_cpu_init();
    /* x86-64-v3: AVX2, FMA, BMI1/2, F16C, MOVBE, LZCNT; v4 adds AVX-512
     * F/BW/CD/DQ/VL.  The clones use what GCC's arch=x86-64-vN enables. */
    bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
              __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("movbe") &&
              __builtin_cpu_supports("lzcnt");
    bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
              __builtin_cpu_supports("avx512vl");
    got = v4 ? SR_ISA_V4 : v3 ? SR_ISA_V3 : SR_ISA_V2;
#endif
    sr_isa cap;
    if (sr_testhook()->isa[0] && parse_level(sr_testhook()->isa, &cap) && cap < got)
        got = cap;
    return got;
}

void sr_isa_set(sr_isa l) { __atomic_store_n(&level, (int)l, __ATOMIC_RELAXED); }

sr_isa sr_isa_current(void) {
    int l = __atomic_load_n(&level, __ATOMIC_RELAXED);
    if (l < 0) {
        l = (int)sr_isa_detect();
        __atomic_store_n(&level, l, __ATOMIC_RELAXED);
    }
    return (sr_isa)l;
}

const char *sr_isa_name(sr_isa l) {
#if defined(SR_ISA_NATIVE)
    (void)l;
    return "native";
#endif
#if !defined(__x86_64__)
    if (l == SR_ISA_V2)
        return "generic";
#endif
    return (unsigned)l < SR_ISA_COUNT ? names[l] : "?";
}
