/* The paged KV pool behind the public fx_kv_pool / fx_kv_seq functions (ferrox.h): fixed-size
 * blocks with reference counts and a free list, a block table per sequence, copy before writing
 * into a shared block, and the prefix cache of full blocks (kv/prefix.c).
 *
 * A block holds block_size positions of every layer and KV head, so that one id in a sequence's
 * table serves every layer and a copy-on-write is one memcpy per K and V.
 *
 * A hybrid model's sequence (qwen35) also owns a recurrent state (kv/recurrent.h), which a fork
 * copies and which cannot be truncated: such a sequence is kept whole or cleared, or cut back to
 * a row of its last step whose state that step kept (fx_batch.snapshot: speculation's rejected
 * drafts), and it takes no blocks from the prefix cache (the state at a block's end is not kept).
 *
 * Not thread-safe: a pool belongs to one thread at a time (the one that steps it). */
#ifndef FX_KV_PAGED_H
#define FX_KV_PAGED_H

#include <stdbool.h>
#include <stdint.h>

#include "ferrox.h"
#include "kv/kv.h"

struct fx_kv_seq {
    bool live;
    int32_t len;         /* positions written (and tokens known) */
    int32_t n_table;     /* blocks in the table: those covering 0..len-1, then any reserved */
    int32_t cap_table;   /* table and tokens are allocated for cap_table blocks */
    int32_t *table;      /* [cap_table] block ids */
    fx_token *tokens;    /* [cap_table * block_size] the token id of each position */
    struct fx_rstate rs; /* hybrid models: the state after position len - 1 (kv/recurrent.h),
                          * allocated while the sequence lives; n_layer 0 otherwise */
    /* Rollback (hybrid models): snap[j] is rs after position snap_pos0 + j for each bit j of
     * snap_mask, kept by the sequence's last step for the rows it marked (fx_batch.snapshot)
     * and valid until its next step or a truncation that cuts. The first snap_alloc are
     * allocated, as first needed, and released with the sequence: at most FX_ROLLBACK_MAX
     * states beside rs. */
    struct fx_rstate snap[FX_ROLLBACK_MAX];
    int32_t snap_alloc, snap_pos0;
    uint32_t snap_mask;
};

_Static_assert(FX_ROLLBACK_MAX <= 32, "a sequence's snapshots are the bits of snap_mask");

/* The kept state after position pos of s, or NULL. */
static inline struct fx_rstate *fx_kv_seq_snap(struct fx_kv_seq *s, int32_t pos) {
    int64_t j = (int64_t)pos - s->snap_pos0;
    return j >= 0 && j < FX_ROLLBACK_MAX && (s->snap_mask >> j & 1u) ? &s->snap[j] : NULL;
}

struct fx_kv_pool {
    const struct fx_model *model; /* sizes each sequence's recurrent state */
    bool recurrent;               /* the model's sequences carry a recurrent state */
    int32_t n_layer, n_head_kv;   /* n_layer: the layers that keep K and V (n_layer_kv) */
    int64_t head_dim, head_dim_v;
    int32_t n_blocks, block_size, n_seq_max;
    enum fx_type type_k, type_v;
    uint64_t k_row, v_row;     /* bytes of one head's key (value) row */
    uint64_t k_block, v_block; /* bytes of one block's key tiles (value rows): every layer and
                                * head */
    uint8_t *k; /* [n_blocks][n_layer][n_head_kv][(block_size + 15) / 16][16 * k_row]: key tiles */
    uint8_t *v; /* [n_blocks][n_layer][n_head_kv][block_size][v_row] */
    int32_t *refs;      /* [n_blocks] sequences whose table holds the block */
    int32_t *free_list; /* [n_blocks] a stack of free block ids */
    int32_t n_free;
    struct fx_kv_seq *seqs; /* [n_seq_max] */
    int32_t n_seq;
    /* The prefix cache (kv/prefix.c): per block, whether it is cached, its key, its parent
     * block in the chain (-1 for a first block), its tokens' place in the hash table and its
     * place in the least-recently-used list of idle cached blocks. */
    bool *cached;                 /* [n_blocks] */
    uint64_t *key;                /* [n_blocks] hash of (parent's key, the block's tokens) */
    int32_t *parent;              /* [n_blocks] */
    fx_token *block_tok;          /* [n_blocks][block_size] tokens of a cached block */
    int32_t *hnext;               /* [n_blocks] next block in the same hash bucket, -1 ends */
    int32_t *bucket;              /* [n_buckets] first block of each bucket, -1 for none */
    uint32_t n_buckets;           /* a power of two */
    int32_t *lru_prev, *lru_next; /* [n_blocks] idle cached blocks, oldest first */
    int32_t lru_head, lru_tail, n_cached_idle;
    /* gen[b] grows each time b leaves the cache; a cached block records its parent's gen when it
     * joins (parent_gen), so a child of a parent that was since evicted (and perhaps reused for
     * other tokens under the same id) is never found. */
    uint64_t *gen;        /* [n_blocks] */
    uint64_t *parent_gen; /* [n_blocks] */
    uint64_t prefix_queries, prefix_hits, evictions;
    /* Scratch of a multi-sequence step's checks (decoder/prepare.c), each [n_seq_max]: rows per
     * sequence id so far (zero between steps), then the step's distinct sequences and their row
     * counts. */
    int32_t *step_rows;
    fx_seq_id *step_seq;
    int32_t *step_n;
    uint32_t *step_snap; /* [n_seq_max] the step's snapshots per sequence id (snap_mask to be),
                          * zero between steps */
    /* Scratch of fx_kv_pool_reserve_step, [n_blocks], zero between calls: how many of the
     * step's sequences must write into each shared block (to count its copies exactly). */
    int32_t *step_cow;
};

/* The key (value row) of KV head g at position pos of live sequence seq, in layer il: position
 * pos % block_size of its block, whose keys fill (block_size + 15) / 16 tiles. pos must lie in a
 * block of the sequence's table. */
static inline struct fx_kv_key_at fx_kv_pool_key(const struct fx_kv_pool *p, fx_seq_id seq, int il,
                                                 int g, int32_t pos) {
    int32_t b = p->seqs[seq].table[pos / p->block_size], in = pos % p->block_size;
    uint64_t tiles = ((uint64_t)p->block_size + 15) / 16;
    return (struct fx_kv_key_at){
        p->k + (uint64_t)b * p->k_block +
            (((uint64_t)il * (uint64_t)p->n_head_kv + (uint64_t)g) * tiles + (uint64_t)(in / 16)) *
                fx_kv_tile_bytes(p->k_row),
        in % 16};
}

static inline uint8_t *fx_kv_pool_v(const struct fx_kv_pool *p, fx_seq_id seq, int il, int g,
                                    int32_t pos) {
    int32_t b = p->seqs[seq].table[pos / p->block_size];
    return p->v + (uint64_t)b * p->v_block +
           (((uint64_t)il * (uint64_t)p->n_head_kv + (uint64_t)g) * (uint64_t)p->block_size +
            (uint64_t)(pos % p->block_size)) *
               p->v_row;
}

/* True when id names a live sequence. */
bool fx_kv_pool_seq_live(const struct fx_kv_pool *p, fx_seq_id id);

/* Reserves, all or nothing, n_rows[j] more rows for each of the n distinct live sequences
 * seq[j]: afterwards every block that covers one of those rows is in the sequence's table and
 * writable (held by that sequence alone and not in the prefix cache; a shared block has been
 * copied, a cached one taken out of the cache). Fails with FX_ERR_CAPACITY, changing nothing,
 * when the blocks are not to be had; *why (may be NULL) says whether they might be later. */
fx_status fx_kv_pool_reserve_step(struct fx_kv_pool *p, int n, const fx_seq_id *seq,
                                  const int32_t *n_rows, enum fx_kv_admit *why,
                                  struct fx_error *err);

/* Allocates seq's first n snapshots (n <= FX_ROLLBACK_MAX) where they are not yet; changes
 * nothing the sequence computes. */
fx_status fx_kv_seq_alloc_snaps(struct fx_kv_pool *p, fx_seq_id seq, int32_t n,
                                struct fx_error *err);

/* After a step has written position len of seq (in a block reserved above): records its token
 * and grows len by one; a block this fills joins the prefix cache. */
void fx_kv_pool_commit_row(struct fx_kv_pool *p, fx_seq_id seq, fx_token token);

/* ---- the prefix cache (kv/prefix.c), used by kv/paged.c ---- */

/* Makes full block b of seq (its index idx in the table) a cached block, keyed by its parent's
 * key and its tokens, unless an equal block is cached already. */
void fx_kv_prefix_insert(struct fx_kv_pool *p, fx_seq_id seq, int32_t idx);
/* The cached block that follows parent (-1: the first block) with these block_size tokens, or
 * -1. */
int32_t fx_kv_prefix_find(struct fx_kv_pool *p, int32_t parent, const fx_token *tokens);
/* Takes b out of the cache (its contents are about to change, or it is evicted). Only the hash
 * table: an idle block leaves the LRU list first (fx_kv_prefix_busy). Its cached children, if
 * any, can no longer be found (gen). */
void fx_kv_prefix_remove(struct fx_kv_pool *p, int32_t b);
/* Idle cached blocks: a cached block whose last holder let it go joins the LRU list; one that a
 * sequence takes again leaves it. */
void fx_kv_prefix_idle(struct fx_kv_pool *p, int32_t b);
void fx_kv_prefix_busy(struct fx_kv_pool *p, int32_t b);

#endif
