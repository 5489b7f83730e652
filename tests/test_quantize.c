/* fx_model_quantize and `ferrox quantize` against llama-quantize: the fixtures that llama.cpp
 * quantized from the F32 masters (fixtures/README.md, "Files and quantization") are reproduced
 * byte for byte, whole files included (metadata order, general.quantization_version, tensor
 * order, types, data, padding); the per-tensor mixes follow llama.cpp's rules; the outputs run
 * within the decoder's golden tolerances; bad input fails cleanly. */
#include "fx_test.h"

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "ferrox.h"
#include "golden.h"
#include "model/ftype.h"
#include "model/quant.h"

static void quantize_ok(const char *in, const char *out, const char *type, bool pure) {
    struct fx_quantize_params p = fx_quantize_default_params();
    p.type = type;
    p.pure = pure;
    p.n_threads = 2;
    struct fx_error err;
    if (fx_model_quantize(in, out, &p, &err) != FX_OK)
        fail_msg("quantize %s -> %s %s: %s", in, type, out, err.msg);
}

/* The two files are equal byte for byte; on a difference, says where (and in which tensor). */
static void assert_same_file(const char *got_path, const char *want_path) {
    size_t ng, nw;
    char *got = fx_test_read_file(got_path, &ng), *want = fx_test_read_file(want_path, &nw);
    size_t n = ng < nw ? ng : nw, at = 0;
    while (at < n && got[at] == want[at])
        at++;
    if (at < n || ng != nw) {
        struct fx_gguf *g;
        const char *where = "the header or metadata";
        if (fx_gguf_open(want_path, &g, NULL) == FX_OK) {
            uint64_t data = fx_gguf_data_offset(g);
            for (int64_t i = 0; i < fx_gguf_n_tensors(g) && at >= data; i++) {
                const struct fx_tensor_view *t = fx_gguf_tensor_at(g, i);
                if (at >= data + t->offset && at < data + t->offset + t->n_bytes)
                    where = t->name;
            }
            fail_msg("%s differs from %s at byte %zu (%s); sizes %zu and %zu", got_path, want_path,
                     at, where, ng, nw);
        }
        fail_msg("%s differs from %s at byte %zu", got_path, want_path, at);
    }
    free(got);
    free(want);
}

/* Every fixture the README says llama-quantize made with --pure from an F32 master. The K-quant
 * ladder was made with the _M names (so general.file_type says 12, 15, 17). */
FX_TEST(quantize_pure_fixtures_are_byte_identical) {
    static const struct {
        const char *model, *type, *fixture;
    } cases[] = {
        {"llama-tiny", "F16", "F16"},        {"llama-tiny", "BF16", "BF16"},
        {"llama-tiny", "Q8_0", "Q8_0"},      {"llama-tiny", "Q6_K", "Q6_K"},
        {"llama-tiny", "Q5_1", "Q5_1"},      {"llama-tiny", "Q5_0", "Q5_0"},
        {"llama-tiny", "Q5_K_M", "Q5_K"},    {"llama-tiny", "Q4_1", "Q4_1"},
        {"llama-tiny", "Q4_0", "Q4_0"},      {"llama-tiny", "Q4_K_M", "Q4_K"},
        {"llama-tiny", "Q3_K_M", "Q3_K"},    {"llama-tiny", "Q2_K", "Q2_K"},
        {"llama-tiny-tied", "Q8_0", "Q8_0"}, {"qwen2-tiny", "Q8_0", "Q8_0"},
        {"qwen3-tiny", "Q8_0", "Q8_0"},      {"gemma3-tiny", "Q8_0", "Q8_0"},
        {"qwen3moe-tiny", "Q8_0", "Q8_0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char in[128], want[128], out[128];
        snprintf(in, sizeof in, "models/%s.F32.gguf", cases[i].model);
        snprintf(want, sizeof want, "models/%s.%s.gguf", cases[i].model, cases[i].fixture);
        snprintf(out, sizeof out, "%s.%s.gguf", cases[i].model, cases[i].type);
        char in_path[4096], want_path[4096];
        snprintf(in_path, sizeof in_path, "%s", fx_test_fixture(in));
        snprintf(want_path, sizeof want_path, "%s", fx_test_fixture(want));
        const char *out_path = fx_test_tmpfile(out);
        quantize_ok(in_path, out_path, cases[i].type, true);
        assert_same_file(out_path, want_path);
    }
}

static enum fx_type type_of(const struct fx_gguf *g, const char *name) {
    const struct fx_tensor_view *t = fx_gguf_find_tensor(g, name);
    if (!t)
        fail_msg("no tensor '%s'", name);
    return t->type;
}

/* The normal Q4_K_M mix (no --pure): Q6_K for the tied embedding (it is also the output) and
 * for attn_v and ffn_down of the layers llama.cpp gives more bits (here the last of 2), Q4_K for
 * the other weights, F32 for the 1-D tensors. */
FX_TEST(quantize_q4_k_m_mix_is_llama_cpps) {
    char in[4096], want[4096];
    snprintf(in, sizeof in, "%s", fx_test_fixture("models/qwen3-tiny.F32.gguf"));
    snprintf(want, sizeof want, "%s", fx_test_fixture("models/qwen3-tiny.Q4_K_M.gguf"));
    const char *out = fx_test_tmpfile("qwen3-tiny.Q4_K_M.gguf");
    quantize_ok(in, out, "Q4_K_M", false);
    struct fx_gguf *g;
    assert_int_equal(fx_gguf_open(out, &g, NULL), FX_OK);
    for (int64_t i = 0; i < fx_gguf_n_tensors(g); i++) {
        const struct fx_tensor_view *t = fx_gguf_tensor_at(g, i);
        enum fx_type want_type = FX_TYPE_Q4_K;
        if (t->n_dims == 1)
            want_type = FX_TYPE_F32;
        else if (strcmp(t->name, "token_embd.weight") == 0 ||
                 strcmp(t->name, "blk.1.attn_v.weight") == 0 ||
                 strcmp(t->name, "blk.1.ffn_down.weight") == 0)
            want_type = FX_TYPE_Q6_K;
        if (t->type != want_type)
            fail_msg("%s is %s, expected %s", t->name, fx_type_name(t->type),
                     fx_type_name(want_type));
    }
    uint32_t ftype, qv;
    assert_int_equal(fx_gguf_get_u32(g, "general.file_type", &ftype, NULL), FX_OK);
    assert_int_equal(ftype, 15);
    assert_int_equal(fx_gguf_get_u32(g, "general.quantization_version", &qv, NULL), FX_OK);
    assert_int_equal(qv, 2);
    fx_gguf_free(g);
    assert_same_file(out, want);
}

/* IQ4_NL and IQ4_XS (fixtures/iq4/README.md): llama-quantize's default mix, which on llama-tiny
 * (2 layers, 2 query heads per KV head) leaves only the output in Q6_K. */
FX_TEST(quantize_iq4_fixtures_are_byte_identical) {
    static const char *const types[] = {"IQ4_NL", "IQ4_XS"};
    char in[4096], want[4096], rel[128];
    snprintf(in, sizeof in, "%s", fx_test_fixture("models/llama-tiny.F32.gguf"));
    for (size_t i = 0; i < 2; i++) {
        snprintf(rel, sizeof rel, "iq4/models/llama-tiny.%s.gguf", types[i]);
        snprintf(want, sizeof want, "%s", fx_test_fixture(rel));
        snprintf(rel, sizeof rel, "llama-tiny.%s.gguf", types[i]);
        const char *out = fx_test_tmpfile(rel);
        quantize_ok(in, out, types[i], false);
        assert_same_file(out, want);
    }
}

/* MXFP4_MOE: expert tensors MXFP4, every other 2-D weight Q8_0, router and biases F32. */
FX_TEST(quantize_mxfp4_moe_mix_is_llama_cpps) {
    char in[4096], want[4096];
    snprintf(in, sizeof in, "%s", fx_test_fixture("models/gptoss-tiny.F32.gguf"));
    snprintf(want, sizeof want, "%s", fx_test_fixture("models/gptoss-tiny.MXFP4_MOE.gguf"));
    const char *out = fx_test_tmpfile("gptoss-tiny.MXFP4_MOE.gguf");
    quantize_ok(in, out, "mxfp4_moe", false);
    assert_same_file(out, want);
}

/* ---- the rules on shapes the fixtures do not have ------------------------------------------- */

#define MAX_TENSORS 96

struct model_tensors {
    struct fx_quant_tensor t[MAX_TENSORS];
    char names[MAX_TENSORS][64];
    int n;
};

static void add_tensor(struct model_tensors *m, const char *name, int64_t ne0, int64_t ne1,
                       int64_t ne2) {
    assert_true(m->n < MAX_TENSORS);
    snprintf(m->names[m->n], sizeof m->names[0], "%s", name);
    m->t[m->n] = (struct fx_quant_tensor){
        .name = m->names[m->n], .type = FX_TYPE_F32, .ne = {ne0, ne1, ne2 ? ne2 : 1, 1}};
    m->n++;
}

/* A dense model of n_layer layers: the tensors the mixes treat differently, in file order. */
static void dense_model(struct model_tensors *m, int n_layer, int64_t d, bool tied) {
    m->n = 0;
    add_tensor(m, "token_embd.weight", d, 1000, 0);
    for (int l = 0; l < n_layer; l++) {
        char name[64];
        static const char *const parts[] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                            "ffn_gate", "ffn_up", "ffn_down"};
        for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, parts[k]);
            add_tensor(m, name, d, d, 0);
        }
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        add_tensor(m, name, d, 0, 0);
    }
    add_tensor(m, "output_norm.weight", d, 0, 0);
    if (!tied)
        add_tensor(m, "output.weight", d, 1000, 0);
}

static enum fx_type chosen(const struct model_tensors *m, const enum fx_type *types,
                           const char *name) {
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->t[i].name, name) == 0)
            return types[i];
    fail_msg("no tensor %s", name);
    return FX_TYPE_COUNT;
}

static void expect(const struct model_tensors *m, const enum fx_type *types, const char *what,
                   const char *name, enum fx_type want) {
    enum fx_type got = chosen(m, types, name);
    if (got != want)
        fail_msg("%s: %s is %s, expected %s", what, name, fx_type_name(got), fx_type_name(want));
}

/* llama.cpp's rules on an 8-layer Llama with 32 query and 8 KV heads. "More bits" layers of 8
 * are 0 (first eighth), 7 (last eighth) and 3, 6 (every third from layer 1). Expected types
 * worked out by hand from llama.cpp's llama_tensor_get_type for each file type. */
FX_TEST(quantize_mix_rules_for_an_8_layer_llama) {
    static const struct {
        const char *type;
        enum fx_type attn_v[8], ffn_down[8], attn_output, attn_q, output, embd;
    } cases[] = {
#define ALL8(t) {t, t, t, t, t, t, t, t}
        {"Q4_K_M",
         {FX_TYPE_Q6_K, FX_TYPE_Q4_K, FX_TYPE_Q4_K, FX_TYPE_Q6_K, FX_TYPE_Q4_K, FX_TYPE_Q4_K,
          FX_TYPE_Q6_K, FX_TYPE_Q6_K},
         {FX_TYPE_Q6_K, FX_TYPE_Q4_K, FX_TYPE_Q4_K, FX_TYPE_Q6_K, FX_TYPE_Q4_K, FX_TYPE_Q4_K,
          FX_TYPE_Q6_K, FX_TYPE_Q6_K},
         FX_TYPE_Q4_K,
         FX_TYPE_Q4_K,
         FX_TYPE_Q6_K,
         FX_TYPE_Q4_K},
        {"Q5_K_M",
         {FX_TYPE_Q6_K, FX_TYPE_Q5_K, FX_TYPE_Q5_K, FX_TYPE_Q6_K, FX_TYPE_Q5_K, FX_TYPE_Q5_K,
          FX_TYPE_Q6_K, FX_TYPE_Q6_K},
         {FX_TYPE_Q6_K, FX_TYPE_Q5_K, FX_TYPE_Q5_K, FX_TYPE_Q6_K, FX_TYPE_Q5_K, FX_TYPE_Q5_K,
          FX_TYPE_Q6_K, FX_TYPE_Q6_K},
         FX_TYPE_Q5_K,
         FX_TYPE_Q5_K,
         FX_TYPE_Q6_K,
         FX_TYPE_Q5_K},
        /* Q3_K_M: V of the first two layers Q5_K, the rest Q4_K; every ffn_down Q4_K (the
         * first sixteenth, Q5_K, is empty at 8 layers); attn_output Q4_K. */
        {"Q3_K_M",
         {FX_TYPE_Q5_K, FX_TYPE_Q5_K, FX_TYPE_Q4_K, FX_TYPE_Q4_K, FX_TYPE_Q4_K, FX_TYPE_Q4_K,
          FX_TYPE_Q4_K, FX_TYPE_Q4_K},
         ALL8(FX_TYPE_Q4_K),
         FX_TYPE_Q4_K,
         FX_TYPE_Q3_K,
         FX_TYPE_Q6_K,
         FX_TYPE_Q3_K},
        {"Q3_K_L", ALL8(FX_TYPE_Q5_K), ALL8(FX_TYPE_Q5_K), FX_TYPE_Q5_K, FX_TYPE_Q3_K, FX_TYPE_Q6_K,
         FX_TYPE_Q3_K},
        {"Q3_K_S", ALL8(FX_TYPE_Q3_K), ALL8(FX_TYPE_Q3_K), FX_TYPE_Q3_K, FX_TYPE_Q3_K, FX_TYPE_Q6_K,
         FX_TYPE_Q3_K},
        /* Q4_K_S: V of the first four layers and ffn_down of the first eighth in Q5_K. */
        {"Q4_K_S",
         {FX_TYPE_Q5_K, FX_TYPE_Q5_K, FX_TYPE_Q5_K, FX_TYPE_Q5_K, FX_TYPE_Q4_K, FX_TYPE_Q4_K,
          FX_TYPE_Q4_K, FX_TYPE_Q4_K},
         {FX_TYPE_Q5_K, FX_TYPE_Q4_K, FX_TYPE_Q4_K, FX_TYPE_Q4_K, FX_TYPE_Q4_K, FX_TYPE_Q4_K,
          FX_TYPE_Q4_K, FX_TYPE_Q4_K},
         FX_TYPE_Q4_K,
         FX_TYPE_Q4_K,
         FX_TYPE_Q6_K,
         FX_TYPE_Q4_K},
        /* Q2_K: V in Q4_K (4 query heads per KV head), ffn_down and attn_output Q3_K. */
        {"Q2_K", ALL8(FX_TYPE_Q4_K), ALL8(FX_TYPE_Q3_K), FX_TYPE_Q3_K, FX_TYPE_Q2_K, FX_TYPE_Q6_K,
         FX_TYPE_Q2_K},
        /* The 32-wide types only move the output to Q6_K; Q8_0 keeps it. */
        {"Q4_0", ALL8(FX_TYPE_Q4_0), ALL8(FX_TYPE_Q4_0), FX_TYPE_Q4_0, FX_TYPE_Q4_0, FX_TYPE_Q6_K,
         FX_TYPE_Q4_0},
        {"Q8_0", ALL8(FX_TYPE_Q8_0), ALL8(FX_TYPE_Q8_0), FX_TYPE_Q8_0, FX_TYPE_Q8_0, FX_TYPE_Q8_0,
         FX_TYPE_Q8_0},
        {"F16", ALL8(FX_TYPE_F16), ALL8(FX_TYPE_F16), FX_TYPE_F16, FX_TYPE_F16, FX_TYPE_F16,
         FX_TYPE_F16},
        /* IQ4_NL, IQ4_XS: V in Q5_K (4 query heads per KV head), ffn_down of the first eighth in
         * Q5_K (no importance matrix). */
        {"IQ4_NL",
         ALL8(FX_TYPE_Q5_K),
         {FX_TYPE_Q5_K, FX_TYPE_IQ4_NL, FX_TYPE_IQ4_NL, FX_TYPE_IQ4_NL, FX_TYPE_IQ4_NL,
          FX_TYPE_IQ4_NL, FX_TYPE_IQ4_NL, FX_TYPE_IQ4_NL},
         FX_TYPE_IQ4_NL,
         FX_TYPE_IQ4_NL,
         FX_TYPE_Q6_K,
         FX_TYPE_IQ4_NL},
        {"IQ4_XS",
         ALL8(FX_TYPE_Q5_K),
         {FX_TYPE_Q5_K, FX_TYPE_IQ4_XS, FX_TYPE_IQ4_XS, FX_TYPE_IQ4_XS, FX_TYPE_IQ4_XS,
          FX_TYPE_IQ4_XS, FX_TYPE_IQ4_XS, FX_TYPE_IQ4_XS},
         FX_TYPE_IQ4_XS,
         FX_TYPE_IQ4_XS,
         FX_TYPE_Q6_K,
         FX_TYPE_IQ4_XS},
#undef ALL8
    };
    struct model_tensors m;
    dense_model(&m, 8, 256, false);
    struct fx_quant_model qm = {"llama", 8, 32, 8, 0};
    enum fx_type types[MAX_TENSORS];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint32_t ftype;
        assert_true(fx_file_type_from_name(cases[c].type, &ftype));
        assert_int_equal(fx_quant_choose_types(&qm, ftype, false, m.t, m.n, types, NULL), FX_OK);
        for (int l = 0; l < 8; l++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.attn_v.weight", l);
            expect(&m, types, cases[c].type, name, cases[c].attn_v[l]);
            snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l);
            expect(&m, types, cases[c].type, name, cases[c].ffn_down[l]);
            snprintf(name, sizeof name, "blk.%d.attn_output.weight", l);
            expect(&m, types, cases[c].type, name, cases[c].attn_output);
            snprintf(name, sizeof name, "blk.%d.attn_q.weight", l);
            expect(&m, types, cases[c].type, name, cases[c].attn_q);
            snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
            expect(&m, types, cases[c].type, name, FX_TYPE_F32);
        }
        expect(&m, types, cases[c].type, "output.weight", cases[c].output);
        expect(&m, types, cases[c].type, "token_embd.weight", cases[c].embd);
        /* --pure: every weight the base type, the output included. */
        assert_int_equal(fx_quant_choose_types(&qm, ftype, true, m.t, m.n, types, NULL), FX_OK);
        expect(&m, types, "pure", "output.weight", cases[c].attn_q);
        expect(&m, types, "pure", "blk.7.attn_v.weight", cases[c].attn_q);
    }
}

/* The rules that depend on the model rather than the layer: a tied embedding is the output (Q6_K);
 * Mixtral-style 8-expert models get V and K in Q8_0 and attn_output in Q5_K; 80-layer Llamas
 * with grouped KV heads get V in Q5_K where the mix says Q4_K; rows that are not whole 256-blocks
 * fall back to a 32-wide type (the output to Q8_0). */
FX_TEST(quantize_mix_rules_that_depend_on_the_model) {
    struct model_tensors m;
    enum fx_type types[MAX_TENSORS];
    uint32_t q4km, q2k;
    assert_true(fx_file_type_from_name("Q4_K_M", &q4km));
    assert_true(fx_file_type_from_name("q2_k", &q2k));

    dense_model(&m, 2, 256, true);
    struct fx_quant_model llama2 = {"llama", 2, 4, 2, 0};
    assert_int_equal(fx_quant_choose_types(&llama2, q4km, false, m.t, m.n, types, NULL), FX_OK);
    expect(&m, types, "tied", "token_embd.weight", FX_TYPE_Q6_K);

    dense_model(&m, 2, 256, false);
    struct fx_quant_model mixtral = {"llama", 2, 32, 8, 8};
    assert_int_equal(fx_quant_choose_types(&mixtral, q4km, false, m.t, m.n, types, NULL), FX_OK);
    expect(&m, types, "8 experts", "blk.0.attn_v.weight", FX_TYPE_Q8_0);
    expect(&m, types, "8 experts", "blk.0.attn_k.weight", FX_TYPE_Q8_0);
    expect(&m, types, "8 experts", "blk.1.attn_output.weight", FX_TYPE_Q5_K);
    expect(&m, types, "8 experts", "token_embd.weight", FX_TYPE_Q4_K);
    uint32_t iq4nl;
    assert_true(fx_file_type_from_name("IQ4_NL", &iq4nl));
    assert_int_equal(fx_quant_choose_types(&mixtral, iq4nl, false, m.t, m.n, types, NULL), FX_OK);
    expect(&m, types, "8 experts, IQ4_NL", "blk.1.attn_output.weight", FX_TYPE_Q5_K);
    expect(&m, types, "8 experts, IQ4_NL", "blk.1.attn_v.weight", FX_TYPE_Q8_0);
    expect(&m, types, "8 experts, IQ4_NL", "blk.1.attn_q.weight", FX_TYPE_IQ4_NL);

    /* Layer 1 of 10 V tensors is not a "more bits" one: Q4_K, raised to Q5_K for a 70B. */
    dense_model(&m, 10, 256, false);
    struct fx_quant_model llama70 = {"llama", 80, 64, 8, 0};
    assert_int_equal(fx_quant_choose_types(&llama70, q4km, false, m.t, m.n, types, NULL), FX_OK);
    expect(&m, types, "70B", "blk.1.attn_v.weight", FX_TYPE_Q5_K);
    struct fx_quant_model llama65 = {"llama", 80, 64, 64, 0};
    assert_int_equal(fx_quant_choose_types(&llama65, q4km, false, m.t, m.n, types, NULL), FX_OK);
    expect(&m, types, "65B", "blk.1.attn_v.weight", FX_TYPE_Q4_K);

    /* Rows of 128 (qwen2-tiny-like): K types fall back, also under --pure. */
    dense_model(&m, 2, 128, false);
    assert_int_equal(fx_quant_choose_types(&llama2, q4km, false, m.t, m.n, types, NULL), FX_OK);
    expect(&m, types, "rows of 128", "output.weight", FX_TYPE_Q8_0);
    expect(&m, types, "rows of 128", "token_embd.weight", FX_TYPE_Q5_0);
    expect(&m, types, "rows of 128", "blk.1.ffn_down.weight", FX_TYPE_Q8_0); /* Q6_K -> */
    expect(&m, types, "rows of 128", "blk.0.attn_q.weight", FX_TYPE_Q5_0);
    assert_int_equal(fx_quant_choose_types(&llama2, q2k, true, m.t, m.n, types, NULL), FX_OK);
    expect(&m, types, "rows of 128, pure Q2_K", "blk.0.attn_q.weight", FX_TYPE_IQ4_NL);
    uint32_t iq4xs;
    assert_true(fx_file_type_from_name("iq4_xs", &iq4xs));
    assert_int_equal(fx_quant_choose_types(&llama2, iq4xs, false, m.t, m.n, types, NULL), FX_OK);
    expect(&m, types, "rows of 128, IQ4_XS", "blk.0.attn_q.weight", FX_TYPE_IQ4_NL);
    expect(&m, types, "rows of 128, IQ4_XS", "output.weight", FX_TYPE_Q8_0);

    /* Rows of 100 fit no 32-wide block either: K types end in F16; 32-wide types, including
     * the Q8_0 the mixes give the output, are an error naming the tensor (as in llama.cpp). */
    dense_model(&m, 1, 100, false);
    assert_int_equal(fx_quant_choose_types(&llama2, q4km, true, m.t, m.n, types, NULL), FX_OK);
    expect(&m, types, "rows of 100, pure", "blk.0.attn_q.weight", FX_TYPE_F16);
    expect(&m, types, "rows of 100, pure", "output.weight", FX_TYPE_F16);
    struct fx_error err;
    assert_int_equal(fx_quant_choose_types(&llama2, q4km, false, m.t, m.n, types, &err),
                     FX_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "'output.weight'"));
    assert_non_null(strstr(err.msg, "Q8_0"));
}

/* Expert tensors take their layer from the name (not a counter); a layer outside the model is an
 * error. */
FX_TEST(quantize_expert_layers_come_from_names) {
    struct model_tensors m = {0};
    add_tensor(&m, "blk.1.ffn_down_exps.weight", 256, 256, 4);
    add_tensor(&m, "blk.0.ffn_down_exps.weight", 256, 256, 4);
    add_tensor(&m, "blk.0.ffn_gate_inp.weight", 256, 4, 0);
    add_tensor(&m, "output.weight", 256, 1000, 0);
    struct fx_quant_model moe = {"qwen3moe", 2, 4, 2, 4};
    uint32_t q4km;
    assert_true(fx_file_type_from_name("Q4_K", &q4km)); /* llama-quantize's alias */
    enum fx_type types[MAX_TENSORS];
    assert_int_equal(fx_quant_choose_types(&moe, q4km, false, m.t, m.n, types, NULL), FX_OK);
    expect(&m, types, "moe", "blk.0.ffn_down_exps.weight", FX_TYPE_Q4_K);
    expect(&m, types, "moe", "blk.1.ffn_down_exps.weight", FX_TYPE_Q6_K);
    expect(&m, types, "moe", "blk.0.ffn_gate_inp.weight", FX_TYPE_F32); /* routers stay */
    struct fx_quant_model one = {"qwen3moe", 1, 4, 2, 4};
    struct fx_error err;
    assert_int_equal(fx_quant_choose_types(&one, q4km, false, m.t, m.n, types, &err),
                     FX_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "blk.1.ffn_down_exps.weight"));
}

/* llama.cpp's order: tensors outside the blocks, then blocks by number (10 after 9), each by
 * name. */
FX_TEST(quantize_tensor_order_is_llama_cpps) {
    struct model_tensors m = {0};
    static const char *const names[] = {"blk.10.a.weight",   "token_embd.weight", "blk.9.b.weight",
                                        "blk.9.a.weight",    "output.weight",     "blk.2.z.weight",
                                        "output_norm.weight"};
    static const int want[] = {4, 6, 1, 5, 3, 2, 0};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        add_tensor(&m, names[i], 32, 32, 0);
    int64_t order[MAX_TENSORS];
    assert_int_equal(fx_quant_order(m.t, m.n, order, NULL), FX_OK);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        assert_int_equal(order[i], want[i]);
}

/* ---- the output runs --------------------------------------------------------------------------
 */

/* `ferrox eval` on a quantized output against the llama.cpp golden of the same file type, with
 * the decoder tests' tolerances for quantized files (test_decoder_golden.c): max |diff| 1.0 and
 * RMS 0.15; for MoE files one position may exceed the max and the RMS bound is 0.2. */
static void eval_matches_golden(const char *model, const char *stem, bool moe) {
    struct fx_golden g;
    fx_test_golden_load(stem, &g);
    char ids[512] = "", *p = ids;
    for (int i = 0; i < g.n_prompt; i++)
        p += snprintf(p, sizeof ids - (size_t)(p - ids), i ? ",%d" : "%d", g.prompt[i]);
    const char *logits_path = fx_test_tmpfile("quantized.logits");
    const char *args[] = {"eval", "-m", model, "--ids", ids, "--logits-out", logits_path, NULL};
    char *err;
    int rc = fx_test_run_cli(args, NULL, NULL, &err);
    if (rc != 0)
        fail_msg("ferrox eval %s exited %d: %s", model, rc, err);
    free(err);
    size_t size;
    float *got = (float *)fx_test_read_file(logits_path, &size);
    assert_int_equal(size, sizeof(float) * (size_t)(g.n_prompt * g.n_vocab));
    double sq = 0;
    int over = 0;
    for (int r = 0; r < g.n_prompt; r++) {
        double row_max = 0;
        for (int v = 0; v < g.n_vocab; v++) {
            double d = fabs((double)got[r * g.n_vocab + v] - g.logits[r * g.n_vocab + v]);
            if (!(d <= row_max))
                row_max = isnan(d) ? INFINITY : d;
            sq += d * d;
        }
        over += row_max > 1.0;
    }
    double rms = sqrt(sq / ((double)g.n_prompt * g.n_vocab));
    print_message("  %s: %d positions over 1.0, rms %.4f\n", stem, over, rms);
    assert_true(over <= (moe ? 1 : 0));
    assert_true(rms <= (moe ? 0.2 : 0.15));
    free(got);
    fx_test_golden_free(&g);
}

FX_TEST(quantize_outputs_match_the_goldens) {
    char in[4096];
    snprintf(in, sizeof in, "%s", fx_test_fixture("models/qwen3-tiny.F32.gguf"));
    const char *q4km = fx_test_tmpfile("golden-qwen3.Q4_K_M.gguf");
    quantize_ok(in, q4km, "Q4_K_M", false);
    eval_matches_golden(q4km, "qwen3-tiny.Q4_K_M.P1", false);

    snprintf(in, sizeof in, "%s", fx_test_fixture("models/llama-tiny.F32.gguf"));
    const char *q2k = fx_test_tmpfile("golden-llama.Q2_K.gguf");
    quantize_ok(in, q2k, "Q2_K", true);
    eval_matches_golden(q2k, "llama-tiny.Q2_K.P1", false);

    snprintf(in, sizeof in, "%s", fx_test_fixture("models/gptoss-tiny.F32.gguf"));
    const char *mx = fx_test_tmpfile("golden-gptoss.MXFP4_MOE.gguf");
    quantize_ok(in, mx, "MXFP4_MOE", false);
    eval_matches_golden(mx, "gptoss-tiny.MXFP4_MOE.P1", true);
}

/* Rows of 128 send Q4_K_M through its fallbacks; the file still loads and runs. */
FX_TEST(quantize_fallback_types_load_and_run) {
    char in[4096];
    snprintf(in, sizeof in, "%s", fx_test_fixture("models/qwen2-tiny.F32.gguf"));
    const char *out = fx_test_tmpfile("qwen2-tiny.Q4_K_M.gguf");
    quantize_ok(in, out, "Q4_K_M", false);
    struct fx_model *m;
    struct fx_error err;
    if (fx_model_load(out, NULL, &m, &err) != FX_OK)
        fail_msg("%s: %s", out, err.msg);
    const struct fx_gguf *g = fx_model_gguf(m);
    assert_int_equal(type_of(g, "output.weight"), FX_TYPE_Q8_0);
    assert_int_equal(type_of(g, "token_embd.weight"), FX_TYPE_Q5_0);
    assert_int_equal(type_of(g, "blk.0.attn_q.weight"), FX_TYPE_Q5_0);
    assert_int_equal(type_of(g, "blk.1.ffn_down.weight"), FX_TYPE_Q8_0);
    assert_int_equal(type_of(g, "blk.0.attn_q.bias"), FX_TYPE_F32);
    struct fx_context_params cp = fx_context_default_params();
    cp.n_ctx = 16;
    cp.n_threads = 2;
    struct fx_context *ctx;
    assert_int_equal(fx_context_create(m, &cp, &ctx, &err), FX_OK);
    const fx_token prompt[] = {1, 85, 406, 80};
    float logits[4 * 512];
    assert_int_equal(fx_forward_batch(ctx, prompt, 4, 0, logits, &err), FX_OK);
    for (int i = 0; i < 4 * 512; i++)
        assert_true(isfinite(logits[i]));
    fx_context_free(ctx);
    fx_model_free(m);
}

/* ---- the command --------------------------------------------------------------------------------
 */

FX_TEST(quantize_cli_writes_the_fixture) {
    char in[4096], want[4096];
    snprintf(in, sizeof in, "%s", fx_test_fixture("models/llama-tiny.F32.gguf"));
    snprintf(want, sizeof want, "%s", fx_test_fixture("models/llama-tiny.Q4_0.gguf"));
    const char *out = fx_test_tmpfile("cli.Q4_0.gguf");
    const char *args[] = {"quantize", "--pure", in, out, "q4_0", "-t", "2", NULL};
    char *so, *se;
    int rc = fx_test_run_cli(args, NULL, &so, &se);
    if (rc != 0)
        fail_msg("ferrox quantize exited %d: %s", rc, se);
    assert_non_null(strstr(so, "Q4_0 (pure)"));
    assert_null(strchr(se, '\r')); /* no progress bar when stderr is not a terminal */
    assert_same_file(out, want);
    free(so);
    free(se);
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

FX_TEST(quantize_cli_rejects_bad_input) {
    char f32[4096], q8[4096];
    snprintf(f32, sizeof f32, "%s", fx_test_fixture("models/llama-tiny.F32.gguf"));
    snprintf(q8, sizeof q8, "%s", fx_test_fixture("models/llama-tiny.Q8_0.gguf"));
    const char *out = fx_test_tmpfile("bad.gguf");
    static const struct {
        const char *in, *out, *type;
        int rc;
        const char *message;
    } cases[] = {
        {NULL, NULL, "Q9_K", 2, "unknown type 'Q9_K'"},
        {NULL, NULL, "IQ2_XS", 2, "unknown type 'IQ2_XS'"},
        {"/nonexistent/model.gguf", NULL, "Q4_0", 1, "/nonexistent/model.gguf"},
        {"", "/nonexistent/dir/out.gguf", "Q4_0", 1, "/nonexistent/dir/out.gguf"},
        {"q8", NULL, "Q4_0", 1, "requantizing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *in = !cases[i].in || !*cases[i].in    ? f32
                         : strcmp(cases[i].in, "q8") == 0 ? q8
                                                          : cases[i].in;
        const char *args[] = {"quantize", in, cases[i].out ? cases[i].out : out, cases[i].type,
                              NULL};
        char *se;
        int rc = fx_test_run_cli(args, NULL, NULL, &se);
        if (rc != cases[i].rc || !strstr(se, cases[i].message))
            fail_msg("case %zu: exit %d, stderr '%s'", i, rc, se);
        /* one line */
        assert_ptr_equal(strchr(se, '\n'), se + strlen(se) - 1);
        free(se);
    }
    /* Usage errors. */
    const char *missing[] = {"quantize", f32, out, NULL};
    assert_int_equal(fx_test_run_cli(missing, NULL, NULL, NULL), 2);
    const char *threads[] = {"quantize", "-t", "x", f32, out, "Q4_0", NULL};
    assert_int_equal(fx_test_run_cli(threads, NULL, NULL, NULL), 2);
    /* Not a GGUF file. */
    const char *junk = fx_test_tmpfile("junk.gguf");
    fx_test_write_file(junk, "not a model", 11);
    const char *bad_file[] = {"quantize", junk, out, "Q4_0", NULL};
    char *se;
    assert_int_equal(fx_test_run_cli(bad_file, NULL, NULL, &se), 1);
    assert_non_null(strstr(se, "junk.gguf"));
    free(se);
    FILE *f = fopen(out, "rb");
    assert_null(f); /* none of the failures left an output */
}

/* A write that fails halfway (here: the file size limit) leaves neither a partial output nor a
 * temporary file, and an existing output stays as it was. */
FX_TEST(quantize_failed_write_leaves_no_file) {
    char in[4096];
    snprintf(in, sizeof in, "%s", fx_test_fixture("models/llama-tiny.F32.gguf"));
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", fx_test_tmpfile("failed-write"));
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    assert_int_equal(system(cmd), 0);
    char out[4200];
    snprintf(out, sizeof out, "%s/out.gguf", dir);
    fx_test_write_file(out, "old", 3);

    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    struct rlimit small = {64 * 1024, old.rlim_max};
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    struct fx_quantize_params p = fx_quantize_default_params();
    p.type = "Q8_0";
    struct fx_error err;
    fx_status st = fx_model_quantize(in, out, &p, &err);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);

    assert_int_equal(st, FX_ERR_IO);
    assert_non_null(strstr(err.msg, "out.gguf"));
    size_t n;
    char *kept = fx_test_read_file(out, &n);
    assert_int_equal(n, 3);
    assert_memory_equal(kept, "old", 3);
    free(kept);
    assert_int_equal(count_entries(dir), 1);
}
