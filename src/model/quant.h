/* Which type each tensor of a model gets when it is written as a given llama.cpp file type
 * (general.file_type): llama-quantize's choices, restated here so that `ferrox quantize` and
 * `ferrox synth` write the same mixes llama.cpp writes.
 *
 * A file type names a base tensor type (Q4_K for Q4_K_M). Only 2-D and 3-D weights are
 * converted; norms, biases and other 1-D tensors, MoE routers and a few small special tensors
 * keep their type. With `pure`, every converted tensor gets the base type; otherwise the
 * quantized file types apply llama.cpp's per-tensor mix (output and tied embeddings in Q6_K,
 * more bits for attn_v and ffn_down in some layers, ...; quant.c states each rule). A tensor
 * whose rows are not a whole number of the chosen type's blocks falls back to a type whose
 * blocks fit (Q4_K -> Q5_0, ...), as llama.cpp does, also under `pure`. */
#ifndef FX_MODEL_QUANT_H
#define FX_MODEL_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "ferrox.h"

/* What the rules read about the model: its architecture and llama.cpp hyper-parameters. */
struct fx_quant_model {
    const char *arch; /* general.architecture */
    int32_t n_layer;  /* ARCH.block_count */
    int32_t n_head;   /* ARCH.attention.head_count; 0 when unknown */
    int32_t n_head_kv;
    int32_t n_expert; /* ARCH.expert_count; 0 for a dense model */
};

/* One tensor as the rules see it. */
struct fx_quant_tensor {
    const char *name;
    enum fx_type type; /* its type now (for tensors that are not converted) */
    int64_t ne[FX_GGUF_MAX_DIMS];
};

/* Reads the fields of struct fx_quant_model from a file's metadata. Errors name the missing or
 * malformed key. */
fx_status fx_quant_model_from_gguf(const struct fx_gguf *g, struct fx_quant_model *out,
                                   struct fx_error *err);

/* llama.cpp's tensor order, which llama-quantize writes: tensors outside the blocks first, then
 * block 0, 1, 2, ... (by number), each group by name (strcmp). Fills order[0..n) with the indices
 * of tensors in that order (ties keep the given order). */
fx_status fx_quant_order(const struct fx_quant_tensor *tensors, int64_t n, int64_t *order,
                         struct fx_error *err);

/* The type of every tensor (types[i] for tensors[i]) in a file of type `ftype` (a writable id,
 * see fx_file_type_base). Fails with FX_ERR_UNSUPPORTED naming the tensor when no type fits its
 * rows (e.g. Q8_0 for rows of 100), or FX_ERR_FORMAT for a block tensor whose layer is outside
 * the model's. */
fx_status fx_quant_choose_types(const struct fx_quant_model *m, uint32_t ftype, bool pure,
                                const struct fx_quant_tensor *tensors, int64_t n,
                                enum fx_type *types, struct fx_error *err);

#endif
