/* The decode step of a dense llama-family model on the device (make CUDA=1): every weight
 * uploaded once, the KV cache on the device, one token's whole forward pass captured as one
 * CUDA graph at the first step and replayed at every later one (the token and position are read
 * from device memory at each launch, so one graph serves every position).
 *
 * It computes what the CPU decoder computes (decoder/attn_block.c, ffn_block.c), the same steps
 * in the same order, with the device kernels of cuda.h; what differs is that activations stay
 * f32 (the CPU tables quantize them for quantized weights).
 *
 * A context created with n_gpu_layers > 0 owns one (decoder/context.c) and its one-token calls
 * over the contiguous cache run on it (decoder/entry.c); every other call runs on the CPU. The
 * CPU cache and the device cache hold the same rows: rows the device wrote are copied to the
 * host before a CPU call reads the cache (kv_to_host), rows a CPU call wrote are copied to the
 * device after it (kv_from_host).
 *
 * Without FX_HAVE_CUDA the functions below are stubs: creation says the build has no CUDA
 * backend, and the rest are never reached (a context then never has a decoder). */
#ifndef FX_CUDA_DECODE_H
#define FX_CUDA_DECODE_H

#include <stdbool.h>

#include "core/error.h"
#include "decoder/decoder.h"
#include "ferrox.h"

struct fx_cuda_decoder;

#ifdef FX_HAVE_CUDA

/* Uploads the last n_gpu_layers layers of ctx's model (1 .. n_layer) and the output, and makes
 * a device KV cache of those layers, ctx's n_ctx positions in ctx's KV types; the first layers
 * stay on the CPU (llama.cpp's -ngl).
 * Models the device step does not compute yet are refused with FX_ERR_UNSUPPORTED naming what:
 * mixtures of experts, sliding-window layers, attention sinks, post-norms, a final softcap, an
 * embedding scale, GELU FFNs, a V head size unlike K's, q8_0 caches or keys and values of
 * different types, weight formats without device kernels; so is a machine without a device.
 * ctx must outlive the decoder. */
fx_status fx_cuda_decoder_create(const struct fx_context *ctx, int32_t n_gpu_layers,
                                 struct fx_cuda_decoder **out, struct fx_error *err);
void fx_cuda_decoder_free(struct fx_cuda_decoder *d);

/* One token at position pos: logits [n_vocab]. pos may be at most the number of positions the
 * device cache holds (a smaller one rewinds it, as the CPU context allows). x: NULL when the
 * device has every layer, else the token's residual stream [n_embd] after the CPU's layers. */
fx_status fx_cuda_decoder_step(struct fx_cuda_decoder *d, fx_token token, int32_t pos,
                               const float *x, float *logits, struct fx_error *err);
/* The layers the CPU runs before the device's (0 when the device has them all). */
int32_t fx_cuda_decoder_cpu_layers(const struct fx_cuda_decoder *d);

/* Whether a prepared call is one the device step runs: one token over the context's contiguous
 * cache, logits wanted, no hidden states. */
bool fx_cuda_decoder_takes(const struct fx_fwd *f);
/* Runs such a call's device layers and output and commits it (fx_fwd_finish); when the CPU has
 * layers, it ran them first (fx_fwd.cpu_layers) and left the residual row in ctx->s.x. */
fx_status fx_cuda_decoder_forward(struct fx_cuda_decoder *d, const struct fx_fwd *f,
                                  struct fx_error *err);
/* Copies the rows only the device holds (of its layers) into the host cache kv. */
fx_status fx_cuda_decoder_kv_to_host(struct fx_cuda_decoder *d, struct fx_kv_contig *kv,
                                     struct fx_error *err);
/* Copies host rows pos0 .. pos0 + n - 1 of the device's layers of kv to the device, which then
 * holds kv->n_filled. */
fx_status fx_cuda_decoder_kv_from_host(struct fx_cuda_decoder *d, const struct fx_kv_contig *kv,
                                       int32_t pos0, int32_t n, struct fx_error *err);
/* The cache keeps its first n positions (fx_context_kv_truncate). */
void fx_cuda_decoder_truncate(struct fx_cuda_decoder *d, int32_t n);

#else

static inline fx_status fx_cuda_decoder_create(const struct fx_context *ctx, int32_t n_gpu_layers,
                                               struct fx_cuda_decoder **out, struct fx_error *err) {
    (void)ctx, (void)n_gpu_layers;
    *out = NULL;
    return fx_error_set(err, FX_ERR_UNSUPPORTED, FX_NO_OFFSET,
                        "GPU layers: this build has no CUDA backend (build with make CUDA=1)");
}
static inline void fx_cuda_decoder_free(struct fx_cuda_decoder *d) {
    (void)d;
}
static inline int32_t fx_cuda_decoder_cpu_layers(const struct fx_cuda_decoder *d) {
    (void)d;
    return 0;
}
static inline bool fx_cuda_decoder_takes(const struct fx_fwd *f) {
    (void)f;
    return false;
}
static inline fx_status fx_cuda_decoder_forward(struct fx_cuda_decoder *d, const struct fx_fwd *f,
                                                struct fx_error *err) {
    (void)d, (void)f, (void)err;
    return FX_ERR_UNSUPPORTED;
}
static inline fx_status fx_cuda_decoder_kv_to_host(struct fx_cuda_decoder *d,
                                                   struct fx_kv_contig *kv, struct fx_error *err) {
    (void)d, (void)kv, (void)err;
    return FX_OK;
}
static inline fx_status fx_cuda_decoder_kv_from_host(struct fx_cuda_decoder *d,
                                                     const struct fx_kv_contig *kv, int32_t pos0,
                                                     int32_t n, struct fx_error *err) {
    (void)d, (void)kv, (void)pos0, (void)n, (void)err;
    return FX_OK;
}
static inline void fx_cuda_decoder_truncate(struct fx_cuda_decoder *d, int32_t n) {
    (void)d, (void)n;
}

#endif

#endif
