/* general.file_type: the llama.cpp name of a file's overall weight type ("Q4_K - Medium" files
 * mix Q4_K and Q6_K tensors), as bench tables and quantize use them. */
#ifndef FX_MODEL_FTYPE_H
#define FX_MODEL_FTYPE_H

#include <stdbool.h>
#include <stdint.h>

/* "Q4_K_M", or NULL for an unknown id. */
const char *fx_file_type_name(uint32_t id);
/* The id of a name such as "q4_k_m"; false when unknown. */
bool fx_file_type_from_name(const char *name, uint32_t *id);

#endif
