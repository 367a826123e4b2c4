/* dtype.h — the one element-type enum and the fp32 <-> bf16 conversions.
 *
 * dtype owns the vocabulary every layer shares: what the job file calls
 * fp32 and bf16 (sharding.mixed_precision), what the transports move, what a
 * checkpoint records per saved state.  The first two values are also the
 * indices of the job file's names (fp32, bf16).  bf16 is the upper half of
 * an IEEE fp32; conversion rounds to nearest even and keeps NaN a NaN. */
#ifndef SR_DTYPE_H
#define SR_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    SR_DT_F32,  /* IEEE binary32 */
    SR_DT_BF16, /* bfloat16 (the upper 16 bits of a binary32) */
    SR_DT_F64,  /* IEEE binary64 (host scalars: losses, norms) */
    SR_DT_BYTE, /* opaque bytes (control messages; never reduced) */
    SR_DT_I64,  /* int64 (control plane: steps, counts) */
    SR_DT_COUNT
} sr_dtype;

static inline size_t sr_dtype_size(sr_dtype dt) {
    switch (dt) {
    case SR_DT_BF16:
        return 2;
    case SR_DT_F64:
    case SR_DT_I64:
        return 8;
    case SR_DT_BYTE:
        return 1;
    default:
        return 4;
    }
}

/* The name a checkpoint manifest records: "f32", "bf16", "f64", "byte", "i64". */
static inline const char *sr_dtype_name(sr_dtype dt) {
    static const char *const names[] = {"f32", "bf16", "f64", "byte", "i64"};
    return (unsigned)dt < SR_DT_COUNT ? names[dt] : "?";
}

static inline uint16_t sr_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);         /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static inline float sr_bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
