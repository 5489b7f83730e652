/* Saved sequence state (kv/state.c): the K and V rows of a sequence's first n positions with
 * their token ids, and for hybrid models (qwen35) the recurrent state after position n - 1, in a
 * file that names the model it belongs to, so that a later run with the same prompt prefix loads
 * them instead of computing them (llama.cpp's --prompt-cache). The public functions are
 * fx_context_state_save / _load and fx_kv_seq_save / _load (ferrox.h); a state saved from a
 * context loads into a pool and the other way round.
 *
 * The file, little-endian, every offset fixed by the header:
 *
 *   offset  bytes           field
 *        0  8               magic "FXKVSTAT"
 *        8  4               version: 1 without a recurrent state, 3 with one (2: an older
 *                           build's, whose delta-rule states were stored transposed; refused)
 *       12  32              architecture name, NUL-padded (at most 31 bytes)
 *       44  4 x 7           n_layer, n_embd, n_head, n_head_kv, head_dim, head_dim_v, n_vocab
 *                           (n_layer: the layers that keep K and V rows, the attention layers
 *                           of a hybrid model; every layer of any other)
 *       72  8               the model's fingerprint (fx_model_fingerprint)
 *       80  4 + 4           K type, V type (ggml type ids: F32, F16 or Q8_0)
 *       88  4               n, the positions saved
 *       92  4               r: floats of the recurrent state (version 3, > 0); 0 in version 1
 *       96  4 n             the token ids of positions 0..n-1 (int32)
 *           ...             K rows: [n_layer][n_head_kv][n][K row bytes], as the cache stores them
 *           ...             V rows: [n_layer][n_head_kv][n][V row bytes]
 *           4 r             version 3: the recurrent state as kv/recurrent.h holds it, f32: every
 *                           layer's conv window, then every layer's delta-rule states
 *      end  8               CRC-64/XZ of every byte before it
 *
 * Files of models without a recurrent state are version 1, byte for byte as before the recurrent
 * state existed. A recurrent state is that of the whole saved sequence: a load that would keep
 * fewer than its n positions (a prompt that diverges, or ends, earlier) loads nothing of it.
 *
 * The file's size follows from its header; a reader checks that equality (overflow-checked), the
 * checksum, then the identity, before it changes anything. */
#ifndef FX_KV_STATE_H
#define FX_KV_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "ferrox.h"

#define FX_KV_STATE_MAGIC   "FXKVSTAT"
#define FX_KV_STATE_VERSION 3u  /* the newest this build writes and reads */
#define FX_KV_STATE_HEADER  96u /* bytes before the token ids */

/* CRC-64/XZ (ECMA-182 polynomial, reflected, initial value and final xor all ones): crc is the
 * value returned for the bytes before these (0 for none), so that data can be fed in pieces.
 * fx_kv_state_crc64(0, "123456789", 9) == 0x995dc9bbdf1939fa. */
uint64_t fx_kv_state_crc64(uint64_t crc, const void *data, size_t n);

struct fx_kv_contig;
struct fx_model;
struct fx_rstate;

/* The contiguous cache's side of fx_context_state_save / _load (ferrox.h, which see): kv holds
 * model m's rows and rs its recurrent state (n_layer 0 for models without). */
fx_status fx_kv_contig_save(const struct fx_kv_contig *kv, const struct fx_rstate *rs,
                            const struct fx_model *m, const fx_token *tokens, int32_t n,
                            const char *path, struct fx_error *err);
fx_status fx_kv_contig_load(struct fx_kv_contig *kv, struct fx_rstate *rs, const struct fx_model *m,
                            const char *path, const fx_token *prompt, int32_t n_prompt,
                            int32_t *n_loaded, struct fx_error *err);

#endif
