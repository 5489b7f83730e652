/* The sampler's random numbers: xoshiro256** (Blackman and Vigna), its state filled from the
 * seed by splitmix64 as its authors recommend. Pure integer arithmetic, so a seed gives the same
 * sequence on every machine. */
#include "sample/sample.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

void fx_rng_seed(struct fx_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

uint64_t fx_rng_next(struct fx_rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double fx_rng_uniform(struct fx_rng *r) {
    return (double)(fx_rng_next(r) >> 11) * 0x1.0p-53;
}
