/* isa.c — CPU level detection and the level in effect; see isa.h. */
#include "srconfig.h"

#include "isa.h"

#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "testhook.h"

static int level = -1;

static const char *const names[SR_ISA_COUNT] = {"x86-64-v2", "x86-64-v3", "x86-64-v4"};

#if defined(__x86_64__) && !defined(SR_ISA_NATIVE)
/* The level from CPUID and XGETBV.  Read by hand (cpuid.h) rather than with
 * __builtin_cpu_supports because clang 14's builtin does not know bmi2,
 * f16c, movbe or lzcnt, and the sanitizer and fuzzing trees build with
 * clang.  A level counts only when the OS saves the register state it
 * needs (XCR0: SSE+AVX for v3, also opmask and ZMM for v4). */
static sr_isa detect_cpuid(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return SR_ISA_V2;
    bool fma = c >> 12 & 1, movbe = c >> 22 & 1, osxsave = c >> 27 & 1, avx = c >> 28 & 1, f16c = c >> 29 & 1;
    if (!osxsave || !avx)
        return SR_ISA_V2;
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    (void)xhi;
    if ((xlo & 0x6) != 0x6)
        return SR_ISA_V2;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return SR_ISA_V2;
    bool bmi1 = b >> 3 & 1, avx2 = b >> 5 & 1, bmi2 = b >> 8 & 1;
    bool avx512 = (b >> 16 & 1) && (b >> 17 & 1) && (b >> 28 & 1) && (b >> 30 & 1) && (b >> 31 & 1); /* F DQ CD BW VL */
    unsigned ea, eb, ec, ed;
    bool lzcnt = __get_cpuid(0x80000001u, &ea, &eb, &ec, &ed) && (ec >> 5 & 1);
    if (!(avx2 && fma && bmi1 && bmi2 && f16c && movbe && lzcnt))
        return SR_ISA_V2;
    return avx512 && (xlo & 0xe0) == 0xe0 ? SR_ISA_V4 : SR_ISA_V3;
}
#endif

sr_isa sr_isa_detect(void) {
    sr_isa got = SR_ISA_V2;
#if defined(__x86_64__) && !defined(SR_ISA_NATIVE)
    /* x86-64-v3: AVX2, FMA, BMI1/2, F16C, MOVBE, LZCNT; v4 adds AVX-512
     * F/BW/CD/DQ/VL.  The clones use what arch=x86-64-vN enables. */
    got = detect_cpuid();
#endif
    sr_isa cap;
    if (sr_testhook()->isa[0] && sr_isa_parse(sr_testhook()->isa, &cap) && cap < got)
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
