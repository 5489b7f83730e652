/* The expert cache (ARCHITECTURE.md section 9): for a mixture-of-experts model loaded with
 * fx_model_params.moe_cache_bytes, the experts' matrices are not packed at load but read from the
 * file on demand into fixed-size slots of one allocation, each slot holding one expert of one
 * layer (its gate, up and down matrices, in the layout the kernel table reads: packed on the
 * read path, or the file's bytes where the table has no packed layout).
 *
 * Reads are large and go around the page cache: O_DIRECT where the file system allows it, else
 * pread followed by posix_fadvise(DONTNEED). The first read of an expert records a checksum of its
 * bytes and every later read must match it; the file's size and modification time are checked
 * before each read. A failure marks the slot failed and is reported to whoever waits for it.
 *
 * Slots go to experts by the policy fx_model_params.moe_evict names. The default, least frequently
 * used with the counts halved every LFU_HALF_LIFE steps, missed least on the synthesized model
 * at every cache size (docs/MOE_STREAMING.md); the halving keeps the counts recent, so experts a
 * shift of topic makes hot are not evicted first for long. Plain LRU fails when the cache holds
 * fewer experts than a token uses: a token visits the layers in order, so LRU always evicts the
 * layer needed next. Per-layer quotas (each layer keeps n_slots / n_layer experts, LRU inside)
 * avoid that but cannot lend a layer's share. Both stay selectable for measuring on other models.
 *
 * Users of one cache (the MoE blocks of every context on the model and the cache's I/O threads)
 * are serialised by its mutex; slots a user has pinned are never evicted or rewritten.
 *
 * Lookahead: fx_xcache_prefetch replaces the queue of experts the I/O threads read ahead
 * (the decoder's predictions for a later layer). Read-ahead never evicts an expert of a layer
 * between the current one and the predicted one: those were predicted earlier and are needed
 * sooner. Demand reads never queue behind it: the
 * context's own workers read what a step needs and is not in the cache, and read-ahead never
 * holds more than n_slots - n_expert_used slots, so a step can always claim slots without
 * waiting for a guess. */
#ifndef FX_MODEL_EXPERT_CACHE_H
#define FX_MODEL_EXPERT_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "ferrox.h"
#include "kernels/kernels.h"

struct fx_model;
struct fx_xcache;

/* Alignment and granule of every read (and of the staging buffers they land in). */
#define FX_XCACHE_ALIGN 4096

/* Opens `path` (the file m was loaded from) for direct reads and plans slots of `bytes` in all.
 * Fails with FX_ERR_INVALID_ARG naming the minimum when bytes cannot hold one expert. */
fx_status fx_xcache_create(const struct fx_model *m, const char *path, uint64_t bytes,
                           enum fx_moe_evict evict, struct fx_xcache **out, struct fx_error *err);
/* Stops the I/O threads and frees everything. NULL is a no-op. */
void fx_xcache_free(struct fx_xcache *c);

/* Bytes of staging buffer one reader needs (FX_XCACHE_ALIGN-aligned, a multiple of it). */
uint64_t fx_xcache_stage_bytes(const struct fx_xcache *c);

/* Pins experts[begin..) of layer il (distinct, in increasing order) in slots, stopping when the
 * cache has no slot left that is not pinned by someone (after at least one: with nothing pinned
 * by this caller it waits for a slot to be released). Returns the end of the pinned range;
 * slots[i] is the slot of experts[i]. reads[0..*n_reads) are the indices i whose slots the caller
 * must fill with fx_xcache_fill (claimed for it, not yet read); the others are in the cache or
 * being read by an I/O thread (fx_xcache_wait). */
int32_t fx_xcache_acquire(struct fx_xcache *c, int32_t il, const int32_t *experts, int32_t n,
                          int32_t begin, int32_t *slots, int32_t *reads, int32_t *n_reads);
/* Reads and packs the expert claimed in `slot`, using stage (fx_xcache_stage_bytes bytes). Any
 * thread; any number at once on different slots. Failures are reported by fx_xcache_wait. */
void fx_xcache_fill(struct fx_xcache *c, int32_t slot, uint8_t *stage);
/* Waits until slots[0..n) are filled; *waited tells whether one was still being read. FX_ERR_IO
 * (file changed, truncated or unreadable; err says which expert and why) when one of them
 * failed. */
fx_status fx_xcache_wait(struct fx_xcache *c, const int32_t *slots, int32_t n, bool *waited,
                         struct fx_error *err);
/* Unpins slots[0..n). */
void fx_xcache_release(struct fx_xcache *c, const int32_t *slots, int32_t n);
/* Matrix `which` (0 gate, 1 up, 2 down) of the expert in a filled, pinned slot of layer il. */
struct fx_mat fx_xcache_mat(const struct fx_xcache *c, int32_t slot, int32_t il, int which);

/* Replaces the read-ahead queue with the experts e of layer il with want[e] != 0 (want:
 * [n_expert]) that are not already cached. */
void fx_xcache_prefetch(struct fx_xcache *c, int32_t il, const uint8_t *want);
/* Adds to the counters: a step's MoE layer that demanded n_used experts, of which
 * n_predicted were in the previous layer's prediction for it (n_checked is n_used when there was
 * a prediction, else 0), and the nanoseconds its compute waited for reads. */
void fx_xcache_note(struct fx_xcache *c, int32_t n_checked, int32_t n_predicted, uint64_t wait_ns);
/* A copy of the counters. */
void fx_xcache_stats(struct fx_xcache *c, struct fx_moe_stats *out);

#endif
