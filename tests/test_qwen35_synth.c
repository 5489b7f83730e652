/* model/synth.c's Qwen3.5 shapes (issue 16): qwen35-0.8b and qwen35moe-12l-32e have the
 * dimensions of their config.json files (the MoE cut to 12 layers and 32 experts), each block
 * names its tensors as the block of the same kind in llama.cpp's fixtures does (fixtures/qwen35),
 * the quantized mixes are llama-quantize's, and the tiny shapes load in ferrox and run, trunk
 * and MTP head. Only the tiny files are written: the plans of the real shapes say the rest. */
#include "fx_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferrox.h"
#include "model/ftype.h"
#include "model/synth.h"

static struct fx_synth_model *plan_ok(const char *shape, const char *type) {
    uint32_t ftype;
    struct fx_synth_model *m;
    struct fx_error e;
    if (!fx_file_type_from_name(type, &ftype))
        fail_msg("unknown file type %s", type);
    if (fx_synth_plan(shape, ftype, false, 7, &m, &e) != FX_OK)
        fail_msg("plan %s %s: %s", shape, type, e.msg);
    return m;
}

static const struct fx_synth_tensor *find(const struct fx_synth_model *m, const char *name) {
    for (int64_t i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return &m->tensors[i];
    fail_msg("no tensor %s", name);
    return NULL;
}

/* The type of tensor `suffix` of block `layer`. */
static enum fx_type type_of(const struct fx_synth_model *m, int layer, const char *suffix) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s", layer, suffix);
    return find(m, name)->type;
}

/* A Qwen3.5 text config.json, in its own field names. */
struct config {
    int64_t hidden, vocab, layers, ff;                   /* ff: intermediate or expert size */
    int64_t lin_k_heads, lin_v_heads, lin_dim, lin_conv; /* linear_* */
    int64_t heads, kv_heads, head_dim, experts, shared_ff;
    bool tied;
};

/* Its parameters as the HF checkpoint counts them (text tower, one MTP layer), written out
 * field by field; every fourth layer is full attention. */
static int64_t config_params(const struct config *c) {
    int64_t d = c->hidden, key = c->lin_k_heads * c->lin_dim, value = c->lin_v_heads * c->lin_dim;
    int64_t conv_ch = 2 * key + value;
    int64_t linear = d * conv_ch + d * value + c->lin_conv * conv_ch /* in_proj_qkv, z, conv */
                     + 2 * d * c->lin_v_heads + 2 * c->lin_v_heads   /* in_proj_b/a, dt_bias, A */
                     + c->lin_dim + value * d;                       /* norm, out_proj */
    int64_t full = d * 2 * c->heads * c->head_dim + 2 * d * c->kv_heads * c->head_dim +
                   c->heads * c->head_dim * d + 2 * c->head_dim;
    int64_t mlp = c->experts
                      ? d * c->experts + 3 * d * c->ff * c->experts + d + 3 * d * c->shared_ff
                      : 3 * d * c->ff;
    int64_t norms = 2 * d, n_full = c->layers / 4;
    int64_t mtp = 2 * d * d + 3 * d + full + mlp + norms; /* fc, 3 norms, one full layer */
    return c->vocab * d * (c->tied ? 1 : 2) + d + (c->layers - n_full) * (linear + mlp + norms) +
           n_full * (full + mlp + norms) + mtp;
}

FX_TEST(synth_qwen35_shapes_have_their_configs_dimensions) {
    static const struct {
        const char *shape;
        struct config c;
        int64_t tensors;
    } cases[] = {
        /* Qwen/Qwen3.5-0.8B */
        {"qwen35-0.8b",
         {1024, 248320, 24, 3584, 16, 16, 128, 4, 8, 2, 256, 0, 0, true},
         2 + 18 * 14 + 6 * 11 + 15},
        /* Qwen/Qwen3.5-35B-A3B with 12 layers and 32 experts */
        {"qwen35moe-12l-32e",
         {2048, 248320, 12, 512, 16, 32, 128, 4, 16, 2, 256, 32, 512, false},
         3 + 9 * 19 + 3 * 16 + 20},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct fx_synth_model *m = plan_ok(cases[i].shape, "F16");
        assert_int_equal(fx_synth_n_params(m), config_params(&cases[i].c));
        assert_int_equal(m->n_tensors, cases[i].tensors);
        fx_synth_model_free(m);
    }
    /* Where the layers differ from other archs: the fused [q | k | v] of the DeltaNet (2 x 16
     * heads of 128 for Q and K, 16 for V), Q with its gate, the MTP block as block 24. */
    struct fx_synth_model *m = plan_ok("qwen35-0.8b", "F32");
    assert_int_equal(find(m, "blk.0.attn_qkv.weight")->ne[1], 6144);
    assert_int_equal(find(m, "blk.0.ssm_conv1d.weight")->ne[0], 4);
    assert_int_equal(find(m, "blk.0.ssm_out.weight")->ne[0], 2048);
    assert_int_equal(find(m, "blk.0.ssm_a")->ne[0], 16);
    assert_int_equal(find(m, "blk.3.attn_q.weight")->ne[1], 2 * 8 * 256);
    assert_int_equal(find(m, "blk.23.attn_k.weight")->ne[1], 512);
    assert_int_equal(find(m, "blk.24.nextn.eh_proj.weight")->ne[0], 2048);
    assert_int_equal(find(m, "token_embd.weight")->ne[1], 248320);
    /* ssm_a is a decay rate: negative, as -exp(A_log) is. */
    assert_int_equal(find(m, "blk.0.ssm_a")->role, FX_SYNTH_DECAY);
    fx_synth_model_free(m);
    m = plan_ok("qwen35moe-12l-32e", "Q8_0");
    const struct fx_synth_tensor *t = find(m, "blk.12.ffn_down_exps.weight");
    assert_int_equal(t->ne[0], 512);
    assert_int_equal(t->ne[1], 2048);
    assert_int_equal(t->ne[2], 32);
    assert_int_equal(find(m, "blk.12.ffn_gate_inp_shexp.weight")->n_dims, 1);
    assert_int_equal(find(m, "output.weight")->ne[1], 248320);
    /* "3.0 GB at Q8_0", as synth.c says */
    assert_true(fx_synth_n_bytes(m) > 2950000000u && fx_synth_n_bytes(m) < 3050000000u);
    fx_synth_model_free(m);
}

/* The suffixes after "blk.N." of block `layer` of a llama.cpp file, each with its dimension
 * count, and whether ours has exactly those in block `ours` of the plan. */
static void assert_block_like(const struct fx_synth_model *m, int ours, const struct fx_gguf *ref,
                              int layer) {
    char prefix[32], ours_prefix[32];
    snprintf(prefix, sizeof prefix, "blk.%d.", layer);
    snprintf(ours_prefix, sizeof ours_prefix, "blk.%d.", ours);
    int64_t n_ref = 0, n_ours = 0;
    for (int64_t i = 0; i < fx_gguf_n_tensors(ref); i++) {
        const struct fx_tensor_view *want = fx_gguf_tensor_at(ref, i);
        if (strncmp(want->name, prefix, strlen(prefix)) != 0)
            continue;
        char name[96];
        snprintf(name, sizeof name, "%s%s", ours_prefix, want->name + strlen(prefix));
        assert_int_equal(find(m, name)->n_dims, want->n_dims);
        n_ref++;
    }
    for (int64_t i = 0; i < m->n_tensors; i++)
        n_ours += strncmp(m->tensors[i].name, ours_prefix, strlen(ours_prefix)) == 0;
    if (n_ours != n_ref)
        fail_msg("%s has %lld tensors, llama.cpp's block %d %lld", ours_prefix, (long long)n_ours,
                 layer, (long long)n_ref);
}

/* The fixtures' blocks 0, 3 and 4 are a DeltaNet layer, a gated attention layer and the MTP
 * block: every block of the real shapes has the tensors of the fixture block of its kind. */
FX_TEST(synth_qwen35_blocks_are_llama_cpps) {
    static const struct {
        const char *shape, *fixture;
        int n_layer;
    } pairs[] = {{"qwen35-0.8b", "qwen35/models/qwen35-tiny.F32.gguf", 24},
                 {"qwen35moe-12l-32e", "qwen35/models/qwen35moe-tiny.F32.gguf", 12}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        struct fx_gguf *ref;
        assert_int_equal(fx_gguf_open(fx_test_fixture(pairs[i].fixture), &ref, NULL), FX_OK);
        struct fx_synth_model *m = plan_ok(pairs[i].shape, "F32");
        int n_layer = pairs[i].n_layer;
        for (int l = 0; l <= n_layer; l++)
            assert_block_like(m, l, ref, l == n_layer ? 4 : (l + 1) % 4 == 0 ? 3 : 0);
        fx_synth_model_free(m);
        fx_gguf_free(ref);
    }
}

/* llama-quantize on Qwen3.5 (src/llama-quant.cpp): ssm_conv1d stays F32 as for Mamba, the 1-D
 * ssm_a, ssm_dt.bias, ssm_norm and ffn_gate_inp_shexp are never converted, attn_qkv counts as an
 * attn_v, and ssm_alpha, ssm_beta, ssm_out, attn_gate and nextn.eh_proj take the base type. The
 * MTP block is a block of the mix: Q4_K_M's "more bits" layers are those of 25 (13) blocks. */
static bool more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

FX_TEST(synth_qwen35_mixes_are_llama_quantizes) {
    struct fx_synth_model *m = plan_ok("qwen35-0.8b", "Q4_K_M");
    assert_int_equal(find(m, "token_embd.weight")->type, FX_TYPE_Q6_K); /* tied: the output */
    for (int l = 0; l < 25; l++) {
        bool delta = l < 24 && (l + 1) % 4 != 0;
        enum fx_type more = more_bits(l, 25) ? FX_TYPE_Q6_K : FX_TYPE_Q4_K;
        assert_int_equal(type_of(m, l, delta ? "attn_qkv.weight" : "attn_v.weight"), more);
        assert_int_equal(type_of(m, l, "ffn_down.weight"), more);
        assert_int_equal(type_of(m, l, "ffn_up.weight"), FX_TYPE_Q4_K);
        if (!delta) {
            assert_int_equal(type_of(m, l, "attn_q.weight"), FX_TYPE_Q4_K);
            assert_int_equal(type_of(m, l, "attn_q_norm.weight"), FX_TYPE_F32);
            continue;
        }
        assert_int_equal(type_of(m, l, "ssm_conv1d.weight"), FX_TYPE_F32);
        assert_int_equal(type_of(m, l, "ssm_a"), FX_TYPE_F32);
        assert_int_equal(type_of(m, l, "ssm_dt.bias"), FX_TYPE_F32);
        assert_int_equal(type_of(m, l, "ssm_norm.weight"), FX_TYPE_F32);
        assert_int_equal(type_of(m, l, "ssm_alpha.weight"), FX_TYPE_Q4_K);
        assert_int_equal(type_of(m, l, "ssm_beta.weight"), FX_TYPE_Q4_K);
        assert_int_equal(type_of(m, l, "ssm_out.weight"), FX_TYPE_Q4_K);
        assert_int_equal(type_of(m, l, "attn_gate.weight"), FX_TYPE_Q4_K);
    }
    assert_int_equal(find(m, "blk.24.nextn.eh_proj.weight")->type, FX_TYPE_Q4_K);
    assert_int_equal(find(m, "blk.24.nextn.enorm.weight")->type, FX_TYPE_F32);
    fx_synth_model_free(m);

    /* The MoE: experts' and the shared expert's down projections by layer, the router and
     * the shared expert's gate F32, the untied embedding in the base type. */
    m = plan_ok("qwen35moe-12l-32e", "Q4_K_M");
    assert_int_equal(find(m, "token_embd.weight")->type, FX_TYPE_Q4_K);
    assert_int_equal(find(m, "output.weight")->type, FX_TYPE_Q6_K);
    for (int l = 0; l < 13; l++) {
        enum fx_type more = more_bits(l, 13) ? FX_TYPE_Q6_K : FX_TYPE_Q4_K;
        assert_int_equal(type_of(m, l, "ffn_down_exps.weight"), more);
        assert_int_equal(type_of(m, l, "ffn_down_shexp.weight"), more);
        assert_int_equal(type_of(m, l, "ffn_up_exps.weight"), FX_TYPE_Q4_K);
        assert_int_equal(type_of(m, l, "ffn_gate_inp.weight"), FX_TYPE_F32);
        assert_int_equal(type_of(m, l, "ffn_gate_inp_shexp.weight"), FX_TYPE_F32);
    }
    fx_synth_model_free(m);

    /* And llama-quantize's own output: the Q8_0 fixture, reproduced byte for byte from its F32
     * master by the same rules (fixtures/qwen35/README.md: conv1d and the 1-D tensors F32). */
    char in[4096], want[4096];
    snprintf(in, sizeof in, "%s", fx_test_fixture("qwen35/models/qwen35-tiny.F32.gguf"));
    snprintf(want, sizeof want, "%s", fx_test_fixture("qwen35/models/qwen35-tiny.Q8_0.gguf"));
    const char *out = fx_test_tmpfile("qwen35-tiny.Q8_0.gguf");
    struct fx_quantize_params p = fx_quantize_default_params();
    p.type = "Q8_0";
    p.n_threads = 2;
    struct fx_error err;
    if (fx_model_quantize(in, out, &p, &err) != FX_OK)
        fail_msg("quantize: %s", err.msg);
    size_t n_got, n_want;
    char *got = fx_test_read_file(out, &n_got), *ref = fx_test_read_file(want, &n_want);
    assert_int_equal(n_got, n_want);
    assert_true(memcmp(got, ref, n_got) == 0);
    free(got);
    free(ref);
}

static double sd_of(const float *x, size_t n) {
    double sum = 0, sum2 = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i]))
            fail_msg("value %zu is %g", i, x[i]);
        sum += x[i], sum2 += (double)x[i] * x[i];
    }
    return sqrt(sum2 / (double)n - (sum / (double)n) * (sum / (double)n));
}

/* The tiny shapes as files: the keys llama.cpp reads for the layer pattern and the DeltaNet,
 * and ferrox's loader takes 4 trunk layers and the MTP block; the trunk and the MTP head (fed
 * the trunk's hidden states, as a drafter does) give finite logits of sd O(1). */
FX_TEST(synth_qwen35_tiny_shapes_run_trunk_and_mtp_head) {
    static const char *const shapes[] = {"tiny-qwen35", "tiny-qwen35moe"};
    for (size_t s = 0; s < 2; s++) {
        const char *path = fx_test_tmpfile("synth-qwen35.gguf");
        struct fx_synth_model *plan = plan_ok(shapes[s], "Q4_K_M");
        struct fx_synth_write_params wp = {.n_threads = 2};
        struct fx_error err;
        if (fx_synth_write(plan, path, &wp, &err) != FX_OK)
            fail_msg("%s: %s", shapes[s], err.msg);
        fx_synth_model_free(plan);
        struct fx_model *m;
        if (fx_model_load(path, NULL, &m, &err) != FX_OK)
            fail_msg("%s: %s", shapes[s], err.msg);
        const struct fx_gguf *g = fx_model_gguf(m);
        const char *arch = s ? "qwen35moe" : "qwen35";
        char key[96];
        uint32_t u;
        const void *arr;
        uint64_t n;
        snprintf(key, sizeof key, "%s.block_count", arch);
        assert_int_equal(fx_gguf_get_u32(g, key, &u, NULL), FX_OK);
        assert_int_equal(u, 5);
        snprintf(key, sizeof key, "%s.ssm.inner_size", arch);
        assert_int_equal(fx_gguf_get_u32(g, key, &u, NULL), FX_OK);
        assert_int_equal(u, 4 * 64);
        snprintf(key, sizeof key, "%s.rope.dimension_count", arch);
        assert_int_equal(fx_gguf_get_u32(g, key, &u, NULL), FX_OK);
        assert_int_equal(u, 16);
        snprintf(key, sizeof key, "%s.rope.dimension_sections", arch);
        assert_int_equal(fx_gguf_get_arr(g, key, FX_GGUF_INT32, &arr, &n, NULL), FX_OK);
        assert_int_equal(n, 4);
        assert_memory_equal(arr, ((const int32_t[]){3, 3, 2, 0}), sizeof(int32_t[4]));
        /* as in llama.cpp's qwen35moe fixture: the MoE has no dense FFN width */
        snprintf(key, sizeof key, "%s.feed_forward_length", arch);
        assert_int_equal(fx_gguf_get_u32(g, key, &u, NULL), s ? FX_ERR_NOT_FOUND : FX_OK);
        assert_int_equal(fx_model_n_layer(m), 4);
        assert_int_equal(fx_model_n_nextn(m), 1);

        struct fx_context_params cp = fx_context_default_params();
        cp.n_ctx = 16;
        cp.n_threads = 2;
        struct fx_context *ctx;
        assert_int_equal(fx_context_create(m, &cp, &ctx, &err), FX_OK);
        const fx_token ids[] = {1, 300, 301, 1000, 2047, 5, 700, 42};
        size_t nv = (size_t)fx_model_n_vocab(m), ne = (size_t)fx_model_n_embd(m);
        float *logits = malloc(sizeof(float) * 8 * nv);
        float *hidden = calloc(9 * ne, sizeof(float)); /* row 0 zeros, then the trunk's */
        assert_non_null(logits);
        assert_non_null(hidden);
        assert_int_equal(fx_forward_batch_with_hidden(ctx, ids, 8, 0, logits, hidden + ne, &err),
                         FX_OK);
        double sd = sd_of(logits, 8 * nv);
        if (!(sd > 0.1 && sd < 10))
            fail_msg("%s: trunk logits have sd %g", shapes[s], sd);
        assert_int_equal(fx_forward_mtp(ctx, ids, hidden, 8, 0, logits, NULL, &err), FX_OK);
        sd = sd_of(logits, 8 * nv);
        if (!(sd > 0.1 && sd < 10))
            fail_msg("%s: MTP logits have sd %g", shapes[s], sd);
        free(logits);
        free(hidden);
        fx_context_free(ctx);
        fx_model_free(m);
    }
}
