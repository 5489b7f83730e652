/* Random-weight GGUF models with the tensor names, shapes and llama.cpp metadata of real models
 * (for tests, benchmarks and the README), generated from a seed: the same shape, type and seed
 * give the same file, byte for byte.
 *
 * A shape is a row of a table (synth.c); its tensors follow from the architecture's layout, and
 * each tensor's type from its role and the requested weight type, so that new shapes (MoE) and
 * new weight types (quantized, once the kernels can encode them) are added in one place each. */
#ifndef FX_MODEL_SYNTH_H
#define FX_MODEL_SYNTH_H

#include <stdint.h>

#include "ferrox.h"

/* What a tensor is, which decides its type and how its values are drawn. */
enum fx_synth_role {
    FX_SYNTH_EMBED,     /* token embedding: N(0, 1/sqrt(n_embd)) */
    FX_SYNTH_PROJ_IN,   /* q, k, v, ffn gate/up, output: N(0, 1/sqrt(fan_in)) */
    FX_SYNTH_PROJ_OUT,  /* attention output, ffn down: N(0, 0.5/sqrt(fan_in)) */
    FX_SYNTH_NORM,      /* RMS norm weights: 1 + N(0, 0.02) */
    FX_SYNTH_ROPE_FREQS /* llama 3 rope scaling factors, computed, not drawn */
};

struct fx_synth_tensor {
    char name[FX_GGUF_MAX_NAME_LEN + 1];
    enum fx_synth_role role;
    enum fx_type type;
    uint32_t n_dims;
    int64_t ne[FX_GGUF_MAX_DIMS];
};

struct fx_synth_model {
    const struct fx_synth_shape *shape;
    enum fx_type weight_type;
    uint64_t seed;
    int64_t n_tensors;
    struct fx_synth_tensor *tensors; /* [n_tensors] in file order */
};

/* The shape names, NULL-terminated: "tiny", "smollm2-135m", "qwen3-0.6b", "llama-3.2-1b". */
const char *const *fx_synth_shape_names(void);

/* Plans a model: its tensor list, without generating anything. weight_type is the type of the
 * 2-D weights (F32 or F16; norms stay F32). FX_ERR_INVALID_ARG for an unknown shape or a type
 * that cannot be generated. */
fx_status fx_synth_plan(const char *shape, enum fx_type weight_type, uint64_t seed,
                        struct fx_synth_model **out, struct fx_error *err);
void fx_synth_model_free(struct fx_synth_model *m);

/* Elements of all tensors. */
int64_t fx_synth_n_params(const struct fx_synth_model *m);

/* Writes the model (metadata, vocabulary, tensors generated in bounded chunks) to path. */
fx_status fx_synth_write(const struct fx_synth_model *m, const char *path, struct fx_error *err);

#endif
