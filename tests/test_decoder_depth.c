/* decoder/ at depth (ARCHITECTURE.md rule 3, issue 20): a decode step over ~4K cached positions
 * gives the same bytes alone, as one row of a prefill batch, and as one row of a multi-sequence
 * step over a paged pool beside another sequence, for every KV type and the attention variants
 * (grouped queries, softcap with sliding windows, sinks with sliding windows); and a
 * sliding-window layer reads no key before its window's run at any depth. */
#include "fx_test.h"
#include "golden.h"

#include <stdlib.h>
#include <string.h>

#include "decoder/decoder.h"
#include "kv/kv.h"

#define NV 512 /* every fixture's vocabulary */

/* Not a multiple of the 64-key runs, nor of the pool's blocks. */
enum { DEPTH = 4100 };

static const char *const MODELS[] = {
    "models/llama-tiny.F32.gguf",  /* 2 query heads per KV head */
    "models/gemma2-tiny.F32.gguf", /* softcap; sliding window of 8 on every other layer */
    "models/gptoss-tiny.F32.gguf", /* sinks; sliding window of 8 on every other layer */
};

static const enum fx_type KV_TYPES[][2] = {
    {FX_TYPE_F32, FX_TYPE_F32}, {FX_TYPE_F16, FX_TYPE_F16}, {FX_TYPE_Q8_0, FX_TYPE_Q8_0}};

static struct fx_context *context(const struct fx_model *m, int n_threads, const enum fx_type *kv,
                                  bool paged_only) {
    struct fx_context_params p = {.n_ctx = DEPTH + 16,
                                  .n_batch = 512,
                                  .n_threads = n_threads,
                                  .type_k = kv[0],
                                  .type_v = kv[1],
                                  .paged_only = paged_only};
    return fx_test_context(m, &p);
}

static void tokens(fx_token *out, int n, uint64_t salt) {
    struct fx_test_rng r = {0x2545f4914f6cdd1dull ^ salt};
    for (int i = 0; i < n; i++)
        out[i] = 3 + (fx_token)(fx_test_rng_u64(&r) % (NV - 3));
}

static void same(const float *a, const float *b, const char *model, const enum fx_type *kv,
                 const char *what) {
    if (memcmp(a, b, sizeof(float) * NV) != 0)
        fail_msg("%s, KV %s/%s: the decode step at depth %d differs %s", model, fx_type_name(kv[0]),
                 fx_type_name(kv[1]), DEPTH, what);
}

/* Bytes that read back as NaN in every KV type (f32 and f16 all ones; a q8_0 block's scale). */
static void poison(uint8_t *row, uint64_t bytes) {
    memset(row, 0xff, bytes);
}

FX_TEST(decoder_depth_step_alone_equals_step_in_a_batch) {
    static fx_token t[DEPTH + 8], other[5];
    static float alone[NV], batch[8 * NV], multi[6 * NV], poisoned[NV];
    tokens(t, DEPTH + 8, 1);
    tokens(other, 5, 2);
    for (size_t f = 0; f < sizeof MODELS / sizeof MODELS[0]; f++) {
        struct fx_model *m = fx_test_load_model(MODELS[f]);
        for (size_t k = 0; k < sizeof KV_TYPES / sizeof KV_TYPES[0]; k++) {
            const enum fx_type *kv = KV_TYPES[k];
            /* Alone: one token after a prefill of DEPTH. */
            struct fx_context *cc = context(m, 2, kv, false);
            FX_TEST_OK(fx_forward_batch_last(cc, t, DEPTH, 0, alone, &e_));
            FX_TEST_OK(fx_forward_token(cc, t[DEPTH], DEPTH, alone, &e_));

            /* The same position as row 5 of 8 rows of one call. */
            FX_TEST_OK(fx_context_kv_truncate(cc, DEPTH - 5, &e_));
            FX_TEST_OK(fx_forward_batch(cc, t + DEPTH - 5, 8, DEPTH - 5, batch, &e_));
            same(alone, batch + 5 * NV, MODELS[f], kv, "as a row of a batch");

            /* Sliding-window layers: every key before the run that holds the window's first
             * position is made NaN; the step must not see it. */
            const struct fx_hparams *hp = &m->hp;
            if (hp->n_swa > 0) {
                int32_t t0 = (DEPTH - hp->n_swa + 1) / FX_ATTN_RUN * FX_ATTN_RUN;
                struct fx_kv_contig *c = &cc->kv;
                for (int il = 0; il < c->n_layer; il++)
                    if (m->layers[il].swa)
                        for (int g = 0; g < c->n_head_kv; g++) {
                            /* t0 / 16 whole key tiles, one after another */
                            poison(fx_kv_contig_key(c, il, g, 0).tile, (uint64_t)t0 * c->k_row);
                            poison(fx_kv_contig_v(c, il, g, 0), (uint64_t)t0 * c->v_row);
                        }
                FX_TEST_OK(fx_context_kv_truncate(cc, DEPTH, &e_));
                FX_TEST_OK(fx_forward_token(cc, t[DEPTH], DEPTH, poisoned, &e_));
                same(alone, poisoned, MODELS[f], kv, "with keys before the window poisoned");
            }
            fx_context_free(cc);

            /* Paged, one thread: the sequence's row after another sequence's five. */
            struct fx_context *pc = context(m, 1, kv, true);
            struct fx_kv_pool_params pp = fx_kv_pool_default_params();
            pp.n_blocks = (DEPTH + 1) / 16 + 3;
            pp.block_size = 16;
            pp.type_k = kv[0];
            pp.type_v = kv[1];
            struct fx_kv_pool *pl;
            FX_TEST_OK(fx_kv_pool_create(m, &pp, &pl, &e_));
            fx_seq_id a, b;
            FX_TEST_OK(fx_kv_seq_create(pl, &a, &e_));
            FX_TEST_OK(fx_kv_seq_create(pl, &b, &e_));
            FX_TEST_OK(fx_forward_batch_last_paged(pc, pl, a, t, DEPTH, 0, multi, &e_));
            fx_token row_tok[6] = {other[0], other[1], other[2], other[3], other[4], t[DEPTH]};
            int32_t row_pos[6] = {0, 1, 2, 3, 4, DEPTH};
            fx_seq_id row_seq[6] = {b, b, b, b, b, a};
            struct fx_batch step = {.n = 6, .token = row_tok, .pos = row_pos, .seq = row_seq};
            FX_TEST_OK(fx_forward_multi_seq(pc, pl, &step, multi, &e_));
            same(alone, multi + 5 * NV, MODELS[f], kv, "in a multi-sequence step");
            fx_kv_pool_free(pl);
            fx_context_free(pc);
        }
        fx_model_free(m);
    }
}
