/* Overflow-checked size arithmetic. Every size computed from outside input (a file, a request, a
 * flag) goes through these before it is used to allocate or index. Each returns true on
 * overflow, leaving *out unspecified, like the compiler builtins they wrap. */
#ifndef FX_CORE_CHECKED_H
#define FX_CORE_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline bool fx_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out);
}

static inline bool fx_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}

static inline bool fx_mul_overflow_i64(int64_t a, int64_t b, int64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}

static inline bool fx_add_overflow_size(size_t a, size_t b, size_t *out) {
    return __builtin_add_overflow(a, b, out);
}

static inline bool fx_mul_overflow_size(size_t a, size_t b, size_t *out) {
    return __builtin_mul_overflow(a, b, out);
}

/* Rounds v up to a multiple of align (a power of two); true on overflow. */
static inline bool fx_align_up_u64(uint64_t v, uint64_t align, uint64_t *out) {
    uint64_t t;
    if (__builtin_add_overflow(v, align - 1, &t))
        return true;
    *out = t & ~(align - 1);
    return false;
}

static inline bool fx_is_pow2_u64(uint64_t v) {
    return v != 0 && (v & (v - 1)) == 0;
}

#endif
