/* The decode step of a dense llama-family model on the device (make CUDA=1): every weight
 * uploaded once, the KV cache on the device, one token's whole forward pass captured as one
 * CUDA graph at the first step and replayed at every later one (the token and position are read
 * from device memory at each launch, so one graph serves every position).
 *
 * It computes what the CPU decoder computes (decoder/attn_block.c, ffn_block.c), the same steps
 * in the same order, with the device kernels of cuda.h; what differs is that activations stay
 * f32 (the CPU tables quantize them for quantized weights). Not yet wired into the public entry
 * points: a caller (a test, ferrox-cuda-bench) drives it next to a CPU context whose model,
 * context length, KV types and rope table it takes. */
#ifndef FX_CUDA_DECODE_H
#define FX_CUDA_DECODE_H

#include "decoder/decoder.h"
#include "ferrox.h"

struct fx_cuda_decoder;

/* Uploads ctx's model and makes a device KV cache of ctx's n_ctx positions in ctx's KV types.
 * Models the device step does not compute yet are refused with FX_ERR_UNSUPPORTED naming what:
 * mixtures of experts, sliding-window layers, attention sinks, post-norms, a final softcap, an
 * embedding scale, GELU FFNs, a V head size unlike K's, q8_0 caches or keys and values of
 * different types, weight formats without
 * device kernels. ctx must outlive the decoder (its rope table is read at creation only). */
fx_status fx_cuda_decoder_create(const struct fx_context *ctx, struct fx_cuda_decoder **out,
                                 struct fx_error *err);
/* One token at position pos: logits [n_vocab]. pos may be at most one past the last position
 * stepped (a smaller one rewinds the device cache to it, as the CPU context allows). */
fx_status fx_cuda_decoder_step(struct fx_cuda_decoder *d, fx_token token, int32_t pos,
                               float *logits, struct fx_error *err);
void fx_cuda_decoder_free(struct fx_cuda_decoder *d);

#endif
