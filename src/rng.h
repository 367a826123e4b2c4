/* rng.h — counter-based random numbers.
 *
 * Every random number shardrun draws is a pure function of (seed, stream,
 * index), so any rank can produce any slice of a tensor's initialisation or
 * of the data order without generating what comes before it; that is what
 * makes results independent of the world size.  The mixer is SplitMix64's
 * finaliser, applied twice (no library here offers a counter-based RNG). */
#ifndef SR_RNG_H
#define SR_RNG_H

#include <math.h>
#include <stdint.h>

static inline uint64_t sr_rng_mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* 64 random bits for (seed, stream, index). */
static inline uint64_t sr_rng_u64(uint64_t seed, uint64_t stream, uint64_t index) {
    return sr_rng_mix(sr_rng_mix(seed ^ sr_rng_mix(stream + 0x632be59bd9b4e019ULL)) + index);
}

/* Uniform double in (0, 1). */
static inline double sr_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return ((double)(sr_rng_u64(seed, stream, index) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Standard normal (Box-Muller on two counter draws). */
static inline double sr_rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    double u1 = sr_rng_uniform(seed, stream, 2 * index);
    double u2 = sr_rng_uniform(seed, stream, 2 * index + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
