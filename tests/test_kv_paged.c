/* kv/paged.c and kv/prefix.c: the paged KV pool's blocks, reference counts, copy-on-write,
 * all-or-nothing reservation and the prefix cache, through the public functions plus the
 * internal reserve_step / commit_row the decoder uses; the pool's fields are read directly to
 * check its invariants.
 *
 * Rows are "computed" by writing a marker into every layer's and head's K and V row: a hash of
 * the tokens up to and including the row's position. A block shared, copied or found in the
 * prefix cache must then hold exactly the markers of its sequence's own tokens. */
#include "fx_test.h"
#include "golden.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kv_tile.h"
#include "kv/paged.h"
#include "model/model.h"

static struct fx_model *tiny(void) {
    return fx_test_load_model("models/llama-tiny.F32.gguf");
}

static struct fx_kv_pool *pool_new(const struct fx_model *m, int n_blocks, int block_size,
                                   int n_seq_max) {
    struct fx_kv_pool_params pp = fx_kv_pool_default_params();
    pp.n_blocks = n_blocks;
    pp.block_size = block_size;
    pp.n_seq_max = n_seq_max;
    struct fx_kv_pool *p;
    struct fx_error err;
    if (fx_kv_pool_create(m, &pp, &p, &err) != FX_OK)
        fail_msg("pool: %s", err.msg);
    return p;
}

/* ---- markers ------------------------------------------------------------------------------ */

static uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

#define MARK_SEED 12345u

/* The marker of position pos of a sequence whose prefix (positions 0..pos) hashes to h. */
static uint64_t mark(uint64_t h, int il, int g, bool is_v) {
    return mix(h + (uint64_t)il * 1000003u + (uint64_t)g * 7919u + (is_v ? 17u : 0u));
}

static uint64_t prefix_step(uint64_t h, fx_token t) {
    return mix(h ^ ((uint64_t)(uint32_t)t + 0x9e3779b97f4a7c15ULL));
}

static uint64_t prefix_hash(const fx_token *tokens, int32_t n) {
    uint64_t h = MARK_SEED;
    for (int32_t i = 0; i < n; i++)
        h = prefix_step(h, tokens[i]);
    return h;
}

/* A key row's first 8 bytes, in or out of its tile slot (kv/kv.h). */
static void key_marker(const struct fx_kv_pool *p, fx_seq_id seq, int il, int g, int32_t pos,
                       uint64_t *k, bool put) {
    uint8_t row[1 << 12]; /* on the stack: the random test runs threads */
    assert_true(p->k_row <= sizeof row && p->k_row >= sizeof *k);
    struct fx_kv_key_at at = fx_kv_pool_key(p, seq, il, g, pos);
    fx_kv_tile_get(p->type_k, p->head_dim, at.tile, at.slot, 0, p->head_dim, row);
    if (put) {
        memcpy(row, k, sizeof *k);
        fx_kv_tile_put(p->type_k, p->head_dim, at.tile, at.slot, 0, p->head_dim, row);
    } else {
        memcpy(k, row, sizeof *k);
    }
}

/* Writes the markers of row pos of seq (whose tokens up to pos hash to h). */
static void write_row(struct fx_kv_pool *p, fx_seq_id seq, int32_t pos, uint64_t h) {
    for (int il = 0; il < p->n_layer; il++)
        for (int g = 0; g < p->n_head_kv; g++) {
            uint64_t k = mark(h, il, g, false), v = mark(h, il, g, true);
            key_marker(p, seq, il, g, pos, &k, true);
            memcpy(fx_kv_pool_v(p, seq, il, g, pos), &v, sizeof v);
        }
}

/* Whether every position of seq holds its markers. */
static bool rows_ok(const struct fx_kv_pool *p, fx_seq_id seq) {
    const struct fx_kv_seq *s = &p->seqs[seq];
    uint64_t h = MARK_SEED;
    for (int32_t pos = 0; pos < s->len; pos++) {
        h = prefix_step(h, s->tokens[pos]);
        for (int il = 0; il < p->n_layer; il++)
            for (int g = 0; g < p->n_head_kv; g++) {
                uint64_t k, v;
                key_marker(p, seq, il, g, pos, &k, false);
                memcpy(&v, fx_kv_pool_v(p, seq, il, g, pos), sizeof v);
                if (k != mark(h, il, g, false) || v != mark(h, il, g, true))
                    return false;
            }
    }
    return true;
}

/* Writes and commits rows for tokens[0..n) at the end of seq, whose room is reserved. */
static void commit_rows(struct fx_kv_pool *p, fx_seq_id seq, const fx_token *tokens, int32_t n) {
    const struct fx_kv_seq *s = &p->seqs[seq];
    uint64_t h = prefix_hash(s->tokens, s->len);
    for (int32_t i = 0; i < n; i++) {
        h = prefix_step(h, tokens[i]);
        write_row(p, seq, s->len, h);
        fx_kv_pool_commit_row(p, seq, tokens[i]);
    }
}

/* Reserves and appends tokens[0..n) to seq, as a forward step would. */
static fx_status append(struct fx_kv_pool *p, fx_seq_id seq, const fx_token *tokens, int32_t n,
                        enum fx_kv_admit *why) {
    struct fx_error err;
    fx_status st = fx_kv_seq_reserve(p, seq, n, why, &err);
    if (st == FX_OK)
        commit_rows(p, seq, tokens, n);
    return st;
}

static fx_seq_id new_seq(struct fx_kv_pool *p) {
    fx_seq_id s;
    struct fx_error err;
    if (fx_kv_seq_create(p, &s, &err) != FX_OK)
        fail_msg("create: %s", err.msg);
    return s;
}

static fx_seq_id new_seq_with(struct fx_kv_pool *p, const fx_token *tokens, int32_t n) {
    fx_seq_id s = new_seq(p);
    assert_int_equal(append(p, s, tokens, n, NULL), FX_OK);
    return s;
}

/* ---- snapshots: "nothing changed" ---------------------------------------------------------- */

struct snap {
    int32_t n_free, n_cached_idle, n_seq, lru_head, lru_tail;
    uint64_t queries, hits, evictions;
    int32_t *refs;
    bool *cached;
    int32_t *seq_state; /* per sequence: live, len, n_table, then its table */
    int64_t n_state;
};

static struct snap snap_take(const struct fx_kv_pool *p) {
    struct snap s = {.n_free = p->n_free,
                     .n_cached_idle = p->n_cached_idle,
                     .n_seq = p->n_seq,
                     .lru_head = p->lru_head,
                     .lru_tail = p->lru_tail,
                     .queries = p->prefix_queries,
                     .hits = p->prefix_hits,
                     .evictions = p->evictions};
    s.refs = malloc((size_t)p->n_blocks * sizeof *s.refs);
    s.cached = malloc((size_t)p->n_blocks * sizeof *s.cached);
    memcpy(s.refs, p->refs, (size_t)p->n_blocks * sizeof *s.refs);
    memcpy(s.cached, p->cached, (size_t)p->n_blocks * sizeof *s.cached);
    int64_t n = 0;
    for (int i = 0; i < p->n_seq_max; i++)
        n += 3 + (p->seqs[i].live ? p->seqs[i].n_table : 0);
    s.seq_state = malloc((size_t)n * sizeof *s.seq_state);
    s.n_state = 0;
    for (int i = 0; i < p->n_seq_max; i++) {
        const struct fx_kv_seq *q = &p->seqs[i];
        s.seq_state[s.n_state++] = q->live;
        s.seq_state[s.n_state++] = q->live ? q->len : 0;
        s.seq_state[s.n_state++] = q->live ? q->n_table : 0;
        for (int32_t j = 0; q->live && j < q->n_table; j++)
            s.seq_state[s.n_state++] = q->table[j];
    }
    return s;
}

static bool snap_same(const struct fx_kv_pool *p, const struct snap *a) {
    struct snap b = snap_take(p);
    bool same = a->n_free == b.n_free && a->n_cached_idle == b.n_cached_idle &&
                a->n_seq == b.n_seq && a->lru_head == b.lru_head && a->lru_tail == b.lru_tail &&
                a->queries == b.queries && a->hits == b.hits && a->evictions == b.evictions &&
                a->n_state == b.n_state &&
                memcmp(a->refs, b.refs, (size_t)p->n_blocks * sizeof *a->refs) == 0 &&
                memcmp(a->cached, b.cached, (size_t)p->n_blocks * sizeof *a->cached) == 0 &&
                memcmp(a->seq_state, b.seq_state, (size_t)a->n_state * sizeof *a->seq_state) == 0;
    free(b.refs);
    free(b.cached);
    free(b.seq_state);
    return same;
}

static void snap_free(struct snap *s) {
    free(s->refs);
    free(s->cached);
    free(s->seq_state);
}

/* ---- invariants --------------------------------------------------------------------------- */

/* Checks every structural invariant of the pool; on failure returns false with a message. */
static bool invariants(const struct fx_kv_pool *p, char *msg, size_t cap) {
    const int32_t nb = p->n_blocks, bs = p->block_size;
    int32_t *count = calloc((size_t)nb, sizeof *count), *seen = calloc((size_t)nb, sizeof *seen);
    bool ok = false;
#define INV(c, ...)                                                                                \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            snprintf(msg, cap, __VA_ARGS__);                                                       \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)
    int32_t n_live = 0;
    for (int i = 0; i < p->n_seq_max; i++) {
        const struct fx_kv_seq *s = &p->seqs[i];
        if (!s->live)
            continue;
        n_live++;
        INV(s->len >= 0 && s->n_table >= (s->len + bs - 1) / bs && s->n_table <= s->cap_table,
            "seq %d: len %d, n_table %d, cap %d", i, s->len, s->n_table, s->cap_table);
        for (int32_t j = 0; j < s->n_table; j++) {
            int32_t b = s->table[j];
            INV(b >= 0 && b < nb, "seq %d table[%d] = %d", i, j, b);
            count[b]++;
            /* Blocks reserved past len (or holding len, when it starts one) are writable. */
            if ((int64_t)j * bs >= s->len)
                INV(p->refs[b] == 1 && !p->cached[b], "seq %d reserved block %d shared or cached",
                    i, b);
        }
    }
    INV(n_live == p->n_seq, "n_seq %d, live %d", p->n_seq, n_live);
    for (int32_t b = 0; b < nb; b++)
        INV(count[b] == p->refs[b], "block %d: refs %d, in %d tables", b, p->refs[b], count[b]);
    /* The free list: distinct blocks, refs 0, not cached. */
    INV(p->n_free >= 0 && p->n_free <= nb, "n_free %d", p->n_free);
    for (int32_t i = 0; i < p->n_free; i++) {
        int32_t b = p->free_list[i];
        INV(b >= 0 && b < nb && !seen[b], "free list entry %d: block %d", i, b);
        seen[b] = 1;
        INV(p->refs[b] == 0 && !p->cached[b], "free block %d: refs %d cached %d", b, p->refs[b],
            p->cached[b]);
    }
    /* The LRU list: distinct blocks, refs 0, cached, links consistent. */
    int32_t n_lru = 0, prev = -1;
    for (int32_t b = p->lru_head; b >= 0; b = p->lru_next[b]) {
        INV(b < nb && !seen[b], "LRU entry %d: block %d", n_lru, b);
        seen[b] = 2;
        INV(p->lru_prev[b] == prev, "LRU block %d: prev %d, expected %d", b, p->lru_prev[b], prev);
        INV(p->refs[b] == 0 && p->cached[b], "LRU block %d: refs %d cached %d", b, p->refs[b],
            p->cached[b]);
        prev = b;
        n_lru++;
    }
    INV(p->lru_tail == prev, "LRU tail %d, expected %d", p->lru_tail, prev);
    INV(n_lru == p->n_cached_idle, "LRU holds %d, n_cached_idle %d", n_lru, p->n_cached_idle);
    /* The rest are held. */
    for (int32_t b = 0; b < nb; b++)
        INV(seen[b] || p->refs[b] > 0, "block %d is neither free, idle-cached nor held", b);
    /* Every cached block is in its bucket once; nothing else is in a bucket. */
    int32_t in_buckets = 0, n_cached = 0;
    for (uint32_t i = 0; i < p->n_buckets; i++)
        for (int32_t b = p->bucket[i]; b >= 0; b = p->hnext[b]) {
            INV(b < nb && p->cached[b] && (p->key[b] & (p->n_buckets - 1)) == i,
                "bucket %u holds block %d", i, b);
            INV(++in_buckets <= nb, "a bucket chain loops");
        }
    for (int32_t b = 0; b < nb; b++)
        n_cached += p->cached[b];
    INV(in_buckets == n_cached, "%d blocks in buckets, %d cached", in_buckets, n_cached);
    ok = true;
out:
#undef INV
    free(count);
    free(seen);
    return ok;
}

static void assert_invariants(const struct fx_kv_pool *p) {
    char msg[256];
    if (!invariants(p, msg, sizeof msg))
        fail_msg("invariant: %s", msg);
}

/* ---- creation ----------------------------------------------------------------------------- */

FX_TEST(kv_paged_create_params) {
    struct fx_model *m = tiny();
    const struct fx_hparams *hp = &m->hp;
    struct fx_kv_pool_params d = fx_kv_pool_default_params();
    assert_true(d.n_blocks >= 1);
    assert_int_equal(d.block_size, 16);
    assert_int_equal(d.n_seq_max, 256);

    struct fx_kv_pool_params pp = {.n_blocks = 7, .type_k = FX_TYPE_F32, .type_v = FX_TYPE_F16};
    struct fx_kv_pool *p;
    struct fx_error err;
    assert_int_equal(fx_kv_pool_create(m, &pp, &p, &err), FX_OK);
    assert_int_equal(p->block_size, 16);
    assert_int_equal(p->n_seq_max, 256);
    uint64_t want = 7ull * 16 * (uint64_t)hp->n_layer * (uint64_t)hp->n_head_kv *
                    ((uint64_t)hp->head_dim * 4 + (uint64_t)hp->head_dim_v * 2);
    assert_int_equal(fx_kv_pool_bytes(p), want);
    struct fx_kv_pool_stats st;
    fx_kv_pool_stats(p, &st);
    assert_int_equal(st.n_blocks, 7);
    assert_int_equal(st.n_free, 7);
    assert_int_equal(st.n_cached_idle, 0);
    assert_int_equal(st.n_seq, 0);
    for (int i = 0; i < p->n_seq_max; i++)
        assert_int_equal(p->step_rows[i], 0);
    assert_true(p->n_buckets >= 7 && (p->n_buckets & (p->n_buckets - 1)) == 0);
    assert_invariants(p);
    fx_kv_pool_free(p);
    assert_int_equal(fx_kv_pool_bytes(NULL), 0);
    fx_kv_pool_free(NULL);

    /* Bad parameters, each named. */
    static const struct {
        struct fx_kv_pool_params pp;
        fx_status code;
        const char *names;
    } bad[] = {
        {{.n_blocks = 0}, FX_ERR_INVALID_ARG, "n_blocks"},
        {{.n_blocks = -3}, FX_ERR_INVALID_ARG, "n_blocks"},
        {{.n_blocks = 4, .block_size = 4097}, FX_ERR_INVALID_ARG, "block_size"},
        {{.n_blocks = 4, .block_size = -1}, FX_ERR_INVALID_ARG, "block_size"},
        {{.n_blocks = 4, .n_seq_max = 65537}, FX_ERR_INVALID_ARG, "n_seq_max"},
        {{.n_blocks = 4, .n_seq_max = -1}, FX_ERR_INVALID_ARG, "n_seq_max"},
        {{.n_blocks = 4, .type_k = FX_TYPE_Q4_0}, FX_ERR_UNSUPPORTED, "type_k"},
        {{.n_blocks = 4, .type_v = FX_TYPE_Q4_K}, FX_ERR_UNSUPPORTED, "type_v"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = (struct fx_kv_pool *)&err; /* must be reset to NULL */
        fx_status s = fx_kv_pool_create(m, &bad[i].pp, &p, &err);
        if (s != bad[i].code || p != NULL || !strstr(err.msg, bad[i].names))
            fail_msg("case %zu: %s: %s", i, fx_status_name(s), err.msg);
    }
    assert_int_equal(fx_kv_pool_create(NULL, &pp, &p, &err), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_kv_pool_create(m, &pp, NULL, &err), FX_ERR_INVALID_ARG);
    /* NULL params: the defaults. */
    assert_int_equal(fx_kv_pool_create(m, NULL, &p, NULL), FX_OK);
    assert_int_equal(p->n_blocks, d.n_blocks);
    fx_kv_pool_free(p);
    fx_model_free(m);
}

/* ---- create, fork, truncate, free --------------------------------------------------------- */

static const fx_token T[32] = {11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26,
                               27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42};

/* fx_kv_step_ahead tells attn_run where the next run's rows lie, group of 16 by group: the value
 * rows of each group up to the end of its block (blocks of 16: whole groups; of 24: every other
 * group straddles a block and is told up to its end), the whole key tile that holds the group's
 * first key, and nothing past the run's n rows. */
FX_TEST(kv_paged_step_ahead_names_the_next_runs_rows) {
    struct fx_model *m = tiny();
    for (int bs = 16; bs <= 24; bs += 8) {
        struct fx_kv_pool *p = pool_new(m, 2 * 200 / bs + 2, bs, 2);
        fx_token tokens[200];
        for (int i = 0; i < 200; i++)
            tokens[i] = i % 50;
        fx_seq_id seq = new_seq_with(p, tokens, 200);
        struct fx_kv_step s = {.kind = FX_KV_PAGED, .u.paged = {.pool = p, .seq = seq}};
        int il = p->n_layer - 1, g = p->n_head_kv - 1;
        for (int32_t n = 40; n <= FX_ATTN_RUN; n += FX_ATTN_RUN - 40) {
            struct fx_kv_run keys = {0}, values = {0};
            fx_kv_step_ahead(&s, il, 0, g, 64, n, &keys, &values);
            for (int32_t b = 0; b < FX_ATTN_RUN / 16; b++) {
                int32_t pos = 64 + 16 * b, rows = n - 16 * b < 0 ? 0 : n - 16 * b;
                rows = rows < 16 ? rows : 16;
                assert_int_equal(keys.next.bytes[b], rows > 0 ? 16 * p->k_row : 0);
                rows = rows < bs - pos % bs ? rows : bs - pos % bs;
                assert_int_equal(values.next.bytes[b], (uint64_t)rows * p->v_row);
                if (rows > 0) {
                    assert_ptr_equal(keys.next.at[b], fx_kv_pool_key(p, seq, il, g, pos).tile);
                    assert_ptr_equal(values.next.at[b], fx_kv_pool_v(p, seq, il, g, pos));
                }
            }
        }
        fx_kv_pool_free(p);
    }
    fx_model_free(m);
}

FX_TEST(kv_paged_fork_truncate_free) {
    struct fx_model *m = tiny();
    struct fx_kv_pool *p = pool_new(m, 8, 4, 4);
    struct fx_error err;

    fx_seq_id a = new_seq_with(p, T, 6); /* blocks 0 (full) and 1 (2 of 4) */
    assert_int_equal(fx_kv_seq_len(p, a), 6);
    assert_int_equal(p->seqs[a].n_table, 2);
    int32_t a0 = p->seqs[a].table[0], a1 = p->seqs[a].table[1];
    assert_true(p->cached[a0] && !p->cached[a1]);

    fx_seq_id b;
    assert_int_equal(fx_kv_seq_fork(p, a, &b, &err), FX_OK);
    assert_int_not_equal(a, b);
    assert_int_equal(fx_kv_seq_len(p, b), 6);
    assert_memory_equal(fx_kv_seq_tokens(p, b), T, 6 * sizeof(fx_token));
    assert_int_equal(p->seqs[b].table[0], a0);
    assert_int_equal(p->seqs[b].table[1], a1);
    assert_int_equal(p->refs[a0], 2);
    assert_int_equal(p->refs[a1], 2);
    assert_int_equal(p->n_free, 6);
    assert_invariants(p);

    /* b appends into the shared partial block: it gets a copy with the same bytes. */
    enum fx_kv_admit why = FX_KV_ADMIT_NEVER;
    assert_int_equal(fx_kv_seq_reserve(p, b, 1, &why, &err), FX_OK);
    assert_int_equal(why, FX_KV_ADMIT_OK);
    int32_t b1 = p->seqs[b].table[1];
    assert_int_not_equal(b1, a1);
    assert_int_equal(p->seqs[b].table[0], a0);
    assert_int_equal(p->refs[a0], 2);
    assert_int_equal(p->refs[a1], 1);
    assert_int_equal(p->refs[b1], 1);
    assert_memory_equal(p->k + (uint64_t)b1 * p->k_block, p->k + (uint64_t)a1 * p->k_block,
                        p->k_block);
    assert_memory_equal(p->v + (uint64_t)b1 * p->v_block, p->v + (uint64_t)a1 * p->v_block,
                        p->v_block);
    assert_int_equal(fx_kv_seq_len(p, b), 6); /* a reservation does not grow len */
    fx_token t99 = 99;
    commit_rows(p, b, &t99, 1);
    assert_int_equal(fx_kv_seq_len(p, b), 7);
    assert_int_equal(fx_kv_seq_tokens(p, b)[6], 99);
    assert_memory_equal(fx_kv_seq_tokens(p, a), T, 6 * sizeof(fx_token));
    assert_true(rows_ok(p, a) && rows_ok(p, b));
    /* a, the last holder of a1, appends in place. */
    assert_int_equal(append(p, a, T + 6, 2, NULL), FX_OK);
    assert_int_equal(p->seqs[a].table[1], a1);
    assert_true(p->cached[a1]); /* now full */
    assert_true(rows_ok(p, a) && rows_ok(p, b));
    assert_invariants(p);

    /* Blocks reserved past len are not shared by a fork, and truncate releases them. */
    assert_int_equal(fx_kv_seq_reserve(p, a, 5, NULL, &err), FX_OK); /* 8 + 5: 4 blocks */
    assert_int_equal(p->seqs[a].n_table, 4);
    fx_seq_id c;
    assert_int_equal(fx_kv_seq_fork(p, a, &c, &err), FX_OK);
    assert_int_equal(p->seqs[c].n_table, 2);
    assert_int_equal(p->refs[p->seqs[a].table[2]], 1);
    assert_int_equal(p->refs[a1], 2);
    assert_invariants(p);
    int32_t free_before = p->n_free;
    assert_int_equal(fx_kv_seq_truncate(p, a, 8, &err), FX_OK);
    assert_int_equal(p->seqs[a].n_table, 2);
    assert_int_equal(p->n_free, free_before + 2);
    /* Truncating into a shared block keeps it; a later write copies it. */
    assert_int_equal(fx_kv_seq_truncate(p, a, 5, &err), FX_OK);
    assert_int_equal(fx_kv_seq_len(p, a), 5);
    assert_int_equal(p->seqs[a].table[1], a1);
    assert_int_equal(append(p, a, T + 20, 1, NULL), FX_OK);
    assert_int_not_equal(p->seqs[a].table[1], a1);
    assert_true(rows_ok(p, a) && rows_ok(p, c));
    /* Truncating to 0 releases everything; a0 stays cached, idle once nobody holds it. */
    assert_int_equal(fx_kv_seq_truncate(p, a, 0, &err), FX_OK);
    assert_int_equal(p->seqs[a].n_table, 0);
    assert_invariants(p);

    fx_kv_seq_free(p, b);
    fx_kv_seq_free(p, c);
    assert_int_equal(fx_kv_seq_len(p, b), -1);
    assert_null(fx_kv_seq_tokens(p, b));
    fx_kv_seq_free(p, b); /* a dead id: nothing */
    fx_kv_seq_free(p, a);
    struct fx_kv_pool_stats st;
    fx_kv_pool_stats(p, &st);
    assert_int_equal(st.n_seq, 0);
    assert_int_equal(st.n_free + st.n_cached_idle, 8);
    assert_true(st.n_cached_idle >= 2); /* a0 and a1 at least */
    assert_invariants(p);
    fx_kv_pool_clear_cache(p);
    fx_kv_pool_stats(p, &st);
    assert_int_equal(st.n_free, 8);
    assert_int_equal(st.n_cached_idle, 0);
    assert_invariants(p);
    /* Ids are reused, lowest first. */
    assert_int_equal(new_seq(p), 0);
    fx_kv_pool_free(p);
    fx_model_free(m);
}

/* ---- capacity ----------------------------------------------------------------------------- */

FX_TEST(kv_paged_capacity_exact) {
    struct fx_model *m = tiny();
    struct fx_kv_pool *p = pool_new(m, 6, 4, 8);
    struct fx_error err;
    enum fx_kv_admit why;

    /* A request larger than the whole pool: never, even when the pool is empty. */
    fx_seq_id a = new_seq(p);
    struct snap s0 = snap_take(p);
    assert_int_equal(fx_kv_seq_reserve(p, a, 6 * 4 + 1, &why, &err), FX_ERR_CAPACITY);
    assert_int_equal(why, FX_KV_ADMIT_NEVER);
    assert_true(err.msg[0] != '\0');
    assert_true(snap_same(p, &s0));
    snap_free(&s0);
    assert_int_equal(fx_kv_seq_reserve(p, a, INT32_MAX, &why, &err), FX_ERR_CAPACITY);
    assert_int_equal(why, FX_KV_ADMIT_NEVER);
    /* The whole pool fits exactly. */
    assert_int_equal(fx_kv_seq_reserve(p, a, 6 * 4, &why, &err), FX_OK);
    assert_int_equal(p->n_free, 0);
    assert_int_equal(fx_kv_seq_truncate(p, a, 0, &err), FX_OK);
    assert_int_equal(p->n_free, 6);

    /* Two sequences fill the pool exactly, with cached blocks among them. */
    assert_int_equal(append(p, a, T, 10, NULL), FX_OK); /* 3 blocks, 2 positions left */
    fx_seq_id b = new_seq_with(p, T + 16, 12);          /* 3 blocks, full */
    assert_int_equal(p->n_free, 0);
    assert_int_equal(append(p, a, T + 10, 2, NULL), FX_OK); /* the last room */
    assert_invariants(p);
    struct snap s1 = snap_take(p);
    assert_int_equal(fx_kv_seq_reserve(p, a, 1, &why, &err), FX_ERR_CAPACITY);
    assert_int_equal(why, FX_KV_ADMIT_LATER);
    assert_true(strstr(err.msg, "block") != NULL);
    assert_true(snap_same(p, &s1));
    assert_int_equal(fx_kv_seq_reserve(p, b, 25, &why, &err), FX_ERR_CAPACITY);
    assert_int_equal(why, FX_KV_ADMIT_NEVER);
    assert_true(snap_same(p, &s1));
    snap_free(&s1);
    assert_int_equal(fx_kv_seq_len(p, a), 12);
    assert_int_equal(fx_kv_seq_len(p, b), 12);
    /* Zero rows always fit. */
    assert_int_equal(fx_kv_seq_reserve(p, a, 0, &why, &err), FX_OK);
    assert_int_equal(why, FX_KV_ADMIT_OK);

    /* Multi-sequence: fits for the first sequence, not for both; nothing changes. */
    fx_kv_seq_free(p, a);
    fx_kv_seq_free(p, b);
    fx_kv_pool_clear_cache(p);
    a = new_seq(p);
    b = new_seq(p);
    struct snap s2 = snap_take(p);
    fx_seq_id ab[2] = {a, b};
    int32_t rows[2] = {8, 20}; /* 2 + 5 blocks of 6 */
    assert_int_equal(fx_kv_pool_reserve_step(p, 2, ab, rows, &why, &err), FX_ERR_CAPACITY);
    assert_int_equal(why, FX_KV_ADMIT_LATER);
    assert_true(snap_same(p, &s2));
    snap_free(&s2);
    rows[1] = 16; /* 2 + 4: exactly */
    assert_int_equal(fx_kv_pool_reserve_step(p, 2, ab, rows, &why, &err), FX_OK);
    assert_int_equal(p->n_free, 0);
    assert_invariants(p);

    /* Copy-on-write counted exactly: three forks write into one shared partial block; two
     * copies are needed (the last holder writes in place). */
    fx_kv_seq_free(p, a);
    fx_kv_seq_free(p, b);
    fx_kv_pool_clear_cache(p);
    p->evictions = 0;
    a = new_seq_with(p, T, 6); /* 2 blocks */
    fx_seq_id f1, f2;
    assert_int_equal(fx_kv_seq_fork(p, a, &f1, &err), FX_OK);
    assert_int_equal(fx_kv_seq_fork(p, a, &f2, &err), FX_OK);
    fx_seq_id d = new_seq_with(p, T + 8, 9); /* 3 blocks: 1 block left free */
    assert_int_equal(p->n_free, 1);
    int32_t shared = p->seqs[a].table[1];
    assert_int_equal(p->refs[shared], 3);
    fx_seq_id three[3] = {a, f1, f2};
    int32_t one[3] = {1, 1, 1};
    struct snap s3 = snap_take(p);
    assert_int_equal(fx_kv_pool_reserve_step(p, 3, three, one, &why, &err), FX_ERR_CAPACITY);
    assert_int_equal(why, FX_KV_ADMIT_LATER);
    assert_true(snap_same(p, &s3));
    assert_int_equal(fx_kv_pool_reserve_step(p, 2, three, one, &why, &err), FX_ERR_CAPACITY);
    assert_true(snap_same(p, &s3));
    snap_free(&s3);
    /* Freeing d's 3 blocks: its first two are cached (idle, evictable), the third free. */
    fx_kv_seq_free(p, d);
    assert_int_equal(p->n_free + p->n_cached_idle, 4);
    /* Take 2 of the 4 so that exactly 2 remain: then the three-way write fits exactly. */
    d = new_seq(p);
    assert_int_equal(fx_kv_seq_reserve(p, d, 8, NULL, &err), FX_OK);
    assert_int_equal(p->n_free + p->n_cached_idle, 2);
    assert_int_equal(fx_kv_pool_reserve_step(p, 3, three, one, &why, &err), FX_OK);
    assert_int_equal(p->n_free + p->n_cached_idle, 0);
    assert_int_equal(p->evictions, 2);
    int32_t t_a = p->seqs[a].table[1], t_1 = p->seqs[f1].table[1], t_2 = p->seqs[f2].table[1];
    assert_true(t_a != t_1 && t_a != t_2 && t_1 != t_2);
    assert_true(t_a == shared || t_1 == shared || t_2 == shared);
    assert_int_equal(p->refs[shared], 1);
    fx_token x = 7, y = 8, z = 9;
    commit_rows(p, a, &x, 1);
    commit_rows(p, f1, &y, 1);
    commit_rows(p, f2, &z, 1);
    assert_true(rows_ok(p, a) && rows_ok(p, f1) && rows_ok(p, f2));
    assert_invariants(p);
    fx_kv_pool_free(p);
    fx_model_free(m);
}

/* ---- prefix cache ------------------------------------------------------------------------- */

FX_TEST(kv_paged_prefix_cache) {
    struct fx_model *m = tiny();
    struct fx_kv_pool *p = pool_new(m, 16, 4, 8);
    struct fx_error err;
    struct fx_kv_pool_stats st;

    fx_seq_id a = new_seq_with(p, T, 13); /* 3 full blocks, cached as they fill */
    int32_t blk[3];
    for (int i = 0; i < 3; i++) {
        blk[i] = p->seqs[a].table[i];
        assert_true(p->cached[blk[i]]);
    }
    assert_false(p->cached[p->seqs[a].table[3]]);
    fx_kv_seq_free(p, a);
    fx_kv_pool_stats(p, &st);
    assert_int_equal(st.n_cached_idle, 3);
    assert_int_equal(st.n_free, 13);

    /* The same tokens share every whole block, at most n - 1 tokens. */
    fx_seq_id s;
    int32_t n_cached = -1;
    assert_int_equal(fx_kv_seq_create_cached(p, T, 13, &s, &n_cached, &err), FX_OK);
    assert_int_equal(n_cached, 12);
    assert_int_equal(fx_kv_seq_len(p, s), 12);
    assert_memory_equal(fx_kv_seq_tokens(p, s), T, 12 * sizeof(fx_token));
    for (int i = 0; i < 3; i++) {
        assert_int_equal(p->seqs[s].table[i], blk[i]);
        assert_int_equal(p->refs[blk[i]], 1);
    }
    assert_true(rows_ok(p, s));
    fx_kv_pool_stats(p, &st);
    assert_int_equal(st.prefix_queries, 3);
    assert_int_equal(st.prefix_hits, 3);
    assert_int_equal(st.n_cached_idle, 0);
    assert_invariants(p);
    /* The last token is computed: appending it leaves the cached blocks alone. */
    assert_int_equal(append(p, s, T + 12, 1, NULL), FX_OK);
    assert_true(rows_ok(p, s));
    fx_kv_seq_free(p, s);

    /* 12 tokens: at most 11, so two blocks. */
    assert_int_equal(fx_kv_seq_create_cached(p, T, 12, &s, &n_cached, &err), FX_OK);
    assert_int_equal(n_cached, 8);
    fx_kv_pool_stats(p, &st);
    assert_int_equal(st.prefix_queries, 5);
    assert_int_equal(st.prefix_hits, 5);
    fx_kv_seq_free(p, s);
    /* A different token in block 2: blocks 0-1 only. */
    fx_token u[13];
    memcpy(u, T, sizeof u);
    u[9] = 500;
    assert_int_equal(fx_kv_seq_create_cached(p, u, 13, &s, &n_cached, &err), FX_OK);
    assert_int_equal(n_cached, 8);
    assert_int_equal(p->seqs[s].table[1], blk[1]);
    fx_kv_pool_stats(p, &st);
    assert_int_equal(st.prefix_queries, 8);
    assert_int_equal(st.prefix_hits, 7);
    /* Computing the rest caches block 2 under the same parent, beside the other. */
    assert_int_equal(append(p, s, u + 8, 5, NULL), FX_OK);
    int32_t u2 = p->seqs[s].table[2];
    assert_true(u2 != blk[2] && p->cached[u2]);
    assert_true(rows_ok(p, s));
    fx_kv_seq_free(p, s);
    /* A different first token: nothing. n = 1 and n = 0: no lookups at all. */
    u[0] = 1;
    assert_int_equal(fx_kv_seq_create_cached(p, u, 13, &s, &n_cached, &err), FX_OK);
    assert_int_equal(n_cached, 0);
    fx_kv_seq_free(p, s);
    assert_int_equal(fx_kv_seq_create_cached(p, T, 1, &s, &n_cached, &err), FX_OK);
    assert_int_equal(n_cached, 0);
    fx_kv_seq_free(p, s);
    assert_int_equal(fx_kv_seq_create_cached(p, NULL, 0, &s, &n_cached, &err), FX_OK);
    assert_int_equal(n_cached, 0);
    fx_kv_seq_free(p, s);
    fx_kv_pool_stats(p, &st);
    assert_int_equal(st.prefix_queries, 9);
    assert_int_equal(st.prefix_hits, 7);

    /* A sequence that computes cached tokens again keeps its own copies uncached (an equal
     * block is cached), and its later blocks join the chain under the cached ones: a lookup
     * walks blk[0..2] and then finds its block 3. */
    fx_seq_id b = new_seq_with(p, T, 17);
    for (int i = 0; i < 3; i++)
        assert_false(p->cached[p->seqs[b].table[i]]);
    int32_t b3 = p->seqs[b].table[3];
    assert_true(p->cached[b3]);
    assert_int_equal(p->parent[b3], blk[2]);
    fx_kv_seq_free(p, b);
    assert_int_equal(fx_kv_seq_create_cached(p, T, 17, &s, &n_cached, &err), FX_OK);
    assert_int_equal(n_cached, 16);
    assert_int_equal(p->seqs[s].table[3], b3);
    assert_true(rows_ok(p, s));
    assert_invariants(p);
    fx_kv_seq_free(p, s);
    fx_kv_pool_free(p);
    fx_model_free(m);
}

FX_TEST(kv_paged_lru_eviction) {
    struct fx_model *m = tiny();
    struct fx_kv_pool *p = pool_new(m, 6, 4, 8);
    struct fx_error err;
    static const fx_token A[9] = {100, 101, 102, 103, 104, 105, 106, 107, 108};
    static const fx_token B[9] = {200, 201, 202, 203, 204, 205, 206, 207, 208};
    static const fx_token C[16] = {300, 301, 302, 303, 304, 305, 306, 307,
                                   308, 309, 310, 311, 312, 313, 314, 315};

    fx_seq_id a = new_seq_with(p, A, 9);
    int32_t a0 = p->seqs[a].table[0], a1 = p->seqs[a].table[1];
    fx_kv_seq_free(p, a);
    fx_seq_id b = new_seq_with(p, B, 9);
    int32_t b0 = p->seqs[b].table[0], b1 = p->seqs[b].table[1];
    fx_kv_seq_free(p, b);
    /* Released last block first: the LRU list runs a1, a0, b1, b0. */
    assert_int_equal(p->n_cached_idle, 4);
    assert_int_equal(p->n_free, 2);
    assert_int_equal(p->lru_head, a1);
    assert_int_equal(p->lru_next[a1], a0);
    assert_int_equal(p->lru_next[a0], b1);
    assert_int_equal(p->lru_tail, b0);

    /* 3 blocks: the 2 free ones, then the oldest idle one, a1. */
    fx_seq_id c = new_seq_with(p, C, 12);
    assert_int_equal(p->evictions, 1);
    assert_int_equal(p->seqs[c].table[2], a1); /* cached again, as c's block 2 */
    assert_int_equal(p->parent[a1], p->seqs[c].table[1]);
    assert_int_equal(p->lru_head, a0);
    assert_invariants(p);

    /* A hit takes a0 out of the LRU list, so b1 is the next to go. */
    fx_seq_id d;
    int32_t n_cached;
    assert_int_equal(fx_kv_seq_create_cached(p, A, 9, &d, &n_cached, &err), FX_OK);
    assert_int_equal(n_cached, 4); /* block 1 was evicted */
    assert_int_equal(p->seqs[d].table[0], a0);
    assert_int_equal(p->lru_head, b1);
    assert_int_equal(append(p, c, C + 12, 1, NULL), FX_OK);
    assert_int_equal(p->evictions, 2);
    assert_false(p->cached[b1]);
    assert_true(p->cached[b0]);
    struct fx_kv_pool_stats st;
    fx_kv_pool_stats(p, &st);
    assert_int_equal(st.evictions, 2);
    assert_int_equal(st.n_cached_idle, 1);
    assert_true(rows_ok(p, c) && rows_ok(p, d));
    assert_invariants(p);
    /* b0 is still found: its child b1 is not. */
    fx_seq_id e;
    assert_int_equal(fx_kv_seq_create_cached(p, B, 9, &e, &n_cached, &err), FX_OK);
    assert_int_equal(n_cached, 4);
    assert_true(rows_ok(p, e));
    fx_kv_pool_free(p);
    fx_model_free(m);
}

FX_TEST(kv_paged_prefix_no_false_hit) {
    struct fx_model *m = tiny();
    struct fx_kv_pool *p = pool_new(m, 8, 4, 8);
    struct fx_error err;
    /* The same tokens in block 1 under different first blocks. */
    static const fx_token X[9] = {1, 2, 3, 4, 50, 51, 52, 53, 0};
    static const fx_token W[9] = {5, 6, 7, 8, 50, 51, 52, 53, 0};
    fx_seq_id a = new_seq_with(p, X, 8), b = new_seq_with(p, W, 8);
    int32_t x1 = p->seqs[a].table[1], w0 = p->seqs[b].table[0], w1 = p->seqs[b].table[1];
    assert_true(p->cached[x1] && p->cached[w1] && x1 != w1);
    fx_kv_seq_free(p, a);
    fx_kv_seq_free(p, b);
    fx_seq_id s;
    int32_t n_cached;
    assert_int_equal(fx_kv_seq_create_cached(p, W, 9, &s, &n_cached, &err), FX_OK);
    assert_int_equal(n_cached, 8);
    assert_int_equal(p->seqs[s].table[0], w0);
    assert_int_equal(p->seqs[s].table[1], w1);
    assert_true(rows_ok(p, s));
    fx_kv_seq_free(p, s);
    static const fx_token V[9] = {9, 9, 9, 9, 50, 51, 52, 53, 0};
    assert_int_equal(fx_kv_seq_create_cached(p, V, 9, &s, &n_cached, &err), FX_OK);
    assert_int_equal(n_cached, 0);
    fx_kv_seq_free(p, s);

    /* A parent block whose id is reused for other tokens: its old child must not be found
     * under it. X's block 0 is taken by a sequence, cut back into and rewritten; it is cached
     * again, same id, as Y's first block. X's block 1 (idle, cached) names that id as parent. */
    fx_kv_pool_clear_cache(p);
    a = new_seq_with(p, X, 8);
    int32_t x0 = p->seqs[a].table[0];
    x1 = p->seqs[a].table[1];
    fx_kv_seq_free(p, a);
    assert_int_equal(fx_kv_seq_create_cached(p, X, 5, &s, &n_cached, &err), FX_OK);
    assert_int_equal(n_cached, 4);
    assert_int_equal(p->seqs[s].table[0], x0);
    assert_int_equal(fx_kv_seq_truncate(p, s, 2, &err), FX_OK);
    static const fx_token Y[9] = {1, 2, 77, 78, 50, 51, 52, 53, 0};
    assert_int_equal(append(p, s, Y + 2, 2, NULL), FX_OK);
    assert_int_equal(p->seqs[s].table[0], x0); /* written in place: it held it alone */
    assert_true(p->cached[x0] && p->cached[x1] && p->parent[x1] == x0);
    fx_kv_seq_free(p, s);
    assert_int_equal(fx_kv_seq_create_cached(p, Y, 9, &s, &n_cached, &err), FX_OK);
    assert_int_equal(n_cached, 4); /* Y's block 0 only, not X's block 1 */
    assert_true(rows_ok(p, s));
    assert_int_equal(append(p, s, Y + 4, 5, NULL), FX_OK);
    assert_true(rows_ok(p, s));

    /* Hash collisions, forged: x1 (X's block 1, same tokens as Y's) is given the key of Y's
     * block 1 under x0. A lookup compares the parent's generation and the tokens, not only the
     * key and the parent's id. */
    int32_t y1 = p->seqs[s].table[1];
    assert_true(p->cached[y1] && p->parent[y1] == x0 && p->cached[x1] && p->refs[x1] == 0);
    uint64_t stale_gen = p->parent_gen[x1], key = p->key[y1];
    fx_kv_prefix_remove(p, y1); /* held by s: it only leaves the cache */
    fx_kv_prefix_remove(p, x1); /* idle: stays on the LRU list, and is cached again here */
    p->cached[x1] = true;
    p->key[x1] = key;
    p->parent[x1] = x0;
    p->parent_gen[x1] = stale_gen;
    uint32_t bucket = (uint32_t)(key & (p->n_buckets - 1));
    p->hnext[x1] = p->bucket[bucket];
    p->bucket[bucket] = x1;
    assert_invariants(p);
    assert_int_equal(fx_kv_prefix_find(p, x0, Y + 4), -1); /* x0 was rewritten since */
    p->parent_gen[x1] = p->gen[x0];
    assert_int_equal(fx_kv_prefix_find(p, x0, Y + 4), x1); /* the forgery works... */
    p->block_tok[(size_t)x1 * 4 + 3] = 999;
    assert_int_equal(fx_kv_prefix_find(p, x0, Y + 4), -1); /* ...but not for other tokens */
    p->block_tok[(size_t)x1 * 4 + 3] = Y[7];
    p->parent_gen[x1] = stale_gen;
    fx_kv_seq_free(p, s);
    assert_int_equal(fx_kv_seq_create_cached(p, Y, 9, &s, &n_cached, &err), FX_OK);
    assert_int_equal(n_cached, 4);
    assert_true(rows_ok(p, s));
    fx_kv_seq_free(p, s);
    /* And X itself: block 0 is gone from the cache. */
    assert_int_equal(fx_kv_seq_create_cached(p, X, 9, &s, &n_cached, &err), FX_OK);
    assert_int_equal(n_cached, 0);
    assert_invariants(p);
    fx_kv_pool_free(p);
    fx_model_free(m);
}

/* ---- bad arguments ------------------------------------------------------------------------ */

FX_TEST(kv_paged_bad_args) {
    struct fx_model *m = tiny();
    struct fx_kv_pool *p = pool_new(m, 8, 4, 2);
    struct fx_error err;
    enum fx_kv_admit why;
    fx_seq_id a = new_seq_with(p, T, 6), out;
    struct snap s = snap_take(p);
#define BAD(call, code, text)                                                                      \
    do {                                                                                           \
        err.msg[0] = '\0';                                                                         \
        fx_status st_ = (call);                                                                    \
        if (st_ != (code) || !strstr(err.msg, text))                                               \
            fail_msg("%s: %s: '%s'", #call, fx_status_name(st_), err.msg);                         \
        assert_true(snap_same(p, &s));                                                             \
    } while (0)
    BAD(fx_kv_seq_fork(p, 1, &out, &err), FX_ERR_INVALID_ARG, "sequence 1");
    BAD(fx_kv_seq_fork(p, -1, &out, &err), FX_ERR_INVALID_ARG, "-1");
    BAD(fx_kv_seq_fork(p, 2, &out, &err), FX_ERR_INVALID_ARG, "sequence 2");
    BAD(fx_kv_seq_fork(p, a, NULL, &err), FX_ERR_INVALID_ARG, "NULL");
    BAD(fx_kv_seq_fork(NULL, a, &out, &err), FX_ERR_INVALID_ARG, "NULL");
    BAD(fx_kv_seq_truncate(p, 1, 0, &err), FX_ERR_INVALID_ARG, "sequence 1");
    BAD(fx_kv_seq_truncate(p, 99999, 0, &err), FX_ERR_INVALID_ARG, "99999");
    BAD(fx_kv_seq_truncate(p, a, -1, &err), FX_ERR_INVALID_ARG, "-1");
    BAD(fx_kv_seq_truncate(p, a, 7, &err), FX_ERR_INVALID_ARG, "holds 6");
    BAD(fx_kv_seq_truncate(NULL, a, 0, &err), FX_ERR_INVALID_ARG, "NULL");
    BAD(fx_kv_seq_reserve(p, 1, 1, &why, &err), FX_ERR_INVALID_ARG, "sequence 1");
    BAD(fx_kv_seq_reserve(p, INT32_MIN, 1, &why, &err), FX_ERR_INVALID_ARG, "-2147483648");
    BAD(fx_kv_seq_reserve(p, a, -1, &why, &err), FX_ERR_INVALID_ARG, "-1");
    BAD(fx_kv_seq_reserve(NULL, a, 1, &why, &err), FX_ERR_INVALID_ARG, "NULL");
    fx_seq_id two[2] = {a, 1};
    int32_t rows[2] = {1, 1};
    BAD(fx_kv_pool_reserve_step(p, 2, two, rows, &why, &err), FX_ERR_INVALID_ARG, "sequence 1");
    BAD(fx_kv_pool_reserve_step(p, 1, NULL, rows, &why, &err), FX_ERR_INVALID_ARG, "");
    BAD(fx_kv_pool_reserve_step(p, -1, two, rows, &why, &err), FX_ERR_INVALID_ARG, "");
    BAD(fx_kv_seq_create_cached(p, T, -1, &out, NULL, &err), FX_ERR_INVALID_ARG, "-1");
    BAD(fx_kv_seq_create_cached(p, NULL, 4, &out, NULL, &err), FX_ERR_INVALID_ARG, "NULL");
    BAD(fx_kv_seq_create_cached(NULL, T, 4, &out, NULL, &err), FX_ERR_INVALID_ARG, "NULL");
    BAD(fx_kv_seq_create_cached(p, T, 4, NULL, NULL, &err), FX_ERR_INVALID_ARG, "NULL");
    BAD(fx_kv_seq_create(p, NULL, &err), FX_ERR_INVALID_ARG, "NULL");
    BAD(fx_kv_seq_create(NULL, &out, &err), FX_ERR_INVALID_ARG, "NULL");
    /* err may be NULL. */
    assert_int_equal(fx_kv_seq_truncate(p, a, 7, NULL), FX_ERR_INVALID_ARG);
    /* Harmless on dead ids or NULL. */
    fx_kv_seq_free(p, 1);
    fx_kv_seq_free(p, -5);
    fx_kv_seq_free(p, 1 << 30);
    fx_kv_seq_free(NULL, 0);
    assert_int_equal(fx_kv_seq_len(p, 1), -1);
    assert_int_equal(fx_kv_seq_len(p, -1), -1);
    assert_int_equal(fx_kv_seq_len(NULL, 0), -1);
    assert_null(fx_kv_seq_tokens(p, 7));
    assert_null(fx_kv_seq_tokens(NULL, 0));
    fx_kv_pool_stats(p, NULL);
    fx_kv_pool_clear_cache(NULL);
    assert_false(fx_kv_pool_seq_live(p, 2));
    assert_false(fx_kv_pool_seq_live(NULL, 0));
    assert_true(snap_same(p, &s));
    snap_free(&s);
    /* n_seq_max sequences alive: the next is refused. */
    fx_seq_id b = new_seq(p);
    s = snap_take(p);
    BAD(fx_kv_seq_create(p, &out, &err), FX_ERR_CAPACITY, "n_seq_max");
    BAD(fx_kv_seq_fork(p, a, &out, &err), FX_ERR_CAPACITY, "n_seq_max");
    BAD(fx_kv_seq_create_cached(p, T, 6, &out, NULL, &err), FX_ERR_CAPACITY, "n_seq_max");
    snap_free(&s);
#undef BAD
    fx_kv_seq_free(p, b);
    assert_invariants(p);
    fx_kv_pool_free(p);
    fx_model_free(m);
}

/* ---- random operations -------------------------------------------------------------------- */

#define R_BLOCKS 24
#define R_BS     4
#define R_SEQS   8
#define R_OPS    5000
#define R_POS    (R_BLOCKS * R_BS)

struct rnd {
    const struct fx_model *m;
    uint64_t seed;
    char msg[1024];
    /* The tokens each sequence should hold, as the test tracks them. */
    fx_token shadow[R_SEQS][R_POS];
    int32_t shadow_len[R_SEQS];
    bool live[R_SEQS];
    fx_token base[3][R_POS];
};

#define RCHECK(c, ...)                                                                             \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            char what_[512];                                                                       \
            snprintf(what_, sizeof what_, __VA_ARGS__);                                            \
            snprintf(r->msg, sizeof r->msg, "seed %llu op %d (line %d): %s: %s",                   \
                     (unsigned long long)r->seed, op, __LINE__, #c, what_);                        \
            return false;                                                                          \
        }                                                                                          \
    } while (0)

static uint32_t rnd_below(struct fx_test_rng *g, uint32_t n) {
    return (uint32_t)(fx_test_rng_u64(g) % n);
}

/* The next token of a sequence built on base k: mostly the base's, sometimes another. */
static fx_token next_token(struct rnd *r, struct fx_test_rng *g, int k, int32_t pos) {
    return rnd_below(g, 10) < 8 ? r->base[k][pos] : (fx_token)rnd_below(g, 4);
}

/* A random live sequence, or -1. */
static fx_seq_id pick_live(struct rnd *r, struct fx_test_rng *g) {
    int n = 0;
    for (int i = 0; i < R_SEQS; i++)
        n += r->live[i];
    if (n == 0)
        return -1;
    int k = (int)rnd_below(g, (uint32_t)n);
    for (int i = 0; i < R_SEQS; i++)
        if (r->live[i] && k-- == 0)
            return i;
    return -1;
}

/* Blocks a reservation of these rows needs, simulated independently of paged.c: new blocks past
 * each table, and a copy for each write into a block other step sequences or others still
 * hold. *never when one sequence would need more than the pool. */
static int64_t simulate_need(const struct fx_kv_pool *p, int n, const fx_seq_id *seq,
                             const int32_t *rows, bool *never) {
    int32_t refs[R_BLOCKS];
    memcpy(refs, p->refs, sizeof refs);
    int64_t need = 0;
    *never = false;
    for (int j = 0; j < n; j++) {
        const struct fx_kv_seq *s = &p->seqs[seq[j]];
        if (rows[j] == 0)
            continue;
        int64_t total = (s->len + rows[j] + R_BS - 1) / R_BS;
        if (total > R_BLOCKS)
            *never = true;
        need += total > s->n_table ? total - s->n_table : 0;
        for (int64_t i = s->len / R_BS; i < total && i < s->n_table; i++)
            if (refs[s->table[i]] > 1) {
                refs[s->table[i]]--;
                need++;
            }
    }
    return need;
}

static bool check_all(struct rnd *r, const struct fx_kv_pool *p, int op) {
    char msg[256];
    RCHECK(invariants(p, msg, sizeof msg), "%s", msg);
    for (int i = 0; i < R_SEQS; i++) {
        RCHECK(fx_kv_pool_seq_live(p, i) == r->live[i], "seq %d", i);
        if (!r->live[i])
            continue;
        RCHECK(fx_kv_seq_len(p, i) == r->shadow_len[i], "seq %d: len %d, expected %d", i,
               fx_kv_seq_len(p, i), r->shadow_len[i]);
        RCHECK(r->shadow_len[i] == 0 || memcmp(fx_kv_seq_tokens(p, i), r->shadow[i],
                                               (size_t)r->shadow_len[i] * sizeof(fx_token)) == 0,
               "seq %d tokens", i);
        RCHECK(rows_ok(p, i), "seq %d: a row does not hold its markers", i);
    }
    return true;
}

/* Appends rows tokens to each of n distinct sequences in one reservation; checks the outcome
 * against the simulation and, on failure, that nothing changed. */
static bool rnd_append(struct rnd *r, struct fx_kv_pool *p, int op, int n, const fx_seq_id *seq,
                       const int32_t *rows, fx_token (*tok)[8]) {
    bool never;
    int64_t need = simulate_need(p, n, seq, rows, &never);
    bool fits = !never && need <= (int64_t)p->n_free + p->n_cached_idle;
    struct snap s = snap_take(p);
    enum fx_kv_admit why;
    struct fx_error err;
    fx_status st = fx_kv_pool_reserve_step(p, n, seq, rows, &why, &err);
    bool same = st == FX_OK || snap_same(p, &s);
    snap_free(&s);
    RCHECK((st == FX_OK) == fits, "need %lld, free %d + idle %d: %s", (long long)need, p->n_free,
           p->n_cached_idle, err.msg);
    if (st != FX_OK) {
        RCHECK(st == FX_ERR_CAPACITY && same, "%s", err.msg);
        RCHECK(why == (never ? FX_KV_ADMIT_NEVER : FX_KV_ADMIT_LATER), "why %d", why);
        return true;
    }
    RCHECK(why == FX_KV_ADMIT_OK, "why %d", why);
    /* Every block the rows write is writable. */
    for (int j = 0; j < n; j++) {
        const struct fx_kv_seq *q = &p->seqs[seq[j]];
        for (int32_t pos = q->len; pos < q->len + rows[j]; pos++) {
            int32_t b = q->table[pos / R_BS];
            RCHECK(p->refs[b] == 1 && !p->cached[b], "seq %d pos %d block %d", seq[j], pos, b);
        }
    }
    /* Rows of different sequences interleaved, as a multi-sequence step commits them. */
    int32_t done[4] = {0};
    for (bool more = true; more;) {
        more = false;
        for (int j = 0; j < n; j++)
            if (done[j] < rows[j]) {
                fx_token t = tok[j][done[j]++];
                commit_rows(p, seq[j], &t, 1);
                r->shadow[seq[j]][r->shadow_len[seq[j]]++] = t;
                more = true;
            }
    }
    return true;
}

static bool rnd_run(struct rnd *r) {
    struct fx_test_rng g = {r->seed};
    struct fx_kv_pool_params pp = fx_kv_pool_default_params();
    pp.n_blocks = R_BLOCKS;
    pp.block_size = R_BS;
    pp.n_seq_max = R_SEQS;
    struct fx_kv_pool *p;
    struct fx_error err;
    int op = -1;
    RCHECK(fx_kv_pool_create(r->m, &pp, &p, &err) == FX_OK, "%s", err.msg);
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < R_POS; i++)
            r->base[k][i] = (fx_token)rnd_below(&g, 6) + (fx_token)(k * 3);
    int kinds[R_SEQS] = {0};
    uint64_t hits_before = 0;
    for (op = 0; op < R_OPS; op++) {
        uint32_t what = rnd_below(&g, 100);
        if (what < 10) { /* create */
            fx_seq_id s;
            fx_status st = fx_kv_seq_create(p, &s, &err);
            int n_live = 0;
            for (int i = 0; i < R_SEQS; i++)
                n_live += r->live[i];
            RCHECK((st == FX_OK) == (n_live < R_SEQS), "%s", err.msg);
            if (st == FX_OK) {
                RCHECK(!r->live[s], "id %d reused while alive", s);
                r->live[s] = true;
                r->shadow_len[s] = 0;
                kinds[s] = (int)rnd_below(&g, 3);
            }
        } else if (what < 25) { /* create_cached, then compute the rest */
            int k = (int)rnd_below(&g, 3);
            int32_t n = 1 + (int32_t)rnd_below(&g, 40);
            fx_token tok[40];
            for (int32_t i = 0; i < n; i++)
                tok[i] = next_token(r, &g, k, i);
            fx_seq_id s;
            int32_t n_cached = -1;
            fx_status st = fx_kv_seq_create_cached(p, tok, n, &s, &n_cached, &err);
            if (st == FX_ERR_CAPACITY)
                continue;
            RCHECK(st == FX_OK, "%s", err.msg);
            RCHECK(n_cached >= 0 && n_cached <= n - 1 && n_cached % R_BS == 0, "n_cached %d",
                   n_cached);
            r->live[s] = true;
            kinds[s] = k;
            memcpy(r->shadow[s], tok, (size_t)n_cached * sizeof *tok);
            r->shadow_len[s] = n_cached;
            if (!check_all(r, p, op))
                return false;
            for (int32_t at = n_cached; at < n; at += 8) {
                int32_t rows = n - at < 8 ? n - at : 8;
                fx_token chunk[1][8];
                memcpy(chunk[0], tok + at, (size_t)rows * sizeof *tok);
                int32_t before = r->shadow_len[s];
                if (!rnd_append(r, p, op, 1, &s, &rows, chunk))
                    return false;
                if (r->shadow_len[s] == before)
                    break; /* no room now */
            }
        } else if (what < 35) { /* fork */
            fx_seq_id src = pick_live(r, &g), s;
            if (src < 0)
                continue;
            fx_status st = fx_kv_seq_fork(p, src, &s, &err);
            if (st == FX_ERR_CAPACITY)
                continue;
            RCHECK(st == FX_OK, "%s", err.msg);
            r->live[s] = true;
            kinds[s] = kinds[src];
            memcpy(r->shadow[s], r->shadow[src], (size_t)r->shadow_len[src] * sizeof(fx_token));
            r->shadow_len[s] = r->shadow_len[src];
        } else if (what < 65) { /* append to one sequence, or to several in one step */
            fx_seq_id seq[3];
            int n = 1 + (int)rnd_below(&g, 3), m = 0;
            for (int t = 0; t < n; t++) {
                fx_seq_id s = pick_live(r, &g);
                bool dup = s < 0;
                for (int j = 0; j < m; j++)
                    dup |= seq[j] == s;
                if (!dup)
                    seq[m++] = s;
            }
            if (m == 0)
                continue;
            int32_t rows[3];
            fx_token tok[3][8];
            for (int j = 0; j < m; j++) {
                /* Sometimes more than the pool, to see "never". */
                rows[j] = rnd_below(&g, 50) == 0 ? R_POS : (int32_t)rnd_below(&g, 7);
                if (rows[j] > 8 && r->shadow_len[seq[j]] + rows[j] <= R_POS)
                    rows[j] = 8;
                for (int32_t i = 0; i < rows[j] && i < 8; i++) {
                    int32_t pos = r->shadow_len[seq[j]] + i;
                    tok[j][i] = next_token(r, &g, kinds[seq[j]], pos < R_POS ? pos : 0);
                }
            }
            if (!rnd_append(r, p, op, m, seq, rows, tok))
                return false;
        } else if (what < 80) { /* truncate */
            fx_seq_id s = pick_live(r, &g);
            if (s < 0)
                continue;
            int32_t n = (int32_t)rnd_below(&g, (uint32_t)r->shadow_len[s] + 1);
            RCHECK(fx_kv_seq_truncate(p, s, n, &err) == FX_OK, "%s", err.msg);
            r->shadow_len[s] = n;
        } else if (what < 98) { /* free, sometimes a dead id */
            fx_seq_id s =
                rnd_below(&g, 4) == 0 ? (fx_seq_id)rnd_below(&g, R_SEQS + 2) - 1 : pick_live(r, &g);
            fx_kv_seq_free(p, s);
            if (s >= 0 && s < R_SEQS)
                r->live[s] = false;
        } else { /* clear the cache */
            fx_kv_pool_clear_cache(p);
            RCHECK(p->n_cached_idle == 0 && p->lru_head < 0, "%d idle", p->n_cached_idle);
        }
        if (!check_all(r, p, op))
            return false;
    }
    /* The cache was used. */
    RCHECK(p->prefix_hits > hits_before && p->evictions > 0, "hits %llu, evictions %llu",
           (unsigned long long)p->prefix_hits, (unsigned long long)p->evictions);
    for (int i = 0; i < R_SEQS; i++) {
        fx_kv_seq_free(p, i);
        r->live[i] = false;
    }
    fx_kv_pool_clear_cache(p);
    RCHECK(p->n_free == R_BLOCKS && p->n_cached_idle == 0 && p->n_seq == 0, "n_free %d", p->n_free);
    if (!check_all(r, p, op))
        return false;
    fx_kv_pool_free(p);
    return true;
}

static void *rnd_thread(void *arg) {
    struct rnd *r = arg;
    if (!rnd_run(r) && !r->msg[0])
        snprintf(r->msg, sizeof r->msg, "failed");
    return NULL;
}

/* Two pools, each owned by one thread, stepped at once (ThreadSanitizer checks that pools share
 * nothing mutable). */
FX_TEST(kv_paged_random_ops) {
    struct fx_model *m = tiny();
    struct rnd *r = calloc(2, sizeof *r);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        r[i].m = m;
        r[i].seed = 0x5eed0000u + (uint64_t)i * 7919u;
        assert_int_equal(pthread_create(&th[i], NULL, rnd_thread, &r[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < 2; i++)
        if (r[i].msg[0])
            fail_msg("%s", r[i].msg);
    free(r);
    fx_model_free(m);
}
