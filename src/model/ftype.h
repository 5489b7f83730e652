/* general.file_type: the llama.cpp name of a file's overall weight type ("Q4_K - Medium" files
 * mix Q4_K and Q6_K tensors), as bench tables and quantize use them. */
#ifndef FX_MODEL_FTYPE_H
#define FX_MODEL_FTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferrox.h"

/* "Q4_K_M", or NULL for an unknown id. */
const char *fx_file_type_name(uint32_t id);
/* The id of a name such as "q4_k_m" (any case), including llama-quantize's aliases Q3_K, Q4_K
 * and Q5_K for the _M mixes; false when unknown. */
bool fx_file_type_from_name(const char *name, uint32_t *id);
/* The tensor type most weights of a file type get (Q4_K for Q4_K_M, MXFP4 for MXFP4_MOE), or
 * FX_TYPE_COUNT when ferrox cannot write that file type (the i-quants but IQ4_NL and IQ4_XS,
 * Q2_K_S, which need an importance matrix). */
enum fx_type fx_file_type_base(uint32_t id);
/* The names fx_file_type_base can write, space-separated, aliases marked ("Q4_K=Q4_K_M"), into
 * buf (truncated to size), for usage and error messages. */
void fx_file_type_list(char *buf, size_t size);

#endif
