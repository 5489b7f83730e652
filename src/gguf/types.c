/* GGUF metadata value types: names and fixed sizes. */
#include "gguf/gguf.h"

static const struct {
    const char *name;
    uint64_t size; /* 0: not a fixed-size scalar */
} value_types[FX_GGUF_TYPE_COUNT] = {
    [FX_GGUF_UINT8] = {"uint8", 1},     [FX_GGUF_INT8] = {"int8", 1},
    [FX_GGUF_UINT16] = {"uint16", 2},   [FX_GGUF_INT16] = {"int16", 2},
    [FX_GGUF_UINT32] = {"uint32", 4},   [FX_GGUF_INT32] = {"int32", 4},
    [FX_GGUF_FLOAT32] = {"float32", 4}, [FX_GGUF_BOOL] = {"bool", 1},
    [FX_GGUF_STRING] = {"string", 0},   [FX_GGUF_ARRAY] = {"array", 0},
    [FX_GGUF_UINT64] = {"uint64", 8},   [FX_GGUF_INT64] = {"int64", 8},
    [FX_GGUF_FLOAT64] = {"float64", 8},
};

const char *fx_gguf_type_name(enum fx_gguf_type type) {
    return (unsigned)type < FX_GGUF_TYPE_COUNT ? value_types[type].name : "?";
}

uint64_t fx_gguf_value_size(uint32_t type) {
    return type < FX_GGUF_TYPE_COUNT ? value_types[type].size : 0;
}
