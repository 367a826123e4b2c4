/* isa.h — which vector instruction set the hot CPU loops use, chosen at run
 * time.
 *
 * The default build targets x86-64-v2 (SSE4.2), so a binary built on a login
 * node runs on every compute node.  The loops that matter (element-wise ops,
 * softmax and LayerNorm rows, bf16 casts, AdamW) are compiled three times —
 * for x86-64-v2, x86-64-v3 (AVX2, FMA) and x86-64-v4 (AVX-512) — and called
 * through a table indexed by the level in effect.  Every rank of a job uses
 * the same level: the lowest any rank supports, agreed at start (train.c),
 * shown on the start line and recorded in checkpoint manifests.  Results do
 * not depend on the level anyway (the build never contracts a*b+c into an
 * FMA: -std=c11 implies -ffp-contract=off, and no loop reassociates a sum),
 * but one level per job keeps that a property of the job, not of a node.
 *
 * SR_ISA_KERNEL(name, params, args) defines `static void name params` that
 * calls the clone of `name##_body` for the level in effect; SR_ISA_KERNEL_RET
 * the same for a function returning `ret`.  `name##_body` must be declared
 * `static inline SR_ISA_INLINE` and must not contain an OpenMP region: GCC
 * outlines a region into a function of its own before inlining, and that
 * function would keep the default target.  Parallelise around the kernel
 * (each thread calls it on its chunk), never inside it.  Clones carry the
 * suffixes _v2, _v3, _v4; tests/isa.sh checks that no other function of the
 * default binary uses a ymm or zmm register.  A build with --enable-native
 * (SR_ISA_NATIVE) compiles each loop once, for the build machine. */
#ifndef SR_ISA_H
#define SR_ISA_H

#include <stdbool.h>
#include <string.h>

typedef enum { SR_ISA_V2, SR_ISA_V3, SR_ISA_V4, SR_ISA_COUNT } sr_isa;

/* The widest level this CPU supports (SR_ISA_V2 off x86-64), lowered to
 * SHARDRUN_TEST_ISA when that test hook names a lower one. */
sr_isa sr_isa_detect(void);
/* A level by name: as sr_isa_name prints it (x86-64-v2 .. v4), "v2" ..
 * "v4", or "generic" (v2).  False for anything else. */
#define SR_ISA_NAMES "x86-64-v2, x86-64-v3, x86-64-v4 (or v2, v3, v4, generic)"
static inline bool sr_isa_parse(const char *name, sr_isa *out) {
    /* inline: the test hooks (layer 0, beside this module) validate
     * SHARDRUN_TEST_ISA with it, and this module reads the hook */
    static const char *const names[SR_ISA_COUNT] = {"x86-64-v2", "x86-64-v3", "x86-64-v4"};
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
/* Sets the level every dispatched loop uses from now on (before any thread
 * runs one). */
void sr_isa_set(sr_isa level);
/* The level in effect (sr_isa_detect()'s until sr_isa_set is called). */
sr_isa sr_isa_current(void);
/* "x86-64-v2", "x86-64-v3", "x86-64-v4" ("generic" off x86-64 for v2). */
const char *sr_isa_name(sr_isa level);

#define SR_ISA_INLINE __attribute__((always_inline))

#if defined(__x86_64__) && !defined(SR_ISA_NATIVE)
#define SR_ISA_TARGET_V3 __attribute__((target("arch=x86-64-v3")))
#define SR_ISA_TARGET_V4 __attribute__((target("arch=x86-64-v4")))
#define SR_ISA_CLONES(ret, name, params, args, RET)                                                                    \
    static ret name##_v2 params { RET name##_body args; }                                                              \
    SR_ISA_TARGET_V3 static ret name##_v3 params { RET name##_body args; }                                             \
    SR_ISA_TARGET_V4 static ret name##_v4 params { RET name##_body args; }                                             \
    static ret name params {                                                                                           \
        static ret(*const clones[SR_ISA_COUNT]) params = {name##_v2, name##_v3, name##_v4};                            \
        RET clones[sr_isa_current()] args;                                                                             \
    }
#else
#define SR_ISA_CLONES(ret, name, params, args, RET)                                                                    \
    static ret name params { RET name##_body args; }
#endif
#define SR_ISA_KERNEL_RET(ret, name, params, args) SR_ISA_CLONES(ret, name, params, args, return )
#define SR_ISA_KERNEL(name, params, args) SR_ISA_CLONES(void, name, params, args, )

#endif
