/* Memory that a forward pass streams from DRAM: weights, KV caches, recurrent states. */
#ifndef FX_CORE_ALLOC_H
#define FX_CORE_ALLOC_H

#include <stdint.h>

/* `bytes` bytes on a 64-byte boundary, or NULL; released with free(). A buffer of a huge page
 * (2 MiB) or more starts on a huge page and asks the kernel for transparent huge pages (Linux
 * in its default "madvise" mode gives them only to regions that ask): a decode step reads every
 * byte of its weights once, and with 4 KiB pages each 4 KiB of the stream costs a TLB miss and
 * its page walk (two-level in a virtual machine). */
void *fx_alloc_streamed(uint64_t bytes);

/* fx_alloc_streamed, every byte zero and every page touched now (explicit_bzero, which a
 * compiler cannot turn into a calloc of untouched pages): caches and states that a forward pass
 * reads before it writes them all, and that must not pay page faults mid-pass. */
void *fx_alloc_streamed_zero(uint64_t bytes);

#endif
