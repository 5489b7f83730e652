#include "core/alloc.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE_BYTES ((uint64_t)2 << 20)

void *fx_alloc_streamed(uint64_t bytes) {
    void *p = NULL;
    if (bytes < HUGE_PAGE_BYTES)
        return aligned_alloc(64, (size_t)((bytes + 63) & ~(uint64_t)63));
    if (posix_memalign(&p, (size_t)HUGE_PAGE_BYTES, (size_t)bytes) != 0)
        return NULL;
    /* Only a hint: the whole huge pages inside the buffer get one when the kernel has it. */
    (void)madvise(p, (size_t)bytes, MADV_HUGEPAGE);
    return p;
}

void *fx_alloc_streamed_zero(uint64_t bytes) {
    void *p = fx_alloc_streamed(bytes);
    if (p)
        explicit_bzero(p, (size_t)bytes);
    return p;
}
