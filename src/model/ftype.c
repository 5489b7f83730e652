#include "model/ftype.h"

#include <stddef.h>
#include <stdio.h>
#include <strings.h>

/* llama.cpp's llama_ftype values (ids that it retired are absent), each with the tensor type its
 * weights mostly get; FX_TYPE_COUNT where ferrox has no encoder for it. An id may appear again
 * under an alias after its canonical name. */
static const struct {
    uint32_t id;
    const char *name;
    enum fx_type base;
} names[] = {
    {0, "F32", FX_TYPE_F32},
    {1, "F16", FX_TYPE_F16},
    {32, "BF16", FX_TYPE_BF16},
    {7, "Q8_0", FX_TYPE_Q8_0},
    {2, "Q4_0", FX_TYPE_Q4_0},
    {3, "Q4_1", FX_TYPE_Q4_1},
    {8, "Q5_0", FX_TYPE_Q5_0},
    {9, "Q5_1", FX_TYPE_Q5_1},
    {10, "Q2_K", FX_TYPE_Q2_K},
    {21, "Q2_K_S", FX_TYPE_COUNT},
    {11, "Q3_K_S", FX_TYPE_Q3_K},
    {12, "Q3_K_M", FX_TYPE_Q3_K},
    {13, "Q3_K_L", FX_TYPE_Q3_K},
    {14, "Q4_K_S", FX_TYPE_Q4_K},
    {15, "Q4_K_M", FX_TYPE_Q4_K},
    {16, "Q5_K_S", FX_TYPE_Q5_K},
    {17, "Q5_K_M", FX_TYPE_Q5_K},
    {18, "Q6_K", FX_TYPE_Q6_K},
    {25, "IQ4_NL", FX_TYPE_IQ4_NL},
    {30, "IQ4_XS", FX_TYPE_IQ4_XS},
    {38, "MXFP4_MOE", FX_TYPE_MXFP4},
    /* llama-quantize's aliases */
    {12, "Q3_K", FX_TYPE_Q3_K},
    {15, "Q4_K", FX_TYPE_Q4_K},
    {17, "Q5_K", FX_TYPE_Q5_K},
};
#define N_NAMES (sizeof names / sizeof names[0])

const char *fx_file_type_name(uint32_t id) {
    for (size_t i = 0; i < N_NAMES; i++)
        if (names[i].id == id)
            return names[i].name;
    return NULL;
}

bool fx_file_type_from_name(const char *name, uint32_t *id) {
    for (size_t i = 0; i < N_NAMES; i++)
        if (strcasecmp(names[i].name, name) == 0) {
            *id = names[i].id;
            return true;
        }
    return false;
}

enum fx_type fx_file_type_base(uint32_t id) {
    for (size_t i = 0; i < N_NAMES; i++)
        if (names[i].id == id)
            return names[i].base;
    return FX_TYPE_COUNT;
}

void fx_file_type_list(char *buf, size_t size) {
    size_t off = 0;
    if (size)
        buf[0] = '\0';
    for (size_t i = 0; i < N_NAMES && off < size; i++) {
        if (names[i].base == FX_TYPE_COUNT)
            continue;
        const char *canonical = fx_file_type_name(names[i].id);
        int n = canonical == names[i].name
                    ? snprintf(buf + off, size - off, "%s%s", off ? " " : "", names[i].name)
                    : snprintf(buf + off, size - off, "%s%s=%s", off ? " " : "", names[i].name,
                               canonical);
        if (n < 0)
            break;
        off += (size_t)n;
    }
}
