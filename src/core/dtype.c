/* Size traits of every ggml tensor type id, as GGUF files use them. The block structs that give
 * these sizes live in kernels/types.h, which checks them against this table at compile time. */
#include "ferrox.h"

#include <strings.h>
#include <string.h>

#include "core/checked.h"

struct type_traits {
    const char *name;
    int64_t block_elems;
    int64_t block_bytes;
};

static const struct type_traits traits[FX_TYPE_COUNT] = {
    [FX_TYPE_F32] = {"F32", 1, 4},
    [FX_TYPE_F16] = {"F16", 1, 2},
    [FX_TYPE_Q4_0] = {"Q4_0", 32, 18},
    [FX_TYPE_Q4_1] = {"Q4_1", 32, 20},
    [FX_TYPE_Q5_0] = {"Q5_0", 32, 22},
    [FX_TYPE_Q5_1] = {"Q5_1", 32, 24},
    [FX_TYPE_Q8_0] = {"Q8_0", 32, 34},
    [FX_TYPE_Q8_1] = {"Q8_1", 32, 36},
    [FX_TYPE_Q2_K] = {"Q2_K", 256, 84},
    [FX_TYPE_Q3_K] = {"Q3_K", 256, 110},
    [FX_TYPE_Q4_K] = {"Q4_K", 256, 144},
    [FX_TYPE_Q5_K] = {"Q5_K", 256, 176},
    [FX_TYPE_Q6_K] = {"Q6_K", 256, 210},
    [FX_TYPE_Q8_K] = {"Q8_K", 256, 292},
    [FX_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66},
    [FX_TYPE_IQ2_XS] = {"IQ2_XS", 256, 74},
    [FX_TYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98},
    [FX_TYPE_IQ1_S] = {"IQ1_S", 256, 50},
    [FX_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18},
    [FX_TYPE_IQ3_S] = {"IQ3_S", 256, 110},
    [FX_TYPE_IQ2_S] = {"IQ2_S", 256, 82},
    [FX_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136},
    [FX_TYPE_I8] = {"I8", 1, 1},
    [FX_TYPE_I16] = {"I16", 1, 2},
    [FX_TYPE_I32] = {"I32", 1, 4},
    [FX_TYPE_I64] = {"I64", 1, 8},
    [FX_TYPE_F64] = {"F64", 1, 8},
    [FX_TYPE_IQ1_M] = {"IQ1_M", 256, 56},
    [FX_TYPE_BF16] = {"BF16", 1, 2},
    [FX_TYPE_TQ1_0] = {"TQ1_0", 256, 54},
    [FX_TYPE_TQ2_0] = {"TQ2_0", 256, 66},
    [FX_TYPE_MXFP4] = {"MXFP4", 32, 17},
};

bool fx_type_is_valid(uint32_t type) {
    return type < FX_TYPE_COUNT && traits[type].name != NULL;
}

const char *fx_type_name(enum fx_type type) {
    return fx_type_is_valid((uint32_t)type) ? traits[type].name : "?";
}

bool fx_type_from_name(const char *name, enum fx_type *out) {
    for (uint32_t t = 0; t < FX_TYPE_COUNT; t++) {
        if (traits[t].name && strcasecmp(traits[t].name, name) == 0) {
            *out = (enum fx_type)t;
            return true;
        }
    }
    return false;
}

int64_t fx_type_block_elems(enum fx_type type) {
    return fx_type_is_valid((uint32_t)type) ? traits[type].block_elems : 0;
}

int64_t fx_type_block_bytes(enum fx_type type) {
    return fx_type_is_valid((uint32_t)type) ? traits[type].block_bytes : 0;
}

bool fx_type_row_bytes(enum fx_type type, int64_t n, uint64_t *out) {
    if (!fx_type_is_valid((uint32_t)type) || n < 0)
        return false;
    const struct type_traits *t = &traits[type];
    if (n % t->block_elems != 0)
        return false;
    return !fx_mul_overflow_u64((uint64_t)(n / t->block_elems), (uint64_t)t->block_bytes, out);
}
