/* The paged KV pool (kv/paged.h): blocks with reference counts and a free list, a block table
 * per sequence, reservation (all or nothing, copying shared blocks before they are written), and
 * the public fx_kv_pool / fx_kv_seq functions. The prefix cache's hash table and LRU list are in
 * kv/prefix.c.
 *
 * Every block is in exactly one state:
 *   free         on free_list, refs 0, not cached;
 *   held         refs >= 1 (in that many live tables), cached or not;
 *   idle-cached  refs 0, cached, on the LRU list (evictable).
 * A new block comes off the free list, else is the least recently used idle-cached block. */
#include "kv/paged.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/checked.h"
#include "core/error.h"
#include "model/model.h"

#define DEFAULT_N_BLOCKS   256 /* 4096 positions of 16: the largest default context */
#define DEFAULT_BLOCK_SIZE 16
#define DEFAULT_N_SEQ_MAX  256
#define MAX_BLOCK_SIZE     4096
#define MAX_N_SEQ          65536

struct fx_kv_pool_params fx_kv_pool_default_params(void) {
    return (struct fx_kv_pool_params){.n_blocks = DEFAULT_N_BLOCKS,
                                      .block_size = DEFAULT_BLOCK_SIZE,
                                      .n_seq_max = DEFAULT_N_SEQ_MAX,
                                      .type_k = FX_KV_DEFAULT_TYPE,
                                      .type_v = FX_KV_DEFAULT_TYPE};
}

/* ---- creation ---------------------------------------------------------------------------- */

/* calloc of count elements of size bytes, overflow-checked. */
static void *alloc_array(uint64_t count, size_t size) {
    uint64_t bytes;
    if (fx_mul_overflow_u64(count, size, &bytes) || bytes > SIZE_MAX)
        return NULL;
    return calloc((size_t)(count ? count : 1), size);
}

/* Releases s's recurrent state and its snapshots. */
static void release_state(struct fx_kv_seq *s) {
    fx_rstate_release(&s->rs);
    for (int32_t j = 0; j < s->snap_alloc; j++)
        fx_rstate_release(&s->snap[j]);
    s->snap_alloc = 0;
    s->snap_mask = 0;
}

fx_status fx_kv_pool_create(const struct fx_model *m, const struct fx_kv_pool_params *params,
                            struct fx_kv_pool **out, struct fx_error *err) {
    if (!out)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "KV pool: out is NULL");
    *out = NULL;
    if (!m)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "KV pool: the model is NULL");
    struct fx_kv_pool_params pp = params ? *params : fx_kv_pool_default_params();
    if (pp.block_size == 0)
        pp.block_size = DEFAULT_BLOCK_SIZE;
    if (pp.n_seq_max == 0)
        pp.n_seq_max = DEFAULT_N_SEQ_MAX;
    if (pp.n_blocks < 1)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "KV pool n_blocks %d is not at least 1", pp.n_blocks);
    if (pp.block_size < 1 || pp.block_size > MAX_BLOCK_SIZE)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "KV pool block_size %d is not in 1..%d", pp.block_size, MAX_BLOCK_SIZE);
    if (pp.n_seq_max < 1 || pp.n_seq_max > MAX_N_SEQ)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "KV pool n_seq_max %d is not in 1..%d", pp.n_seq_max, MAX_N_SEQ);
    const struct fx_hparams *hp = &m->hp;
    uint64_t k_row, v_row;
    fx_status st = fx_kv_row_bytes(pp.type_k, hp->head_dim, "KV pool type_k: K", &k_row, err);
    if (!st)
        st = fx_kv_row_bytes(pp.type_v, hp->head_dim_v, "KV pool type_v: V", &v_row, err);
    if (st)
        return st;

    /* Every size is checked before anything is allocated. */
    uint64_t rows, k_block, v_block, k_bytes, v_bytes, kv_bytes, n_tok;
    uint64_t n_buckets = 1;
    while (n_buckets < (uint64_t)pp.n_blocks)
        n_buckets <<= 1;
    if (hp->n_layer_kv < 1 || hp->n_head_kv < 1 ||
        fx_mul_overflow_u64((uint64_t)hp->n_layer_kv, (uint64_t)hp->n_head_kv, &rows) ||
        fx_mul_overflow_u64(rows, ((uint64_t)pp.block_size + 15) / 16 * 16, &k_block) ||
        fx_mul_overflow_u64(k_block, k_row, &k_block) ||
        fx_mul_overflow_u64(rows, (uint64_t)pp.block_size, &rows) ||
        fx_mul_overflow_u64(rows, v_row, &v_block) ||
        fx_mul_overflow_u64(k_block, (uint64_t)pp.n_blocks, &k_bytes) ||
        fx_mul_overflow_u64(v_block, (uint64_t)pp.n_blocks, &v_bytes) ||
        fx_add_overflow_u64(k_bytes, v_bytes, &kv_bytes) || k_bytes > SIZE_MAX - 63 ||
        v_bytes > SIZE_MAX ||
        fx_mul_overflow_u64((uint64_t)pp.n_blocks, (uint64_t)pp.block_size, &n_tok) ||
        n_tok > SIZE_MAX / sizeof(fx_token))
        return fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET,
                            "KV pool of n_blocks %d x block_size %d positions (%d layers, %d KV "
                            "heads) overflows",
                            pp.n_blocks, pp.block_size, hp->n_layer_kv, hp->n_head_kv);

    struct fx_kv_pool *p = calloc(1, sizeof *p);
    if (!p)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory for a KV pool");
    *p = (struct fx_kv_pool){.model = m,
                             .recurrent = hp->n_layer_rec > 0,
                             .n_layer = hp->n_layer_kv,
                             .n_head_kv = hp->n_head_kv,
                             .head_dim = hp->head_dim,
                             .head_dim_v = hp->head_dim_v,
                             .n_blocks = pp.n_blocks,
                             .block_size = pp.block_size,
                             .n_seq_max = pp.n_seq_max,
                             .type_k = pp.type_k,
                             .type_v = pp.type_v,
                             .k_row = k_row,
                             .v_row = v_row,
                             .k_block = k_block,
                             .v_block = v_block,
                             .n_buckets = (uint32_t)n_buckets,
                             .lru_head = -1,
                             .lru_tail = -1};
    uint64_t nb = (uint64_t)pp.n_blocks, ns = (uint64_t)pp.n_seq_max;
    p->refs = alloc_array(nb, sizeof *p->refs);
    p->free_list = alloc_array(nb, sizeof *p->free_list);
    p->seqs = alloc_array(ns, sizeof *p->seqs);
    p->cached = alloc_array(nb, sizeof *p->cached);
    p->key = alloc_array(nb, sizeof *p->key);
    p->parent = alloc_array(nb, sizeof *p->parent);
    p->block_tok = alloc_array(n_tok, sizeof *p->block_tok);
    p->hnext = alloc_array(nb, sizeof *p->hnext);
    p->bucket = alloc_array(n_buckets, sizeof *p->bucket);
    p->lru_prev = alloc_array(nb, sizeof *p->lru_prev);
    p->lru_next = alloc_array(nb, sizeof *p->lru_next);
    p->gen = alloc_array(nb, sizeof *p->gen);
    p->parent_gen = alloc_array(nb, sizeof *p->parent_gen);
    p->step_rows = alloc_array(ns, sizeof *p->step_rows);
    p->step_seq = alloc_array(ns, sizeof *p->step_seq);
    p->step_n = alloc_array(ns, sizeof *p->step_n);
    p->step_snap = alloc_array(ns, sizeof *p->step_snap);
    p->step_cow = alloc_array(nb, sizeof *p->step_cow);
    /* Zeroed here, not lazily, on streamed memory, as the contiguous cache is (kv/contig.c). */
    p->k = fx_alloc_streamed_zero(k_bytes);
    p->v = fx_alloc_streamed_zero(v_bytes);
    if (!p->refs || !p->free_list || !p->seqs || !p->cached || !p->key || !p->parent ||
        !p->block_tok || !p->hnext || !p->bucket || !p->lru_prev || !p->lru_next || !p->gen ||
        !p->parent_gen || !p->step_rows || !p->step_seq || !p->step_n || !p->step_snap ||
        !p->step_cow || !p->k || !p->v) {
        fx_kv_pool_free(p);
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET,
                            "out of memory for a KV pool of %llu bytes",
                            (unsigned long long)kv_bytes);
    }
    /* A stack that hands out block 0 first. */
    for (int32_t i = 0; i < pp.n_blocks; i++) {
        p->free_list[i] = pp.n_blocks - 1 - i;
        p->parent[i] = p->hnext[i] = p->lru_prev[i] = p->lru_next[i] = -1;
    }
    p->n_free = pp.n_blocks;
    for (uint64_t i = 0; i < n_buckets; i++)
        p->bucket[i] = -1;
    *out = p;
    return FX_OK;
}

void fx_kv_pool_free(struct fx_kv_pool *p) {
    if (!p)
        return;
    if (p->seqs)
        for (int32_t i = 0; i < p->n_seq_max; i++) {
            free(p->seqs[i].table);
            free(p->seqs[i].tokens);
            release_state(&p->seqs[i]);
        }
    free(p->k);
    free(p->v);
    free(p->refs);
    free(p->free_list);
    free(p->seqs);
    free(p->cached);
    free(p->key);
    free(p->parent);
    free(p->block_tok);
    free(p->hnext);
    free(p->bucket);
    free(p->lru_prev);
    free(p->lru_next);
    free(p->gen);
    free(p->parent_gen);
    free(p->step_rows);
    free(p->step_seq);
    free(p->step_n);
    free(p->step_snap);
    free(p->step_cow);
    free(p);
}

uint64_t fx_kv_pool_bytes(const struct fx_kv_pool *p) {
    return p ? (uint64_t)p->n_blocks * (p->k_block + p->v_block) : 0;
}

/* ---- blocks ------------------------------------------------------------------------------ */

/* A block for a sequence to write into, held once: off the free list, else the least recently
 * used idle-cached block, evicted. The caller has checked that one is to be had. */
static int32_t take_block(struct fx_kv_pool *p) {
    int32_t b;
    if (p->n_free > 0) {
        b = p->free_list[--p->n_free];
    } else {
        b = p->lru_head;
        FX_ASSERT(b >= 0);
        fx_kv_prefix_busy(p, b);
        fx_kv_prefix_remove(p, b);
        p->evictions++;
    }
    FX_ASSERT(p->refs[b] == 0 && !p->cached[b]);
    p->refs[b] = 1;
    return b;
}

/* One more table holds b; an idle cached block leaves the LRU list. */
static void hold_block(struct fx_kv_pool *p, int32_t b) {
    if (p->refs[b]++ == 0) {
        FX_ASSERT(p->cached[b]);
        fx_kv_prefix_busy(p, b);
    }
}

/* One table fewer holds b; when none does, a cached block becomes idle (the LRU list's newest),
 * any other goes back to the free list. */
static void release_block(struct fx_kv_pool *p, int32_t b) {
    FX_ASSERT(p->refs[b] > 0);
    if (--p->refs[b] > 0)
        return;
    if (p->cached[b])
        fx_kv_prefix_idle(p, b);
    else
        p->free_list[p->n_free++] = b;
}

/* Blocks that cover positions 0..n_pos-1. */
static int64_t blocks_for(const struct fx_kv_pool *p, int64_t n_pos) {
    return (n_pos + p->block_size - 1) / p->block_size;
}

/* ---- sequences --------------------------------------------------------------------------- */

bool fx_kv_pool_seq_live(const struct fx_kv_pool *p, fx_seq_id id) {
    return p && id >= 0 && id < p->n_seq_max && p->seqs[id].live;
}

static fx_status check_seq(const struct fx_kv_pool *p, fx_seq_id id, struct fx_error *err) {
    if (!p)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "the KV pool is NULL");
    if (id < 0 || id >= p->n_seq_max)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "sequence %d is not an id of this pool (0..%d)", id, p->n_seq_max - 1);
    if (!p->seqs[id].live)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "sequence %d is not alive", id);
    return FX_OK;
}

/* Grows s's table (and tokens) to hold at least n blocks, doubling. Changes nothing else. */
static fx_status grow_table(struct fx_kv_pool *p, struct fx_kv_seq *s, int64_t n,
                            struct fx_error *err) {
    if (n <= s->cap_table)
        return FX_OK;
    FX_ASSERT(n <= p->n_blocks);
    int64_t cap = s->cap_table > 0 ? s->cap_table : 4;
    while (cap < n)
        cap *= 2;
    if (cap > p->n_blocks)
        cap = p->n_blocks;
    /* Both sizes are within the pool's block_tok, checked at creation. */
    int32_t *table = realloc(s->table, (size_t)cap * sizeof *table);
    if (table)
        s->table = table;
    fx_token *tokens =
        table ? realloc(s->tokens, (size_t)cap * (size_t)p->block_size * sizeof *tokens) : NULL;
    if (!tokens)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET,
                            "out of memory for a block table of %lld blocks", (long long)cap);
    s->tokens = tokens;
    s->cap_table = (int32_t)cap;
    return FX_OK;
}

/* The lowest id not alive, or -1. */
static fx_seq_id free_slot(const struct fx_kv_pool *p) {
    for (fx_seq_id i = 0; i < p->n_seq_max; i++)
        if (!p->seqs[i].live)
            return i;
    return -1;
}

/* A free slot for a new sequence in *id, with its recurrent state (hybrid models) allocated and
 * zeroed; out is the caller's, checked here. A caller that fails after this releases the state
 * (drop_slot). */
static fx_status new_seq(struct fx_kv_pool *p, const fx_seq_id *out, fx_seq_id *id,
                         struct fx_error *err) {
    if (!p)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "the KV pool is NULL");
    if (!out)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "the sequence id out is NULL");
    *id = free_slot(p);
    if (*id < 0)
        return fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET,
                            "the KV pool already holds n_seq_max = %d sequences", p->n_seq_max);
    /* A zero state; the slot's previous one was released when it was freed. */
    return fx_rstate_init_for(&p->seqs[*id].rs, p->model, err);
}

/* Undoes new_seq for a slot that did not become live. */
static void drop_slot(struct fx_kv_pool *p, fx_seq_id id) {
    fx_rstate_release(&p->seqs[id].rs);
}

/* Makes slot id a live sequence of len positions and n_table blocks (already in its table). */
static void set_live(struct fx_kv_pool *p, fx_seq_id id, int32_t len, int32_t n_table) {
    struct fx_kv_seq *s = &p->seqs[id];
    s->live = true;
    s->len = len;
    s->n_table = n_table;
    p->n_seq++;
}

fx_status fx_kv_seq_create(struct fx_kv_pool *p, fx_seq_id *out, struct fx_error *err) {
    fx_seq_id id = -1;
    fx_status st = new_seq(p, out, &id, err);
    if (st)
        return st;
    set_live(p, id, 0, 0);
    *out = id;
    return FX_OK;
}

fx_status fx_kv_seq_create_cached(struct fx_kv_pool *p, const fx_token *tokens, int32_t n,
                                  fx_seq_id *out, int32_t *n_cached, struct fx_error *err) {
    if (p && n < 0)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "a cached sequence of %d tokens",
                            n);
    if (p && n > 0 && !tokens)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "a cached sequence of %d tokens with tokens NULL", n);
    fx_seq_id id = -1;
    fx_status st = new_seq(p, out, &id, err);
    if (st)
        return st;
    /* Whole blocks, at most n - 1 tokens: the last token is always left to compute. Found
     * blocks go into the table first and are held only once the walk is over. */
    struct fx_kv_seq *s = &p->seqs[id];
    const int32_t bs = p->block_size;
    int32_t found = 0, parent = -1;
    /* A recurrent sequence could reuse blocks only with the state at their end, which is not
     * kept: it starts from nothing. */
    while (!p->recurrent && (int64_t)(found + 1) * bs <= (int64_t)n - 1) {
        p->prefix_queries++;
        int32_t b = fx_kv_prefix_find(p, parent, tokens + (size_t)found * (size_t)bs);
        if (b < 0)
            break;
        p->prefix_hits++;
        st = grow_table(p, s, found + 1, err);
        if (st) {
            drop_slot(p, id);
            return st;
        }
        s->table[found++] = b;
        parent = b;
    }
    for (int32_t i = 0; i < found; i++)
        hold_block(p, s->table[i]);
    int32_t len = found * bs;
    if (len > 0)
        memcpy(s->tokens, tokens, (size_t)len * sizeof *tokens);
    set_live(p, id, len, found);
    *out = id;
    if (n_cached)
        *n_cached = len;
    return FX_OK;
}

fx_status fx_kv_seq_fork(struct fx_kv_pool *p, fx_seq_id src, fx_seq_id *out,
                         struct fx_error *err) {
    fx_status st = check_seq(p, src, err);
    if (st)
        return st;
    fx_seq_id id = -1;
    st = new_seq(p, out, &id, err);
    if (st)
        return st;
    const struct fx_kv_seq *from = &p->seqs[src];
    struct fx_kv_seq *s = &p->seqs[id];
    /* Only the blocks covering positions 0..len-1: blocks reserved past them stay src's. */
    int32_t nb = (int32_t)blocks_for(p, from->len);
    st = grow_table(p, s, nb, err);
    if (st) {
        drop_slot(p, id);
        return st;
    }
    fx_rstate_copy(&s->rs, &from->rs);
    for (int32_t i = 0; i < nb; i++) {
        s->table[i] = from->table[i];
        hold_block(p, s->table[i]);
    }
    if (from->len > 0)
        memcpy(s->tokens, from->tokens, (size_t)from->len * sizeof *s->tokens);
    set_live(p, id, from->len, nb);
    *out = id;
    return FX_OK;
}

/* Keeps positions 0..n-1 of s; the blocks wholly past them are released, the last first, so
 * that a chain's later blocks are older in the LRU list and evicted before its earlier ones. */
static void truncate_seq(struct fx_kv_pool *p, struct fx_kv_seq *s, int32_t n) {
    int32_t keep = (int32_t)blocks_for(p, n);
    for (int32_t i = s->n_table - 1; i >= keep; i--)
        release_block(p, s->table[i]);
    if (s->n_table > keep)
        s->n_table = keep;
    s->len = n;
}

fx_status fx_kv_seq_truncate(struct fx_kv_pool *p, fx_seq_id seq, int32_t n, struct fx_error *err) {
    fx_status st = check_seq(p, seq, err);
    if (st)
        return st;
    struct fx_kv_seq *s = &p->seqs[seq];
    if (n < 0 || n > s->len)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "cannot truncate sequence %d to %d positions: it holds %d", seq, n,
                            s->len);
    /* Into the rows of its last step: the state that step kept after position n - 1. */
    bool cut = n != s->len;
    struct fx_rstate *snap = cut && n > 0 ? fx_kv_seq_snap(s, n - 1) : NULL;
    if (p->recurrent && cut && n != 0 && !snap)
        return fx_error_set(err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET,
                            "cannot truncate sequence %d of %d positions to %d: the recurrent "
                            "state of %s can only be kept whole or cleared (or cut back to a row "
                            "whose state its last step kept)",
                            seq, s->len, n, p->model->arch);
    if (snap)
        fx_rstate_copy(&s->rs, snap);
    if (cut)
        s->snap_mask = 0; /* they describe rows that are gone, or the state just restored */
    truncate_seq(p, s, n);
    return FX_OK;
}

fx_status fx_kv_seq_alloc_snaps(struct fx_kv_pool *p, fx_seq_id seq, int32_t n,
                                struct fx_error *err) {
    FX_ASSERT(fx_kv_pool_seq_live(p, seq) && n <= FX_ROLLBACK_MAX);
    struct fx_kv_seq *s = &p->seqs[seq];
    for (; s->snap_alloc < n; s->snap_alloc++) {
        fx_status st = fx_rstate_init_for(&s->snap[s->snap_alloc], p->model, err);
        if (st)
            return st;
    }
    return FX_OK;
}

void fx_kv_seq_free(struct fx_kv_pool *p, fx_seq_id seq) {
    if (!fx_kv_pool_seq_live(p, seq))
        return;
    struct fx_kv_seq *s = &p->seqs[seq];
    truncate_seq(p, s, 0);
    release_state(s);
    s->live = false;
    p->n_seq--;
}

int32_t fx_kv_seq_len(const struct fx_kv_pool *p, fx_seq_id seq) {
    return fx_kv_pool_seq_live(p, seq) ? p->seqs[seq].len : -1;
}

const fx_token *fx_kv_seq_tokens(const struct fx_kv_pool *p, fx_seq_id seq) {
    return fx_kv_pool_seq_live(p, seq) ? p->seqs[seq].tokens : NULL;
}

/* ---- reservation ------------------------------------------------------------------------- */

/* The table indices of s that rows len..len+n_rows-1 write into and that exist already:
 * [*first, *end). */
static void write_range(const struct fx_kv_pool *p, const struct fx_kv_seq *s, int32_t n_rows,
                        int32_t *first, int32_t *end) {
    int64_t last = blocks_for(p, (int64_t)s->len + n_rows);
    *first = s->len / p->block_size;
    *end = (int32_t)(last < s->n_table ? last : s->n_table);
}

fx_status fx_kv_pool_reserve_step(struct fx_kv_pool *p, int n, const fx_seq_id *seq,
                                  const int32_t *n_rows, enum fx_kv_admit *why,
                                  struct fx_error *err) {
    if (!p)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "the KV pool is NULL");
    if (n < 0 || (n > 0 && (!seq || !n_rows)))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "a reservation of %d sequences without their ids or rows", n);
    for (int j = 0; j < n; j++) {
        fx_status st = check_seq(p, seq[j], err);
        if (st)
            return st;
        if (n_rows[j] < 0)
            return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                                "cannot reserve %d rows of sequence %d", n_rows[j], seq[j]);
    }

    /* Count exactly the blocks the apply below takes: new blocks past each table, plus a copy
     * of each shared block a row writes into. When k of the step's sequences write into a block
     * that r tables hold, min(k, r - 1) of them copy it: the last holder writes in place.
     * step_cow counts the k; the second loop adds each block's copies once and re-zeroes it. */
    int64_t need = 0;
    int never = -1; /* a sequence that could never fit */
    for (int j = 0; j < n; j++) {
        const struct fx_kv_seq *s = &p->seqs[seq[j]];
        if (n_rows[j] == 0)
            continue;
        int64_t total = blocks_for(p, (int64_t)s->len + n_rows[j]);
        if (total > p->n_blocks || (int64_t)s->len + n_rows[j] > INT32_MAX) {
            never = j;
            continue;
        }
        if (total > s->n_table)
            need += total - s->n_table;
        int32_t first, end;
        write_range(p, s, n_rows[j], &first, &end);
        for (int32_t i = first; i < end; i++)
            if (p->refs[s->table[i]] > 1)
                p->step_cow[s->table[i]]++;
    }
    for (int j = 0; j < n; j++) {
        const struct fx_kv_seq *s = &p->seqs[seq[j]];
        if (n_rows[j] == 0)
            continue;
        int32_t first, end;
        write_range(p, s, n_rows[j], &first, &end);
        for (int32_t i = first; i < end; i++) {
            int32_t b = s->table[i], k = p->step_cow[b];
            if (k > 0) {
                need += k < p->refs[b] ? k : p->refs[b] - 1;
                p->step_cow[b] = 0;
            }
        }
    }
    if (never >= 0) {
        if (why)
            *why = FX_KV_ADMIT_NEVER;
        const struct fx_kv_seq *s = &p->seqs[seq[never]];
        return fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET,
                            "sequence %d of %d positions cannot grow by %d rows: the KV pool "
                            "holds %d blocks of %d positions",
                            seq[never], s->len, n_rows[never], p->n_blocks, p->block_size);
    }
    int64_t avail = (int64_t)p->n_free + p->n_cached_idle;
    if (need > avail) {
        if (why)
            *why = FX_KV_ADMIT_LATER;
        return fx_error_set(err, FX_ERR_CAPACITY, FX_NO_OFFSET,
                            "the KV pool has %lld free or evictable blocks, %lld are needed",
                            (long long)avail, (long long)need);
    }
    for (int j = 0; j < n; j++) {
        fx_status st = grow_table(p, &p->seqs[seq[j]],
                                  blocks_for(p, (int64_t)p->seqs[seq[j]].len + n_rows[j]), err);
        if (st)
            return st;
    }

    /* Apply: nothing below can fail. */
    for (int j = 0; j < n; j++) {
        struct fx_kv_seq *s = &p->seqs[seq[j]];
        if (n_rows[j] == 0)
            continue;
        int32_t first, end;
        write_range(p, s, n_rows[j], &first, &end);
        for (int32_t i = first; i < end; i++) {
            int32_t b = s->table[i];
            if (p->refs[b] > 1) {
                int32_t c = take_block(p);
                memcpy(p->k + (uint64_t)c * p->k_block, p->k + (uint64_t)b * p->k_block,
                       (size_t)p->k_block);
                memcpy(p->v + (uint64_t)c * p->v_block, p->v + (uint64_t)b * p->v_block,
                       (size_t)p->v_block);
                p->refs[b]--;
                s->table[i] = c;
            } else if (p->cached[b]) {
                fx_kv_prefix_remove(p, b); /* held, so not on the LRU list */
            }
        }
        int64_t total = blocks_for(p, (int64_t)s->len + n_rows[j]);
        while (s->n_table < total)
            s->table[s->n_table++] = take_block(p);
    }
    if (why)
        *why = FX_KV_ADMIT_OK;
    return FX_OK;
}

fx_status fx_kv_seq_reserve(struct fx_kv_pool *p, fx_seq_id seq, int32_t n, enum fx_kv_admit *why,
                            struct fx_error *err) {
    return fx_kv_pool_reserve_step(p, 1, &seq, &n, why, err);
}

void fx_kv_pool_commit_row(struct fx_kv_pool *p, fx_seq_id seq, fx_token token) {
    FX_ASSERT(fx_kv_pool_seq_live(p, seq));
    struct fx_kv_seq *s = &p->seqs[seq];
    FX_ASSERT(s->len / p->block_size < s->n_table);
    FX_ASSERT(p->refs[s->table[s->len / p->block_size]] == 1);
    s->tokens[s->len++] = token;
    if (s->len % p->block_size == 0)
        fx_kv_prefix_insert(p, seq, s->len / p->block_size - 1);
}

/* ---- the pool as a whole ----------------------------------------------------------------- */

void fx_kv_pool_stats(const struct fx_kv_pool *p, struct fx_kv_pool_stats *out) {
    if (!out)
        return;
    if (!p) {
        *out = (struct fx_kv_pool_stats){0};
        return;
    }
    *out = (struct fx_kv_pool_stats){.n_blocks = p->n_blocks,
                                     .n_free = p->n_free,
                                     .n_cached_idle = p->n_cached_idle,
                                     .n_seq = p->n_seq,
                                     .prefix_queries = p->prefix_queries,
                                     .prefix_hits = p->prefix_hits,
                                     .evictions = p->evictions};
}

void fx_kv_pool_clear_cache(struct fx_kv_pool *p) {
    if (!p)
        return;
    while (p->lru_head >= 0) {
        int32_t b = p->lru_head;
        fx_kv_prefix_busy(p, b);
        fx_kv_prefix_remove(p, b);
        p->free_list[p->n_free++] = b;
    }
}
