/* Random-weight GGUF models with the tensor names, shapes and llama.cpp metadata of real models
 * (for tests, benchmarks and the README), generated from a seed: the same shape, type and seed
 * give the same file, byte for byte, whatever the number of threads.
 *
 * A shape is a row of a table (synth.c); its tensors follow from the architecture's layout, and
 * each tensor's type from the requested llama.cpp file type through the same per-tensor rules
 * `ferrox quantize` applies (model/quant.h): `--type Q4_K_M` gives the Q4_K/Q6_K mix llama.cpp
 * gives a real model of that shape. Rows are generated as f32 and encoded as they are written,
 * in parallel and in bounded memory. */
#ifndef FX_MODEL_SYNTH_H
#define FX_MODEL_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "ferrox.h"

/* What a tensor is, which decides how its values are drawn. Weights are approximately normal
 * (a sum of four uniforms: mean and variance exact, tails cut at 3.5 sigma). */
enum fx_synth_role {
    FX_SYNTH_EMBED,      /* token embedding: sigma 1/sqrt(n_embd) */
    FX_SYNTH_PROJ_IN,    /* q, k, v, ffn gate/up (also experts'), router, output: 1/sqrt(fan_in) */
    FX_SYNTH_PROJ_OUT,   /* attention output, ffn down (also experts'): 0.5/sqrt(fan_in) */
    FX_SYNTH_NORM,       /* RMS norm weights: 1 + N(0, 0.02) */
    FX_SYNTH_BIAS,       /* biases: sigma 0.02 */
    FX_SYNTH_SINK,       /* gpt-oss attention sinks: sigma 1 */
    FX_SYNTH_DECAY,      /* qwen35 ssm_a, a negative decay rate: -1 + N(0, 0.25) */
    FX_SYNTH_ROPE_FREQS, /* llama 3 rope scaling factors, computed, not drawn */
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
    uint32_t file_type; /* general.file_type (a llama.cpp llama_ftype id) */
    bool pure;
    uint64_t seed;
    int64_t n_tensors;
    struct fx_synth_tensor *tensors; /* [n_tensors] in file order */
};

/* The shape names, NULL-terminated: "tiny", "tiny-moe", "tiny-qwen35", "tiny-qwen35moe",
 * "smollm2-135m", "qwen3-0.6b", "llama-3.2-1b", "gpt-oss-20b", "qwen35-0.8b",
 * "qwen35moe-12l-32e". */
const char *const *fx_synth_shape_names(void);

/* Plans a model: its tensor list and every tensor's type, without generating anything.
 * file_type is a llama.cpp file type id that ferrox can write (fx_file_type_base); `pure` gives
 * every weight its base type, as llama-quantize --pure. FX_ERR_INVALID_ARG for an unknown shape
 * or file type. */
fx_status fx_synth_plan(const char *shape, uint32_t file_type, bool pure, uint64_t seed,
                        struct fx_synth_model **out, struct fx_error *err);
void fx_synth_model_free(struct fx_synth_model *m);

/* Elements of all tensors. */
int64_t fx_synth_n_params(const struct fx_synth_model *m);
/* Bytes of all tensor data. */
uint64_t fx_synth_n_bytes(const struct fx_synth_model *m);

struct fx_synth_write_params {
    int n_threads; /* workers; 0: one per CPU */
    /* Called as tensors are written, with the elements written so far and the total. */
    void (*progress)(void *user, uint64_t done, uint64_t total);
    void *progress_user;
};

/* Writes the model (metadata, vocabulary, tensors generated in bounded chunks) to path, through
 * a temporary file renamed into place. `params` may be NULL (all CPUs, no progress). */
fx_status fx_synth_write(const struct fx_synth_model *m, const char *path,
                         const struct fx_synth_write_params *params, struct fx_error *err);

#endif
